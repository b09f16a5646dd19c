"""Implicit GEMM (OpenCL): NHWC input tiles gathered straight into local memory and
register-tiled; no im2col buffer.

Its kernel parameters: "tile" = (TM, TN, TK, WM, WN), the work-group's output tile (rows =
output pixels, columns = output channels), the reduction slice staged in local memory, and
each work-item's register tile; "vec" = 1 or 4 values per load; "split" = the split-K factor;
"buffers" = 1 or 2 local buffers for the staged slices (2: one barrier per slice instead of
two, twice the local memory; the backend refuses it where the device's does not hold it).
Backends choose what is not given per device.

Variants naming a ``math`` mode ("tf32", "f16") run on NVIDIA tensor cores (OpenCL inline PTX,
``convsel.backends.opencl.implicit_gemm_mma``): their parameters and constraints are the
second half of this module. TF32 is refused here, before any backend, for a problem without
fast_math.
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
# Split-K named as a choice, not left to the backend's device-class default (about two
# work-groups per compute unit, rounded down): this tile with these factors, offered after the
# tiles where the tile alone makes few work-groups (SPLIT_K_GROUPS: under 512, about 4 per SM
# of a 132-SM H100, but not under 64, where the default already splits to about two per SM)
# and each split keeps at least 8 slices of the reduction. On the H100 (ResNet-50, exact fp32,
# benchmarks/NOTES-gpu.md "Split-K as a choice") split 2 or 4 made the fastest kernel of six
# batch-32 layers (98-208 groups, the default split 1 or 2) 1-20% faster; at batch 1 (under
# 64 groups) named splits lost to the default's by 2-3x. Other tiles split, split 8 and
# 128x256 tiles won no layer.
SPLIT_K_TILE: tuple[int, int, int, int, int] = (128, 128, 16, 8, 8)
SPLIT_K_FACTORS = (2, 4)
SPLIT_K_GROUPS = (64, 512)
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


def _split(params: Mapping[str, Any], resolved: dict[str, Any]) -> str | None:
    """Check and resolve the split-K factor ("split"), for the float and tensor-core kernels
    alike; why not, or None."""
    if params.get("split") is not None:
        split = int(params["split"])
        if not 1 <= split <= 64:
            return f"split (split-K factor) must be 1..64, got {params['split']!r}"
        resolved["split"] = split
    return None


def supports(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
    if p.groups != 1:
        return failed(f"implicit_gemm does not run grouped convolution (groups={p.groups})")
    if params.get("math") is not None:
        return mma_supports(p, params)
    if params.get("mma") is not None:
        return failed("implicit_gemm: an mma tile needs a math mode (math='tf32' or 'f16')")
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
    if params.get("buffers") is not None:
        if str(params["buffers"]) not in ("1", "2"):
            return failed(f"implicit_gemm: buffers (local buffers) must be 1 or 2, got "
                          f"{params['buffers']!r}")
        resolved["buffers"] = int(params["buffers"])
    why = _split(params, resolved)
    if why:
        return failed(f"implicit_gemm: {why}")
    how = (f"tile {resolved['tile']}" if "tile" in resolved else "the device's default tile")
    return passed(f"implicit GEMM, input tiles gathered into local memory ({how})", **resolved)


def variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    """A bounded search space: the tiles whose work-group is not mostly idle on this problem
    (at most :data:`MAX_VARIANTS`), each with the widest load the channel counts allow (few
    channels load one at a time, which lets a backend merge a kernel row's taps); then the
    named split-K variants (:func:`split_k_variants`) and the tensor-core ones
    (:func:`mma_variants`)."""
    m = p.n * p.out_h * p.out_w
    vec = 4 if p.c % 4 == 0 and p.k % 4 == 0 and p.c >= 8 else 1
    fit = [t for t in IMPLICIT_GEMM_TILES if t[0] <= 2 * m and t[1] <= 2 * p.k]
    chosen = (fit or [IMPLICIT_GEMM_TILES[-1]])[:MAX_VARIANTS]
    return ([{"tile": t, "vec": vec} for t in chosen]
            + [{"tile": SPLIT_K_TILE, "vec": vec, "split": s} for s in split_k_variants(p)]
            + mma_variants(p))


def split_k_variants(p: ConvProblem) -> list[int]:
    """The split factors of :data:`SPLIT_K_FACTORS` offered with :data:`SPLIT_K_TILE`: where
    that tile fits the problem (as in :func:`variants`), makes a number of work-groups within
    :data:`SPLIT_K_GROUPS` (lowest included), and each split keeps at least 8 of its slices
    of the reduction."""
    tm, tn, tk = SPLIT_K_TILE[:3]
    m = p.n * p.out_h * p.out_w
    groups = -(-m // tm) * -(-p.k // tn)
    if tm > 2 * m or tn > 2 * p.k or not SPLIT_K_GROUPS[0] <= groups < SPLIT_K_GROUPS[1]:
        return []
    reduction = p.kh * p.kw * p.c
    return [s for s in SPLIT_K_FACTORS if reduction >= s * 8 * tk]


# Implicit GEMM on tensor cores (NVIDIA, inline PTX mma.sync; backends.opencl.mma): "math" =
# "tf32" (F32 data, only under fast math: TF32 keeps 10 fraction bits, ACL's and PyTorch's
# "may reduce accuracy") or "f16" (F16 data, float accumulation); "mma" = (BM, BN, WARPS_M,
# WARPS_N), the work-group's output tile and its warps (each warp a (BM/WARPS_M) x
# (BN/WARPS_N) tile of 16x8 fragments); "slice" = 16, 32 or 64 words of the reduction staged at a
# time; "load" = "async" (cp.async, global to local) or "registers"; "stages" = local buffers
# (registers: 1 or 2; async: 2 to 4); "split" = split-K; "warps_k" = 1 or 2 warps sharing each
# warp tile, each multiplying its share of every slice's k-steps (sliced K: their partial
# sums are added in local memory at the end). Backends fill what is not named.
# (128, 128, 2, 2): 64x64 per warp, twice the mma per fragment loaded of a 32x64 warp tile.
# (128, 64, 4, 2) and (64, 128, 2, 4): 32x32 per warp (accumulators 32 registers), so that a
# bigger block tile (fewer bytes fetched per mma) still fits 16 warps on an SM.
# Measured on the H100 (benchmarks/NOTES-gpu.md, v5 runs 1-2, ResNet-50 batch 32): (128, 128,
# 4, 4) (16 warps of 32x32, one work-group per SM) lost on every layer by 20-100%; (128, 256,
# 2, 4), (128, 128, 4, 2), (64, 128, 2, 2) and (64, 128, 2, 4) won none, nor did
# (256, 128, 4, 2) in v4. They are left out of the variants (still valid when named).
MMA_MATH = {"tf32": "F32", "f16": "F16"}
MMA_TILES: tuple[tuple[int, int, int, int], ...] = (
    (128, 128, 2, 2), (128, 64, 2, 2), (128, 64, 4, 2), (64, 64, 2, 2), (32, 64, 1, 2),
)
# the tiles also offered staged by cp.async (where 16-byte loads fit C): through L1 (.ca)
# cp.async won 15 (TF32) and 18 (F16) of 23 ResNet-50 layers in run 1, 21 and 20 in run 2
MMA_ASYNC_TILES: tuple[tuple[int, int, int, int], ...] = (
    (128, 128, 2, 2), (128, 64, 2, 2), (64, 64, 2, 2),
)
# and those also offered staged by cp.async with sliced K (warps_k 2): it won 4 + 4 layers
# with (64, 64, 2, 2) in run 2 (by 0-12%), none with (128, 64, 2, 2)
MMA_SLICED_TILES: tuple[tuple[int, int, int, int], ...] = ((64, 64, 2, 2),)
# and those also offered by cp.async with split-K 2 where the tile alone makes few work-groups
# (fewer than MMA_FEW_GROUPS, about 4 per SM of a 132-SM H100: one or two resident per SM
# leave the mma latency unhidden) but not so few that the backend's own split-K (to about two
# work-groups per SM) splits them anyway (below a quarter of it: one per SM), and the
# reduction is long enough to halve (>= 1024)
MMA_SPLIT_TILES: tuple[tuple[int, int, int, int], ...] = ((128, 64, 2, 2), (64, 64, 2, 2))
MMA_FEW_GROUPS = 512
# staged by registers, not offered where the same tile is offered by cp.async: its register
# form lost to the cp.async one on every ResNet-50 layer in v5 (by 1.14-1.44x)
MMA_REGISTER_TWINS_DROPPED: tuple[tuple[int, int, int, int], ...] = ((128, 64, 2, 2),)
MMA_SLICES = (16, 32, 64)
MMA_WARPS_K = (1, 2)
MMA_LOADS = ("async", "registers")
MAX_MMA_VARIANTS = 5
# The most local memory a variant may name: NVIDIA's OpenCL reports 48 KiB per work-group but
# builds static arrays of up to 200 KiB on the H100; the backend checks the device's own
# limit (backends/opencl/implicit_gemm_mma.local_memory_limit, probed).
MMA_LOCAL_BYTES = 192 * 1024


def mma_stage_bytes(tile: Any, slice_words: int = 16) -> int:
    """Local memory of one staged slice of an mma tile (A and B rows of ``slice_words``)."""
    return (int(tile[0]) + int(tile[1])) * int(slice_words) * 4


def mma_tile_problem(tile: Any) -> str | None:
    """Why ``tile`` is not a valid (BM, BN, WARPS_M, WARPS_N) mma tile (None when it is)."""
    try:
        bm, bn, wm, wn = (int(v) for v in tile)
    except (TypeError, ValueError):
        return f"mma must be (BM, BN, WARPS_M, WARPS_N), got {tile!r}"
    if wm < 1 or wn < 1 or wm * wn > 16:
        return f"mma {tile}: 1 to 16 warps per work-group, got {wm}x{wn}"
    if bm <= 0 or bn <= 0 or bm % (16 * wm) or bn % (8 * wn):
        return (f"mma {tile}: each warp's tile must be whole 16x8 fragments (BM a multiple "
                f"of 16*WARPS_M, BN of 8*WARPS_N)")
    if mma_stage_bytes(tile) > MMA_LOCAL_BYTES:
        return f"mma {tile}: one staged slice needs more than {MMA_LOCAL_BYTES} bytes"
    return None


def _mma_pipeline(params: Mapping[str, Any], resolved: dict[str, Any]) -> str | None:
    """Check and resolve "slice", "load" and "stages"; why not, or None."""
    if params.get("slice") is not None:
        if int(params["slice"]) not in MMA_SLICES:
            return f"slice must be 16, 32 or 64 words, got {params['slice']!r}"
        resolved["slice"] = int(params["slice"])
    if params.get("load") is not None:
        if params["load"] not in MMA_LOADS:
            return f"load must be one of {', '.join(MMA_LOADS)}, got {params['load']!r}"
        resolved["load"] = params["load"]
    if params.get("stages") is not None:
        stages = int(params["stages"])
        lowest, highest = (2, 4) if resolved.get("load") == "async" else (1, 4)
        if resolved.get("load") == "registers":
            highest = 2
        if not lowest <= stages <= highest:
            return (f"stages must be {lowest}..{highest} for load "
                    f"{resolved.get('load', 'async or registers')!r}, got {params['stages']!r}")
        resolved["stages"] = stages
        if "mma" in resolved:
            need = stages * mma_stage_bytes(resolved["mma"], resolved.get("slice", 16))
            if need > MMA_LOCAL_BYTES:
                return (f"{stages} stages of mma {resolved['mma']} need {need} bytes of local "
                        f"memory, more than {MMA_LOCAL_BYTES}")
    return None


def _warps_k(params: Mapping[str, Any], resolved: dict[str, Any]) -> str | None:
    """Check and resolve "warps_k" (sliced K); why not, or None."""
    if params.get("warps_k") is None:
        return None
    warps_k = int(params["warps_k"])
    if warps_k not in MMA_WARPS_K:
        return f"warps_k must be 1 or 2, got {params['warps_k']!r}"
    resolved["warps_k"] = warps_k
    if "mma" in resolved:
        bm, bn, wm, wn = resolved["mma"]
        if wm * wn * warps_k > 16:
            return (f"mma {resolved['mma']} with warps_k {warps_k}: {wm * wn * warps_k} "
                    f"warps, at most 16")
        if (warps_k - 1) * bm * bn * 4 > MMA_LOCAL_BYTES:
            return (f"mma {resolved['mma']} with warps_k {warps_k}: the partial sums need "
                    f"{(warps_k - 1) * bm * bn * 4} bytes of local memory, more than "
                    f"{MMA_LOCAL_BYTES}")
    return None


def mma_supports(p: ConvProblem, params: Mapping[str, Any]) -> Verdict:
    """The tensor-core variants' constraints. TF32 is refused, whatever else is asked, for a
    problem without fast math: nothing may run it there."""
    math_mode = params.get("math")
    if math_mode not in MMA_MATH:
        return failed(f"implicit_gemm: math must be one of {', '.join(MMA_MATH)}, got "
                      f"{math_mode!r}")
    if math_mode == "tf32" and not p.fast_math:
        return failed("implicit_gemm: TF32 tensor cores round F32 inputs to 10 fraction bits; "
                      "they run only when the problem's fast_math is on")
    if MMA_MATH[math_mode] != p.dtype:
        return failed(f"implicit_gemm: math {math_mode!r} runs {MMA_MATH[math_mode]} data, "
                      f"this problem is {p.dtype}")
    unknown = sorted(set(params) - {"math", "mma", "slice", "load", "stages", "split",
                                    "warps_k"})
    if unknown:
        return failed(f"implicit_gemm: {', '.join(unknown)} do not apply to the tensor-core "
                      "variants (they take math, mma, slice, load, stages, split, warps_k)")
    resolved: dict[str, Any] = {"math": math_mode}
    if params.get("mma") is not None:
        why = mma_tile_problem(params["mma"])
        if why:
            return failed(f"implicit_gemm: {why}")
        resolved["mma"] = tuple(int(v) for v in params["mma"])
    why = _mma_pipeline(params, resolved) or _warps_k(params, resolved)
    if why:
        return failed(f"implicit_gemm: {why}")
    why = _split(params, resolved)
    if why:
        return failed(f"implicit_gemm: {why}")
    how = f"mma {resolved['mma']}" if "mma" in resolved else "the device's default mma tile"
    return passed(f"implicit GEMM on {math_mode.upper()} tensor cores ({how})", **resolved)


def mma_variants(p: ConvProblem) -> list[dict[str, Any]]:
    """The tensor-core variants worth timing (at most :data:`MAX_MMA_VARIANTS` tiles staged by
    registers, those of :data:`MMA_ASYNC_TILES` by cp.async instead where 16-byte copies fit C
    (:data:`MMA_REGISTER_TWINS_DROPPED` then only so), those of :data:`MMA_SLICED_TILES` by
    cp.async with sliced K, and those of :data:`MMA_SPLIT_TILES` by cp.async with split-K 2
    where they make few work-groups): TF32 for an F32 problem with fast math, F16 for an F16
    problem, none otherwise; the tiles whose work-group is not mostly idle on this problem."""
    math_mode = "f16" if p.dtype == "F16" else "tf32" if p.fast_math else None
    if math_mode is None or p.groups != 1:
        return []
    m = p.n * p.out_h * p.out_w
    fit = [t for t in MMA_TILES if t[0] <= 2 * m and t[1] <= 2 * p.k]
    tiles = (fit or [MMA_TILES[-1]])[:MAX_MMA_VARIANTS]
    # the pipeline is the backend's choice (registers unless "load" is named), and the tiles of
    # MMA_ASYNC_TILES once more staged by cp.async where 16-byte loads fit C (the backend
    # refuses it otherwise)
    flat = p.kh * p.kw > 1 and p.c < 8          # one flat reduction (the stem)
    if flat:
        # staged by registers: the backend pads the stem's pixels to whole 8- or 16-byte
        # units (implicit_gemm_mma.PAD_STEM), which cp.async could then copy (when named),
        # but on the H100 it did not beat registers on ResNet-50's stem (NOTES-gpu.md, v8)
        return [{"math": math_mode, "mma": t} for t in tiles]
    if p.c % (4 * (2 if math_mode == "f16" else 1)) != 0:
        return [{"math": math_mode, "mma": t} for t in tiles]
    tc: list[dict[str, Any]] = [{"math": math_mode, "mma": t} for t in tiles
                                if t not in MMA_REGISTER_TWINS_DROPPED]
    tc += [{"math": math_mode, "mma": t, "load": "async"} for t in tiles
           if t in MMA_ASYNC_TILES]
    tc += [{"math": math_mode, "mma": t, "load": "async", "warps_k": 2} for t in tiles
           if t in MMA_SLICED_TILES]
    reduction = p.kh * p.kw * p.c
    tc += [{"math": math_mode, "mma": t, "load": "async", "split": 2} for t in tiles
           if t in MMA_SPLIT_TILES and reduction >= 1024
           and MMA_FEW_GROUPS // 4 <= -(-m // t[0]) * -(-p.k // t[1]) < MMA_FEW_GROUPS]
    return tc


def padded_stem_bytes(p: ConvProblem, params: Mapping[str, Any]) -> int:
    """The most a tensor-core variant's copy of a few-channel stem's input can take: the
    backend pads its pixels to whole load units (TF32: 4 floats; F16: 4 or 8 halves, a
    backend setting, so 8 here) before the convolution."""
    if "mma" not in params or not (p.kh * p.kw > 1 and p.c < 8):
        return 0
    channels = (4 if p.c <= 4 else p.c) if params.get("math") == "tf32" else 8
    return 0 if channels == p.c else p.n * p.h * p.w * channels * p.element_size


def opencl_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    return (split_k_bytes(p.n * p.out_h * p.out_w, p.k, p.kh * p.kw * p.c, params=params)
            + padded_stem_bytes(p, params))


def opencl_headroom(p: ConvProblem, params: Mapping[str, Any]) -> int:
    """The device's choices, as upper bounds: split-K unless ``params`` name the split, and
    the padded stem's copy (tensor-core variants run on NVIDIA GPUs only)."""
    split = 0 if params.get("split") is not None else split_k_bytes(
        p.n * p.out_h * p.out_w, p.k, p.kh * p.kw * p.c, params=params)
    return split + padded_stem_bytes(p, params)


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
    workspace={"opencl": opencl_workspace},
    workspace_headroom={"opencl": opencl_headroom})
