"""POST/GET /v1/fit, the model in /readyz, and policy="predicted" through /v1/select."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

pytest.importorskip("fastapi")

from learn_support import UNSEEN_WIDE, entry_for, overhead_seconds, training_problems
from service_support import client_for

from convsel.learn import stored as stored_mod
from convsel.policies import device as policy_device
from convsel.tuning.db import TuningDB
from convsel.tuning.measure import device_identity


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "service.sqlite"
    ident = device_identity("numpy")
    # timings the roofline family can learn (Winograd's fixed cost): its model beats ACL's
    # rules held out, so it is accepted and answers
    TuningDB(path).record_many([entry_for(p, ident, overhead_seconds)
                                for p in training_problems()])
    # the environment names another database: the routes must pass the server's own down
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "elsewhere.sqlite"))
    yield path
    policy_device.cached_identity.cache_clear()
    stored_mod._cache.clear()


def finished(client, started, timeout_s=120.0):
    """Poll the fit job a 202 started until it ends; returns the job."""
    assert started.status_code == 202, started.text
    poll = started.headers["location"]
    assert started.json()["poll"] == poll and started.json()["job"]["status"] == "queued"
    deadline = time.monotonic() + timeout_s
    while (job := client.get(poll).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def test_fit_then_predicted_selection_and_readiness(db_path):
    with client_for(tuning_db=db_path) as client:
        before = client.get("/v1/fit").json()
        assert before["model"] is None and "convsel fit" in before["reason"]
        started = client.post("/v1/fit", json={"families": ["roofline"]})
        job = finished(client, started)
        assert job["status"] == "done" and job["backend"] == "numpy", job
        body = job["result"]
        assert body["family"] == "roofline" and body["training_problems"] == len(
            training_problems())
        assert body["in_use"] and body["accepted"], body
        identity = client.get("/v1/fit").json()["model"]
        assert identity["id"] == body["id"]
        ready = client.get("/readyz").json()
        assert ready["detail"]["fit"]["model"]["id"] == body["id"]
        listing = client.get("/v1/tuning").json()
        assert listing["model"]["model"]["id"] == body["id"]
        assert [(m["id"], m["family"], m["current"], m["training_problems"])
                for m in listing["models"]] == [(body["id"], "roofline", True,
                                                 len(training_problems()))]
        assert client.get("/v1/tuning", params={"backend": "opencl"}).json()["models"] == []
        problem = {k: v for k, v in UNSEEN_WIDE.to_dict().items() if v is not None}
        answer = client.post("/v1/select", json={"problem": problem, "policy": "predicted"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["source"] == "model"
        assert answer.json()["measurement"]["model"]["id"] == body["id"]


def test_fit_needs_the_token_when_one_is_set(db_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_API_TOKEN", "s3cret")
    with client_for(tuning_db=db_path) as client:
        assert client.post("/v1/fit", json={}).status_code == 401
        wrong = client.post("/v1/fit", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = client.post("/v1/fit", json={"families": ["roofline"]},
                         headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 202, ok.text
        assert ok.json()["job"]["requester"].startswith("token:")


def test_fit_accepts_every_model_family_and_names_an_unknown_one(db_path):
    """The service's families are the library's (the analytic and combined families too),
    and an unknown name is refused naming the field and the value."""
    with client_for(tuning_db=db_path) as client:
        job = finished(client, client.post("/v1/fit", json={"families": ["analytic"]}))
        assert job["status"] == "done", job
        assert job["result"]["family"] == "analytic", job["result"]
        wrong = client.post("/v1/fit", json={"families": ["analytic", "nope"]})
    assert wrong.status_code == 422, wrong.text
    assert "families" in wrong.text and "nope" in wrong.text


def test_fit_reports_too_little_data(tmp_path, monkeypatch):
    path = tmp_path / "empty.sqlite"
    TuningDB(path)
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(path))
    with client_for(tuning_db=path) as client:
        answer = client.post("/v1/fit", json={})
    # the server's state, not the request, is at fault: 409 (a 422 said the body was wrong)
    assert answer.status_code == 409 and answer.json()["code"] == "conflict", answer.text
    assert answer.json()["field"] == "entries" and answer.json()["value"] == 0
    assert "convsel tune --sample" in answer.text


def test_a_fit_never_runs_in_the_request(db_path):
    """POST /v1/fit answers before the fit has started (the job is queued for a worker
    process), the server answers meanwhile, and the job's options reach the worker."""
    with client_for(tuning_db=db_path) as client:
        accepted = client.post("/v1/fit", json={"families": ["roofline"], "max_entries": 8})
        assert accepted.status_code == 202 and accepted.json()["job"]["status"] == "queued"
        assert client.get("/healthz").status_code == 200
        problem = {k: v for k, v in UNSEEN_WIDE.to_dict().items() if v is not None}
        assert client.post("/v1/select", json={"problem": problem}).status_code == 200
        done = finished(client, accepted)
        assert done["id"] == accepted.json()["job"]["id"] and done["status"] == "done", done
        # max_entries reached the worker: the model saw the 8 newest entries only
        assert done["result"]["training_problems"] == 8, done["result"]


_SPAWN = multiprocessing.get_context("spawn")
_STARTING = threading.Event()


class _SlowToStart(_SPAWN.Process):  # type: ignore[name-defined, misc]
    """A fit's process whose start() takes half a second (module level: spawn pickles it)."""

    def start(self):
        _STARTING.set()
        time.sleep(0.5)     # the server's shutdown arrives in this window
        super().start()


class _SlowContext:
    Process = _SlowToStart


def test_a_shutdown_while_a_worker_process_starts_stops_it(tmp_path, monkeypatch):
    """The server stopping while the runner is starting a fit's process: the process is
    stopped once started (before, shutdown could find it registered but not yet started and
    raise from terminate(), failing the app's shutdown)."""
    from service import fit_jobs

    _STARTING.clear()
    monkeypatch.setattr(fit_jobs.multiprocessing, "get_context", lambda _: _SlowContext)
    runner = fit_jobs.FitRunner()
    runner.submit((str(tmp_path / "store.sqlite"), "no-such-job", None, None))
    assert _STARTING.wait(10)
    runner.shutdown()               # raised AttributeError from terminate() before
    assert runner._running is None
