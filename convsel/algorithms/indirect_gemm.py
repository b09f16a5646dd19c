"""GEMM through an indirection buffer of input pointers (no im2col copy of the input)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from .cost import candidate_features
from .shared import F16_ROUNDED, F32_EXACT, ITEM, split_k_bytes, ungrouped
from .spec import AlgorithmSpec, backend_modules

BLOCK_ELEMENTS = 1 << 20   # numpy: floats in one gathered block (4 MiB): GEMM rows per call
MIN_BLOCK_ROWS = 256       # numpy: fewer rows than this and BLAS efficiency drops


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    pixels, taps = p.n * p.out_h * p.out_w, p.kh * p.kw
    depth = taps * p.c
    block = min(pixels, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // depth))
    source = (p.n * p.h * p.w + 1) * p.c
    index_item = 4 if p.n * p.h * p.w < 2**31 else 8
    return (source + block * depth) * ITEM + pixels * taps * index_item


def opencl_split_k(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return split_k_bytes(p.n * p.out_h * p.out_w, p.k, p.kh * p.kw * p.c)


def opencl_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    indirection = p.n * p.out_h * p.out_w * p.kh * p.kw * 4
    return indirection + opencl_split_k(p, params)


def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """The indirection buffer: one pointer per output pixel and tap."""
    out_pixels = p.n * p.out_h * p.out_w
    return candidate_features(p, params, scratch_bytes=float(out_pixels * p.kh * p.kw * 8))


SPEC = AlgorithmSpec(
    "indirect_gemm", "GEMM through an indirection buffer of input pointers",
    cpu_method="GEMM_CONV2D", gpu_method="INDIRECT",
    supports=ungrouped("indirect_gemm", "indirection buffer + GEMM"),
    backends=backend_modules("indirect_gemm", "numpy", "opencl"),
    timing_rank=3, colour="tab:green",
    tolerance={"F32": F32_EXACT, "F16": F16_ROUNDED},
    workspace={"numpy": numpy_workspace, "opencl": opencl_workspace},
    workspace_headroom={"opencl": opencl_split_k},
    features=features)
