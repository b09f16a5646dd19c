"""A separate process that writes to a tuning store, for the PostgreSQL and kill tests.

    python tests/store_worker.py write URL WORKER COUNT    COUNT entries of its own, plus one
                                                           key every worker rewrites
    python tests/store_worker.py commits URL BATCH OFFSET PAUSE
                                                           batches of BATCH new entries forever,
                                                           printing "inserted N" once a
                                                           batch's rows are written (then
                                                           holding the transaction open PAUSE
                                                           seconds) and "commit N" just
                                                           before its COMMIT
    python tests/store_worker.py tune URL                  measure a small problem for real on
                                                           numpy and record it; print winner
"""

from __future__ import annotations

import json
import sys
import time

from convsel import ConvProblem
from convsel.tuning.db import TuningDB, TuningEntry

DEVICE = {"vendor": "x86_64", "name": "worker-cpu", "driver": "numpy 2"}
SMALL = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1)


def entry(i: int, *, created: float = 1000.0, winner: str = "direct") -> TuningEntry:
    # Distinct problems for distinct i: h in 8..507, k grows every 500.
    problem = ConvProblem(1, 8 + i % 500, 8 + i % 500, 4, 8 + i // 500, 3, 3, pad=1)
    if i == 0:
        problem = SMALL
    timings = {winner: {"algorithm": winner, "params": {}, "median_s": 1e-3, "iqr_s": 1e-5,
                        "runs": 5}}
    return TuningEntry(problem=problem, backend="numpy", device=DEVICE, winner=winner, tie=(),
                       timings=timings, created=created)


def write(url: str, worker: int, count: int) -> None:
    db = TuningDB(url, timeout=60)
    for i in range(count):
        db.record(entry(worker * 10_000 + i + 1))
        db.record(entry(0, created=1000.0 + worker * 10_000 + i, winner=f"w{worker}"))


def commits(url: str, batch: int, offset: int, pause_s: float) -> None:
    db = TuningDB(url, timeout=60)
    engine = sys.modules[type(db._store).__module__]
    real_commit, real_insert = engine._commit, engine._Transaction.executemany
    done = 0

    def announced_insert(self: object, *args: object) -> None:
        real_insert(self, *args)
        print(f"inserted {done}", flush=True)    # rows written, transaction still open
        time.sleep(pause_s)                      # hold it open: a kill now lands inside

    def announced_commit(*args: object) -> None:
        print(f"commit {done}", flush=True)
        real_commit(*args)

    engine._commit = announced_commit
    engine._Transaction.executemany = announced_insert
    while True:
        db.record_many([entry(offset + done * batch + j) for j in range(batch)])
        done += 1


def tune(url: str) -> None:
    from convsel.tuning.measure import measure

    m = measure(SMALL, "numpy", budget_s=10.0)
    TuningDB(url).record(m.entry())
    print(json.dumps({"winner": m.winner, "tie": list(m.tie), "complete": m.complete}))


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    {"write": lambda: write(url, int(rest[0]), int(rest[1])),
     "commits": lambda: commits(url, int(rest[0]), int(rest[1]), float(rest[2])),
     "tune": lambda: tune(url)}[mode]()
