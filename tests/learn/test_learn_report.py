"""Leave-one-net-out cross-validation in `convsel report`, on synthetic timings."""

from __future__ import annotations

import json

import pytest
from learn_support import entry_for, overhead_seconds, synthetic_seconds, training_problems

from convsel.cli import main
from convsel.evaluation.crossval import leave_one_net_out
from convsel.evaluation.report import CV_POLICY, report_from_db
from convsel.problem import ConvProblem
from convsel.tuning.db import TuningDB
from convsel.tuning.layers import Layer
from convsel.tuning.measure import device_identity

NETS = {"wide": [ConvProblem(1, h, h, c, 64, 3, 3, pad=1) for h in (10, 18) for c in (80, 160)],
        "narrow": [ConvProblem(1, h, h, c, 64, 3, 3, pad=1) for h in (10, 18) for c in (12, 20)]}


@pytest.fixture
def dbs(tmp_path):
    ident = device_identity("numpy")
    layers = [Layer(net, f"l{i}", p) for net, ps in NETS.items() for i, p in enumerate(ps)]
    train, fresh = TuningDB(tmp_path / "train.sqlite"), TuningDB(tmp_path / "fresh.sqlite")
    train.record_many([entry_for(p, ident) for p in training_problems()]
                      + [entry_for(x.problem, ident) for x in layers])
    fresh.record_many([entry_for(x.problem, ident) for x in layers])
    return layers, train, fresh, ident


def test_each_net_is_judged_by_a_model_that_never_saw_it(dbs):
    layers, train, fresh, ident = dbs
    report = report_from_db(layers, fresh, backend="numpy", device=ident)
    folds = leave_one_net_out(report, train.entries(), families=["roofline", "gbt"]
                              if _has_lightgbm() else ["roofline"])
    for net, ps in NETS.items():
        assert folds[net]["excluded_training_entries"] == len(ps)
        assert folds[net]["training_problems"] == len(training_problems()) + sum(
            len(v) for k, v in NETS.items() if k != net)
    assert all(CV_POLICY in r.picks for r in report.layers)
    summary = report.summary()
    assert summary[CV_POLICY]["layers"] == len(layers)
    if _has_lightgbm():   # the trees learn the synthetic rule: every pick is a fastest one
        # (both Winograd tiles take the same synthetic time, so regret, not label, is judged)
        assert summary[CV_POLICY]["worst_regret"] == pytest.approx(1.0)
    wide = [r for r in report.layers if r.layer.net == "wide"]
    assert all(r.oracle.startswith("winograd") for r in wide)
    assert synthetic_seconds(wide[0].layer.problem, "winograd") < synthetic_seconds(
        wide[0].layer.problem, "im2col_gemm")


def test_report_cli_with_a_fresh_database_and_cv(dbs, tmp_path, capsys):
    layers, train, fresh, ident = dbs
    layer_file = tmp_path / "layers.json"
    layer_file.write_text(json.dumps([{"net": x.net, "name": x.name, **x.problem.to_dict()}
                                      for x in layers]))
    out = tmp_path / "report"
    assert main(["report", "--layers", str(layer_file), "--db", str(train.path),
                 "--fresh-db", str(fresh.path), "--device-name", ident["name"], "--cv",
                 "--family", "roofline", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "predicted-cv" in text and "leave-one-net-out" in text
    saved = json.loads((out / "report.json").read_text())
    assert set(saved["summary"]) == {"acl", "measured", CV_POLICY}
    assert (out / "crossval.png").stat().st_size > 0


def test_a_fresh_report_judges_the_earlier_runs_own_picks(dbs, tmp_path):
    """The measured policy answers from --db's entry of each layer (its winner, or its tie
    broken by ACL's pick) and is judged on the fresh run: the repeatability bound."""
    layers, train, fresh, ident = dbs
    slow = ConvProblem(1, 9, 9, 200, 64, 3, 3, pad=1)   # the earlier run had Winograd slow
    earlier = TuningDB(tmp_path / "earlier.sqlite")
    earlier.record(entry_for(slow, ident, cost=_winograd_slow))
    fresh.record(entry_for(slow, ident))
    net = [*layers, Layer("extra", "slow", slow)]
    report = report_from_db(net, fresh, backend="numpy", device=ident, training=earlier)
    by_name = {r.layer.name: r for r in report.layers}
    picked = by_name["slow"].picks["measured"]
    assert picked.source == "tuning-db" and not picked.label.startswith("winograd")
    assert by_name["slow"].oracle.startswith("winograd") and picked.regret > 1.5
    # layers the earlier run never timed get no measured pick, not a guess
    assert all("measured" not in r.picks for r in report.layers if r.layer.name != "slow")
    assert report.summary()["measured"]["layers"] == 1
    same = report_from_db(layers, fresh, backend="numpy", device=ident, training=train)
    assert all(r.picks["measured"].label == r.oracle or r.picks["measured"].regret == 1.0
               for r in same.layers)


def _winograd_slow(p: ConvProblem, algorithm: str) -> float:
    return synthetic_seconds(p, algorithm) * (10.0 if algorithm == "winograd" else 1.0)


def _has_lightgbm() -> bool:
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        return False
    return True


def test_judging_by_the_fastest_run_swaps_the_statistic_only():
    from convsel.evaluation.report import judged
    from convsel.tuning.measure import Measurement

    timings = {"a": {"algorithm": "a", "median_s": 2.0, "min_s": 1.5, "iqr_s": 0.1, "runs": 5},
               "b": {"algorithm": "b", "median_s": 1.8, "min_s": 1.7, "iqr_s": 0.1, "runs": 5},
               "c": {"algorithm": "c", "error": "boom"}}
    m = Measurement(NETS["wide"][0], "numpy", {}, timings, {}, None, ())
    assert m.fastest == "b" and judged(m, "median") is m
    by_min = judged(m, "min")
    assert by_min.fastest == "a" and by_min.timings["a"]["median_measured_s"] == 2.0
    assert by_min.timings["c"] == timings["c"]
    with pytest.raises(ValueError, match="judge"):
        judged(m, "mean")


def test_each_family_is_judged_by_a_model_that_never_saw_any_of_it(tmp_path):
    """Leave-one-family-out: the strided and large-kernel shapes are held out in turn (from
    the sampled training shapes too), and the model's picks sit beside ACL's on them."""
    from convsel.evaluation.crossval import leave_one_family_out
    from convsel.evaluation.families import FAMILIES
    from convsel.evaluation.render import table

    ident = device_identity("numpy")
    strided = [ConvProblem(1, h, h, c, 64, 3, 3, stride=2, pad=1) for h in (16, 30)
               for c in (24, 96, 160)]
    large = [ConvProblem(1, h, h, c, 32, 5, 5, pad=2) for h in (12, 20) for c in (16, 80)]
    extra = [ConvProblem(1, 12, 12, c, 48, 5, 5, stride=2, pad=2) for c in (32, 128)]
    train, fresh = TuningDB(tmp_path / "train.sqlite"), TuningDB(tmp_path / "fresh.sqlite")
    train.record_many([entry_for(p, ident) for p in [*training_problems(), *extra]])
    layers = [Layer("s", f"s{i}", p) for i, p in enumerate(strided)] + [
        Layer("l", f"l{i}", p) for i, p in enumerate(large)]
    fresh.record_many([entry_for(x.problem, ident) for x in layers])
    report = report_from_db(layers, fresh, backend="numpy", device=ident)
    folds = leave_one_family_out(report, train.entries(), families=["roofline"])
    assert set(folds) == {"strided", "large-kernel"}
    # every training shape of the family is left out, the held-out extra ones included
    assert folds["strided"]["excluded_training_entries"] == len(extra)
    assert folds["large-kernel"]["excluded_training_entries"] == len(extra)
    assert folds["strided"]["acl"]["layers"] == folds["strided"]["predicted"]["layers"] == 6
    assert folds["large-kernel"]["predicted"]["layers"] == 4
    assert [r["layer"][:2] for r in folds["strided"]["layers"]] == ["s/"] * 6
    assert all(FAMILIES["strided"][1](p) for p in strided + extra)
    for fold in folds.values():
        assert set(fold["targets"]) >= {"regret_at_most_1.03", "not_worse_than_acl",
                                        "no_blunder_above_1.5x"}
        assert fold["acl"]["mean_regret"] >= fold["acl"]["geomean_regret"] * (1 - 1e-9)
    text = table(report)
    assert "leave-one-family-out" in text and "strided" in text and "MISSED" in text
    assert json.loads(json.dumps(report.to_dict()))["family_cv"]["strided"]["layers"]


def test_the_family_table_charges_the_training_runs_own_winners_as_the_floor(tmp_path):
    """Where the training database timed some of a held-out family's layers (a net's), the
    fold's re-timed row charges its own winners on the fresh run: Winograd won there and is
    10x slower here, so the floor is above 1 on exactly the layers it timed."""
    from convsel.evaluation.crossval import leave_one_family_out
    from convsel.evaluation.render import table

    ident = device_identity("numpy")
    large = [ConvProblem(1, h, h, c, 32, 5, 5, pad=2) for h in (12, 20) for c in (160, 200)]
    train, fresh = TuningDB(tmp_path / "train.sqlite"), TuningDB(tmp_path / "fresh.sqlite")
    train.record_many([entry_for(p, ident) for p in [*training_problems(), *large[:2]]])
    layers = [Layer("l", f"l{i}", p) for i, p in enumerate(large)]
    fresh.record_many([entry_for(x.problem, ident, cost=_winograd_slow) for x in layers])
    report = report_from_db(layers, fresh, backend="numpy", device=ident, training=train)
    fold = leave_one_family_out(report, train.entries(), families=["roofline"])["large-kernel"]
    assert fold["excluded_training_entries"] == 2          # the model never saw them
    assert fold["retimed"]["layers"] == fold["predicted_on_retimed"]["layers"] == 2
    assert fold["predicted"]["layers"] == 4
    timed = [r for r in report.layers if "measured" in r.picks]
    assert [r.layer.problem for r in timed] == large[:2]
    assert all(r.picks["measured"].label.startswith("winograd") for r in timed)
    assert fold["retimed"]["geomean_regret"] == pytest.approx(
        (timed[0].picks["measured"].regret * timed[1].picks["measured"].regret) ** 0.5)
    # Winograd at 0.4x im2col's time in training, 10x that here: 4x im2col, the fastest
    assert fold["retimed"]["geomean_regret"] == pytest.approx(4.0)
    assert "re-timed" in table(report)
    # a fresh report with no training database has no such row
    bare = report_from_db(layers, fresh, backend="numpy", device=ident)
    assert leave_one_family_out(bare, train.entries(),
                                families=["roofline"])["large-kernel"]["retimed"] is None


def test_tune_auto_times_the_shortlist_where_the_model_abstains(tmp_path):
    """The family table's tune-auto row: a layer the model abstains on costs the fastest of
    its shortlist (the model's top 3 and ACL's pick) in the fresh timings, so never more than
    ACL's pick; every other layer costs what the predicted policy picked."""
    from convsel.evaluation.crossval import leave_one_family_out
    from convsel.evaluation.render import table

    ident = device_identity("numpy")
    large = [ConvProblem(1, h, h, c, 32, 7, 7, pad=3) for h in (12, 20) for c in (16, 80)]
    train, fresh = TuningDB(tmp_path / "train.sqlite"), TuningDB(tmp_path / "fresh.sqlite")
    train.record_many([entry_for(p, ident) for p in training_problems()])
    layers = [Layer("l", f"l{i}", p) for i, p in enumerate(large)]
    # the fresh run disagrees with the training's rule: ACL's pick is not the fastest
    fresh.record_many([entry_for(x.problem, ident, cost=overhead_seconds) for x in layers])
    report = report_from_db(layers, fresh, backend="numpy", device=ident)
    fold = leave_one_family_out(report, train.entries(), families=["analytic"])["large-kernel"]
    assert fold["accepted"] and fold["abstained"] == len(large)
    assert fold["predicted_tuned"]["layers"] == len(large)
    assert 0 < fold["tuned_timed_candidates"] < fold["tuned_candidates"]
    for row, r in zip(fold["layers"], report.layers, strict=True):
        timings = r.measurement.timings
        assert row["source"] == "rules" and row["tuned"] in timings
        assert row["tuned_regret"] <= row["acl_regret"]
        # the fastest of what it timed: a candidate it did not time may be faster
        assert timings[row["tuned"]]["median_s"] >= timings[r.oracle]["median_s"]
    # timing the shortlist found faster candidates than ACL's pick here
    assert any(row["tuned_regret"] < row["acl_regret"] for row in fold["layers"])
    assert fold["predicted_tuned"]["geomean_regret"] < fold["predicted"]["geomean_regret"]
    assert "tune-auto" in table(report)
