"""What a model has seen: the shapes it was trained on, so that a query far from them is
answered by ACL's rules (or timed) instead of by an extrapolation.

A problem is described by its kind (:data:`FLAGS`: depthwise, grouped, dilated, rectangular)
and a few sizes that decide which algorithm is fast, on a log2 scale (:data:`DESCRIPTORS`:
batch, map, channels in and out, channels per group, groups, kernel, stride, dilation, output
pixels, work). A query is *outside* the model's domain when:

- **kind**: no trained shape was of its kind (a depthwise layer, when the model saw none: no
  size says that a depthwise layer is an extrapolation of dense ones, yet it is);
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
from functools import cached_property
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
# Kinds of shape a model either has seen or not: a depthwise layer is no extrapolation of
# dense ones along any size (the model's "depthwise" input was 0 for every row it saw).
FLAGS: dict[str, Any] = {
    "depthwise": lambda p: p.is_depthwise,
    "grouped": lambda p: p.groups > 1 and not p.is_depthwise,
    "dilated": lambda p: max(p.dilation) > 1,
    "rectangular": lambda p: p.kh != p.kw,
}
# Families of shapes: the kinds a model may never have seen. ``convsel fit`` measures, per
# family, whether a model fitted without it still beats ACL's rules on it (extrapolation);
# ``convsel report --cv`` holds each out whole (leave-one-family-out). A shape may belong to
# several.
SHAPE_FAMILIES: dict[str, tuple[str, Any]] = {
    "grouped": ("2 or more groups, not depthwise", lambda p: p.groups > 1 and not p.is_depthwise),
    "depthwise": ("one input channel per group", lambda p: p.is_depthwise),
    "few-channel": ("4 input channels or fewer", lambda p: p.c <= 4),
    "large-kernel": ("a kernel side of 5 or more", lambda p: max(p.kh, p.kw) >= 5),
    "strided": ("a stride above 1", lambda p: p.stride != (1, 1)),
}


# The shape families that are kinds (a flag: a grouped layer is no larger or smaller dense
# one); the others lie along sizes (channels, kernel, stride). A query outside the domain by
# its kind is judged by how the model extrapolated to the kinds it was fitted without, one
# outside by its sizes by how it extrapolated along sizes.
KIND_FAMILIES = tuple(name for name in SHAPE_FAMILIES if name in FLAGS)
SIZE_FAMILIES = tuple(name for name in SHAPE_FAMILIES if name not in FLAGS)


def families_of(p: ConvProblem) -> list[str]:
    """The shape families ``p`` belongs to."""
    return [name for name, (_, member) in SHAPE_FAMILIES.items() if member(p)]


# How far (in factors of two) beyond the trained range a descriptor may go.
MARGIN_OCTAVES = 0.0
# The nearest-neighbour distance of a query may exceed this quantile of the training shapes'
# own nearest-neighbour distances by this factor.
NEIGHBOUR_QUANTILE = 0.99
DISTANCE_MARGIN = 1.5
# Kept with the model for the distance rule (a random subset beyond this many).
MAX_POINTS = 2000


def vector(p: ConvProblem) -> np.ndarray:
    """The log2 descriptors of ``p``."""
    return np.array(_log2_sizes(p))


def _log2_sizes(p: ConvProblem) -> list[float]:
    return [math.log2(float(f(p))) for f in DESCRIPTORS.values()]


@dataclass(frozen=True)
class Settings:
    """Which rules abstain, and how far out (see the module docstring)."""

    margin_octaves: float = MARGIN_OCTAVES
    flags: bool = True
    quantile: float = NEIGHBOUR_QUANTILE
    distance_margin: float = DISTANCE_MARGIN
    distance: bool = True


@dataclass(frozen=True)
class Domain:
    """The trained shapes' ranges, kinds and points (in log2 descriptors)."""

    low: np.ndarray
    high: np.ndarray
    scale: np.ndarray
    points: np.ndarray       # scaled by ``scale``
    nearest: dict[str, float]   # quantiles of the points' own nearest-neighbour distances
    flags: dict[str, list[bool]]   # the values of each flag the trained shapes had

    def radius(self, settings: Settings) -> float:
        """The distance beyond which a query is far from every trained shape."""
        key = f"{settings.quantile:g}"
        if key not in self.nearest:
            return math.inf
        return self.nearest[key] * settings.distance_margin

    def nearest_distance(self, v: Sequence[float] | np.ndarray) -> float:
        """The distance of the descriptors ``v`` (log2) to the nearest trained shape, as
        :func:`_distances` computes it, in fewer array operations: the points' squared norms
        and the doubled points once per model, the square root of the smallest square only (the same
        number as the smallest square root)."""
        a = np.array([v], dtype=float) / self.scale
        norms, doubled = self._norms_and_doubled
        sq = (a * a).sum(1, keepdims=True) + norms - a @ doubled
        return math.sqrt(max(float(sq.min()), 0.0))

    @cached_property
    def _bounds(self) -> tuple[list[float], list[float]]:
        """``low`` and ``high`` as Python floats: a dozen comparisons per query."""
        return [float(x) for x in self.low], [float(x) for x in self.high]

    @cached_property
    def _norms_and_doubled(self) -> tuple[np.ndarray, np.ndarray]:
        # (2a) @ P.T is a @ (2P).T bit for bit (doubling is exact), in the same layout
        return (self.points * self.points).sum(1)[None, :], (2.0 * self.points).T

    def to_dict(self) -> dict[str, Any]:
        return {"descriptors": list(DESCRIPTORS), "low": _list(self.low),
                "high": _list(self.high), "scale": _list(self.scale),
                "points": [_list(row) for row in self.points],
                "nearest": {k: round(v, 6) for k, v in self.nearest.items()},
                "flags": self.flags}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Domain | None:
        """The stored domain, or None when it is absent or of other descriptors."""
        if not data or list(data.get("descriptors") or []) != list(DESCRIPTORS) \
                or set(data.get("flags") or {}) != set(FLAGS):
            return None
        points = np.asarray(data["points"], dtype=float).reshape(-1, len(DESCRIPTORS))
        return cls(np.asarray(data["low"], dtype=float), np.asarray(data["high"], dtype=float),
                   np.asarray(data["scale"], dtype=float), points,
                   {str(k): float(v) for k, v in dict(data.get("nearest") or {}).items()},
                   {str(k): [bool(x) for x in v] for k, v in dict(data["flags"]).items()})


def _list(values: Iterable[float]) -> list[float]:
    return [round(float(v), 5) for v in values]


def describe(problems: Sequence[ConvProblem], seed: int = 0) -> Domain:
    """The domain of ``problems`` (the training shapes)."""
    unique = list(dict.fromkeys(problems))
    x = np.array([vector(p) for p in unique])
    scale = np.maximum(x.std(axis=0), 0.5)    # a constant descriptor: half an octave counts
    low, high = x.min(axis=0), x.max(axis=0)
    flags = {name: sorted({bool(f(p)) for p in unique}) for name, f in FLAGS.items()}
    if len(x) > MAX_POINTS:
        x = x[np.random.default_rng(seed).choice(len(x), MAX_POINTS, replace=False)]
    points = x / scale
    nearest: dict[str, float] = {}
    if len(points) > 1:
        own = np.sort(_distances(points, points), axis=1)[:, 1]   # [:, 0] is itself
        nearest = {f"{q:g}": float(np.quantile(own, q)) for q in _QUANTILES}
    return Domain(low, high, scale, points, nearest, flags)


_QUANTILES = (0.9, 0.95, 0.99, 1.0)
_ROUNDING = 1e-4


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    out: np.ndarray = np.sqrt(np.maximum(sq, 0.0))
    return out


@dataclass(frozen=True)
class Verdict:
    inside: bool
    rule: str      # "range", "distance" or "" (inside)
    reason: str


def check(domain: Domain, p: ConvProblem, rules: Sequence[str] = ("kind", "range", "distance"),
          settings: Settings | None = None) -> Verdict:
    """Whether ``p`` is inside ``domain`` by ``rules``, and why not."""
    s = settings or SETTINGS
    if "kind" in rules and s.flags:
        unseen = [name for name, f in FLAGS.items() if bool(f(p)) not in domain.flags[name]]
        if unseen:
            return Verdict(False, "kind", "no trained shape was " + " or ".join(
                name if not domain.flags[name][0] else f"not {name}" for name in unseen))
    sizes = _log2_sizes(p)
    slack = s.margin_octaves + _ROUNDING   # the stored bounds are rounded
    low, high = domain._bounds
    if "range" in rules and any(x < lo - slack or x > hi + slack
                                for x, lo, hi in zip(sizes, low, high, strict=True)):
        names = list(DESCRIPTORS)
        v = np.array(sizes)
        below = np.flatnonzero(v < domain.low - slack)
        above = np.flatnonzero(v > domain.high + slack)
        if len(below) or len(above):
            parts = [f"{names[i]} {2 ** v[i]:.4g} below the smallest trained "
                     f"({2 ** domain.low[i]:.4g})" for i in below]
            parts += [f"{names[i]} {2 ** v[i]:.4g} above the largest trained "
                      f"({2 ** domain.high[i]:.4g})" for i in above]
            return Verdict(False, "range", "; ".join(parts))
    radius = domain.radius(s)
    if "distance" in rules and s.distance and math.isfinite(radius):
        d = domain.nearest_distance(sizes)
        if d > radius:
            return Verdict(False, "distance", f"its nearest trained shape is {d:.2f} away "
                           f"(scaled log2 sizes), beyond {radius:.2f}, "
                           f"{s.distance_margin:g}x the {s.quantile:.0%} quantile of "
                           "the trained shapes' own nearest distances")
    return Verdict(True, "", "")


# The rules in force (chosen by measurement: benchmarks/results/trust/NOTES.md).
SETTINGS = Settings()
