"""Families of shapes a model may never have seen: each is held out whole by
:func:`convsel.evaluation.crossval.leave_one_family_out` (train on the rest, judge on it).

A shape may belong to several families (a strided depthwise layer is in both).
"""

from __future__ import annotations

from collections.abc import Callable

from ..problem import ConvProblem

FAMILIES: dict[str, tuple[str, Callable[[ConvProblem], bool]]] = {
    "grouped": ("2 or more groups, not depthwise", lambda p: p.groups > 1 and not p.is_depthwise),
    "depthwise": ("one input channel per group", lambda p: p.is_depthwise),
    "few-channel": ("4 input channels or fewer", lambda p: p.c <= 4),
    "large-kernel": ("a kernel side of 5 or more", lambda p: max(p.kh, p.kw) >= 5),
    "strided": ("a stride above 1", lambda p: p.stride != (1, 1)),
}


def families_of(p: ConvProblem) -> list[str]:
    """The families ``p`` belongs to."""
    return [name for name, (_, member) in FAMILIES.items() if member(p)]
