"""POST /v1/tune, GET /v1/tuning and the database in /readyz (TestClient, small problems)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from service_support import assert_error, client_for, running

from service import timing
from service.config import Settings
from service.routes import tuning as tuning_route

SMALL = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "tuning.sqlite"
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(path))   # the library's default, too
    return path


@pytest.fixture
def client(db_path):
    with client_for(tuning_db=db_path) as c:
        yield c


def test_tune_measures_records_and_then_answers_from_the_database(client):
    r = client.post("/v1/tune", json={"problem": SMALL, "budget_s": 20})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["cached"], body["complete"], body["recorded"]) == (False, True, True)
    assert body["winner"] or body["tie"]
    assert "median_s" in body["timings"]["im2col_gemm"]
    assert body["selection"]["source"] == "tuning-db"
    again = client.post("/v1/tune", json={"problem": SMALL}).json()
    assert again["cached"] and again["timings"] == body["timings"]
    select = client.post("/v1/select", json={"problem": SMALL, "policy": "measured"}).json()
    assert select["source"] == "tuning-db" and select["measurement"]["timings"]


def test_tuning_lists_what_the_database_holds(client):
    assert client.get("/v1/tuning").json()["count"] == 0
    client.post("/v1/tune", json={"problem": SMALL})
    listed = client.get("/v1/tuning").json()
    assert listed["count"] == 1 and listed["entries"][0]["current"] is True
    assert listed["entries"][0]["problem"]["h"] == 6
    assert client.get("/v1/tuning", params={"backend": "opencl"}).json()["count"] == 0
    assert_error(client.get("/v1/tuning", params={"limit": 0}), 422, "validation_error")


def test_a_second_tuning_meanwhile_is_refused_with_retry_after(client):
    assert timing._running.acquire(blocking=False)
    try:
        r = client.post("/v1/tune", json={"problem": SMALL})
    finally:
        timing._running.release()
    assert_error(r, 503, "busy")
    assert int(r.headers["Retry-After"]) >= 1
    assert "already running" in r.json()["message"]


def test_a_spent_budget_returns_the_measurement_unrecorded(client, monkeypatch):
    real = tuning_route.find
    monkeypatch.setattr(tuning_route, "find",
                        lambda *a, **kw: real(*a, **{**kw, "budget_s": 1e-9}))
    body = client.post("/v1/tune", json={"problem": SMALL}).json()
    assert (body["complete"], body["recorded"]) == (False, False)
    assert "time budget" in body["note"]
    assert client.get("/v1/tuning").json()["count"] == 0


@pytest.mark.parametrize("change, status, code, field", [
    ({"budget_s": 0}, 422, "validation_error", "body.budget_s"),
    ({"budget_s": 1e6}, 422, "validation_error", "body.budget_s"),
    ({"backend": "cuda"}, 422, "validation_error", "body.backend"),
    ({"problem": {**SMALL, "dtype": "QASYMM8"}}, 422, "validation_error", "body.problem.dtype"),
    ({"problem": {**SMALL, "h": 60000, "w": 60000}}, 413, "too_large", "x"),
    ({"problem": {**SMALL, "h": 100000}}, 422, "validation_error", "body.problem.h"),
    # small x, y and flops, but a padded input of 14 G elements
    ({"problem": {**SMALL, "h": 1, "w": 1, "c": 1, "k": 1, "kh": 2, "kw": 2,
                  "dilation": 60000, "pad": 59999, "stride": 65536}}, 413, "too_large", "pad"),
    # a 1x1 input with a stride of 65535: one plane per stride phase in the numpy backend
    ({"problem": {**SMALL, "h": 1, "w": 1, "c": 1, "k": 1, "kh": 1, "kw": 1, "pad": 0,
                  "stride": 65535}}, 413, "too_large", "stride"),
    ({"problem": {**SMALL, "kh": 9}}, 422, "invalid_problem", "problem.h/w"),
])
def test_bad_requests_name_the_field(client, change, status, code, field):
    assert_error(client.post("/v1/tune", json={"problem": SMALL, **change}), status, code,
                 field)


def test_readyz_reports_the_database(client):
    detail = client.get("/readyz").json()["detail"]["tuning"]
    assert detail["ok"] and detail["available"] and detail["writable"]
    assert detail["entries"] == 0


def test_a_broken_database_keeps_the_service_answering_with_the_rules(tmp_path, monkeypatch):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(junk))
    with client_for(tuning_db=junk) as c:
        ready = c.get("/readyz")
        assert ready.status_code == 200
        detail = ready.json()["detail"]["tuning"]
        # The reason, without the host path (CONVSEL_SHOW_PATHS shows it).
        assert detail["available"] is False and "not a database" in detail["reason"]
        assert str(tmp_path) not in ready.text
        sel = c.post("/v1/select", json={"problem": SMALL, "policy": "measured"}).json()
        assert sel["source"] == "rules" and sel["trace"][-1]["id"] == "measured.db-unavailable"
        listed = assert_error(c.get("/v1/tuning"), 503, "tuning_database_unavailable")
        assert str(tmp_path) not in listed["message"]
        body = c.post("/v1/tune", json={"problem": SMALL}).json()
        assert body["recorded"] is False and "not a database" in body["note"]
    with client_for(tuning_db=junk, show_paths=True) as c:
        assert "junk.sqlite" in c.get("/readyz").json()["detail"]["tuning"]["reason"]


def test_an_uncreatable_path_is_reported_unavailable(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = blocker / "tuning.sqlite"
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(path))
    with client_for(tuning_db=path) as c:
        detail = c.get("/readyz").json()["detail"]["tuning"]
        assert detail["available"] is False and "cannot create" in detail["reason"]


def test_find_honours_the_servers_time_limit_too(db_path):
    heavy = {"n": 1, "h": 28, "w": 28, "c": 32, "k": 32, "kh": 3, "kw": 3, "pad": 1}  # ~1 s whole
    with client_for(tuning_db=db_path, max_tune_seconds=0.1) as c:
        r = c.post("/v1/find", json={"problem": heavy, "budget_s": 25})
    assert r.status_code == 200, r.text
    assert r.json()["complete"] is False and r.json()["elapsed_s"] < 0.6, r.json()["elapsed_s"]


def test_retry_after_on_a_busy_tuning_is_the_time_the_running_one_has_left(db_path):
    heavy = {"n": 1, "h": 28, "w": 28, "c": 32, "k": 32, "kh": 3, "kw": 3, "pad": 1}  # ~1 s whole
    with running(Settings(tuning_db=str(db_path), max_tune_seconds=1)) as url, \
            httpx.Client(base_url=url, timeout=30) as first, \
            httpx.Client(base_url=url, timeout=30) as second, ThreadPoolExecutor(1) as thread:
        finding = thread.submit(first.post, "/v1/find",
                                json={"problem": heavy, "budget_s": 25})   # cut to 1 s
        deadline = time.monotonic() + 10   # the server runs in this process: wait for the
        while not timing._running.locked():   # find to hold the one timing slot
            assert time.monotonic() < deadline and not finding.done()
            time.sleep(0.01)
        busy = second.post("/v1/tune", json={"problem": SMALL})
        assert_error(busy, 503, "busy")
        assert int(busy.headers["Retry-After"]) == 1   # not the 25 s the find asked for
        assert finding.result().status_code == 200
