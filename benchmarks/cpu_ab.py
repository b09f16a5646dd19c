"""Two source trees of convsel against each other and torch, in alternating processes.

    python benchmarks/cpu_ab.py --old /path/main --new /path/branch --layers layers.json \
        --pairs 4 --out results/cpu-ab.json

On the quiet host one layer's time moves by 1.4-1.6x between processes at one sigma
(benchmarks/NOTES-cpu.md, "512-bit vectors, decided"), so a kernel change is measured as
benchmarks/cpu_zmm.py measures a setting: one warm-up process per tree (numba compiles, nothing
timed), then ``--pairs`` pairs of timed processes, the order alternating (old new, new old,
...). Each process is cpu_zmm.py's worker with ``PYTHONPATH`` pointing at one tree: every
layer of MobileNetV2's depthwise set and ResNet-50 with the algorithm that was fastest in the
``--choice`` runs, then torch on the same layer in the same process. Torch does not change
between the trees, so its new-process / old-process ratio is what the host's drift alone does;
layers whose code did not change are a second control.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TREES = ("old", "new")


def _geo(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def _process(tree: str, args: argparse.Namespace, out: Path, warmup: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "CONVSEL_WIDE_VECTORS"}
    env.update(dict(setting.split("=", 1) for setting in getattr(args, f"{tree}_env")))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(getattr(args, tree)).resolve())] + args.extra_path)
    cmd = [sys.executable, str(HERE / "cpu_zmm.py"), "--worker", "--threads", str(args.threads),
           "--repeats", str(args.repeats), "--out", str(out), "--layers", args.layers]
    for path in getattr(args, f"{tree}_choice") or args.choice or []:
        cmd += ["--choice", str(path)]
    for net in args.nets or []:
        cmd += ["--net", net]
    cmd += ["--warmup"] if warmup else []
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    print(f"{'warm-up' if warmup else 'timed'} {tree}: {time.perf_counter() - start:.1f} s",
          flush=True)
    return result


def summarise(runs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per layer: each tree's times, medians, new / old of the medians, the per-process
    convsel / torch ratio's median per tree, and torch's new-process / old-process ratio."""
    names = [(r["net"], r["name"], r["algorithm"]) for r in runs[0][1]["layers"]]
    layers = []
    for i, (net, name, algorithm) in enumerate(names):
        def times(tree: str, key: str, i: int = i) -> list[float]:
            return [res["layers"][i][key] * 1e3 for t, res in runs if t == tree]
        ours = {t: times(t, "convsel_s") for t in TREES}
        torch = {t: times(t, "torch_s") for t in TREES}
        med = {t: statistics.median(ours[t]) for t in TREES}
        layers.append({
            "net": net, "name": name, "algorithm": algorithm, "convsel_ms": ours,
            "torch_ms": torch, "median_ms": {**med, "torch": statistics.median(
                torch["old"] + torch["new"])},
            "min_ms": {**{t: min(ours[t]) for t in TREES},
                       "torch": min(torch["old"] + torch["new"])},
            "new_over_old": med["new"] / med["old"],
            "torch_control": statistics.median(torch["new"]) / statistics.median(torch["old"]),
            "vs_torch": {t: statistics.median(a / b for a, b in zip(ours[t], torch[t]))
                         for t in TREES}})
    nets = {}
    for net in sorted({r["net"] for r in layers}):
        rows = [r for r in layers if r["net"] == net]
        nets[net] = {"geomean_new_over_old": _geo([r["new_over_old"] for r in rows]),
                     "geomean_torch_control": _geo([r["torch_control"] for r in rows]),
                     "geomean_vs_torch": {t: _geo([r["vs_torch"][t] for r in rows])
                                          for t in TREES}}
    return {"layers": layers, "nets": nets}


def print_summary(s: dict[str, Any]) -> None:
    print(f"\n{'layer':44} {'alg':12} {'old ms':>7} {'new ms':>7} {'torch':>7} {'new/old':>7} "
          f"{'t ctl':>6} {'old/t':>6} {'new/t':>6}")
    for r in s["layers"]:
        m = r["median_ms"]
        print(f"{r['net'][:9] + ' ' + r['name']:44.44} {r['algorithm'][:12]:12} {m['old']:7.3f} "
              f"{m['new']:7.3f} {m['torch']:7.3f} {r['new_over_old']:7.2f} "
              f"{r['torch_control']:6.2f} {r['vs_torch']['old']:6.2f} {r['vs_torch']['new']:6.2f}")
    for net, v in s["nets"].items():
        print(f"{net}: new/old {v['geomean_new_over_old']:.3f}, torch control "
              f"{v['geomean_torch_control']:.3f}, vs torch old "
              f"{v['geomean_vs_torch']['old']:.2f} new {v['geomean_vs_torch']['new']:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="source tree imported as convsel: before")
    ap.add_argument("--new", required=True, help="source tree imported as convsel: after")
    ap.add_argument("--extra-path", action="append", default=[],
                    help="more PYTHONPATH entries after the tree (installed wheels)")
    ap.add_argument("--layers", required=True, help="layer file")
    ap.add_argument("--choice", type=Path, action="append",
                    help="benchmarks/cpu.py JSON whose fastest algorithm per layer is timed")
    for tree in TREES:
        ap.add_argument(f"--{tree}-env", action="append", default=[], metavar="NAME=VALUE",
                        help=f"an environment variable for the {tree} tree's processes (the "
                        "two trees may then be one: a setting against another)")
        ap.add_argument(f"--{tree}-choice", type=Path, action="append",
                        help=f"--choice for the {tree} tree's processes only")
    ap.add_argument("--net", dest="nets", action="append",
                    help="nets to time (default: cpu_zmm.py's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="start no new pair after this many seconds")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cpu_ab"))
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for tree in TREES:
        _process(tree, args, args.work / f"warmup-{tree}.json", warmup=True)
    runs: list[tuple[str, dict[str, Any]]] = []
    summary: dict[str, Any] = {}
    for k in range(args.pairs):
        if k and time.monotonic() - started > args.deadline_s:
            print(f"deadline: stopping after {k} pairs", flush=True)
            break
        for tree in (TREES if k % 2 == 0 else TREES[::-1]):
            runs.append((tree, _process(tree, args, args.work / f"{k}-{tree}.json", False)))
        summary = summarise(runs)
        args.out.write_text(json.dumps({
            "command": " ".join(sys.argv), "order": [t for t, _ in runs],
            "trees": {t: str(getattr(args, t)) for t in TREES},
            "tree_env": {t: getattr(args, f"{t}_env") for t in TREES},
            "devices": {t: res["device"] for t, res in runs},
            "process_wall_s": [res["wall_s"] for _, res in runs],
            "environment": {k: os.environ.get(k) for k in (
                "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")},
            "affinity": sorted(os.sched_getaffinity(0)),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), **summary}, indent=1))
    print_summary(summary)
    print(f"wrote {args.out} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
