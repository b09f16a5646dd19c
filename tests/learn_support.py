"""Synthetic timings whose answer is known, and the fixtures that fit models on them: shared
by the learned-policy tests (tests/learn, tests/tuning/test_shortlist.py, the service's).

The timings follow a rule no shipped heuristic knows: Winograd is fast when the layer has many
input channels and three times slower than im2col + GEMM when it has few (see
tests/learn/test_learn.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from convsel import ConvProblem, algorithms
from convsel.learn import stored as stored_mod
from convsel.learn.fit import fit
from convsel.learn.stored import model_key
from convsel.policies import device as policy_device
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import candidates, decide

WIDE = 64           # from this many input channels on, Winograd is the fast one


def synthetic_seconds(p: ConvProblem, algorithm: str) -> float:
    """Winograd and im2col + GEMM as the rule says; every other algorithm of the registry
    slower than both, each by its own factor."""
    base = p.flops / 2e10 + 2e-5
    if algorithm == "winograd":
        return base * (0.4 if p.c >= WIDE else 3.0)
    if algorithm == "im2col_gemm":
        return base
    return base * (1.5 + algorithms.spec(algorithm).timing_rank)


def overhead_seconds(p: ConvProblem, algorithm: str) -> float:
    """Winograd: a third of the arithmetic time but 1 ms fixed; the rest as above."""
    if algorithm == "winograd":
        return 0.3 * p.flops / 2e10 + 1e-3
    return synthetic_seconds(p, algorithm)


def entry_for(p: ConvProblem, ident: dict[str, str], cost=synthetic_seconds) -> TuningEntry:
    found, _ = candidates(p, "numpy")
    timings: dict[str, dict[str, Any]] = {}
    for cand in found:
        s = cost(p, cand.algorithm)
        timings[cand.label] = {"algorithm": cand.algorithm,
                               "params": {k: list(v) for k, v in cand.params.items()},
                               "median_s": s, "iqr_s": 0.01 * s, "runs": 8}
    winner, tie = decide(timings)
    return TuningEntry(problem=p, backend="numpy", device=ident, winner=winner, tie=tie,
                       timings=timings)


def training_problems() -> list[ConvProblem]:
    return [ConvProblem(1, h, h, c, k, 3, 3, pad=1)
            for h in (8, 14, 28) for c in (8, 16, 32, 48, 64, 96, 128, 256)
            for k in (16, 64, 128)]


UNSEEN_WIDE = ConvProblem(1, 20, 20, 192, 96, 3, 3, pad=1)
UNSEEN_NARROW = ConvProblem(1, 20, 20, 24, 96, 3, 3, pad=1)


@pytest.fixture
def fresh_learn_caches():
    """Forget the process's device identity and decoded models after the test (a test that
    fits or stores a model must not leave it to the next)."""
    yield
    policy_device.cached_identity.cache_clear()
    stored_mod._cache.clear()


def fit_and_save(database: TuningDB, ident: dict[str, str], families=None) -> dict[str, Any]:
    result = fit(database.entries(backend="numpy", device=ident), families=families,
                 device=ident)
    database.save_model(model_key("numpy", ident), result.family, result.model.to_data(),
                        result.meta)
    return result.meta
