"""ACL's CPU validate() predicates as the v52.3.0 heuristic calls them (spec §3).

The CPU targets are aarch64, so arm_gemm has kernels for F32, F16 (with FP16) and 8-bit types.
A grouped problem fails every predicate: ACL's weights must hold all C input channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from ..problem import ConvProblem
from ..rules import Rules, WinogradTile
from ..targets import Target
from ..verdict import Verdict, failed, passed

_GROUPS = "ACL's Conv2d has no groups: weights IFM must equal src C (groups must be 1)"


def _float_dtype(p: ConvProblem, target: Target) -> str | None:
    if p.dtype not in ("F32", "F16"):
        return f"dtype {p.dtype} is not F32/F16"
    if p.dtype == "F16" and not target.fp16:
        return f"F16 needs a CPU with FP16; target {target.name} has none"
    return None


def winograd(p: ConvProblem, target: Target, rules: Rules) -> Verdict:
    """``CpuWinogradConv2d::validate`` (§3.1); picks the output tile as arm_conv does."""
    problem = _float_dtype(p, target)
    if problem:
        return failed(problem)
    if p.groups != 1:
        return failed(_GROUPS)
    if p.dtype == "F16" and not p.fast_math:
        return failed("F16 Winograd needs fast-math (disabled for fp16 without fast math)")
    if p.stride != (1, 1):
        return failed(f"stride {p.stride[0]}x{p.stride[1]}: Winograd needs stride 1x1")
    kernel = (p.kh, p.kw)
    for entry in _tiles(rules, p.dtype):
        if entry.kernel != kernel:
            continue
        if entry.min_input and (p.h < entry.min_input[0] or p.w < entry.min_input[1]):
            continue
        tile = entry.tile
        return passed(f"{p.dtype} {p.kh}x{p.kw} kernel with a {tile[0]}x{tile[1]} output tile",
                      tile=tile)
    kernels = sorted({f"{e.kernel[0]}x{e.kernel[1]}" for e in _tiles(rules, p.dtype)})
    return failed(f"no {p.dtype} Winograd kernel for {p.kh}x{p.kw} (supported: "
                  f"{', '.join(kernels)})")


def gemm_direct(p: ConvProblem, target: Target) -> Verdict:
    """``CpuGemmDirectConv2d::validate`` (§3.2): arm_gemm's indirect convolution."""
    if p.dtype == "F16" and not target.fp16:
        return failed(f"F16 needs a CPU with FP16; target {target.name} has none")
    if p.layout != "NHWC":
        return failed("GEMM_CONV2D (indirect GEMM) accepts NHWC only")
    if p.groups != 1:
        return failed(_GROUPS)
    if p.dilation != (1, 1):
        return failed(f"dilation {p.dilation}: GEMM_CONV2D needs dilation 1x1")
    return passed(f"arm_gemm has an indirect convolution kernel for {p.dtype} NHWC")


def direct(p: ConvProblem, target: Target) -> Verdict:
    """``CpuDirectConv2d::validate`` (§3.3, v25.01+)."""
    problem = _float_dtype(p, target)
    if problem:
        return failed(problem)
    if p.groups != 1:
        return failed(_GROUPS)
    if p.kh != p.kw:
        return failed(f"kernel {p.kh}x{p.kw}: direct convolution needs a square kernel")
    return passed(f"square {p.kh}x{p.kw} {p.dtype} kernel")


def gemm(p: ConvProblem, target: Target) -> Verdict:
    """``CpuGemmConv2d``: im2col + GEMM, ACL's general fallback."""
    if p.groups != 1:
        return failed(_GROUPS)
    if p.dtype == "F16" and not target.fp16:
        return failed(f"F16 needs a CPU with FP16; target {target.name} has none")
    return passed("im2col + GEMM runs every ungrouped problem")


def _tiles(rules: Rules, dtype: str) -> tuple[WinogradTile, ...]:
    # the table is keyed by the float dtypes; any other dtype has no Winograd kernel
    table = cast(Mapping[str, tuple[WinogradTile, ...]], rules.cpu.winograd)
    return table.get(dtype, ())
