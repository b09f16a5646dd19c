"""im2col into a workspace, then one GEMM (one per group): runs every problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from .cost import candidate_features
from .shared import (
    F16_ROUNDED,
    F32_EXACT,
    ITEM,
    any_problem,
    padded_bytes,
    piece_bytes,
    split_k_bytes,
)
from .spec import AlgorithmSpec, backend_modules

PLANAR_MAX_C = 8   # numpy: fewer input channels than this use the planar layout (stride phases)


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    g = p.groups
    depth = p.kh * p.kw * (p.c // g) + (1 if g == 1 else 0)   # + the bias column
    row_bytes = p.out_w * (depth * g + (p.k if g > 1 else 0)) * ITEM
    planar = (g == 1 and p.c < PLANAR_MAX_C     # the padded input split into stride phases
              and p.stride[0] <= (p.kh - 1) * p.dilation[0] + 1
              and p.stride[1] <= (p.kw - 1) * p.dilation[1] + 1)
    return piece_bytes(p.n, p.out_h, row_bytes) + padded_bytes(p) * (2 if planar else 1)


def opencl_split_k(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return split_k_bytes(p.n * p.out_h * p.out_w, p.k // p.groups,
                         p.kh * p.kw * (p.c // p.groups), p.groups)


def opencl_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    m, kd = p.n * p.out_h * p.out_w, p.kh * p.kw * (p.c // p.groups)
    return p.groups * m * kd * p.element_size + opencl_split_k(p, params)


def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """The column matrix is the scratch memory the GEMM reads."""
    out_pixels = p.n * p.out_h * p.out_w
    columns = float(out_pixels * p.kh * p.kw * p.c // p.groups * p.element_size)
    return candidate_features(p, params, scratch_bytes=columns)


SPEC = AlgorithmSpec(
    "im2col_gemm", "im2col into a workspace, then one GEMM",
    cpu_method="GEMM", gpu_method="GEMM", supports=any_problem("im2col + GEMM"),
    backends=backend_modules("im2col_gemm", "numpy", "opencl"),
    timing_rank=1, colour="tab:blue",
    tolerance={"F32": F32_EXACT, "F16": F16_ROUNDED},
    workspace={"numpy": numpy_workspace, "opencl": opencl_workspace},
    workspace_headroom={"opencl": opencl_split_k},
    features=features)
