"""POST /v1/plan: multipart upload, size limit, 422 for models that cannot be planned."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("onnx")
pytest.importorskip("fastapi")
app_module = pytest.importorskip("service.app")

from fastapi.testclient import TestClient
from onnx_models import Chain, activation_chain, squeezenet_fire2_f16

from service.config import Settings


def client_for(**settings):
    return TestClient(app_module.create_app(Settings(**settings)))


@pytest.fixture(scope="module")
def client():
    with client_for() as c:
        yield c


def upload(client, model, **form):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return client.post("/v1/plan", files={"model": ("model.onnx", data,
                                                    "application/octet-stream")}, data=form)


def test_route_is_mounted():
    from service.routes import plan

    assert plan.router in app_module.ROUTERS


def test_plan_of_an_uploaded_model(client):
    r = upload(client, squeezenet_fire2_f16(), target="cpu", fast_math="true")
    assert r.status_code == 200, r.text
    doc = r.json()
    node = doc["nodes"][0]
    assert node["name"] == "features.3.expand3x3" and node["method"] == "WINOGRAD"
    assert node["activation"] == "relu" and node["problem"]["dtype"] == "F16"
    assert node["near_misses"][0]["row"] == "squeezenet1_1-fire2_3-expand3x3"
    assert doc["summary"]["methods"] == {"WINOGRAD": 1} and doc["target"] == "cpu"


def test_target_defaults_to_the_services(client):
    doc = upload(client, activation_chain()).json()
    assert doc["target"] == "cpu" and doc["summary"]["fused_activations"] == 4


@pytest.mark.parametrize("body, field, words", [
    (b"\x00\x01garbage", "model", "not an ONNX model"),
    (Chain((1, 8, 8, 8)).relu().model(), "model", "no 2-D Conv node"),
    (Chain(("batch", 8, 8, 8)).conv(8, 3, name="c", pads=[1] * 4).model(), "node",
     "node 'c': the shape of input 'input' is (batch, 8, 8, 8)"),
    (Chain((1, 8, 8, 8)).conv(8, 3, name="c").model(opset=3), "model",
     "unsupported ai.onnx opset 3"),
])
def test_models_that_cannot_be_planned_are_422(client, body, field, words):
    r = upload(client, body)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["code"] == "invalid_problem" and err["field"] == field
    assert words in err["message"]


def test_input_shape_form_fields(client):
    model = Chain(("batch", 8, 8, 8)).conv(8, 3, name="c", pads=[1] * 4).model()
    r = upload(client, model, input_shape=["input=2,8,8,8"])
    assert r.status_code == 200 and r.json()["nodes"][0]["problem"]["n"] == 2
    r = upload(client, model, input_shape=["input=2;8"])   # the wire's pattern (OpenAPI)
    assert r.status_code == 422 and r.json()["field"] == "body.input_shape.0"
    assert r.json()["value"] == "input=2;8"


def test_bad_target_and_missing_file(client):
    r = upload(client, activation_chain(), target="G999")
    assert r.status_code == 422 and r.json()["code"] == "unknown_target"
    r = client.post("/v1/plan", data={"target": "cpu"})   # a url-encoded form: not read
    assert r.status_code == 415 and r.json()["code"] == "unsupported_media_type"
    r = client.post("/v1/plan", files={"target": (None, "cpu")})   # multipart, no model
    assert r.status_code == 422 and r.json()["field"] == "model"
    r = upload(client, b"")
    assert r.status_code == 422 and "empty" in r.json()["message"]


def test_size_limits():
    model = activation_chain().SerializeToString()
    assert len(model) > 1000
    with client_for(max_model_bytes=1000) as limited:
        r = upload(limited, model)
    assert r.status_code == 413, r.text
    assert r.json()["code"] == "too_large" and r.json()["field"] == "model"
    # Models have their own limit: the small default body limit of other routes is not theirs.
    with client_for(max_body_bytes=len(model) // 2) as small:
        assert upload(small, model).status_code == 200


def test_measured_policy_uses_the_configured_database(tmp_path):
    pytest.importorskip("convsel.policies.measured")
    with client_for(tuning_db=tmp_path / "t.sqlite", show_paths=True) as c:
        r = upload(c, activation_chain(), policy="measured")
    doc = r.json()
    assert r.status_code == 200 and doc["policy"] == "measured"
    assert doc["summary"]["measured"] == 0
    assert str(tmp_path / "t.sqlite") in doc["nodes"][0]["trace"][-1]["reason"]


def test_readiness_and_openapi(client):
    assert client.get("/readyz").json()["detail"]["plan"]["available"] is True
    assert "/v1/plan" in client.get("/openapi.json").json()["paths"]


def one_by_one_convs(count):
    chain = Chain((1, 8, 8, 8))
    for _ in range(count):
        chain.conv(8, 1)
    return chain.model()


def test_work_is_bounded_by_node_count_and_time_and_the_answer_names_the_limit():
    with client_for(max_plan_nodes=50) as c:
        refused = upload(c, one_by_one_convs(60))
        assert refused.status_code == 413, refused.text
        body = refused.json()
        assert body["code"] == "too_large" and body["field"] == "model" and body["value"] == 60
        assert "CONVSEL_MAX_PLAN_NODES" in body["message"] and "50" in body["rule"]
        assert upload(c, one_by_one_convs(50)).status_code == 200
    with client_for(max_plan_seconds=0.05) as c:
        start = time.monotonic()
        refused = upload(c, one_by_one_convs(3000))   # about 0.5 s of planning here
        assert time.monotonic() - start < 2
        assert refused.status_code == 413, refused.text
        assert "CONVSEL_MAX_PLAN_SECONDS" in refused.json()["message"]
        # the overrun plan keeps the one planning place until it ends, then frees it (and
        # the next test finds it free)
        while (r := upload(c, one_by_one_convs(1))).status_code == 503:
            assert r.json()["code"] == "busy" and time.monotonic() - start < 30
            time.sleep(0.05)
        assert r.status_code == 200, r.text
