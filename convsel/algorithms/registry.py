"""THE table of convsel's algorithms: one entry says everything about one algorithm.

Every list elsewhere (ids, ACL method names, backend implementations, timing order, report
colours, service descriptions, tuning variants) is derived from :data:`REGISTRY`. Adding an
algorithm means: an entry here (with its constraint in :mod:`.constraints`), its numpy
module, its OpenCL module (+ ``.cl``), and its tolerance row in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict
from . import constraints as c

Constraint = Callable[[ConvProblem, Rules, Mapping[str, Any]], Verdict]
Variants = Callable[[ConvProblem, Rules], list[dict[str, Any]]]


def _no_variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    return [{}]


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm.

    ``cpu_method``/``gpu_method`` are ACL's ConvolutionMethod names for it on each side;
    ``acl_pick`` says, for a problem whose ACL method maps to several algorithms, whether
    this one runs it (checked in table order). ``supports`` holds the hard constraints and
    resolves parameters; ``variants`` lists the parameter sets worth timing. ``backends``
    maps a backend to the module implementing it there.
    """

    id: str
    description: str
    cpu_method: str
    gpu_method: str
    supports: Constraint
    backends: Mapping[str, str]
    timing_rank: int
    colour: str
    variants: Variants = _no_variants
    acl_pick: Callable[[ConvProblem], bool] = field(default=lambda p: True)


def _module(backend: str, name: str) -> str:
    return f"convsel.backends.{backend}.{name}"


def _both(name: str) -> dict[str, str]:
    return {"numpy": _module("numpy", name), "opencl": _module("opencl", name)}


REGISTRY: tuple[AlgorithmSpec, ...] = (
    AlgorithmSpec(
        "direct", "direct convolution, one output at a time (grouped and depthwise too)",
        "DIRECT", "DIRECT", c.any_problem("direct"), _both("direct"), timing_rank=5,
        colour="tab:brown"),
    AlgorithmSpec(
        "gemm_1x1", "a 1x1 convolution as one GEMM over channels",
        "GEMM", "GEMM", c.gemm_1x1, _both("gemm_1x1"), timing_rank=0, colour="tab:cyan",
        acl_pick=c.is_plain_1x1),
    AlgorithmSpec(
        "im2col_gemm", "im2col into a workspace, then one GEMM",
        "GEMM", "GEMM", c.any_problem("im2col + GEMM"), _both("im2col_gemm"), timing_rank=1,
        colour="tab:blue"),
    AlgorithmSpec(
        "implicit_gemm", "implicit GEMM: NHWC input tiles gathered into local memory, "
        "register-tiled, no im2col buffer (OpenCL)",
        "GEMM", "GEMM", c.implicit_gemm, {"opencl": _module("opencl", "implicit_gemm")},
        timing_rank=1, colour="tab:olive", variants=c.implicit_gemm_variants,
        acl_pick=lambda p: False),
    AlgorithmSpec(
        "winograd", "Winograd F(tile, kernel): transforms and batched GEMMs (stride 1)",
        "WINOGRAD", "WINOGRAD", c.winograd, _both("winograd"), timing_rank=2,
        colour="tab:orange", variants=c.winograd_variants),
    AlgorithmSpec(
        "indirect_gemm", "GEMM through an indirection buffer of input pointers",
        "GEMM_CONV2D", "INDIRECT", c.ungrouped("indirect_gemm", "indirection buffer + GEMM"),
        _both("indirect_gemm"), timing_rank=3, colour="tab:green"),
    AlgorithmSpec(
        "fft", "FFT of input and filter, product in the frequency domain",
        "FFT", "FFT", c.ungrouped("fft", "FFT of input and filter; strides by subsampling"),
        {"numpy": _module("numpy", "fft")}, timing_rank=4, colour="tab:purple"),
)
