"""The fleet's routes on a real server (`convsel serve`): uploads for a device that is not this
machine, the device's answers from them, the device list, the token, refused uploads that
change nothing, and a model fitted in a worker process. Once on SQLite, once on PostgreSQL."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fleet_entries import BOARD, P, entry, export, shapes
from service_support import served

from convsel import ConvProblem
from convsel.tuning import TuningDB

TOKEN = "fleet-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}", "X-Convsel-Client": "board-7"}


def stored(target: str) -> tuple[int, int]:
    db = TuningDB(target, create=False)
    try:
        return (db.rows("SELECT COUNT(*) FROM entries")[0][0],
                db.rows("SELECT COUNT(*) FROM uploads")[0][0])
    finally:
        db.close()


def post(url: str, body: object, headers: dict[str, str] | None = AUTH,
         **params: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/tuning/entries", content=json.dumps(body),
                      headers={"Content-Type": "application/json", **(headers or {})},
                      params=params, timeout=60)


def select(url: str, problem: ConvProblem, policy: str, **extra: object) -> dict:
    r = httpx.post(f"{url}/v1/select", json={"problem": problem.to_dict(), "policy": policy,
                                             **extra}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def fleet_flow(url: str, target: str) -> None:
    # without the token: 401, nothing stored
    assert post(url, export(entry()), headers=None).status_code == 401
    # malformed uploads: a clear 4xx each, and nothing stored changes
    good = entry()
    bad_algorithm = entry(fastest="im2col_gemm")
    bad_algorithm["timings"]["direct"]["algorithm"] = "warp_drive"
    bad_time = entry(fastest="im2col_gemm")
    bad_time["timings"]["direct"]["median_s"] = -0.001
    for body, status, field, words in [
            (export(good, bad_algorithm), 422, "entries.1.timings.direct.algorithm",
             "unknown algorithm"),
            (export(good, bad_time), 422, "entries.1.timings.direct.median_s", "positive"),
            ({"format": "convsel-tuning-export", "entries": [{}] * 1_000_000}, 413, "entries",
             "entries per upload must be at most")]:
        r = post(url, body)
        assert r.status_code == status, r.text
        answer = r.json()
        assert answer["field"] == field and words in answer["rule"], answer
        if status == 422:
            assert answer["report"]["stored"] is False and "nothing was stored" in \
                answer["message"]
            assert answer["errors"][0]["loc"] == ["body", "entries", 1]
        assert stored(target) == (0, 0)
    # a good upload: accepted, with who sent it
    r = post(url, export(good, entry(problem=shapes(1)[0], fastest="im2col_gemm")))
    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["accepted"], report["rejected"]) == (2, 0) and report["stored"]
    assert report["uploader"].startswith("token:") and "client:board-7" in report["uploader"]
    # the board's answer, asked by its class's name, from its uploads
    sel = select(url, P, "measured", backend="numpy", device=BOARD["name"])
    assert sel["source"] == "tuning-db" and sel["algorithm"] == "winograd", sel
    assert sel["measurement"]["device"] == BOARD
    assert "measured on numpy / Mali-G78 fleet board" in sel["trace"][-1]["reason"]
    batch = httpx.post(f"{url}/v1/select/batch", json={
        "problems": [P.to_dict(), shapes(1)[0].to_dict()], "policy": "measured",
        "backend": "numpy", "device": BOARD["name"]}, timeout=30).json()
    assert [r["selection"]["algorithm"] for r in batch["results"]] == ["winograd", "im2col_gemm"]
    # this machine's own answer is not the board's
    assert select(url, P, "measured", backend="numpy")["source"] == "rules"
    listed = httpx.get(f"{url}/v1/devices", timeout=30).json()
    [board] = [d for d in listed["devices"] if d["name"] == BOARD["name"]]
    assert board["layer"] == "user" and board["shapes"] == 2
    assert board["uploads"]["count"] == 2 and board["uploads"]["uploaders"] == 1
    assert stored(target) == (2, 2)


def test_fleet_on_sqlite_with_a_fit_in_a_worker_process(tmp_path):
    target = str(tmp_path / "fleet.sqlite")
    TuningDB(target).close()    # the server's store exists from the start
    with served({"CONVSEL_TUNING_DB": target, "CONVSEL_API_TOKEN": TOKEN}) as (url, _):
        fleet_flow(url, target)
        # enough shapes for a model, then a fit off the request path
        board = [entry(problem=p, fastest="im2col_gemm" if p.c == 4 else "winograd:4x4",
                       base_ms=0.01 * p.flops / 1e6) for p in shapes(12)]
        r = post(url, export(*board), partial="true")
        assert r.status_code == 200 and r.json()["rejected"] == 0, r.text
        # a class the store lacks is its state, not the body's fault: 409, as a fit of too few
        unknown = httpx.post(f"{url}/v1/fit/jobs", json={"backend": "numpy", "device": "nope"},
                             headers=AUTH, timeout=30)
        assert unknown.status_code == 409 and unknown.json()["field"] == "device", unknown.text
        r = httpx.post(f"{url}/v1/fit/jobs", headers=AUTH, timeout=30, json={
            "backend": "numpy", "device": BOARD["name"], "families": ["roofline"]})
        assert r.status_code == 202, r.text
        poll = r.headers["location"]
        deadline = time.monotonic() + 120
        while (job := httpx.get(f"{url}{poll}", timeout=30).json())["status"] in (
                "queued", "running"):
            assert time.monotonic() < deadline, job
            # the loop answers meanwhile: selections are not held up by the fit
            select(url, P, "acl")
            time.sleep(0.5)
        assert job["status"] == "done", job
        assert job["result"]["family"] == "roofline" and job["device"] == BOARD
        listed = httpx.get(f"{url}/v1/devices", timeout=30).json()
        [row] = [d for d in listed["devices"] if d["name"] == BOARD["name"]]
        assert row["model"]["id"] == job["result"]["id"] and row["fit_job"]["status"] == "done"
        if job["result"]["in_use"]:
            sel = select(url, ConvProblem(1, 9, 9, 8, 12, 3, 3, pad=1), "predicted",
                         backend="numpy", device=BOARD["name"])
            assert sel["source"] == "model" and \
                sel["measurement"]["model"]["id"] == job["result"]["id"]


def test_fleet_on_postgresql(postgres_url):
    with served({"CONVSEL_TUNING_DB": postgres_url, "CONVSEL_API_TOKEN": TOKEN}) as (url, _):
        fleet_flow(url, postgres_url)


@pytest.mark.parametrize("device", [BOARD["name"]])
def test_plan_answers_for_a_device_class(tmp_path, device):
    pytest.importorskip("onnx")
    from fastapi.testclient import TestClient
    from onnx_models import Chain

    from service.app import create_app
    from service.config import Settings

    model = Chain((1, 4, 8, 8)).conv(8, 3, pads=[1] * 4).model().SerializeToString()
    files = {"model": ("m.onnx", model, "application/octet-stream")}
    with TestClient(create_app(Settings(tuning_db=str(tmp_path / "t.sqlite")))) as c:
        node = c.post("/v1/plan", files=files, data={"policy": "acl"}).json()["nodes"][0]
        problem = ConvProblem.from_dict(node["problem"])
        r = c.post("/v1/tuning/entries", json=export(entry(problem=problem)))
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        plan = c.post("/v1/plan", files=files, data={"policy": "measured", "backend": "numpy",
                                                     "device": device})
        assert plan.status_code == 200, plan.text
        [answer] = plan.json()["nodes"]
        assert answer["source"] == "tuning-db" and answer["algorithm"] == "winograd", answer
