"""Implicit GEMM (OpenCL): NHWC input tiles gathered straight into local memory and
register-tiled; no im2col buffer.

Its kernel parameters: "tile" = (TM, TN, TK, WM, WN), the work-group's output tile (rows =
output pixels, columns = output channels), the reduction slice staged in local memory, and
each work-item's register tile; "vec" = 1 or 4 values per load; "split" = the split-K factor
(backends choose one per device when it is not given).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed, passed
from .shared import F16_ROUNDED, F32_EXACT, split_k_bytes
from .spec import AlgorithmSpec, backend_modules

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


def supports(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
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


def variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    """A bounded search space (at most :data:`MAX_VARIANTS`): the tiles whose work-group is
    not mostly idle on this problem, each with the widest load the channel counts allow (few
    channels load one at a time, which lets a backend merge a kernel row's taps)."""
    m = p.n * p.out_h * p.out_w
    vec = 4 if p.c % 4 == 0 and p.k % 4 == 0 and p.c >= 8 else 1
    fit = [t for t in IMPLICIT_GEMM_TILES if t[0] <= 2 * m and t[1] <= 2 * p.k]
    chosen = (fit or [IMPLICIT_GEMM_TILES[-1]])[:MAX_VARIANTS]
    return [{"tile": t, "vec": vec} for t in chosen]


def opencl_split_k(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return split_k_bytes(p.n * p.out_h * p.out_w, p.k, p.kh * p.kw * p.c, params=params)


def opencl_split_headroom(p: ConvProblem, params: Mapping[str, Any]) -> int:
    """Split-K is the device's choice (an upper bound) unless ``params`` name the split."""
    return 0 if params.get("split") is not None else opencl_split_k(p, params)


def never_picked_by_acl(p: ConvProblem) -> bool:
    """ACL has no implicit GEMM: its GEMM method runs as im2col_gemm/gemm_1x1, and this one
    is reached through tuning only."""
    return False


SPEC = AlgorithmSpec(
    "implicit_gemm", "implicit GEMM: NHWC input tiles gathered into local memory, "
    "register-tiled, no im2col buffer (OpenCL)",
    cpu_method="GEMM", gpu_method="GEMM", supports=supports,
    backends=backend_modules("implicit_gemm", "opencl"),
    timing_rank=1, colour="tab:olive",
    tolerance={"F32": F32_EXACT, "F16": F16_ROUNDED},
    variants=variants, acl_pick=never_picked_by_acl,
    workspace={"opencl": opencl_split_k},
    workspace_headroom={"opencl": opencl_split_headroom})
