"""Operators' controls: the API token, media types, host paths, bounded error bodies, the
library's 422s for measured-policy options, and /docs without a CDN."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess

import httpx
import pytest
from fleet_entries import entry, export
from service_support import PROBLEM, assert_error, client_for, served

from convsel.errors import InvalidProblemError
from convsel.policies import get_policy
from convsel.tuning import TuningDB

TOKEN = "s3cret-token"
TUNE = {"problem": {"n": 1, "h": 4, "w": 4, "c": 2, "k": 2, "kh": 3, "kw": 3, "pad": 1},
        "budget_s": 0.5}


@pytest.fixture
def guarded(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "t.sqlite"))
    with client_for(api_token=TOKEN, tuning_db=tmp_path / "t.sqlite") as c:
        yield c


def test_the_token_guards_tune_and_metrics(guarded):
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN},
                    {"authorization": "Basic " + TOKEN}):
        r = guarded.post("/v1/tune", json=TUNE, headers=headers)
        assert_error(r, 401, "unauthorized", "authorization")
        assert r.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in r.text
        assert_error(guarded.get("/metrics", headers=headers), 401, "unauthorized")
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert guarded.post("/v1/tune", json=TUNE, headers=auth).status_code == 200
    assert guarded.get("/metrics", headers=auth).status_code == 200
    # What reads and spends little stays open.
    assert guarded.post("/v1/select", json={"problem": PROBLEM}).status_code == 200
    assert guarded.get("/v1/tuning").status_code == 200


def test_openapi_states_the_bearer_scheme_only_when_a_token_is_set(guarded):
    doc = guarded.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert doc["paths"]["/v1/tune"]["post"]["security"] == [{"bearerAuth": []}]
    assert "401" in doc["paths"]["/metrics"]["get"]["responses"]
    assert "security" not in doc["paths"]["/v1/select"]["post"]
    with client_for() as open_server:
        doc = open_server.get("/openapi.json").json()
    assert "securitySchemes" not in doc["components"]
    assert "401" not in doc["paths"]["/v1/tune"]["post"]["responses"]
    assert open_server.get("/metrics").status_code == 200


@pytest.mark.parametrize("path", ["/v1/select", "/v1/select/batch", "/v1/tune"])
@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None])
def test_json_routes_read_only_json(path, media):
    headers = {"content-type": media} if media else {}
    with client_for() as c:
        r = c.post(path, content=b'{"problem": {}}', headers=headers)
    assert_error(r, 415, "unsupported_media_type", "content-type")
    assert r.json()["rule"] == "accepted: application/json"


def test_host_paths_only_when_asked(tmp_path, monkeypatch):
    db = tmp_path / "tuning.sqlite"
    TuningDB(db)   # an empty store: reading never creates one
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(db))
    with client_for(tuning_db=db) as c:
        problem = {"n": 1, "h": 20, "w": 20, "c": 64, "k": 64, "kh": 3, "kw": 3, "pad": 1}
        answers = [c.post("/v1/select", json={"problem": problem, "policy": policy})
                   for policy in ("measured", "predicted")]
        batch = c.post("/v1/select/batch", json={"problems": [problem], "policy": "predicted"})
        assert all(r.status_code == 200 for r in [*answers, batch])
        # the no-model trace names the database; the server shows <path> in its place
        assert "<path>" in answers[1].text and "convsel fit" in answers[1].text
        shown = (c.get("/readyz").text + c.get("/v1/rules").text + c.get("/v1/tuning").text
                 + c.get("/v1/fit").text + "".join(r.text for r in [*answers, batch]))
        assert str(tmp_path) not in shown and "site-packages" not in shown
        assert "/work/" not in shown and "/home/" not in shown
        assert c.get("/v1/rules").json()["source"] == "packaged"
    with client_for(tuning_db=db, show_paths=True) as c:
        assert c.get("/v1/tuning").json()["database"]["path"] == str(db)
        assert str(db) in c.get("/v1/fit").json()["reason"]
        assert c.get("/v1/rules").json()["source"].endswith("heuristics.yaml")


def test_a_store_that_cannot_be_opened_is_503_without_its_location(tmp_path):
    """The fleet and fit-job routes open the store themselves: their 503 hides where it is."""
    bad = tmp_path / "secret-place" / "tuning.sqlite"
    bad.parent.mkdir()
    bad.write_bytes(b"not a database" * 100)
    with client_for(tuning_db=bad) as c:
        answers = [c.post("/v1/fit", json={}), c.get("/v1/fit/jobs/abc"),
                   c.post("/v1/fit/jobs", json={"backend": "numpy", "device": "x"}),
                   c.post("/v1/tuning/entries", json=export(entry()))]
    for r in answers:
        assert r.status_code == 503 and r.json()["code"] == "tuning_database_unavailable", r.text
        assert "secret-place" not in r.text and "<path>" in r.text, r.text


def test_credentials_in_a_database_url_are_never_shown():
    from service.state import ServiceState

    with client_for(show_paths=True) as c:
        state: ServiceState = c.app.state.convsel
        text = state.public("cannot connect to postgresql://convsel:hunter2@db:5432/tuning")
    assert "hunter2" not in text and "postgresql://***@db:5432/tuning" in text


def test_measured_policy_with_an_unknown_backend_is_the_librarys_422():
    # The library refuses it (was a KeyError: a 500); a backend list is the library's to read.
    with pytest.raises(InvalidProblemError) as err:
        get_policy("measured", backend="cuda")
    assert err.value.field == "backend"
    with client_for() as c:
        for path, body in [("/v1/select", {"problem": PROBLEM}),
                           ("/v1/select/batch", {"problems": [PROBLEM]})]:
            r = c.post(path, json={**body, "policy": "measured", "backend": "cuda"})
            assert_error(r, 422, "invalid_problem", "backend")


def test_a_npy_header_cut_inside_the_shape_is_422():
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': ("
    cut = base64.b64encode(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
                           + header).decode()
    with client_for() as c:
        r = c.post("/v1/conv2d", json={"problem": PROBLEM, "x": cut, "w": cut})
        body = assert_error(r, 422, "invalid_problem", "x")
        assert "not a .npy array" in body["rule"]
        files = {"x": ("x.npy", base64.b64decode(cut)), "w": ("w.npy", base64.b64decode(cut))}
        r = c.post("/v1/conv2d", files=files, data={"problem": '{"n": 1}'})
        assert r.status_code == 422 and r.json()["code"] in ("invalid_problem",
                                                             "validation_error")


def test_error_messages_are_bounded():
    from service.errors import MAX_TEXT, error_body

    body = error_body("invalid_problem", "x" * 3_000_000, field="f" * 1000,
                      value=list(range(1_000_000)), rule="r" * 100_000)
    assert len(body["message"]) == MAX_TEXT and len(body["rule"]) == MAX_TEXT
    assert len(body["field"]) <= 200 and len(body["value"]) <= 200
    assert error_body("x", "m", value=float("nan"))["value"] == "nan"   # JSON has no NaN
    assert error_body("x", "m", value=10**30)["value"] == str(10**30)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed: scripts/test.sh installs Debian's chromium "
                    "(apt-get install chromium); this machine has neither it nor apt")
    return found


def test_docs_render_offline_in_headless_chromium():
    chromium = _chromium()
    with served() as (url, _):
        page = httpx.get(f"{url}/docs").text
        assert "cdn" not in page.lower() and "/static-offline-docs/swagger-ui-bundle.js" in page
        assert httpx.get(f"{url}/static-offline-docs/swagger-ui-bundle.js").status_code == 200
        # The page's script builds the UI from /openapi.json: the dumped DOM (after the
        # scripts ran) holds an operation block for the routes; with assets from a CDN and no
        # network it would be an empty <div id="swagger-ui">.
        dom = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--virtual-time-budget=15000", "--dump-dom",
             f"{url}/docs"], capture_output=True, text=True, timeout=120, check=False).stdout
    assert 'class="swagger-ui' in dom, dom[:2000]
    assert "opblock" in dom and "/v1/select" in dom


def test_a_postgresql_stores_location_never_leaks(monkeypatch):
    with socket.socket() as s:   # a loopback port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://convsel:pw@127.0.0.1:{port}/tuning"
    monkeypatch.setenv("CONVSEL_TUNING_DB", url)
    small = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}
    with client_for(tuning_db=url) as c:
        tuned = c.post("/v1/tune", json={"problem": small, "budget_s": 1})
        assert tuned.status_code == 200 and tuned.json()["recorded"] is False, tuned.text
        assert tuned.json()["note"].startswith("not stored: tuning database <path>")
        shown = [tuned, c.get("/readyz"), c.get("/v1/tuning"),
                 c.post("/v1/select", json={"problem": small, "policy": "measured"})]
        for answer in shown:
            assert "127.0.0.1" not in answer.text and str(port) not in answer.text, answer.text
            assert "convsel@" not in answer.text and "postgresql://" not in answer.text
