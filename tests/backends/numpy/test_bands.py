"""The banded path (convsel/backends/numpy/bands.py): the correctness suite again with every
GEMM kernel forced onto bands of output rows, three threads and one-unit chunks (so bands
split unevenly and chunks cross image boundaries), plus the pieces it is built from."""

from __future__ import annotations

import numpy as np
import pytest
from test_fused_correctness import SUITE, _prepared_fused

from convsel.backends import implementation
from convsel.backends.numpy import accel, bands, threads
from convsel.backends.numpy import common as numpy_common
from convsel.problem import ConvProblem

pytest.importorskip("numba", reason="the banded path runs with the cpu extra (numba)")

BANDED = ["gemm_1x1", "im2col_gemm", "winograd"]


@pytest.fixture(autouse=True, params=["rows", "columns"])
def _banded_three_threads_small_chunks(request: pytest.FixtureRequest,
                                       monkeypatch: pytest.MonkeyPatch) -> object:
    """Bands on, three threads even for the tests' small problems, one-unit chunks; the
    pixels split by rows, or (``columns``) every GEMM kernel splitting output channels."""
    monkeypatch.setattr(numpy_common, "OUTPUT_FILL", np.nan)
    monkeypatch.setattr(accel, "_wanted", True)
    monkeypatch.setattr(bands, "CHUNK_BYTES", 1)
    monkeypatch.setattr(bands, "MIN_MACS_PER_THREAD", 0)
    monkeypatch.setattr(bands, "COLUMN_SPLIT_MAX_ROWS",
                        1 << 40 if request.param == "columns" else 0)
    with threads.limited_threads(3), bands.forced(True):
        yield


def _check_banded(seen: list[object]) -> None:
    # grouped im2col and Winograd without its fused transforms have no banded form
    assert seen and any(getattr(k, "banded", False) for k in seen)


@pytest.mark.parametrize("algorithm", BANDED)
def test_network_layers_f32_banded(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _prepared_fused(monkeypatch)
    SUITE.test_network_layers_f32(algorithm, "numpy")
    _check_banded(seen)


@pytest.mark.parametrize("algorithm", BANDED)
def test_network_layers_f16_banded(algorithm: str) -> None:
    SUITE.test_network_layers_f16(algorithm, "numpy")


@pytest.mark.parametrize("algorithm", BANDED)
def test_random_problems_banded(algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _prepared_fused(monkeypatch)
    SUITE.test_random_problems(algorithm, "numpy")
    _check_banded(seen)


@pytest.mark.filterwarnings("error::convsel.errors.FallbackWarning")
@pytest.mark.parametrize("algorithm", BANDED)
def test_public_path_layouts_bias_and_activations_banded(algorithm: str) -> None:
    SUITE.test_public_path_layouts_bias_and_activations(algorithm, "numpy")


@pytest.mark.parametrize("algorithm", BANDED)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_propagates_banded(algorithm: str, bad: float) -> None:
    SUITE.test_non_finite_input_propagates(algorithm, "numpy", bad)


def test_units_are_cut_at_image_boundaries() -> None:
    assert list(bands.per_image(3, 12, 5)) == [(0, 3, 2), (1, 0, 5), (2, 0, 2)]
    assert list(bands.per_image(4, 4, 5)) == []


def test_blas_count_is_one_inside_and_restored_after() -> None:
    libraries = threads._loaded_blas()
    if not libraries:
        pytest.skip("threadpoolctl sees no BLAS library")
    before = [lib.num_threads for lib in libraries]
    with threads.blas_threads(1):
        assert all(lib.num_threads == 1 for lib in libraries)
    assert [lib.num_threads for lib in libraries] == before


def test_the_decision_needs_the_switch_the_extra_and_two_threads() -> None:
    assert bands.wanted(accelerated=True)      # switched on by the fixture
    assert not bands.wanted(accelerated=False)
    with threads.limited_threads(1):
        assert not bands.wanted(accelerated=True)
    with bands.forced(False):
        assert not bands.wanted(accelerated=True)


def test_prepared_kernels_keep_their_path() -> None:
    p = ConvProblem(n=1, h=9, w=9, c=8, k=32, kh=1, kw=1)
    w = np.ones(p.weights_shape, np.float32)
    with bands.forced(False):
        plain = implementation("gemm_1x1", "numpy").prepare(p, w, None, {}, None)
    banded = implementation("gemm_1x1", "numpy").prepare(p, w, None, {}, None)
    assert not plain.banded and banded.banded
    assert bands._on is True   # the fixture's setting, restored by forced()
    x = np.ones((1, 9, 9, 8), np.float32)
    np.testing.assert_array_equal(plain.run(x), banded.run(x))


def test_column_blocks_cover_every_channel_once() -> None:
    seen: list[tuple[int, int]] = []
    bands.run_columns(lambda a, b: seen.append((a, b)), 100, 3)
    assert sorted(seen) == [(0, 32), (32, 64), (64, 100)]


def test_the_device_key_says_when_bands_are_on() -> None:
    assert "bands" in accel.describe()
    with bands.forced(False):
        assert "bands" not in accel.describe()
