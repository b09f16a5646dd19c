"""POST /v1/conv2d: JSON and multipart bodies, .npy answers, limits and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from service_support import (
    PROBLEM,
    assert_error,
    client_for,
    conv_body,
    from_b64,
    npy_b64,
    npy_bytes,
    tensors,
)

from convsel import ConvProblem, conv2d
from convsel.reference import conv2d_reference


@pytest.fixture(scope="module")
def client():
    with client_for() as c:
        yield c


def library(x, w, bias, **kw):
    return conv2d(x, w, bias, pad=1, backend="numpy", **kw)


@pytest.mark.parametrize("algorithm", ["auto", "im2col_gemm", "direct", "winograd"])
def test_result_is_the_librarys(client, algorithm):
    x, w, bias = tensors()
    r = client.post("/v1/conv2d", json=conv_body(x, w, bias, algorithm=algorithm,
                                                 backend="numpy"))
    assert r.status_code == 200, r.text
    body = r.json()
    y = from_b64(body["y"])
    assert y.dtype == np.float32 and list(y.shape) == body["shape"] == [1, 8, 8, 8]
    np.testing.assert_array_equal(y, library(x, w, bias, algorithm=algorithm))
    ref = conv2d_reference(ConvProblem.from_dict(PROBLEM), x, w, bias)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert body["backend"] == "numpy" and body["fallback"] is None and body["time_ms"] > 0
    if algorithm != "auto":
        assert body["algorithm"] == algorithm


def test_layouts_activation_and_f16(client):
    p = {**PROBLEM, "layout": "NCHW", "activation": "bounded_relu(0.5)", "dtype": "F16"}
    x, w, _ = tensors(dtype=np.float16)
    x_nchw, w_oihw = x.transpose(0, 3, 1, 2).copy(), w.transpose(0, 3, 1, 2).copy()
    r = client.post("/v1/conv2d", json=conv_body(x_nchw, w_oihw, problem=p,
                                                 weights_layout="OIHW"))
    assert r.status_code == 200, r.text
    y = from_b64(r.json()["y"])
    expected = conv2d(x_nchw, w_oihw, pad=1, layout="NCHW", weights_layout="OIHW",
                      activation="bounded_relu(0.5)")
    assert y.dtype == np.float16 and y.shape == (1, 8, 8, 8)
    np.testing.assert_array_equal(y, expected)


def test_npy_answer_with_headers(client):
    x, w, bias = tensors()
    r = client.post("/v1/conv2d", json=conv_body(x, w, bias),
                    headers={"accept": "application/x-npy"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-npy"
    y = np.load(__import__("io").BytesIO(r.content), allow_pickle=False)
    np.testing.assert_array_equal(y, library(x, w, bias))
    assert r.headers["x-convsel-backend"] == "numpy"
    assert r.headers["x-convsel-fallback"] == "none"
    assert r.headers["x-convsel-method"] and r.headers["x-convsel-algorithm"]
    assert float(r.headers["x-convsel-time-ms"]) > 0


def test_multipart_npy_files(client):
    x, w, bias = tensors(seed=1)
    files = {"x": ("x.npy", npy_bytes(x)), "w": ("w.npy", npy_bytes(w)),
             "bias": ("b.npy", npy_bytes(bias))}
    r = client.post("/v1/conv2d", files=files,
                    data={"problem": json.dumps(PROBLEM), "algorithm": "im2col_gemm"})
    assert r.status_code == 200, r.text
    assert r.json()["algorithm"] == "im2col_gemm"
    np.testing.assert_array_equal(from_b64(r.json()["y"]),
                                  library(x, w, bias, algorithm="im2col_gemm"))


@pytest.mark.opencl
def test_opencl_backend_or_its_fallback(client):
    x, w, bias = tensors(seed=2)
    r = client.post("/v1/conv2d", json=conv_body(x, w, bias, backend="opencl",
                                                 algorithm="direct"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["backend"] == "opencl" or body["fallback"]
    ref = conv2d_reference(ConvProblem.from_dict(PROBLEM), x, w, bias)
    np.testing.assert_allclose(from_b64(body["y"]), ref, rtol=1e-4, atol=1e-4)


def _bad_bodies():
    x, w, bias = tensors()
    return [
        (conv_body(x[:, :7], w), 422, "invalid_problem", "x"),
        (conv_body(x.astype(np.float64), w), 422, "invalid_problem", "x"),
        (conv_body(x, w[:, :, :, :2]), 422, "invalid_problem", "w"),
        (conv_body(x, w.astype(np.int32)), 422, "invalid_problem", "w"),
        (conv_body(x, w, bias[:3]), 422, "invalid_problem", "bias"),
        ({**conv_body(x, w), "x": "%%% not base64"}, 422, "invalid_problem", "x"),
        ({**conv_body(x, w), "w": npy_b64(x)[:40]}, 422, "invalid_problem", "w"),
        ({**conv_body(x, w), "x": "aGVsbG8="}, 422, "invalid_problem", "x"),
        ({**conv_body(x, w), "x": npy_b64(np.array([{"a": 1}], dtype=object))}, 422,
         "invalid_problem", "x"),
        # names are enums of the wire (OpenAPI states them)
        (conv_body(x, w, algorithm="quantum"), 422, "validation_error", "body.algorithm"),
        (conv_body(x, w, backend="cuda"), 422, "invalid_problem", "backend"),   # the library's
        (conv_body(x, w, weights_layout="IOHW"), 422, "validation_error",
         "body.weights_layout"),
        (conv_body(x, w, target="G99"), 422, "unknown_target", "target"),
        (conv_body(x, w, problem={**PROBLEM, "pad": 7}), 422, "invalid_problem",
         "problem.pad"),
        # a selection-only dtype cannot run: the schema says F32 or F16
        (conv_body(x, w, problem={**PROBLEM, "dtype": "QASYMM8"}), 422, "validation_error",
         "body.problem.dtype"),
        (conv_body(x, w, problem={**PROBLEM, "kh": 5, "kw": 5, "pad": 2}), 422,
         "invalid_problem", "w"),
        ({"problem": PROBLEM, "x": npy_b64(x)}, 422, "validation_error", "body.w"),
        ({**conv_body(x, w), "colour": "red"}, 422, "validation_error", "body.colour"),
    ]


@pytest.mark.parametrize("body, status, code, field", _bad_bodies())
def test_bad_conv_input(client, body, status, code, field):
    assert_error(client.post("/v1/conv2d", json=body), status, code, field)


def test_named_algorithm_that_cannot_run_is_422(client):
    p = {**PROBLEM, "kh": 5, "kw": 5, "pad": 2}
    x, w, _ = tensors(p)
    body = assert_error(client.post("/v1/conv2d", json=conv_body(x, w, problem=p,
                                                                 algorithm="gemm_1x1")),
                        422, "unsupported")
    assert "1x1" in body["message"]


def test_multipart_errors(client):
    x, w, _ = tensors()
    problem = json.dumps(PROBLEM)

    def post(files, **data):
        return client.post("/v1/conv2d", files=files, data={"problem": problem, **data})

    assert_error(post({"x": ("x.npy", npy_bytes(x))}), 422, "validation_error", "body.w")
    assert_error(post({"x": ("x.npy", npy_bytes(x)), "w": ("w.npy", npy_bytes(w)),
                       "y": ("y.npy", npy_bytes(w))}), 422, "invalid_problem", "y")
    assert_error(post({"x": ("x.npy", b"garbage"), "w": ("w.npy", npy_bytes(w))}), 422,
                 "invalid_problem", "x")
    assert_error(client.post("/v1/conv2d", files={"x": ("x", npy_bytes(x)),
                                                  "w": ("w", npy_bytes(w))},
                             data={"problem": "{oops"}), 422, "invalid_problem", "problem")
    four = {name: (name, npy_bytes(x)) for name in ("x", "w", "bias", "extra")}
    assert_error(post(four), 422, "malformed_body", "body")   # over max_files: not a 400


def test_unsupported_media_type_is_415(client):
    r = client.post("/v1/conv2d", content=b"x=1", headers={"content-type": "text/plain"})
    assert_error(r, 415, "unsupported_media_type", "content-type")


def test_limits_are_413():
    x, w, _ = tensors()
    with client_for(max_tensor_elements=200) as c:
        body = assert_error(c.post("/v1/conv2d", json=conv_body(x, w)), 413, "too_large", "x")
        assert body["value"] == x.size
    with client_for(max_tensor_bytes=1000) as c:
        assert_error(c.post("/v1/conv2d", json=conv_body(x, w)), 413, "too_large", "x")
    with client_for(max_conv_flops=1000) as c:
        assert_error(c.post("/v1/conv2d", json=conv_body(x, w)), 413, "too_large", "problem")
    with client_for(max_workspace_bytes=16) as c:
        assert_error(c.post("/v1/conv2d", json=conv_body(x, w, algorithm="im2col_gemm")),
                     413, "too_large", "problem")
    with client_for(max_conv_body_bytes=1000) as c:
        body = assert_error(c.post("/v1/conv2d", json=conv_body(x, w)), 413, "too_large",
                            "body")
        assert "CONVSEL_MAX_CONV_BODY_BYTES" in body["message"]
        files = {"x": ("x.npy", npy_bytes(x)), "w": ("w.npy", npy_bytes(w))}
        assert_error(c.post("/v1/conv2d", files=files, data={"problem": "{}"}), 413,
                     "too_large", "body")


def test_output_limit_is_413():
    p = {**PROBLEM, "k": 64}
    x, w, _ = tensors(p)
    with client_for(max_tensor_elements=3000) as c:   # x 256, w 2304, y 4096 elements
        assert_error(c.post("/v1/conv2d", json=conv_body(x, w, problem=p)), 413,
                     "too_large", "y")


def test_busy_pool_is_503_with_retry_after():
    x, w, _ = tensors()
    with client_for(max_concurrent_convolutions=1, max_queued_convolutions=0,
                    retry_after_seconds=7) as c:
        pool = c.app.state.convsel.pool
        with pool.admit():   # the one slot is taken
            r = c.post("/v1/conv2d", json=conv_body(x, w))
            assert_error(r, 503, "busy")
            assert r.headers["retry-after"] == "7"
        assert pool.in_flight == 0
        assert c.post("/v1/conv2d", json=conv_body(x, w)).status_code == 200
        assert pool.in_flight == 0
        metrics = c.get("/metrics").text
    assert "convsel_convolutions_rejected_total 1.0" in metrics
    assert 'convsel_convolution_seconds_count{algorithm=' in metrics


def test_auto_chooses_within_the_servers_workspace_limit():
    """The server's limit goes down to the choice: "auto" runs an algorithm that fits
    instead of choosing one and then answering 413."""
    from convsel import algorithms, select
    from convsel.problem import ConvProblem

    x, w, _ = tensors()
    p = ConvProblem.from_dict(PROBLEM)
    acl = select(p, "cpu")
    need = algorithms.workspace_bytes(acl.algorithm, p, dict(acl.params), "numpy")
    assert need and need > 0, "the test needs a rules' pick that uses workspace"
    with client_for(max_workspace_bytes=need - 1) as c:
        r = c.post("/v1/conv2d", json=conv_body(x, w))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["algorithm"] != acl.algorithm
        got = algorithms.workspace_bytes(body["algorithm"], p, body["params"], "numpy")
        assert got is not None and got <= need - 1
