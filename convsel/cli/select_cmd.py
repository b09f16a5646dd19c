"""``convsel select``: the method ACL would choose for one problem, with the trace."""

from __future__ import annotations

import argparse
import json

from ..policies import choose
from .problem_args import add_problem_arguments, problem_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_problem_arguments(parser)
    parser.add_argument("--target", default="cpu", help="cpu, cpu-nofp16, G77, Mali-G78AE ...")
    parser.add_argument("--policy", default="acl", help="acl (the rules) or measured")
    parser.add_argument("--rules", default=None, help="heuristics file (default: packaged)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    problem = problem_from_args(args)
    sel = choose(problem, args.target, rules=args.rules, policy=args.policy)
    if args.json:
        print(json.dumps({"problem": problem.to_dict(), **sel.to_dict()}, indent=2))
    else:
        print(f"problem    {problem}")
        print(sel.explain())
    return 0
