"""Leave-one-net-out cross-validation of the predicted policy.

For each net of a report: fit a model (both families compared, as ``convsel fit`` does) on
the training database's timings *minus every shape of that net* (sampled shapes and the other
nets stay), then let that model pick for the net's layers, judged on the report's fresh
timings. A shape two nets share counts as the held-out net's: it never trains the model that
is judged on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidProblemError
from ..learn.fit import fit
from ..learn.stored import StoredModel
from ..policies.predicted import select_predicted
from ..rules import Rules, as_rules
from ..selection import select
from ..targets import resolve_target
from ..tuning.entry import TuningEntry
from .report import CV_POLICY, Report, pick_of


def leave_one_net_out(report: Report, training: Sequence[TuningEntry], *, target: str = "cpu",
                      rules: Rules | None = None, families: Sequence[str] | None = None,
                      statistic: str = "median",
                      on_net: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Add the :data:`CV_POLICY` pick to every layer of ``report``; returns (and stores in
    ``report.crossval``) what each net's model was trained on and how it was chosen."""
    loaded = as_rules(rules)
    resolved = resolve_target(target, loaded)
    folds: dict[str, Any] = {}
    for net in report.nets:
        if on_net is not None:
            on_net(net)
        rows = [r for r in report.layers if r.layer.net == net]
        held = {r.layer.problem for r in rows}
        train = [e for e in training if e.problem not in held]
        try:
            result = fit(train, families=families, device=report.device, statistic=statistic)
        except InvalidProblemError as exc:
            folds[net] = {"error": str(exc)}
            continue
        model = StoredModel(result.family, result.model, result.meta, 0.0)
        for r in rows:
            acl = select(r.layer.problem, resolved, rules=loaded)
            sel = select_predicted(r.layer.problem, resolved, loaded, acl,
                                   backend=report.backend, model=model)
            r.picks[CV_POLICY] = pick_of(sel, r.measurement)
        folds[net] = {"model_id": result.meta["id"], "family": result.family,
                      "training_problems": result.meta["training_problems"],
                      "held_out_problems": len(held),
                      "excluded_training_entries": len(training) - len(train),
                      "inner_held_out": result.meta["held_out"]}
    report.crossval = folds
    return folds
