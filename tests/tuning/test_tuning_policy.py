"""The measured policy and the measurement it rests on (decide, candidates, measure)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from convsel import ConvProblem, InvalidProblemError, UnsupportedError, choose, select
from convsel.policies import device as policy_device
from convsel.tuning import measure as measure_mod
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import (
    TimingSettings,
    candidates,
    decide,
    device_identity,
    measure,
    timed,
)
from convsel.tuning.timing import Race

P3 = ConvProblem(1, 16, 16, 32, 32, 3, 3, pad=1)   # ACL (cpu): WINOGRAD 4x4
P1 = ConvProblem(1, 8, 8, 32, 16, 1, 1)           # ACL (cpu): GEMM -> gemm_1x1
FAST = TimingSettings(warmup=0, min_runs=1, min_time=0.0)


def t(median: float, iqr: float = 0.0, alg: str | None = None, **params: Any) -> dict[str, Any]:
    return {"algorithm": alg, "params": params, "median_s": median, "iqr_s": iqr, "runs": 5,
            "min_s": median, "pruned": False}


def record(db: TuningDB, problem: ConvProblem, timings: dict[str, dict[str, Any]]) -> None:
    winner, tie = decide(timings)
    db.record(TuningEntry(problem=problem, backend="numpy", device=device_identity("numpy"),
                          winner=winner, tie=tie, timings=timings))


@pytest.fixture
def db(tmp_path):
    return TuningDB(tmp_path / "tuning.sqlite")


@pytest.fixture(autouse=True)
def _fresh_identity():
    yield
    policy_device.cached_identity.cache_clear()   # a test may have changed the BLAS environment


# -- decide ------------------------------------------------------------------------------------
@pytest.mark.parametrize("timings, expected", [
    ({"a": t(1.0, 0.01), "b": t(1.5, 0.01)}, ("a", ())),
    ({"a": t(1.0, 0.2), "b": t(1.1, 0.01), "c": t(2.0)}, (None, ("a", "b"))),   # SE covers it
    ({"a": t(1.0, 0.2), "b": t(1.2, 0.01)}, ("a", ())),     # beyond 2 SE (0.17 with 5 runs)
    ({"a": t(1.00), "b": t(1.02), "c": t(1.2)}, (None, ("a", "b"))),        # under the floor
    ({"a": t(1.0), "b": {"error": "boom"}}, ("a", ())),
    ({"b": {"error": "boom"}}, (None, ())),
    ({}, (None, ())),
])
def test_decide_wins_only_beyond_the_noise(timings, expected):
    assert decide(timings) == expected


# -- candidates --------------------------------------------------------------------------------
def test_candidates_one_per_winograd_tile_and_skips_with_reasons():
    found, skipped = candidates(P3, "numpy")
    labels = [c.label for c in found]
    assert {"winograd:4x4", "winograd:2x2", "im2col_gemm", "direct"} <= set(labels)
    assert "gemm 1x1" not in labels and "gemm_1x1" in skipped
    assert "1x1 kernel" in skipped["gemm_1x1"]
    grouped, why = candidates(P3.replace(groups=4), "numpy")
    assert not any(c.algorithm == "winograd" for c in grouped)
    assert "grouped" in why["winograd"]


def test_dominated_and_excluded_algorithms_are_skipped_with_the_reason():
    found, skipped = candidates(P1, "numpy", exclude=("direct",))
    labels = {c.label for c in found}
    assert "fft" not in labels and "cannot win" in skipped["fft"]      # FFT of a 1x1 kernel
    assert "direct" not in labels and "excluded" in skipped["direct"]
    assert "fft" in {c.label for c in candidates(P3, "numpy")[0]}   # 3x3: FFT is timed


# -- measure with stand-in kernels --------------------------------------------------------------
def fake_build(fail: str = "", unsupported: str = "", fallback: str = ""):
    def build(p, algorithm, params, backend, w, bias=None, device=None):
        if algorithm == unsupported:
            raise UnsupportedError(f"{algorithm} is not here")
        ran_on = "numpy" if algorithm == fallback else backend

        def run(x):
            if algorithm == fail:
                raise RuntimeError("kernel exploded")
            return x
        return SimpleNamespace(run=run), ran_on, "fell back to numpy" if ran_on != backend \
            else None
    return build


def test_measure_reports_a_failing_algorithm_and_continues():
    m = measure(P3, settings=FAST, build=fake_build(fail="fft", unsupported="direct"))
    assert m.errors == {"fft": "RuntimeError: kernel exploded"}
    assert "direct" in m.skipped and "gemm_1x1" in m.skipped
    assert {"im2col_gemm", "winograd:4x4", "winograd:2x2", "indirect_gemm"} <= set(
        measure_mod.timed(m.timings))
    assert m.timings["winograd:2x2"]["params"] == {"tile": [2, 2]}
    assert m.winner is not None or m.tie
    entry = m.entry()
    assert entry.timings["direct"] == {"skipped": m.skipped["direct"]}


def test_measure_skips_a_candidate_that_fell_back_to_another_backend(monkeypatch):
    monkeypatch.setattr(measure_mod, "device_identity", lambda *a: {"vendor": "v", "name": "n",
                                                                    "driver": "d"})
    m = measure(P1, "opencl", settings=FAST, build=fake_build(fallback="gemm_1x1"))
    assert m.skipped["gemm_1x1"] == "fell back to numpy"   # numpy's time is not OpenCL's
    assert "im2col_gemm" in m.timings and "fft" in m.skipped   # no OpenCL FFT


def test_measure_refuses_selection_only_dtypes():
    with pytest.raises(UnsupportedError, match="selection-only"):
        measure(P3.replace(dtype="QASYMM8"), settings=FAST, build=fake_build())


def test_race_times_blocks_in_rounds_and_rewarms_fast_candidates():
    order: list[str] = []
    race = Race(TimingSettings(warmup=2, min_runs=4, min_time=0.0, rounds=2))
    race.enter("a", lambda: order.append("a"))
    race.enter("b", lambda: order.append("b"))
    race.run()
    # warm-ups; then each round: 1 untimed (they are fast) + 2 timed runs each
    assert "".join(order) == "aabb" + "aaabbb" + "aaabbb"
    assert {k: v["runs"] for k, v in race.stats().items()} == {"a": 4, "b": 4}
    assert race.cut_short() == []


def test_race_drops_a_candidate_that_raises_and_keeps_the_others():
    def boom() -> None:
        raise RuntimeError("late failure")
    race = Race(TimingSettings(warmup=0, min_runs=2, min_time=0.0))
    race.enter("ok", lambda: None)
    race.enter("bad", boom)
    race.run()
    assert list(race.stats()) == ["ok"] and str(race.errors["bad"]) == "late failure"


def test_race_prunes_hopeless_candidates_and_respects_the_budget():
    race = Race(TimingSettings(warmup=0, min_runs=30, min_time=0.0, rounds=3, prune_factor=-1.0))
    race.enter("slow", lambda: None)
    race.run()
    assert race.stats()["slow"]["runs"] == 20 and race.stats()["slow"]["pruned"]  # 2 rounds
    spent = Race(TimingSettings(warmup=0, min_runs=5, min_time=0.0), budget_s=-1.0)
    spent.enter("a", lambda: None)
    spent.run()
    assert spent.stats() == {} and spent.cut_short() == ["a"]


def test_a_hopeless_warm_up_is_checked_again_after_the_others_not_at_once():
    race = Race(TimingSettings(warmup=1, min_runs=2, min_time=0.0, rounds=1, prune_factor=3))
    spell = {"slow": True}     # another tenant's burst: slows "unlucky" until "hopeless" runs

    def hopeless() -> float:
        spell["slow"] = False
        return 1.0
    race.enter("fast", lambda: 1e-3, self_timed=True)
    race.enter("unlucky", lambda: 1.0 if spell["slow"] else 1e-3, self_timed=True)
    race.enter("hopeless", hopeless, self_timed=True)
    race.run()
    st = race.stats()
    assert st["unlucky"]["median_s"] == 1e-3 and not st["unlucky"]["pruned"]
    assert st["hopeless"]["pruned"] and st["hopeless"]["runs"] == 1


def test_a_self_timed_run_is_timed_by_its_own_clock():
    race = Race(TimingSettings(warmup=1, min_runs=3, min_time=0.0, rounds=1))
    race.enter("device", lambda: 0.25, self_timed=True)
    race.run()
    st = race.stats()["device"]
    assert st["median_s"] == st["min_s"] == 0.25 and st["runs"] == 3


def test_the_clock_setting_is_checked_and_recorded_per_candidate():
    with pytest.raises(InvalidProblemError, match="clock"):
        TimingSettings(clock="sundial")

    def build(p, algorithm, params, backend, w, bias=None, device=None):
        # a kernel with a device clock: its timer reports its own (made-up) seconds
        kernel = SimpleNamespace(run=lambda x: x, device_timer=lambda x: lambda: 5e-7)
        return kernel, backend, None
    auto = measure(P1, settings=FAST, build=build)
    assert {v["clock"] for v in timed(auto.timings).values()} == {"device"}
    assert {v["median_s"] for v in timed(auto.timings).values()} == {5e-7}
    wall = measure(P1, settings=dataclasses.replace(FAST, clock="wall"), build=build)
    assert {v["clock"] for v in timed(wall.timings).values()} == {"wall"}
    # without a device clock, "device" times nothing rather than mixing clocks, and says so
    with pytest.raises(UnsupportedError, match="no candidate on numpy has a device clock"):
        measure(P1, settings=dataclasses.replace(FAST, clock="device"), build=fake_build())


# -- the policy -------------------------------------------------------------------------------
def test_without_an_entry_the_rules_answer_and_the_trace_says_so(db):
    acl = select(P3, "cpu")
    sel = choose(P3, "cpu", policy="measured", db=db)
    assert (sel.method, sel.algorithm, sel.rule) == (acl.method, acl.algorithm, acl.rule)
    assert (sel.policy, sel.source, sel.measurement) == ("measured", "rules", None)
    assert sel.trace[-1].id == "measured.no-entry" and not sel.trace[-1].fired
    assert "no entry" in sel.trace[-1].reason and sel.reason == acl.reason


def test_a_winner_in_the_database_is_the_answer(db):
    record(db, P3, {"im2col_gemm": t(1.0, 0.01, "im2col_gemm"),
                    "winograd:4x4": t(2.0, 0.01, "winograd", tile=[4, 4])})
    sel = choose(P3, "cpu", policy="measured", db=db)
    assert (sel.method, sel.algorithm, sel.source, sel.rule) == (
        "GEMM", "im2col_gemm", "tuning-db", "measured.tuning-db")
    assert sel.trace[-1].fired and "ACL's rules would run winograd:4x4" in sel.reason
    assert sel.measurement["chosen"] == "im2col_gemm"
    assert sel.measurement["timings"]["winograd:4x4"]["median_ms"] == pytest.approx(2000.0)
    assert sel.to_dict()["source"] == "tuning-db"


def test_a_winograd_winner_carries_its_tile(db):
    record(db, P3, {"winograd:2x2": t(1.0, 0.0, "winograd", tile=[2, 2]),
                    "im2col_gemm": t(3.0, 0.0, "im2col_gemm")})
    sel = choose(P3, "cpu", policy="measured", db=db)
    assert (sel.method, sel.algorithm, dict(sel.params)) == ("WINOGRAD", "winograd",
                                                             {"tile": (2, 2)})


def test_a_tie_is_broken_by_the_rules_when_they_are_in_it(db):
    record(db, P3, {"im2col_gemm": t(1.00, 0.0, "im2col_gemm"),
                    "winograd:4x4": t(1.01, 0.0, "winograd", tile=[4, 4]),
                    "direct": t(5.0, 0.0, "direct")})
    sel = choose(P3, "cpu", policy="measured", db=db)
    assert sel.algorithm == "winograd" and "ACL's rules break it" in sel.reason


def test_a_tie_without_the_rules_pick_goes_to_the_fastest(db):
    record(db, P3, {"im2col_gemm": t(1.00, 0.0, "im2col_gemm"),
                    "direct": t(1.01, 0.0, "direct"),
                    "winograd:4x4": t(5.0, 0.0, "winograd", tile=[4, 4])})
    sel = choose(P3, "cpu", policy="measured", db=db)
    assert sel.algorithm == "im2col_gemm" and "fastest median breaks it" in sel.reason


def test_another_devices_entry_is_not_used(db):
    db.record(TuningEntry(problem=P3, backend="numpy",
                          device={"vendor": "v", "name": "elsewhere", "driver": "d"},
                          winner="direct", tie=(), timings={"direct": t(1.0, 0, "direct")}))
    assert choose(P3, "cpu", policy="measured", db=db).source == "rules"


def test_a_broken_database_degrades_to_the_rules(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    sel = choose(P3, "cpu", policy="measured", db=junk)
    assert sel.source == "rules" and sel.algorithm == select(P3, "cpu").algorithm
    assert sel.trace[-1].id == "measured.db-unavailable"
    assert "junk.sqlite" in sel.trace[-1].reason


def test_the_default_database_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "env.sqlite"))
    sel = choose(P1, "cpu", policy="measured")
    assert str(tmp_path / "env.sqlite") in sel.trace[-1].reason


def test_tune_true_measures_records_and_answers(db, monkeypatch):
    import convsel.execute

    monkeypatch.setattr(convsel.execute, "build", fake_build())
    sel = choose(P1, "cpu", policy="measured", db=db, tune=True)
    assert sel.source == "tuning-db"
    assert db.lookup(P1, "numpy", device_identity("numpy")) is not None
    assert choose(P1, "cpu", policy="measured", db=db).source == "tuning-db"
