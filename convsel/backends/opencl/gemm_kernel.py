"""The GEMM step shared by im2col_gemm, gemm_1x1 and winograd: the implicit-GEMM kernel
(kernels/implicit_gemm.cl) with a 1x1 geometry, so every GEMM-like path gets the same
local-memory and register tiling, at the device class's default tile and split-K."""

from __future__ import annotations

from dataclasses import dataclass

import pyopencl as cl

from ...problem import ConvProblem
from .implicit_gemm import Geometry, Launches, configure, tiled_gemm
from .runtime import Runtime


@dataclass(frozen=True)
class GemmShape:
    """C[b] (m x n) = A[b] (m x kd) * B[b] (kd x n): leading dimensions and batch strides
    (c_batch_col: column offset per batch, for groups writing side by side)."""

    m: int
    n: int
    kd: int
    lda: int
    ldb: int
    ldc: int
    batches: int = 1
    a_batch: int = 0
    b_batch: int = 0
    c_batch: int = 0
    c_batch_col: int = 0


def gemm_step(runtime: Runtime, p: ConvProblem, shape: GemmShape, a: cl.Buffer, b: cl.Buffer,
              bias: cl.Buffer, c: cl.Buffer, *, epilogue: list[str] | None,
              strided_rows: bool = False) -> Launches:
    """The launches of a GEMM (split-K adds a reduction and its workspace). ``epilogue`` is
    the bias/activation options (C in the data type), or None for float A/B/C stored raw
    (Winograd). ``strided_rows`` reads A as the NHWC input subsampled by the problem's stride
    (gemm_1x1)."""
    s = shape
    if s.lda != s.kd or s.ldb != s.n:
        raise ValueError(f"the tiled GEMM reads packed A and B (lda = kd, ldb = n), got {s}")
    geo = Geometry.conv(p) if strided_rows else Geometry.matrix(s.m)
    config = configure({}, runtime, geo, s.kd, s.n, s.batches)
    return tiled_gemm(runtime, p, geo, config, c=s.kd, n=s.n, x=a, w=b, bias=bias, y=c,
                      epilogue=epilogue, ldy=s.ldc, batches=s.batches, a_batch=s.a_batch,
                      b_batch=s.b_batch, y_batch=s.c_batch + s.c_batch_col,
                      bias_batch=s.c_batch_col, name="gemm")
