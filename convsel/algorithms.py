"""convsel's algorithm ids and the hard constraints of each, independent of the backend.

ACL's methods (GEMM, WINOGRAD, ...) say what ACL would run; these algorithms are what convsel
runs. ``supports()`` is pure: a backend may add constraints of its own (dtype, device limits).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from .acl.verdict import Verdict, failed, passed
from .problem import ConvProblem
from .rules import Rules

ALGORITHMS: tuple[str, ...] = (
    "direct", "im2col_gemm", "gemm_1x1", "winograd", "indirect_gemm", "fft")

METHOD_ALGORITHMS: dict[str, str] = {
    "GEMM": "im2col_gemm", "GEMM_CONV2D": "indirect_gemm", "INDIRECT": "indirect_gemm",
    "DIRECT": "direct", "WINOGRAD": "winograd", "FFT": "fft"}

FALLBACK_ALGORITHM = "im2col_gemm"   # supports every valid problem


def method_for(algorithm: str, gpu: bool) -> str:
    """ACL's name for the method an algorithm implements (indirect GEMM is GEMM_CONV2D on
    CPUs and INDIRECT on GPUs; both GEMM algorithms are ACL's GEMM)."""
    if algorithm == "indirect_gemm":
        return "INDIRECT" if gpu else "GEMM_CONV2D"
    if algorithm in ("im2col_gemm", "gemm_1x1"):
        return "GEMM"
    return next(m for m, a in METHOD_ALGORITHMS.items() if a == algorithm)


def is_plain_1x1(p: ConvProblem) -> bool:
    """1×1, unit stride, no padding, no groups: the convolution is one GEMM over channels."""
    return ((p.kh, p.kw) == (1, 1) and p.stride == (1, 1) and p.pad == (0, 0, 0, 0)
            and p.groups == 1)


def algorithm_for(method: str, p: ConvProblem) -> str:
    """The implementation that runs an ACL method on this problem."""
    if method == "GEMM" and is_plain_1x1(p):
        return "gemm_1x1"
    return METHOD_ALGORITHMS[method]


def winograd_tiles(p: ConvProblem, rules: Rules) -> list[tuple[int, int]]:
    """Every output tile (rows, cols) that some backend's table pairs with this kernel;
    the CPU table's choices first, in its order of preference."""
    return list(_tiles_by_kernel(rules).get((p.kh, p.kw), ()))


@lru_cache(maxsize=8)
def _tiles_by_kernel(rules: Rules) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
    pairs = [(e.kernel, e.tile) for rows in rules.cpu.winograd.values() for e in rows]
    pairs += [(e.kernel, e.tile) for rows in rules.gpu.winograd.pairs.values() for e in rows]
    table: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for kernel, tile in pairs:
        if tile not in table.setdefault(kernel, []):
            table[kernel].append(tile)
    return {kernel: tuple(tiles) for kernel, tiles in table.items()}


def _direct(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    return passed("direct runs every problem, grouped and dilated included")


def _im2col(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    return passed("im2col + GEMM runs every problem, grouped and dilated included")


def _gemm_1x1(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    if (p.kh, p.kw) != (1, 1):
        return failed(f"gemm_1x1 needs a 1x1 kernel, got {p.kh}x{p.kw}")
    if p.pad != (0, 0, 0, 0):
        return failed(f"gemm_1x1 needs zero padding, got {p.pad}")
    if p.groups != 1:
        return failed(f"gemm_1x1 does not run grouped convolution (groups={p.groups})")
    return passed("1x1 kernel: one GEMM over channels (strided by subsampling)")


def _winograd(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"winograd does not run grouped convolution (groups={p.groups})")
    if p.stride != (1, 1):
        return failed(f"winograd needs stride 1x1, got {p.stride[0]}x{p.stride[1]}")
    if p.dilation != (1, 1):
        return failed(f"winograd needs dilation 1x1, got {p.dilation[0]}x{p.dilation[1]}")
    tiles = winograd_tiles(p, rules)
    if not tiles:
        return failed(f"no Winograd transform for a {p.kh}x{p.kw} kernel")
    tile = tuple(params.get("tile") or tiles[0])
    if tile not in tiles:
        return failed(f"tile {tile} is not paired with a {p.kh}x{p.kw} kernel; "
                      f"choose from {tiles}")
    return passed(f"F({tile[0]}x{tile[1]}, {p.kh}x{p.kw})", tile=tile)


def _indirect(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"indirect_gemm does not run grouped convolution (groups={p.groups})")
    return passed("indirection buffer + GEMM")


def _fft(p: ConvProblem, rules: Rules, params: dict[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"fft does not run grouped convolution (groups={p.groups})")
    return passed("FFT of input and filter; strides by subsampling")


SUPPORTS: dict[str, Callable[[ConvProblem, Rules, dict[str, Any]], Verdict]] = {
    "direct": _direct, "im2col_gemm": _im2col, "gemm_1x1": _gemm_1x1,
    "winograd": _winograd, "indirect_gemm": _indirect, "fft": _fft}


def supports(algorithm: str, p: ConvProblem, rules: Rules,
             params: dict[str, Any] | None = None) -> Verdict:
    """Whether convsel's ``algorithm`` can compute ``p`` (any backend), with the reason."""
    check = SUPPORTS.get(algorithm)
    if check is None:
        return failed(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return check(p, rules, params or {})
