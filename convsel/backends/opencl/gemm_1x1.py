"""1x1 convolution as one GEMM on OpenCL (kernels/gemm.cl): the NHWC input is the A matrix
as it lies (read at every stride-th pixel when strided), so no copy and no workspace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict
from . import program as prog
from .gemm_kernel import GemmShape, gemm_step
from .prepared import (
    NUMPY_DTYPES,
    OpenCLKernel,
    bias_buffer,
    bias_options,
    check_plan,
    io_plan,
    plan_verdict,
)
from .runtime import Runtime


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    return plan_verdict(p, io_plan(p), runtime)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict,
            runtime: Runtime) -> OpenCLKernel:
    plan = io_plan(p)
    check_plan(p, plan, runtime, "gemm_1x1")
    dtype = NUMPY_DTYPES[p.dtype]
    w_dev = runtime.buffer(0, np.ascontiguousarray(w.reshape(p.k, p.c).T, dtype=dtype))
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(plan.sizes["x"])
    y_dev = runtime.buffer(plan.sizes["y"])
    shape = GemmShape(m=p.n * p.out_h * p.out_w, n=p.k, kd=p.c, lda=p.c, ldb=p.k, ldc=p.k)
    strided = p.stride != (1, 1)
    gemm = gemm_step(runtime, p, shape, x_dev, w_dev, b_dev, y_dev,
                     epilogue=prog.activation_options(p) + bias_options(bias),
                     strided_rows=strided)
    return OpenCLKernel(runtime, p, x_dev, y_dev, gemm.steps, gemm.workspace_bytes,
                        keep=[w_dev, b_dev, *gemm.keep])
