"""The "measured" policy, composed: the tuning database's timings of this exact problem
(:mod:`convsel.policies.measured`), else this device's fitted model
(:mod:`convsel.policies.predicted`), else ACL's rules. Each source knows nothing of the
others; the order, and the trace that says which one answered, are stated here."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from .. import threads
from ..backends.registry import on_host
from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection, acl_selection
from ..targets import Target
from ..tuning.db import TuningDB
from ..verdict import TraceStep
from .measured import NoEntry, answer_from_db
from .predicted import remembered, select_predicted


@dataclass(frozen=True)
class MeasuredPolicy:
    """Answer from the tuning database's timings on ``backend``/``device``, else from the
    device's fitted model, else ACL's rules.

    ``db`` defaults to ``$CONVSEL_TUNING_DB`` or the user's data directory; ``tune=True``
    (or ``"auto"``) times an unseen problem now and records it, spending at most about
    ``tune_budget_s`` seconds (None: no limit); ``verify=True`` races an entry's answer
    against its runner-up the first time this process uses it (MIOpen's trust-but-verify).
    Its fields are its options (see :func:`convsel.policies.get_policy`, which checks them).
    Each problem's answer is kept per process until the database changes.
    """

    backend: str = "numpy"
    device: Any = None
    db: TuningDB | str | os.PathLike[str] | None = None
    tune: bool | str = False
    tune_budget_s: float | None = None
    verify: bool = False
    name: ClassVar[str] = "measured"

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        def answer() -> Selection:
            acl = acl_selection(problem, target, rules)
            found = answer_from_db(problem, target, rules, acl, backend=self.backend,
                                   device=self.device, db=self.db,
                                   tune=self.tune in (True, "auto"),
                                   tune_budget_s=self.tune_budget_s, verify=self.verify)
            if not isinstance(found, NoEntry):
                return found
            return _from_model(problem, target, rules, acl, self.backend, self.device, found)
        # an answer names threads other than its timing's: other threads are another key
        now = tuple(threads.current().items()) if on_host(self.backend) else ()
        return remembered(self.db, ("measured", self, problem, target, rules, now), answer)


def _from_model(problem: ConvProblem, target: Target, rules: Rules, acl: Selection,
                backend: str, device: Any, missing: NoEntry) -> Selection:
    """No exact measurement: the device's fitted model answers if there is one, else the
    rules; the trace says which."""
    sel = select_predicted(problem, target, rules, acl, backend=backend, device=device,
                           db=missing.database, policy="measured")
    if sel.source == "model":
        note = TraceStep("measured.no-entry", False, f"{missing.reason}; answered from the "
                         "fitted model (next step)")
        return dataclasses.replace(sel, trace=(*sel.trace[:-1], note, sel.trace[-1]))
    return dataclasses.replace(sel, trace=(*sel.trace[:-1], TraceStep(
        "measured.no-entry", False, f"{missing.reason}, and {sel.trace[-1].reason} (run "
        "`convsel tune`, or choose(..., policy=\"measured\", tune=True) or prepare/conv2d "
        "with tune=\"auto\", to measure it)")))
