"""The real thing: `convsel serve` on a free loopback port, spoken to with httpx over TCP."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from service_support import PROBLEM, conv_body, from_b64, tensors

from convsel import conv2d


def convsel_command() -> list[str]:
    script = Path(sys.executable).with_name("convsel")
    found = str(script) if script.exists() else shutil.which("convsel")
    return [found] if found else [sys.executable, "-m", "convsel.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited early: {proc.communicate()[0]}"
        try:
            r = httpx.get(f"{url}/readyz", timeout=2)
            if r.status_code == 200:
                return r
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("server not ready in time")


def test_convsel_serve_over_a_socket():
    port = free_port()
    env = {**os.environ, "CONVSEL_MAX_BATCH_SIZE": "3"}
    proc = subprocess.Popen([*convsel_command(), "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1", "--log-level", "info"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_ready(url, proc).json()["ready"] is True
        with httpx.Client(base_url=url, timeout=30) as client:
            sel = client.post("/v1/select", json={"problem": PROBLEM, "target": "G77"})
            assert sel.status_code == 200 and sel.json()["target"] == "G77"
            x, w, bias = tensors()
            conv = client.post("/v1/conv2d", json=conv_body(x, w, bias))
            assert conv.status_code == 200, conv.text
            np.testing.assert_array_equal(from_b64(conv.json()["y"]),
                                          conv2d(x, w, bias, pad=1))
            # The environment reached the server's settings.
            big = client.post("/v1/select/batch", json={"problems": [PROBLEM] * 4})
            assert big.status_code == 413
            metrics = client.get("/metrics")
            assert 'route="/v1/conv2d",status="200"' in metrics.text
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status shows it.
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output, output
