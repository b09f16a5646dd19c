"""``convsel fit``: fit a cost model from this device's timings and store it in the database."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..learn.models import FAMILIES
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
                 statistic=args.statistic)
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
    lines = [(f"fitted on {meta['training_problems']} shapes ({meta['training_rows']} timed "
             f"candidates) of {backend} on {meta['device'].get('name', '?')} in "
             f"{meta['fit_seconds']:.1f} s"), "held-out regret (cross-validated over shapes):"]
    for family, s in meta["held_out"].items():
        mark = "  <- kept" if family == meta["family"] else ""
        lines.append(f"  {family:<9} geomean {s['geomean_regret']:.3f}  picks fastest "
                     f"{s['fastest_share']:.0%}  worst {s['worst']:.2f}×{mark}")
    lines.append(f"stored model {meta['id']} ({meta['family']}) in {where}")
    return "\n".join(lines)
