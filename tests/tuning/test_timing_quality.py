"""Timings that know their own quality: spread, outliers, the host's load and the threads they
ran with; a winner only beyond the noise of both; a noisy race timed again or recorded as a
tie, never as a confident winner (with a real CPU hog)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from convsel import ConvProblem, choose, threads
from convsel.policies import device as policy_device
from convsel.tuning import quality
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import decide, device_identity, measure
from convsel.tuning.timing import TimingSettings

P1 = ConvProblem(1, 8, 8, 32, 16, 1, 1)            # ACL (cpu): gemm_1x1
QUIET = {"seconds": 1.0, "cores": 2, "others_busy_cores": 0.0, "load_1m": 0.1,
         "blas_threads": 1, "openmp_threads": 0}
HOG = {**QUIET, "others_busy_cores": 1.0, "load_1m": 2.0}          # one of two cores busy


def t(median: float, env: dict[str, Any] | None = None, iqr: float = 0.0,
      alg: str = "direct") -> dict[str, Any]:
    stats = {"algorithm": alg, "params": {}, "median_s": median, "iqr_s": iqr, "runs": 20,
             "min_s": median, "spread": iqr / median, "outliers": 0, "clock": "wall"}
    return quality.assess(stats, quality.Environment.from_dict(env) if env else None)


@pytest.fixture(autouse=True)
def _fresh_identity():
    yield
    policy_device.cached_identity.cache_clear()


def test_a_hogged_timing_names_the_load_and_widens_the_tie():
    clean = {"a": t(1.0, QUIET), "b": t(1.6, QUIET)}
    assert decide(clean) == ("a", ())
    hogged = {"a": t(1.0, HOG), "b": t(1.6, HOG)}      # may be up to 2x slower: no winner
    assert decide(hogged) == (None, ("a", "b"))
    assert hogged["a"]["noise"][0].startswith("loaded: other processes used 1.00")
    far = {"a": t(1.0, HOG), "b": t(2.5, HOG)}         # beyond what the load can do
    assert decide(far) == ("a", ())


def test_too_many_threads_for_the_free_cores_separates_nothing():
    crowded = {**HOG, "blas_threads": 2}               # 2 threads, 1 free core
    timings = {"a": t(1.0, crowded), "b": t(40.0, crowded)}
    assert decide(timings) == (None, ("a", "b"))
    assert any(r.startswith("oversubscribed") for r in timings["a"]["noise"])


def test_a_wide_spread_is_noise_on_a_quiet_machine_too():
    timings = {"a": t(1.0, QUIET, iqr=0.5), "b": t(1.5, QUIET, iqr=0.01)}
    assert timings["a"]["noise"] == ["spread: IQR 50% of the median"]
    assert decide(timings) == (None, ("a", "b"))


def test_a_device_clock_ignores_the_hosts_load():
    a, b = t(1.0, HOG), t(1.6, HOG)
    a = quality.assess({**a, "clock": "device"}, quality.Environment.from_dict(HOG))
    b = quality.assess({**b, "clock": "device"}, quality.Environment.from_dict(HOG))
    assert a["noise"] == [] and decide({"a": a, "b": b}) == ("a", ())


def test_timings_record_their_quality_and_threads(tmp_path):
    settings = TimingSettings(warmup=0, min_runs=3, min_time=0.0, threads=1)
    m = measure(P1, settings=settings)
    for timing in m.timings.values():
        if "median_s" in timing:
            assert {"spread", "outliers", "environment", "noise"} <= set(timing)
            assert timing["environment"]["blas_threads"] in (1, 0)   # 0: no BLAS found
            assert timing["environment"]["cores"] == threads.cores()
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(m.entry())
    stored = db.lookup(P1, "numpy", m.device)
    assert stored is not None and stored.threads is not None
    assert stored.noise == m.noise and stored.confident == m.confident


def test_the_device_key_holds_no_thread_setting(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    one = device_identity("numpy")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert device_identity("numpy") == one and "THREADS" not in one["driver"]


def test_an_entry_timed_with_other_threads_is_used_and_says_so(tmp_path):
    now = threads.current()
    other = {**QUIET, "blas_threads": now["blas"] + 1, "cores": now["cores"]}
    timings = {"direct": t(1e-3, other, alg="direct"), "gemm_1x1": t(3e-3, other, alg="gemm_1x1")}
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(TuningEntry(problem=P1, backend="numpy", device=device_identity("numpy"),
                          winner="direct", tie=(), timings=timings))
    sel = choose(P1, "cpu", policy="measured", db=db)
    assert sel.source == "tuning-db" and sel.algorithm == "direct"
    reason = sel.trace[-1].reason
    assert f"timed with {now['blas'] + 1} BLAS thread(s)" in reason
    assert "this process has" in reason and sel.measurement["threads"]["blas"] == now["blas"] + 1


def test_a_noisy_entry_answers_as_a_tie_and_says_so(tmp_path):
    timings = {"direct": t(1e-3, HOG, alg="direct"), "gemm_1x1": t(1.5e-3, HOG, alg="gemm_1x1")}
    winner, tie = decide(timings)
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(TuningEntry(problem=P1, backend="numpy", device=device_identity("numpy"),
                          winner=winner, tie=tie, timings=timings))
    sel = choose(P1, "cpu", policy="measured", db=db)
    # the tie goes to ACL's pick (gemm_1x1), not to the faster-looking noisy direct
    assert (sel.source, sel.algorithm) == ("tuning-db", "gemm_1x1")
    assert "not confident, its timings are noisy" in sel.trace[-1].reason
    assert sel.measurement["confident"] is False and sel.measurement["noise"]


def test_under_a_real_cpu_hog_nothing_is_stored_as_a_confident_winner(tmp_path):
    """A busy process on every core this process may use, for the few seconds of one race."""
    problem = ConvProblem(1, 16, 16, 16, 16, 3, 3, pad=1)
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(threads.cores())]
    try:
        time.sleep(0.3)
        settings = TimingSettings(warmup=1, min_runs=4, min_time=0.05, max_runs=40,
                                  retimes=1)
        m = measure(problem, settings=settings, budget_s=20)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert m.complete
    timed = [v for v in m.timings.values() if "median_s" in v]
    envs = [quality.Environment.from_dict(v["environment"]) for v in timed]
    assert timed and all(env.loaded or env.oversubscribed for env in envs), envs
    assert all(v["noise"] for v in timed)                 # every timing is flagged
    assert m.retimed == 1 and any(v.get("retimed") == 1 for v in timed)   # and timed again
    assert not m.confident and m.winner is None and len(m.tie) >= 2 and m.noise
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(m.entry())
    stored = db.lookup(problem, "numpy", m.device)
    assert stored is not None and not stored.confident and stored.noise
