"""Microseconds per selection call, in-process: select() (ACL's rules) per target, and
choose() per policy ("acl", "measured", "predicted"), for a new problem (first time this
process sees it) and a repeated one.

    python benchmarks/selection.py [--out results/select.json] [--passes 7]
        [--db postgresql://user:password@host:port/dbname] [--targets cpu,G77 | --targets ""]

The measured and predicted policies read a temporary SQLite tuning database (with ``--db``: a
scratch database created on that PostgreSQL server, and dropped after) holding
synthetic timings of half the nets' layers and a model fitted on them (gbt where LightGBM is
installed, else roofline): the measured policy answers from an entry for those layers and
from the model (or the rules) for the others, as it does for a user. A "new" problem is one
this process has not asked about: the pass over the layers is timed once per pass, with the
per-problem answers cleared first (the model and the device identity stay loaded, as they do
in a process); "repeated" asks the same layers again. Absolute times on a shared machine are
noisy: the figures are the best of the passes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from convsel import ConvProblem, choose, select
from convsel.selection import acl_selection
from convsel.tuning.layers import distinct, load_layers

ROOT = Path(__file__).resolve().parents[1]


def synthetic_seconds(p: ConvProblem, algorithm: str, params: dict[str, Any]) -> float:
    """A made-up cost: work over a per-algorithm speed (timings only need to exist)."""
    speed = {"direct": 4.0, "fft": 6.0, "indirect_gemm": 1.5, "im2col_gemm": 1.0,
             "gemm_1x1": 0.9, "winograd": 0.4 if p.c >= 64 else 3.0, "implicit_gemm": 1.2}
    return (p.flops / 2e10 + 2e-5) * speed.get(algorithm, 2.0)


def tuning_db(path: str | Path, problems: list[ConvProblem], family: str | None) -> str:
    """Entries for every other problem, and a model of ``family`` (default: gbt where
    LightGBM is installed, else roofline) fitted on them; returns the family."""
    from convsel.learn.families import available_families
    from convsel.learn.fit import fit
    from convsel.learn.stored import model_key
    from convsel.tuning.db import TuningDB, TuningEntry
    from convsel.tuning.identity import device_identity
    from convsel.tuning.measure import candidates, decide

    ident = device_identity("numpy")
    db = TuningDB(path)
    entries = []
    for p in problems[::2]:
        found, _ = candidates(p, "numpy")
        timings = {c.label: {"algorithm": c.algorithm, "params": {k: list(v) for k, v in
                                                                  c.params.items()},
                             "median_s": synthetic_seconds(p, c.algorithm, dict(c.params)),
                             "iqr_s": 0.0, "runs": 10} for c in found}
        winner, tie = decide(timings)
        entries.append(TuningEntry(problem=p, backend="numpy", device=ident, winner=winner,
                                   tie=tie, timings=timings))
    db.record_many(entries)
    family = family or ("gbt" if "gbt" in available_families() else "roofline")
    result = fit(entries, families=[family], device=ident)
    db.save_model(model_key("numpy", ident), result.family, result.model.to_data(),
                  {**result.meta, "accepted": True})   # answer whatever the rules' score
    return result.family


def us_per_call(problems: list[ConvProblem], ask: Any, passes: int, *, fresh: bool) -> float:
    best = math.inf
    for _ in range(passes):
        if fresh:
            forget()
        start = time.perf_counter()
        for p in problems:
            ask(p)
        best = min(best, (time.perf_counter() - start) / len(problems) * 1e6)
    return best


@contextmanager
def scratch_store(server: str | None) -> Iterator[str | Path]:
    """A temporary SQLite file, or (``server``, a PostgreSQL URL) a scratch database on that
    server: the benchmark's synthetic entries never land in a store someone uses."""
    if server is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield Path(tmp) / "tuning.sqlite"
        return
    import uuid
    from urllib.parse import urlsplit

    import psycopg

    from convsel.tuning.db import close_open

    name = f"convsel_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server)._replace(path=f"/{name}").geturl()
    finally:
        close_open()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def forget() -> None:
    """Clear the per-problem answers (not the loaded model or the device identity)."""
    acl_selection.cache_clear()
    try:
        from convsel.tuning import cache
    except ImportError:   # before answers were kept per process
        return
    cache.clear(("answer",))    # the model and the entries stay loaded, as in a process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cpu,G77")
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "results/select.json")
    parser.add_argument("--db", default=None, metavar="URL",
                        help="a postgresql:// server to hold the tuning store (a scratch "
                             "database on it) instead of a temporary SQLite file")
    parser.add_argument("--family", default=None,
                        help="the model family the predicted policy answers from (default: "
                             "gbt, or roofline without LightGBM); a new problem costs what "
                             "the family's prediction costs")
    args = parser.parse_args()
    layers, _ = load_layers()
    problems = [x.problem for x in distinct(layers)]
    rows = []
    print(f"{len(problems)} distinct layers of the packaged nets; µs per call, best of "
          f"{args.passes} passes")
    print(f"{'call':<34} {'new problem':>12} {'repeated':>10}")
    for target in filter(None, args.targets.split(",")):
        select(problems[0], target)
        new = us_per_call(problems, lambda p, t=target: select(p, t), args.passes, fresh=True)
        again = us_per_call(problems, lambda p, t=target: select(p, t), args.passes,
                            fresh=False)
        rows.append({"call": f"select(target={target})", "new_us": new, "repeated_us": again})
    with scratch_store(args.db) as db:
        family = tuning_db(db, problems, args.family)
        print(f"model family: {family}")
        for policy in ("acl", "measured", "predicted"):
            options = {} if policy == "acl" else {"db": db}
            choose(problems[0], "cpu", policy=policy, **options)   # load once, untimed

            def ask(p: ConvProblem, policy: str = policy,
                    options: dict[str, Any] = options) -> Any:
                return choose(p, "cpu", policy=policy, **options)

            new = us_per_call(problems, ask, args.passes, fresh=True)
            again = us_per_call(problems, ask, args.passes, fresh=False)
            sources = statistics.multimode(ask(p).source for p in problems)
            rows.append({"call": f"choose(policy={policy})", "new_us": new,
                         "repeated_us": again, "answers_from": sources})
    for row in rows:
        print(f"{row['call']:<34} {row['new_us']:>12.1f} {row['repeated_us']:>10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    store = "sqlite" if args.db is None else "postgresql"
    record = {"problems": len(problems), "passes": args.passes, "store": store,
              "family": family, "rows": rows}
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
