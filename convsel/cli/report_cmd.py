"""``convsel report``: how far each policy's pick is from the fastest, per layer."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..evaluation.render import plots, table
from ..evaluation.report import Report, build_report, report_from_db
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
    parser.add_argument("--cv", action="store_true",
                        help="add cross-validation of the predicted policy: leave-one-net-out "
                             "(per net, fit on --db's timings of every other shape, judge on "
                             "this net's fresh timings) and leave-one-family-out (per family: "
                             "grouped, depthwise, few-channel, large-kernel, strided, fit "
                             "without any shape of it, judge on its layers)")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="also judge N generated shapes (as `convsel tune --sample`; use "
                             "another --seed than the training run's)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the --sample shapes")
    parser.add_argument("--fresh-db", default=None, metavar="PATH",
                        help="judge on the timings in this database (a separate, later "
                             "`convsel tune` of the same layers) instead of timing now; the "
                             "acl policy, the measured policy from --db's own timing of each "
                             "layer (how well a run repeats) and --cv are evaluated then")
    parser.add_argument("--device-name", default=None, metavar="NAME",
                        help="with --fresh-db: the device (as recorded) whose timings to "
                             "use, when they were measured on another machine")
    parser.add_argument("--family", action="append", default=None, metavar="FAMILY",
                        help="--cv compares only these model families (default: all installed)")
    parser.add_argument("--judge", choices=("median", "min"), default="median",
                        help="judge picks by each candidate's median (default) or fastest run "
                             "(repeats far better where other processes share the cores)")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="--cv fits each candidate's median or fastest run (as `convsel "
                             "fit --statistic`)")


def run(args: argparse.Namespace) -> int:
    args.h = None  # report takes layers, not a single problem
    layers = layers_from_args(args)
    db = TuningDB(args.db)
    if args.fresh_db:
        report = _from_fresh_db(args, layers, db)
    else:
        report = _timed_now(args, layers, db)
    if args.cv:
        _crossval(args, report, db)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(table(report, args.worst))
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    written = [out / "report.json", *plots(report, out)]
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0 if report.layers else 1


def _identity(args: argparse.Namespace, db: TuningDB) -> dict[str, str]:
    if args.device_name:
        from .fit_cmd import _recorded_device

        return _recorded_device(db, args.backend, args.device_name)
    from ..tuning.identity import device_identity

    return device_identity(args.backend, device_arg(args.device))


def _from_fresh_db(args: argparse.Namespace, layers: list[Layer], db: TuningDB) -> Report:
    fresh = TuningDB(args.fresh_db)
    return report_from_db(layers, fresh, backend=args.backend, device=_identity(args, fresh),
                          target=args.target, judge=args.judge, training=db)


def _crossval(args: argparse.Namespace, report: Report, db: TuningDB) -> None:
    from ..evaluation.crossval import leave_one_family_out, leave_one_net_out

    ident = report.device if args.fresh_db else _identity(args, db)
    training = [e for e in db.entries(backend=args.backend, device=ident) if e.is_current]
    print(f"cross-validating over {len(report.nets)} nets with {len(training)} training "
          f"entries of {ident.get('name', '?')} from {db.path}", file=sys.stderr)
    leave_one_net_out(report, training, target=args.target, families=args.family,
                      statistic=args.statistic,
                      on_net=lambda net: print(f"  fitting without {net}", file=sys.stderr))
    leave_one_family_out(report, training, target=args.target, families=args.family,
                         statistic=args.statistic,
                         on_family=lambda name: print(f"  fitting without every {name} shape",
                                                      file=sys.stderr))


def _timed_now(args: argparse.Namespace, layers: list[Layer], db: TuningDB) -> Report:
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
                              on_progress=progress, exclude=args.exclude, judge=args.judge)
    finally:
        bar.close()
    return report


def _bar(total: int, disabled: bool):  # type: ignore[no-untyped-def]
    from tqdm import tqdm

    # a bar only where someone watches: not into pipes and CI logs, not for an empty run
    off = disabled or total == 0 or not sys.stderr.isatty()
    return tqdm(total=total, unit="layer", disable=off, file=sys.stderr, leave=False)
