"""Training-only design check (benchmarks/results/trust/NOTES.md, "Cost models v2"): for each
shape family, the whole of `convsel fit` (every model family, ACL's rules, the selection, the
extrapolation records) on the training export *without* that family, then the predicted
policy (with its abstention gate, and never abstaining) and ACL's rules judged on the
*training* export's shapes of the family. No fresh timing is read: the design was chosen on
this.

    gunzip -k train.json.gz; convsel db --db /tmp/X/train.sqlite import train.json
    python nested.py X G77 opencl      # or: python nested.py X cpu numpy
"""

from __future__ import annotations

import sys
import time
from typing import Any

from convsel.algorithms import label_of
from convsel.learn import fit as learn_fit
from convsel.learn.domain import SHAPE_FAMILIES
from convsel.learn.stored import StoredModel
from convsel.policies.predicted import select_predicted
from convsel.rules import as_rules
from convsel.selection import select
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB


def _summary(picks: dict[Any, Any]) -> str:
    s = learn_fit.regret_summary(picks)
    return f"{s['geomean_regret']:.3f}/{s['worst']:.2f}x"


def main() -> None:
    where, target, backend = sys.argv[1:4]
    entries = [e for e in TuningDB(f"/tmp/{where}/train.sqlite").entries() if e.is_current]
    data = learn_fit.dataset(entries)
    rows = learn_fit._rows(data)
    rules = as_rules(None)
    resolved = resolve_target(target, rules)

    def charge(p: Any, label: str) -> Any:
        row = next((i for i in rows[p] if data.variants[i] == label), None)
        return None if row is None else learn_fit._charged(data, p, label, rows[p], row)

    for name, (_, member) in SHAPE_FAMILIES.items():
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
        trusted = " ".join(f"{k}:{'T' if v['trusted'] else 'F'}"
                           for k, v in result.meta["extrapolation"].items())
        delivered = " ".join(f"{k}={v['delivered']:.3f}"
                             for k, v in result.meta["held_out"].items() if v.get("delivered"))
        print(f"{name:13s} n={len(policy):3d} acl {_summary(acl)}  policy {_summary(policy)} "
              f"abst={abstained:3d}  never {_summary(bold)}  [{result.family}] {trusted} | "
              f"{delivered} ({time.time() - started:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
