"""Workspace estimates: the memory each algorithm needs beyond input, weights and output,
computed from the problem alone (no arrays, no devices), per backend.

These are the formulas the backends' prepared kernels report as ``workspace_bytes``, written
out here so that a selection can skip an algorithm whose workspace is over a limit *before*
building it (as cuDNN's ``GetWorkspaceSize``). Where a kernel's workspace depends on more
than the problem and parameters, the estimate is the larger case, so it never understates:
numpy im2col_gemm and gemm_1x1 fold a bias into the GEMM (a column more), counted as if a
bias is given; OpenCL GEMMs may split their reduction on GPUs (see below). The constants
mirror the numpy backend's (``WORKSPACE_CAP``, ``BAND_ELEMENTS``, ``BLOCK_ELEMENTS``,
``MIN_BLOCK_ROWS``, ``PLANAR_MAX_C``) and
``tests/tuning/test_find_workspace.py`` checks both the constants and the values against real
kernels, so the two cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..problem import ConvProblem

ITEM = 4                    # the numpy backend computes (and keeps scratch) in float32
WORKSPACE_CAP = 64 << 20    # numpy: largest per-piece buffer (backends.numpy.common)
BAND_ELEMENTS = 1 << 16     # numpy direct: floats in one band's product buffer
BLOCK_ELEMENTS = 1 << 20    # numpy indirect_gemm: floats in one gathered block
MIN_BLOCK_ROWS = 256        # numpy indirect_gemm: fewest GEMM rows per block
MIN_FFT = 16                # numpy fft: smallest block side
PLANAR_MAX_C = 8            # numpy im2col_gemm: fewer channels than this use planar phases

Estimate = Callable[[ConvProblem, Mapping[str, Any]], int]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _piece_bytes(n: int, rows: int, row_bytes: int) -> int:
    """The largest piece the numpy backend's ``pieces()`` makes (whole batch, else bands)."""
    if n * rows * row_bytes <= WORKSPACE_CAP:
        return n * rows * row_bytes
    band = max(1, WORKSPACE_CAP // max(1, row_bytes))
    return min(band, rows) * row_bytes


def _padded_bytes(p: ConvProblem) -> int:
    top, bottom, left, right = p.pad
    if not (top or bottom or left or right) and p.dtype == "F32":
        return 0
    return p.n * (p.h + top + bottom) * (p.w + left + right) * p.c * ITEM


def next_fast_len(target: int) -> int:
    """The smallest 5-smooth integer >= ``target`` (scipy.fft.next_fast_len(real=True))."""
    n = max(1, target)
    while True:
        m = n
        for f in (2, 3, 5):
            while m % f == 0:
                m //= f
        if m == 1:
            return n
        n += 1


# -- numpy ----------------------------------------------------------------------------------
def numpy_direct(p: ConvProblem, params: Mapping[str, Any]) -> int:
    band = max(1, BAND_ELEMENTS // (p.out_w * p.k))
    cg, kg = p.c // p.groups, p.k // p.groups
    # depthwise with padding works on a padded copy of the input (which replaces F16's copy)
    padded = _padded_bytes(p) if cg == 1 and kg == 1 and p.groups > 1 and any(p.pad) else 0
    f16_copy = p.n * p.h * p.w * p.c * ITEM if p.dtype == "F16" and not padded else 0
    return min(band, p.out_h) * p.out_w * p.k * ITEM + f16_copy + padded


def numpy_gemm_1x1(p: ConvProblem, params: Mapping[str, Any]) -> int:
    rows = p.n * p.out_h * p.out_w
    if p.c + 1 < p.k:   # with a bias, the input is copied with a column of ones
        return rows * (p.c + 1) * ITEM
    strided = p.stride != (1, 1) or p.dilation != (1, 1)
    return rows * p.c * ITEM if strided or p.dtype == "F16" else 0


def numpy_im2col_gemm(p: ConvProblem, params: Mapping[str, Any]) -> int:
    g = p.groups
    depth = p.kh * p.kw * (p.c // g) + (1 if g == 1 else 0)   # + the bias column
    row_bytes = p.out_w * (depth * g + (p.k if g > 1 else 0)) * ITEM
    planar = (g == 1 and p.c < PLANAR_MAX_C     # the padded input split into stride phases
              and p.stride[0] <= (p.kh - 1) * p.dilation[0] + 1
              and p.stride[1] <= (p.kw - 1) * p.dilation[1] + 1)
    return _piece_bytes(p.n, p.out_h, row_bytes) + _padded_bytes(p) * (2 if planar else 1)


def numpy_winograd(p: ConvProblem, params: Mapping[str, Any]) -> int:
    my, mx = _tile(params)
    ny, nx = my + p.kh - 1, mx + p.kw - 1
    th, tw = _ceil_div(p.out_h, my), _ceil_div(p.out_w, mx)
    hp, wp = th * my + p.kh - 1, tw * mx + p.kw - 1
    row_bytes = tw * ITEM * (2 * ny * nx * p.c + ny * nx * p.k + my * mx * p.k)
    return p.n * hp * wp * p.c * ITEM + _piece_bytes(p.n, th, row_bytes)


def numpy_indirect_gemm(p: ConvProblem, params: Mapping[str, Any]) -> int:
    pixels, taps = p.n * p.out_h * p.out_w, p.kh * p.kw
    depth = taps * p.c
    block = min(pixels, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // depth))
    source = (p.n * p.h * p.w + 1) * p.c
    index_item = 4 if p.n * p.h * p.w < 2**31 else 8
    return (source + block * depth) * ITEM + pixels * taps * index_item


def _fft_block(out: int, extent: int) -> tuple[int, int]:
    size = next_fast_len(min(out + extent - 1, max(MIN_FFT, 2 * extent)))
    return size, size - extent + 1


def numpy_fft(p: ConvProblem, params: Mapping[str, Any]) -> int:
    ey, ex = p.kernel_extent
    full = ((p.out_h - 1) * p.stride[0] + 1, (p.out_w - 1) * p.stride[1] + 1)
    (fy, ty), (fx, tx) = _fft_block(full[0], ey), _fft_block(full[1], ex)
    by, bx = _ceil_div(full[0], ty), _ceil_div(full[1], tx)
    freqs = fy * (fx // 2 + 1)
    row_bytes = bx * (8 * freqs * (2 * p.c + 2 * p.k) + 4 * fy * fx * p.k * 2)
    padded_in = p.n * (by * ty + ey - 1) * (bx * tx + ex - 1) * p.c * 4
    return padded_in + _piece_bytes(p.n, by, row_bytes)


# -- OpenCL: the device buffers beyond x, y and the weights (prepared.io_plan) ---------------
# The OpenCL GEMMs may split their reduction (split-K) on GPU devices, with a float partial
# sum per split and output as workspace; how many splits depends on the device's compute
# units, which a pure estimate cannot know. The estimate adds the most any device can get
# (backends.opencl.implicit_gemm.default_splits: at most MAX_SPLITS, and at least 8 slices of
# the reduction per split), so it is an upper bound on GPUs and exact on CPU devices and
# wherever no split is made (batched GEMMs, short reductions).
MAX_SPLITS = 16


def split_k_bytes(m: int, n: int, reduction: int, batches: int = 1,
                  params: Mapping[str, Any] | None = None) -> int:
    """The most split-K workspace an (m x reduction) @ (reduction x n) GEMM can take; exact
    when ``params`` names ``split``."""
    if batches != 1:
        return 0
    asked = (params or {}).get("split")
    splits = int(asked) if asked is not None else min(MAX_SPLITS, reduction // 8)
    return 0 if splits <= 1 else splits * m * n * 4


def opencl_split_k(algorithm: str, p: ConvProblem, params: Mapping[str, Any]) -> int:
    """The split-K part of ``algorithm``'s OpenCL estimate (0 where it has no GEMM to split)."""
    m = p.n * p.out_h * p.out_w
    if algorithm == "gemm_1x1":
        return split_k_bytes(m, p.k, p.c)
    if algorithm == "im2col_gemm":
        return split_k_bytes(m, p.k // p.groups, p.kh * p.kw * (p.c // p.groups), p.groups)
    if algorithm in ("indirect_gemm", "implicit_gemm"):
        return split_k_bytes(m, p.k, p.kh * p.kw * p.c,
                             params=params if algorithm == "implicit_gemm" else None)
    return 0    # direct: no GEMM; winograd: a batched GEMM (one per tile position)


def opencl_direct(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return 0


def opencl_gemm_1x1(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return opencl_split_k("gemm_1x1", p, params)


def opencl_im2col_gemm(p: ConvProblem, params: Mapping[str, Any]) -> int:
    m, kd = p.n * p.out_h * p.out_w, p.kh * p.kw * (p.c // p.groups)
    return p.groups * m * kd * p.element_size + opencl_split_k("im2col_gemm", p, params)


def opencl_indirect_gemm(p: ConvProblem, params: Mapping[str, Any]) -> int:
    indirection = p.n * p.out_h * p.out_w * p.kh * p.kw * 4
    return indirection + opencl_split_k("indirect_gemm", p, params)


def opencl_implicit_gemm(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return opencl_split_k("implicit_gemm", p, params)


def opencl_winograd(p: ConvProblem, params: Mapping[str, Any]) -> int:
    my, mx = _tile(params)
    ah, aw = my + p.kh - 1, mx + p.kw - 1
    tiles = p.n * _ceil_div(p.out_h, my) * _ceil_div(p.out_w, mx)
    return 4 * ah * aw * (tiles * p.c + tiles * p.k + p.c * p.k)


def _tile(params: Mapping[str, Any]) -> tuple[int, int]:
    tile = params.get("tile")
    if not tile:
        raise KeyError("winograd's workspace depends on its tile: pass resolved params")
    return int(tile[0]), int(tile[1])
