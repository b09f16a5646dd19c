"""A 1x1 convolution as one GEMM over channels (strides by subsampling the input)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed, passed
from .shared import F16_ROUNDED, F32_EXACT, ITEM, split_k_bytes
from .spec import AlgorithmSpec, backend_modules


def is_plain_1x1(p: ConvProblem) -> bool:
    """1×1, unit stride, no padding, no groups: the convolution is one GEMM over channels."""
    return ((p.kh, p.kw) == (1, 1) and p.stride == (1, 1) and p.pad == (0, 0, 0, 0)
            and p.groups == 1)


def supports(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
    if (p.kh, p.kw) != (1, 1):
        return failed(f"gemm_1x1 needs a 1x1 kernel, got {p.kh}x{p.kw}")
    if p.pad != (0, 0, 0, 0):
        return failed(f"gemm_1x1 needs zero padding, got {p.pad}")
    if p.groups != 1:
        return failed(f"gemm_1x1 does not run grouped convolution (groups={p.groups})")
    return passed("1x1 kernel: one GEMM over channels (strided by subsampling)")


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    # counted as if a bias is given (the estimate never understates)
    rows = p.n * p.out_h * p.out_w
    if p.c + 1 < p.k:   # with a bias, the input is copied with a column of ones
        return rows * (p.c + 1) * ITEM
    strided = p.stride != (1, 1) or p.dilation != (1, 1)
    return rows * p.c * ITEM if strided or p.dtype == "F16" else 0


def opencl_split_k(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return split_k_bytes(p.n * p.out_h * p.out_w, p.k, p.c)


SPEC = AlgorithmSpec(
    "gemm_1x1", "a 1x1 convolution as one GEMM over channels",
    cpu_method="GEMM", gpu_method="GEMM", supports=supports,
    backends=backend_modules("gemm_1x1", "numpy", "opencl"),
    timing_rank=0, colour="tab:cyan",
    tolerance={"F32": F32_EXACT, "F16": F16_ROUNDED},
    acl_pick=is_plain_1x1,
    workspace={"numpy": numpy_workspace, "opencl": opencl_split_k},
    workspace_headroom={"opencl": opencl_split_k})
