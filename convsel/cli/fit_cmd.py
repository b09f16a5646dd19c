"""``convsel fit``: fit a cost model from this device's timings and store it in the database."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..learn.families import FAMILIES
from ..tuning.db import TuningDB
from ..tuning.identity import device_identity
from .tune_cmd import device_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="numpy", help="numpy or opencl")
    parser.add_argument("--device", default=None, help="backend device (OpenCL: index or name)")
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (default: $CONVSEL_TUNING_DB or the user data "
                             "directory)")
    parser.add_argument("--device-name", default=None, metavar="NAME",
                        help="fit the timings of the device of this name found in the database "
                             "(measured on another machine) instead of opening a device here")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), default=None,
                        help="compare only these model families (repeatable; default: every "
                             "installed one)")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="fit each candidate's median time (default) or its fastest run "
                             "(steadier where other processes share the cores)")
    parser.add_argument("--target", default=None,
                        help="the ACL target whose rules the model must beat (default: cpu "
                             "for numpy, G77 for opencl)")
    parser.add_argument("--noisy", action="store_true",
                        help="also fit entries whose deciding timings are noisy (left out by "
                             "default)")
    parser.add_argument("--folds", type=int, default=5, metavar="K",
                        help="cross-validation folds over problems (default 5)")
    parser.add_argument("--json", action="store_true", help="print the stored meta as JSON")


def run(args: argparse.Namespace) -> int:
    from ..learn.fit import fit
    from ..learn.stored import model_key

    if args.folds < 2:
        raise ValueError(f"--folds {args.folds}: must be >= 2")
    db = TuningDB(args.db)
    ident = (_recorded_device(db, args.backend, args.device_name) if args.device_name
             else device_identity(args.backend, device_arg(args.device)))
    entries = [e for e in db.entries(backend=args.backend, device=ident) if e.is_current]
    result = fit(entries, families=args.family, folds=args.folds, device=ident,
                 statistic=args.statistic, target=args.target,
                 noisy=args.noisy)
    db.save_model(model_key(args.backend, ident), result.family, result.model.to_data(),
                  result.meta)
    if args.json:
        print(json.dumps(result.meta, indent=1))
        return 0
    print(summary(result.meta, args.backend, str(db.path)))
    return 0


def _recorded_device(db: TuningDB, backend: str, name: str) -> dict[str, str]:
    found = {tuple(e.device[k] for k in ("vendor", "name", "driver"))
             for e in db.entries(backend=backend) if e.device["name"] == name}
    if len(found) != 1:
        known = sorted({e.device["name"] for e in db.entries(backend=backend)})
        raise ValueError(f"--device-name {name!r}: {len(found)} devices of that name hold "
                         f"{backend} timings in {db.path}; known: {', '.join(known) or 'none'}")
    vendor, device, driver = found.pop()
    return {"vendor": vendor, "name": device, "driver": driver}


def summary(meta: dict[str, Any], backend: str, where: str) -> str:
    noisy = meta.get("noisy_entries_left_out") or 0
    lines = [(f"fitted on {meta['training_problems']} shapes ({meta['training_rows']} timed "
             f"candidates) of {backend} on {meta['device'].get('name', '?')} in "
             f"{meta['fit_seconds']:.1f} s" + (f"; {noisy} entries with noisy timings left "
                                                 "out (--noisy keeps them)" if noisy else "")),
             "held-out regret (cross-validated over shapes; mean = MIOpen's mean slowdown):"]
    rows = [(f"ACL's rules ({meta['rules']['target']})", meta["rules"], "")]
    for family, s in meta["held_out"].items():
        ok = s.get("verdict", {}).get("accepted")
        mark = ("  <- kept" if ok else "  <- kept, REJECTED") if family == meta["family"] \
            else ("" if ok else "  (does not beat the rules)")
        rows.append((family, s, mark))
    for name, s, mark in rows:
        lines.append(f"  {name:<18} geomean {_f(s['geomean_regret'])}  mean "
                     f"{_f(s.get('mean_regret'))}  picks fastest {_pct(s['fastest_share'])}  "
                     f"worst {_f(s['worst'], 2)}×{mark}")
    state = "accepted" if meta.get("accepted") else "REJECTED: it never answers (the rules do)"
    lines.append(f"model {meta['id']} ({meta['family']}) {state}: {meta.get('verdict', '')}")
    lines.append(f"stored in {where}")
    return "\n".join(lines)


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
