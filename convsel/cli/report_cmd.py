"""``convsel report``: how far each policy's pick is from the fastest, per layer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..evaluation.render import plots, table
from ..evaluation.report import build_report
from ..tuning.db import TuningDB
from ..tuning.layers import Layer
from .tune_cmd import add_timing_arguments, device_arg, layers_from_args, settings_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_timing_arguments(parser)
    parser.add_argument("--target", default="cpu", help="the ACL target whose rules the acl "
                        "policy applies (default cpu)")
    parser.add_argument("--out", default="results/report", metavar="DIR",
                        help="where report.json and the PNG charts go (default results/report)")
    parser.add_argument("--worst", type=int, default=5, metavar="N",
                        help="list the N layers where ACL's choice costs most")


def run(args: argparse.Namespace) -> int:
    args.h = None  # report takes layers, not a single problem
    layers = layers_from_args(args)
    db = TuningDB(args.db)
    bar = _bar(len(layers), args.no_progress)
    seen: set[str] = set()

    def progress(layer: Layer, label: str) -> None:
        if layer.label not in seen:
            seen.add(layer.label)
            bar.update(1)
            bar.set_description(layer.label[:40])
        bar.set_postfix_str(label)

    try:
        report = build_report(layers, backend=args.backend, device=device_arg(args.device),
                              db=db, target=args.target, settings=settings_from_args(args),
                              on_progress=progress, exclude=args.exclude)
    finally:
        bar.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(table(report, args.worst))
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    written = [out / "report.json", *plots(report, out)]
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0 if report.layers else 1


def _bar(total: int, disabled: bool):  # type: ignore[no-untyped-def]
    from tqdm import tqdm

    return tqdm(total=total, unit="layer", disable=disabled, file=sys.stderr, leave=False)
