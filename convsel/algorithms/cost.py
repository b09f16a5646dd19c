"""The algorithm's part of a cost model's feature row, as the homes compute it.

:mod:`convsel.learn.features` builds a row from the problem's features, a one-hot of the
algorithm, and what the algorithm's home (its ``features`` hook) says of the candidate: the
names in :data:`CANDIDATE_FEATURES`, every one of them, whatever the algorithm.
:func:`candidate_features` computes them from the work the algorithm does and the scratch
memory it moves (the cost model's estimate, not the kernels' exact workspace); a home whose
work differs from the direct convolution's passes its own figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem

CANDIDATE_FEATURES: tuple[str, ...] = (
    "tile_y", "tile_x", "log_alg_flops", "log_workspace", "alg_intensity", "log_reduction",
    "tile_k", "tile_warp", "vec", "log_workgroups", "tile_fill")


def leading_tile(params: Mapping[str, Any]) -> tuple[int, int]:
    """The first two entries of ``params["tile"]`` ((0, 0) without a tile): Winograd's
    output tile, the tiled GEMM's work-group rows and columns."""
    tile = params.get("tile")
    if not tile:
        return (0, 0)
    return (int(tile[0]), int(tile[1]))


def moved_bytes(p: ConvProblem) -> int:
    """Input, output and weights: what any algorithm reads and writes at least once."""
    e = p.element_size
    in_bytes = p.n * p.h * p.w * p.c * e
    out_bytes = p.n * p.out_h * p.out_w * p.k * e
    w_bytes = p.k * p.kh * p.kw * (p.c // p.groups) * e
    return in_bytes + out_bytes + w_bytes


def gemm_tiling(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
    """How a tiled GEMM's ``(TM, TN, TK, WM, WN)`` work-group tile covers the problem's
    (output pixels x output channels) matrix: how many work-groups, how full they are. On a
    GPU these decide more than the FLOPs do (too few groups leave compute units idle, ragged
    edges waste a tile's work); zeros for any candidate without such a tile."""
    tile = params.get("tile") or ()
    if len(tile) < 5:
        return {"tile_k": 0.0, "tile_warp": 0.0, "vec": float(params.get("vec") or 0),
                "log_workgroups": 0.0, "tile_fill": 0.0}
    tm, tn, tk, wm, wn = (int(v) for v in tile[:5])
    m, n = p.n * p.out_h * p.out_w, p.k // p.groups
    groups_m, groups_n = math.ceil(m / tm), math.ceil(n / tn)
    return {"tile_k": tk, "tile_warp": wm * wn, "vec": float(params.get("vec") or 1),
            "log_workgroups": math.log10(groups_m * groups_n * p.groups),
            "tile_fill": m * n / (groups_m * tm * groups_n * tn)}


def candidate_features(p: ConvProblem, params: Mapping[str, Any], flops: float | None = None,
                       scratch_bytes: float = 0.0) -> dict[str, float]:
    """The :data:`CANDIDATE_FEATURES` of a candidate doing ``flops`` (multiply-adds x2,
    transforms included; default: the direct convolution's) and moving ``scratch_bytes``
    beyond input, weights and output."""
    tile = leading_tile(params)
    work = float(p.flops) if flops is None else flops
    row = {"tile_y": tile[0], "tile_x": tile[1],
           "log_alg_flops": math.log10(max(work, 1.0)),
           "log_workspace": math.log10(scratch_bytes + 1.0),
           "alg_intensity": work / (scratch_bytes + 10 ** math.log10(moved_bytes(p))),
           "log_reduction": math.log10(p.kh * p.kw * (p.c // p.groups)),
           **gemm_tiling(p, params)}
    return {k: float(v) for k, v in row.items()}
