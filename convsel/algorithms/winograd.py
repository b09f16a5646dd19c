"""Winograd F(tile, kernel): input and filter transforms, one batched GEMM per transformed
tile position, output transform. Stride 1, no dilation, no groups; the tiles are those ACL's
tables pair with the kernel (transforms in :mod:`convsel.winograd_transforms`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed, passed
from .cost import Gemm, candidate_features, leading_tile
from .implicit_gemm import mma_supports, mma_variants
from .shared import ITEM, ceil_div, piece_bytes
from .spec import AlgorithmSpec, backend_modules


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


def supports(p: ConvProblem, rules: Rules, params: Mapping[str, Any]) -> Verdict:
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
    if params.get("math") is None:
        return passed(f"F({tile[0]}x{tile[1]}, {p.kh}x{p.kw})", tile=tile)
    why = mma_rule(p, params)
    if why:
        return failed(why)
    gemm = mma_supports(gemm_problem(p, tile), mma_params(params))
    if not gemm.ok:
        return failed(f"winograd's batched GEMM: {gemm.reason}")
    return passed(f"F({tile[0]}x{tile[1]}, {p.kh}x{p.kw}), its batched GEMM on TF32 tensor "
                  "cores", tile=tile, **gemm.params)


def mma_rule(p: ConvProblem, params: Mapping[str, Any]) -> str | None:
    """Why a tensor-core variant (``math`` named) cannot run ``p``, or None: TF32 only, for
    F32 data under fast math (the transformed input and filter are rounded to 10 fraction
    bits), and no split-K (the GEMMs are batched)."""
    if params.get("math") != "tf32":
        return f"winograd: math must be 'tf32' (TF32 tensor cores), got {params.get('math')!r}"
    if p.dtype != "F32" or not p.fast_math:
        return ("winograd: TF32 tensor cores round the transformed F32 input and filter to 10 "
                "fraction bits; they run only for F32 problems whose fast_math is on")
    if params.get("split") not in (None, 1):
        return (f"winograd: its GEMMs are batched and run without split-K, got split "
                f"{params['split']!r}")
    return None


def mma_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A tensor-core variant's parameters for its batched GEMM: all but the Winograd tile."""
    return {k: v for k, v in params.items() if k != "tile"}


def gemm_problem(p: ConvProblem, tile: tuple[int, int]) -> ConvProblem:
    """One point's GEMM of F(tile) as a 1x1 convolution, (tiles x C) x (C x K): the tiles
    laid out as an image of TH x TW tiles per batch item (each side stays small), float32
    (the transformed values are float whatever the problem's data type)."""
    th, tw = ceil_div(p.out_h, tile[0]), ceil_div(p.out_w, tile[1])
    return ConvProblem(p.n, th, tw, p.c, p.k, 1, 1, dtype="F32", fast_math=p.fast_math)


def variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    """One candidate per output tile paired with the kernel; under fast math (F32), each
    tile once more with its batched GEMM on TF32 tensor cores (:func:`mma_gemm_variants`)."""
    tiles = winograd_tiles(p, rules)
    exact: list[dict[str, Any]] = [{"tile": t} for t in tiles]
    if p.dtype != "F32" or not p.fast_math or p.groups != 1:
        return exact
    return exact + [{"tile": t, **v} for t in tiles for v in mma_gemm_variants(p, t)]


# The tensor-core tiles offered for Winograd's batched GEMM: those the implicit GEMM's own
# offer staged by cp.async (the GEMMs are 1x1 geometries; cp.async won most ResNet-50 layers
# there, benchmarks/NOTES-gpu.md v5), at most this many per Winograd tile.
MAX_WINOGRAD_MMA_VARIANTS = 3


def mma_gemm_variants(p: ConvProblem, tile: tuple[int, int]) -> list[dict[str, Any]]:
    """The tensor-core variants of the batched GEMM of F(tile): the implicit GEMM's own for
    that (tiles x C) x (C x K) product, less split-K and sliced K, cp.async first."""
    offered = [v for v in mma_variants(gemm_problem(p, tile))
               if "split" not in v and "warps_k" not in v]
    offered.sort(key=lambda v: v.get("load") != "async")
    return offered[:MAX_WINOGRAD_MMA_VARIANTS]


def _tile(params: Mapping[str, Any]) -> tuple[int, int]:
    tile = params.get("tile")
    if not tile:
        raise KeyError("winograd's workspace depends on its tile: pass resolved params")
    return int(tile[0]), int(tile[1])


def numpy_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    my, mx = _tile(params)
    ny, nx = my + p.kh - 1, mx + p.kw - 1
    th, tw = ceil_div(p.out_h, my), ceil_div(p.out_w, mx)
    hp, wp = th * my + p.kh - 1, tw * mx + p.kw - 1
    row_bytes = tw * ITEM * (2 * ny * nx * p.c + ny * nx * p.k + my * mx * p.k)
    return p.n * hp * wp * p.c * ITEM + piece_bytes(p.n, th, row_bytes)


def opencl_workspace(p: ConvProblem, params: Mapping[str, Any]) -> int:
    # its GEMM is batched (one per tile position): no split-K
    my, mx = _tile(params)
    ah, aw = my + p.kh - 1, mx + p.kw - 1
    tiles = p.n * ceil_div(p.out_h, my) * ceil_div(p.out_w, mx)
    return 4 * ah * aw * (tiles * p.c + tiles * p.k + p.c * p.k)


def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """Products over transformed tiles plus the transforms; the transformed input, output
    and filter as scratch memory."""
    e = p.element_size
    m = leading_tile(params)
    a = (m[0] + p.kh - 1) * (m[1] + p.kw - 1)
    tiles = p.n * math.ceil(p.out_h / max(m[0], 1)) * math.ceil(p.out_w / max(m[1], 1))
    products = 2.0 * tiles * a * p.c * p.k
    transforms = 2.0 * tiles * a * (p.c + p.k) * (m[0] + m[1] + p.kh + p.kw)
    scratch = float(tiles * a * (p.c + p.k) * e + a * p.c * p.k * e)
    # one product per point of the transformed tile: tiles x output channels, over channels
    gemm = Gemm(tiles, p.k // p.groups, p.c // p.groups, a * p.groups)
    return candidate_features(p, params, flops=products + transforms, scratch_bytes=scratch,
                              gemm=gemm)


SPEC = AlgorithmSpec(
    "winograd", "Winograd F(tile, kernel): transforms and batched GEMMs (stride 1)",
    cpu_method="WINOGRAD", gpu_method="WINOGRAD", supports=supports,
    backends=backend_modules("winograd", "numpy", "opencl"),
    timing_rank=2, colour="tab:orange",
    # Winograd transforms amplify rounding; F(4x4, 5x5) and F(2x2, 7x7) (8-point axes) most,
    # ~10x the others (see tests/algorithms/test_winograd_transforms.py).
    tolerance={"F32": 1e-4, "F16": 2e-3},
    variants=variants,
    workspace={"numpy": numpy_workspace, "opencl": opencl_workspace},
    features=features)
