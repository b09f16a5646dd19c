"""The pieces of the numpy backend's fused paths: activations, the on/off switch, the thread
count, the depthwise kernel's unrolled and any-size forms. (Whole convolutions on the fused
paths: test_fused_correctness.py and test_numpy_speed_paths.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from convsel.activation import KINDS, Activation
from convsel.backends.numpy import accel, device_identity, direct, threads
from convsel.errors import InvalidProblemError
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference

PARAMS = {"bounded_relu": (6.0, 0.0), "lu_bounded_relu": (4.0, -1.5), "leaky_relu": (0.1, 0.0),
          "linear": (0.5, -2.0), "tanh": (1.5, 0.7), "elu": (0.9, 0.0), "swish": (1.3, 0.0)}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_activation_matches_numpy_and_keeps_nan(kind: str):
    pytest.importorskip("numba")
    from convsel.backends.numpy.fused.activation import activate, code_of

    act = Activation(kind, *PARAMS.get(kind, (0.0, 0.0)))
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(301) * 8).astype(np.float32)
    x[[3, 50]] = np.nan
    x[[7, 8]] = [np.inf, -np.inf]
    row = x.copy()
    with np.errstate(all="ignore"):
        activate(row, *code_of(act))
        want = act.apply(x)
    assert np.array_equal(np.isnan(row), np.isnan(want)), kind
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(row), finite), kind
    assert np.allclose(row[finite], want[finite], rtol=2e-6, atol=1e-6), kind


def test_the_switch_decides_at_prepare_time(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("numba")
    p = ConvProblem(1, 9, 9, 4, 4, 3, 3, pad=1, groups=4)
    w = np.ones(p.weights_shape, np.float32)
    with accel.fused(False):
        plain = direct.prepare(p, w, None, {})
        assert not accel.enabled() and "pure numpy" in accel.describe()
    fused = direct.prepare(p, w, None, {})
    assert (plain.accelerated, plain.fused) == (False, None)
    assert fused.accelerated and fused.fused is not None
    assert "fused kernels: numba" in device_identity()["driver"]
    with accel.fused(False):
        assert "pure numpy" in device_identity()["driver"]
        x = np.random.default_rng(0).standard_normal(p.input_shape).astype(np.float32)
        assert np.allclose(fused.run(x), plain.run(x), atol=1e-5)   # each keeps its path


def test_without_numba_the_backend_says_so(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(accel, "available", lambda: accel.failed("no numba here"))
    assert not accel.enabled()
    assert accel.describe() == "pure numpy (numba not installed)"
    op = direct.prepare(ConvProblem(1, 5, 5, 3, 3, 3, 3, pad=1, groups=3),
                        np.ones((3, 3, 3, 1), np.float32), None, {})
    assert not op.accelerated and op.fused is None


def test_thread_count_is_set_and_restored():
    before = threads.thread_count()
    with threads.limited_threads(1):
        assert threads.thread_count() == 1
        assert "1 threads for fused kernels and FFT" in threads.describe_threads()
        blas = threads._blas_threads()
        assert blas in (None, 1)   # None: threadpoolctl not installed
    assert threads.thread_count() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_a_bad_thread_count_is_refused_naming_the_field(bad: object):
    with pytest.raises(InvalidProblemError, match="threads"):
        threads.set_threads(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", [(3, 3), (5, 5), (4, 3)])   # unrolled, unrolled, any size
def test_depthwise_sizes_both_forms(kernel: tuple[int, int]):
    pytest.importorskip("numba")
    from convsel.backends.numpy.fused import depthwise

    p = ConvProblem(2, 11, 10, 7, 7, *kernel, stride=(1, 2), pad=(1, 2, 2, 1), groups=7,
                    activation="relu")
    rng = np.random.default_rng(4)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    op = direct.prepare(p, w, b, {})
    assert op.fused is not None
    assert (op.fused.run is depthwise._any_size) == (kernel not in depthwise.UNROLLED)
    y = op.run(x)
    assert np.abs(y - conv2d_reference(p, x, w, b)).max() < 1e-4


@pytest.mark.parametrize("c", [16, 40, 127, 128, 136])
def test_depthwise_unit_stride_both_interior_loops(monkeypatch: pytest.MonkeyPatch, c: int):
    """Unit stride takes the flat loop below FLAT_BELOW channels (rows split into runs, the
    last one short) and the per-pixel loop from it on: both write every output once
    (NaN-filled output) and match the float64 reference."""
    pytest.importorskip("numba")
    from convsel.backends.numpy import common
    from convsel.backends.numpy.fused import depthwise

    monkeypatch.setattr(common, "OUTPUT_FILL", np.nan)
    p = ConvProblem(1, 9, 37, c, c, 3, 3, pad=1, groups=c, activation="relu")
    rng = np.random.default_rng(6)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    op = direct.prepare(p, w, b, {})
    assert op.fused is not None
    run = op.fused.w_rows.shape[1]
    if c < depthwise.FLAT_BELOW:   # runs of whole pixels, more than one run per row
        assert run == max(1, depthwise.FLAT_RUN // c) and run < p.out_w - 2
    else:
        assert run == 1
    y = op.run(x)
    assert np.isfinite(y).all()
    assert np.abs(y - conv2d_reference(p, x, w, b)).max() < 1e-4


@pytest.mark.parametrize("p", [
    ConvProblem(1, 23, 19, 16, 16, 3, 3, pad=1, groups=16, activation="relu"),     # flat
    ConvProblem(2, 22, 9, 136, 136, 3, 3, pad=1, groups=136),                      # per pixel
    ConvProblem(1, 21, 12, 24, 24, 5, 5, pad=2, groups=24, activation="relu"),
    ConvProblem(1, 26, 10, 130, 130, 7, 7, pad=(3, 2, 3, 1), groups=130),
    ConvProblem(1, 30, 17, 20, 20, 3, 3, stride=2, dilation=2, pad=2, groups=20),  # sy == dy
    ConvProblem(1, 25, 13, 12, 12, 3, 3, dilation=2, pad=2, groups=12),            # row by row
    ConvProblem(1, 24, 15, 8, 8, 3, 3, stride=(1, 2), pad=(0, 1, 1, 1), groups=8),
], ids=str)
def test_depthwise_row_blocks_write_every_output(monkeypatch: pytest.MonkeyPatch,
                                                 p: ConvProblem):
    """Interior rows go ROWS at a time where stride equals dilation, one at a time
    elsewhere: with the rows split over three threads (blocks cut at a thread's range) and
    NaN-filled outputs, every output is written once and matches the float64 reference."""
    pytest.importorskip("numba")
    from convsel.backends.numpy import common, fused
    from convsel.backends.numpy.fused import depthwise

    monkeypatch.setattr(fused, "MIN_VALUES_PER_THREAD", 1)
    monkeypatch.setattr(common, "OUTPUT_FILL", np.nan)
    assert p.out_h // 3 > depthwise.ROWS   # each thread gets whole blocks and a remainder
    rng = np.random.default_rng(8)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    op = direct.prepare(p, w, b, {})
    assert op.fused is not None
    with threads.limited_threads(3):
        y = op.run(x)
    assert np.isfinite(y).all()
    assert np.abs(y - conv2d_reference(p, x, w, b)).max() < 1e-4


@pytest.mark.parametrize("p", [
    ConvProblem(2, 13, 11, 6, 6, 3, 3, pad=1, groups=6),
    ConvProblem(1, 12, 12, 5, 7, 3, 3, stride=2, pad=(0, 1, 0, 1), activation="relu"),
    ConvProblem(2, 12, 11, 8, 9, 3, 3, pad=1),
    ConvProblem(2, 7, 9, 8, 16, 1, 1, activation="hard_swish"),
], ids=str)
def test_kernels_spread_over_threads_write_every_output(monkeypatch: pytest.MonkeyPatch,
                                                        p: ConvProblem):
    """With every job range handed to its own thread (three threads, no minimum size), the
    fused kernels still write each output once: NaN-filled outputs, float64 reference."""
    pytest.importorskip("numba")
    from convsel import algorithms
    from convsel.backends import implementation
    from convsel.backends.numpy import common, fused
    from convsel.rules import default_rules

    monkeypatch.setattr(fused, "MIN_VALUES_PER_THREAD", 1)
    monkeypatch.setattr(common, "OUTPUT_FILL", np.nan)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    ref = conv2d_reference(p, x, w, b)
    ran = 0
    with threads.limited_threads(3):
        for algorithm in ("direct", "im2col_gemm", "gemm_1x1", "winograd"):
            verdict = algorithms.supports(algorithm, p, default_rules())
            module = implementation(algorithm, "numpy")
            if not verdict.ok or not module.supports(p, verdict.params, None).ok:
                continue
            y = module.prepare(p, w, b, dict(verdict.params), None).run(x)
            assert np.isfinite(y).all(), algorithm
            assert np.abs(y - ref).max() < 1e-3, algorithm
            ran += 1
    assert ran >= 2
