"""What a cost model sees of one candidate: the problem's sizes and work, the algorithm and its
variant parameters, and what that algorithm moves through memory.

One row per (problem, algorithm, params). Every feature is a plain float computed from the
problem alone, so a model trained on one machine's timings can rank candidates of any shape.
The names are stored with the model: a model whose feature list differs from this code's is
refused, not silently misread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..algorithms import ALGORITHMS
from ..problem import ConvProblem

FEATURES_VERSION = "2"   # 2: the tiled GEMM's work-group tile, its count and fill


def _tile(params: Mapping[str, Any]) -> tuple[int, int]:
    tile = params.get("tile")
    if not tile:
        return (0, 0)
    return (int(tile[0]), int(tile[1]))


def workspace_bytes(p: ConvProblem, algorithm: str, params: Mapping[str, Any]) -> float:
    """The scratch memory ``algorithm`` needs beyond input, weights and output (estimate)."""
    e = p.element_size
    out_pixels = p.n * p.out_h * p.out_w
    if algorithm == "im2col_gemm":
        return float(out_pixels * p.kh * p.kw * p.c // p.groups * e)
    if algorithm == "indirect_gemm":
        return float(out_pixels * p.kh * p.kw * 8)       # one pointer per tap
    if algorithm == "winograd":
        m = _tile(params)
        a = (m[0] + p.kh - 1) * (m[1] + p.kw - 1)
        tiles = p.n * math.ceil(p.out_h / max(m[0], 1)) * math.ceil(p.out_w / max(m[1], 1))
        return float(tiles * a * (p.c + p.k) * e + a * p.c * p.k * e)
    if algorithm == "fft":
        fh, fw = p.h + p.pad[0] + p.pad[1], p.w + p.pad[2] + p.pad[3]
        bins = fh * (fw // 2 + 1)
        return float(bins * (p.n * p.c + p.c * p.k + p.n * p.k) * 8)
    return 0.0


def algorithm_flops(p: ConvProblem, algorithm: str, params: Mapping[str, Any]) -> float:
    """Multiply-adds x2 that ``algorithm`` actually does (transforms included, roughly)."""
    direct = float(p.flops)
    if algorithm == "winograd":
        m = _tile(params)
        a = (m[0] + p.kh - 1) * (m[1] + p.kw - 1)
        tiles = p.n * math.ceil(p.out_h / max(m[0], 1)) * math.ceil(p.out_w / max(m[1], 1))
        products = 2.0 * tiles * a * p.c * p.k
        transforms = 2.0 * tiles * a * (p.c + p.k) * (m[0] + m[1] + p.kh + p.kw)
        return products + transforms
    if algorithm == "fft":
        fh, fw = p.h + p.pad[0] + p.pad[1], p.w + p.pad[2] + p.pad[3]
        bins = fh * (fw // 2 + 1)
        ffts = 5.0 * fh * fw * math.log2(max(fh * fw, 2)) * (p.n * p.c + p.c * p.k + p.n * p.k)
        return 8.0 * bins * p.n * p.c * p.k + ffts
    return direct


def problem_features(p: ConvProblem) -> dict[str, float]:
    e = p.element_size
    in_bytes = p.n * p.h * p.w * p.c * e
    out_bytes = p.n * p.out_h * p.out_w * p.k * e
    w_bytes = p.k * p.kh * p.kw * (p.c // p.groups) * e
    moved = in_bytes + out_bytes + w_bytes
    return {
        "n": p.n, "h": p.h, "w": p.w, "c": p.c, "k": p.k, "kh": p.kh, "kw": p.kw,
        "stride_y": p.stride[0], "stride_x": p.stride[1],
        "dilation_y": p.dilation[0], "dilation_x": p.dilation[1],
        "pad": sum(p.pad), "groups": p.groups, "depthwise": float(p.is_depthwise),
        "c_per_group": p.c // p.groups, "k_per_group": p.k // p.groups,
        "out_h": p.out_h, "out_w": p.out_w, "out_pixels": p.n * p.out_h * p.out_w,
        "log_flops": math.log10(max(p.flops, 1)), "log_bytes": math.log10(moved),
        "intensity": p.flops / moved, "log_weights_bytes": math.log10(w_bytes),
    }


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


def candidate_features(p: ConvProblem, algorithm: str,
                       params: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The feature row of one candidate (see :data:`FEATURE_NAMES` for the order)."""
    params = params or {}
    row = problem_features(p)
    tile = _tile(params)
    work = algorithm_flops(p, algorithm, params)
    ws = workspace_bytes(p, algorithm, params)
    row.update({f"alg_{a}": float(a == algorithm) for a in ALGORITHMS})
    row.update({"tile_y": tile[0], "tile_x": tile[1],
                "log_alg_flops": math.log10(max(work, 1.0)),
                "log_workspace": math.log10(ws + 1.0),
                "alg_intensity": work / (ws + 10 ** row["log_bytes"]),
                "log_reduction": math.log10(p.kh * p.kw * (p.c // p.groups)),
                **gemm_tiling(p, params)})
    return {k: float(v) for k, v in row.items()}


FEATURE_NAMES: tuple[str, ...] = tuple(candidate_features(
    ConvProblem(1, 8, 8, 4, 4, 3, 3), "direct"))
