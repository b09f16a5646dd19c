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


# Implicit GEMM's kernel parameters: "tile" = (TM, TN, TK, WM, WN), the work-group's output
# tile (rows = output pixels, columns = output channels), the reduction slice staged in local
# memory, and each work-item's register tile; "vec" = 1 or 4 values per load; "split" = the
# split-K factor (backends choose one per device when it is not given).
# Biggest first; (32, 32) serves small maps and batch 1. Timed on an H100, every tile here won
# some ResNet-50/VGG-16/SqueezeNet layer (benchmarks/NOTES-gpu.md).
IMPLICIT_GEMM_TILES: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 128, 16, 8, 8), (128, 128, 8, 8, 8), (128, 64, 8, 8, 4), (64, 128, 8, 4, 8),
    (64, 64, 16, 4, 4), (32, 64, 16, 4, 4), (32, 32, 8, 4, 4),
)
MAX_VARIANTS = 7
_MAX_WORK_ITEMS = 1024
_MAX_LOCAL_BYTES = 32 * 1024


def tile_problem(tile: Any) -> str | None:
    """Why ``tile`` is not a valid implicit-GEMM tile (None when it is)."""
    try:
        tm, tn, tk, wm, wn = (int(v) for v in tile)
    except (TypeError, ValueError):
        return f"tile must be (TM, TN, TK, WM, WN), got {tile!r}"
    if wm not in (4, 8) or wn not in (4, 8):
        return f"tile {tile}: WM and WN (work per item) must be 4 or 8"
    if tm % wm or tn % wn:
        return f"tile {tile}: TM must be a multiple of WM and TN of WN"
    if tk not in (4, 8, 16, 32):
        return f"tile {tile}: TK must be 4, 8, 16 or 32"
    if (tm // wm) * (tn // wn) > _MAX_WORK_ITEMS:
        return f"tile {tile}: {(tm // wm) * (tn // wn)} work-items, more than {_MAX_WORK_ITEMS}"
    if tk * (tm + tn + 8) * 4 > _MAX_LOCAL_BYTES:
        return f"tile {tile}: needs more than {_MAX_LOCAL_BYTES} bytes of local memory"
    return None


def implicit_gemm(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"implicit_gemm does not run grouped convolution (groups={p.groups})")
    resolved: dict[str, Any] = {}
    if params.get("tile") is not None:
        why = tile_problem(params["tile"])
        if why:
            return failed(why)
        resolved["tile"] = tuple(int(v) for v in params["tile"])
    if params.get("vec") is not None:
        vec = int(params["vec"])
        if vec not in (1, 4):
            return failed(f"implicit_gemm: vec must be 1 or 4, got {params['vec']!r}")
        if vec == 4 and (p.c % 4 or p.k % 4):
            return failed(f"implicit_gemm: vec 4 needs C and K multiples of 4, got C={p.c}, "
                          f"K={p.k}")
        resolved["vec"] = vec
    if params.get("split") is not None:
        split = int(params["split"])
        if not 1 <= split <= 64:
            return failed(f"implicit_gemm: split (split-K factor) must be 1..64, got "
                          f"{params['split']!r}")
        resolved["split"] = split
    how = (f"tile {resolved['tile']}" if "tile" in resolved else "the device's default tile")
    return passed(f"implicit GEMM, input tiles gathered into local memory ({how})", **resolved)


def implicit_gemm_variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    """A bounded search space (at most :data:`MAX_VARIANTS`): the tiles whose work-group is
    not mostly idle on this problem, each with the widest load the channel counts allow (few
    channels load one at a time, which lets a backend merge a kernel row's taps)."""
    m = p.n * p.out_h * p.out_w
    vec = 4 if p.c % 4 == 0 and p.k % 4 == 0 and p.c >= 8 else 1
    fit = [t for t in IMPLICIT_GEMM_TILES if t[0] <= 2 * m and t[1] <= 2 * p.k]
    chosen = (fit or [IMPLICIT_GEMM_TILES[-1]])[:MAX_VARIANTS]
    return [{"tile": t, "vec": vec} for t in chosen]
