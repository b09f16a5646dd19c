"""A repeatable hostile-traffic check of the HTTP service, on loopback only.

Starts ``convsel serve --workers 2`` on a free 127.0.0.1 port and then:

1. sends the bad-input corpus (the hardening report's requests and more): oversize and
   chunked bodies, millions of list items, unknown keys, loose types (``true``, ``"8"``,
   ``2**62``), wrong media types, truncated ``.npy`` headers, garbage models, unknown routes,
   missing or wrong tokens (the server runs with ``CONVSEL_API_TOKEN``);
2. a bounded load run: ``--clients`` threads mixing good and bad requests, stopped after
   ``--requests`` requests or ``--seconds`` seconds, whichever comes first;
3. kills during tuning: ``--kills`` times a ``/v1/tune`` is started on a server that is
   then killed with SIGKILL mid-measurement; the database must still open and list;
4. when ``CONVSEL_TUNING_DB`` is a ``postgresql://`` URL, two replicas sharing it: a tune on
   replica A must be what ``policy=measured`` answers on replica B;
5. slow clients and floods (issue 25) on a server with short timeouts: ten trickled conv2d
   bodies beside a normal conv2d, more half-sent heads than ``CONVSEL_MAX_CONNECTIONS``
   beside ``/healthz``, 300 made-up methods of 12,000 characters then ``/metrics``, clients
   hanging up mid-body, and a tuning database that accepts and never answers beside
   ``/healthz`` (the slowest probe answer is reported).

It prints what was tried and what held: requests per status, the 5xx count (the check fails
on any), and the peak RSS (VmHWM) of every server process.

    python benchmarks/hostile.py [--requests 3000 --seconds 60 --clients 8 --kills 3]
"""

from __future__ import annotations

import argparse
import base64
import collections
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

TOKEN = "hostile-check-token"
P = {"n": 1, "h": 8, "w": 8, "c": 4, "k": 8, "kh": 3, "kw": 3, "pad": 1}
JSON = {"content-type": "application/json"}
AUTH = {"authorization": f"Bearer {TOKEN}"}
DROPPED = 0   # "status" of a request whose connection the server closed before the answer


# ---- a server --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _convsel() -> list[str]:
    script = Path(sys.executable).with_name("convsel")
    found = str(script) if script.exists() else shutil.which("convsel")
    return [found] if found else [sys.executable, "-m", "convsel.cli"]


class Server:
    """`convsel serve` on loopback; ``pids()`` lists the master and its workers."""

    def __init__(self, env: dict[str, str], workers: int) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [*_convsel(), "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", str(workers), "--log-level", "warning"],
            env={**os.environ, "CONVSEL_REQUEST_LOG": "false", **env},
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.peaks: dict[int, float] = {}
        self.now: dict[int, float] = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.output()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server not ready in 90 s")

    def pids(self) -> list[int]:
        found = [self.proc.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    found.append(int(entry.name))
        return found

    def sample_rss(self) -> None:
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peaks[pid] = max(self.peaks.get(pid, 0.0),
                                              int(line.split()[1]) / 1024)
                    elif line.startswith("VmRSS:"):
                        self.now[pid] = int(line.split()[1]) / 1024
            except OSError:
                pass

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.sample_rss()
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# ---- the corpus ------------------------------------------------------------------------------

def _npy(a: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def corpus() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(what, method, path, httpx request kwargs)."""
    problem = json.dumps(P).encode()
    x = np.ones((1, 8, 8, 4), np.float32)
    w = np.ones((8, 3, 3, 4), np.float32)
    cut_header = b"\x93NUMPY\x01\x00" + b"v\x00{'descr': '<f4', 'fortran_order': False, 'shape': ("
    huge_header = _npy(np.zeros(1, np.float32)).replace(b"(1,)", b"(99999999999,)")
    ints = b",".join([b"1"] * 15_700_000)
    cases: list[tuple[str, str, str, dict[str, Any]]] = [
        ("select: 31 MB, target of 15.7 M ints", "POST", "/v1/select",
         {"content": b'{"problem": ' + problem + b', "target": [' + ints + b"]}"}),
        ("batch: 28 MB, 400 k problems", "POST", "/v1/select/batch",
         {"content": b'{"problems": [' + b",".join([problem] * 400_000) + b"]}"}),
        ("batch: 260 k ints", "POST", "/v1/select/batch",
         {"content": b'{"problems": [' + b",".join([b"1"] * 260_000) + b"]}"}),
        ("batch: 40 k unknown keys", "POST", "/v1/select/batch",
         {"content": b'{"problems": [{' + b",".join(b'"k%d": 1' % i for i in range(40_000))
          + b"}]}"}),
        ("select: deeply nested JSON", "POST", "/v1/select",
         {"content": b'{"problem": ' + b"[" * 3000 + b"]" * 3000 + b"}"}),
        ("select: invalid UTF-8", "POST", "/v1/select", {"content": b"\xff\xfe{\x00"}),
        ("select: measured on unknown backend", "POST", "/v1/select",
         {"json": {"problem": P, "policy": "measured", "backend": "cuda"}}),
        ("batch: measured on unknown backend", "POST", "/v1/select/batch",
         {"json": {"problems": [P], "policy": "measured", "backend": "cuda"}}),
        ("select: text/plain (cross-site form)", "POST", "/v1/select",
         {"content": json.dumps({"problem": P}).encode(), "headers": {"content-type":
                                                                     "text/plain"}}),
        ("conv2d: .npy header cut inside the shape", "POST", "/v1/conv2d",
         {"json": {"problem": P, "x": _b64(cut_header), "w": _b64(cut_header)}}),
        ("conv2d: .npy header announcing 1e11 elements", "POST", "/v1/conv2d",
         {"json": {"problem": P, "x": _b64(huge_header), "w": _b64(_npy(w))}}),
        ("conv2d: pickled object array", "POST", "/v1/conv2d",
         {"json": {"problem": P, "x": _b64(_pickled()), "w": _b64(_npy(w))}}),
        ("conv2d: multipart with a truncated file", "POST", "/v1/conv2d",
         {"files": {"x": ("x.npy", _npy(x)[:100]), "w": ("w.npy", _npy(w))},
          "data": {"problem": json.dumps(P)}}),
        ("conv2d: 2**40 flops", "POST", "/v1/conv2d",
         {"json": {"problem": {**P, "h": 65536, "w": 65536, "c": 512, "k": 512},
                   "x": _b64(_npy(x)), "w": _b64(_npy(w))}}),
        ("plan: garbage model", "POST", "/v1/plan",
         {"files": {"model": ("m.onnx", os.urandom(4096))}}),
        ("plan: no model part", "POST", "/v1/plan", {"files": {"target": (None, "cpu")}}),
        ("tune: no token", "POST", "/v1/tune", {"json": {"problem": P}}),
        ("tune: wrong token", "POST", "/v1/tune",
         {"json": {"problem": P}, "headers": {"authorization": "Bearer nope"}}),
        ("tune: near the flop limit (token)", "POST", "/v1/tune",
         {"json": {"problem": {"n": 1, "h": 112, "w": 112, "c": 256, "k": 256, "kh": 3,
                               "kw": 3, "pad": 1}, "budget_s": 5}, "headers": AUTH}),
        ("metrics: no token", "GET", "/metrics", {}),
        ("tuning: limit 10**9", "GET", "/v1/tuning", {"params": {"limit": 10**9}}),
        ("unknown route", "GET", "/v1/../../etc/passwd", {}),
        ("wrong method", "DELETE", "/v1/select", {}),
    ]
    for _, _, _, kwargs in cases:
        if "content" in kwargs:
            kwargs.setdefault("headers", JSON)
    for field, value in [("h", 2**62), ("h", 10**30), ("h", True), ("h", "8"), ("h", 0),
                         ("stride", [1] * 1_000_000), ("pad", [1, 1, 1]),
                         ("activation", "x" * 10_000), ("dtype", "F64")]:
        cases.append((f"select: {field}={str(value)[:20]}", "POST", "/v1/select",
                      {"json": {"problem": {**P, field: value}}}))
    return cases


def _pickled() -> bytes:
    f = io.BytesIO()
    np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return f.getvalue()


def _good_requests() -> list[tuple[str, str, dict[str, Any]]]:
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((8, 3, 3, 4)).astype(np.float32)
    return [
        ("POST", "/v1/select", {"json": {"problem": P, "target": "G77"}}),
        ("POST", "/v1/select/batch", {"json": {"problems": [P] * 32}}),
        ("POST", "/v1/conv2d", {"json": {"problem": P, "x": _b64(_npy(x)),
                                         "w": _b64(_npy(w))}}),
        ("GET", "/healthz", {}),
        ("GET", "/metrics", {"headers": AUTH}),
        ("GET", "/v1/tuning", {}),
    ]


# ---- the runs ---------------------------------------------------------------------------------

class Tally:
    def __init__(self) -> None:
        self.statuses: collections.Counter[int] = collections.Counter()
        self.failures: list[str] = []
        self.dropped: list[str] = []
        self.lock = threading.Lock()

    def add(self, what: str, status: int) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status == DROPPED:
                self.dropped.append(what)
            elif status >= 500 and status != 503:
                self.failures.append(f"{what}: {status}")

    @property
    def tried(self) -> int:
        return sum(self.statuses.values())

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s >= 500 and s not in (503, DROPPED))


def _send(client: httpx.Client, method: str, path: str, kwargs: dict[str, Any]) -> int:
    try:
        return client.request(method, path, **kwargs).status_code
    except httpx.TransportError:
        # The server answered 413 from Content-Length and closed while the client was still
        # sending: the client sees a reset instead of the answer. Reported, not a 5xx.
        return DROPPED


def run_corpus(server: Server, tally: Tally) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for what, method, path, kwargs in corpus():
            status = _send(client, method, path, kwargs)
            tally.add(what, status)
            print(f"  {status}  {what}")
            content = kwargs.get("content")
            if isinstance(content, bytes) and len(content) > 65536:
                chunked = {**kwargs, "content": _chunks(content), "headers": JSON}
                status = _send(client, method, path, chunked)
                tally.add(what + " (chunked)", status)
                print(f"  {status}  {what} (chunked, no Content-Length)")
            server.sample_rss()


def _chunks(data: bytes, size: int = 1 << 16) -> Any:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def run_load(server: Server, tally: Tally, requests: int, seconds: float,
             clients: int) -> None:
    good = _good_requests()
    bad = [(m, p, k) for _, m, p, k in corpus()
           if not isinstance(k.get("content"), bytes) or len(k["content"]) < 65536]
    deadline = time.monotonic() + seconds
    left = [requests]
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while time.monotonic() < deadline:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                method, path, kwargs = rng.choice(good if rng.random() < 0.7 else bad)
                if path == "/v1/tune":
                    continue   # tuning is one at a time and slow: the corpus covers it
                tally.add(f"{method} {path}", _send(client, method, path, kwargs))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        server.sample_rss()
        time.sleep(0.5)


def run_kills(env: dict[str, str], kills: int) -> list[str]:
    """SIGKILL a server while it tunes, ``kills`` times; the database must still work."""
    held = []
    body = {"problem": {"n": 1, "h": 28, "w": 28, "c": 32, "k": 32, "kh": 3, "kw": 3,
                        "pad": 1}, "budget_s": 5, "retune": True}
    for i in range(kills):
        server = Server(env, workers=1)
        try:
            threading.Thread(target=_send, daemon=True, args=(
                httpx.Client(base_url=server.url, timeout=60), "POST", "/v1/tune",
                {"json": body, "headers": AUTH})).start()
            time.sleep(0.3 + 0.4 * i)
        finally:
            server.stop(signal.SIGKILL)
        after = Server(env, workers=1)
        try:
            r = httpx.get(f"{after.url}/v1/tuning", timeout=30)
            ready = httpx.get(f"{after.url}/readyz", timeout=30).json()["detail"]["tuning"]
            held.append(f"kill {i + 1}: /v1/tuning {r.status_code}, database available="
                        f"{ready.get('available')}")
            if r.status_code != 200 or not ready.get("available"):
                raise AssertionError(held[-1])
        finally:
            after.stop()
    return held


def run_replicas(env: dict[str, str]) -> list[str]:
    """Two replicas on one PostgreSQL store: what A tunes, B answers from."""
    problem = {"n": 1, "h": 10, "w": 10, "c": 8, "k": 8, "kh": 3, "kw": 3, "pad": 1}
    a, b = Server(env, workers=1), Server(env, workers=1)
    try:
        tuned = httpx.post(f"{a.url}/v1/tune", json={"problem": problem, "retune": True},
                           headers=AUTH, timeout=120).json()
        answer = httpx.post(f"{b.url}/v1/select", json={"problem": problem,
                                                         "policy": "measured"}).json()
    finally:
        a.stop()
        b.stop()
    held = [(f"replica A tuned: recorded={tuned.get('recorded')}, winner={tuned.get('winner')}"
            f", tie={tuned.get('tie')}"),
            (f"replica B measured policy: source={answer.get('source')}, "
            f"algorithm={answer.get('algorithm')}")]
    if not tuned.get("recorded") or answer.get("source") != "tuning-db":
        raise AssertionError("replicas do not share the store: " + "; ".join(held))
    return held


def _raw(url: str, head: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)
    s.sendall(head)
    return s


def _status_of(s: socket.socket) -> int:
    """The status the server answered on ``s`` before closing it (DROPPED for none)."""
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass
    s.close()
    return int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else DROPPED


def _timed(call: Any) -> tuple[Any, float]:
    start = time.monotonic()
    answer = call()
    return answer, time.monotonic() - start


def run_slow_clients(env: dict[str, str]) -> list[str]:
    """Issue 25's slow clients and floods, on one worker with short timeouts."""
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((8, 3, 3, 4), dtype=np.float32)
    conv = {"problem": P, "x": _b64(_npy(x)), "w": _b64(_npy(w))}
    short = {**env, "CONVSEL_BODY_TIMEOUT_S": "2", "CONVSEL_HEADER_TIMEOUT_S": "2"}
    server, held = Server(short, workers=1), []
    try:
        body = b"POST /v1/conv2d HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        slow = [_raw(server.url, body + b"Content-Length: 100000\r\n\r\n{") for _ in range(10)]
        answer, took = _timed(lambda: httpx.post(f"{server.url}/v1/conv2d", json=conv,
                                                 timeout=30))
        cut = [_status_of(s) for s in slow]
        held.append(f"10 trickled conv2d bodies: a normal conv2d answered {answer.status_code} "
                    f"in {took:.2f} s; the trickled ones got {sorted(set(cut))}")
        heads = [_raw(server.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n") for _ in range(300)]
        live, took = _timed(lambda: httpx.get(f"{server.url}/healthz", timeout=30))
        closed = [_status_of(s) for s in heads]
        held.append(f"300 half-sent heads (256 connections at most): /healthz {live.status_code} "
                    f"in {took * 1e3:.0f} ms; the heads were closed ({closed.count(408)} told "
                    f"408, {closed.count(DROPPED)} made way for newer connections)")
        rng = random.Random(25)
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
            for _ in range(300):
                c.request("".join(rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ", k=12_000)),
                          "/v1/select")
            for _ in range(20):
                _raw(server.url, body + b"Content-Length: 1000\r\n\r\n{").close()
            time.sleep(0.5)
            metrics = c.get("/metrics").text
        errors = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                     if line.startswith("convsel_http_requests_total") and 'status="5' in line)
        held.append(f"300 made-up methods of 12,000 characters: /metrics is "
                    f"{len(metrics.encode()) / 1024:.0f} KiB; 20 hang-ups mid-body: "
                    f"{errors:.0f} requests counted 5xx")
        if answer.status_code != 200 or live.status_code != 200 or errors or \
                len(metrics.encode()) > 100_000:
            raise AssertionError("; ".join(held))
    finally:
        server.stop()
    with socket.socket() as silent:   # a database server that accepts and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        dead = f"postgresql://convsel:pw@127.0.0.1:{silent.getsockname()[1]}/tuning"
        server = Server({**env, "CONVSEL_TUNING_DB": dead, "CONVSEL_TUNING_DB_TIMEOUT": "2"},
                        workers=1)
        try:
            waiting = [threading.Thread(target=httpx.post, daemon=True, args=(
                f"{server.url}/v1/select",), kwargs={"json": {"problem": P, "policy": "measured"},
                                                     "timeout": 60}) for _ in range(4)]
            for t in waiting:
                t.start()
            ready, took_ready = _timed(lambda: httpx.get(f"{server.url}/readyz", timeout=60))
            slowest = max(_timed(lambda: httpx.get(f"{server.url}/healthz", timeout=60))[1]
                          for _ in range(20))
            held.append(f"tuning database that never answers: /readyz {ready.status_code} in "
                        f"{took_ready:.2f} s (tuning available="
                        f"{ready.json()['detail']['tuning'].get('available')}); slowest of 20 "
                        f"/healthz beside 4 measured selects: {slowest * 1e3:.0f} ms")
            if slowest > 0.1 or took_ready > 1.5:
                raise AssertionError(held[-1])
        finally:
            server.stop()
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args(argv)
    db_url = os.environ.get("CONVSEL_TUNING_DB", "")
    with tempfile.TemporaryDirectory() as tmp:
        db = db_url if db_url.startswith("postgresql://") else str(Path(tmp) / "tuning.sqlite")
        env = {"CONVSEL_API_TOKEN": TOKEN, "CONVSEL_TUNING_DB": db}
        tally = Tally()
        server = Server(env, workers=2)
        try:
            print(f"convsel serve --workers 2 on {server.url} (pids {server.pids()})")
            print("bad-input corpus:")
            run_corpus(server, tally)
            corpus_tried = tally.tried
            start = time.monotonic()
            run_load(server, tally, args.requests, args.seconds, args.clients)
            elapsed = time.monotonic() - start
            print(f"load: {tally.tried - corpus_tried} requests from {args.clients} clients "
                  f"in {elapsed:.1f} s")
        finally:
            server.stop()
        held = [*run_slow_clients(env), *run_kills(env, args.kills)]
        replicas = run_replicas(env) if db.startswith("postgresql://") else [
            ("replicas sharing PostgreSQL: not run (CONVSEL_TUNING_DB is not a postgresql:// "
            "URL)")]
    print("\nwhat was tried and what held:")
    print(f"  requests tried: {tally.tried}")
    print(f"  by status: {dict(sorted(tally.statuses.items()))}")
    print(f"  5xx other than 503 (busy): {tally.server_errors}")
    for pid, peak in sorted(server.peaks.items()):
        print(f"  pid {pid}: peak RSS {peak:.0f} MiB, {server.now.get(pid, 0):.0f} MiB at the end")
    if tally.dropped:
        print(f"  connections closed by the server before its answer (early 413): "
              f"{len(tally.dropped)} ({', '.join(sorted(set(tally.dropped)))})")
    for line in [*held, *replicas]:
        print(f"  {line}")
    for failure in tally.failures:
        print(f"  SERVER ERROR {failure}")
    return 1 if tally.server_errors else 0


if __name__ == "__main__":
    sys.exit(main())
