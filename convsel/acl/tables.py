"""Exact-match tables (known networks, the F16 Winograd blacklist) and their near misses.

ACL matches these rows exactly, which is brittle: torchvision's SqueezeNet runs at 55×55 where
the table says 56×56. A near miss is reported in the trace so the user sees which row and
which field kept a rule from firing.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..problem import ConvProblem
from ..rules import NearMiss, TableRow


def _fields(p: ConvProblem, row: TableRow) -> list[tuple[str, Any, Any]]:
    """(field, problem value, row value) for every compared field."""
    fields = [("input (h, w)", (p.h, p.w), (row.h, row.w)),
              ("kernel (kh, kw)", (p.kh, p.kw), row.kernel),
              ("channels (c, k)", (p.c, p.k), (row.c, row.k)),
              ("stride", p.stride, row.stride),
              ("pad", p.pad, row.pad)]
    if row.layout is not None:
        fields.append(("layout", p.layout, row.layout))
    return fields


def matches(p: ConvProblem, row: TableRow) -> bool:
    return (p.h == row.h and p.w == row.w and (p.kh, p.kw) == row.kernel and p.c == row.c
            and p.k == row.k and p.stride == row.stride and p.pad == row.pad
            and (row.layout is None or row.layout == p.layout))


def find(p: ConvProblem, rows: Iterable[TableRow]) -> TableRow | None:
    return next((row for row in rows if matches(p, row)), None)


def _close(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return False
    return all(abs(x - y) <= max(1, rel * max(abs(x), abs(y))) for x, y in zip(a, b))


def near_misses(p: ConvProblem, rows: Iterable[TableRow], cfg: NearMiss) -> list[str]:
    """Describe rows that the problem misses in at most ``cfg.max_fields`` close fields."""
    notes = []
    for row in rows:
        diff = [(name, mine, theirs) for name, mine, theirs in _fields(p, row) if mine != theirs]
        if 0 < len(diff) <= cfg.max_fields and all(
                _close(mine, theirs, cfg.max_relative_difference) for _, mine, theirs in diff):
            what = "; ".join(f"{name} is {_fmt(mine)}, the row has {_fmt(theirs)}"
                             for name, mine, theirs in diff)
            notes.append(f"near miss of row '{row.id}': {what}")
    return notes


def _fmt(value: Any) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def describe(row: TableRow) -> str:
    return (f"row '{row.id}' ({row.h}x{row.w}, kernel {row.kernel[0]}x{row.kernel[1]}, "
            f"{row.c}->{row.k}, stride {row.stride[0]}x{row.stride[1]}, pad {row.pad}"
            + (f", {row.layout}" if row.layout else "") + ")")
