"""The bias filled in first and added by the GEMM (beta = 1) against matmul-then-bias.

    python benchmarks/cpu_bias_ab.py --layers layers.json --rounds 3 --out bias-ab.json

The layers whose GEMM cannot carry the bias as a column of ones (ResNet-50's 1x1 layers
with C + 1 >= K, and the indirect GEMM's 3x3 layers) through convsel's own prepared
kernels, the two paths switched at run time (``blas.cblas_first``) in interleaved blocks
with torch's convolution in the same process (pause, 2 warm-ups, repeats, median; the
order of the three turns every round), so that the host's drift falls on all three.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = {"layer1.0.conv1": "gemm_1x1", "layer1.{1,2}.conv1": "gemm_1x1",
          "layer2.0.conv1": "gemm_1x1", "layer2.{1,2,3}.conv1": "gemm_1x1",
          "layer3.0.conv1": "gemm_1x1", "layer3.{1..5}.conv1": "gemm_1x1",
          "layer4.0.conv1": "gemm_1x1", "layer4.{1,2}.conv1": "gemm_1x1",
          "layer4.0.conv2 (stride 2)": "indirect_gemm", "layer4.{1,2}.conv2": "indirect_gemm"}
PAUSE_S = 0.1


def block(run: Any, repeats: int) -> float:
    time.sleep(PAUSE_S)
    run()
    run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from cpu import torch_runner
    try:
        import torch
    except ImportError:   # a smoke test where torch is not installed: no torch blocks
        torch = None

    from convsel.backends import implementation
    from convsel.backends.numpy import accel, blas, cblas, device_identity, threads
    from convsel.tuning.layers import load_layers

    threads.set_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    layers = {la.name: la for la in load_layers(args.layers, ["resnet50"])[0]}
    runs = {}
    for name, algorithm in LAYERS.items():
        p = layers[name].problem
        rng = np.random.default_rng(0)
        x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
        w = rng.standard_normal(p.weights_shape).astype(np.float32)
        b = rng.standard_normal(p.k).astype(np.float32)
        op = implementation(algorithm, "numpy").prepare(p, w, b, {}, None)
        theirs = torch_runner(p, x, w, b) if torch is not None else (lambda: None)
        runs[name] = (p, op, x, theirs)

    def switched(op: Any, x: np.ndarray, first: bool) -> Any:
        def run() -> Any:
            blas.cblas_first = first
            return op.run(x)
        return run

    times: dict[str, dict[str, list[float]]] = {n: {"old": [], "new": [], "torch": []}
                                                for n in LAYERS}
    orders = [("old", "new", "torch"), ("new", "torch", "old"), ("torch", "old", "new")]
    for k in range(args.rounds):
        for name, (p, op, x, theirs) in runs.items():
            repeats = args.repeats if p.flops > 2e8 else 3 * args.repeats
            variants = {"old": switched(op, x, False), "new": switched(op, x, True),
                        "torch": theirs}
            for label in orders[k % 3]:
                times[name][label].append(block(variants[label], repeats))
    blas.cblas_first = True
    summary = {}
    for name, t in times.items():
        med = {label: statistics.median(v) for label, v in t.items()}
        summary[name] = {"algorithm": LAYERS[name], "rounds_ms": t, "median_ms": med,
                         "new_over_old": med["new"] / med["old"],
                         "round_ratios": [n / o for n, o in zip(t["new"], t["old"])],
                         "vs_torch": {s: med[s] / med["torch"] for s in ("old", "new")}}
        print(f"{name:28} {LAYERS[name]:13} old {med['old']:7.3f} new {med['new']:7.3f} "
              f"torch {med['torch']:7.3f} new/old {med['new'] / med['old']:5.2f} (rounds "
              + " ".join(f"{r:.2f}" for r in summary[name]["round_ratios"]) + ")")
    ratios = [s["new_over_old"] for s in summary.values()]
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geomean new/old {geo:.3f}; cblas found: {cblas.available()}")
    args.out.write_text(json.dumps({
        "command": " ".join(sys.argv), "device": {**device_identity(), "fused": accel.describe()},
        "cblas": cblas.available(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "geomean_new_over_old": geo, "layers": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
