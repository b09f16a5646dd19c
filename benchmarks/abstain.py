"""Which abstention rule to keep: leave-one-family-out with each candidate rule, measured.

For each family of ``convsel.evaluation.families`` a model is fitted (as ``convsel fit``) on
the training database without any shape of the family, then judged on the fresh database's
layers of the family with each abstention setting of ``VARIANTS``: never abstaining; always
abstaining outside the training data (by the domain rules named); and the policy as shipped,
which abstains outside only where fit measured that this device's models extrapolate worse
than ACL's rules ("calibrated"). Geometric-mean regret, worst case and how many layers
abstained, beside ACL's rules.

    python benchmarks/abstain.py --db train.sqlite --fresh-db fresh.sqlite --backend numpy \\
        --device-name NAME --target cpu --net resnet50 ... --sample 300 --seed 1 --out a.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from convsel.cli.fit_cmd import _recorded_device
from convsel.cli.tune_cmd import layers_from_args
from convsel.evaluation.families import FAMILIES
from convsel.evaluation.report import pick_of, report_from_db, summarize
from convsel.learn import domain
from convsel.learn.fit import fit
from convsel.learn.stored import StoredModel
from convsel.policies.predicted import select_predicted
from convsel.rules import as_rules
from convsel.selection import select
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB

VARIANTS: dict[str, domain.Settings | None] = {
    "never": None,
    "calibrated (shipped)": domain.Settings(),
    "kind": domain.Settings(margin_octaves=99, distance=False),
    "kind+range0": domain.Settings(margin_octaves=0.0, distance=False),
    "kind+range0.5": domain.Settings(margin_octaves=0.5, distance=False),
    "kind+range1": domain.Settings(margin_octaves=1.0, distance=False),
    "range1+dist(no kind)": domain.Settings(margin_octaves=1.0, flags=False),
    "kind+range1+dist.99x1.5": domain.Settings(margin_octaves=1.0),
    "kind+range0.5+dist.99x1": domain.Settings(margin_octaves=0.5, distance_margin=1.0),
    "kind+range0+dist.95x1": domain.Settings(margin_octaves=0.0, quantile=0.95,
                                             distance_margin=1.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--db", "--fresh-db", "--device-name", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--net", action="append")
    parser.add_argument("--layers", default=None)
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.h = None
    train, fresh = TuningDB(args.db), TuningDB(args.fresh_db)
    ident = _recorded_device(fresh, args.backend, args.device_name)
    report = report_from_db(layers_from_args(args), fresh, backend=args.backend, device=ident,
                            target=args.target)
    training = [e for e in train.entries(backend=args.backend, device=ident) if e.is_current]
    rules = as_rules(None)
    target = resolve_target(args.target, rules)
    out: dict[str, Any] = {}
    print(f"{'family':<13} {'layers':>6} {'variant':<26} {'regret':>7} {'worst':>7} "
          f"{'abstained':>9}")
    for name, (_, member) in FAMILIES.items():
        rows = [r for r in report.layers if member(r.layer.problem)]
        if not rows:
            continue
        result = fit([e for e in training if not member(e.problem)], device=ident,
                     target=args.target, rules=rules)
        model = StoredModel(result.family, result.model, result.meta, 0.0)
        # the same model without fit's extrapolation record: it abstains whenever outside
        strict = StoredModel(result.family, result.model, {**result.meta, "extrapolation": {}},
                             0.0)
        acl = [(r, pick_of(select(r.layer.problem, target, rules=rules), r.measurement))
               for r in rows]
        figures = {"acl": summarize(acl)}
        print(f"{name:<13} {len(rows):>6} {'ACL rules':<26} "
              f"{figures['acl']['geomean_regret']:>7.3f} {figures['acl']['worst_regret']:>7.2f}")
        for variant, settings in VARIANTS.items():
            picks, abstained = [], 0
            for r in rows:
                if settings is not None:
                    domain.SETTINGS = settings
                sel = select_predicted(r.layer.problem, target, rules,
                                       select(r.layer.problem, target, rules=rules),
                                       backend=args.backend,
                                       model=model if variant.startswith("calibrated") or
                                       settings is None else strict,
                                       abstain=settings is not None)
                abstained += sel.trace[-1].id == "predicted.outside"
                picks.append((r, pick_of(sel, r.measurement)))
            s = summarize(picks)
            figures[variant] = {**s, "abstained": abstained}
            print(f"{'':<13} {'':>6} {variant:<26} {s['geomean_regret']:>7.3f} "
                  f"{s['worst_regret']:>7.2f} {abstained:>9}")
        domain.SETTINGS = domain.Settings()
        out[name] = {"model": result.meta["id"], "accepted": result.meta["accepted"],
                     "extrapolation": {f: {"trusted": v["trusted"],
                                           "model": v["model"]["geomean_regret"],
                                           "rules": v["rules"]["geomean_regret"]}
                                       for f, v in result.meta["extrapolation"].items()},
                     "figures": figures}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
