"""policy="measured": the tuning database's timings per node, beside ACL's answer."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")
policy = pytest.importorskip("convsel.policies.measured")

from onnx_models import activation_chain

from convsel.onnx import plan
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import device_identity


def _timing(algorithm, median_ms, **params):
    return {"algorithm": algorithm, "params": params, "median_s": median_ms / 1e3,
            "iqr_s": median_ms / 1e5, "runs": 7, "min_s": median_ms / 1e3, "pruned": False}


def test_measured_node_carries_its_time_and_acls_pick(tmp_path):
    db_path = tmp_path / "tuning.sqlite"
    acl_plan = plan(activation_chain(), "cpu")
    tuned = acl_plan.nodes[1]                       # c_relu6: ACL picks winograd 4x4
    assert tuned.selection.algorithm == "winograd"
    timings = {"direct": _timing("direct", 0.5),
               "winograd:4x4": _timing("winograd", 2.0, tile=[4, 4])}
    TuningDB(db_path).record(TuningEntry(
        problem=tuned.problem, backend="numpy", device=device_identity("numpy"),
        winner="direct", tie=(), timings=timings))

    result = plan(activation_chain(), "cpu", "measured", db=db_path)
    nodes = {n.name: n for n in result.nodes}
    measured = nodes["c_relu6"]
    assert measured.selection.source == "tuning-db" and measured.selection.algorithm == "direct"
    assert measured.acl is not None and measured.acl.algorithm == "winograd"
    assert measured.time["kind"] == "measured" and measured.time["label"] == "direct"
    assert measured.time["median_ms"] == pytest.approx(0.5)
    assert measured.time["acl_pick"] == {"label": "winograd:4x4", "median_ms": pytest.approx(2.0),
                                         "iqr_ms": pytest.approx(0.02), "runs": 7}
    others = [n for n in result.nodes if n.name != "c_relu6"]
    assert all(n.time is None and n.selection.source == "rules" for n in others)
    s = result.summary
    assert s["measured"] == 1 and s["measured_ms"] == pytest.approx(0.5)
    assert s["differs_from_acl"] == ["c_relu6"]
    assert result.to_dict()["nodes"][1]["acl"]["algorithm"] == "winograd"


def test_empty_database_answers_from_the_rules(tmp_path):
    TuningDB(tmp_path / "empty.sqlite")   # made empty: a lookup never makes one
    result = plan(activation_chain(), "cpu", "measured", db=tmp_path / "empty.sqlite")
    assert result.policy == "measured" and result.summary["measured"] == 0
    assert all(n.selection.source == "rules" and n.time is None for n in result.nodes)
    assert all(n.selection.trace[-1].id == "measured.no-entry" for n in result.nodes)
