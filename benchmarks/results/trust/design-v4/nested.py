"""Training-only design check for v4 (benchmarks/results/trust/NOTES.md, "v4"): as
design-v3/nested.py (per shape family, the whole of `convsel fit` on the training export
without that family, the predicted policy judged on the training export's shapes of it), with
the gradient-boosted trees or the extrapolation gate changed by one of :data:`VARIANTS` in
this process only. No fresh
timing is read.

    gunzip -k train.json.gz; convsel db --db /tmp/X/train.sqlite import train.json
    python nested.py /tmp/X/train.sqlite G77 opencl VARIANT [FAMILY...]
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np

from convsel.algorithms import label_of
from convsel.learn import fit as learn_fit
from convsel.learn import models
from convsel.learn.domain import SHAPE_FAMILIES
from convsel.learn.features import FEATURE_NAMES
from convsel.learn.stored import StoredModel
from convsel.policies.predicted import select_predicted
from convsel.rules import as_rules
from convsel.selection import select
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB

# the problem's raw sizes: what a held-out family is defined by, and what trees split on
RAW = ("n", "h", "w", "c", "k", "kh", "kw", "c_per_group", "k_per_group", "out_h", "out_w")
CHANNELS = ("c", "c_per_group")

VARIANTS: dict[str, dict[str, Any]] = {
    "code": {},
    "no-raw": {"hide": RAW},
    "no-channels": {"hide": CHANNELS},
    "linear": {"params": {"linear_tree": True, "linear_lambda": 1.0}},
    "smooth": {"params": {"num_leaves": 7, "min_data_in_leaf": 10}},
    # the gate's worst case: no worse than the rules' or below issue 22's 1.5x blunder line
    "gate-1.5": {"gate_worst": 1.5},
}


def use(variant: str) -> None:
    spec = VARIANTS[variant]
    if "gate_worst" in spec:
        from convsel.learn import trust
        rule = trust.no_worse
        trust.no_worse = lambda worst, rules_worst: (worst <= spec["gate_worst"]
                                                     or rule(worst, rules_worst))
    hidden = [FEATURE_NAMES.index(n) for n in spec.get("hide", ())]
    models.GBT_PARAMS.update(spec.get("params", {}))
    if not hidden:
        return
    fit, predict = models.GbtModel.fit.__func__, models.GbtModel.predict

    def masked(x: np.ndarray) -> np.ndarray:
        x = np.array(x, dtype=float, copy=True)
        x[:, hidden] = 0.0
        return x

    models.GbtModel.fit = classmethod(lambda cls, x, y, v: fit(cls, masked(x), y, v))
    models.GbtModel.predict = lambda self, x, v: predict(self, masked(x), v)


def _summary(picks: dict[Any, Any]) -> str:
    s = learn_fit.regret_summary(picks)
    return f"{s['geomean_regret']:.3f}/{s['worst']:.2f}x"


def main() -> None:
    db, target, backend, variant = sys.argv[1:5]
    only = sys.argv[5:] or list(SHAPE_FAMILIES)
    use(variant)
    entries = [e for e in TuningDB(db).entries() if e.is_current]
    data = learn_fit.dataset(entries)
    rows = learn_fit._rows(data)
    rules = as_rules(None)
    resolved = resolve_target(target, rules)

    def charge(p: Any, label: str) -> Any:
        row = next((i for i in rows[p] if data.variants[i] == label), None)
        return None if row is None else learn_fit._charged(data, p, label, rows[p], row)

    logs = 0.0
    for name in only:
        member = SHAPE_FAMILIES[name][1]
        started = time.time()
        result = learn_fit.fit([e for e in entries if not member(e.problem)], target=target)
        model = StoredModel(result.family, result.model, result.meta, 0.0)
        policy, bold, acl, abstained = {}, {}, {}, 0
        for p in rows:
            if not member(p):
                continue
            a = select(p, resolved, rules=rules)
            s = select_predicted(p, resolved, rules, a, backend=backend, model=model)
            b = select_predicted(p, resolved, rules, a, backend=backend, model=model,
                                 abstain=False)
            picked = [charge(p, label_of(x.algorithm, x.params)) for x in (a, s, b)]
            if None in picked:
                continue
            acl[p], policy[p], bold[p] = picked
            abstained += s.source == "rules"
        logs += math.log(learn_fit.regret_summary(policy)["geomean_regret"])
        delivered = " ".join(f"{k}={v['delivered']:.3f}"
                             for k, v in result.meta["held_out"].items() if v.get("delivered"))
        print(f"{name:13s} n={len(policy):3d} acl {_summary(acl)}  policy {_summary(policy)} "
              f"abst={abstained:3d}  never {_summary(bold)}  [{result.family}] | "
              f"{delivered} ({time.time() - started:.0f}s)", flush=True)
    print(f"{variant}: sum of log geomean regret over {len(only)} folds {logs:.3f}")


if __name__ == "__main__":
    main()
