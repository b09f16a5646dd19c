"""Time every numpy algorithm on the layers of a net, side by side with PyTorch CPU.

    python benchmarks/cpu.py --net resnet50 [--net vgg16 ...] [--algorithm winograd ...]
        [--backend numpy --backend onednn]
        [--repeats 15] [--threads 2] [--clock wall] [--wait-idle 0.9] [--no-torch]
        [--pure-numpy] [--bands] [--out results/cpu-resnet50.json]

Each algorithm is timed in its prepared form (``op.run(x)``: weights already transformed, as
torch's are ready too); torch runs ``torch.nn.functional.conv2d`` on channels_last tensors
with ``torch.set_num_threads(--threads)``. convsel computes with the same count
(``convsel.backends.numpy.threads.set_threads``: BLAS through threadpoolctl, the fused
kernels, scipy.fft); without --threads both keep their defaults (every core). With the
``cpu`` extra installed the numpy backend takes its fused (numba) paths, whose compile time
falls in the warm-up runs; ``--pure-numpy`` times the pure numpy reference paths instead.
By default each candidate is timed in its own block (two warm-up runs, then ``--repeats``
runs), after a short pause: numpy's OpenBLAS threads and torch's OpenMP threads both
spin-wait after a call, so interleaving them (``--schedule round-robin``) makes each pay for
the other's spinning (seen here: torch's 1x1 layers at 13 ms instead of under 1 ms). The
median (or ``--stat min``) is reported. Winograd is timed with every tile the heuristics
pair with the kernel ("winograd4x4", ...).

Prints one row per layer (GFLOP/s per algorithm, the fastest, its ratio to torch), where the
fastest algorithm's time goes (``--profile-runs`` extra runs with the backend's phase
profiler: BLAS, copies, padding, transforms, elementwise, epilogue, other), a workspace
table, then issue 13's targets; writes every sample and profile to JSON (with the top-level
fields ``geomean_vs_torch`` for ResNet-50 and ``geomean_vs_torch_mobilenetv2``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from convsel.algorithms import ALGORITHMS, label_of, supports, variants
from convsel.backends import implementation
from convsel.backends.numpy import accel, bands, device_identity, threads
from convsel.backends.numpy.profile import PHASES, profiling
from convsel.problem import ConvProblem
from convsel.rules import Rules, default_rules
from convsel.tuning.layers import Layer, load_layers

ROOT = Path(__file__).resolve().parents[1]
Runner = Callable[[], Any]


def candidates(p: ConvProblem, rules: Rules, only: list[str] | None,
               backends: tuple[str, ...] = ("numpy",),
               ) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """label -> (algorithm, backend, params) for every algorithm (and Winograd tile) that
    runs p on each CPU backend asked for; a backend other than numpy labels its candidates
    ``algorithm@backend`` ("direct@onednn")."""
    out: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for backend in backends:
        for algorithm in ALGORITHMS:
            if only and algorithm not in only and f"{algorithm}@{backend}" not in only:
                continue
            module = implementation(algorithm, backend)
            if module is None or not supports(algorithm, p, rules).ok:
                continue   # an algorithm with no implementation on this backend
            for params in variants(algorithm, p, rules):
                if not module.supports(p, params, None).ok:
                    continue
                label = label_of(algorithm, params)
                out[label if backend == "numpy" else f"{label}@{backend}"] = (
                    algorithm, backend, params)
    return out


def torch_runner(p: ConvProblem, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Runner:
    """torch.nn.functional.conv2d on channels_last tensors; asymmetric padding is an F.pad."""
    import torch
    import torch.nn.functional as F

    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(w).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    bt = torch.from_numpy(b)
    top, bottom, left, right = p.pad
    symmetric = top == bottom and left == right

    def run() -> Any:
        with torch.inference_mode():
            src = xt if symmetric else F.pad(xt, (left, right, top, bottom))
            return F.conv2d(src, wt, bt, stride=p.stride, dilation=p.dilation,
                            padding=(top, left) if symmetric else 0, groups=p.groups)
    return run


def _cpu_idle(interval: float = 0.5) -> float:
    """Fraction of the machine's CPU time that was idle over ``interval`` (Linux)."""
    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)
    idle0, total0 = sample()
    time.sleep(interval)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_until_idle(threshold: float, patience: float) -> float:
    """Wait (at most ``patience`` s) until other processes leave the CPUs ``threshold``
    idle, so a shared machine's load does not land on one layer; returns the idle seen."""
    deadline = time.monotonic() + patience
    idle = _cpu_idle()
    while idle < threshold and time.monotonic() < deadline:
        idle = _cpu_idle()
    return idle


BLOCK_PAUSE_S = 0.2


def _timed(run: Callable[[], Any], clock: Callable[[], float]) -> float:
    start = clock()
    run()
    return clock() - start


def profile_runs(run: Runner, runs: int) -> dict[str, float]:
    """Seconds per run spent in each phase of the numpy kernel (see
    convsel/backends/numpy/profile.py), its wall time ("total") and the rest ("other":
    Python overhead, allocation, what no phase covers), averaged over ``runs`` extra runs."""
    time.sleep(BLOCK_PAUSE_S)
    run()
    with profiling() as totals:
        start = time.perf_counter()
        for _ in range(runs):
            run()
        wall = time.perf_counter() - start
    out = {name: totals.get(name, 0.0) / runs for name in PHASES if name in totals}
    out["total"] = wall / runs
    out["other"] = max(0.0, out["total"] - sum(v for k, v in out.items() if k != "total"))
    return out


def time_layer(layer: Layer, rules: Rules, args: argparse.Namespace) -> dict[str, Any]:
    p = layer.problem if not args.batch else layer.problem.replace(n=args.batch)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    b = rng.standard_normal(p.k).astype(np.float32)
    runners: dict[str, Runner] = {}
    workspace: dict[str, int] = {}
    kernels: dict[str, str] = {}   # the library kernel a candidate runs, where it names one
    for label, (algorithm, backend, params) in candidates(
            p, rules, args.algorithm, tuple(args.backend or ["numpy"])).items():
        op = implementation(algorithm, backend).prepare(p, w, b, params, None)
        runners[label], workspace[label] = (lambda op=op: op.run(x)), op.workspace_bytes
        if getattr(op, "impl", None):
            kernels[label] = op.impl   # oneDNN's: "brgconv:avx512_core", ...
    profiles = {label: profile_runs(run, args.profile_runs)
                for label, run in runners.items()} if args.profile_runs else {}
    if args.torch:
        runners["torch"] = torch_runner(p, x, w, b)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    samples: dict[str, list[float]] = {label: [] for label in runners}
    idle = wait_until_idle(args.wait_idle, args.patience) if args.wait_idle else None
    if args.schedule == "round-robin":
        for run in runners.values():
            run()   # warm-up: page faults, BLAS buffers, torch's first-call dispatch
        for _ in range(args.repeats):
            for label, run in runners.items():
                samples[label].append(_timed(run, clock))
    else:
        for label, run in runners.items():
            time.sleep(BLOCK_PAUSE_S)   # let the other library's spinning threads park
            run()
            run()
            samples[label] = [_timed(run, clock) for _ in range(args.repeats)]
    stat = min if args.stat == "min" else statistics.median
    median = {label: statistics.median(s) for label, s in samples.items()}
    summary = {label: stat(s) for label, s in samples.items()}
    ours = {k: v for k, v in summary.items() if k != "torch"}
    best = min(ours, key=ours.__getitem__) if ours else None
    return {"net": layer.net, "name": layer.name, "problem": p.to_dict(), "flops": p.flops,
            "stat": args.stat, "time_s": summary, "median_s": median,
            "min_s": {label: min(s) for label, s in samples.items()}, "samples_s": samples,
            "workspace_bytes": workspace, "profile_s": profiles,
            "fastest": best, "torch_s": summary.get("torch"), "kernels": kernels,
            "idle_before": idle,
            "ratio_to_torch": (summary[best] / summary["torch"]) if best and "torch" in summary
            else None}


def _cell(result: dict[str, Any], label: str) -> str:
    t = result["time_s"].get(label)
    return f"{result['flops'] / t / 1e9:7.1f}" if t else "      -"


def print_tables(results: list[dict[str, Any]], labels: list[str]) -> None:
    head = f"{'layer':38} " + " ".join(f"{lb[:11]:>11}" for lb in labels)
    stat = results[0]["stat"] if results else "median"
    print(f"GFLOP/s ({stat} of the repeats)\n" + head
          + f" {'fastest':>14} {'best ms':>8} {'torch ms':>8} ratio  idle")
    for r in results:
        best_ms = r["time_s"][r["fastest"]] * 1e3 if r["fastest"] else float("nan")
        torch_ms = f"{r['torch_s'] * 1e3:8.3f}" if r["torch_s"] else "       -"
        ratio = f"{r['ratio_to_torch']:5.2f}" if r["ratio_to_torch"] else "    -"
        idle = f"{r['idle_before']:5.2f}" if r["idle_before"] is not None else "    -"
        print(f"{r['name'][:38]:38} " + " ".join(f"{_cell(r, lb):>11}" for lb in labels)
              + f" {r['fastest']!s:>14} {best_ms:8.3f} {torch_ms} {ratio} {idle}")
    print_profile(results)
    print("\nworkspace (KiB)\n" + f"{'layer':38} "
          + " ".join(f"{lb[:11]:>11}" for lb in labels if lb != "torch"))
    for r in results:
        cells = [r["workspace_bytes"].get(lb) for lb in labels if lb != "torch"]
        print(f"{r['name'][:38]:38} " + " ".join(
            f"{c / 1024:11.0f}" if c is not None else f"{'-':>11}" for c in cells))


def print_profile(results: list[dict[str, Any]]) -> None:
    """Where the fastest algorithm's time goes, per layer: share of its profiled run time
    per phase (BLAS against copies, padding, transforms, elementwise work, epilogue)."""
    if not any(r.get("profile_s") for r in results):
        return
    phases = [*PHASES, "other"]
    print("\nwhere the fastest algorithm's time goes (% of its profiled run; ms = wall per run)")
    print(f"{'layer':38} {'fastest':>14} {'ms':>7} " + " ".join(f"{ph[:6]:>6}" for ph in phases))
    for r in results:
        prof = r.get("profile_s", {}).get(r["fastest"])
        if not prof:
            continue
        total = prof["total"] or 1.0
        cells = " ".join(f"{100 * prof[ph] / total:6.0f}" if ph in prof else f"{'-':>6}"
                         for ph in phases)
        print(f"{r['name'][:38]:38} {r['fastest']!s:>14} {prof['total'] * 1e3:7.3f} {cells}")


def _geomean(results: list[dict[str, Any]], key: str) -> float | None:
    """Geometric mean over layers of (fastest convsel / torch), both summarised by ``key``."""
    logs = []
    for r in results:
        ours = {k: v for k, v in r[key].items() if k != "torch"}
        if ours and "torch" in r[key]:
            logs.append(math.log(min(ours.values()) / r[key]["torch"]))
    return math.exp(sum(logs) / len(logs)) if logs else None


MOBILENET_V2 = ("mobilenet_v2", "mobilenet_v2_depthwise")


def _geo(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _is_winograd_target(p: dict[str, Any]) -> bool:
    return ((p["kh"], p["kw"]) == (3, 3) and list(p["stride"]) == [1, 1]
            and list(p["dilation"]) == [1, 1] and p["groups"] == 1
            and p["c"] >= 64 and p["k"] >= 64)


TARGETS = {"resnet50": 0.9, "mobilenetv2": 1.0}   # issue 23: geometric mean at most
LAYER_LIMITS = {"resnet50": 1.3, "mobilenet_v2_depthwise": 1.2}   # each such layer at most


def targets(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 23's targets, computed from this run: geometric mean of (fastest convsel /
    torch) per net (MobileNetV2 = its plain and depthwise layer lists together), the
    ResNet-50 layers above 1.3x and the MobileNetV2 depthwise layers above 1.2x (and issue
    13's ResNet-50 layers above 1.5x), and the best Winograd tile against im2col on every
    3x3 stride-1 layer with C, K >= 64."""
    ratios = [r["ratio_to_torch"] for r in results if r["ratio_to_torch"]]
    by_net: dict[str, list[float]] = {}
    for r in results:
        if r["ratio_to_torch"]:
            net = "mobilenetv2" if r["net"] in MOBILENET_V2 else r["net"]
            by_net.setdefault(net, []).append(r["ratio_to_torch"])
    wino = []
    for r in results:
        times = r["time_s"]
        tiles = {k: v for k, v in times.items() if k.startswith("winograd")}
        if _is_winograd_target(r["problem"]) and tiles and "im2col_gemm" in times:
            best = min(tiles, key=tiles.__getitem__)
            wino.append({"net": r["net"], "name": r["name"], "winograd": best,
                         "winograd_over_im2col": tiles[best] / times["im2col_gemm"]})
    def above(net: str, limit: float) -> list[dict[str, Any]]:
        return [{"name": r["name"], "ratio": r["ratio_to_torch"]} for r in results
                if r["net"] == net and r["ratio_to_torch"] and r["ratio_to_torch"] > limit]

    return {"fastest_over_torch_geomean": _geo(ratios),
            "geomean_by_net": {net: _geo(v) for net, v in by_net.items()},
            "geomean_vs_torch": _geo(by_net.get("resnet50", [])),
            "geomean_vs_torch_mobilenetv2": _geo(by_net.get("mobilenetv2", [])),
            "target_resnet50_max": TARGETS["resnet50"],
            "target_mobilenetv2_max": TARGETS["mobilenetv2"],
            "resnet50_layers_above_1_3": above("resnet50", LAYER_LIMITS["resnet50"]),
            "mobilenetv2_depthwise_above_1_2": above("mobilenet_v2_depthwise",
                                                     LAYER_LIMITS["mobilenet_v2_depthwise"]),
            "resnet50_layers_above_1_5": above("resnet50", 1.5),
            "geomean_by_stat": {key: _geomean(results, key) for key in ("median_s", "min_s")},
            "winograd_vs_im2col": wino}


def print_targets(t: dict[str, Any]) -> None:
    for net, geo in t["geomean_by_net"].items():
        limit = TARGETS.get(net)
        verdict = "" if limit is None else (f" (target <= {limit}: "
                                             f"{'met' if geo <= limit else 'MISSED'})")
        print(f"\nfastest convsel / torch, geometric mean, {net}: {geo:.2f}{verdict}")
    by = t["geomean_by_stat"]
    if by["median_s"] is not None:
        print(f"all layers: by median {by['median_s']:.2f}, by min {by['min_s']:.2f}")
    if t["geomean_by_net"].get("resnet50") is not None:
        above = t["resnet50_layers_above_1_3"]
        print(f"ResNet-50 layers above 1.3x torch: {len(above)} "
              + ", ".join(f"{a['name']} {a['ratio']:.2f}" for a in above))
    if t["geomean_by_net"].get("mobilenetv2") is not None:
        above = t["mobilenetv2_depthwise_above_1_2"]
        print(f"MobileNetV2 depthwise layers above 1.2x torch: {len(above)} "
              + ", ".join(f"{a['name']} {a['ratio']:.2f}" for a in above))
    for row in t["winograd_vs_im2col"]:
        v = row["winograd_over_im2col"]
        print(f"{row['name']}: {row['winograd']} / im2col_gemm time = {v:.2f} "
              f"({'met' if v < 1 else 'MISSED'})")


def _libraries() -> dict[str, Any]:
    """The thread pools and accelerator in use: threadpoolctl's view of BLAS/OpenMP (with
    OpenBLAS's detected core type), numba's version and the CPU it compiles for."""
    out: dict[str, Any] = {}
    try:
        from threadpoolctl import threadpool_info
        out["threadpools"] = threadpool_info()
    except ImportError:
        out["threadpools"] = None
    if accel.enabled():
        import numba
        from llvmlite import binding

        out["numba"] = numba.__version__
        # the CPU numba compiles for: a kernel's speed depends on the vector width it picks
        out["numba_cpu"] = numba.config.CPU_NAME or binding.get_host_cpu_name()
        out["numba_cpu_features"] = numba.config.CPU_FEATURES or binding.get_host_cpu_features(
            ).flatten()
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", action="append", required=True, help="net name in layers.json")
    ap.add_argument("--layers", help="layer file (default: ../shared/data/layers.json)")
    ap.add_argument("--algorithm", action="append", type=_algorithm,
                    help="an algorithm to time on every backend, or ALGORITHM@BACKEND to time "
                    "it on that one only (direct@onednn); default: every algorithm")
    ap.add_argument("--backend", action="append", choices=("numpy", "onednn"),
                    help="CPU backends whose algorithms are timed (default: numpy; onednn: "
                    "oneDNN's direct kernels, the onednn extra)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int,
                    help="threads for torch and for convsel (BLAS, fused kernels, FFT); "
                    "default: each library's own default")
    ap.add_argument("--pure-numpy", action="store_true",
                    help="time the pure numpy paths even where the cpu extra (numba) is "
                    "installed")
    ap.add_argument("--bands", action="store_true",
                    help="every GEMM kernel (im2col_gemm, gemm_1x1, Winograd) in bands of "
                    "output rows over convsel's threads, BLAS single-threaded (the cpu "
                    "extra's opt-in path, convsel.backends.numpy.bands)")
    ap.add_argument("--no-torch", dest="torch", action="store_false")
    ap.add_argument("--schedule", choices=("block", "round-robin"), default="block",
                    help="time each candidate in its own block (default) or interleave them")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per-algorithm summary of the repeats; min discounts other "
                    "processes' interference on a shared machine (both are saved)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="thread: this thread's CPU time, robust to other load on a shared "
                    "machine but meaningful only single-threaded (--threads 1 with "
                    "OPENBLAS_NUM_THREADS=1)")
    ap.add_argument("--limit", type=int, help="only the first N layers")
    ap.add_argument("--batch", type=int, help="run every layer with this batch size")
    ap.add_argument("--name", action="append", help="only layers whose name contains this")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="FRACTION",
                    help="before each layer, wait until the CPUs are this idle (e.g. 0.9) "
                    "on a machine shared with other work")
    ap.add_argument("--patience", type=float, default=120.0,
                    help="longest wait for --wait-idle, seconds")
    ap.add_argument("--profile-runs", type=int, default=3,
                    help="extra runs per algorithm with the phase profiler on (0: none)")
    ap.add_argument("--out", type=Path, help="JSON output (default: results/cpu-<nets>.json)")
    return ap.parse_args(argv)


def _algorithm(value: str) -> str:
    algorithm, _, backend = value.partition("@")
    if algorithm not in ALGORITHMS or backend not in ("", "numpy", "onednn"):
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected one of {', '.join(ALGORITHMS)}, optionally @numpy or @onednn")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    accel.use_fused(not args.pure_numpy)
    bands.use_bands(args.bands)
    if args.threads:
        threads.set_threads(args.threads)
    if args.torch:
        try:
            import torch
        except ImportError:
            print("torch is not installed: timing convsel only (pip install torch)",
                  file=sys.stderr)
            args.torch = False
        else:
            torch.set_num_threads(args.threads or torch.get_num_threads())
    layers, notes = load_layers(args.layers, args.net)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.name:
        layers = [ly for ly in layers if any(part in ly.name for part in args.name)]
    layers = layers[: args.limit] if args.limit else layers
    rules = default_rules()
    results = []
    for layer in layers:
        results.append(time_layer(layer, rules, args))
        print(f"  timed {layer.label}", file=sys.stderr, flush=True)
    labels = list(dict.fromkeys(lb for r in results for lb in r["time_s"]))
    print_tables(results, labels)
    summary = targets(results)
    print_targets(summary)
    out = args.out or ROOT / "results" / f"cpu-{'-'.join(args.net)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    device = {**device_identity(), "cpu_count": os.cpu_count(), "torch_threads": args.threads,
              "clock": args.clock, "load_average": os.getloadavg(),
              "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
              "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else None, "fused": accel.describe(), "bands": args.bands,
              "libraries": _libraries()}
    if "onednn" in (args.backend or []):
        from convsel.backends.onednn import device_identity as onednn_identity

        device["onednn"] = onednn_identity()["driver"]
    if args.torch:
        device["torch"] = __import__("torch").__version__
    out.write_text(json.dumps({"command": " ".join(sys.argv), "device": device,
                               "geomean_vs_torch": summary["geomean_vs_torch"],
                               "geomean_vs_torch_mobilenetv2":
                               summary["geomean_vs_torch_mobilenetv2"],
                               "targets": summary, "layers": results}, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
