"""The algorithm's part of a cost model's feature row, as the homes compute it.

:mod:`convsel.learn.features` builds a row from the problem's features, a one-hot of the
algorithm, and what the algorithm's home (its ``features`` hook) says of the candidate: the
names in :data:`CANDIDATE_FEATURES`, every one of them, whatever the algorithm.
:func:`candidate_features` computes them from the work the algorithm does and the scratch
memory it moves (the cost model's estimate, not the kernels' exact workspace), and the
matrix products the algorithm reduces the convolution to (:class:`Gemm`: their sizes, how many
and how much arithmetic each does per element it touches: a thousand 9x1 products run
nothing like one product of the same work); a home whose work differs from the direct
convolution's as a grouped GEMM passes its own figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..problem import ConvProblem

CANDIDATE_FEATURES: tuple[str, ...] = (
    "tile_y", "tile_x", "log_alg_flops", "log_workspace", "alg_intensity", "log_reduction",
    "tile_k", "tile_warp", "vec", "log_workgroups", "tile_fill", "split_k",
    "log_gemm_m", "log_gemm_n", "log_gemm_k", "log_gemm_calls", "log_gemm_intensity")


@dataclass(frozen=True)
class Gemm:
    """The matrix products an algorithm does: ``calls`` products of (m x k) by (k x n)."""

    m: float
    n: float
    k: float
    calls: float

    @classmethod
    def grouped(cls, p: ConvProblem, taps_in_k: bool = True) -> Gemm:
        """The convolution as one GEMM per group: output pixels x output channels of the
        group, reducing over the group's input channels (and the kernel's taps, unless
        ``taps_in_k`` is false: then one product per tap, as a direct convolution does)."""
        taps = p.kh * p.kw
        k = (p.c // p.groups) * (taps if taps_in_k else 1)
        return cls(p.n * p.out_h * p.out_w, p.k // p.groups, k,
                   p.groups * (1 if taps_in_k else taps))

    def features(self) -> dict[str, float]:
        m, n, k = max(self.m, 1.0), max(self.n, 1.0), max(self.k, 1.0)
        return {"log_gemm_m": math.log10(m), "log_gemm_n": math.log10(n),
                "log_gemm_k": math.log10(k), "log_gemm_calls": math.log10(max(self.calls, 1)),
                # multiply-adds per element read or written: what a BLAS call can reuse
                "log_gemm_intensity": math.log10(m * n * k / (m * k + k * n + m * n))}


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
    edges waste a tile's work); zeros for any candidate without such a tile. A named split-K
    factor is a feature of its own in either case."""
    # a named split-K factor (0: the backend's own per-device choice), which also multiplies
    # the work-groups a split variant launches
    split = float(params.get("split") or 0)
    tile = params.get("tile") or ()
    if len(tile) < 5:
        return {"tile_k": 0.0, "tile_warp": 0.0, "vec": float(params.get("vec") or 0),
                "log_workgroups": 0.0, "tile_fill": 0.0, "split_k": split}
    tm, tn, tk, wm, wn = (int(v) for v in tile[:5])
    m, n = p.n * p.out_h * p.out_w, p.k // p.groups
    groups_m, groups_n = math.ceil(m / tm), math.ceil(n / tn)
    return {"tile_k": tk, "tile_warp": wm * wn, "vec": float(params.get("vec") or 1),
            "log_workgroups": math.log10(groups_m * groups_n * p.groups * max(split, 1.0)),
            "tile_fill": m * n / (groups_m * tm * groups_n * tn), "split_k": split}


def candidate_features(p: ConvProblem, params: Mapping[str, Any], flops: float | None = None,
                       scratch_bytes: float = 0.0,
                       gemm: Gemm | None = None) -> dict[str, float]:
    """The :data:`CANDIDATE_FEATURES` of a candidate doing ``flops`` (multiply-adds x2,
    transforms included; default: the direct convolution's), moving ``scratch_bytes``
    beyond input, weights and output, through the products ``gemm`` (default: one GEMM per
    group, :meth:`Gemm.grouped`)."""
    tile = leading_tile(params)
    work = float(p.flops) if flops is None else flops
    row = {"tile_y": tile[0], "tile_x": tile[1],
           "log_alg_flops": math.log10(max(work, 1.0)),
           "log_workspace": math.log10(scratch_bytes + 1.0),
           "alg_intensity": work / (scratch_bytes + 10 ** math.log10(moved_bytes(p))),
           "log_reduction": math.log10(p.kh * p.kw * (p.c // p.groups)),
           **gemm_tiling(p, params), **(gemm or Gemm.grouped(p)).features()}
    return {k: float(v) for k, v in row.items()}
