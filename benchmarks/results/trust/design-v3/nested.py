"""Training-only design check for v3 (benchmarks/results/trust/NOTES.md, "v3"): as
design-v2/nested.py (per shape family, the whole of `convsel fit` on the training export
without that family, the predicted policy judged on the training export's shapes of it), with
the direct convolution's feature description swapped for one of :data:`DIRECT` (an
experiment: the description is patched into the registry of this process only). No fresh
timing is read.

    gunzip -k train.json.gz; convsel db --db /tmp/X/train.sqlite import train.json
    python nested.py /tmp/X/train.sqlite G77 opencl VARIANT [FAMILY...]
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

from convsel import algorithms
from convsel.algorithms import label_of
from convsel.algorithms.cost import Gemm, candidate_features
from convsel.learn import fit as learn_fit
from convsel.learn.domain import SHAPE_FAMILIES
from convsel.learn.stored import StoredModel
from convsel.policies.predicted import select_predicted
from convsel.problem import ConvProblem
from convsel.rules import as_rules
from convsel.selection import select
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB


def _depthwise_reduction(p: ConvProblem) -> Gemm:
    return Gemm(p.n * p.out_h * p.out_w * p.k, 1, p.kh * p.kw, 1)


def _shipped(p: ConvProblem) -> Gemm:            # features 4
    return _depthwise_reduction(p) if p.is_depthwise else Gemm.grouped(p, taps_in_k=False)


def _tap_by_tap(p: ConvProblem) -> Gemm:         # features 3
    return Gemm.grouped(p, taps_in_k=False)


def _per_group(p: ConvProblem) -> Gemm:
    # grouped (not depthwise): one product per group, reducing over its channels and taps
    if p.is_depthwise:
        return _depthwise_reduction(p)
    return Gemm.grouped(p, taps_in_k=p.groups > 1)


def _reduction(p: ConvProblem) -> Gemm:
    # dense and grouped alike: one product per group, reducing over its channels x taps (how
    # the OpenCL kernel runs them: each work item sums its outputs over channels and taps)
    if p.is_depthwise:
        return _depthwise_reduction(p)
    return Gemm.grouped(p, taps_in_k=True)


def _per_output(p: ConvProblem) -> Gemm:
    # grouped and depthwise alike: each output one reduction over its group's channels x taps
    if p.groups == 1:
        return Gemm.grouped(p, taps_in_k=False)
    return Gemm(p.n * p.out_h * p.out_w * p.k, 1, p.kh * p.kw * (p.c // p.groups), 1)


def _stacked(p: ConvProblem) -> Gemm:
    # the groups stacked along the rows: tap by tap, (pixels x groups) x (k/g) x (c/g)
    if p.is_depthwise:
        return _depthwise_reduction(p)
    return Gemm(p.n * p.out_h * p.out_w * p.groups, p.k // p.groups, p.c // p.groups,
                p.kh * p.kw)


DIRECT = {"shipped": _shipped, "tap-by-tap": _tap_by_tap, "per-group": _per_group,
          "reduction": _reduction,
          "per-output": _per_output, "stacked": _stacked}


def use_direct(variant: str) -> None:
    """Describe the direct convolution by ``variant`` on every backend ("code": as this
    convsel does, per backend)."""
    if variant == "code":
        return
    gemm = DIRECT[variant]

    def features(p: ConvProblem, params: Mapping[str, Any]) -> dict[str, float]:
        return candidate_features(p, params, gemm=gemm(p))

    algorithms.SPECS["direct"] = dataclasses.replace(algorithms.SPECS["direct"],
                                                     features=features, backend_features={})


def _summary(picks: dict[Any, Any]) -> str:
    s = learn_fit.regret_summary(picks)
    return f"{s['geomean_regret']:.3f}/{s['worst']:.2f}x"


def main() -> None:
    db, target, backend, variant = sys.argv[1:5]
    only = sys.argv[5:] or list(SHAPE_FAMILIES)
    use_direct(variant)
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
        trusted = " ".join(f"{k}:{'T' if v['trusted'] else 'F'}"
                           for k, v in result.meta["extrapolation"].items())
        delivered = " ".join(f"{k}={v['delivered']:.3f}"
                             for k, v in result.meta["held_out"].items() if v.get("delivered"))
        print(f"{name:13s} n={len(policy):3d} acl {_summary(acl)}  policy {_summary(policy)} "
              f"abst={abstained:3d}  never {_summary(bold)}  [{result.family}] {trusted} | "
              f"{delivered} ({time.time() - started:.0f}s)", flush=True)
    print(f"{variant}: sum of log geomean regret over {len(only)} folds {logs:.3f}")


if __name__ == "__main__":
    main()
