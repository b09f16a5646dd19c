"""Direct convolution: every output accumulated tap by tap, grouped and depthwise included;
no buffer beyond a band of products. The fallback that runs anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from .cost import Gemm, candidate_features
from .shared import F16_ROUNDED, F32_EXACT, ITEM, any_problem, padded_bytes
from .spec import AlgorithmSpec, backend_modules

BAND_ELEMENTS = 1 << 16   # numpy: floats in one band's product buffer (256 KiB: stays in L2)


def has_channel_multiplier(p: ConvProblem) -> bool:
    """One input channel per group and several outputs from each (groups == C < K)."""
    return p.groups > 1 and p.c == p.groups and p.k > p.groups


def as_depthwise(p: ConvProblem) -> ConvProblem:
    """The depthwise problem (K channels, one output each) that a channel multiplier is once
    every input channel is repeated K/C times: output k reads input channel k // (K/C) either
    way, with the same weights (K, KH, KW, 1)."""
    return p.replace(c=p.k, groups=p.k)


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    if has_channel_multiplier(p):   # the repeated input, then the depthwise kernel's own
        return p.n * p.h * p.w * p.k * p.element_size + numpy_workspace(as_depthwise(p), params)
    band = max(1, BAND_ELEMENTS // (p.out_w * p.k))
    cg, kg = p.c // p.groups, p.k // p.groups
    # depthwise with padding works on a padded copy of the input (which replaces F16's copy)
    padded = padded_bytes(p) if cg == 1 and kg == 1 and p.groups > 1 and any(p.pad) else 0
    f16_copy = p.n * p.h * p.w * p.c * ITEM if p.dtype == "F16" and not padded else 0
    return min(band, p.out_h) * p.out_w * p.k * ITEM + f16_copy + padded


def opencl_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return 0


# oneDNN's direct kernels keep per-thread buffers in a scratchpad whose size depends on the
# CPU's instruction set and the thread count (AVX-512, the shipped layers: 4 KiB + 4 KiB per
# thread); the onednn backend refuses a kernel that would take more than this bound, so the
# estimate below holds on any machine.
ONEDNN_SCRATCHPAD_BOUND = 1 << 20


def onednn_input_copy(p: ConvProblem) -> int:
    """The onednn kernel's one buffer of its own: the float32 copy of an F16 input."""
    return p.n * p.h * p.w * p.c * ITEM if p.dtype == "F16" else 0


def onednn_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    """The F16 input's copy (exact), plus the scratchpad's bound."""
    return onednn_input_copy(p) + ONEDNN_SCRATCHPAD_BOUND


def onednn_scratchpad(p: ConvProblem, params: Mapping[str, Any]) -> int:
    """The part of :func:`onednn_workspace` that depends on the machine."""
    return ONEDNN_SCRATCHPAD_BOUND


def _depthwise(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    # no product to speak of: each output sums its own taps in one pass, a single (outputs x
    # taps) by (taps x 1) reduction (both backends' depthwise paths: an elementwise
    # multiply-add per tap, or a register accumulator per output)
    outputs = p.n * p.out_h * p.out_w * p.k
    return candidate_features(p, params, gemm=Gemm(outputs, 1, p.kh * p.kw, 1))


def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """Tap by tap, as the numpy kernel runs it: one product of (pixels x channels per group)
    per tap and group (a GEMM per tap, or an einsum over the groups); a depthwise problem
    (one input channel per group) is one reduction over the taps per output."""
    if p.is_depthwise:
        return _depthwise(p, params)
    return candidate_features(p, params, gemm=Gemm.grouped(p, taps_in_k=False))


def opencl_features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """As :func:`features`, except a grouped problem: the OpenCL kernel's work item sums its
    outputs over the group's channels *and* taps in one loop, so per group one product
    whose reduction is channels per group x taps (not taps products of channels per group:
    that description made a model fitted on dense and depthwise layers price a 16-32-group
    layer's direct convolution like a dense one's, 1.5-2.5x too slow; NOTES, v3)."""
    if p.groups > 1 and not p.is_depthwise:
        return candidate_features(p, params, gemm=Gemm.grouped(p, taps_in_k=True))
    return features(p, params)


SPEC = AlgorithmSpec(
    "direct",
    "direct convolution, one output at a time (grouped, depthwise and channel multipliers too)",
    cpu_method="DIRECT", gpu_method="DIRECT", supports=any_problem("direct"),
    backends=backend_modules("direct", "numpy", "opencl", "onednn"),
    timing_rank=5, colour="tab:brown",
    tolerance={"F32": F32_EXACT, "F16": F16_ROUNDED},
    workspace={"numpy": numpy_workspace, "opencl": opencl_workspace,
               "onednn": onednn_workspace},
    workspace_headroom={"onednn": onednn_scratchpad}, features=features,
    backend_features={"opencl": opencl_features})
