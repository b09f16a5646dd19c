"""``convsel select``: the method ACL would choose for one problem, with the trace."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import tables
from ..policies import choose, policy_options
from ..tuning.db import TuningDB
from .problem_args import add_problem_arguments, problem_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    parser.add_argument("--target", default="cpu", help="cpu, cpu-nofp16, G77, Mali-G78AE ...")
    parser.add_argument("--policy", default="acl",
                        help="acl (the rules), measured (the tuning database) or predicted "
                             "(the fitted model)")
    parser.add_argument("--backend", dest="backends", default=None, metavar="BACKEND",
                        help="measured/predicted: whose timings or model (default numpy); "
                             "several in order of preference (opencl,numpy) or auto: the "
                             "fastest of them for a call on host arrays")
    parser.add_argument("--device", default=None, help="measured/predicted: backend device")
    parser.add_argument("--db", default=None, metavar="PATH", help="measured/predicted: "
                        "tuning database (default: $CONVSEL_TUNING_DB or the user data dir)")
    parser.add_argument("--rules", default=None, help="heuristics file (default: packaged)")
    parser.add_argument("--max-workspace-bytes", type=int, default=None, metavar="BYTES",
                        help="ACL's choice if its workspace fits, else the next that does "
                             "(the trace names what was excluded)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    problem = problem_from_args(args)
    given = (("backend", args.backends), ("device", _device(args.device)), ("db", args.db))
    # a policy that does not take an option refuses it, naming those that do
    options: dict[str, Any] = {k: v for k, v in given if v is not None}
    if args.db is not None and "db" in policy_options(args.policy):
        # reading: a mistyped path is an error, not a new empty store
        options["db"] = TuningDB(args.db, create=False)
    sel = choose(problem, args.target, rules=args.rules, policy=args.policy,
                 max_workspace_bytes=args.max_workspace_bytes, **options)
    if args.json:
        print(json.dumps({"problem": problem.to_dict(), **sel.to_dict()}, indent=2))
    else:
        print(f"problem    {problem}")
        print(sel.explain())
        ranking = (sel.measurement or {}).get("ranking") if sel.source == "model" else None
        if ranking:
            print("predicted:")
            print(tables.render(("candidate", "ms", "likely range (ms)"),
                                [_predicted_row(r) for r in ranking], right={"ms"}))
    return 0


def _predicted_row(r: dict[str, Any]) -> tuple[str, str, str]:
    if r["predicted_ms"] is None:
        return r["label"], "-", "not predicted: the model never saw this algorithm timed"
    return r["label"], f"{r['predicted_ms']:.4g}", f"{r['low_ms']:.3g} .. {r['high_ms']:.3g}"


def _device(value: str | None) -> int | str | None:
    # as tune's --device, without importing the tuner for a select
    return int(value) if value is not None and value.isdigit() else value
