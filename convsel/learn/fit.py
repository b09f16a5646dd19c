"""Fit a cost model from the tuning database's timings; keep it only if it beats ACL's rules.

Training data is every timed candidate of every entry for one backend and device, measured by
this convsel (:attr:`TuningEntry.is_current`): one row per (problem, variant), target
log(median seconds). Entries whose deciding timings are noisy (:attr:`TuningEntry.noise`:
timed under load, too many threads for the free cores, a wide spread) are left out, and the
fit says how many. Families are compared by cross-validated *regret* over problems (fit on the
other folds, pick the predicted-fastest variant of each held-out problem, divide its measured
time by the fastest measured time; a pick tied with the fastest within the entry's noise
counts 1.0), not by prediction error: what matters is the ranking within a problem.

ACL's rules are scored on the same problems (their pick's measured time over the fastest).
Every family that beats the rules is also asked how it extrapolates (:func:`extrapolation`):
for each shape family (grouped, depthwise, few-channel, large-kernel, strided), fitted without
it, does it still do at least as well as the rules on it? Of those, the one kept is the one
that delivers the lowest regret over both questions
(:func:`convsel.learn.trust.delivered`), and the predicted
policy answers a shape outside its training data only where that held (see
:meth:`convsel.learn.stored.StoredModel.extrapolates`).
A family must earn its place (:func:`verdict`): a lower geometric-mean regret than the rules
by more than the noise of that difference (two standard errors of the per-problem log-regret
differences), and a worst case no worse than theirs. The family kept is refitted on
everything and stored as data, with its identity and everyone's held-out figures; when none
does, the best one is stored as *rejected* (``meta["accepted"]`` false, ``meta["verdict"]``
says why) and never answers: the predicted and measured policies answer from the rules and
say so.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._version import __version__
from ..algorithms import label_of
from ..errors import ConvselError, InvalidProblemError
from ..problem import ConvProblem
from ..rules import Rules, as_rules
from ..tuning.entry import IMPLEMENTATIONS_VERSION, TuningEntry, problem_key
from .domain import SHAPE_FAMILIES, describe
from .families import FAMILIES, available_families
from .features import FEATURE_NAMES, FEATURES_VERSION, candidate_features
from .models import Model
from .trust import delivered, trusted

FOLDS = 5
MIN_PROBLEMS = 8


@dataclass
class Dataset:
    """Feature rows of timed candidates, grouped by problem."""

    x: np.ndarray
    y: np.ndarray                 # natural log of median seconds
    variants: list[str]
    problems: list[ConvProblem]   # the problem of each row
    dtypes: list[str] = field(default_factory=list)
    # per problem, the labels its entry could not tell from the fastest (its tie)
    ties: dict[ConvProblem, frozenset[str]] = field(default_factory=dict)
    noisy: int = 0                # entries left out: their deciding timings were noisy

    @property
    def distinct(self) -> list[ConvProblem]:
        return list(dict.fromkeys(self.problems))

    def subset(self, rows: np.ndarray) -> Dataset:
        idx = np.flatnonzero(rows)
        return Dataset(self.x[idx], self.y[idx], [self.variants[i] for i in idx],
                       [self.problems[i] for i in idx], self.dtypes, self.ties, self.noisy)


STATISTICS = ("median", "min")


def dataset(entries: Iterable[TuningEntry], statistic: str = "median", *,
            noisy: bool = False) -> Dataset:
    """The rows of every timed candidate of ``entries``; the target is the log of each
    candidate's ``statistic`` ("median", or "min": the fastest run, which other processes'
    load cannot make faster, so it is the steadier estimate on a shared machine). Entries
    whose deciding timings are noisy are left out (counted in ``noisy``) unless ``noisy``."""
    if statistic not in STATISTICS:
        raise InvalidProblemError("statistic", statistic, f"one of {', '.join(STATISTICS)}")
    xs, ys, variants, problems = [], [], [], []
    ties: dict[ConvProblem, frozenset[str]] = {}
    left_out = 0
    for entry in entries:
        if entry.noise and not noisy:
            left_out += 1
            continue
        ties[entry.problem] = frozenset(entry.tie)
        for label, t in entry.timings.items():
            if "median_s" not in t or not t["median_s"] or t["median_s"] <= 0:
                continue
            seconds = float(t.get(f"{statistic}_s") or t["median_s"])
            params = {k: tuple(v) if isinstance(v, list) else v
                      for k, v in dict(t.get("params") or {}).items()}
            row = candidate_features(entry.problem, str(t["algorithm"]), params, entry.backend)
            xs.append([row[n] for n in FEATURE_NAMES])
            ys.append(math.log(seconds))
            variants.append(label_of(str(t["algorithm"]), params))
            problems.append(entry.problem)
    x = np.asarray(xs, dtype=float).reshape(len(xs), len(FEATURE_NAMES))
    return Dataset(x, np.asarray(ys, dtype=float), variants, problems,
                   sorted({p.dtype for p in problems}), ties, left_out)


def _fold(p: ConvProblem, folds: int) -> int:
    # stable across runs and machines (hash() of a str is salted per process)
    return zlib.crc32(problem_key(p).encode()) % folds


Pick = tuple[str, float, float]   # (label, its measured s, the fastest measured s)


def _rows(data: Dataset) -> dict[ConvProblem, list[int]]:
    by_problem: dict[ConvProblem, list[int]] = {}
    for i, p in enumerate(data.problems):
        by_problem.setdefault(p, []).append(i)
    return by_problem


def _charged(data: Dataset, p: ConvProblem, label: str, rows: list[int], row: int) -> Pick:
    """The pick ``label`` (row ``row``) of ``p``, charged nothing when it is tied with the
    fastest within the entry's noise."""
    fastest = math.exp(min(data.y[i] for i in rows))
    seconds = math.exp(data.y[row])
    if label in data.ties.get(p, frozenset()):
        seconds = fastest
    return label, seconds, fastest


def picks(model: Model, data: Dataset) -> dict[ConvProblem, Pick]:
    """Per problem of ``data``: (predicted-fastest variant, its measured s, fastest measured s)."""
    pred = model.predict(data.x, data.variants)
    out: dict[ConvProblem, Pick] = {}
    for p, rows in _rows(data).items():
        best = min(rows, key=lambda i: (pred[i], data.variants[i]))
        out[p] = _charged(data, p, data.variants[best], rows, best)
    return out


def rules_picks(data: Dataset, target: str = "cpu",
                rules: Rules | None = None) -> dict[ConvProblem, Pick]:
    """Per problem of ``data`` whose rules' pick was timed: ACL's pick on ``target``, its
    measured s and the fastest measured s (the baseline every model must beat)."""
    from ..selection import select

    loaded = as_rules(rules)
    out: dict[ConvProblem, Pick] = {}
    for p, rows in _rows(data).items():
        try:
            sel = select(p, target, rules=loaded)
        except ConvselError:
            continue
        label = label_of(sel.algorithm, sel.params)
        row = next((i for i in rows if data.variants[i] == label), None)
        if row is not None:
            out[p] = _charged(data, p, label, rows, row)
    return out


def regret_summary(chosen: Mapping[Any, Pick]) -> dict[str, Any]:
    """Geometric-mean regret, MIOpen's mean slowdown, share picking the fastest, the worst."""
    regrets = [t / best for _, t, best in chosen.values()]
    if not regrets:
        return {"problems": 0, "geomean_regret": None, "mean_regret": None,
                "fastest_share": None, "worst": None}
    return {"problems": len(regrets),
            "geomean_regret": math.exp(sum(map(math.log, regrets)) / len(regrets)),
            "mean_regret": sum(regrets) / len(regrets),
            "fastest_share": sum(r <= 1.0 for r in regrets) / len(regrets),
            "worst": max(regrets)}


def _no_worse(worst: float, rules_worst: float) -> bool:
    """A worst case no worse than the rules', telling apart only what the timings can: two
    regrets within the tuner's noise floor (3%) of each other are the same."""
    from ..tuning.measure import NOISE_FLOOR

    return worst <= rules_worst * (1.0 + NOISE_FLOOR)


def verdict(model: Mapping[ConvProblem, Pick], baseline: Mapping[ConvProblem, Pick],
            ) -> dict[str, Any]:
    """Whether the held-out picks ``model`` beat ACL's ``baseline`` on the problems both
    picked for: a lower geometric-mean regret by more than two standard errors of the
    per-problem log-regret differences (so chance does not pass: a model fitted on noise
    does not), and a worst case no worse (within the timings' 3% noise floor). Returns
    ``{"accepted", "why", "problems", "log_gain", "log_gain_se", "model": summary, "rules":
    summary}``."""
    both = [p for p in model if p in baseline]
    mine = {p: model[p] for p in both}
    theirs = {p: baseline[p] for p in both}
    ms, rs = regret_summary(mine), regret_summary(theirs)
    if len(both) < 2:
        return {"accepted": False, "why": f"only {len(both)} problem(s) where ACL's pick was "
                "timed: nothing to compare with", "problems": len(both), "log_gain": None,
                "log_gain_se": None, "model": ms, "rules": rs}
    diffs = np.array([math.log(theirs[p][1] / theirs[p][2]) - math.log(mine[p][1] / mine[p][2])
                      for p in both])
    gain = float(diffs.mean())
    se = float(diffs.std(ddof=1) / math.sqrt(len(diffs)))
    figures = (f"held-out geomean {ms['geomean_regret']:.3f} vs ACL's rules "
               f"{rs['geomean_regret']:.3f}, worst {ms['worst']:.2f}x vs {rs['worst']:.2f}x, "
               f"on {len(both)} shapes")
    if gain <= 2 * se:
        why = (f"does not beat ACL's rules beyond the noise: {figures} (gain {gain:.4f} in "
               f"log regret, needs more than 2 standard errors = {2 * se:.4f})")
        accepted = False
    elif not _no_worse(ms["worst"], rs["worst"]):
        why = f"its worst case is worse than ACL's rules': {figures}"
        accepted = False
    else:
        why = f"beats ACL's rules: {figures}"
        accepted = True
    return {"accepted": accepted, "why": why, "problems": len(both), "log_gain": gain,
            "log_gain_se": se, "model": ms, "rules": rs}


def cross_validate(family: str, data: Dataset, folds: int = FOLDS,
                   baseline: Mapping[ConvProblem, Pick] | None = None) -> dict[str, Any]:
    """Held-out regret of ``family`` over ``folds`` folds of problems, the spread of its
    log-time errors per algorithm (the uncertainty the policy reports), and with
    ``baseline`` (ACL's picks) its :func:`verdict` against them."""
    fold_of = np.array([_fold(p, folds) for p in data.problems])
    chosen: dict[ConvProblem, Pick] = {}
    errors: dict[str, list[float]] = {}
    for f in range(folds):
        train, test = data.subset(fold_of != f), data.subset(fold_of == f)
        if not len(test.y) or len(train.distinct) < 2:
            continue
        model = FAMILIES[family].fit(train.x, train.y, train.variants)
        chosen.update(picks(model, test))
        pred = model.predict(test.x, test.variants)
        for v, err in zip(test.variants, pred - test.y, strict=True):
            if math.isfinite(err):
                errors.setdefault(v.split(":", 1)[0], []).append(float(err))
    sigma = {a: float(np.sqrt(np.mean(np.square(e)))) for a, e in sorted(errors.items())}
    out = {**regret_summary(chosen), "sigma": sigma}
    if baseline is not None:
        out["verdict"] = verdict(chosen, baseline)
    return out


# The ACL target whose rules a model must beat, per backend: the Arm CPU rules for the CPU
# backend, a Valhall Mali GPU's for OpenCL (the target of the project's H100 figures).
DEFAULT_TARGETS = {"numpy": "cpu", "opencl": "G77"}


def default_target(backend: str) -> str:
    return DEFAULT_TARGETS.get(backend, "cpu")


# A shape family with fewer training shapes than this is not measured for extrapolation.
MIN_FAMILY_SHAPES = 5


def extrapolation(family: str, data: Dataset,
                  baseline: Mapping[ConvProblem, Pick]) -> dict[str, Any]:
    """Per shape family with enough training shapes: ``family`` fitted without any shape of
    it, judged on them against ACL's ``baseline``; ``trusted`` when its geometric-mean regret
    and its worst case are no worse than the rules' (extrapolating to such shapes does no
    harm on this device)."""
    out: dict[str, Any] = {}
    for name, (_, member) in SHAPE_FAMILIES.items():
        held = np.array([member(p) for p in data.problems])
        test = data.subset(held)
        train = data.subset(~held)
        if len(test.distinct) < MIN_FAMILY_SHAPES or len(train.distinct) < MIN_PROBLEMS:
            continue
        model = FAMILIES[family].fit(train.x, train.y, train.variants)
        chosen = picks(model, test)
        both = [p for p in chosen if p in baseline]
        if len(both) < MIN_FAMILY_SHAPES:
            continue
        mine = regret_summary({p: chosen[p] for p in both})
        theirs = regret_summary({p: baseline[p] for p in both})
        out[name] = {"shapes": len(both), "model": mine, "rules": theirs,
                     "trusted": trusted([{"model": mine, "rules": theirs}])}
    return out


def model_id(family: str, data: Mapping[str, Any]) -> str:
    text = json.dumps({"family": family, "model": data}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class FitResult:
    """A fitted model ready to store, with how every family fared."""

    family: str
    model: Model
    meta: dict[str, Any]


def fit(entries: Sequence[TuningEntry], *, families: Sequence[str] | None = None,
        folds: int = FOLDS, device: Mapping[str, str] | None = None,
        statistic: str = "median", target: str | None = None, rules: Rules | None = None,
        noisy: bool = False) -> FitResult:
    """Compare ``families`` (default: every installed one) and ACL's rules on ``target``
    (default: :data:`DEFAULT_TARGETS` of the entries' backend) by held-out regret on
    ``entries``, and fit the best family on all of them: accepted if it beats the rules
    (:func:`verdict`), else stored as rejected. ``noisy`` keeps entries whose deciding timings
    are noisy.

    Raises
    ------
    InvalidProblemError
        Fewer than :data:`MIN_PROBLEMS` problems with timings, or an unknown family.
    """
    names = list(families or available_families())
    unknown = [f for f in names if f not in FAMILIES]
    if unknown:
        raise InvalidProblemError("family", unknown[0], f"unknown; known: {', '.join(FAMILIES)}")
    started = time.perf_counter()
    data = dataset(entries, statistic, noisy=noisy)
    if len(data.distinct) < MIN_PROBLEMS:
        raise InvalidProblemError(
            "entries", len(data.distinct), f"a model needs timings of at least {MIN_PROBLEMS} "
            f"problems on this backend and device ({data.noisy} noisy entries left out): run "
            "`convsel tune --sample 200` first")
    backends = {e.backend for e in entries}
    backend = backends.pop() if len(backends) == 1 else ""
    if target is None:
        target = default_target(backend or "numpy")
    baseline = rules_picks(data, target, rules)
    scores = {f: cross_validate(f, data, folds, baseline) for f in names}
    for f in names:
        if scores[f]["verdict"]["accepted"]:
            scores[f]["extrapolation"] = extrapolation(f, data, baseline)
            scores[f]["delivered"] = delivered(scores[f]["geomean_regret"],
                                               scores[f]["extrapolation"])
    best = min(names, key=lambda f: (not scores[f]["verdict"]["accepted"],
                                     scores[f].get("delivered") or math.inf,
                                     scores[f]["geomean_regret"] or math.inf,
                                     -(scores[f]["fastest_share"] or 0.0), f))
    judged = scores[best]["verdict"]
    extrapolates = scores[best].get("extrapolation", {})
    model = FAMILIES[best].fit(data.x, data.y, data.variants)
    stored = model.to_data()
    meta = {"id": model_id(best, stored), "family": best, "training_problems":
            len(data.distinct), "training_rows": int(len(data.y)), "dtypes": data.dtypes,
            "accepted": bool(judged["accepted"]), "verdict": judged["why"],
            "domain": describe(data.distinct).to_dict(), "extrapolation": extrapolates,
            "rules": {"target": target, **regret_summary(baseline)},
            "noisy_entries_left_out": data.noisy,
            "algorithms": sorted({v.split(":", 1)[0] for v in data.variants}),
            "features": list(FEATURE_NAMES), "features_version": FEATURES_VERSION,
            "backend": backend,
            "statistic": statistic,
            "sigma": scores[best]["sigma"], "held_out": scores, "folds": folds,
            "device": dict(device or {}), "convsel_version": __version__,
            "implementations_version": IMPLEMENTATIONS_VERSION,
            "fit_seconds": round(time.perf_counter() - started, 3)}
    return FitResult(best, model, meta)
