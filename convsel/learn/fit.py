"""Fit a cost model from the tuning database's timings and keep the better family.

Training data is every timed candidate of every entry for one backend and device, measured by
this convsel (:attr:`TuningEntry.is_current`): one row per (problem, variant), target
log(median seconds). Families are compared by cross-validated *regret* over problems (fit on
the other folds, pick the predicted-fastest variant of each held-out problem, divide its
measured time by the fastest measured time), not by prediction error: what matters is the
ranking within a problem. The winner is refitted on everything and stored in the database as
data, with its identity and its held-out figures.
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
from ..errors import InvalidProblemError
from ..problem import ConvProblem
from ..tuning.entry import IMPLEMENTATIONS_VERSION, TuningEntry, problem_key
from .features import FEATURE_NAMES, FEATURES_VERSION, candidate_features
from .models import FAMILIES, Model, available_families

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

    @property
    def distinct(self) -> list[ConvProblem]:
        return list(dict.fromkeys(self.problems))

    def subset(self, rows: np.ndarray) -> Dataset:
        idx = np.flatnonzero(rows)
        return Dataset(self.x[idx], self.y[idx], [self.variants[i] for i in idx],
                       [self.problems[i] for i in idx], self.dtypes)


STATISTICS = ("median", "min")


def dataset(entries: Iterable[TuningEntry], statistic: str = "median") -> Dataset:
    """The rows of every timed candidate of ``entries``; the target is the log of each
    candidate's ``statistic`` ("median", or "min": the fastest run, which other processes'
    load cannot make faster, so it is the steadier estimate on a shared machine)."""
    if statistic not in STATISTICS:
        raise InvalidProblemError("statistic", statistic, f"one of {', '.join(STATISTICS)}")
    xs, ys, variants, problems = [], [], [], []
    for entry in entries:
        for label, t in entry.timings.items():
            if "median_s" not in t or not t["median_s"] or t["median_s"] <= 0:
                continue
            seconds = float(t.get(f"{statistic}_s") or t["median_s"])
            params = {k: tuple(v) if isinstance(v, list) else v
                      for k, v in dict(t.get("params") or {}).items()}
            row = candidate_features(entry.problem, str(t["algorithm"]), params)
            xs.append([row[n] for n in FEATURE_NAMES])
            ys.append(math.log(seconds))
            variants.append(label_of(str(t["algorithm"]), params))
            problems.append(entry.problem)
    x = np.asarray(xs, dtype=float).reshape(len(xs), len(FEATURE_NAMES))
    return Dataset(x, np.asarray(ys, dtype=float), variants, problems,
                   sorted({p.dtype for p in problems}))


def _fold(p: ConvProblem, folds: int) -> int:
    # stable across runs and machines (hash() of a str is salted per process)
    return zlib.crc32(problem_key(p).encode()) % folds


def picks(model: Model, data: Dataset) -> dict[ConvProblem, tuple[str, float, float]]:
    """Per problem of ``data``: (predicted-fastest variant, its measured s, fastest measured s)."""
    pred = model.predict(data.x, data.variants)
    out: dict[ConvProblem, tuple[str, float, float]] = {}
    by_problem: dict[ConvProblem, list[int]] = {}
    for i, p in enumerate(data.problems):
        by_problem.setdefault(p, []).append(i)
    for p, rows in by_problem.items():
        best = min(rows, key=lambda i: (pred[i], data.variants[i]))
        out[p] = (data.variants[best], math.exp(data.y[best]),
                  math.exp(min(data.y[i] for i in rows)))
    return out


def regret_summary(chosen: Mapping[Any, tuple[str, float, float]]) -> dict[str, Any]:
    """Geometric-mean regret, share picking the fastest, and the worst regret."""
    regrets = [t / best for _, t, best in chosen.values()]
    if not regrets:
        return {"problems": 0, "geomean_regret": None, "fastest_share": None, "worst": None}
    return {"problems": len(regrets),
            "geomean_regret": math.exp(sum(map(math.log, regrets)) / len(regrets)),
            "fastest_share": sum(r <= 1.0 for r in regrets) / len(regrets),
            "worst": max(regrets)}


def cross_validate(family: str, data: Dataset, folds: int = FOLDS) -> dict[str, Any]:
    """Held-out regret of ``family`` over ``folds`` folds of problems, and the spread of its
    log-time errors per algorithm (the uncertainty the policy reports)."""
    fold_of = np.array([_fold(p, folds) for p in data.problems])
    chosen: dict[ConvProblem, tuple[str, float, float]] = {}
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
    return {**regret_summary(chosen), "sigma": sigma}


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
        statistic: str = "median") -> FitResult:
    """Compare ``families`` (default: every installed one) by held-out regret on ``entries``
    and fit the best on all of them.

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
    data = dataset(entries, statistic)
    if len(data.distinct) < MIN_PROBLEMS:
        raise InvalidProblemError(
            "entries", len(data.distinct), f"a model needs timings of at least {MIN_PROBLEMS} "
            "problems on this backend and device: run `convsel tune --sample 200` first")
    scores = {f: cross_validate(f, data, folds) for f in names}
    best = min(names, key=lambda f: (scores[f]["geomean_regret"] or math.inf,
                                     -(scores[f]["fastest_share"] or 0.0), f))
    model = FAMILIES[best].fit(data.x, data.y, data.variants)
    stored = model.to_data()
    meta = {"id": model_id(best, stored), "family": best, "training_problems":
            len(data.distinct), "training_rows": int(len(data.y)), "dtypes": data.dtypes,
            "algorithms": sorted({v.split(":", 1)[0] for v in data.variants}),
            "features": list(FEATURE_NAMES), "features_version": FEATURES_VERSION,
            "statistic": statistic,
            "sigma": scores[best]["sigma"], "held_out": scores, "folds": folds,
            "device": dict(device or {}), "convsel_version": __version__,
            "implementations_version": IMPLEMENTATIONS_VERSION,
            "fit_seconds": round(time.perf_counter() - started, 3)}
    return FitResult(best, model, meta)
