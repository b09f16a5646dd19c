"""``convsel targets``: every target name with its family and the rules' facts about it."""

from __future__ import annotations

import argparse
import json

from .. import tables
from ..rules import load_rules
from ..targets import resolve_target, target_names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules", default=None, help="heuristics file (default: packaged)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    rules = load_rules(args.rules)
    rows = [resolve_target(name, rules) for name in target_names(rules)]
    if args.json:
        print(json.dumps([{"name": t.name, "kind": t.kind, "arch": t.arch,
                           "value": t.value, "fp16": t.fp16} for t in rows], indent=2))
        return 0
    print(tables.render(("name", "kind", "family", "value", "fp16"), [
        (t.name, t.kind, t.arch, f"0x{t.value:03x}" if t.is_gpu else "-",
         "yes" if t.fp16 else "no") for t in rows]))
    return 0
