"""Backend lists over HTTP: /v1/select, /v1/conv2d, /v1/find and /v1/plan take one backend
or several in order of preference (the library reads them), and GET /v1/backends reports each
backend's capabilities. Real app, real PoCL OpenCL, real SQLite file."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")

from opencl_support import opencl_runtime
from service_support import PROBLEM, assert_error, client_for, conv_body, from_b64, tensors

import convsel
from convsel import ConvProblem
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.identity import device_identity
from convsel.tuning.measure import decide

NO_FFT = "not supported by backend opencl: the opencl backend has no fft implementation"


@pytest.fixture(autouse=True)
def _opencl():
    opencl_runtime()


def _t(alg: str, ms: float, clock: str) -> dict:
    return {"algorithm": alg, "params": {}, "median_s": ms / 1e3, "iqr_s": ms / 1e5,
            "runs": 7, "min_s": ms / 1e3, "pruned": False, "clock": clock}


def test_select_over_two_backends_names_the_fastest_backend_and_algorithm(tmp_path):
    p = ConvProblem.from_dict(PROBLEM)
    db = TuningDB(tmp_path / "tuning.sqlite")
    for backend, timing in [("numpy", _t("direct", 9.0, "wall")),
                            ("opencl", _t("direct", 0.2, "device"))]:
        winner, tie = decide({"direct": timing})
        db.record(TuningEntry(problem=p, backend=backend, device=device_identity(backend),
                              winner=winner, tie=tie, timings={"direct": timing}))
    with client_for(tuning_db=db.path) as c:
        for backend in (["numpy", "opencl"], "numpy,opencl"):
            r = c.post("/v1/select", json={"problem": PROBLEM, "policy": "measured",
                                           "backend": backend})
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["backend"], body["algorithm"], body["rule"]) == (
                "opencl", "direct", "across.fastest")
            assert {b["backend"] for b in body["measurement"]["backends"]} == {"numpy",
                                                                               "opencl"}
        r = c.post("/v1/select/batch", json={"problems": [PROBLEM], "policy": "measured",
                                             "backend": "numpy,opencl"})
        assert r.json()["results"][0]["selection"]["backend"] == "opencl"


def test_conv2d_runs_on_the_next_backend_and_says_why():
    x, w, bias = tensors()
    with client_for() as c:
        r = c.post("/v1/conv2d", json=conv_body(x, w, bias, algorithm="fft",
                                                backend=["opencl", "numpy"]))
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["backend"], body["algorithm"]) == ("numpy", "fft")
        assert body["passed_over"] == [NO_FFT] and NO_FFT in r.headers["X-Convsel-Fallback"]
        p = ConvProblem.from_dict(PROBLEM)
        expected = convsel.prepare(p, w, bias, algorithm="fft").run(x)
        np.testing.assert_array_equal(from_b64(body["y"]), expected)
        r = c.post("/v1/conv2d", json=conv_body(x, w, bias, backend="opencl,numpy"))
        assert r.json()["backend"] == "opencl" and r.json()["passed_over"] == []


@pytest.mark.parametrize("backend, words", [
    (["opencl", "cuda"], "unknown backend; known: numpy, opencl"),
    ("opencl:x", "the device after ':' is an index"),
])
def test_a_bad_backend_list_is_the_librarys_422(backend, words):
    x, w, _ = tensors()
    with client_for() as c:
        body = assert_error(c.post("/v1/conv2d", json=conv_body(x, w, backend=backend)), 422,
                            "invalid_problem", "backend")
        assert words in body["rule"]
        too_many = assert_error(c.post("/v1/conv2d", json=conv_body(x, w, backend=["numpy"] * 9)),
                                422, "validation_error", "body.backend")
        assert "list of 1 to 8" in too_many["message"]


def test_find_over_two_backends_ranks_them_together(tmp_path):
    small = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}
    with client_for(tuning_db=tmp_path / "tuning.sqlite") as c:
        r = c.post("/v1/find", json={"problem": small, "backend": ["numpy", "opencl"],
                                     "budget_s": 5})
        assert r.status_code == 200, r.text
        body = r.json()
    ok = [e for e in body["results"] if e["status"] == "ok"]
    assert {e["backend"] for e in ok} == {"numpy", "opencl"}
    assert set(body["devices"]) == {"numpy", "opencl"} and body["backend"] == "numpy,opencl"
    assert all(e["transfer_ms"] > 0 for e in ok if e["backend"] == "opencl")


def test_plan_over_two_backends_lists_assignments_and_switches():
    pytest.importorskip("onnx")
    from onnx_models import Chain

    model = (Chain((1, 16, 32, 32)).conv(8, 7, name="big", pads=[3] * 4).relu()
             .conv(8, 3, name="c3", pads=[1] * 4).relu().conv(4, 1, name="c1").model())
    with client_for() as c:
        r = c.post("/v1/plan", files={"model": ("m.onnx", model.SerializeToString(),
                                                "application/octet-stream")},
                   data={"target": "G77", "backend": "opencl,numpy"})
        assert r.status_code == 200, r.text
        body = r.json()
    assert [(n["name"], n["backend"]) for n in body["nodes"]] == [
        ("big", "numpy"), ("c3", "opencl"), ("c1", "opencl")]
    assert body["nodes"][0]["passed_over"] == [NO_FFT]
    assert body["summary"]["switches"] == 2 and body["placement"]["backends"] == ["opencl",
                                                                                  "numpy"]


def test_backends_reports_each_backends_capabilities():
    with client_for() as c:
        rows = {row["name"]: row for row in c.get("/v1/backends").json()["backends"]}
    assert rows["numpy"]["capabilities"]["device_resident"] is False
    cl = rows["opencl"]["capabilities"]
    assert cl["device_resident"] is True and cl["dtypes"] == ["F32", "F16"]
    assert cl["devices"][0]["index"] == 0 and "tensor_cores" in cl["devices"][0]
