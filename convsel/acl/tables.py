"""Exact-match tables (known networks, the F16 Winograd blacklist) and their near misses.

ACL matches these rows exactly, which is brittle: torchvision's SqueezeNet runs at 55×55 where
the table says 56×56. A near miss is reported in the trace so the user sees which row and
which field kept a rule from firing.
"""

from __future__ import annotations

import re
from typing import Any

from ..problem import ConvProblem
from ..rules import NearMiss, TableRow

_FIELD_NAMES = ("input (h, w)", "kernel (kh, kw)", "channels (c, k)", "stride", "pad", "layout")
Key = tuple[Any, ...]


def _problem_key(p: ConvProblem) -> Key:
    return ((p.h, p.w), (p.kh, p.kw), (p.c, p.k), p.stride, p.pad, p.layout)


def _row_key(row: TableRow, layout: str) -> Key:
    return ((row.h, row.w), row.kernel, (row.c, row.k), row.stride, row.pad,
            row.layout or layout)


class _Index:
    """A table's rows hashed by their key, and by their key less each single field, so that
    exact matches and one-field near misses are dictionary look-ups (select() is hot)."""

    def __init__(self, rows: tuple[TableRow, ...]) -> None:
        self.rows = rows
        self.exact: dict[Key, TableRow] = {}
        self.without: list[dict[Key, list[TableRow]]] = [{} for _ in _FIELD_NAMES]
        for row in rows:
            for layout in ((row.layout,) if row.layout else ("NHWC", "NCHW")):
                key = _row_key(row, layout)
                self.exact.setdefault(key, row)
                for i, table in enumerate(self.without):
                    bucket = table.setdefault(key[:i] + key[i + 1:], [])
                    if row not in bucket:
                        bucket.append(row)


_INDEXES: dict[int, _Index] = {}


def _index(rows: tuple[TableRow, ...]) -> _Index:
    index = _INDEXES.get(id(rows))
    if index is None or index.rows is not rows:   # id() may be reused by a new rules object
        index = _INDEXES[id(rows)] = _Index(rows)
    return index


def find(p: ConvProblem, rows: tuple[TableRow, ...]) -> TableRow | None:
    return _index(rows).exact.get(_problem_key(p))


def _close(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, str):
        return True    # a row for the other layout is worth naming too
    return all(abs(x - y) <= max(1, rel * max(abs(x), abs(y))) for x, y in zip(a, b))


def near_misses(p: ConvProblem, rows: tuple[TableRow, ...], cfg: NearMiss) -> list[str]:
    """Describe rows that the problem misses in exactly one field, by a small difference."""
    if not cfg.enabled:
        return []
    key = _problem_key(p)
    notes = []
    for i, table in enumerate(_index(rows).without):
        for row in table.get(key[:i] + key[i + 1:], ()):
            theirs = _row_key(row, p.layout)[i]
            if theirs != key[i] and _close(key[i], theirs, cfg.max_relative_difference):
                notes.append(f"near miss of row '{row.id}': {_FIELD_NAMES[i]} is "
                             f"{_fmt(key[i])}, the row has {_fmt(theirs)}")
    return notes


# Reads back what near_misses() writes; kept beside it so the two cannot drift apart.
_NEAR_MISS = re.compile(r"near miss of row '(?P<row>[^']+)': (?P<field>.+?) is "
                        r"(?P<problem_value>\S+), the row has (?P<row_value>[^;]+)")


def parse_near_misses(text: str) -> list[dict[str, str]]:
    """The near misses named in a trace reason: row id, field, problem's and row's values."""
    return [m.groupdict() for m in _NEAR_MISS.finditer(text)]


def _fmt(value: Any) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def describe(row: TableRow) -> str:
    return (f"row '{row.id}' ({row.h}x{row.w}, kernel {row.kernel[0]}x{row.kernel[1]}, "
            f"{row.c}->{row.k}, stride {row.stride[0]}x{row.stride[1]}, pad {row.pad}"
            + (f", {row.layout}" if row.layout else "") + ")")
