"""Winograd transform matrices F(m, r), generated from interpolation points (Cook–Toom).

This module is the ONE place convsel makes Winograd transforms; every backend imports it.

1-D: ``AT, G, BT = winograd_matrices(m, r)`` computes ``m`` outputs of a correlation with an
``r``-tap filter from an input tile of ``n = m + r - 1`` values::

    y = AT @ ((G @ g) * (BT @ d))          # d: n inputs, g: r taps, y[i] = sum_k d[i+k] g[k]

with ``AT`` m×n, ``G`` n×r, ``BT`` n×n float64 arrays.

2-D: ``winograd_matrices_2d(tile, kernel)`` returns the per-axis pairs
``((AT_y, G_y, BT_y), (AT_x, G_x, BT_x))`` for an output tile (rows, cols) and a kernel
(kh, kw); a 1×N or N×1 kernel uses the trivial F(1, 1) (all three matrices ``[[1]]``) on its
size-1 axis. For an input tile ``d`` (n_y × n_x) and a filter ``g`` (kh × kw)::

    Y = AT_y @ ((G_y @ g @ G_x.T) * (BT_y @ d @ BT_x.T)) @ AT_x.T

``winograd_kron_2d`` gives the same as three flat matrices acting on row-major flattened
tiles, which is how a GEMM-based implementation applies them.

Derivation (Lavin & Gray 2015, Cook–Toom). Polynomial multiplication s = h·g (deg m-1 and
r-1) is exact through evaluation at n-1 finite points plus the point at infinity:
``V_n s = (V_m h) ⊙ (V_r g)``, where ``V_k`` is the n×k evaluation matrix whose row for
infinity picks the leading coefficient. Correlation is the transpose of that bilinear map
with respect to h, so ``AT = V_mᵀ``, ``G = V_r`` and ``BT = V_n⁻ᵀ``. Each row j of G is then
divided by ``f_j = ∏_{l≠j} (p_j − p_l)`` and row j of BT multiplied by it (Lavin's scaling,
which leaves BT with small integer-like entries). The arithmetic is exact (fractions) and
only the final matrices are rounded to float64.

Points: 0, ±1, ±1/2, ±2, ±1/4, ±4, ... taken in that order (points near ±1 keep the
Vandermonde entries small, which bounds float32 error; Barabasz et al. 2020), except where
``BEST_POINTS`` holds a set found better by search (n = 6: 0, ±2/3, ±3/2). The float32
error of every pair the heuristics can select is tested in
tests/algorithms/test_winograd_transforms.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np

from .verdict import Verdict, failed, passed

Matrices = tuple[np.ndarray, np.ndarray, np.ndarray]

_H = Fraction(1, 2)

# Default finite interpolation points, taken in order; the point at infinity is always added.
POINTS: tuple[Fraction, ...] = (
    Fraction(0), Fraction(1), Fraction(-1), _H, -_H, Fraction(2), Fraction(-2),
    Fraction(1, 4), Fraction(-1, 4), Fraction(4), Fraction(-4),
    Fraction(3, 4), Fraction(-3, 4), Fraction(4, 3), Fraction(-4, 3))

# Point sets chosen by search, per input tile size n, where they beat the default order:
# the float32 RMS error of F(4,3) and F(2,5) drops from ~2.4e-7 to ~1.6e-7 relative.
# (For n = 8, the default 0, ±1, ±1/2, ±2 was the best of all 7-subsets searched.)
BEST_POINTS: dict[int, tuple[Fraction, ...]] = {
    6: (Fraction(0), Fraction(2, 3), Fraction(-2, 3), Fraction(3, 2), Fraction(-3, 2)),
}

MAX_TILE_INPUT = len(POINTS) + 1   # the largest n = m + r - 1 this module can serve


def interpolation_points(n: int) -> tuple[Fraction, ...]:
    """The n - 1 finite points used for an input tile of n values (infinity is the n-th)."""
    return BEST_POINTS.get(n, POINTS[: n - 1])


def _evaluation(points: tuple[Fraction, ...], cols: int) -> list[list[Fraction]]:
    """n×cols matrix evaluating a polynomial of ``cols`` coefficients at the points and at
    infinity (the last row picks the leading coefficient)."""
    rows = [[p ** j for j in range(cols)] for p in points]
    rows.append([Fraction(0)] * (cols - 1) + [Fraction(1)])
    return rows


def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact Gauss–Jordan inverse of a small nonsingular rational matrix."""
    n = len(a)
    aug = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[pivot] = aug[pivot], aug[col]
        scale = aug[col][col]
        aug[col] = [v / scale for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col]
                aug[r] = [v - factor * pv for v, pv in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


def _check_sizes(m: int, r: int) -> None:
    for name, value in (("m", m), ("r", r)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: a Winograd transform is sized by a whole "
                             "number of points, at least 1")
    if m + r - 1 > MAX_TILE_INPUT:
        raise ValueError(f"F({m}, {r}): input tile m + r - 1 = {m + r - 1} exceeds "
                         f"{MAX_TILE_INPUT}, the most this module has interpolation points for")


@cache
def _matrices(m: int, r: int) -> Matrices:
    n = m + r - 1
    points = interpolation_points(n)
    at = [list(col) for col in zip(*_evaluation(points, m))]          # m × n
    g = _evaluation(points, r)                                        # n × r
    bt = [list(col) for col in zip(*_inverse(_evaluation(points, n)))]  # V_n^-T, n × n
    for j, p in enumerate(points):   # Lavin's scaling: 1/f_j into G, f_j into BT
        f = Fraction(1)
        for q in points:
            if q != p:
                f *= p - q
        g[j] = [v / f for v in g[j]]
        bt[j] = [v * f for v in bt[j]]
    out = tuple(np.array([[float(v) for v in row] for row in mat], dtype=np.float64)
                for mat in (at, g, bt))
    for mat in out:
        mat.setflags(write=False)   # cached and shared: callers must not mutate
    return out  # type: ignore[return-value]


def winograd_matrices(m: int, r: int) -> Matrices:
    """1-D Winograd F(m, r) transforms ``(AT, G, BT)``: m×n, n×r and n×n float64 arrays
    (n = m + r - 1), read-only, such that ``AT @ ((G @ g) * (BT @ d))`` is the correlation
    of the n inputs ``d`` with the r taps ``g``.

    Raises
    ------
    ValueError
        If ``m`` or ``r`` is not a positive integer or n is beyond the point table.
    """
    _check_sizes(m, r)
    return _matrices(m, r)


def winograd_matrices_2d(tile: tuple[int, int], kernel: tuple[int, int],
                         ) -> tuple[Matrices, Matrices]:
    """Per-axis transforms for F(tile, kernel): ``((AT_y, G_y, BT_y), (AT_x, G_x, BT_x))``.

    ``tile`` is the output tile (rows, cols) and ``kernel`` (kh, kw); a size-1 kernel axis
    must have a size-1 tile axis (F(1, 1) is the identity).
    """
    for axis in (0, 1):
        if kernel[axis] == 1 and tile[axis] != 1:
            raise ValueError(f"tile={tuple(tile)} with kernel={tuple(kernel)}: a 1-wide "
                             "kernel axis needs a 1-wide tile axis")
    return (winograd_matrices(tile[0], kernel[0]), winograd_matrices(tile[1], kernel[1]))


def winograd_kron_2d(tile: tuple[int, int], kernel: tuple[int, int]) -> Matrices:
    """F(tile, kernel) as flat matrices on row-major flattened 2-D tiles.

    Returns ``(AT, G, BT)`` of shapes (my·mx)×(ny·nx), (ny·nx)×(kh·kw) and (ny·nx)×(ny·nx):
    ``Y.ravel() = AT @ ((G @ g.ravel()) * (BT @ d.ravel()))``.
    """
    (at_y, g_y, bt_y), (at_x, g_x, bt_x) = winograd_matrices_2d(tile, kernel)
    return np.kron(at_y, at_x), np.kron(g_y, g_x), np.kron(bt_y, bt_x)


def tile_verdict(p: Any, params: Mapping[str, Any], who: str) -> Verdict:
    """Whether a backend can run the resolved Winograd tile ``params["tile"]`` for ``p``'s
    kernel: any tile whose input tile fits the generated transforms. The tile itself is
    chosen by the selection (from the rule tables); a backend never picks one."""
    tile = params.get("tile")
    if not tile:
        return failed(f"{who} winograd needs a resolved output tile (params['tile']); "
                      "convsel.execute resolves it from the rules")
    tile = (int(tile[0]), int(tile[1]))
    for m, r in zip(tile, (p.kh, p.kw)):
        if m < 1 or m + r - 1 > MAX_TILE_INPUT:
            return failed(f"{who} winograd: F({tile[0]}x{tile[1]}, {p.kh}x{p.kw}) needs an "
                          f"input tile of {m + r - 1} values per axis; the transforms are "
                          f"generated for 1..{MAX_TILE_INPUT}")
    return passed(f"F({tile[0]}x{tile[1]}, {p.kh}x{p.kw})", tile=tile)
