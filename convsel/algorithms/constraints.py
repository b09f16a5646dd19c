"""The hard constraints of each algorithm, independent of the backend.

Each predicate takes the problem, the rule data and the caller's parameters, and answers a
Verdict whose ``params`` are the parameters resolved for this problem (the Winograd tile the
caller asked for, or the first that the rule tables pair with the kernel). Backends add their
own constraints (dtype, device limits) in their modules' ``supports()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed, passed


def is_plain_1x1(p: ConvProblem) -> bool:
    """1×1, unit stride, no padding, no groups: the convolution is one GEMM over channels."""
    return ((p.kh, p.kw) == (1, 1) and p.stride == (1, 1) and p.pad == (0, 0, 0, 0)
            and p.groups == 1)


def winograd_tiles(p: ConvProblem, rules: Rules) -> list[tuple[int, int]]:
    """Every output tile (rows, cols) that some table of ``rules`` pairs with this kernel;
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


def any_problem(name: str) -> Any:
    def check(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
        return passed(f"{name} runs every problem, grouped and dilated included")
    return check


def gemm_1x1(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
    if (p.kh, p.kw) != (1, 1):
        return failed(f"gemm_1x1 needs a 1x1 kernel, got {p.kh}x{p.kw}")
    if p.pad != (0, 0, 0, 0):
        return failed(f"gemm_1x1 needs zero padding, got {p.pad}")
    if p.groups != 1:
        return failed(f"gemm_1x1 does not run grouped convolution (groups={p.groups})")
    return passed("1x1 kernel: one GEMM over channels (strided by subsampling)")


def winograd(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"winograd does not run grouped convolution (groups={p.groups})")
    if p.stride != (1, 1):
        return failed(f"winograd needs stride 1x1, got {p.stride[0]}x{p.stride[1]}")
    if p.dilation != (1, 1):
        return failed(f"winograd needs dilation 1x1, got {p.dilation[0]}x{p.dilation[1]}")
    tiles = winograd_tiles(p, rules)
    if not tiles:
        return failed(f"no Winograd transform for a {p.kh}x{p.kw} kernel")
    asked = params.get("tile")
    tile = (int(asked[0]), int(asked[1])) if asked else tiles[0]
    if tile not in tiles:
        return failed(f"tile {tile} is not paired with a {p.kh}x{p.kw} kernel; "
                      f"choose from {tiles}")
    return passed(f"F({tile[0]}x{tile[1]}, {p.kh}x{p.kw})", tile=tile)


def winograd_variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    return [{"tile": t} for t in winograd_tiles(p, rules)]


def ungrouped(name: str, reason: str) -> Any:
    def check(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
        if p.groups != 1:
            return failed(f"{name} does not run grouped convolution (groups={p.groups})")
        return passed(reason)
    return check
