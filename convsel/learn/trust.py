"""Whether what ``convsel fit`` measured of a model's extrapolation speaks for answering a shape
outside its training data (the predicted policy's gate), and what that gate delivers.

``fit`` fits each family without each family of shapes (grouped, depthwise, few-channel,
large-kernel, strided) and records the model's and ACL's regret on it. A query outside the
training data is judged by the families of the same nature as why it is outside: the kinds
(:data:`~convsel.learn.domain.KIND_FAMILIES`) when its kind was never trained, the size
families otherwise; of those its own when every one was measured, else all that were (every
measured family when none of that nature was). Pooled over them (weighted by their shapes),
the model must have done no worse than the rules, geometric mean and worst case alike: one
family's noise does not silence it, a pattern does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import domain

Record = Mapping[str, Any]   # one family's record: shapes, model and rules summaries


def judged_families(own: Sequence[str], rule: str, measured: Mapping[str, Record],
                    ) -> list[str]:
    """The measured families that speak for a query of families ``own``, outside by ``rule``
    (:class:`~convsel.learn.domain.Verdict`'s: "kind", "range", "distance")."""
    nature = domain.KIND_FAMILIES if rule == "kind" else domain.SIZE_FAMILIES
    mine = [f for f in own if f in nature]
    if mine and all(f in measured for f in mine):
        return mine
    return [f for f in nature if f in measured] or list(measured)


def pooled(records: Sequence[Record]) -> tuple[tuple[float, float], tuple[float, float]]:
    """((geometric-mean regret, worst) of the model, the same of the rules) over ``records``,
    each family weighted by its shapes."""
    def pool(side: str) -> tuple[float, float]:
        weights = [float(r.get("shapes") or 1) for r in records]
        logs = [math.log(float(r[side]["geomean_regret"])) for r in records]
        return (math.exp(sum(w * v for w, v in zip(weights, logs, strict=True)) / sum(weights)),
                max(float(r[side]["worst"]) for r in records))
    return pool("model"), pool("rules")


def no_worse(worst: float, rules_worst: float) -> bool:
    """Within the timings' 3% noise floor: what the timings cannot tell apart is the same."""
    from ..tuning.measure import NOISE_FLOOR

    return worst <= rules_worst * (1.0 + NOISE_FLOOR)


def trusted(records: Sequence[Record]) -> bool:
    """Whether, pooled over ``records``, the model did no worse than the rules."""
    mine, theirs = pooled(records)
    return mine[0] <= theirs[0] and no_worse(mine[1], theirs[1])


def delivered(held_out: float, measured: Mapping[str, Record]) -> float:
    """What the policy delivers, as one geometric-mean regret: the mean log regret over the
    held-out folds (``held_out``: shapes like the training ones) and over each measured
    family met as a kind of shape the model never saw, where the gate decides from the
    *other* families (as it must for a family absent from the training data): the model's
    regret where they speak for it, the rules' where they do not (it abstains)."""
    logs = [math.log(held_out)]
    for name, record in measured.items():
        others = {f: r for f, r in measured.items() if f != name}
        rule = "kind" if name in domain.KIND_FAMILIES else "range"
        judged = judged_families([], rule, others)
        answers = bool(judged) and trusted([others[f] for f in judged])
        side = "model" if answers else "rules"
        logs.append(math.log(max(float(record[side]["geomean_regret"]), 1.0)))
    return math.exp(sum(logs) / len(logs))
