"""Answers from convsel's shipped system layer (:mod:`convsel.tuning.system`), beneath the
user's tuning store: the measured and predicted policies ask it when the store has nothing
for the problem or the device, and the answer says where it came from."""

from __future__ import annotations

import dataclasses

from ..selection import Selection
from ..tuning import system
from ..verdict import TraceStep


def marked(sel: Selection, why: str = "the user's tuning store holds none") -> Selection:
    """``sel`` with its deciding (last) trace step saying it came from the shipped layer, and
    why the user's store did not answer."""
    last = sel.trace[-1]
    step = TraceStep(last.id, last.fired, f"{last.reason} [from {system.LOCATION}: {why}]")
    return dataclasses.replace(sel, trace=(*sel.trace[:-1], step))
