"""POST /v1/select and /v1/select/batch: answers equal the library's, errors name the field."""

from __future__ import annotations

import pytest
from service_support import assert_error, client_for

from convsel import ConvProblem, load_rules, select

P = {"n": 1, "h": 56, "w": 56, "c": 64, "k": 64, "kh": 3, "kw": 3, "pad": 1}


@pytest.fixture(scope="module")
def client():
    with client_for() as c:
        yield c


@pytest.mark.parametrize("target", ["G77", "cpu", "Mali-G78AE r0p1", "cpu-nofp16"])
def test_select_is_the_librarys_answer(client, target):
    r = client.post("/v1/select", json={"problem": P, "target": target})
    assert r.status_code == 200, r.text
    problem = ConvProblem.from_dict(P)
    assert r.json() == {"problem": problem.to_dict(), **select(problem, target).to_dict()}


def test_select_reports_trace_candidates_and_rules(client):
    body = client.post("/v1/select", json={"problem": P, "target": "G77"}).json()
    rules = load_rules()
    assert body["rules"] == {"version": rules.version, "digest": rules.digest}
    assert [c["method"] for c in body["candidates"]] == [
        "GEMM", "GEMM_CONV2D", "DIRECT", "INDIRECT", "WINOGRAD", "FFT"]
    fired = [s for s in body["trace"] if s["fired"]]
    assert fired[-1]["id"] == body["rule"] and body["reason"] == fired[-1]["reason"]
    assert body["problem"]["pad"] == [1, 1, 1, 1]   # normalised by the library


def test_target_defaults_to_the_settings():
    with client_for(default_target="G76") as c:
        assert c.post("/v1/select", json={"problem": P}).json()["target"] == "G76"


def test_answers_repeat_identically(client):
    # The memoised encoding must not leak one answer into another.
    one = client.post("/v1/select", json={"problem": P, "target": "G77"}).json()
    other = client.post("/v1/select", json={"problem": {**P, "kh": 1, "kw": 1, "pad": 0},
                                            "target": "G77"}).json()
    again = client.post("/v1/select", json={"problem": P, "target": "G77"}).json()
    assert one == again and one != other and other["problem"]["kh"] == 1


@pytest.mark.parametrize("body, code, field", [
    # the library's judgement: the problem's meaning, targets, a policy's options
    ({"problem": {**P, "pad": 9}}, "invalid_problem", "problem.pad"),
    ({"problem": {**P, "groups": 3}}, "invalid_problem", "problem.groups"),
    ({"problem": {**P, "activation": "relux"}}, "validation_error", "body.problem.activation"),
    ({"problem": P, "target": "G99"}, "unknown_target", "target"),
    ({"problem": P, "backend": "opencl"}, "invalid_problem", "backend"),  # acl takes none
    # the wire's contract: types, ranges, enums, shapes (stated in OpenAPI)
    ({"problem": {**P, "dtype": "F64"}}, "validation_error", "body.problem.dtype"),
    ({"problem": {**P, "activation": "relu6x"}}, "validation_error", "body.problem.activation"),
    ({"problem": {**P, "h": 0}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "h": 2**62}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "h": 10**30}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "h": True}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "h": "8"}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "h": 8.5}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "fast_math": 1}}, "validation_error", "body.problem.fast_math"),
    ({"problem": {**P, "stride": [1] * 1_000}}, "validation_error", "body.problem.stride"),
    ({"problem": {**P, "pad": [1, 1, 1]}}, "validation_error", "body.problem.pad"),
    ({"problem": P, "policy": "fastest"}, "validation_error", "body.policy"),
    # a backend argument (one name or a list) is the library's to judge
    ({"problem": P, "policy": "measured", "backend": "cuda"}, "invalid_problem", "backend"),
    ({"problem": P, "policy": "measured", "backend": ["opencl", "cuda"]}, "invalid_problem",
     "backend"),
    ({"problem": P, "policy": "measured", "backend": []}, "validation_error", "body.backend"),
    ({"problem": P, "target": "G" * 300}, "validation_error", "body.target"),
    ({"problem": {k: v for k, v in P.items() if k != "kw"}}, "validation_error",
     "body.problem.kw"),
    ({"problem": {**P, "h": "tall"}}, "validation_error", "body.problem.h"),
    ({"problem": {**P, "colour": 1}}, "validation_error", "body.problem.colour"),
    ({"problem": P, "extra": 1}, "validation_error", "body.extra"),
    ({}, "validation_error", "body.problem"),
])
def test_bad_input_is_422_naming_the_field(client, body, code, field):
    r = client.post("/v1/select", json=body)
    body = assert_error(r, 422, code, field)
    if code == "validation_error":
        assert body["errors"][0]["loc"] == field.split(".")
    else:
        assert body["rule"] and body["message"].startswith(field)
    assert len(r.content) < 4096   # nothing of a large body is echoed back


def test_an_integral_json_number_is_an_integer(client):
    # JSON Schema's "integer" is any number without a fraction; OpenAPI says "integer".
    r = client.post("/v1/select", json={"problem": {**P, "h": 56.0}})
    assert r.status_code == 200 and r.json()["problem"]["h"] == 56


@pytest.mark.parametrize("content", [b"{not json", b"", b"[1, 2]", b'"text"', b"\x1f\xff"])
def test_malformed_json_is_422(client, content):
    for path in ("/v1/select", "/v1/select/batch"):
        r = client.post(path, content=content, headers={"content-type": "application/json"})
        assert_error(r, 422, "validation_error")


def test_measured_policy_goes_through(client, tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "tuning.sqlite"))
    r = client.post("/v1/select", json={"problem": P, "policy": "measured"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["policy"] == "measured" and body["source"] == "rules"   # empty database
    assert body["trace"][-1]["id"].startswith("measured.")


def test_oversize_body_is_413():
    with client_for(max_select_body_bytes=200) as c:
        big = {"problem": {**P, "activation": {"kind": "relu", "a": 1.0}}, "target": "G" * 120}
        body = assert_error(c.post("/v1/select", json=big), 413, "too_large")
        assert "CONVSEL_MAX_SELECT_BODY_BYTES" in body["message"]

        def chunks():   # no Content-Length: the limit counts the bytes actually read
            yield b'{"problem": {"n": 1, '
            yield b" " * 400

        assert_error(c.post("/v1/select", content=chunks(),
                            headers={"content-type": "application/json"}), 413, "too_large")


def test_batch_answers_in_order_with_per_item_errors(client):
    # Well-formed problems that the library refuses get an error entry at their index.
    problems = [P, {**P, "groups": 3}, {**P, "pad": 9}, {**P, "kh": 1, "kw": 1, "pad": 0}]
    r = client.post("/v1/select/batch", json={"problems": problems, "target": "G77"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 4 and body["failed"] == 2
    assert [item["index"] for item in body["results"]] == [0, 1, 2, 3]
    ok = [item for item in body["results"] if item["error"] is None]
    for item in ok:
        problem = ConvProblem.from_dict(problems[item["index"]])
        assert item["selection"] == {"problem": problem.to_dict(),
                                     **select(problem, "G77").to_dict()}
    errors = {item["index"]: item["error"] for item in body["results"] if item["error"]}
    assert errors[1]["code"] == "invalid_problem" and errors[1]["field"] == "problems.1.groups"
    assert errors[2]["code"] == "invalid_problem" and errors[2]["field"] == "problems.2.pad"


def test_a_malformed_batch_item_fails_the_batch(client):
    # Structure is the wire's contract (OpenAPI describes the items): refused whole.
    for item, where in [({"h": 1}, "body.problems.1.n"), (5, "body.problems.1"),
                        ({**P, "h": True}, "body.problems.1.h")]:
        r = client.post("/v1/select/batch", json={"problems": [P, item]})
        body = assert_error(r, 422, "validation_error", where)
        assert len(body["errors"]) <= 20


def test_batch_shared_fields_fail_the_whole_batch(client):
    assert_error(client.post("/v1/select/batch", json={"problems": [P], "target": "G99"}),
                 422, "unknown_target", "target")
    assert_error(client.post("/v1/select/batch", json={"problems": [P], "policy": "x"}),
                 422, "validation_error", "body.policy")
    assert_error(client.post("/v1/select/batch", json={"problems": [P], "backend": "opencl"}),
                 422, "invalid_problem", "backend")   # acl takes no options
    assert_error(client.post("/v1/select/batch", json={"problems": "all"}), 422,
                 "validation_error", "body.problems")
    empty = client.post("/v1/select/batch", json={"problems": []}).json()
    assert empty == {"results": [], "count": 0, "failed": 0}


def test_batch_size_limit_is_413():
    with client_for(max_batch_size=2) as c:
        body = assert_error(c.post("/v1/select/batch", json={"problems": [P] * 3}), 413,
                            "too_large", "problems")
        assert body["value"] == 3 and "2" in body["rule"]


@pytest.mark.parametrize(("change", "sent"), [
    ({"problem": {**P, "h": "8"}}, "8"),
    ({"problem": {**P, "h": 0}}, 0),
    ({"problem": {**P, "dtype": "F64"}}, "F64"),
    ({"problem": P, "policy": "fastest"}, "fastest"),
    ({"problem": {**P, "h": 10**30}}, str(10**30)),   # beyond 2**53: as text
    ({"problem": {**P, "stride": [1] * 1_000}}, "<list of 1000 items>"),
    ({"problem": {**P, "colour": "x" * 5000}}, "x" * 197 + "..."),
    ({"problem": {k: v for k, v in P.items() if k != "kw"}}, None),   # missing: nothing sent
])
def test_a_schema_error_echoes_the_value_sent_cut_to_size(client, change, sent):
    body = assert_error(client.post("/v1/select", json=change), 422, "validation_error")
    assert body["value"] == sent


def test_a_device_index_that_is_a_digit_but_no_number_is_422(client):
    # str.isdigit() takes "²", int() does not: the backend argument once answered 500
    body = assert_error(client.post("/v1/select", json={
        "problem": P, "policy": "measured", "backend": "opencl:²"}), 422, "invalid_problem",
        "backend")
    assert "whole number" in body["rule"]
