"""The batched GEMM step (kernels/gemm.cl) shared by im2col_gemm, gemm_1x1 and winograd."""

from __future__ import annotations

from dataclasses import dataclass

import pyopencl as cl

from ...problem import ConvProblem
from . import program as prog
from .prepared import Step, bind
from .runtime import Runtime

RM, RN = 4, 4               # rows x columns of C per work item


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
              strided_rows: bool = False) -> Step:
    """A GEMM launch. ``epilogue`` is the bias/activation options (C in the data type), or
    None for float A/B/C stored raw (Winograd). ``strided_rows`` reads A as the NHWC input
    subsampled by the problem's stride (gemm_1x1)."""
    options = prog.dtype_options(p, runtime) + [f"-DRM={RM}", f"-DRN={RN}"]
    if epilogue is None:
        options.append("-DGEMM_FLOAT_IO")
    else:
        options += ["-DEPILOGUE", *epilogue]
    if strided_rows:
        options += ["-DA_ROWS_STRIDED", f"-DSY={p.stride[0]}", f"-DSX={p.stride[1]}"]
    program = runtime.program(prog.program_source("gemm"), tuple(options))
    s = shape
    extents = [s.m, s.n, s.kd, s.lda, s.ldb, s.ldc, s.a_batch, s.b_batch, s.c_batch,
               s.c_batch_col, p.out_h, p.out_w, p.h, p.w]
    kernel = bind(program, "gemm", [a, b, bias, c, *extents])
    gws = (-(-s.n // RN), -(-s.m // RM), s.batches)
    return Step("gemm", kernel, gws, prog.config_id("gemm", p, options, [*extents, s.batches]))
