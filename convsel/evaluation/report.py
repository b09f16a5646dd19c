"""How good is each policy here? Per layer, the time of each policy's pick against the fastest.

:func:`build_report` times every candidate of every layer afresh (the oracle is the fastest
median of that run), asks each policy what it would run, and reads that pick's time from the
same run. Regret is pick time / oracle time (1.0 is perfect); the summary gives its geometric
mean per policy (and MIOpen's measure, the arithmetic mean of the slowdowns) and how often
each policy picked the oracle's candidate. A pick inside the run's noise of the fastest (tied
with it: :func:`convsel.tuning.measure.decide`, which widens the tie for a noisy timing) is
not charged: its regret counts as 1.0 and ``raw_regret`` keeps the ratio. The measured policy's
picks come from the tuning database (an earlier ``convsel tune``), so they are judged on
timings they were not chosen from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..algorithms import label_of, method_for
from ..errors import ConvselError, InvalidProblemError
from ..policies import choose
from ..policies.measured import from_entry
from ..rules import Rules, as_rules
from ..selection import Selection, select
from ..targets import resolve_target
from ..tuning.db import TuningDB, TuningEntry
from ..tuning.layers import Layer
from ..tuning.measure import Measurement, measure, timed
from ..tuning.timing import TimingSettings

POLICIES = ("acl", "measured", "predicted")
# the leave-one-net-out cross-validation's column (see :mod:`.crossval`)
CV_POLICY = "predicted-cv"
ALL_POLICIES = (*POLICIES, CV_POLICY)


@dataclass(frozen=True)
class Pick:
    """What one policy runs on one layer and what that costs in this run."""

    label: str
    method: str
    time_s: float | None
    regret: float | None
    source: str
    rule: str
    reason: str
    algorithm: str = ""
    raw_regret: float | None = None   # the ratio itself, charged or not
    within_noise: bool = False        # tied with the fastest: not charged

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "algorithm": self.algorithm, "method": self.method,
                "time_ms": _ms(self.time_s), "regret": self.regret,
                "raw_regret": self.raw_regret, "within_noise": self.within_noise,
                "source": self.source, "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class LayerResult:
    """One layer: every candidate's timing, the oracle, and each policy's pick."""

    layer: Layer
    measurement: Measurement
    picks: dict[str, Pick]

    @property
    def oracle(self) -> str:
        label = self.measurement.fastest
        assert label is not None  # build_report keeps only layers with a timing
        return label

    @property
    def oracle_algorithm(self) -> str:
        """The fastest candidate's algorithm (its variant aside)."""
        return str(self.measurement.timings[self.oracle].get("algorithm",
                                                             self.oracle.split(":")[0]))

    @property
    def oracle_time(self) -> float:
        return float(self.measurement.timings[self.oracle]["median_s"])

    def to_dict(self) -> dict[str, Any]:
        m = self.measurement
        return {"net": self.layer.net, "name": self.layer.name,
                "problem": self.layer.problem.to_dict(), "shape": str(self.layer.problem),
                "oracle": self.oracle, "oracle_algorithm": self.oracle_algorithm,
                "oracle_ms": _ms(self.oracle_time),
                "timings_ms": {k: {"median": _ms(v["median_s"]), "iqr": _ms(v["iqr_s"]),
                                   "runs": v["runs"]} for k, v in timed(m.timings).items()},
                "errors": m.errors, "skipped": dict(m.skipped), "winner": m.winner,
                "tie": list(m.tie), "noise": m.noise,
                "picks": {p: k.to_dict() for p, k in self.picks.items()}}


@dataclass
class Report:
    """Every layer's result, with what was left out and why."""

    backend: str
    device: dict[str, str]
    target: str
    settings: TimingSettings
    layers: list[LayerResult] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    crossval: dict[str, Any] | None = None     # what the cross-validation trained, per net
    judge: str = "median"       # which statistic of the fresh timings judges the picks
    # leave-one-family-out: per family, its layers' picks and figures (see .crossval)
    family_cv: dict[str, Any] | None = None

    @property
    def policies(self) -> list[str]:
        """The policies with a pick on some layer, in :data:`ALL_POLICIES` order."""
        present = {p for r in self.layers for p in r.picks}
        return [p for p in ALL_POLICIES if p in present]

    def summary(self, net: str | None = None) -> dict[str, dict[str, Any]]:
        """Per policy: geometric-mean regret (over all layers and over tuned ones), how
        often it picked the oracle, and how many layers count."""
        rows = [r for r in self.layers if net is None or r.layer.net == net]
        return {policy: summarize([(r, r.picks[policy]) for r in rows if policy in r.picks])
                for policy in self.policies}

    def worst(self, policy: str = "acl", n: int = 5) -> list[LayerResult]:
        """The layers where ``policy``'s pick costs most, worst first (regret > 1 only)."""
        costly = [r for r in self.layers if (r.picks[policy].regret or math.inf) > 1.0]
        return sorted(costly, key=lambda r: -(r.picks[policy].regret or math.inf))[:n]

    @property
    def nets(self) -> list[str]:
        return list(dict.fromkeys(r.layer.net for r in self.layers))

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": self.device, "target": self.target,
                "judge": self.judge,
                "settings": dataclasses.asdict(self.settings), "summary": self.summary(),
                "per_net": {n: self.summary(n) for n in self.nets},
                "worst_acl": [{"layer": r.layer.label, "regret": r.picks["acl"].regret,
                               "acl": r.picks["acl"].label, "oracle": r.oracle,
                               "rule": r.picks["acl"].rule, "reason": r.picks["acl"].reason}
                              for r in self.worst("acl")],
                "layers": [r.to_dict() for r in self.layers], "left_out": self.left_out,
                "crossval": self.crossval, "family_cv": self.family_cv}


def summarize(picks: list[tuple[LayerResult, Pick]]) -> dict[str, Any]:
    """One policy's figures over ``picks`` (layer, its pick): geometric-mean and mean
    regret, worst, picks of the fastest label and algorithm, picks inside the noise."""
    tuned = [p for _, p in picks if p.source == "tuning-db"]
    return {
        "layers": len(picks),
        "geomean_regret": geomean(p.regret for _, p in picks),
        # MIOpen's measure: the mean slowdown against the fastest
        "mean_regret": mean(p.regret for _, p in picks),
        "within_noise": sum(p.within_noise and p.label != r.oracle for r, p in picks),
        "oracle_picks": sum(p.label == r.oracle for r, p in picks),
        "fastest_share": (sum(p.label == r.oracle for r, p in picks) / len(picks)
                          if picks else None),
        # the fastest algorithm, whichever of its variants (tile, vector width)
        "algorithm_picks": sum(p.algorithm == r.oracle_algorithm for r, p in picks),
        "algorithm_share": (sum(p.algorithm == r.oracle_algorithm for r, p in picks)
                            / len(picks) if picks else None),
        "model_layers": sum(p.source == "model" for _, p in picks),
        "failed_picks": sum(p.regret is None for _, p in picks),
        "tuned_layers": len(tuned),
        "geomean_regret_tuned": geomean(p.regret for p in tuned),
        "worst_regret": max((p.regret or math.inf for _, p in picks), default=None)}


def mean(values: Iterable[float | None]) -> float | None:
    """Arithmetic mean of the finite values given (MIOpen's mean slowdown)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the finite values given (None or inf count as missing)."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(map(math.log, finite)) / len(finite)) if finite else None


def build_report(layers: list[Layer], *, backend: str = "numpy", device: Any = None,
                 db: TuningDB | None = None, target: str = "cpu", rules: Rules | None = None,
                 settings: TimingSettings | None = None,
                 on_progress: Callable[[Layer, str], None] | None = None,
                 exclude: Collection[str] = (),
                 policies: Collection[str] = POLICIES, judge: str = "median") -> Report:
    """Time ``layers`` on ``backend`` and judge each policy's pick against the fastest.

    Parameters
    ----------
    layers : list of Layer
    backend, device
        Where to time; the measured policy looks up entries for the same backend/device.
    db : TuningDB, optional
        Where the measured policy reads; defaults to the default database.
    target : str
        The ACL target whose rules the "acl" policy applies (``"cpu"``).
    settings : TimingSettings
        Timing settings (see :func:`convsel.tuning.measure.measure`).
    on_progress : callable, optional
        Called with (layer, candidate label) before each candidate is timed.
    exclude : collection of str
        Algorithms not to time (as :func:`convsel.tuning.measure.measure`).
    policies : collection of str
        Which of :data:`POLICIES` to ask.
    judge : str
        "median" (default) or "min": which statistic of each candidate's timing judges the
        picks (see :func:`judged`).

    Returns
    -------
    Report
        Layers that cannot be timed are listed in ``left_out`` with why.
    """
    settings = settings or TimingSettings()
    report: Report | None = None
    results, left_out = [], []
    for layer in layers:
        def progress(label: str, layer: Layer = layer) -> None:
            if on_progress is not None:
                on_progress(layer, label)
        try:
            m = measure(layer.problem, backend, device, rules=rules, settings=settings,
                        on_candidate=progress, exclude=exclude)
        except ConvselError as exc:
            left_out.append(f"{layer.label}: {exc}")
            continue
        m = judged(m, judge)
        if m.fastest is None:
            left_out.append(f"{layer.label}: no candidate ran ({m.errors or dict(m.skipped)})")
            continue
        picks = {p: _pick(_select(layer, p, target, rules, backend, device, db), m)
                 for p in POLICIES if p in policies}
        results.append(LayerResult(layer, m, picks))
        if report is None:
            report = Report(backend, dict(m.device), target, settings, judge=judge)
    report = report or Report(backend, {}, target, settings, judge=judge)
    report.layers, report.left_out = results, left_out
    return report


def _select(layer: Layer, policy: str, target: str, rules: Rules | None, backend: str,
            device: Any, db: TuningDB | None) -> Selection:
    if policy == "acl":
        return select(layer.problem, target, rules=rules)
    return choose(layer.problem, target, rules=rules, policy=policy, backend=backend,
                  device=device, db=db)


def report_from_db(layers: list[Layer], fresh: TuningDB, *, backend: str,
                   device: dict[str, str], target: str = "cpu", rules: Rules | None = None,
                   judge: str = "median", training: TuningDB | None = None) -> Report:
    """A report judged on timings already in ``fresh`` (measured on ``device``, possibly on
    another machine, *after* and apart from the training data) instead of timing now.

    ACL's rules are asked for every layer. With ``training`` (the database of an earlier
    run), the measured policy answers from that run's entry for the layer where it has one:
    what tuning these very layers gives, judged on a run it was not chosen from. That is how
    well one run of timings repeats on this device, the bound for any policy that has not
    timed the layer. :func:`convsel.evaluation.crossval.leave_one_net_out` adds the model's
    picks."""
    loaded = as_rules(rules)
    resolved = resolve_target(target, loaded)
    results, left_out = [], []
    for layer in layers:
        entry = fresh.lookup(layer.problem, backend, device)
        if entry is None:
            left_out.append(f"{layer.label}: no fresh timing in {fresh.path}")
            continue
        m = judged(measurement_of(entry), judge)
        if m.fastest is None:
            left_out.append(f"{layer.label}: no candidate ran")
            continue
        acl = select(layer.problem, resolved, rules=loaded)
        picks = {"acl": _pick(acl, m)}
        earlier = training.lookup(layer.problem, backend, device) if training else None
        if earlier is not None and training is not None:
            picks["measured"] = _pick(from_entry(earlier, acl, resolved, str(training.path)),
                                      m)
        results.append(LayerResult(layer, m, picks))
    report = Report(backend, dict(device), target, TimingSettings(), judge=judge)
    report.layers, report.left_out = results, left_out
    return report


JUDGES = ("median", "min")


def judged(m: Measurement, judge: str) -> Measurement:
    """``m`` with each candidate's time taken as its ``judge`` statistic: "median", or "min"
    (the fastest run: other processes' load only adds time, so on a shared machine it repeats
    far better from one run to the next). The report reads ``median_s``; for "min" that key
    holds the fastest run and ``median_measured_s`` the median."""
    if judge not in JUDGES:
        raise InvalidProblemError("judge", judge, f"one of {', '.join(JUDGES)}")
    if judge == "median":
        return m
    timings = {k: ({**v, "median_measured_s": v["median_s"], "median_s": v["min_s"]}
                   if v.get("min_s") is not None and "median_s" in v else dict(v))
               for k, v in m.timings.items()}
    return dataclasses.replace(m, timings=timings)


def measurement_of(entry: TuningEntry) -> Measurement:
    """A database entry as the Measurement it was recorded from."""
    timings = {k: v for k, v in entry.timings.items() if "skipped" not in v}
    skipped = {k: str(v["skipped"]) for k, v in entry.timings.items() if "skipped" in v}
    return Measurement(entry.problem, entry.backend, dict(entry.device), timings, skipped,
                       entry.winner, tuple(entry.tie))


def pick_of(sel: Selection, m: Measurement) -> Pick:
    """What ``sel`` costs in the timings of ``m``."""
    return _pick(sel, m)


def timed_pick(labels: Iterable[str], m: Measurement, reason: str, *, gpu: bool) -> Pick:
    """What timing only ``labels`` of ``m``'s candidates and running the fastest of them
    costs in ``m``'s timings: ``tune="auto"``'s answer where its own timing agrees with this
    run's (the run's noise is charged as in :func:`pick_of`)."""
    ran = {label: m.timings[label]["median_s"] for label in labels
           if m.timings.get(label, {}).get("median_s") is not None}
    if not ran:
        return Pick("", "", None, None, "tuning-db", "", reason + " [none of them ran]")
    label = min(ran, key=lambda k: (ran[k], k))
    algorithm = str(m.timings[label].get("algorithm", label.split(":")[0]))
    best = m.timings[m.fastest]["median_s"] if m.fastest else None
    raw = ran[label] / best if best else None
    within = raw is not None and label in m.tie
    return Pick(label, method_for(algorithm, gpu), ran[label], 1.0 if within else raw,
                "tuning-db", "", reason, algorithm, raw, within)


def _pick(sel: Selection, m: Measurement) -> Pick:
    label = label_of(sel.algorithm, sel.params)
    t = m.timings.get(label, {})
    time_s = t.get("median_s")
    fastest = m.fastest
    best = m.timings[fastest]["median_s"] if fastest else None
    raw = (time_s / best) if time_s is not None and best else None
    within = raw is not None and label in m.tie
    reason = sel.reason + (f" [fallback: {sel.fallback}]" if sel.fallback else "")
    if time_s is None:
        reason += f" [{label} did not run: {t.get('error') or m.skipped.get(label, 'absent')}]"
    return Pick(label, sel.method, time_s, 1.0 if within else raw, sel.source, sel.rule,
                reason, sel.algorithm, raw, within)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)
