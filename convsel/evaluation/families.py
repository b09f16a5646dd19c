"""Families of shapes a model may never have seen: each is held out whole by
:func:`convsel.evaluation.crossval.leave_one_family_out` (train on the rest, judge on it).
They are the ones ``convsel fit`` measures extrapolation on
(:data:`convsel.learn.domain.SHAPE_FAMILIES`); a shape may belong to several.
"""

from __future__ import annotations

from ..learn.domain import SHAPE_FAMILIES as FAMILIES
from ..learn.domain import families_of

__all__ = ["FAMILIES", "families_of"]
