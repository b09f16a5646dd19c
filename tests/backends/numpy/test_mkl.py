"""oneMKL's GEMM (the mkl extra): every operand layout the backend passes, against float64,
into NaN-poisoned outputs; the layouts it must leave to numpy; the setting and its errors;
the device key. The whole numpy correctness suite also runs with ``CONVSEL_GEMM=mkl``
(scripts/test.sh's fourth part)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from convsel.backends.numpy import device_identity, gemm, mkl
from convsel.errors import InvalidProblemError

# float32 products of length <= 64 against float64: well inside k * 2**-24 * |a| |b|
TOLERANCE = 64 * 2.0**-24 * 16


@pytest.fixture(autouse=True)
def _fresh_choice() -> Iterator[None]:
    """Each test decides the library anew (the choice is cached per process)."""
    saved = gemm._chosen
    gemm._library_for.cache_clear()
    yield
    gemm._chosen = saved
    gemm._library_for.cache_clear()
    mkl.library.cache_clear()


needs_mkl = pytest.mark.skipif(not mkl.available().ok,
                               reason=f"oneMKL not here: {mkl.available().reason}")


def _poisoned(shape: tuple[int, ...], order: str = "C") -> np.ndarray:
    return np.full(shape, np.nan, np.float32, order=order)


def _check(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    assert mkl.sgemm(a, b, out), "oneMKL refused a layout it should take"
    reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, reference, rtol=0, atol=TOLERANCE)


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


@needs_mkl
def test_every_layout_the_backend_passes() -> None:
    rng = np.random.default_rng(1)
    a, b = _rand(rng, 37, 29), _rand(rng, 29, 23)
    _check(a, b, _poisoned((37, 23)))                           # row-major
    _check(np.asfortranarray(a), b, _poisoned((37, 23)))        # im2col's planar cols_t.T
    _check(a, np.asfortranarray(b), _poisoned((37, 23)))        # b transposed in memory
    _check(a, b, _poisoned((37, 23), order="F"))                # output column-major
    _check(a[:, :1], b[:1], _poisoned((37, 23)))                # depth 1
    _check(a[:1], b, _poisoned((1, 23)))                        # one row


@needs_mkl
def test_column_block_leaves_its_neighbours_alone() -> None:
    """gemm_1x1's and im2col's column split write out[:, first:last] of a wider output."""
    rng = np.random.default_rng(2)
    a, w = _rand(rng, 40, 16), _rand(rng, 16, 50)
    out = _poisoned((40, 50))
    _check(a, w[:, 10:30], out[:, 10:30])
    assert np.isnan(out[:, :10]).all() and np.isnan(out[:, 30:]).all()


@needs_mkl
def test_stacks_of_products() -> None:
    """Winograd's per-position products, both orientations, and one matrix by a stack."""
    rng = np.random.default_rng(3)
    v, u = _rand(rng, 6, 31, 17), _rand(rng, 6, 17, 9)
    _check(v, u, _poisoned((6, 31, 9)))                                    # (T, P, C)@(T, C, K)
    _check(_rand(rng, 6, 9, 17), v.transpose(0, 2, 1), _poisoned((6, 9, 31)))  # u @ v^T
    _check(_rand(rng, 31, 17), u, _poisoned((6, 31, 9)))                    # matrix @ stack
    _check(v, _rand(rng, 17, 9), _poisoned((6, 31, 9)))                     # stack @ matrix


@needs_mkl
@pytest.mark.parametrize("case", ["float64", "overlap", "reversed", "empty", "mismatch"])
def test_layouts_left_to_numpy(case: str) -> None:
    """sgemm says no (and writes nothing) where CBLAS cannot take the operands as laid out;
    gemm.matmul then gives numpy's answer."""
    rng = np.random.default_rng(4)
    a, b, out = _rand(rng, 12, 8), _rand(rng, 8, 12), _poisoned((12, 12))
    if case == "float64":
        a, b, out = a.astype(np.float64), b.astype(np.float64), out.astype(np.float64)
    elif case == "overlap":
        out = a[:, :8].copy()
        a, b = out, _rand(rng, 8, 8)
    elif case == "reversed":
        a = a[::-1]
    elif case == "empty":
        a, b, out = a[:, :0], b[:0], _poisoned((12, 12))
    else:
        out = _poisoned((3, 12, 12))
        a, b = _rand(rng, 2, 12, 8), _rand(rng, 3, 8, 12)
    before = out.copy()
    assert not mkl.sgemm(a, b, out)
    np.testing.assert_array_equal(out, before)
    if case != "mismatch":
        expected = np.matmul(a, b)   # before: "overlap" multiplies into its own operand
        gemm.use_gemm("mkl")
        gemm.matmul(a, b, out)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_an_unknown_library_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidProblemError, match="CONVSEL_GEMM.*auto, numpy, mkl"):
        gemm.use_gemm("openblas")
    monkeypatch.setenv("CONVSEL_GEMM", "fastest")
    gemm._chosen = None
    with pytest.raises(InvalidProblemError, match="CONVSEL_GEMM"):
        gemm.chosen()


@pytest.mark.parametrize("relative", [False, True])
def test_an_incomplete_mkl_is_refused_before_loading(tmp_path: Path, relative: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """MKL ends the process when a layer it loads is missing: a libmkl_rt without its
    layers is not loaded at all, and the backend multiplies with numpy's BLAS."""
    (tmp_path / "libmkl_rt.so.3").write_bytes(b"not a library")
    if relative:
        monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVSEL_MKL_RT", os.path.join("." if relative else str(tmp_path),
                                                      "libmkl_rt.so.3"))
    mkl.library.cache_clear()
    verdict = mkl.available()
    assert not verdict.ok and "libmkl_core" in verdict.reason
    gemm.use_gemm("mkl")
    assert gemm.library() == "numpy"
    assert "oneMKL asked for" in gemm.describe() and "libmkl_core" in gemm.describe()
    a = np.ones((4, 3), np.float32)
    out = _poisoned((4, 4))
    gemm.matmul(a, a.T, out)
    np.testing.assert_array_equal(out, np.full((4, 4), 3.0, np.float32))


def test_a_missing_mkl_says_how_to_get_it(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVSEL_MKL_RT", str(tmp_path / "nowhere" / "libmkl_rt.so.3"))
    mkl.library.cache_clear()
    assert not mkl.available().ok


def test_device_key_names_mkl_only_where_it_multiplies() -> None:
    """Timings stored before oneMKL existed keep their key: numpy's BLAS adds nothing."""
    gemm.use_gemm("numpy")
    assert "GEMM" not in device_identity()["driver"]
    if mkl.available().ok:
        gemm.use_gemm("mkl")
        assert "GEMM by oneMKL" in device_identity()["driver"]


def test_the_library_ci_asks_for_is_the_one_that_multiplies() -> None:
    """scripts/test.sh's fourth part sets CONVSEL_TEST_GEMM=mkl with CONVSEL_GEMM=mkl: if
    oneMKL could not load there, that part would silently test numpy's BLAS again."""
    wanted = os.environ.get("CONVSEL_TEST_GEMM")
    if wanted is None:
        pytest.skip("CONVSEL_TEST_GEMM not set (only scripts/test.sh's GEMM parts set it)")
    gemm._chosen = None
    assert gemm.library() == wanted, gemm.describe()


@needs_mkl
def test_packed_weights_for_every_left_operand_the_layers_pass() -> None:
    """Weights packed once (for the layer's row count) serve products of other row counts
    (im2col's last piece), a transposed left matrix (im2col's planar path) and a row block
    of a wider output; an output CBLAS cannot take goes to numpy with the plain weights."""
    rng = np.random.default_rng(5)
    w = _rand(rng, 45, 21)
    gemm.use_gemm("mkl")
    assert gemm.packed(w, gemm.PACKED_MAX_ROWS + 1) is w   # many rows: MKL's own packing
    b = gemm.packed(w, 100)
    assert isinstance(b, mkl.PackedB) and b.array is w
    for rows in (100, 37, 1):
        a = _rand(rng, rows, 45)
        out = _poisoned((rows, 21))
        assert mkl.sgemm_packed(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ w, rtol=0, atol=TOLERANCE)
    a_t = np.asfortranarray(_rand(rng, 30, 45))
    out = _poisoned((30, 21))
    assert mkl.sgemm_packed(a_t, b, out)
    np.testing.assert_allclose(out, a_t.astype(np.float64) @ w, rtol=0, atol=TOLERANCE)
    wide = _poisoned((30, 40))
    assert mkl.sgemm_packed(a_t, b, wide[:, 5:26])
    assert np.isnan(wide[:, :5]).all() and np.isnan(wide[:, 26:]).all()
    column_major = _poisoned((30, 21), order="F")
    assert not mkl.sgemm_packed(a_t, b, column_major)
    gemm.matmul(a_t, b, column_major)
    np.testing.assert_allclose(column_major, a_t.astype(np.float64) @ w, rtol=0,
                               atol=TOLERANCE)


def test_weights_stay_plain_where_numpy_multiplies() -> None:
    gemm.use_gemm("numpy")
    w = np.ones((3, 2), np.float32)
    assert gemm.packed(w, 10) is w
