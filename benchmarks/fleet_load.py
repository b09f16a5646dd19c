"""Load on a fleet's shared store: uploads and selections against replicas sharing PostgreSQL,
with one replica killed (SIGKILL) halfway and restarted.

    scripts/postgres.sh                       # prints the server's URL
    python benchmarks/fleet_load.py --pg URL [--seconds 60] [--uploaders 8] [--selectors 64]
        [--replicas 2] [--workers 1] [--out benchmarks/results/fleet/NAME.json]

Makes a fresh database on that server (dropped at the end), starts ``--replicas`` ``convsel
serve`` processes on loopback ports sharing it, and runs, for ``--seconds``:

- ``--uploaders`` clients, each sending uploads (``POST /v1/tuning/entries``) of
  ``--batch`` entries of a device class that is not this machine ("Mali-G78 load board"),
  shapes drawn from a pool the uploaders share (so measurements of one shape merge, and
  some contradict: flagged). An upload not acknowledged (its replica died) is sent again,
  to the other replica, until it is: uploads are idempotent, the store keeps a measurement
  once;
- ``--selectors`` clients asking ``POST /v1/select`` with ``policy: measured`` and that
  class as ``device`` (the answer from the uploads, or the rules while a shape has none),
  each failing over to the other replica when its replica does not answer.

Halfway, one replica (its whole process group) gets SIGKILL and is started again. At the end
it prints and writes: requests per second, p50/p99 latency (all, and while a replica was
down), errors, and the entries and uploads every acknowledged upload promised against what
the store holds (lost = promised, not stored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from convsel import ConvProblem, __version__
from convsel.tuning import IMPLEMENTATIONS_VERSION
from convsel.tuning.db import EXPORT_FORMAT, problem_key
from convsel.tuning.measure import candidates

ROOT = Path(__file__).resolve().parents[1]
BOARD = {"vendor": "Arm", "name": "Mali-G78 load board", "driver": "r41p0"}
LOOPBACK = "127.0.0.1"


# -- what the clients send ---------------------------------------------------------------------
def pool(size: int, seed: int) -> list[ConvProblem]:
    """``size`` distinct small problems (3x3 and 1x1, a few strides)."""
    rng = random.Random(seed)
    found: dict[str, ConvProblem] = {}
    while len(found) < size:
        k = rng.choice((1, 3))
        p = ConvProblem(1, rng.randrange(7, 57), rng.randrange(7, 57),
                        rng.choice((8, 16, 32, 64, 96)), rng.choice((8, 16, 32, 64, 128)),
                        k, k, pad=k // 2, stride=rng.choice((1, 1, 2)))
        found[problem_key(p)] = p
    return list(found.values())


_CANDIDATES: dict[str, list[Any]] = {}


def measured_entry(problem: ConvProblem, rng: random.Random) -> dict[str, Any]:
    """An entry as a board would measure it: every candidate of ``problem`` on numpy, timed
    with a little noise around a speed of its own (so boards mostly agree on the winner)."""
    key = problem_key(problem)
    if key not in _CANDIDATES:
        _CANDIDATES[key] = candidates(problem, "numpy")[0]
    found = _CANDIDATES[key]
    base = problem.flops / 2e9 * 1e3          # ms at 2 GFLOP/s
    timings = {}
    for c in found:
        speed = 1.0 + (hash((key, c.label)) % 100) / 50.0       # 1x .. 3x, fixed per variant
        ms = base * speed * rng.uniform(0.95, 1.05)
        timings[c.label] = {"algorithm": c.algorithm, "params": {
            k: list(v) if isinstance(v, tuple) else v for k, v in c.params.items()},
            "median_s": ms / 1e3, "iqr_s": ms * 0.02 / 1e3, "min_s": ms * 0.98 / 1e3,
            "runs": 7, "clock": "wall"}
    fastest = min(timings, key=lambda label: timings[label]["median_s"])
    second = sorted(timings, key=lambda label: timings[label]["median_s"])[1:2]
    close = second and timings[second[0]]["median_s"] < timings[fastest]["median_s"] * 1.03
    return {"problem": problem.to_dict(), "backend": "numpy", "device": dict(BOARD),
            "convsel_version": __version__, "implementations_version": IMPLEMENTATIONS_VERSION,
            "winner": None if close else fastest,
            "tie": [fastest, second[0]] if close else [], "timings": timings,
            "created": time.time() - rng.uniform(0, 3600)}


# -- the replicas -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    port: int
    env: dict[str, str]
    workers: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "convsel", "serve", "--host", LOOPBACK, "--port",
                   str(self.port), "--workers", str(self.workers), "--log-level", "warning"]
        with self.log.open("ab") as out:
            # its own process group: SIGKILL reaches every worker of it
            self.proc = subprocess.Popen(command, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


async def ready(replica: Replica, timeout: float = 120.0) -> float:
    """Seconds until ``/readyz`` answers 200."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() - started < timeout:
            assert replica.proc is not None and replica.proc.poll() is None, \
                f"replica on {replica.port} exited: see {replica.log}"
            try:
                if (await http.get(f"{replica.url}/readyz")).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"replica on {replica.port} not ready in {timeout:g} s")


# -- the clients ----------------------------------------------------------------------------------
@dataclass
class Tally:
    select_ms: list[tuple[float, float]] = field(default_factory=list)   # (when, ms)
    upload_ms: list[tuple[float, float]] = field(default_factory=list)
    select_errors: dict[str, int] = field(default_factory=dict)
    upload_errors: dict[str, int] = field(default_factory=dict)
    failovers: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    promised_entries: set[str] = field(default_factory=set)
    promised_uploads: int = 0
    uploads_acknowledged: int = 0


def _count(where: dict[str, int], key: str) -> None:
    where[key] = where.get(key, 0) + 1


async def post(clients: list[httpx.AsyncClient], first: int, path: str, tally: Tally,
               errors: dict[str, int], **kwargs: Any) -> tuple[httpx.Response, float] | None:
    """POST to replica ``first``, then to the others when it does not answer; the answer and
    its latency (ms, of the attempt that answered), or None."""
    for attempt in range(len(clients)):
        client = clients[(first + attempt) % len(clients)]
        started = time.perf_counter()
        try:
            response = await client.post(path, **kwargs)
        except httpx.TransportError as exc:
            _count(errors, type(exc).__name__)
            tally.failovers += 1
            continue
        return response, (time.perf_counter() - started) * 1e3
    return None


async def uploader(index: int, clients: list[httpx.AsyncClient], problems: list[ConvProblem],
                   batch: int, stop_at: float, tally: Tally, headers: dict[str, str]) -> None:
    rng = random.Random(index)
    while time.monotonic() < stop_at:
        entries = [measured_entry(rng.choice(problems), rng) for _ in range(batch)]
        body = json.dumps({"format": EXPORT_FORMAT, "entries": entries})
        acknowledged = False
        while not acknowledged and time.monotonic() < stop_at + 60:   # until it is stored
            answer = await post(clients, index, "/v1/tuning/entries", tally,
                                tally.upload_errors, content=body,
                                headers={**headers, "X-Convsel-Client": f"load-{index}"})
            if answer is None:
                await asyncio.sleep(0.2)
                continue
            response, ms = answer
            if response.status_code != 200:
                _count(tally.upload_errors, f"HTTP {response.status_code}")
                await asyncio.sleep(0.2)
                continue
            acknowledged = True
            tally.upload_ms.append((time.monotonic(), ms))
            tally.uploads_acknowledged += 1
            for outcome in response.json()["entries"]:
                _count(tally.statuses, outcome["status"])
            tally.promised_entries.update(problem_key(ConvProblem.from_dict(e["problem"]))
                                          for e in entries)
            tally.promised_uploads += len(entries)


async def selector(index: int, clients: list[httpx.AsyncClient], problems: list[ConvProblem],
                   stop_at: float, tally: Tally) -> None:
    rng = random.Random(1000 + index)
    while time.monotonic() < stop_at:
        body = {"problem": rng.choice(problems).to_dict(), "policy": "measured",
                "backend": "numpy", "device": BOARD["name"]}
        answer = await post(clients, index, "/v1/select", tally, tally.select_errors,
                            json=body)
        if answer is None:
            await asyncio.sleep(0.1)
            continue
        response, ms = answer
        if response.status_code != 200:
            _count(tally.select_errors, f"HTTP {response.status_code}")
            continue
        tally.select_ms.append((time.monotonic(), ms))
        _count(tally.sources, response.json()["source"])


# -- the run --------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def latency(samples: list[tuple[float, float]], window: tuple[float, float] | None = None,
            ) -> dict[str, Any]:
    values = [ms for t, ms in samples if window is None or window[0] <= t <= window[1]]
    return {"count": len(values), "p50_ms": percentile(values, 50),
            "p99_ms": percentile(values, 99),
            "mean_ms": statistics.fmean(values) if values else None}


def make_database(pg: str) -> tuple[str, str]:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    name = f"convsel_fleet_load_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    p = conninfo_to_dict(pg)
    return name, f"postgresql://{p['user']}:{p['password']}@{p['host']}:{p['port']}/{name}"


def drop_database(pg: str, name: str) -> None:
    import psycopg

    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stored_counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as con:
        def one(sql: str) -> int:
            return int(con.execute(sql, (BOARD["name"],)).fetchone()[0])
        return {"entries": one("SELECT COUNT(*) FROM entries WHERE device=%s"),
                "uploads": one("SELECT COUNT(*) FROM uploads WHERE device=%s"),
                "flagged": one("SELECT COUNT(*) FROM uploads WHERE device=%s AND "
                               "status='flagged'")}


async def run(args: argparse.Namespace, db_url: str, logs: Path) -> dict[str, Any]:
    token = "fleet-load-token"
    env = {**os.environ, "CONVSEL_TUNING_DB": db_url, "CONVSEL_API_TOKEN": token,
           "CONVSEL_REQUEST_LOG": "false", "CONVSEL_MAX_CONNECTIONS": "512"}
    replicas = [Replica(free_port(), env, args.workers, logs / f"replica-{i}.log")
                for i in range(args.replicas)]
    for r in replicas:
        r.start()
    started = await asyncio.gather(*(ready(r) for r in replicas))
    problems = pool(args.shapes, args.seed)
    for p in problems:                      # the candidates, once, before the clock starts
        measured_entry(p, random.Random(0))
    tally = Tally()
    limits = httpx.Limits(max_connections=args.uploaders + args.selectors,
                          max_keepalive_connections=args.uploaders + args.selectors)
    clients = [httpx.AsyncClient(base_url=r.url, timeout=30, limits=limits) for r in replicas]
    t0 = time.monotonic()
    stop_at = t0 + args.seconds
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    tasks = [asyncio.create_task(uploader(i, clients, problems, args.batch, stop_at, tally,
                                          headers)) for i in range(args.uploaders)]
    tasks += [asyncio.create_task(selector(i, clients, problems, stop_at, tally))
              for i in range(args.selectors)]
    await asyncio.sleep(args.seconds / 2)
    victim = replicas[0]
    killed = time.monotonic()
    victim.kill()                                          # SIGKILL, whole process group
    victim.start()
    back_after = await ready(victim)
    back = time.monotonic()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    for c in clients:
        await c.aclose()
    for r in replicas:
        r.stop()
    stored = stored_counts(db_url)
    promised = {"entries": len(tally.promised_entries), "uploads": tally.promised_uploads}
    down = (killed, back)
    return {
        "machine": args.machine, "host": platform.node(), "cpus": os.cpu_count(),
        "load_1m_before": args.load_before, "python": platform.python_version(),
        "convsel": __version__, "store": "postgresql (scripts/postgres.sh, loopback)",
        "replicas": args.replicas, "workers_per_replica": args.workers,
        "uploaders": args.uploaders, "selectors": args.selectors, "batch": args.batch,
        "shapes": args.shapes, "seconds": round(elapsed, 1),
        "replicas_ready_s": [round(s, 2) for s in started],
        "killed_at_s": round(killed - t0, 1), "restarted_ready_s": round(back_after, 2),
        "select": {"requests": len(tally.select_ms),
                   "per_s": round(len(tally.select_ms) / elapsed, 1),
                   **latency(tally.select_ms), "while_a_replica_was_down": latency(
                       tally.select_ms, down), "errors": tally.select_errors,
                   "sources": tally.sources},
        "upload": {"acknowledged": tally.uploads_acknowledged,
                   "per_s": round(tally.uploads_acknowledged / elapsed, 2),
                   "entries_per_s": round(tally.promised_uploads / elapsed, 1),
                   **latency(tally.upload_ms), "errors": tally.upload_errors,
                   "outcomes": tally.statuses},
        "failovers": tally.failovers,
        "promised": promised, "stored": stored,
        "lost": {"entries": promised["entries"] - stored["entries"],
                 "uploads": promised["uploads"] - stored["uploads"]},
    }


def render(result: dict[str, Any]) -> str:
    s, u, r = result["select"], result["upload"], result
    down = s["while_a_replica_was_down"]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"
    head = (f"fleet load on {r['machine']} ({r['cpus']} CPUs, load {r['load_1m_before']} "
            f"before), {r['replicas']} replicas x {r['workers_per_replica']} worker(s) on "
            f"{r['store']}, {r['seconds']} s")
    kill = (f"  replica 0 SIGKILLed at {r['killed_at_s']} s, ready again after "
            f"{r['restarted_ready_s']} s; {r['failovers']} requests failed over")
    select = (f"  select (policy measured, device {BOARD['name']!r}, {r['selectors']} "
              f"clients): {s['requests']} answered, {s['per_s']}/s, p50 {ms(s['p50_ms'])} ms, "
              f"p99 {ms(s['p99_ms'])} ms; while a replica was down: p50 {ms(down['p50_ms'])} "
              f"ms, p99 {ms(down['p99_ms'])} ms ({down['count']}); errors {s['errors']}; "
              f"sources {s['sources']}")
    upload = (f"  upload ({r['uploaders']} clients x {r['batch']} entries): "
              f"{u['acknowledged']} acknowledged, {u['per_s']}/s ({u['entries_per_s']} "
              f"entries/s), p50 {ms(u['p50_ms'])} ms, p99 {ms(u['p99_ms'])} ms; errors "
              f"{u['errors']}; outcomes {u['outcomes']}")
    store = (f"  store: entries promised {r['promised']['entries']}, stored "
             f"{r['stored']['entries']}; uploads promised {r['promised']['uploads']}, stored "
             f"{r['stored']['uploads']} ({r['stored']['flagged']} flagged); lost {r['lost']}")
    return "\n".join([head, kill, select, upload, store])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True, help="a PostgreSQL server URL whose role may "
                        "create databases (scripts/postgres.sh prints one)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--uploaders", type=int, default=8)
    parser.add_argument("--selectors", type=int, default=64)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10, help="entries per upload")
    parser.add_argument("--shapes", type=int, default=300, help="distinct shapes uploaded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--machine", default="this machine",
                        help="how to name the machine in the output")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here (and "
                        "the text beside it, .txt)")
    args = parser.parse_args(argv)
    if args.replicas < 2 or args.seconds < 4:
        parser.error("--replicas >= 2 (one is killed) and --seconds >= 4")
    args.load_before = round(os.getloadavg()[0], 2)
    name, db_url = make_database(args.pg)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"fleet-load-{name}"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(run(args, db_url, logs))
    finally:
        drop_database(args.pg, name)
    text = render(result)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text + "\n")
    return 0 if result["lost"] == {"entries": 0, "uploads": 0} else 1


if __name__ == "__main__":
    sys.exit(main())
