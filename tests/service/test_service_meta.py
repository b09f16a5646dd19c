"""Meta routes, health, metrics, routing errors, settings and the error table."""

from __future__ import annotations

import random
import string

import pytest
from fastapi.testclient import TestClient
from service_support import PROBLEM, assert_error, client_for

from convsel import ConvProblem, backends, errors, load_rules, select
from convsel.policies import POLICIES
from convsel.targets import target_names
from service import app as app_module
from service.config import Settings
from service.errors import ERRORS, status_and_code


@pytest.fixture(scope="module")
def client():
    with client_for() as c:
        yield c


def test_targets(client):
    body = client.get("/v1/targets").json()
    assert body["default"] == "cpu"
    assert [t["name"] for t in body["targets"]] == target_names(load_rules())
    g77 = next(t for t in body["targets"] if t["name"] == "G77")
    assert g77["kind"] == "gpu" and g77["arch"] == "VALHALL"


def test_methods_name_the_implementing_backends(client):
    body = client.get("/v1/methods").json()
    methods = {m["method"]: m["algorithms"] for m in body["methods"]}
    assert methods["GEMM"] == ["gemm_1x1", "im2col_gemm"]
    assert methods["WINOGRAD"] == ["winograd"] and len(methods) == 6
    for row in body["algorithms"]:
        expected = [b for (a, b) in backends.IMPLEMENTATIONS if a == row["algorithm"]]
        assert row["backends"] == expected and row["methods"]


def test_backends(client):
    body = client.get("/v1/backends").json()
    rows = {b["name"]: b for b in body["backends"]}
    assert set(rows) == set(backends.BACKENDS) and body["default"] == "numpy"
    assert rows["numpy"]["available"] and rows["numpy"]["reason"]
    opencl = rows["opencl"]
    assert opencl["available"] == backends.available("opencl").ok
    if opencl["available"]:
        assert opencl["describe"]["backend"] == "opencl" and opencl["describe_error"] is None


def test_backend_describe_failure_is_reported(client, monkeypatch):
    state = client.app.state.convsel

    def broken():
        raise RuntimeError("device lost")

    monkeypatch.setitem(state.describers, "numpy", broken)
    rows = {b["name"]: b for b in client.get("/v1/backends").json()["backends"]}
    assert rows["numpy"]["describe"] is None and "device lost" in rows["numpy"]["describe_error"]
    assert client.get("/metrics").status_code == 200   # a failing describe() never breaks it


def test_rules(client):
    body = client.get("/v1/rules").json()
    rules = load_rules()
    assert (body["version"], body["digest"]) == (rules.version, rules.digest)
    assert body["rules"]["schema"] == 1 and body["rules"]["version"] == rules.version
    assert {"cpu", "gpu", "convsel", "targets"} <= set(body["rules"])


def test_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    detail = r.json()["detail"]
    assert r.json()["ready"] and detail["rules"]["digest"] == load_rules().digest
    assert detail["backends"]["probed"]["numpy"]["available"]
    assert detail["conv"]["capacity"] == 10


def test_not_ready_before_startup_and_when_a_component_fails(monkeypatch):
    app = app_module.create_app(Settings())
    r = TestClient(app).get("/readyz")    # no context manager: the lifespan has not run
    assert r.status_code == 503 and r.json()["detail"]["rules"]["ok"] is False
    with TestClient(app) as c:
        monkeypatch.setitem(app.state.convsel.ready_checks, "tuning",
                            lambda app: {"ok": False, "reason": "database locked"})
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["detail"]["tuning"]["reason"] == "database locked"
        monkeypatch.setitem(app.state.convsel.ready_checks, "tuning", lambda app: 1 / 0)
        assert c.get("/readyz").json()["detail"]["tuning"]["error"].startswith("ZeroDivision")


def test_metrics_count_routes_by_template_and_status(client):
    client.post("/v1/select", json={"problem": PROBLEM, "target": "G77"})
    client.get("/no/such/route")
    text = client.get("/metrics").text
    assert 'convsel_http_requests_total{method="POST",route="/v1/select",status="200"}' in text
    assert 'route="<unmatched>",status="404"' in text
    assert "convsel_http_request_duration_seconds_bucket" in text
    sel = select(ConvProblem.from_dict(PROBLEM), "G77")
    assert (f'convsel_selections_total{{algorithm="{sel.algorithm}",method="{sel.method}",'
            'policy="acl",source="rules"}') in text
    if backends.available("opencl").ok:
        assert 'convsel_backend_counter{backend="opencl",name="cache.hits"}' in text


def test_unknown_route_and_wrong_method(client):
    assert_error(client.get("/v2/select"), 404, "not_found")
    r = client.get("/v1/select")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "POST"
    assert_error(client.delete("/v1/targets"), 405, "method_not_allowed")


def test_a_405_allows_every_method_of_the_path(client):
    # /v1/fit is served by two routes (POST fits, GET tells the model in use)
    assert client.options("/v1/fit").headers["allow"] == "GET, POST"
    assert client.delete("/v1/fit").headers["allow"] == "GET, POST"


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("path", ["/v1/select", "/v1/conv2d", "/v1/tune", "/v1/plan"])
@pytest.mark.parametrize("media", [None, "application/json", "text/plain"])
def test_put_and_patch_on_body_routes_are_405_whatever_the_body(client, method, path, media):
    headers = {"content-type": media} if media else {}
    answer = client.request(method, path, content=b"{}", headers=headers)
    assert_error(answer, 405, "method_not_allowed")
    assert answer.headers["allow"] == "POST"


def test_openapi_documents_every_route(client):
    doc = client.get("/openapi.json").json()
    for path in ("/v1/select", "/v1/select/batch", "/v1/conv2d", "/v1/targets", "/v1/methods",
                 "/v1/backends", "/v1/rules", "/healthz", "/readyz", "/metrics"):
        assert path in doc["paths"], path
    conv = doc["paths"]["/v1/conv2d"]["post"]
    assert set(conv["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert "application/x-npy" in conv["responses"]["200"]["content"]
    for name in ("Conv2dRequest", "SelectRequest", "ProblemIn", "ErrorBody"):
        assert name in doc["components"]["schemas"], name
    assert client.get("/docs").status_code == 200


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("CONVSEL_MAX_BATCH_SIZE", "7")
    monkeypatch.setenv("CONVSEL_PORT", "9100")
    monkeypatch.setenv("CONVSEL_DEFAULT_TARGET", "G78")
    s = Settings()
    assert (s.max_batch_size, s.port, s.default_target) == (7, 9100, "G78")
    monkeypatch.setenv("CONVSEL_WORKERS", "0")
    with pytest.raises(ValueError, match="workers"):
        Settings()


@pytest.mark.parametrize("settings, words", [
    ({"default_target": "G99"}, "unknown target"),
    ({"default_backend": "cuda"}, "unknown backend"),
    ({"heuristics": "/nonexistent/rules.yaml"}, "cannot read"),
])
def test_a_bad_configuration_refuses_to_start(settings, words):
    with pytest.raises(ValueError, match=words), client_for(**settings):
        pass


def test_every_library_error_has_a_status():
    library_errors = [getattr(errors, n) for n in dir(errors)
                      if isinstance(getattr(errors, n), type)
                      and issubclass(getattr(errors, n), errors.ConvselError)]
    for cls in library_errors:
        assert cls in ERRORS, cls
    assert status_and_code(errors.UnknownTargetError("t", "x", "r")) == (422, "unknown_target")
    assert status_and_code(errors.BackendUnavailableError("no")) == (503, "backend_unavailable")
    assert status_and_code(errors.UnsupportedError("no")) == (422, "unsupported")
    assert status_and_code(KeyError("bug")) == (500, "internal_error")


def test_openapi_error_answers_are_the_error_body_and_200s_are_typed(client):
    doc = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for status, answer in operation["responses"].items():
                content = answer.get("content", {}).get("application/json")
                if status.startswith("4") or (status == "503" and path != "/readyz"):
                    assert content["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, (
                        path, method, status)
                elif status == "200" and content is not None:
                    assert "$ref" in content["schema"], (path, method)   # a named model
    for path, statuses in [("/v1/tuning", ("422", "503")), ("/v1/plan", ("413", "415", "422")),
                           ("/v1/select/batch", ("413", "415", "422"))]:
        operation = next(iter(doc["paths"][path].values()))
        assert set(statuses) <= set(operation["responses"]), path
    batch = doc["components"]["schemas"]["SelectBatchRequest"]["properties"]["problems"]
    assert batch["maxItems"] == 1024
    assert batch["items"] == {"$ref": "#/components/schemas/ProblemIn"}
    problem = doc["components"]["schemas"]["ProblemIn"]["properties"]
    assert (problem["h"]["minimum"], problem["h"]["maximum"]) == (1, 65536)
    assert problem["dtype"]["enum"] == ["F32", "F16", "QASYMM8", "QASYMM8_SIGNED"]
    select = doc["components"]["schemas"]["SelectRequest"]["properties"]
    assert select["policy"]["enum"] == list(POLICIES)
    assert {"type": "string", "enum": target_names(load_rules())} in select["target"]["anyOf"]


def test_made_up_methods_cannot_grow_the_metrics(client):
    rng = random.Random(25)
    for _ in range(300):
        method = "".join(rng.choices(string.ascii_uppercase, k=12_000))
        assert client.request(method, "/v1/select").status_code == 405
        client.request(method, f"/nowhere/{rng.random()}")
    text = client.get("/metrics").text
    assert len(text.encode()) < 100_000, len(text)
    assert 'method="OTHER",route="/v1/select",status="405"' in text
    assert 'method="OTHER",route="<unmatched>",status="404"' in text
