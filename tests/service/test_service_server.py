"""The real thing: `convsel serve` on a free loopback port, spoken to with httpx over TCP."""

from __future__ import annotations

import json
import signal

import httpx
import numpy as np
from service_support import PROBLEM, conv_body, from_b64, served, tensors

from convsel import conv2d


def healthz_count(metrics: str) -> float:
    key = 'convsel_http_requests_total{method="GET",route="/healthz",status="200"}'
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(key))


def test_convsel_serve_over_a_socket():
    # Two workers: the settings reach both, and every scrape sums both (prometheus-client's
    # multiprocess mode); a scrape once showed only the worker that answered it.
    with served({"CONVSEL_MAX_BATCH_SIZE": "3"}, workers=2) as (url, proc):
        with httpx.Client(base_url=url, timeout=30) as client:
            sel = client.post("/v1/select", json={"problem": PROBLEM, "target": "G77"},
                              headers={"X-Request-ID": "trace-me-42"})
            assert sel.status_code == 200 and sel.json()["target"] == "G77"
            assert sel.headers["x-request-id"] == "trace-me-42"
            x, w, bias = tensors()
            conv = client.post("/v1/conv2d", json=conv_body(x, w, bias))
            assert conv.status_code == 200, conv.text
            assert len(conv.headers["x-request-id"]) == 32   # made by the server
            np.testing.assert_array_equal(from_b64(conv.json()["y"]),
                                          conv2d(x, w, bias, pad=1))
            # The environment reached the server's settings.
            big = client.post("/v1/select/batch", json={"problems": [PROBLEM] * 4})
            assert big.status_code == 413
            metrics = client.get("/metrics")
            assert 'route="/v1/conv2d",status="200"' in metrics.text
        # a connection each: the two workers take turns accepting them
        with httpx.Client(base_url=url, limits=httpx.Limits(max_keepalive_connections=0)) as c:
            for _ in range(30):
                assert c.get("/healthz").status_code == 200
            scrapes = {healthz_count(c.get("/metrics").text) for _ in range(8)}
        assert scrapes == {30.0}, scrapes
    output = proc.output
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status shows it.
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output, output
    # One JSON line per request, with the id the answer echoed.
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    mine = [entry for entry in lines if entry["request_id"] == "trace-me-42"]
    assert len(mine) == 1 and mine[0]["route"] == "/v1/select" and mine[0]["status"] == 200
    assert mine[0]["method"] == "POST" and mine[0]["duration_ms"] >= 0
    assert {entry["route"] for entry in lines} >= {"/v1/conv2d", "/v1/select/batch",
                                                   "/metrics", "/readyz"}
    assert "GET /readyz HTTP/1.1" not in output   # uvicorn's access log is off by default


def test_uvicorn_access_log_and_request_log_are_settings():
    with served({"CONVSEL_ACCESS_LOG": "true", "CONVSEL_REQUEST_LOG": "false"}) as (url, proc):
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert "GET /healthz HTTP/1.1" in proc.output
    assert not [line for line in proc.output.splitlines() if line.startswith("{")]

