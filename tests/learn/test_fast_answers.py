"""The predicted and measured policies' fast path (issue 22, item 6) answers exactly what the
straightforward code answers: the same feature rows, the same ranking, the same abstention,
the same Selection with the same trace, on every real layer of the packaged nets and on a few
hundred shapes of the broad sample space, for every model family installed here.

The reference below is the code before the fast path, kept verbatim: a feature row per
candidate as a dict, read back column by column; a model's sigma read per candidate; the
nearest trained shape by the full distance matrix; the range rule by numpy arrays. Answers
are compared whole (``Selection.to_dict()``), so any number the fast path computes
differently (a prediction, an uncertainty, a distance) shows in the ranking or the trace.
The speed itself is measured by ``benchmarks/selection.py``, not here."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from convsel import ConvProblem, choose
from convsel.learn import domain as domains
from convsel.learn import stored as stored_mod
from convsel.learn.families import available_families
from convsel.learn.features import FEATURE_NAMES, candidate_features, feature_matrix
from convsel.learn.fit import fit
from convsel.learn.stored import Ranked, StoredModel, model_key
from convsel.selection import acl_selection
from convsel.tuning import cache
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.layers import distinct, load_layers
from convsel.tuning.measure import candidates, decide
from convsel.tuning.sample import sample_problems

FAMILIES = [f for f in ("gbt", "hybrid", "analytic+gbt", "analytic", "roofline")
            if f in available_families()]


def _seconds(p: ConvProblem, algorithm: str) -> float:
    # made-up timings (any will do: the test compares two ways of answering from one model)
    speed = {"direct": 4.0, "fft": 6.0, "indirect_gemm": 1.5, "im2col_gemm": 1.0,
             "gemm_1x1": 0.9, "winograd": 0.4 if p.c >= 64 else 3.0, "implicit_gemm": 1.2}
    return (p.flops / 2e10 + 2e-5) * speed.get(algorithm, 2.0)


def _entry(p: ConvProblem, ident: dict[str, str]) -> TuningEntry:
    found, _ = candidates(p, "numpy")
    timings: dict[str, dict[str, Any]] = {
        c.label: {"algorithm": c.algorithm, "params": {k: list(v) for k, v in c.params.items()},
                  "median_s": _seconds(p, c.algorithm), "iqr_s": 0.0, "runs": 10}
        for c in found}
    winner, tie = decide(timings)
    return TuningEntry(problem=p, backend="numpy", device=ident, winner=winner, tie=tie,
                       timings=timings)


@pytest.fixture(scope="module")
def layers() -> list[ConvProblem]:
    return [x.problem for x in distinct(load_layers()[0])]


@pytest.fixture(scope="module")
def shapes(layers) -> list[ConvProblem]:
    """The nets' layers and the sample space's shapes (some in F16)."""
    sampled = sample_problems(240, seed=22)
    return [*layers, *sampled, *(p.replace(dtype="F16") for p in sampled[::8])]


@pytest.fixture(scope="module")
def store(tmp_path_factory, layers) -> Any:
    """A SQLite store per family: timings of every other layer and a model fitted on them,
    marked accepted (what the model answers is compared, not whether it should)."""
    from convsel.tuning.identity import device_identity

    ident = device_identity("numpy")
    entries = [_entry(p, ident) for p in layers[::2]]
    paths = {}
    for family in FAMILIES:
        path = tmp_path_factory.mktemp("fast") / f"{family.replace('+', '-')}.sqlite"
        db = TuningDB(path)
        db.record_many(entries)
        result = fit(entries, families=[family], device=ident)
        db.save_model(model_key("numpy", ident), result.family, result.model.to_data(),
                      {**result.meta, "accepted": True})
        paths[family] = path
    return paths


# -- the reference: the code before the fast path -------------------------------------------

def old_rows(p: ConvProblem, variants: Sequence[tuple[str, str, Mapping[str, Any]]],
             backend: str = "") -> np.ndarray:
    rows = [candidate_features(p, alg, params, backend) for _, alg, params in variants]
    return np.array([[r[n] for n in FEATURE_NAMES] for r in rows], dtype=float)


def old_rank(self: StoredModel, problem: Any,
             variants: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[Ranked]:
    if not variants:
        return []
    x = old_rows(problem, variants)
    pred = self.model.predict(x, [label for label, _, _ in variants])
    seen = self.meta.get("algorithms")
    if seen is not None:
        pred = np.where([alg in seen for _, alg, _ in variants], pred, math.inf)
    sigma = dict(self.meta.get("sigma") or {})
    out = [Ranked(label, alg, dict(params), math.exp(p) if math.isfinite(p) else math.inf,
                  math.exp(float(sigma.get(alg, 1.0))))
           for (label, alg, params), p in zip(variants, pred, strict=True)]
    return sorted(out, key=lambda r: (r.predicted_s, r.label))


def old_check(domain: domains.Domain, p: ConvProblem,
              rules: Sequence[str] = ("kind", "range", "distance"),
              settings: domains.Settings | None = None) -> domains.Verdict:
    s = settings or domains.SETTINGS
    if "kind" in rules and s.flags:
        unseen = [name for name, f in domains.FLAGS.items()
                  if bool(f(p)) not in domain.flags[name]]
        if unseen:
            return domains.Verdict(False, "kind", "no trained shape was " + " or ".join(
                name if not domain.flags[name][0] else f"not {name}" for name in unseen))
    v = np.array([math.log2(float(f(p))) for f in domains.DESCRIPTORS.values()])
    if "range" in rules:
        names = list(domains.DESCRIPTORS)
        slack = s.margin_octaves + domains._ROUNDING
        below = np.flatnonzero(v < domain.low - slack)
        above = np.flatnonzero(v > domain.high + slack)
        if len(below) or len(above):
            parts = [f"{names[i]} {2 ** v[i]:.4g} below the smallest trained "
                     f"({2 ** domain.low[i]:.4g})" for i in below]
            parts += [f"{names[i]} {2 ** v[i]:.4g} above the largest trained "
                      f"({2 ** domain.high[i]:.4g})" for i in above]
            return domains.Verdict(False, "range", "; ".join(parts))
    radius = domain.radius(s)
    if "distance" in rules and s.distance and math.isfinite(radius):
        d = float(domains._distances((v / domain.scale)[None, :], domain.points).min())
        if d > radius:
            return domains.Verdict(False, "distance", f"its nearest trained shape is {d:.2f} "
                                   f"away (scaled log2 sizes), beyond {radius:.2f}, "
                                   f"{s.distance_margin:g}x the {s.quantile:.0%} quantile of "
                                   "the trained shapes' own nearest distances")
    return domains.Verdict(True, "", "")


def _forget() -> None:
    acl_selection.cache_clear()
    cache.clear(("answer",))


def _answers(problems: list[ConvProblem], db: Any, policy: str,
             **options: Any) -> list[dict[str, Any]]:
    out = []
    for p in problems:
        _forget()
        out.append(choose(p, "cpu", policy=policy, db=db, **options).to_dict())
    return out


# -- the tests -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["", "numpy", "opencl"])
def test_feature_matrix_is_the_rows_of_candidate_features(shapes, backend):
    """Also as OpenCL describes a candidate (its grouped direct convolution differs)."""
    differs = 0
    for p in shapes:
        found, _ = candidates(p, "numpy")
        variants = [(c.label, c.algorithm, c.params) for c in found]
        fast = feature_matrix(p, [(alg, params) for _, alg, params in variants], backend)
        assert fast.dtype == np.float64 and fast.flags.c_contiguous
        assert np.array_equal(fast, old_rows(p, variants, backend)), p
        differs += not np.array_equal(fast, old_rows(p, variants))
    assert (differs > 0) == (backend == "opencl")   # the shapes reach the description


@pytest.mark.parametrize("family", FAMILIES)
def test_fast_answers_equal_the_reference(family, store, shapes, monkeypatch):
    db = store[family]
    fast = {(policy, abstain): _answers(shapes, db, policy, **(
        {"abstain": abstain} if policy == "predicted" else {}))
        for policy, abstain in (("predicted", True), ("predicted", False), ("measured", None))}
    sources = {a["source"] for answers in fast.values() for a in answers}
    assert {"model", "rules", "tuning-db"} <= sources   # every way of answering was taken
    assert any("predicted.outside" in str(a["trace"]) for a in fast[("predicted", True)])

    monkeypatch.setattr(StoredModel, "rank", old_rank)
    monkeypatch.setattr(domains, "check", old_check)
    stored_mod._cache.clear()
    cache.clear()
    for (policy, abstain), answers in fast.items():
        options = {"abstain": abstain} if policy == "predicted" else {}
        reference = _answers(shapes, db, policy, **options)
        for p, mine, theirs in zip(shapes, answers, reference, strict=True):
            assert mine == theirs, (family, policy, abstain, p)


@pytest.mark.parametrize("family", FAMILIES)
def test_repeated_answers_are_the_new_ones(family, store, layers):
    """A repeated problem's answer (kept per process) is the one computed for it new."""
    db = store[family]
    new = _answers(layers, db, "predicted")
    again = [choose(p, "cpu", policy="predicted", db=db).to_dict() for p in layers]
    assert again == new


@pytest.mark.parametrize("family", FAMILIES)
def test_ranking_and_distance_equal_the_reference_exactly(family, store, shapes):
    """The numbers behind the answers, unrounded: every candidate's predicted time and
    uncertainty, the abstention verdict and the nearest trained shape's distance."""
    from convsel.policies.predicted import load_stored

    model, why = load_stored("numpy", None, store[family])
    assert model is not None and model.domain is not None, why
    for p in shapes:
        found, _ = candidates(p, "numpy")
        variants = [(c.label, c.algorithm, c.params) for c in found]
        assert model.rank(p, variants) == old_rank(model, p, variants), p
        assert domains.check(model.domain, p) == old_check(model.domain, p), p
        v = domains.vector(p)
        assert model.domain.nearest_distance(v) == float(domains._distances(
            (v / model.domain.scale)[None, :], model.domain.points).min()), p
