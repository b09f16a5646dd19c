"""Training-only design check for v6 (benchmarks/results/trust/NOTES.md, "v6"): as
design-v4/nested.py (per shape family, the whole of `convsel fit` on the training export
without that family, the predicted policy judged on the training export's shapes of it), with
the candidates' feature rows changed by one or more of :data:`VARIANTS` (joined by "+") in
this process only, aimed at the H100's few-channel miss (tiny-channel layers where OpenCL's
`direct` beats an implicit GEMM tile). No fresh timing is read.

    gunzip -k train.json.gz; convsel db --db /tmp/X/train.sqlite import train.json
    [WORST=n] python nested.py /tmp/X/train.sqlite G77 opencl VARIANT[+VARIANT] [FAMILY...]
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from convsel.algorithms import label_of, spec
from convsel.learn import fit as learn_fit
from convsel.learn.domain import SHAPE_FAMILIES
from convsel.learn.stored import StoredModel
from convsel.policies.predicted import select_predicted
from convsel.problem import ConvProblem
from convsel.rules import as_rules
from convsel.selection import select
from convsel.targets import resolve_target
from convsel.tuning.db import TuningDB

Row = dict[str, float]
TW = 4   # the OpenCL direct kernel's output columns per work item (backends/opencl/direct.py)


def block_k(p: ConvProblem) -> int:
    """Its output channels per work item (backends/opencl/direct.py's block_k)."""
    kg = p.k // p.groups
    return next((tk for tk in (4, 2) if p.groups == 1 or kg % tk == 0), 1)


def _direct_tile(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    # OpenCL's direct kernel as the register-tiled kernel it is: a TK x TW block of outputs
    # per work item, how many work items, how full their blocks are (no local memory)
    tk = block_k(p)
    blocks_k, blocks_x = math.ceil(p.k / tk), math.ceil(p.out_w / TW)
    row.update(tile_warp=float(tk * TW),
               log_workgroups=math.log10(blocks_k * blocks_x * p.n * p.out_h),
               tile_fill=p.k * p.out_w / (blocks_k * tk * blocks_x * TW))
    return row


def _direct_items(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    # as _direct_tile without its fill: tile_fill > 0 is what the analytic model reads as "a
    # tiled GEMM" (its flops, serial and work-group terms), which the direct kernel is not
    tk = block_k(p)
    row.update(tile_warp=float(tk * TW),
               log_workgroups=math.log10(math.ceil(p.k / tk) * math.ceil(p.out_w / TW)
                                         * p.n * p.out_h))
    return row


def _direct_thread_work(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    # the serial multiply-adds of one work item in place of the (shared) reduction depth
    row["log_reduction"] = math.log10(block_k(p) * TW * p.kh * p.kw * (p.c // p.groups))
    return row


def _direct_loop(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    # the same serial work in a slot of its own (tile_k: 0 for a direct row otherwise, and
    # unread by the analytic model), the shared reduction depth kept
    row["tile_k"] = float(block_k(p) * TW * p.kh * p.kw * (p.c // p.groups))
    return row


def _gemm_thread_work(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    tile = params.get("tile") or ()
    if len(tile) >= 5:
        row["log_reduction"] = math.log10(int(tile[3]) * int(tile[4]) * p.kh * p.kw
                                          * (p.c // p.groups))
    return row


def _gemm_kfill(p: ConvProblem, params: Mapping[str, Any], row: Row) -> Row:
    # the K tile's fill too: a 3x3 layer on 1-3 channels fills 9-27 of a 16- or 32-deep K
    tile = params.get("tile") or ()
    if len(tile) >= 5:
        depth, tk = p.kh * p.kw * (p.c // p.groups), int(tile[2])
        row["tile_fill"] *= depth / (math.ceil(depth / tk) * tk)
    return row


Patch = Callable[[ConvProblem, Mapping[str, Any], Row], Row]
# variant -> {(algorithm, backend): patch of that candidate's row}
VARIANTS: dict[str, dict[tuple[str, str], Patch]] = {
    "code": {},
    "direct-tile": {("direct", "opencl"): _direct_tile},
    "direct-items": {("direct", "opencl"): _direct_items},
    "direct-work": {("direct", "opencl"): _direct_thread_work},
    "direct-loop": {("direct", "opencl"): _direct_loop},
    "thread-work": {("direct", "opencl"): _direct_thread_work,
                    ("implicit_gemm", "opencl"): _gemm_thread_work},
    "kfill": {("implicit_gemm", "opencl"): _gemm_kfill},
}


def use(variants: str) -> None:
    patches: dict[tuple[str, str], list[Patch]] = {}
    for name in variants.split("+"):
        for key, patch in VARIANTS[name].items():
            patches.setdefault(key, []).append(patch)
    for (algorithm, backend), chain in patches.items():
        s = spec(algorithm)
        base = s.backend_features.get(backend, s.features)

        def patched(p: ConvProblem, params: Mapping[str, Any], base: Any = base,
                    chain: list[Patch] = chain) -> Row:
            row = dict(base(p, params))
            for patch in chain:
                row = patch(p, params, row)
            return row

        object.__setattr__(s, "backend_features", {**s.backend_features, backend: patched})


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
        worst = sorted(policy, key=lambda q: policy[q][2] / policy[q][1])[:int(os.environ.get(
            "WORST", "0"))]
        for q in worst:   # WORST=n: the fold's n costliest picks, the fastest beside
            label, seconds, fastest = policy[q]
            best = min(rows[q], key=lambda i: data.y[i])
            print(f"    {seconds / fastest:.2f}x {q} picked {label}, fastest "
                  f"{data.variants[best]} ({fastest * 1e3:.4f} ms)")
    print(f"{variant}: sum of log geomean regret over {len(only)} folds {logs:.3f}")


if __name__ == "__main__":
    main()
