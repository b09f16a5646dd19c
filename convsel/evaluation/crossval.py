"""Cross-validation of the predicted policy, as a stranger would meet it.

Leave-one-net-out: for each net of a report, fit a model (every family compared with ACL's
rules, as ``convsel fit`` does) on the training database's timings *minus every shape of that
net* (sampled shapes and the other nets stay), then let that model pick for the net's layers,
judged on the report's fresh timings. A shape two nets share counts as the held-out net's.

Leave-one-family-out: the same for each family of :mod:`.families` (grouped, depthwise,
few-channel, large-kernel, strided): the model is fitted without *any* shape of the family,
sampled or from a net, and judged on the report's layers of that family, beside ACL's rules
on the same layers. That is the question a new user's layers ask: what does the model do on
a kind of shape it never saw? Where the training database timed some of those layers (the
nets'), its own winners are charged on the fresh run beside them: the floor that noise and
drift between two runs set for any policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidProblemError
from ..learn.fit import fit
from ..learn.stored import StoredModel
from ..policies.predicted import DEFAULT_TOP, select_predicted, shortlist
from ..rules import Rules, as_rules
from ..selection import select
from ..targets import Target, resolve_target
from ..tuning.entry import TuningEntry
from .families import FAMILIES
from .report import CV_POLICY, LayerResult, Pick, Report, pick_of, summarize, timed_pick


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
            result = fit(train, families=families, device=report.device, statistic=statistic,
                         target=target, rules=loaded)
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


# The closing targets of issue 22, per held-out family.
TARGET_REGRET = 1.03
TARGET_WORST = 1.5


def leave_one_family_out(report: Report, training: Sequence[TuningEntry], *,
                         target: str = "cpu", rules: Rules | None = None,
                         families: Sequence[str] | None = None, statistic: str = "median",
                         on_family: Callable[[str], None] | None = None,
                         ) -> dict[str, Any]:
    """Per shape family: fit without any shape of it, judge the model's picks and ACL's on
    the report's layers of that family; stored in (and returned as) ``report.family_cv``."""
    loaded = as_rules(rules)
    resolved = resolve_target(target, loaded)
    out: dict[str, Any] = {}
    for name, (description, member) in FAMILIES.items():
        rows = [r for r in report.layers if member(r.layer.problem)]
        if not rows:
            continue
        if on_family is not None:
            on_family(name)
        train = [e for e in training if not member(e.problem)]
        try:
            result = fit(train, families=families, device=report.device, statistic=statistic,
                         target=target, rules=loaded)
        except InvalidProblemError as exc:
            out[name] = {"description": description, "error": str(exc)}
            continue
        model = StoredModel(result.family, result.model, result.meta, 0.0)
        acl: list[tuple[LayerResult, Pick]] = []
        predicted: list[tuple[LayerResult, Pick]] = []
        always: list[tuple[LayerResult, Pick]] = []     # the same model, never abstaining
        tuned: list[tuple[LayerResult, Pick]] = []      # tune="auto": extrapolations timed
        abstained = []
        timed_count = candidate_count = 0
        for r in rows:
            rules_sel = select(r.layer.problem, resolved, rules=loaded)
            sel = select_predicted(r.layer.problem, resolved, loaded, rules_sel,
                                   backend=report.backend, model=model)
            bold = select_predicted(r.layer.problem, resolved, loaded, rules_sel,
                                    backend=report.backend, model=model, abstain=False)
            acl.append((r, pick_of(rules_sel, r.measurement)))
            predicted.append((r, pick_of(sel, r.measurement)))
            always.append((r, pick_of(bold, r.measurement)))
            abstains = sel.trace[-1].id == "predicted.outside"
            if abstains:
                abstained.append(r.layer.label)
            if abstains or any(s.id == "predicted.outside-trusted" for s in sel.trace):
                labels = _shortlist_of(r, resolved, loaded, model, report.backend)
                timed_count += len(labels)
                candidate_count += len(r.measurement.timings)
                tuned.append((r, timed_pick(labels, r.measurement, "tune: the shortlist timed",
                                            gpu=resolved.is_gpu)))
            else:
                tuned.append(predicted[-1])
        # The training run's own winners on the family's layers it timed (the nets' layers):
        # how far one run of timings repeats, the floor for a policy that did not time them.
        retimed = [(r, r.picks["measured"]) for r in rows if "measured" in r.picks]
        predicted_retimed = [(r, p) for r, p in predicted if "measured" in r.picks]
        out[name] = {"description": description, "model_id": result.meta["id"],
                     "family": result.family, "accepted": result.meta["accepted"],
                     "verdict": result.meta["verdict"],
                     "training_problems": result.meta["training_problems"],
                     "excluded_training_entries": len(training) - len(train),
                     "acl": summarize(acl), "predicted": summarize(predicted),
                     "predicted_never_abstaining": summarize(always),
                     "sources": _count(p.source for _, p in predicted),
                     "abstained": len(abstained),
                     "predicted_tuned": summarize(tuned),
                     "tuned_timed_candidates": timed_count,
                     "tuned_candidates": candidate_count,
                     "retimed": summarize(retimed) if retimed else None,
                     "predicted_on_retimed": (summarize(predicted_retimed) if retimed
                                              else None),
                     "targets": _targets(acl, predicted),
                     "targets_never_abstaining": _targets(acl, always),
                     "targets_tuned": _targets(acl, tuned),
                     "layers": [_row(r, a, p, b, t) for (r, a), (_, p), (_, b), (_, t)
                                in zip(acl, predicted, always, tuned, strict=True)]}
    report.family_cv = out
    return out


def _shortlist_of(r: LayerResult, target: Target, rules: Rules, model: StoredModel,
                  backend: str) -> frozenset[str]:
    """What ``tune="auto"`` times for a layer the model abstains on: its top candidates and
    ACL's pick (every candidate where the model ranks none)."""
    found, _ = shortlist(r.layer.problem, target, rules, top=DEFAULT_TOP, backend=backend,
                         model=model)
    return found.labels if found is not None else frozenset(r.measurement.timings)


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def _targets(acl: list[tuple[LayerResult, Pick]],
             predicted: list[tuple[LayerResult, Pick]]) -> dict[str, Any]:
    """Issue 22's targets for one held-out family: regret <= 1.03, never worse than ACL's
    rules, no layer above 1.5x unless ACL's pick is also above it."""
    mine, theirs = summarize(predicted), summarize(acl)
    regret, rules_regret = mine["geomean_regret"], theirs["geomean_regret"]
    blunders = [r.layer.label for (r, a), (_, p) in zip(acl, predicted, strict=True)
                if (p.regret or float("inf")) > TARGET_WORST
                and (a.regret or float("inf")) <= TARGET_WORST]
    return {"regret_at_most_1.03": regret is not None and regret <= TARGET_REGRET,
            "not_worse_than_acl": (regret is not None and rules_regret is not None
                                   and regret <= rules_regret),
            "no_blunder_above_1.5x": not blunders, "blunders": blunders}


def _row(r: LayerResult, acl: Pick, predicted: Pick, always: Pick, tuned: Pick,
         ) -> dict[str, Any]:
    return {"layer": r.layer.label, "shape": str(r.layer.problem), "oracle": r.oracle,
            "acl": acl.label, "acl_regret": acl.regret, "predicted": predicted.label,
            "predicted_regret": predicted.regret, "source": predicted.source,
            "within_noise": predicted.within_noise, "reason": predicted.reason,
            "never_abstaining": always.label, "never_abstaining_regret": always.regret,
            "tuned": tuned.label, "tuned_regret": tuned.regret}
