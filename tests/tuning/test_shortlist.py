"""Timing only what the model shortlists (`find --top`, `tune --top`, POST /v1/find "top"):
the model's K best-predicted candidates and ACL's pick, every other one skipped with why."""

from __future__ import annotations

import json

import pytest
from learn_support import entry_for, fit_and_save, overhead_seconds, training_problems
from service_support import assert_error, client_for

import convsel
from convsel import ConvProblem, algorithms, choose
from convsel.cli import main
from convsel.errors import InvalidProblemError
from convsel.policies.predicted import shortlist
from convsel.rules import as_rules
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB
from convsel.tuning.measure import Shortlist, measure
from convsel.tuning.timing import TimingSettings

P = ConvProblem(1, 10, 10, 8, 8, 3, 3, pad=1)     # six candidates on numpy
FAST = TimingSettings(warmup=1, min_runs=3, min_time=0.0, max_runs=6, rounds=2)
SMALL = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}

pytestmark = pytest.mark.usefixtures("fresh_learn_caches")


@pytest.fixture
def db(tmp_path) -> TuningDB:
    """A database with a model fitted on synthetic timings (the roofline family, no optional
    learner needed, on timings it can learn: Winograd's fixed cost, so it beats ACL's rules
    and is accepted)."""
    ident = convsel.tuning.identity.device_identity("numpy")
    database = TuningDB(tmp_path / "tuning.sqlite")
    database.record_many([entry_for(p, ident, overhead_seconds) for p in training_problems()])
    assert fit_and_save(database, ident, families=["roofline"])["accepted"]
    return database


def _ranking(problem: ConvProblem, db: TuningDB) -> list[str]:
    # P is smaller than the trained shapes: the policy would abstain, the shortlist does not
    sel = choose(problem, "cpu", policy="predicted", backend="numpy", db=db, abstain=False)
    assert sel.source == "model"
    return [r["label"] for r in sel.measurement["ranking"]]


def _acl(problem: ConvProblem) -> str:
    sel = choose(problem, "cpu")
    return algorithms.label_of(sel.algorithm, sel.params)


def test_the_shortlist_is_the_models_top_k_and_acls_pick(db):
    rules = as_rules(None)
    for top in (1, 2, 3):
        found, why = shortlist(P, resolve_target("cpu", rules), rules, top=top, db=db)
        assert found is not None and why == ""
        assert found.labels == {*_ranking(P, db)[:top], _acl(P)}
        assert "top" in found.reason and "ACL's pick" in found.reason


def test_no_model_no_shortlist_and_why(tmp_path):
    rules = as_rules(None)
    TuningDB(tmp_path / "empty.sqlite")   # made empty: a lookup never makes one
    found, why = shortlist(P, resolve_target("cpu", rules), rules, top=2,
                           db=tmp_path / "empty.sqlite")
    assert found is None and "no model" in why and "answered from" not in why


@pytest.mark.parametrize("top", [0, -1, 1.5, True, "3"])
def test_a_bad_top_names_the_field(db, top):
    """find() checks top before anything is timed; shortlist() trusts what it is handed."""
    with pytest.raises(InvalidProblemError, match="top") as info:
        convsel.find(P, settings=FAST, top=top, db=db)
    assert info.value.field == "top"


@pytest.mark.parametrize("command", ["find", "tune"])
def test_a_bad_top_flag_is_refused_before_anything_runs(command, capsys):
    assert main([command, "--h", "6", "--w", "6", "--c", "4", "--k", "4", "--kernel", "3",
                 "--top", "0"]) == 2
    assert "top=0: must be an integer >= 1" in capsys.readouterr().err


def test_measure_times_the_shortlist_only():
    keep = frozenset({"direct", "im2col_gemm"})
    m = measure(P, settings=FAST, shortlist=Shortlist(keep, "not on my list"))
    assert set(m.timings) == keep
    left = {k for k, why in m.skipped.items() if why == "not timed: not on my list"}
    assert left and not left & keep
    assert m.complete and m.fastest in keep
    # a shortlist naming none of the candidates would leave nothing to decide from
    every = measure(P, settings=FAST, shortlist=Shortlist(frozenset({"nope"}), "x"))
    assert len(every.timings) > len(keep)


def test_find_top_times_what_the_model_shortlists(db):
    r = convsel.find(P, settings=FAST, top=1, db=db.path)
    expected = {_ranking(P, db)[0], _acl(P)}
    assert {e.label for e in r.results if e.status in ("ok", "error")} == expected
    skipped = [e for e in r.results if e.status == "skipped"]
    assert skipped and all("outside model" in e.reason for e in skipped)
    assert r.narrowed is not None and r.narrowed.startswith("top 1: timed")
    assert r.to_dict()["narrowed"] == r.narrowed


def test_find_top_without_a_model_times_everything_and_says_so(tmp_path):
    r = convsel.find(P, settings=FAST, top=1, db=tmp_path / "empty.sqlite")
    assert not [e for e in r.results if e.status == "skipped"]
    assert r.narrowed is not None and "every candidate timed" in r.narrowed


def test_tune_top_records_the_shortlisted_timings(db, capsys):
    args = ["tune", "--db", str(db.path), "--h", "10", "--w", "10", "--c", "8", "--k", "8",
            "--kernel", "3", "--pad", "1", "--min-time", "0", "--repeats", "3",
            "--no-progress", "--top", "1"]
    assert main(args) == 0
    entry = db.lookup(P, "numpy", convsel.tuning.identity.device_identity("numpy"))
    assert entry is not None
    timed = {k for k, t in entry.timings.items() if "median_s" in t}
    assert timed == {_ranking(P, db)[0], _acl(P)}
    assert any("outside model" in str(t.get("skipped", "")) for t in entry.timings.values())
    assert main([*args[:-1], "0"]) == 2       # --top 0 is the caller's mistake
    assert "top=0: must be an integer >= 1" in capsys.readouterr().err
    assert main([*args, "--sample", "3"]) == 2  # training data is timed in full
    assert "--top with --sample" in capsys.readouterr().err


def test_tune_top_without_a_model_says_so_once(tmp_path, capsys):
    db = tmp_path / "empty.sqlite"
    assert main(["tune", "--db", str(db), "--net", "alexnet", "--min-time", "0",
                 "--repeats", "1", "--no-progress", "--top", "2", "--budget", "0.5"]) == 0
    err = capsys.readouterr().err
    assert err.count("timing every candidate") == 1 and "no model" in err


def test_find_route_top(db, tmp_path):
    with client_for(tuning_db=db.path) as c:
        body = c.post("/v1/find", json={"problem": SMALL, "budget_s": 20, "top": 1}).json()
        assert body["narrowed"].startswith("top 1: timed")
        assert [e for e in body["results"] if e["status"] == "skipped"]
        assert_error(c.post("/v1/find", json={"problem": SMALL, "top": 0}), 422,
                     "validation_error", "body.top")
        assert_error(c.post("/v1/find", json={"problem": SMALL, "top": 10**6}), 422,
                     "validation_error", "body.top")
    with client_for(tuning_db=tmp_path / "empty.sqlite") as c:
        body = c.post("/v1/find", json={"problem": SMALL, "budget_s": 20, "top": 1}).json()
        assert "every candidate timed" in body["narrowed"]
        assert str(tmp_path) not in json.dumps(body)   # the database's path stays hidden
