"""Slow clients deny no service (issue 25, item 2): a real uvicorn server and raw sockets.

Trickled bodies hold no convolution slot nor the planning lock, and are cut off with a 408
after CONVSEL_BODY_TIMEOUT_S; half-sent heads are closed after CONVSEL_HEADER_TIMEOUT_S and
make way for new connections; a full server answers 503 in the service's JSON body and still
answers its health probes.
"""

from __future__ import annotations

import json
import logging
import socket
import time

import httpx
from service_support import PROBLEM, conv_body, running, tensors

from service.config import Settings

SHORT = 0.5   # the body and head timeouts of these servers, seconds


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def start_body(url: str, path: str, content_type: str, first: bytes,
               declared: int = 100_000) -> socket.socket:
    """A request whose head is complete and whose body has only begun (``first``)."""
    s = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
              f"Content-Length: {declared}\r\n\r\n".encode() + first)
    return s


def start_head(url: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")   # the head's last line never comes
    return s


def answer_of(s: socket.socket) -> tuple[int | None, dict | None]:
    """(status, JSON body) of what the server sent before closing; (None, None) if nothing."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    s.close()
    if not data:
        return None, None
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


def conv_request() -> dict:
    x, w, bias = tensors()
    return conv_body(x, w, bias)


def test_ten_trickling_conv2d_bodies_do_not_stop_a_normal_one():
    settings = Settings(max_concurrent_convolutions=1, max_queued_convolutions=1,
                        body_timeout_s=SHORT)
    with running(settings) as url:
        slow = [start_body(url, "/v1/conv2d", "application/json", b'{"problem"')
                for _ in range(10)]
        multipart = start_body(url, "/v1/conv2d", "multipart/form-data; boundary=b",
                               b"--b\r\nContent-Disposition: form-data; name=\"problem\"\r\n\r\n")
        time.sleep(0.1)
        answer = httpx.post(f"{url}/v1/conv2d", json=conv_request(), timeout=10)
        assert answer.status_code == 200, answer.text
        started = time.monotonic()
        for s in [*slow, multipart]:
            status, body = answer_of(s)
            assert status == 408 and body["code"] == "request_timeout", body
            assert "CONVSEL_BODY_TIMEOUT_S" in body["message"]
        assert time.monotonic() - started < 3 * SHORT + 1


def test_a_trickling_model_upload_does_not_stop_another_plan():
    onnx_models = __import__("pytest").importorskip("onnx_models")
    model = onnx_models.Chain((1, 3, 16, 16)).conv(8, 3, pads=[1] * 4).model()
    with running(Settings(body_timeout_s=SHORT)) as url:
        slow = start_body(url, "/v1/plan", "multipart/form-data; boundary=b",
                          b"--b\r\nContent-Disposition: form-data; name=\"model\"; "
                          b"filename=\"m.onnx\"\r\n\r\n\x08")
        time.sleep(0.1)
        answer = httpx.post(f"{url}/v1/plan", timeout=10, files={
            "model": ("m.onnx", model.SerializeToString(), "application/octet-stream")})
        assert answer.status_code == 200, answer.text
        assert answer_of(slow)[0] == 408


def test_half_sent_heads_are_closed_and_make_way_for_new_connections():
    with running(Settings(max_connections=8, header_timeout_s=SHORT)) as url:
        slow = [start_head(url) for _ in range(12)]
        time.sleep(0.1)
        live = httpx.get(f"{url}/healthz", timeout=5)
        assert live.status_code == 200 and live.json() == {"status": "ok"}
        started = time.monotonic()
        statuses = [answer_of(s)[0] for s in slow]
        assert time.monotonic() - started < 3 * SHORT + 1   # every one closed
        # the oldest made way for newer connections; the others timed out, told why
        assert 408 in statuses and set(statuses) <= {408, None}, statuses


def test_a_full_server_answers_in_json_and_still_answers_its_probes():
    settings = Settings(max_requests=2, body_timeout_s=SHORT, retry_after_seconds=2)
    with running(settings) as url, httpx.Client(base_url=url, timeout=5) as client:
        slow = [start_body(url, "/v1/conv2d", "application/json", b"{") for _ in range(2)]
        time.sleep(0.1)
        full = client.post("/v1/select", json={"problem": PROBLEM})
        assert full.status_code == 503 and full.json()["code"] == "busy", full.text
        assert full.headers["retry-after"] == "2" and "CONVSEL_MAX_REQUESTS" in full.text
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        for s in slow:
            answer_of(s)   # cut off after SHORT s
        assert client.post("/v1/select", json={"problem": PROBLEM}).status_code == 200


def test_when_every_connection_is_busy_the_next_is_told_so_in_json():
    with running(Settings(max_connections=3, body_timeout_s=SHORT)) as url:
        slow = [start_body(url, "/v1/conv2d", "application/json", b"{") for _ in range(3)]
        time.sleep(0.1)
        refused = httpx.get(f"{url}/healthz", timeout=5)
        assert refused.status_code == 503 and refused.json()["code"] == "busy", refused.text
        assert "CONVSEL_MAX_CONNECTIONS" in refused.json()["message"]
        for s in slow:
            answer_of(s)


def test_a_client_hanging_up_mid_body_is_no_server_error(caplog):
    caplog.set_level(logging.INFO)
    with running() as url:
        for path, media in [("/v1/conv2d", "application/json"), ("/v1/select", "application/json"),
                            ("/v1/conv2d", "multipart/form-data; boundary=b")]:
            start_body(url, path, media, b"--b\r\n" if "multipart" in media else b"{",
                       declared=1000).close()
        deadline = time.monotonic() + 5
        while 'status="499"' not in (text := httpx.get(f"{url}/metrics").text):
            assert time.monotonic() < deadline, text
            time.sleep(0.05)
        time.sleep(0.2)
        text = httpx.get(f"{url}/metrics").text
    assert 'status="500"' not in text
    assert 'method="POST",route="/v1/conv2d",status="499"} 2.0' in text, text
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert not any(r.exc_info for r in caplog.records)
    logged = [json.loads(r.getMessage()) for r in caplog.records
              if r.name == "convsel.service.requests" and r.getMessage().startswith("{")]
    assert sorted(e["status"] for e in logged if e["method"] == "POST") == [499, 499, 499]
