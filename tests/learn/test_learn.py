"""Learned cost models and the predicted policy, on synthetic timings whose answer is known.

The timings follow a rule no shipped heuristic knows: Winograd is fast when the layer has
many input channels and three times slower than im2col + GEMM when it has few. A model fitted
on some shapes must pick Winograd for unseen wide shapes and im2col + GEMM for narrow ones.
That rule is not linear in work, so the roofline family cannot express it (the comparison by
held-out regret must then keep the trees); a second rule it can express (Winograd pays a large
fixed cost: slow on small layers only) is learned by the roofline family.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from learn_support import (
    UNSEEN_NARROW,
    UNSEEN_WIDE,
    entry_for,
    fit_and_save,
    overhead_seconds,
    training_problems,
)

from convsel import ConvProblem, choose
from convsel.cli import main
from convsel.learn import stored as stored_mod
from convsel.learn.features import candidate_features
from convsel.learn.fit import dataset, fit
from convsel.learn.stored import decode, model_key
from convsel.tuning import db as db_mod
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import candidates, decide
from convsel.tuning.sample import sample_problems


def test_a_slow_kind_of_shape_is_learned(db, ident):
    pytest.importorskip("lightgbm")
    meta = fit_and_save(db, ident)
    assert meta["family"] == "gbt"
    assert meta["held_out"]["gbt"]["geomean_regret"] < 1.05
    assert meta["held_out"]["roofline"]["geomean_regret"] > 1.2   # it cannot express this
    wide = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    narrow = choose(UNSEEN_NARROW, policy="predicted", backend="numpy", db=db)
    assert (wide.source, wide.algorithm) == ("model", "winograd")
    assert (narrow.source, narrow.algorithm) == ("model", "im2col_gemm")
    assert narrow.rule == "predicted.model" and "predicts im2col_gemm fastest" in narrow.reason


def test_a_fixed_cost_is_learned_by_the_roofline(tmp_path, ident):
    database = TuningDB(tmp_path / "overhead.sqlite")
    database.record_many([entry_for(p, ident, overhead_seconds) for p in training_problems()])
    meta = fit_and_save(database, ident, ["roofline"])
    assert meta["held_out"]["roofline"]["geomean_regret"] < 1.05
    big = ConvProblem(1, 40, 40, 256, 256, 3, 3, pad=1)       # 1.9 GFLOP: Winograd wins
    small = ConvProblem(1, 10, 10, 24, 24, 3, 3, pad=1)       # 1 ms overhead dominates
    # both lie beyond the trained sizes: asked not to abstain, the model extrapolates
    assert choose(big, policy="predicted", db=database, abstain=False).algorithm == "winograd"
    assert choose(small, policy="predicted", db=database,
                  abstain=False).algorithm == "im2col_gemm"


def test_the_answer_ranks_every_candidate_and_names_the_model(db, ident):
    meta = fit_and_save(db, ident)
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    found, _ = candidates(UNSEEN_WIDE, "numpy")
    ranking = sel.measurement["ranking"]
    assert {r["label"] for r in ranking} == {c.label for c in found}
    times = [r["predicted_ms"] for r in ranking if r["predicted_ms"] is not None]
    assert times == sorted(times) and all(r["uncertainty_factor"] >= 1.0 for r in ranking)
    model = sel.measurement["model"]
    assert (model["id"], model["family"]) == (meta["id"], meta["family"])
    assert model["training_problems"] == len(training_problems())
    assert model["device"]["name"] == ident["name"]
    # the answer is JSON-ready as the service sends it
    json.dumps(sel.to_dict())


def test_model_round_trip_through_the_database(db, ident):
    meta = fit_and_save(db, ident)
    record = db.load_model(model_key("numpy", ident))
    assert record["family"] == meta["family"] and record["meta"]["id"] == meta["id"]
    model = decode(record)
    variants = [(c.label, c.algorithm, c.params) for c in candidates(UNSEEN_WIDE, "numpy")[0]]
    data = dataset(db.entries())
    refit = fit(db.entries(), families=[meta["family"]])
    np.testing.assert_allclose(model.model.predict(data.x, data.variants),
                               refit.model.predict(data.x, data.variants), rtol=1e-9)
    assert model.rank(UNSEEN_WIDE, variants)[0].label.startswith("winograd")


def test_the_policy_is_deterministic_for_a_given_model(db, ident):
    fit_and_save(db, ident)
    first = choose(UNSEEN_NARROW, policy="predicted", backend="numpy", db=db).to_dict()
    stored_mod._cache.clear()     # decoded again from the stored text
    again = choose(UNSEEN_NARROW, policy="predicted", backend="numpy", db=db).to_dict()
    assert first == again


def test_a_model_of_another_device_is_not_used(db, ident):
    meta = fit_and_save(db, ident)
    other = {**ident, "name": "another CPU"}
    db.save_model(model_key("numpy", other), meta["family"],
                  db.load_model(model_key("numpy", ident))["model"], meta)
    with db._store.transaction() as tx:   # leave only the other device's model
        tx.execute("DELETE FROM models WHERE device=?", (ident["name"],))
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    assert sel.source == "rules" and sel.trace[-1].id == "predicted.no-model"
    assert "no model for numpy" in sel.trace[-1].reason
    assert sel.algorithm == choose(UNSEEN_WIDE).algorithm


def test_a_model_of_another_version_is_not_used(db, ident, monkeypatch):
    monkeypatch.setattr(db_mod, "__version__", "0.0.0-older")
    fit_and_save(db, ident)
    monkeypatch.undo()
    assert db.load_model(model_key("numpy", ident)) is None
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    assert (sel.source, sel.trace[-1].id) == ("rules", "predicted.no-model")


@pytest.mark.parametrize("damage", ["body", "text"])
def test_a_corrupt_model_is_reported_and_the_rules_answer(db, ident, damage):
    pytest.importorskip("lightgbm")
    meta = fit_and_save(db, ident, ["gbt"])
    model = db.load_model(model_key("numpy", ident))["model"]
    if damage == "body":   # a changed body no longer matches its id
        model = {"lightgbm_text": model["lightgbm_text"].replace("tree", "tre", 1)}
    else:                  # consistent id, unreadable text
        model = {"lightgbm_text": "tree\ngarbage"}
        from convsel.learn.fit import model_id
        meta = {**meta, "id": model_id("gbt", model)}
    db.save_model(model_key("numpy", ident), "gbt", model, meta)
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    assert sel.source == "rules" and sel.trace[-1].id == "predicted.no-model"
    assert "cannot be used" in sel.trace[-1].reason
    assert sel.algorithm == choose(UNSEEN_WIDE).algorithm


def test_no_model_says_so_and_the_rules_answer(tmp_path):
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy",
                 db=TuningDB(tmp_path / "empty.sqlite"))
    acl = choose(UNSEEN_WIDE)
    assert (sel.policy, sel.source, sel.algorithm) == ("predicted", "rules", acl.algorithm)
    assert "convsel fit" in sel.trace[-1].reason


def test_measured_answers_from_entry_then_model_then_rules(tmp_path, db, ident):
    seen = training_problems()[0]
    assert choose(seen, policy="measured", db=db).source == "tuning-db"
    no_model = choose(UNSEEN_WIDE, policy="measured", db=db)
    assert no_model.source == "rules" and no_model.trace[-1].id == "measured.no-entry"
    assert "no model" in no_model.trace[-1].reason
    fit_and_save(db, ident)
    by_model = choose(UNSEEN_WIDE, policy="measured", db=db)
    assert (by_model.policy, by_model.source, by_model.algorithm) == (
        "measured", "model", "winograd")
    assert [s.id for s in by_model.trace[-2:]] == ["measured.no-entry", "predicted.model"]


def test_fit_needs_enough_shapes(tmp_path, ident):
    from convsel.errors import InvalidProblemError

    few = [entry_for(p, ident) for p in training_problems()[:3]]
    with pytest.raises(InvalidProblemError, match="convsel tune --sample"):
        fit(few)


def test_fit_and_select_from_the_command_line(db, capsys):
    pytest.importorskip("lightgbm")
    assert main(["fit", "--db", str(db.path)]) == 0
    out = capsys.readouterr().out
    assert "held-out regret" in out and "ACL's rules (cpu)" in out and "accepted" in out
    assert main(["select", "--policy", "predicted", "--db", str(db.path), "--h", "20",
                 "--w", "20", "--c", "192", "--k", "96", "--kernel", "3", "--pad", "1",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["source"], answer["algorithm"]) == ("model", "winograd")


def test_a_family_that_cannot_beat_the_rules_is_stored_rejected_and_never_answers(db, capsys):
    """The roofline family cannot express "Winograd is slow below 64 channels": held out,
    it does worse than ACL's rules, so `fit` stores it as rejected and the rules answer."""
    assert main(["fit", "--db", str(db.path), "--family", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "REJECTED" in out and "does not beat ACL's rules" in out
    sel = choose(UNSEEN_NARROW, policy="predicted", db=db)
    assert (sel.source, sel.trace[-1].id) == ("rules", "predicted.model-rejected")
    assert "rejected by `convsel fit`" in sel.trace[-1].reason
    assert sel.algorithm == choose(UNSEEN_NARROW).algorithm


def test_sampled_shapes_are_valid_distinct_bounded_and_seeded():
    a = sample_problems(60, seed=3, max_flops=5e8)
    assert a == sample_problems(60, seed=3, max_flops=5e8)
    assert a != sample_problems(60, seed=4, max_flops=5e8)
    assert len(set(a)) == 60 and all(p.flops <= 5e8 for p in a)
    kinds = {(p.kh, p.kw) for p in a}
    assert {(1, 1), (3, 3)} <= kinds
    assert any(p.groups > 1 for p in a) and any(p.stride != (1, 1) for p in a)


def test_prepare_runs_the_predicted_pick_correctly(db, ident):
    import convsel
    from convsel.reference import conv2d_reference

    pytest.importorskip("lightgbm")
    fit_and_save(db, ident, ["gbt"])
    p = ConvProblem(1, 12, 12, 96, 16, 3, 3, pad=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    op = convsel.prepare(p, w, policy="predicted", db=db)
    assert op.selection.source == "model" and op.algorithm == op.selection.algorithm
    from tolerances import tolerance

    ref = conv2d_reference(p, x, w, None)
    scale = conv2d_reference(p, np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                             None).max()
    assert np.abs(op.run(x) - ref).max() / scale <= tolerance(op.algorithm, "F32")


def test_the_database_keeps_every_candidates_timing_and_variant(tmp_path):
    from convsel.tuning.measure import TimingSettings, measure

    p = ConvProblem(1, 6, 6, 4, 4, 3, 3, pad=1)
    m = measure(p, "numpy", settings=TimingSettings(warmup=0, min_runs=2, min_time=0.0))
    database = TuningDB(tmp_path / "t.sqlite")
    database.record(m.entry())
    stored = database.lookup(p, "numpy", m.device)
    found, _ = candidates(p, "numpy")
    assert {c.label for c in found} <= set(stored.timings)
    for cand in found:
        t = stored.timings[cand.label]
        assert {"algorithm", "params", "median_s", "iqr_s", "runs", "min_s"} <= set(t)
        assert t["params"] == {k: list(v) for k, v in cand.params.items()}
    # (on a loaded machine the entry is noisy: the fit would leave it out unless told)
    assert len(dataset([stored], noisy=True).y) == len(found)


def test_tune_sample_adds_generated_layers_to_named_ones():
    import argparse

    from convsel.cli.tune_cmd import layers_from_args

    args = argparse.Namespace(h=None, layers=None, net=["alexnet"], sample=5, seed=2)
    layers = layers_from_args(args)
    assert [x.net for x in layers].count("sample-2") == 5
    assert {x.problem for x in layers if x.net == "sample-2"} == set(sample_problems(5, 2))
    only = layers_from_args(argparse.Namespace(h=None, layers=None, net=None, sample=3, seed=0))
    assert [x.net for x in only] == ["sample-0"] * 3


def test_a_model_of_another_feature_set_is_not_used(db, ident):
    meta = fit_and_save(db, ident, ["roofline"])
    record = db.load_model(model_key("numpy", ident))
    older = {**meta, "features": meta["features"][:-1]}   # as before an algorithm was added
    db.save_model(model_key("numpy", ident), "roofline", record["model"], older)
    sel = choose(UNSEEN_WIDE, policy="predicted", backend="numpy", db=db)
    assert (sel.source, sel.trace[-1].id) == ("rules", "predicted.no-model")
    assert "other features" in sel.trace[-1].reason and "convsel fit" in sel.trace[-1].reason


def test_a_tiled_gemms_work_groups_and_their_fill_are_features():
    p = ConvProblem(1, 10, 10, 16, 48, 1, 1)       # a (100 pixels x 48 channels) GEMM
    row = candidate_features(p, "implicit_gemm", {"tile": [32, 32, 8, 4, 4], "vec": 4})
    # 4 x 2 work-groups of 32 x 32, of which 100 x 48 is useful work
    assert row["log_workgroups"] == pytest.approx(np.log10(8))
    assert row["tile_fill"] == pytest.approx(100 * 48 / (128 * 64))
    assert (row["tile_k"], row["tile_warp"], row["vec"]) == (8, 16, 4)
    assert row["split_k"] == 0          # the backend's own split: not named
    split = candidate_features(p, "implicit_gemm",
                               {"tile": [32, 32, 8, 4, 4], "vec": 4, "split": 2})
    assert split["split_k"] == 2
    assert split["log_workgroups"] == pytest.approx(np.log10(16))   # each split launches 8
    plain = candidate_features(p, "direct")
    assert (plain["log_workgroups"], plain["tile_fill"], plain["tile_k"]) == (0, 0, 0)
    assert plain["log_reduction"] == pytest.approx(np.log10(16))


def test_a_model_fitted_on_shuffled_timings_is_rejected_and_the_rules_answer(tmp_path, ident):
    """Noise for a model: every timing moved to a random candidate of a random shape. No
    family may beat ACL's rules on that beyond chance, so none is stored as accepted, and
    both model-backed policies answer from the rules and say why."""
    honest = [entry_for(p, ident) for p in training_problems()]
    rng = np.random.default_rng(0)
    times = [t["median_s"] for e in honest for t in e.timings.values()]
    shuffled = list(rng.permutation(times))
    noise = []
    for e in honest:
        timings = {k: {**t, "median_s": float(shuffled.pop()), "iqr_s": 0.0}
                   for k, t in e.timings.items()}
        noise.append(TuningEntry(problem=e.problem, backend="numpy", device=ident,
                                 timings=timings, winner=decide(timings)[0],
                                 tie=decide(timings)[1]))
    database = TuningDB(tmp_path / "noise.sqlite")
    database.record_many(noise)
    meta = fit_and_save(database, ident)
    assert meta["accepted"] is False
    for family, scores in meta["held_out"].items():
        assert scores["verdict"]["accepted"] is False, (family, scores["verdict"]["why"])
    for policy in ("predicted", "measured"):
        sel = choose(UNSEEN_WIDE, policy=policy, db=database)
        assert sel.source == "rules" and sel.algorithm == choose(UNSEEN_WIDE).algorithm
        assert "rejected by `convsel fit`" in sel.trace[-1].reason, sel.trace[-1].reason


def test_the_sample_covers_the_documented_broad_space():
    """Every kind the sampler documents shows up in a few hundred shapes."""
    shapes = sample_problems(300, seed=0)
    assert any(p.c <= 4 for p in shapes)                                   # few channels
    assert any(1 < p.groups < p.c for p in shapes)                         # grouped
    assert {(p.kh, p.kw) for p in shapes if p.is_depthwise} >= {(3, 3), (5, 5), (7, 7)}
    assert any(p.kh == 1 and p.kw >= 9 for p in shapes) and any(
        p.kw == 1 and p.kh >= 9 for p in shapes)                           # 1xN, Nx1
    assert {p.stride[0] for p in shapes} >= {1, 2, 3, 4}
    assert {p.dilation[0] for p in shapes} >= {1, 2, 3, 4}
    assert any(p.h <= 7 and p.c >= 1024 for p in shapes)                  # tiny maps, wide
    assert any(p.h >= 96 and p.c <= 16 for p in shapes)                   # large maps, narrow
    assert max(p.n for p in shapes) >= 16 and min(p.n for p in shapes) == 1


def test_a_shape_far_outside_the_training_data_abstains_and_says_so(tmp_path, ident):
    """Trained on 3x3 layers of 16 channels or more: a 1-channel 11x11 layer is outside what
    the model has seen, so the rules answer and the trace names the sizes out of range; a
    shape among the trained ones is still the model's."""
    database = TuningDB(tmp_path / "wide.sqlite")
    database.record_many([entry_for(p, ident, overhead_seconds) for p in training_problems()
                          if p.c >= 16])
    assert fit_and_save(database, ident, ["roofline"])["accepted"]
    far = ConvProblem(1, 32, 32, 1, 16, 11, 11, pad=5)
    sel = choose(far, policy="predicted", db=database)
    assert (sel.source, sel.trace[-1].id) == ("rules", "predicted.outside")
    reason = sel.trace[-1].reason
    assert "abstains" in reason and "outside what model" in reason
    assert "channels_in 1 below the smallest trained (16)" in reason
    assert "kernel 11 above the largest trained (3)" in reason
    assert sel.algorithm == choose(far).algorithm
    near = choose(ConvProblem(1, 20, 20, 48, 64, 3, 3, pad=1), policy="predicted", db=database)
    assert near.source == "model"
    bold = choose(far, policy="predicted", db=database, abstain=False)
    assert bold.source == "model"      # told not to abstain, it extrapolates


def test_the_distance_rule_catches_a_combination_no_trained_shape_resembles():
    from convsel.learn.domain import check, describe

    # every size in range, but trained shapes pair few channels with large maps only
    trained = [ConvProblem(1, h, h, c, c, 3, 3, pad=1)
               for h, c in [(56, 16), (64, 16), (48, 24), (7, 512), (8, 512), (6, 256)]
               for _ in (0,)] + [ConvProblem(1, 56, 56, 32, 32, 3, 3, pad=1),
                                 ConvProblem(1, 7, 7, 384, 384, 3, 3, pad=1)]
    domain = describe(trained)
    assert check(domain, ConvProblem(1, 56, 56, 24, 24, 3, 3, pad=1)).inside
    odd = ConvProblem(1, 56, 56, 512, 512, 3, 3, pad=1)
    far = check(domain, odd, rules=("distance",))
    assert not far.inside and far.rule == "distance" and "nearest trained shape" in far.reason


def test_with_tune_a_shape_it_abstains_on_is_timed_instead_and_recorded(tmp_path, ident):
    """tune="auto": outside its training data the model's top K and ACL's pick are timed,
    the entry is recorded, and the trace says why it was timed."""
    database = TuningDB(tmp_path / "wide.sqlite")
    database.record_many([entry_for(p, ident, overhead_seconds) for p in training_problems()
                          if p.c >= 16])
    assert fit_and_save(database, ident, ["roofline"])["accepted"]
    far = ConvProblem(1, 12, 12, 1, 16, 11, 11, pad=5)
    sel = choose(far, policy="predicted", db=database, tune="auto", top=1)
    assert (sel.policy, sel.source) == ("predicted", "tuning-db")
    step = next(s for s in sel.trace if s.id == "predicted.outside-timed")
    assert "abstains" in step.reason and "timed" in step.reason
    entry = database.lookup(far, "numpy", ident)
    assert entry is not None and any("not timed" in str(t.get("skipped", ""))
                                     for t in entry.timings.values())
    timed = [k for k, t in entry.timings.items() if "median_s" in t]
    assert 1 <= len(timed) <= 2 and choose(far).algorithm in {
        entry.timings[k]["algorithm"] for k in timed}


def test_with_tune_an_extrapolation_it_would_answer_is_timed_too(tmp_path, ident):
    """tune="auto" times every shape outside the model's training data: also where fit found
    this device's models extrapolating better than the rules (without tune the model answers
    it, and the trace says it extrapolates)."""
    import dataclasses

    from convsel.policies.predicted import load_stored, select_predicted
    from convsel.rules import as_rules
    from convsel.selection import select
    from convsel.targets import resolve_target

    database = TuningDB(tmp_path / "wide.sqlite")
    database.record_many([entry_for(p, ident, overhead_seconds) for p in training_problems()
                          if p.c >= 16])
    assert fit_and_save(database, ident, ["roofline"])["accepted"]
    model, why = load_stored("numpy", None, database.path)
    assert model is not None, why
    beats = {"shapes": 10, "model": {"geomean_regret": 1.01, "worst": 1.2},
             "rules": {"geomean_regret": 1.5, "worst": 3.0}}
    trusting = dataclasses.replace(model, meta={**model.meta, "extrapolation": {
        name: beats for name in ("grouped", "depthwise", "few-channel", "large-kernel",
                                 "strided")}})
    far = ConvProblem(1, 12, 12, 1, 16, 11, 11, pad=5)
    rules = as_rules(None)
    target = resolve_target("cpu", rules)
    acl = select(far, target, rules=rules)
    answered = select_predicted(far, target, rules, acl, model=trusting, db=database.path)
    assert answered.source == "model"
    assert any(s.id == "predicted.outside-trusted" for s in answered.trace)
    timed = select_predicted(far, target, rules, acl, model=trusting, db=database.path,
                             tune=True, top=1)
    assert timed.source == "tuning-db"
    step = next(s for s in timed.trace if s.id == "predicted.outside-timed")
    assert "would answer" in step.reason and "extrapolates" in step.reason
    assert database.lookup(far, "numpy", ident) is not None
