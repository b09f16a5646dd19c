"""Split-K and 128x256 tiles as implicit-GEMM choices, against what convsel offers now: one
run on one GPU, ResNet-50's distinct layers at batch 32, exact fp32, against cuDNN fp32.

    python benchmarks/gpu_split_k.py [--batch 32] [--rounds 21] [--budget-s 400]
        [--max-variants 8] [--extras search|adopted|tiles] [--layers NAME ...]
        [--out results.json]

Per layer, the "offered" arm is every exact OpenCL candidate that benchmarks/gpu.py times
(``gpu.candidates``, the backend's defaults for what they do not name: split-K per device
class, local buffers per ``implicit_gemm.DOUBLE_BUFFER``). The "extra" arm is implicit_gemm
with the split named: the tiles of :data:`SPLIT_TILES` with split 1, 2, 4 and 8, each with one
and two local buffers, and the 128x256 tiles of :data:`WIDE_TILES` (512 work-items of 8x8, or
256 of 8x16: WN = 16 is outside ``tile_problem``'s rule, which this script relaxes for its own
runs only, see :func:`relax_tile_rule`) with split 1 and 2. Splits that would make more than
:data:`MAX_GROUPS_PER_CU` work-groups per compute unit are not built (big layers: nothing to
fill). Every build is checked against the float64 reference as gpu.py checks it; a build whose
launches equal an offered one's is not timed twice. All kernels of a layer are then timed
interleaved, one profiled run of each per round (order reversed every other round),
``--rounds`` rounds, medians compared; an A/A arm times every offered candidate a second time
(the noise floor of best-of-set comparisons). cuDNN fp32 is gpu.py's ``time_cudnn``.

``--extras adopted`` (after the search): "offered" is gpu.py's candidates without the
named-split implicit_gemm variants that ``implicit_gemm.variants`` now offers
(:func:`convsel.algorithms.implicit_gemm.split_k_variants`), "extra" is those: the offer
before and after, timed as above.

Reported: per layer the fastest correct offered candidate and the fastest of offered + extra,
each over cuDNN, the A/A fastest, and every kernel's median (for choosing rules afterwards).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gpu  # benchmarks/gpu.py, beside this file (it puts tests/ on the path)
import gpu_double_buffer as gdb
import numpy as np

from convsel.algorithms import implicit_gemm as home
from convsel.backends.opencl import get_runtime
from convsel.backends.opencl import implicit_gemm as ig
from convsel.errors import ConvselError
from convsel.problem import ConvProblem
from convsel.rules import load_rules
from convsel.tuning.layers import Layer

SPLIT_TILES = ((128, 128, 16, 8, 8), (128, 128, 8, 8, 8), (128, 64, 8, 8, 4))
# --extras tiles: block rows that divide a 7x7 map's M (32 x 49 = 1568 = 14 x 112) or waste
# less of it than 128 (13 x 128 = 1664), and narrower or deeper tiles, with split 1 and 2
ROW_TILES = ((112, 128, 16, 8, 8), (112, 128, 8, 8, 8), (96, 128, 16, 8, 8),
             (64, 128, 16, 8, 8), (128, 64, 16, 8, 8), (112, 64, 16, 8, 8))
ROW_SPLITS = (1, 2)
SPLITS = (1, 2, 4, 8)
WIDE_TILES = ((128, 256, 8, 8, 8), (128, 256, 8, 8, 16), (128, 256, 16, 8, 16))
WIDE_SPLITS = (1, 2)
MAX_GROUPS_PER_CU = 8


def relax_tile_rule() -> None:
    """Let WN be 16 (a 128x256 tile on 256 work-items): the kernel's register tile is WN/4
    groups of 4 columns, so it builds; the library's rule allows 4 or 8 only."""
    strict = home.tile_problem

    def relaxed(tile: Any) -> str | None:
        t = tuple(int(v) for v in tile)
        if len(t) == 5 and t[4] == 16:
            return strict((*t[:4], 8)) if t[1] % 16 == 0 else "TN must be a multiple of 16"
        return strict(tile)

    home.tile_problem = relaxed
    ig.tile_problem = relaxed


def extras(p: ConvProblem, cus: int) -> list[dict[str, Any]]:
    """The named-split implicit_gemm variants to try on ``p``."""
    m = p.n * p.out_h * p.out_w
    vec = 4 if p.c % 4 == 0 and p.k % 4 == 0 and p.c >= 8 else 1
    out = []
    for tiles, splits in ((SPLIT_TILES, SPLITS), (WIDE_TILES, WIDE_SPLITS)):
        for tile in tiles:
            groups = -(-m // tile[0]) * -(-p.k // tile[1])
            for split in splits:
                if split > 1 and groups * split > MAX_GROUPS_PER_CU * cus:
                    continue
                for buffers in (1, 2):
                    out.append({"tile": tile, "vec": vec, "split": split, "buffers": buffers})
    return out


def row_extras(p: ConvProblem) -> list[dict[str, Any]]:
    """--extras tiles: :data:`ROW_TILES` with :data:`ROW_SPLITS`, local buffers left to the
    backend's default."""
    vec = 4 if p.c % 4 == 0 and p.k % 4 == 0 and p.c >= 8 else 1
    return [{"tile": t, "vec": vec, "split": s} for t in ROW_TILES for s in ROW_SPLITS]


def run_layer(layer: Layer, runtime: Any, rules: Any, rng: np.random.Generator,
              args: argparse.Namespace) -> dict[str, Any]:
    torch = gdb.TORCH
    p = layer.problem.replace(dtype="F32", fast_math=False)
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(np.float32)
    ref, scale = gpu.reference64(torch, p, x, w)
    cus = int(runtime.device.max_compute_units)
    kernels: dict[str, Any] = {}
    entries: dict[str, Any] = {}
    seen: dict[tuple[str, ...], str] = {}
    found = gpu.candidates(p, rules, args.max_variants)
    if args.extras == "search":
        todo = [("offered", a, v) for a, v in found]
        todo += [("extra", "implicit_gemm", v) for v in extras(p, cus)]
    elif args.extras == "tiles":
        todo = [("offered", a, v) for a, v in found]
        todo += [("extra", "implicit_gemm", v) for v in row_extras(p)]
    else:               # "adopted": the offer before the named splits, and those splits
        todo = [("extra" if a == "implicit_gemm" and "split" in v else "offered", a, v)
                for a, v in found]
    for arm, alg, params in todo:
        name = gpu.label(alg, params)
        try:
            kernel, check = gdb.build(p, alg, params, runtime, x, w, ref, scale, None)
        except ConvselError as exc:
            entries[name] = {"arm": arm, "algorithm": alg, "failed": str(exc)}
            continue
        ids = tuple(check["config_ids"])
        if ids in seen:                     # the same launches as an earlier build
            entries[name] = {"arm": arm, "algorithm": alg, "same_as": seen[ids]}
            continue
        seen[ids] = name
        kernels[name] = kernel
        entries[name] = {"arm": arm, "algorithm": alg, "params": params, "check": check,
                         "workspace_bytes": kernel.workspace_bytes}
    del ref, scale
    offered = [k for k in kernels if entries[k]["arm"] == "offered"]
    arms = {**kernels, **{f"{k} (A/A)": kernels[k] for k in offered}}
    samples = gdb.interleaved(arms, args.rounds)
    for name, values in samples.items():
        base = name.removesuffix(" (A/A)")
        key = "aa_s" if name.endswith(" (A/A)") else "kernel_s"
        entries[base][key] = statistics.median(values)
        entries[base]["samples_s" if key == "kernel_s" else "aa_samples_s"] = values
    kernels.clear()
    cudnn = gpu.time_cudnn(torch, p, "fp32", 10)
    row: dict[str, Any] = {"layer": layer.name, "batch": p.n, "problem": p.to_dict(),
                           "candidates": entries, "cudnn_s": cudnn["loop_s"],
                           "cudnn_single_s": cudnn["single_s"]}
    ok = {k: v for k, v in entries.items() if "kernel_s" in v and v["check"]["correct"]}
    for arm, keys, field in (("offered", [k for k in ok if ok[k]["arm"] == "offered"], "kernel_s"),
                             ("aa", [k for k in ok if ok[k]["arm"] == "offered"], "aa_s"),
                             ("all", list(ok), "kernel_s")):
        best = min(keys, key=lambda k: ok[k][field]) if keys else None
        row[f"best_{arm}"] = best
        if best is not None:
            row[f"best_{arm}_s"] = ok[best][field]
            row[f"ratio_{arm}"] = ok[best][field] / cudnn["loop_s"]
    row["incorrect"] = sorted(k for k, v in entries.items() if "check" in v
                              and not v["check"]["correct"])
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("ratio_offered") and r.get("ratio_all")]
    return {"layers": len(done),
            "geomean_vs_cudnn_offered": gpu.geomean([r["ratio_offered"] for r in done]),
            "geomean_vs_cudnn_offered_aa": gpu.geomean([r["ratio_aa"] for r in done]),
            "geomean_vs_cudnn_all": gpu.geomean([r["ratio_all"] for r in done]),
            "layers_above_1_offered": sum(r["ratio_offered"] > 1 for r in done),
            "layers_above_1_all": sum(r["ratio_all"] > 1 for r in done),
            "best_aa_over_offered": [r["best_aa_s"] / r["best_offered_s"] for r in done],
            "incorrect": [i for r in rows for i in r["incorrect"]]}


def print_row(r: dict[str, Any]) -> None:
    def ms(key: str) -> str:
        return f"{r[key] * 1e3:7.4f}" if r.get(key) else "      -"
    print(f"{r['layer'][:30]:<30} offered {ms('best_offered_s')} ({r.get('ratio_offered', 0):.3f})"
          f" A/A {ms('best_aa_s')} all {ms('best_all_s')} ({r.get('ratio_all', 0):.3f}) "
          f"cuDNN {ms('cudnn_s')} | {r['best_offered']} -> {r['best_all']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--extras", choices=("search", "adopted", "tiles"), default="search")
    parser.add_argument("--layers", nargs="*", default=None,
                        help="only the layers whose names start with one of these")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    gdb.TORCH = torch
    gpu.DEV = "cuda" if torch.cuda.is_available() else "cpu"
    relax_tile_rule()
    started = time.perf_counter()
    runtime, rules = get_runtime(None), load_rules()
    meta = gdb.run_meta(runtime, torch, args, extras=args.extras, split_tiles=SPLIT_TILES,
                        splits=SPLITS, wide_tiles=WIDE_TILES, wide_splits=WIDE_SPLITS,
                        max_groups_per_cu=MAX_GROUPS_PER_CU)
    layers = [x for x in gdb.net_layers(args.net, args.batch)
              if not args.layers or x.name.startswith(tuple(args.layers))]
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    left: list[str] = []
    for layer in layers:
        if time.perf_counter() - started > args.budget_s:
            left.append(layer.name)
            continue
        rows.append(run_layer(layer, runtime, rules, rng, args))
        print_row(rows[-1])
        write(args.out, meta, rows, left, started)
    doc_summary = write(args.out, meta, rows, left, started)
    print(json.dumps({k: v for k, v in doc_summary.items() if k != "best_aa_over_offered"},
                     indent=1))
    aa = doc_summary["best_aa_over_offered"]
    if aa:
        print(f"A/A best-of-offered over best-of-offered: {min(aa):.3f}..{max(aa):.3f}")
    if left:
        print(f"budget ran out: {len(left)} layer(s) not run: {', '.join(left)}")
    return 0


def write(out: Path, meta: dict, rows: list, left: list, started: float) -> dict[str, Any]:
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = summarise(rows)
    doc = {"meta": meta, "summary": summary, "not_run": left,
           "elapsed_s": time.perf_counter() - started, "layers": rows}
    out.write_text(json.dumps(gpu.jsonable(doc), indent=1))
    return summary


if __name__ == "__main__":
    sys.exit(main())
