"""The numpy backend's fast paths, each against the float64 reference (issue 13).

Every path added for speed gets its own problems here, chosen so that the path is taken:
the bias beside the GEMM (the ones column of gemm_1x1 and im2col, the bias added per block
otherwise), im2col's planar layout for few-channel inputs (the stems)
and its channels-last kernel-row runs, depthwise direct on a padded copy, the Winograd
scatter that adds the bias, and the phase profiler. Outputs start as NaN and every scratch
buffer is NaN-poisoned each time it is handed out, so an element a path forgets to write,
or a stale buffer it relies on, fails. Each kernel runs twice on different inputs: buffers
kept between runs (the padded border, the ones column) must not leak the first run.

Every test runs twice: on the pure numpy paths, and on the fused kernels of the ``cpu``
extra (numba; that run skips where numba is not installed).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tolerances import assert_within_tolerance

from convsel.backends.numpy import accel, common, direct, gemm_1x1, im2col_gemm, winograd
from convsel.backends.numpy.blas import gemm_bias
from convsel.backends.numpy.profile import PHASES, phase, profiling
from convsel.problem import ConvProblem


@pytest.fixture(autouse=True, params=[False, True], ids=["numpy", "fused"])
def fused(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Which path the kernels prepared in the test take."""
    if request.param and not accel.available().ok:
        pytest.skip(accel.available().reason)
    monkeypatch.setattr(accel, "_wanted", request.param)
    return bool(request.param)


@pytest.fixture(autouse=True)
def _poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "OUTPUT_FILL", np.nan)
    original = common.Prepared.scratch

    def poisoned(self: Any, name: str, shape: tuple[int, ...], dtype: Any = common.F32):
        buf = original(self, name, shape, dtype)
        buf.fill(np.nan)
        return buf

    monkeypatch.setattr(common.Prepared, "scratch", poisoned)


def _data(p: ConvProblem, seed: int, bias: bool = True):
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = rng.standard_normal(p.weights_shape).astype(dtype)
    b = rng.standard_normal(p.k).astype(dtype) if bias else None
    return x, w, b


def _check(module: Any, p: ConvProblem, algorithm: str, params: dict[str, Any] | None = None,
           bias: bool = True) -> Any:
    """Prepare once, run on two inputs, compare both runs with the float64 reference."""
    _, w, b = _data(p, 0, bias)
    op = module.prepare(p, w, b, dict(params or {}), None)
    for seed in (1, 2):
        x = _data(p, seed)[0]
        y = op.run(x)
        assert_within_tolerance(p, x, w, b, y, algorithm)
    return op


# --- the bias beside BLAS ---------------------------------------------------------------------

@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_gemm_bias_matches_float64(order: str, with_bias: bool):
    rng = np.random.default_rng(3)
    a = np.asarray(rng.standard_normal((37, 19)), dtype=np.float32, order=order)
    b = rng.standard_normal((19, 23)).astype(np.float32)
    bias = rng.standard_normal(23).astype(np.float32) if with_bias else None
    out = np.full((37, 23), np.nan, dtype=np.float32)
    gemm_bias(a, b, bias, out)
    want = a.astype(np.float64) @ b.astype(np.float64) + (0 if bias is None else bias)
    assert np.abs(out - want).max() <= 1e-5 * np.abs(a).sum(1).max() * np.abs(b).max() * 2


@pytest.mark.parametrize(("c", "k"), [(5, 16), (16, 5), (8, 9)])   # ones column / bias fill
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_gemm_1x1_folds_the_bias_either_way(c: int, k: int, stride: int, dtype: str):
    p = ConvProblem(2, 9, 7, c, k, 1, 1, stride=stride, dtype=dtype)
    op = _check(gemm_1x1, p, "gemm_1x1")
    assert op.augmented == (c + 1 < k)


def test_gemm_1x1_without_bias():
    _check(gemm_1x1, ConvProblem(1, 6, 6, 4, 12, 1, 1), "gemm_1x1", bias=False)


# --- im2col layouts -----------------------------------------------------------------------

STEMS = [
    ConvProblem(1, 38, 36, 3, 8, 7, 7, stride=2, pad=3),                # ResNet's stem, small
    ConvProblem(2, 21, 20, 3, 6, 3, 3, stride=2, pad=(0, 1, 0, 1)),     # TF SAME stem
    ConvProblem(1, 17, 19, 1, 4, 3, 3, stride=3, pad=(2, 0, 1, 2)),
    ConvProblem(1, 16, 15, 2, 5, 3, 3, dilation=2, pad=2),
    ConvProblem(1, 12, 12, 3, 4, 5, 5, stride=(2, 1), pad=(1, 2, 2, 1)),
]


@pytest.mark.parametrize("p", STEMS, ids=str)
@pytest.mark.parametrize("with_bias", [True, False])
def test_planar_im2col_for_few_channels(p: ConvProblem, with_bias: bool):
    assert im2col_gemm.planar(p)
    _check(im2col_gemm, p, "im2col_gemm", bias=with_bias)


@pytest.mark.parametrize("p", [
    ConvProblem(2, 11, 10, 9, 7, 3, 3, stride=2, pad=1),
    ConvProblem(1, 9, 12, 16, 5, 3, 5, pad=(1, 1, 2, 2)),
    ConvProblem(1, 10, 10, 8, 6, 3, 3, dilation=2, pad=2),               # patches view path
], ids=str)
def test_channels_last_im2col_row_runs(p: ConvProblem):
    assert not im2col_gemm.planar(p)
    _check(im2col_gemm, p, "im2col_gemm")


@pytest.mark.parametrize("p", [STEMS[0], ConvProblem(2, 11, 10, 9, 7, 3, 3, stride=2, pad=1)],
                         ids=str)
def test_im2col_in_bands_of_rows(monkeypatch: pytest.MonkeyPatch, p: ConvProblem):
    """A workspace cap that forces several pieces (one GEMM each, per image and band)."""
    monkeypatch.setattr(common, "WORKSPACE_CAP", 4096)
    _check(im2col_gemm, p, "im2col_gemm")


# --- depthwise and direct -----------------------------------------------------------------

@pytest.mark.parametrize("p", [
    ConvProblem(2, 13, 11, 6, 6, 3, 3, pad=1, groups=6),
    ConvProblem(1, 12, 12, 5, 5, 3, 3, stride=2, pad=(0, 1, 0, 1), groups=5),
    ConvProblem(1, 9, 10, 4, 4, 5, 5, pad=(2, 1, 0, 2), groups=4),
    ConvProblem(1, 9, 9, 3, 3, 3, 3, dilation=2, pad=2, groups=3),
], ids=str)
@pytest.mark.parametrize("band", [1 << 16, 20])   # one band, and bands of one output row
@pytest.mark.parametrize("with_bias", [True, False])
def test_depthwise_on_a_padded_copy(monkeypatch: pytest.MonkeyPatch, p: ConvProblem,
                                    band: int, with_bias: bool):
    monkeypatch.setattr(direct, "BAND_ELEMENTS", band)
    op = _check(direct, p, "direct", bias=with_bias)
    assert op.pad_input
    assert (op.fused is not None) == op.accelerated


@pytest.mark.parametrize("p", [
    ConvProblem(1, 8, 7, 3, 4, 3, 3, pad=1),                  # no tap covers a whole band
    ConvProblem(1, 8, 7, 3, 4, 3, 3),                        # every tap does
    ConvProblem(1, 9, 9, 4, 6, 3, 3, pad=1, groups=2),       # grouped, not depthwise
], ids=str)
@pytest.mark.parametrize("with_bias", [True, False])
def test_direct_initialises_bands_with_a_tap_or_the_bias(p: ConvProblem, with_bias: bool):
    _check(direct, p, "direct", bias=with_bias)


# --- Winograd -----------------------------------------------------------------------------

@pytest.mark.parametrize("p", [
    ConvProblem(1, 7, 7, 8, 8, 3, 3, pad=1),                  # output not a multiple of 4
    ConvProblem(2, 10, 9, 5, 6, 3, 3, pad=(1, 0, 2, 1)),
], ids=str)
@pytest.mark.parametrize("tile", [(4, 4), (2, 2)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_winograd_scatter_adds_the_bias(p: ConvProblem, tile: tuple[int, int], with_bias: bool):
    _check(winograd, p, "winograd", {"tile": tile}, bias=with_bias)


@pytest.mark.parametrize(("hw", "transposed"), [(7, True), (8, True), (9, False), (11, False)])
def test_winograd_gemm_orientation(hw: int, transposed: bool, fused: bool):
    """Few tiles: Mᵀ = Uᵀ Vᵀ; more: M = V U (F(2x2): 16 tiles at 7x7 and 8x8, 25 at 9x9).
    The fused output transform reads M = V U only."""
    p = ConvProblem(1, hw, hw, 6, 7, 3, 3, pad=1)
    tiles = (-(-hw // 2)) ** 2
    op = _check(winograd, p, "winograd", {"tile": (2, 2)})
    assert (tiles <= winograd.TRANSPOSE_MAX_TILES) == transposed
    assert op.transposed == (transposed and not fused)


def test_winograd_in_bands_of_tile_rows(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(common, "WORKSPACE_CAP", 8192)
    _check(winograd, ConvProblem(2, 11, 9, 4, 5, 3, 3, pad=1), "winograd", {"tile": (4, 4)})


# --- the profiler -------------------------------------------------------------------------

def test_profiler_counts_phases_only_while_on():
    p = ConvProblem(1, 20, 20, 8, 16, 3, 3, pad=1)
    _, w, b = _data(p, 0)
    op = winograd.prepare(p, w, b, {"tile": (4, 4)}, None)
    x = _data(p, 1)[0]
    with profiling() as totals:
        op.run(x)
    expected = {"pad", "fused", "blas"} if op.accelerated else {"pad", "copy", "transform", "blas"}
    assert expected <= set(totals) <= set(PHASES)
    assert all(v >= 0 for v in totals.values())
    frozen = dict(totals)
    op.run(x)
    with phase("blas"):
        pass
    assert totals == frozen, "phases were counted after profiling ended"


def test_a_stride_wider_than_the_kernel_does_not_take_the_planar_layout():
    """The planar im2col split the input into stride_h x stride_w phases: a stride of 65535
    on a 1x1 input asked for 4.3 G elements. Such problems take the plain layout, run
    correctly and say so in their workspace."""
    import time

    from convsel import algorithms, conv2d
    from convsel.backends.numpy import im2col_gemm
    from convsel.problem import ConvProblem
    from convsel.reference import conv2d_reference

    p = ConvProblem(1, 1, 1, 3, 4, 1, 1, stride=(65535, 65535))
    assert not im2col_gemm.planar(p)
    assert im2col_gemm.planar(ConvProblem(1, 9, 9, 3, 4, 7, 7, stride=2, pad=3))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 1, 3)).astype(np.float32)
    w = rng.standard_normal((4, 1, 1, 3)).astype(np.float32)
    started = time.perf_counter()
    y = conv2d(x, w, stride=65535, algorithm="im2col_gemm")
    assert time.perf_counter() - started < 5
    assert np.allclose(y, conv2d_reference(p, x, w, None), atol=1e-5)
    assert algorithms.workspace_bytes("im2col_gemm", p, {}, "numpy") < 1 << 20
