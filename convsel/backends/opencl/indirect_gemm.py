"""Indirect GEMM on OpenCL: an indirection buffer of input offsets per output pixel and
kernel tap, built once at prepare time, replaces im2col's copy; the GEMM is the tiled
implicit-GEMM kernel (kernels/implicit_gemm.cl) gathering its A tiles through that buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict
from . import program as prog
from .implicit_gemm import Geometry, configure, tiled_gemm
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
    return io_plan(p).add("indirection", p.n * p.out_h * p.out_w * p.kh * p.kw, 4)


def indirection(p: ConvProblem) -> np.ndarray:
    """int32 [N*OH*OW][KH*KW]: element offset of input pixel (n, iy, ix) channel 0 for each
    output pixel and tap, -1 where the tap reads padding."""
    oy = np.arange(p.out_h)[:, None] * p.stride[0] - p.pad[0]
    ox = np.arange(p.out_w)[:, None] * p.stride[1] - p.pad[2]
    iy = oy + np.arange(p.kh)[None, :] * p.dilation[0]           # (OH, KH)
    ix = ox + np.arange(p.kw)[None, :] * p.dilation[1]           # (OW, KW)
    ok = ((iy >= 0) & (iy < p.h))[:, None, :, None] & ((ix >= 0) & (ix < p.w))[None, :, None, :]
    pixel = iy[:, None, :, None] * p.w + ix[None, :, None, :]    # (OH, OW, KH, KW)
    base = (np.arange(p.n) * p.h * p.w)[:, None, None, None, None]
    offsets = np.where(ok[None], (base + pixel[None]) * p.c, -1)
    return np.ascontiguousarray(offsets.reshape(-1, p.kh * p.kw), dtype=np.int32)


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    return plan_verdict(p, _plan(p), runtime)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict,
            runtime: Runtime) -> OpenCLKernel:
    plan = _plan(p)
    check_plan(p, plan, runtime, "indirect_gemm")
    dtype = NUMPY_DTYPES[p.dtype]
    # OHWI -> [KH*KW][C][K]
    w_dev = runtime.buffer(0, np.ascontiguousarray(
        np.transpose(w, (1, 2, 3, 0)).reshape(p.kh * p.kw * p.c, p.k), dtype=dtype))
    ind_dev = runtime.buffer(0, indirection(p))
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(plan.sizes["x"])
    y_dev = runtime.buffer(plan.sizes["y"])
    geo = Geometry.conv(p)
    config = configure({}, runtime, geo, p.c, p.k, merge=False)
    run = tiled_gemm(runtime, p, geo, config, c=p.c, n=p.k, x=x_dev, w=w_dev, bias=b_dev,
                     y=y_dev, epilogue=prog.activation_options(p) + bias_options(bias),
                     indirection=ind_dev, name="indirect_gemm")
    return OpenCLKernel(runtime, p, x_dev, y_dev, run.steps,
                        plan.sizes["indirection"] + run.workspace_bytes,
                        keep=[w_dev, ind_dev, b_dev, *run.keep])
