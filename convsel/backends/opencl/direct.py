"""Direct convolution on OpenCL (NHWC), grouped and dilated included: kernels/direct.cl."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...problem import ConvProblem
from ...verdict import Verdict
from . import program as prog
from .launch import Step, bind
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

TW = 4                      # output columns per work item


def block_k(p: ConvProblem) -> int:
    """Output channels per work item: 4, unless groups force a divisor of K/groups."""
    kg = p.k // p.groups
    for tk in (4, 2):
        if p.groups == 1 or kg % tk == 0:
            return tk
    return 1


def supports(p: ConvProblem, params: Mapping[str, Any], runtime: Runtime) -> Verdict:
    return plan_verdict(p, io_plan(p), runtime)


def prepare(p: ConvProblem, w: np.ndarray, bias: np.ndarray | None, params: dict[str, Any],
            runtime: Runtime) -> OpenCLKernel:
    check_plan(p, io_plan(p), runtime, "direct")
    dtype = NUMPY_DTYPES[p.dtype]
    tk = block_k(p)
    options = (prog.dtype_options(p, runtime) + prog.activation_options(p)
               + prog.geometry_options(p) + bias_options(bias) + [f"-DTK={tk}", f"-DTW={TW}"])
    program = runtime.program(prog.program_source("direct"), tuple(options))
    # OHWI -> [KH][KW][C/G][K]: the K of a block are contiguous.
    w_dev = runtime.buffer(0, np.ascontiguousarray(np.transpose(w, (1, 2, 3, 0)), dtype=dtype))
    b_dev = bias_buffer(runtime, bias, dtype)
    x_dev = runtime.buffer(p.input_bytes)
    y_dev = runtime.buffer(p.n * p.out_h * p.out_w * p.k * p.element_size)
    extents = [p.h, p.w, p.c, p.k, p.out_h, p.out_w, p.n * p.out_h, p.pad[0], p.pad[2],
               p.c // p.groups, p.k // p.groups]
    kernel = bind(program, "direct_conv", [x_dev, w_dev, b_dev, y_dev, *extents])
    gws = (-(-p.k // tk), -(-p.out_w // TW), p.n * p.out_h)
    step = Step("direct_conv", kernel, gws, prog.config_id("direct_conv", p, options, extents))
    return OpenCLKernel(runtime, p, x_dev, y_dev, [step], 0, keep=[w_dev, b_dev])
