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
import threading
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


# ---- a real uvicorn server in this process, and loopback stand-ins for a database ----------

@contextmanager
def running(settings: Settings | None = None) -> Iterator[str]:
    """The base URL of a real uvicorn server, with the options `convsel serve` gives it, in a
    thread of this process on a free loopback port. It starts in a fraction of a second (no
    interpreter to start, nothing to import) and stops at the end of the block."""
    import uvicorn

    from service.server import uvicorn_options

    settings = settings or Settings()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_config=None, timeout_graceful_shutdown=2,
                            **uvicorn_options(settings))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@contextmanager
def silent_listener() -> Iterator[int]:
    """A loopback port whose server accepts connections and never says a word: a database
    server that hangs (the client's connect timeout is all that ends the wait)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


class Outage:
    """A loopback TCP forwarder to ``target`` that can fail like a stopped server:
    :meth:`stop` cuts every forwarded connection and refuses new ones, :meth:`start` listens
    again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        assert self._listener is not None
        # shutdown() wakes the thread blocked in accept(); close() alone would not.
        _quietly(self._listener.shutdown, socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            cut, self._open = self._open, []
        for conn in cut:
            _quietly(conn.shutdown, socket.SHUT_RDWR)
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return   # stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for end in (source, sink):
        _quietly(end.shutdown, socket.SHUT_RDWR)


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except OSError:
        pass
