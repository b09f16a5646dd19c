"""im2col + GEMM on OpenCL: kernels/im2col.cl builds the column matrix, gemm.cl multiplies
it by the weights group by group, with bias and activation fused into the GEMM's store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict
from . import program as prog
from .gemm_kernel import GemmShape, gemm_step
from .launch import Step, bind
from .prepared import (
    NUMPY_DTYPES,
    BufferPlan,
    OpenCLKernel,
    bias_buffer,
    bias_options,
    check_plan,
    io_plan,
    plan_verdict,
)
from .runtime import Runtime


def _plan(p: ConvProblem) -> BufferPlan:
    m, kd = p.n * p.out_h * p.out_w, p.kh * p.kw * (p.c // p.groups)
    return io_plan(p).add("col", p.groups * m * kd, p.element_size)


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    return plan_verdict(p, _plan(p), runtime)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict[str, Any],
            runtime: Runtime) -> OpenCLKernel:
    plan = _plan(p)
    check_plan(p, plan, runtime, "im2col_gemm")
    dtype = NUMPY_DTYPES[p.dtype]
    g, cg, kg = p.groups, p.c // p.groups, p.k // p.groups
    m, kd = p.n * p.out_h * p.out_w, p.kh * p.kw * cg
    # OHWI -> [G][KH*KW*C/G][K/G]: B of group g is (kd x kg), rows in im2col's order.
    wg = np.transpose(w.reshape(g, kg, kd), (0, 2, 1))
    w_dev = runtime.buffer(0, np.ascontiguousarray(wg, dtype=dtype))
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(plan.sizes["x"])
    y_dev = runtime.buffer(plan.sizes["y"])
    col = runtime.buffer(plan.sizes["col"])

    options = prog.dtype_options(p, runtime) + prog.geometry_options(p)
    program = runtime.program(prog.program_source("im2col"), tuple(options))
    extents = [p.h, p.w, p.c, p.out_h, p.out_w, p.pad[0], p.pad[2], cg, m]
    im2col = Step("im2col", bind(program, "im2col", [x_dev, col, *extents]), (kd, m, g),
                  prog.config_id("im2col", p, options, extents))
    shape = GemmShape(m=m, n=kg, kd=kd, lda=kd, ldb=kg, ldc=p.k, batches=g, a_batch=m * kd,
                      b_batch=kd * kg, c_batch_col=kg)
    epilogue = prog.activation_options(p) + bias_options(bias)
    gemm = gemm_step(runtime, p, shape, col, w_dev, b_dev, y_dev, epilogue=epilogue)
    return OpenCLKernel(runtime, p, x_dev, y_dev, [im2col, *gemm.steps],
                        plan.sizes["col"] + gemm.workspace_bytes,
                        keep=[w_dev, b_dev, col, *gemm.keep])
