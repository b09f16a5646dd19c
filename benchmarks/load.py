"""Load test of the HTTP service on loopback: requests/s, p50/p99 latency and errors.

Starts ``convsel serve`` and, as the yardstick, a bare FastAPI app whose endpoint returns a
constant, both under uvicorn with the same settings (1 worker, no access log), each on a free
loopback port. N concurrent clients (threads with
stdlib http.client, keep-alive) then send a fixed number of requests
to each scenario in turn:

    bare      POST /const       the same body as select, ignored; returns a constant
    select    POST /v1/select   one problem (cached after the first answer, as in production)
    conv2d    POST /v1/conv2d   a small convolution (1x16x16x8 -> 16, 3x3), base64 .npy

Prints a table and writes JSON (``--out``). The aim: select >= 70% of bare's requests/s, with
zero errors. Server CPU seconds are reported to show whether the server or the client was
the bottleneck (2 cores are shared by both).

    python benchmarks/load.py --clients 16 --requests 3000 --out benchmarks/results/load.json
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI

HERE = Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"

bare_app = FastAPI()


@bare_app.post("/const")
async def const() -> dict[str, bool]:
    return {"ok": True}


SELECT_BODY = {"problem": {"n": 1, "h": 56, "w": 56, "c": 64, "k": 64, "kh": 3, "kw": 3,
                           "pad": 1}, "target": "G77"}


def conv_body() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 16, 8)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3, 8)).astype(np.float32)
    return {"problem": {"n": 1, "h": 16, "w": 16, "c": 8, "k": 16, "kh": 3, "kw": 3, "pad": 1},
            "x": _b64(x), "w": _b64(w), "backend": "numpy"}


def _b64(a: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, a)
    return base64.b64encode(buffer.getvalue()).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def start(command: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONVSEL_ACCESS_LOG": "false", "CONVSEL_REQUEST_LOG": "false"}
    proc = subprocess.Popen(command, env=env, cwd=HERE.parent)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}: {' '.join(command)}")
        try:
            path = "/readyz" if "convsel" in " ".join(command) else "/docs"
            if httpx.get(f"http://{LOOPBACK}:{port}{path}", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"server did not become ready: {' '.join(command)}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def scenario(port: int, path: str, body: dict[str, Any], clients: int, requests: int,
             warmup: int) -> dict[str, Any]:
    """``clients`` threads, one keep-alive connection each (stdlib http.client: about 0.15 ms
    of client CPU per request, so the server, not the client, sets the pace)."""
    payload = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def client(count: int) -> None:
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=60)
        mine: list[float] = []
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, body=payload, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    why = None if response.status == 200 else str(response.status)
                except (OSError, http.client.HTTPException) as exc:
                    why = type(exc).__name__
                    conn.close()
                    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=60)
                mine.append(time.perf_counter() - t0)
                if why is not None:
                    with lock:
                        errors[why] = errors.get(why, 0) + 1
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)

    client(warmup)
    latencies.clear()
    errors.clear()
    shares = [requests // clients + (i < requests % clients) for i in range(clients)]
    threads = [threading.Thread(target=client, args=(n,)) for n in shares]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"requests": len(latencies), "seconds": round(elapsed, 3),
            "rps": round(len(latencies) / elapsed, 1), "p50_ms": round(q[49] * 1e3, 2),
            "p99_ms": round(q[98] * 1e3, 2), "errors": sum(errors.values()),
            "error_kinds": errors}


def measure(name: str, port: int, path: str, body: dict[str, Any], pid: int, clients: int,
            requests: int, warmup: int) -> dict[str, Any]:
    cpu0 = cpu_seconds(pid)
    result = scenario(port, path, body, clients, requests, warmup)
    result["server_cpu_ms_per_request"] = round((cpu_seconds(pid) - cpu0) / requests * 1e3, 3)
    result["clients"] = clients
    print(f"  {name:<8} {result['requests']:>6} req {result['rps']:>8.1f} req/s  "
          f"p50 {result['p50_ms']:>7.2f} ms  p99 {result['p99_ms']:>7.2f} ms  "
          f"errors {result['errors']}  server CPU {result['server_cpu_ms_per_request']} "
          "ms/req", flush=True)
    return result


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians over rounds; select/bare is the median of the per-round ratios (each round
    runs them back to back, so load from elsewhere on the machine hits both alike)."""
    names = rounds[0].keys()
    out: dict[str, Any] = {
        name: {"rps_median": statistics.median(r[name]["rps"] for r in rounds),
               "p50_ms_median": statistics.median(r[name]["p50_ms"] for r in rounds),
               "p99_ms_median": statistics.median(r[name]["p99_ms"] for r in rounds),
               "server_cpu_ms_per_request_median": statistics.median(
                   r[name]["server_cpu_ms_per_request"] for r in rounds),
               "errors": sum(r[name]["errors"] for r in rounds),
               "requests": sum(r[name]["requests"] for r in rounds)} for name in names}
    out["select_over_bare"] = round(statistics.median(
        r["select"]["rps"] / r["bare"]["rps"] for r in rounds), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=3000, help="per scenario (bare/select)")
    parser.add_argument("--conv-requests", type=int, default=600)
    parser.add_argument("--conv-clients", type=int, default=8,
                        help="<= the server's pool capacity (2 running + 8 queued by "
                        "default); more get 503 + Retry-After by design")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="bare, select, conv2d, repeated")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "load.json")
    args = parser.parse_args()
    if not (1 <= args.clients <= 256 and 1 <= args.conv_clients <= 256
            and 1 <= args.requests <= 100_000 and 1 <= args.conv_requests <= 100_000
            and 1 <= args.rounds <= 10):
        parser.error("keep it bounded: 1..256 clients, 1..100000 requests")

    convsel_port, bare_port = free_port(), free_port()
    uvicorn_flags = ["--host", LOOPBACK, "--workers", "1", "--log-level", "warning"]
    servers = {
        "convsel": start([sys.executable, "-m", "convsel.cli", "serve", "--port",
                          str(convsel_port), *uvicorn_flags], convsel_port),
        "bare": start([sys.executable, "-m", "uvicorn", "--app-dir", str(HERE), "load:bare_app",
                       "--port", str(bare_port), "--no-access-log", *uvicorn_flags[:2],
                       *uvicorn_flags[4:]], bare_port),
    }
    scenarios = [("bare", bare_port, "/const", SELECT_BODY, servers["bare"].pid,
                  args.clients, args.requests),
                 ("select", convsel_port, "/v1/select", SELECT_BODY, servers["convsel"].pid,
                  args.clients, args.requests),
                 ("conv2d", convsel_port, "/v1/conv2d", conv_body(), servers["convsel"].pid,
                  args.conv_clients, args.conv_requests)]
    rounds = []
    try:
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", flush=True)
            rounds.append({s[0]: measure(*s, args.warmup) for s in scenarios})
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    summary = summarise(rounds)
    ratio, errors = summary["select_over_bare"], summary["select"]["errors"]
    verdict = "met" if ratio >= 0.70 and errors == 0 else "NOT met"
    print(f"select / bare = {ratio:.1%} (median of per-round ratios; aim >= 70% with zero "
          f"errors: {verdict}); errors: " + ", ".join(f"{k} {v['errors']}" for k, v in
                                                      summary.items() if isinstance(v, dict)))
    report = {"command": " ".join(["python benchmarks/load.py", *sys.argv[1:]]),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "summary": summary, "aim": verdict, "rounds": rounds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
