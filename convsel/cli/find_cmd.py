"""``convsel find``: time every algorithm and variant for one problem and rank them, as
cuDNN's ``cudnnFindConvolutionForwardAlgorithm`` and MIOpen's Find do."""

from __future__ import annotations

import argparse
import json
import sys

from .problem_args import add_problem_arguments, problem_from_args
from .tune_cmd import device_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    parser.add_argument("--backend", dest="backends", default="numpy", metavar="BACKEND",
                        help="where to time: numpy, opencl, opencl:1, several in order of "
                             "preference ranked together (opencl,numpy: a device's entries "
                             "count the copies of x and y), or auto")
    parser.add_argument("--device", default=None, help="backend device (OpenCL: index or name)")
    parser.add_argument("--target", default="cpu",
                        help="the ACL target whose rules' pick is shown beside the ranking")
    parser.add_argument("--rules", default=None, help="heuristics file (default: packaged)")
    parser.add_argument("--max-workspace-bytes", type=int, default=None, metavar="BYTES",
                        help="do not build candidates whose workspace is larger")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="stop timing after about this many seconds")
    parser.add_argument("--top", type=int, default=None, metavar="K",
                        help="time only the K candidates this device's fitted model (in --db) "
                             "predicts fastest, and ACL's pick")
    parser.add_argument("--store", action="store_true",
                        help="record the measurement in the tuning database")
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database for --store and --top's model (default: "
                             "$CONVSEL_TUNING_DB or the user data directory)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from ..finder import find

    if args.db is not None and not (args.store or args.top is not None):
        raise ValueError("--db applies with --store or --top only")
    problem = problem_from_args(args)
    if not args.json and sys.stderr.isatty():
        print(f"timing every candidate of {problem} ...", file=sys.stderr)
    result = find(problem, backend=args.backends, device=device_arg(args.device),
                  target=args.target, rules=args.rules,
                  max_workspace_bytes=args.max_workspace_bytes, store=args.store, db=args.db,
                  budget_s=args.budget, top=args.top)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.table())
    return 0 if result.best is not None else 1
