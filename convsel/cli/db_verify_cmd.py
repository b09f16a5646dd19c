"""``convsel db verify``: time each stored winner against its runner-up again; confirm,
correct or flag the entry (see :mod:`convsel.tuning.verify`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..tuning.db import TuningDB
from ..tuning.timing import TimingSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verify`` action's arguments (``convsel db`` lists it as an ACTIONS row)."""
    parser.add_argument("--backend", default="numpy", help="numpy or opencl")
    parser.add_argument("--device", default=None, help="backend device (OpenCL: index or name)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="verify only the N oldest entries")
    parser.add_argument("--min-time", type=float, default=0.05, metavar="S",
                        help="time each of the two at least this long")
    parser.add_argument("--repeats", type=int, default=10, metavar="N",
                        help="and at least this many runs")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="BLAS/OpenMP threads while timing (default: as the process has)")
    parser.add_argument("--dry-run", action="store_true",
                        help="report only; leave the database as it is")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace, db: TuningDB) -> int:
    from ..tuning.verify import summary, verify
    from .tune_cmd import device_arg

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit {args.limit}: must be >= 1")
    if args.repeats < 1 or args.min_time < 0:
        raise ValueError("--repeats must be >= 1 and --min-time >= 0")
    settings = TimingSettings(min_runs=args.repeats, min_time=args.min_time,
                              threads=args.threads)

    def show(result: Any) -> None:
        if not args.json:
            print(f"{result.status:<9} {result.problem}: {result.reason}", flush=True)

    results = verify(db, args.backend, device_arg(args.device), settings=settings,
                     limit=args.limit, store=not args.dry_run, on_entry=show)
    counts = summary(results)
    if args.json:
        print(json.dumps({"summary": counts, "entries": [r.to_dict() for r in results]},
                         indent=1))
    else:
        print(", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(results)} "
              f"entries in {db.location}" + (" (dry run: nothing written)" if args.dry_run
                                             else ""))
    return 0
