"""What a model has seen: the shapes it was trained on, so that a query far from them is
answered by ACL's rules (or timed) instead of by an extrapolation.

A problem is described by a few sizes that decide which algorithm is fast, on a log2 scale
(:data:`DESCRIPTORS`: batch, map, channels in and out, channels per group, groups, kernel,
stride, dilation, output pixels, work). A query is *outside* the model's domain when:

- **range**: one descriptor lies beyond the trained range by more than :data:`MARGIN_OCTAVES`
  (a 1-channel layer when the fewest trained channels were 16; an 11x11 kernel when the
  largest trained was 7x7; stride 4 when every trained stride was 1); or
- **distance**: its nearest trained shape (Euclidean, each descriptor scaled by its spread
  over the training shapes) is farther than the farthest :data:`NEIGHBOUR_QUANTILE` of the
  training shapes' own nearest-neighbour distances (leave-one-out), times
  :data:`DISTANCE_MARGIN`: a combination no trained shape resembles, each size in range.

Both are stored with the model (:func:`describe`, JSON-ready) and checked per query
(:func:`check`). How much each rule helps is measured by ``convsel report --cv``, which judges
the predicted policy with and without abstention on every held-out family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..problem import ConvProblem

# name -> the value of a problem (before log2); the descriptors a domain is made of
DESCRIPTORS: dict[str, Any] = {
    "batch": lambda p: p.n,
    "map": lambda p: math.sqrt(p.h * p.w),
    "channels_in": lambda p: p.c,
    "channels_out": lambda p: p.k,
    "channels_per_group": lambda p: p.c // p.groups,
    "groups": lambda p: p.groups,
    "kernel": lambda p: max(p.kh, p.kw),
    "kernel_aspect": lambda p: max(p.kh, p.kw) / min(p.kh, p.kw),
    "stride": lambda p: max(p.stride),
    "dilation": lambda p: max(p.dilation),
    "output_pixels": lambda p: p.n * p.out_h * p.out_w,
    "work": lambda p: max(p.flops, 1),
}
# How far (in factors of two) beyond the trained range a descriptor may go.
MARGIN_OCTAVES = 1.0
# The nearest-neighbour distance of a query may exceed this quantile of the training shapes'
# own nearest-neighbour distances by this factor.
NEIGHBOUR_QUANTILE = 0.99
DISTANCE_MARGIN = 1.5
# Kept with the model for the distance rule (a random subset beyond this many).
MAX_POINTS = 2000


def vector(p: ConvProblem) -> np.ndarray:
    """The log2 descriptors of ``p``."""
    return np.array([math.log2(float(f(p))) for f in DESCRIPTORS.values()])


@dataclass(frozen=True)
class Domain:
    """The trained shapes' ranges and points (in log2 descriptors)."""

    low: np.ndarray
    high: np.ndarray
    scale: np.ndarray
    points: np.ndarray       # scaled by ``scale``
    radius: float            # the distance beyond which a query is far from every point

    def to_dict(self) -> dict[str, Any]:
        return {"descriptors": list(DESCRIPTORS), "low": _list(self.low),
                "high": _list(self.high), "scale": _list(self.scale),
                "points": [_list(row) for row in self.points], "radius": round(self.radius, 6),
                "margin_octaves": MARGIN_OCTAVES, "neighbour_quantile": NEIGHBOUR_QUANTILE,
                "distance_margin": DISTANCE_MARGIN}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Domain | None:
        """The stored domain, or None when it is absent or of other descriptors."""
        if not data or list(data.get("descriptors") or []) != list(DESCRIPTORS):
            return None
        points = np.asarray(data["points"], dtype=float).reshape(-1, len(DESCRIPTORS))
        return cls(np.asarray(data["low"], dtype=float), np.asarray(data["high"], dtype=float),
                   np.asarray(data["scale"], dtype=float), points, float(data["radius"]))


def _list(values: Iterable[float]) -> list[float]:
    return [round(float(v), 5) for v in values]


def describe(problems: Sequence[ConvProblem], seed: int = 0) -> Domain:
    """The domain of ``problems`` (the training shapes)."""
    x = np.array([vector(p) for p in dict.fromkeys(problems)])
    scale = np.maximum(x.std(axis=0), 0.5)    # a constant descriptor: half an octave counts
    if len(x) > MAX_POINTS:
        x = x[np.random.default_rng(seed).choice(len(x), MAX_POINTS, replace=False)]
    points = x / scale
    radius = math.inf
    if len(points) > 1:
        nearest = np.sort(_distances(points, points), axis=1)[:, 1]   # [:, 0] is itself
        radius = float(np.quantile(nearest, NEIGHBOUR_QUANTILE)) * DISTANCE_MARGIN
    low, high = x.min(axis=0), x.max(axis=0)
    return Domain(low, high, scale, points, radius)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    out: np.ndarray = np.sqrt(np.maximum(sq, 0.0))
    return out


@dataclass(frozen=True)
class Verdict:
    inside: bool
    rule: str      # "range", "distance" or "" (inside)
    reason: str


def check(domain: Domain, p: ConvProblem, rules: Sequence[str] = ("range", "distance"),
          ) -> Verdict:
    """Whether ``p`` is inside ``domain`` by ``rules``, and why not."""
    v = vector(p)
    if "range" in rules:
        names = list(DESCRIPTORS)
        below = np.flatnonzero(v < domain.low - MARGIN_OCTAVES)
        above = np.flatnonzero(v > domain.high + MARGIN_OCTAVES)
        if len(below) or len(above):
            parts = [f"{names[i]} {2 ** v[i]:.4g} below the smallest trained "
                     f"({2 ** domain.low[i]:.4g})" for i in below]
            parts += [f"{names[i]} {2 ** v[i]:.4g} above the largest trained "
                      f"({2 ** domain.high[i]:.4g})" for i in above]
            return Verdict(False, "range", "; ".join(parts))
    if "distance" in rules and math.isfinite(domain.radius):
        d = float(_distances((v / domain.scale)[None, :], domain.points).min())
        if d > domain.radius:
            return Verdict(False, "distance", f"its nearest trained shape is {d:.2f} away "
                           f"(scaled log2 sizes), beyond {domain.radius:.2f}, "
                           f"{DISTANCE_MARGIN:g}x the {NEIGHBOUR_QUANTILE:.0%} quantile of "
                           "the trained shapes' own nearest distances")
    return Verdict(True, "", "")
