"""Helpers shared by the tests of the HTTP service (tests/service/)."""

from __future__ import annotations

import base64
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings

# A 3x3 convolution that every algorithm runs (Winograd included).
PROBLEM: dict[str, Any] = {"n": 1, "h": 8, "w": 8, "c": 4, "k": 8, "kh": 3, "kw": 3, "pad": 1}


def client_for(**settings: Any) -> TestClient:
    """A TestClient on a fresh app; use it as a context manager so the lifespan runs."""
    return TestClient(create_app(Settings(**settings)))


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npy_b64(array: np.ndarray) -> str:
    return base64.b64encode(npy_bytes(array)).decode()


def from_b64(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def tensors(problem: dict[str, Any] = PROBLEM, seed: int = 0,
            dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (NHWC), w (OHWI) and bias for ``problem`` (groups 1)."""
    rng = np.random.default_rng(seed)
    p = problem
    x = rng.standard_normal((p["n"], p["h"], p["w"], p["c"])).astype(dtype)
    w = rng.standard_normal((p["k"], p["kh"], p["kw"], p["c"])).astype(dtype)
    bias = rng.standard_normal(p["k"]).astype(dtype)
    return x, w, bias


def conv_body(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
              problem: dict[str, Any] = PROBLEM, **fields: Any) -> dict[str, Any]:
    body = {"problem": problem, "x": npy_b64(x), "w": npy_b64(w), **fields}
    if bias is not None:
        body["bias"] = npy_b64(bias)
    return body


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> dict:
    """The response is our error body with this status, code and (when given) field."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    assert body["message"]
    if field is not None:
        assert body["field"] == field, body
    return body


# ---- a real server: `convsel serve` on a free loopback port ---------------------------------

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


@contextmanager
def served(env: dict[str, str] | None = None, workers: int = 1,
           log_level: str = "info") -> Iterator[tuple[str, subprocess.Popen]]:
    """(base URL, process) of `convsel serve` with ``env`` added; SIGTERM on exit. The
    output is collected: read ``proc.output`` after the block."""
    port = free_port()
    proc = subprocess.Popen([*convsel_command(), "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", str(workers), "--log-level", log_level],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.output, _ = proc.communicate(timeout=30)  # type: ignore[attr-defined]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), MiB."""
    return _status_kib(pid, "VmHWM") / 1024


def rss_mb(pid: int) -> float:
    return _status_kib(pid, "VmRSS") / 1024


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)
