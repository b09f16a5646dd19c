"""256-bit (default) against 512-bit vectors for the fused kernels, in alternating processes.

    python benchmarks/cpu_zmm.py --layers layers.json --threads 2 --pairs 3 \
        --out results/cpu-zmm.json

numba's CPU features are fixed per process (``CONVSEL_WIDE_VECTORS``, see
convsel/backends/numpy/fused/vectors.py), so the two configurations can only be compared
between processes. On a host whose speed drifts (single layers moved 2x between runs of the
same code on the quiet host), one process per configuration compares the drift, not the
vectors. This driver runs one warm-up process per configuration (numba compiles into its
cache there; nothing is timed), then ``--pairs`` pairs of timed processes, the order
alternating (ymm zmm, zmm ymm, ...), so that a drift in time falls on both alike. Each timed
process times every layer with the algorithm that was fastest in the last full run
(``--choice`` JSONs of benchmarks/cpu.py; the same algorithm for both configurations),
then torch on the same layer, in blocks (pause, 2 warm-ups, repeats; median).

The summary gives, per layer, the median over processes of convsel's time per
configuration, of torch's, the ratio zmm / ymm of the medians and its spread: the ratio of
each pair's two processes (min, max), which is what the drift does to one comparison.
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

import numpy as np

HERE = Path(__file__).resolve().parent
CONFIGS = {"ymm": {}, "zmm": {"CONVSEL_WIDE_VECTORS": "1"}}
NETS = ("mobilenet_v2_depthwise", "resnet50")
DEFAULT_CHOICE = [
    HERE / "results" / "cpu-resnet50-2026-11-24-gpuhost-xeon-2cores-v3.json",
    HERE / "results" / "cpu-mobilenetv2-2026-11-24-gpuhost-xeon-2cores-v3.json",
]
PAUSE_S = 0.1


def chosen_algorithms(paths: list[Path]) -> dict[tuple[str, str], str]:
    """(net, layer name) -> the convsel label fastest in earlier benchmarks/cpu.py runs: the
    one with the smallest geometric mean of its times over the runs that timed it (one
    run's winner is often a coin toss between two labels within its noise)."""
    times: dict[tuple[str, str], dict[str, list[float]]] = {}
    for path in paths:
        for layer in json.loads(path.read_text())["layers"]:
            per_label = times.setdefault((layer["net"], layer["name"]), {})
            for label, seconds in (layer.get("time_s") or {}).items():
                if seconds and label != "torch":
                    per_label.setdefault(label, []).append(seconds)
            if layer.get("fastest") and not layer.get("time_s"):
                per_label.setdefault(layer["fastest"], []).append(0.0)
    return {key: min(labels, key=lambda label: sum(map(math.log, [
        max(t, 1e-12) for t in labels[label]])) / len(labels[label]))
        for key, labels in times.items() if labels}


def block(run: Any, repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``run`` after a pause and two warm-ups."""
    time.sleep(PAUSE_S)   # let the other library's spinning threads park
    run()
    run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def worker(args: argparse.Namespace) -> int:
    """One process: every layer, convsel's chosen algorithm then torch, medians to JSON."""
    from cpu import candidates, torch_runner

    from convsel.backends import implementation
    from convsel.backends.numpy import accel, device_identity, threads
    from convsel.rules import default_rules
    from convsel.tuning.layers import load_layers

    started = time.perf_counter()
    threads.set_threads(args.threads)
    if not args.warmup:
        import torch
        torch.set_num_threads(args.threads)
    rules = default_rules()
    chosen = chosen_algorithms(args.choice)
    layers, _ = load_layers(args.layers, list(args.nets or NETS))
    rows = []
    for layer in layers:
        label = chosen.get((layer.net, layer.name), "direct")
        p = layer.problem
        rng = np.random.default_rng(0)
        x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
        w = rng.standard_normal(p.weights_shape).astype(np.float32)
        b = rng.standard_normal(p.k).astype(np.float32)
        algorithm, _, params = candidates(p, rules, None)[label]
        op = implementation(algorithm, "numpy").prepare(p, w, b, params, None)
        repeats = args.repeats if p.flops > 2e8 else 3 * args.repeats   # short layers: more
        ours = block(lambda op=op: op.run(x), 1 if args.warmup else repeats)
        theirs = None if args.warmup else block(torch_runner(p, x, w, b), repeats)
        rows.append({"net": layer.net, "name": layer.name, "algorithm": label,
                     "convsel_s": ours, "torch_s": theirs})
    out = {"device": {**device_identity(), "fused": accel.describe()},
           "wide_vectors_in_force": accel.kernels().vectors.in_force(),
           "wall_s": time.perf_counter() - started, "layers": rows}
    args.out.write_text(json.dumps(out, indent=1))
    return 0


def _run_process(config: str, args: argparse.Namespace, out: Path, warmup: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CONVSEL_WIDE_VECTORS"}
    env.update(CONFIGS[config])
    cmd = [sys.executable, __file__, "--worker", "--threads", str(args.threads),
           "--repeats", str(args.repeats), "--out", str(out)]
    cmd += ["--layers", args.layers] if args.layers else []
    for path in args.choice:
        cmd += ["--choice", str(path)]
    cmd += ["--warmup"] if warmup else []
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    result = json.loads(out.read_text())
    print(f"{'warm-up' if warmup else 'timed'} {config}: {time.perf_counter() - start:.1f} s, "
          f"in force: {result['wide_vectors_in_force']}", flush=True)
    return result


def _geo(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summarise(runs: list[tuple[str, dict]], pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """Per layer: medians per configuration, zmm / ymm of the medians, per-pair ratios."""
    names = [(r["net"], r["name"], r["algorithm"]) for r in runs[0][1]["layers"]]
    layers = []
    for i, (net, name, algorithm) in enumerate(names):
        def times(config: str, key: str, i: int = i) -> list[float]:
            return [res["layers"][i][key] for c, res in runs if c == config]
        ymm, zmm = times("ymm", "convsel_s"), times("zmm", "convsel_s")
        pair_ratios = [runs[z][1]["layers"][i]["convsel_s"] / runs[y][1]["layers"][i]
                       ["convsel_s"] for y, z in pairs]
        torch_y, torch_z = times("ymm", "torch_s"), times("zmm", "torch_s")
        my, mz = statistics.median(ymm), statistics.median(zmm)
        layers.append({
            "net": net, "name": name, "algorithm": algorithm,
            "convsel_ms": {"ymm": [t * 1e3 for t in ymm], "zmm": [t * 1e3 for t in zmm]},
            "torch_ms": {"ymm": [t * 1e3 for t in torch_y], "zmm": [t * 1e3 for t in torch_z]},
            "median_ms": {"ymm": my * 1e3, "zmm": mz * 1e3,
                          "torch": statistics.median(torch_y + torch_z) * 1e3},
            "zmm_over_ymm": mz / my, "pair_ratios": pair_ratios,
            "vs_torch": {"ymm": statistics.median(a / b for a, b in zip(ymm, torch_y)),
                         "zmm": statistics.median(a / b for a, b in zip(zmm, torch_z))}})
    per_net: dict[str, Any] = {}
    for net in NETS:
        rows = [r for r in layers if r["net"] == net]
        per_net[net] = {
            "geomean_zmm_over_ymm": _geo([r["zmm_over_ymm"] for r in rows]),
            "geomean_vs_torch": {c: _geo([r["vs_torch"][c] for r in rows]) for c in CONFIGS},
            "pair_geomeans_zmm_over_ymm": [
                _geo([r["pair_ratios"][k] for r in rows]) for k in range(len(pairs))],
            "sum_ms": {c: sum(r["median_ms"][c] for r in rows) for c in ("ymm", "zmm", "torch")}}
    return {"layers": layers, "nets": per_net}


def print_summary(s: dict[str, Any]) -> None:
    print(f"\n{'layer':46} {'alg':13} {'ymm ms':>7} {'zmm ms':>7} {'torch':>7} "
          f"{'zmm/ymm':>7} {'pairs min-max':>13} {'ymm/t':>6} {'zmm/t':>6}")
    for r in s["layers"]:
        m = r["median_ms"]
        print(f"{r['net'][:9] + ' ' + r['name']:46.46} {r['algorithm'][:13]:13} {m['ymm']:7.3f} "
              f"{m['zmm']:7.3f} {m['torch']:7.3f} {r['zmm_over_ymm']:7.2f} "
              f"{min(r['pair_ratios']):6.2f}-{max(r['pair_ratios']):<6.2f} "
              f"{r['vs_torch']['ymm']:6.2f} {r['vs_torch']['zmm']:6.2f}")
    for net, v in s["nets"].items():
        pairs = ", ".join(f"{g:.2f}" for g in v["pair_geomeans_zmm_over_ymm"])
        print(f"{net}: zmm/ymm geomean {v['geomean_zmm_over_ymm']:.3f} (pairs: {pairs}); "
              f"vs torch ymm {v['geomean_vs_torch']['ymm']:.2f} zmm "
              f"{v['geomean_vs_torch']['zmm']:.2f}; sum ms ymm {v['sum_ms']['ymm']:.2f} "
              f"zmm {v['sum_ms']['zmm']:.2f} torch {v['sum_ms']['torch']:.2f}")


def write(args: argparse.Namespace, runs: list[tuple[str, dict]],
          pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """The summary so far to ``--out`` (after every pair: a run cut short keeps its pairs)."""
    summary = summarise(runs, pairs)
    args.out.write_text(json.dumps({
        "command": " ".join(sys.argv), "order": [c for c, _ in runs],
        "devices": {c: res["device"] for c, res in runs},
        "wide_vectors_in_force": [res["wide_vectors_in_force"] for _, res in runs],
        "process_wall_s": [res["wall_s"] for _, res in runs],
        "environment": {k: os.environ.get(k) for k in (
            "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "NUMBA_CPU_FEATURES")},
        "affinity": sorted(os.sched_getaffinity(0)), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        **summary}, indent=1))
    return summary


def driver(args: argparse.Namespace) -> int:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for config in CONFIGS:
        _run_process(config, args, work / f"warmup-{config}.json", warmup=True)
    runs: list[tuple[str, dict]] = []
    pairs: list[tuple[int, int]] = []
    for k in range(args.pairs):
        if k and time.monotonic() - started > args.deadline_s:
            print(f"deadline: stopping after {k} pairs", flush=True)
            break
        order = ("ymm", "zmm") if k % 2 == 0 else ("zmm", "ymm")
        index = {}
        for config in order:
            index[config] = len(runs)
            runs.append((config, _run_process(config, args, work / f"{k}-{config}.json",
                                              warmup=False)))
        pairs.append((index["ymm"], index["zmm"]))
        summary = write(args, runs, pairs)
    print_summary(summary)
    print(f"wrote {args.out} ({time.monotonic() - started:.0f} s)")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", help="layer file (default: ../shared/data/layers.json)")
    ap.add_argument("--choice", type=Path, action="append",
                    help="benchmarks/cpu.py JSON whose fastest algorithm per layer is timed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15,
                    help="runs per block (layers under 0.2 GFLOP: three times as many)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=1e9,
                    help="start no new pair after this many seconds")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "cpu-zmm.json")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cpu_zmm"),
                    help="folder for the processes' own JSON files")
    ap.add_argument("--net", dest="nets", action="append",
                    help=f"nets to time (default: {', '.join(NETS)})")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.choice = args.choice or DEFAULT_CHOICE
    return args


if __name__ == "__main__":
    parsed = parse(None)
    sys.exit(worker(parsed) if parsed.worker else driver(parsed))
