"""Indirect GEMM: an indirection buffer of input rows feeding a GEMM (ACL's GEMM_CONV2D and
INDIRECT, XNNPACK's igemm).

At prepare time, for every output pixel and kernel tap, the indirection buffer records which
row of the input (viewed as an (N·H·W + 1) × C matrix, whose last row is zeros) that tap
reads; taps that fall in the padding point at the zero row, so no padded copy is made. Each
run gathers those rows block by block (``np.take`` through the buffer) and multiplies each
block by the (KH·KW·C × K) weights, so the gathered block, not a whole im2col matrix, is the
working set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...algorithms.indirect_gemm import BLOCK_ELEMENTS, MIN_BLOCK_ROWS
from ...problem import ConvProblem
from ...verdict import Verdict, failed
from .blas import gemm_bias
from .common import ITEM, Prepared, as_f32, check_x, float_only, new_output
from .epilogue import finish
from .profile import phase


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Any = None) -> Verdict:
    dtype = float_only(p, "indirect_gemm")
    if not dtype.ok:
        return dtype
    if p.groups != 1:
        return failed(f"numpy indirect_gemm does not run grouped convolution "
                      f"(groups={p.groups}); use direct or im2col_gemm")
    return dtype


def indirection_buffer(p: ConvProblem) -> np.ndarray:
    """(N·OH·OW, KH·KW) indices of input rows in the (N·H·W + 1) × C matrix; the index
    N·H·W (the zero row) stands for a tap that reads padding."""
    oy = np.arange(p.out_h)[:, None] * p.stride[0] - p.pad[0]
    ox = np.arange(p.out_w)[:, None] * p.stride[1] - p.pad[2]
    iy = oy + np.arange(p.kh)[None, :] * p.dilation[0]            # OH, KH
    ix = ox + np.arange(p.kw)[None, :] * p.dilation[1]            # OW, KW
    inside = (((iy >= 0) & (iy < p.h))[:, None, :, None]
              & ((ix >= 0) & (ix < p.w))[None, :, None, :])        # OH, OW, KH, KW
    pixel = iy[:, None, :, None] * p.w + ix[None, :, None, :]
    image = (np.arange(p.n) * p.h * p.w)[:, None, None, None, None]
    rows = np.where(inside[None], image + pixel[None], p.n * p.h * p.w)
    dtype = np.int32 if p.n * p.h * p.w < 2**31 else np.int64
    return rows.reshape(p.n * p.out_h * p.out_w, p.kh * p.kw).astype(dtype)


class IndirectGemm(Prepared):
    """Gather rows through the indirection buffer, block by block, then GEMM each block."""

    def __init__(self, p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None) -> None:
        self.w = as_f32(w_ohwi.reshape(p.k, -1).T)                 # KH·KW·C × K
        self.indirection = indirection_buffer(p)
        pixels = self.indirection.shape[0]
        depth = p.kh * p.kw * p.c
        self.block = min(pixels, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // depth))
        source = (p.n * p.h * p.w + 1) * p.c
        super().__init__(p, bias, (source + self.block * depth) * ITEM
                         + self.indirection.nbytes)

    def run(self, x: np.ndarray) -> np.ndarray:
        p = self.problem
        x = check_x(p, x)
        with phase("pad"):
            source = self.scratch("source", (p.n * p.h * p.w + 1, p.c))
            source[:-1] = x.reshape(-1, p.c)
            source[-1] = 0.0
        pixels, taps = self.indirection.shape
        y = new_output((pixels, p.k))
        gathered = self.scratch("gathered", (self.block, taps, p.c))
        for start in range(0, pixels, self.block):
            stop = min(pixels, start + self.block)
            block = gathered[: stop - start]
            with phase("copy"):
                np.take(source, self.indirection[start:stop], axis=0, out=block, mode="clip")
            gemm_bias(block.reshape(stop - start, taps * p.c), self.w, self.bias, y[start:stop],
                      self.accelerated)
        return finish(p, y.reshape(p.n, p.out_h, p.out_w, p.k), None, self.accelerated)


def prepare(p: ConvProblem, w_ohwi: np.ndarray, bias: np.ndarray | None,
            params: dict[str, Any], runtime: Any = None) -> IndirectGemm:
    return IndirectGemm(p, w_ohwi, bias)
