"""Probe: the numpy backend's GEMM layers with BLAS's own threads against bands of output
rows in our threads (convsel/backends/numpy/bands.py), side by side with torch, interleaved.

    python benchmarks/cpu_bands_probe.py --layers layers.json --net resnet50 --threads 2 \
        [--rounds 3] [--repeats 7] [--out probe.json]

For every layer, every candidate (gemm_1x1, im2col_gemm, the Winograd tiles) is prepared
twice or three times: BLAS's threads ("label"), bands with the default chunk ("label+b")
and bands one chunk per thread ("label+bw"). Each round times every variant and torch in
its own block (a pause, two warm-up runs, --repeats runs); the rounds alternate, so a
drift of the host lands on every variant alike. Medians over all rounds. With the `blis`
package importable it also times a few bare GEMMs in BLIS against numpy's OpenBLAS, one
thread each (and prints the sub-configuration BLIS picked).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import candidates, torch_runner  # noqa: E402

from convsel.backends import implementation  # noqa: E402
from convsel.backends.numpy import bands, threads  # noqa: E402
from convsel.rules import default_rules  # noqa: E402
from convsel.tuning.layers import load_layers  # noqa: E402

ALGORITHMS = ["gemm_1x1", "im2col_gemm", "winograd"]
WINOGRAD = {56: "winograd:4x4", 28: "winograd:4x4", 14: "winograd:2x2"}
PAUSE_S = 0.25   # OpenBLAS's workers spin ~0.1 s after a call before they sleep


def variants(layer: Any) -> dict[str, Any]:
    p = layer.problem
    rng = np.random.default_rng(0)
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    out: dict[str, Any] = {}
    for label, (algorithm, _, params) in candidates(p, default_rules(), ALGORITHMS).items():
        if algorithm == "winograd" and label != WINOGRAD.get(p.out_h):
            continue   # the tile that won in the earlier runs only, to save device time
        module = implementation(algorithm, "numpy")
        for suffix, on, chunk in (("", False, None), ("+b", True, None),
                                  ("+bs", True, 512 * 1024)):
            with bands.forced(on):
                op = module.prepare(p, w, b, dict(params), None)
            if on and not op.banded:
                continue
            if chunk is not None and hasattr(op, "chunk"):
                op.chunk = max(1, op.chunk * chunk // bands.CHUNK_BYTES)
            out[label + suffix] = (lambda op=op: op.run(x))
    reference = {k: np.array(f(), copy=True) for k, f in out.items()}
    first = next(iter(reference.values()))
    for k, r in reference.items():   # every variant computes the same layer
        assert np.allclose(r, first, rtol=1e-3, atol=1e-2), (layer.name, k)
    try:
        out["torch"] = torch_runner(p, x, w, b)
    except ImportError:   # a dry run where torch is not installed: ratios to 1 ms
        out["torch"] = lambda: time.sleep(0.001)
    return out


def time_rounds(runners: dict[str, Any], rounds: int, repeats: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for r in range(rounds):
        order = list(runners) if r % 2 == 0 else list(reversed(runners))
        for label in order:
            run = runners[label]
            time.sleep(PAUSE_S)   # the other library's spinning threads park
            run()
            run()
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                samples[label].append(time.perf_counter() - start)
    return samples


def whole_net(kept: list[dict[str, Any]], results: list[dict[str, Any]], rounds: int,
              ) -> dict[str, float]:
    """The layers back to back, as a network runs them (each layer once per pass), with
    each layer's fastest variant of a kind: BLAS threads only ("old"), the fastest of all
    ("new": a mix), banded wherever a banded variant exists ("banded"), and torch: shows
    what one path's threads cost the next layer's, which the per-layer blocks hide."""
    def pick(i: int, r: dict[str, Any], config: str) -> Any:
        med = r["median_s"]
        if config == "torch":
            return kept[i]["torch"]
        if config == "old":
            return kept[i][r["best_old"]]
        if config == "new":
            return kept[i][r["best"]]
        banded = {k: v for k, v in med.items() if "+" in k}
        return kept[i][min(banded, key=banded.__getitem__) if banded else r["best_old"]]

    configs = {c: [pick(i, r, c) for i, r in enumerate(results)]
               for c in ("old", "new", "banded", "torch")}
    samples: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(rounds):
        for config in (configs if r % 2 == 0 else list(reversed(configs))):
            time.sleep(PAUSE_S)
            for _ in range(2):
                for run in configs[config]:
                    run()
            for _ in range(5):
                start = time.perf_counter()
                for run in configs[config]:
                    run()
                samples[config].append(time.perf_counter() - start)
    out = {c: statistics.median(v) for c, v in samples.items()}
    print("whole net, layers back to back (ms): " + ", ".join(
        f"{c} {v * 1e3:.2f}" for c, v in out.items()), flush=True)
    return out


def blis_probe() -> dict[str, Any]:
    try:
        import blis.py as bp
    except ImportError as exc:
        return {"error": str(exc)}
    out: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    with threads.blas_threads(1):
        for m, k, n in [(3136, 64, 64), (784, 512, 256), (12544, 149, 64), (49, 4608, 512),
                        (3136, 256, 64)]:
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            o = np.empty((m, n), np.float32)
            row = {}
            for name, f in (("openblas", lambda: np.matmul(a, b, out=o)),
                            ("blis", lambda: bp.gemm(a, b, out=o, beta=0.0))):
                f()
                row[name] = statistics.median(_times(f, 15))
            out[f"{m}x{k}x{n}"] = row
            print(f"1 thread {m}x{k}x{n}: openblas {row['openblas'] * 1e3:.3f} ms, "
                  f"blis {row['blis'] * 1e3:.3f} ms", flush=True)
    return out


def concurrency_probe() -> dict[str, Any]:
    """Why a GEMM split over our threads may lose to OpenBLAS's own: one GEMM with BLAS's
    two threads, against its two halves (by rows) in two of our threads with BLAS at one,
    against one half alone; and which cores the pinned ones share a physical core with."""
    from convsel.backends.numpy.fused import in_threads

    out: dict[str, Any] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        out[f"cpu{cpu}_siblings"] = path.read_text().strip() if path.exists() else None
    rng = np.random.default_rng(0)
    for m, k, n in [(3136, 64, 64), (3136, 256, 128), (784, 512, 256)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        o = np.empty((m, n), np.float32)

        def half(first: int, last: int) -> None:
            lo, hi = m * first // 2, m * last // 2
            np.matmul(a[lo:hi], b, out=o[lo:hi])

        row = {}
        time.sleep(0.3)
        row["blas_2_threads"] = statistics.median(_times(lambda: np.matmul(a, b, out=o), 31))
        time.sleep(0.3)
        with threads.blas_threads(1):
            row["halves_in_2_threads"] = statistics.median(
                _times(lambda: in_threads(half, 2, 2), 31))
            row["one_half_alone"] = statistics.median(_times(lambda: half(0, 1), 31))
            row["whole_1_thread"] = statistics.median(
                _times(lambda: np.matmul(a, b, out=o), 31))
        out[f"{m}x{k}x{n}"] = row
        print(f"{m}x{k}x{n} ms: " + ", ".join(f"{key} {v * 1e3:.3f}"
                                               for key, v in row.items()), flush=True)
    print({k: v for k, v in out.items() if k.endswith("siblings")}, flush=True)
    return out


def _times(f: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers")
    ap.add_argument("--net", action="append", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--name", action="append")
    ap.add_argument("--blis", action="store_true", help="also time BLIS (the blis package)")
    ap.add_argument("--out", type=Path, default=Path("probe.json"))
    args = ap.parse_args()
    threads.set_threads(args.threads)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        print("no torch: a dry run", file=sys.stderr)
    layers, _ = load_layers(args.layers, args.net)
    if args.name:
        layers = [ly for ly in layers if any(part in ly.name for part in args.name)]
    results = []
    kept = []
    for layer in layers:
        runners = variants(layer)
        kept.append(runners)
        samples = time_rounds(runners, args.rounds, args.repeats)
        med = {k: statistics.median(v) for k, v in samples.items()}
        t = med["torch"]
        ours = {k: v for k, v in med.items() if k != "torch"}
        old = {k: v for k, v in ours.items() if "+" not in k}
        best_old, best = min(old, key=old.__getitem__), min(ours, key=ours.__getitem__)
        results.append({"name": layer.name, "problem": layer.problem.to_dict(),
                        "median_s": med, "samples_s": samples, "best_old": best_old,
                        "best": best, "ratio_old": old[best_old] / t,
                        "ratio_new": ours[best] / t})
        print(f"{layer.name[:34]:34} torch {t * 1e3:6.3f} | " + " ".join(
            f"{k} {v * 1e3:.3f}" for k, v in ours.items())
            + f" | old {best_old} {old[best_old] / t:.2f} new {best} {ours[best] / t:.2f}",
            flush=True)
    geo_old = math.exp(statistics.fmean(math.log(r["ratio_old"]) for r in results))
    geo_new = math.exp(statistics.fmean(math.log(r["ratio_new"]) for r in results))
    print(f"geomean fastest/torch: BLAS threads only {geo_old:.3f}, with bands {geo_new:.3f}")
    net = whole_net(kept, results, args.rounds)
    blis = blis_probe() if args.blis else None
    concurrency = concurrency_probe()
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "geomean_old": geo_old,
                                    "geomean_new": geo_new, "blis": blis, "whole_net_s": net,
                                    "concurrency": concurrency,
                                    "threadpools": __import__("threadpoolctl").threadpool_info(),
                                    "layers": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
