"""The report: regret per layer and policy from synthetic timings, the table, JSON and PNGs."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest

import convsel.evaluation.report as report_mod
from convsel import ConvProblem, UnsupportedError, select
from convsel.evaluation.render import plots, table
from convsel.evaluation.report import build_report, geomean
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.layers import Layer
from convsel.tuning.measure import Measurement, decide, device_identity

DEVICE = {"vendor": "x86_64", "name": "test-cpu", "driver": "numpy"}
P3 = ConvProblem(1, 16, 16, 32, 32, 3, 3, pad=1)          # ACL: winograd 4x4
P1 = ConvProblem(1, 8, 8, 32, 16, 1, 1)                  # ACL: gemm_1x1
P1S = ConvProblem(1, 8, 8, 32, 16, 1, 1, stride=2)       # ACL: im2col_gemm
LAYERS = [Layer("net", "three", P3), Layer("net", "one", P1), Layer("other", "strided", P1S),
          Layer("other", "int8", P1.replace(dtype="QASYMM8"))]


def t(median: float, alg: str, **params: Any) -> dict[str, Any]:
    return {"algorithm": alg, "params": params, "median_s": median, "iqr_s": 0.0, "runs": 5}


TIMINGS = {
    P3: {"winograd:4x4": t(4e-3, "winograd", tile=[4, 4]), "im2col_gemm": t(2e-3, "im2col_gemm"),
         "direct": t(8e-3, "direct")},
    P1: {"gemm_1x1": t(1e-3, "gemm_1x1"), "im2col_gemm": t(1.5e-3, "im2col_gemm")},
    P1S: {"gemm_1x1": t(1e-3, "gemm_1x1"), "im2col_gemm": t(3e-3, "im2col_gemm"),
          "fft": {"algorithm": "fft", "params": {}, "error": "RuntimeError: boom"}},
}


def fake_measure(problem, backend="numpy", device=None, **_: Any) -> Measurement:
    if not problem.is_float:
        raise UnsupportedError("dtype QASYMM8 is selection-only")
    timings = TIMINGS[problem]
    return Measurement(problem, backend, DEVICE, timings, {}, *decide(timings))


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setattr(report_mod, "measure", fake_measure)
    db = TuningDB(tmp_path / "tuning.sqlite")
    # the database holds P3 only (tuned earlier, im2col_gemm won); P1/P1S are untuned
    db.record(TuningEntry(problem=P3, backend="numpy", device=device_identity("numpy"),
                          winner="im2col_gemm", tie=(), timings=TIMINGS[P3]))
    return build_report(LAYERS, db=db)


def test_each_pick_is_timed_against_the_fastest(report):
    rows = {r.layer.name: r for r in report.layers}
    assert rows["three"].oracle == "im2col_gemm"
    assert rows["three"].picks["acl"].label == "winograd:4x4"
    assert rows["three"].picks["acl"].regret == pytest.approx(2.0)
    assert rows["three"].picks["measured"].regret == pytest.approx(1.0)
    assert rows["three"].picks["measured"].source == "tuning-db"
    assert rows["strided"].picks["acl"].label == "im2col_gemm"
    assert rows["strided"].picks["acl"].regret == pytest.approx(3.0)
    assert rows["strided"].picks["measured"].source == "rules"
    assert rows["strided"].picks["acl"].reason == select(P1S, "cpu").reason


def test_summary_geomean_oracle_hits_and_tuned_only(report):
    s = report.summary()
    assert s["acl"]["layers"] == 3
    assert s["acl"]["geomean_regret"] == pytest.approx((2.0 * 1.0 * 3.0) ** (1 / 3))
    assert s["acl"]["oracle_picks"] == 1
    assert s["measured"]["geomean_regret"] == pytest.approx(3.0 ** (1 / 3))
    assert (s["measured"]["tuned_layers"], s["measured"]["geomean_regret_tuned"]) == (1, 1.0)
    assert s["acl"]["tuned_layers"] == 0 and s["acl"]["geomean_regret_tuned"] is None
    assert report.summary("other")["acl"]["geomean_regret"] == pytest.approx(3.0)


def test_unsupported_layers_are_left_out_with_the_reason(report):
    assert report.left_out == ["other/int8: dtype QASYMM8 is selection-only"]


def test_worst_lists_acl_layers_with_the_rule_reason(report):
    worst = report.worst("acl")
    assert [r.layer.name for r in worst] == ["strided", "three"]
    text = table(report)
    assert "where ACL's choice costs most" in text
    assert "3.00×  other/strided: ACL runs im2col_gemm (GEMM), fastest is gemm_1x1" in text
    assert select(P1S, "cpu").rule in text


def test_json_round_trips(report):
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["summary"]["acl"]["oracle_picks"] == 1
    assert doc["worst_acl"][0]["layer"] == "other/strided"
    assert doc["layers"][0]["timings_ms"]["direct"]["median"] == 8.0
    assert doc["layers"][2]["errors"] == {"fft": "RuntimeError: boom"}
    assert set(doc["per_net"]) == {"net", "other"}


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_plots_are_real_pngs(report, tmp_path):
    paths = plots(report, tmp_path / "out")
    assert [p.name for p in paths] == ["layers-net.png", "layers-other.png", "regret.png"]
    for p in paths:
        width, height = png_size(p)
        assert width > 400 and height > 200 and p.stat().st_size > 10_000


def test_geomean_ignores_missing_values():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, math.inf, 4.0]) == pytest.approx(4.0)
    assert geomean([]) is None
