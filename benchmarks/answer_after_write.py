"""Microseconds per measured choose() on a PostgreSQL store that is being written to, in-process:
the answer a write leaves alone, and the answer of the entry just written.

    python benchmarks/answer_after_write.py --pg URL [--entries 300] [--asks 100] [--out F.json]

Makes a scratch database on that server (dropped after) holding ``--entries`` entries of one
device class (named, as a fleet's selections name it), asks every problem once, then, for
``--asks`` problems in turn: this process merges new timings into one entry (its own write:
counted at once, no waiting for the notice) and asks (a) another problem; then, in a second
pass, (b) the problem written. Store-wide invalidation re-reads the device's entries for
both; invalidation per entry re-reads one row for (b) only. Medians, in µs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from convsel import ConvProblem, choose
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import decide

BOARD = {"vendor": "Arm", "name": "Mali-G78 load board", "driver": "r41p0"}


def entry(problem: ConvProblem, median_s: float) -> TuningEntry:
    timings = {name: {"algorithm": name, "params": {}, "median_s": s, "iqr_s": 0.0, "runs": 5}
               for name, s in (("direct", median_s), ("im2col_gemm", 3 * median_s))}
    return TuningEntry(problem=problem, backend="numpy", device=BOARD,
                       winner=decide(timings)[0], tie=(), timings=timings)


def measure(url: str, entries: int, asks: int) -> dict[str, Any]:
    problems = [ConvProblem(1, 8, 8, c, 16, 1, 1) for c in range(1, entries + 1)]
    db = TuningDB(url)
    db.record_many([entry(p, 1e-3) for p in problems])
    deadline = time.monotonic() + 10
    while db.change_token() is None and time.monotonic() < deadline:
        time.sleep(0.01)        # the listener: until it vouches, every call asks the server

    def ask(p: ConvProblem) -> float:
        t0 = time.perf_counter()
        choose(p, "cpu", policy="measured", db=db, device=BOARD["name"])
        return time.perf_counter() - t0

    for p in problems:
        ask(p)
    other, written = [], []
    for i, p in enumerate(problems[:asks]):     # two passes: one ask per write
        db.record(entry(p, 1e-3 * (1 + (i + 1) / 1000)))     # a merge: count unchanged
        other.append(ask(problems[-1 - i]))
    for i, p in enumerate(problems[:asks]):
        db.record(entry(p, 1e-3 * (2 + (i + 1) / 1000)))
        written.append(ask(p))
    db.close()
    return {"entries": entries, "asks": asks,
            "other_problem_us": round(statistics.median(other) * 1e6, 1),
            "written_problem_us": round(statistics.median(written) * 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True, help="a server URL whose role may create "
                        "databases (scripts/postgres.sh prints one)")
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--asks", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = f"convsel_after_write_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        result = measure(f"{args.pg.rsplit('/', 1)[0]}/{name}", args.entries, args.asks)
    finally:
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    print(f"{args.entries} entries; median µs per measured choose() after a merge into one "
          f"entry: another problem {result['other_problem_us']}, the problem written "
          f"{result['written_problem_us']}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
