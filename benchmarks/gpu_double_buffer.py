"""A/B of the float implicit-GEMM kernel's double-buffered local memory (DOUBLE_BUFFER: two
local buffers, one barrier per slice) against one buffer (two barriers per slice), in one run
on one GPU: ResNet-50's distinct layers at batch 32, exact fp32, against cuDNN fp32.

    python benchmarks/gpu_double_buffer.py [--batch 32] [--rounds 21] [--budget-s 400]
        [--max-variants 8] [--on everywhere|default] [--out results.json]

Per layer, every exact OpenCL candidate that benchmarks/gpu.py times (the same
``candidates``) is prepared twice, with ``implicit_gemm.DOUBLE_BUFFER`` False (one buffer)
and, as "on", True (two everywhere, ``--on everywhere``) or None (the backend's default,
``--on default``). Both
builds are checked against the float64 reference as gpu.py checks them; the candidates whose
two builds differ (those on the implicit-GEMM kernel: implicit_gemm, gemm_1x1, im2col_gemm,
winograd, indirect_gemm) are then timed interleaved, one profiled run of each arm per round
(the arms' order alternating), ``--rounds`` rounds, medians compared: kernel against kernel
in the same minutes, so that the machine's drift falls on both arms alike. A third arm times
the one-buffer kernel again (A/A), the noise floor of that comparison. The others (direct,
FFT, ...) are the same kernel either way and are timed once. cuDNN fp32 is gpu.py's
``time_cudnn`` (20 back-to-back calls per loop, median of loops).

Reported: per layer the fastest correct convsel candidate with the option off and on, each
over cuDNN, and per implicit-GEMM-kernel candidate the on/off and A/A kernel-time ratios.
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
import numpy as np
from tolerances import tolerance

from convsel.backends import implementation
from convsel.backends.opencl import device_identity, device_info, get_runtime
from convsel.backends.opencl import implicit_gemm as ig
from convsel.errors import ConvselError
from convsel.problem import ConvProblem
from convsel.rules import load_rules
from convsel.tuning.layers import Layer, distinct, load_layers

TORCH: Any = None         # torch, imported in main()


def build(p: ConvProblem, alg: str, params: dict, runtime: Any, x: np.ndarray,
          w: np.ndarray, ref: Any, scale: Any, double: bool | None,
          ) -> tuple[Any, dict[str, Any]]:
    """The prepared candidate with DOUBLE_BUFFER as given, its output checked."""
    saved = ig.DOUBLE_BUFFER
    ig.DOUBLE_BUFFER = double
    try:
        kernel = implementation(alg, "opencl").prepare(p, w, None, dict(params), runtime)
    finally:
        ig.DOUBLE_BUFFER = saved
    y = kernel.run(x)
    yt = TORCH.from_numpy(y).to(gpu.DEV).double()
    finite = bool(TORCH.isfinite(yt).all().item())
    err = (float((yt - ref).abs().max().item()) / float(scale.max().item())
           if finite else math.inf)
    bound = tolerance(alg, p.dtype)
    ids = [s.config_id for s in kernel.steps]
    return kernel, {"error": err, "bound": bound, "correct": finite and err <= bound,
                    "double_buffered": any("DOUBLE_BUFFER" in i for i in ids),
                    "config_ids": ids}


def interleaved(kernels: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Profiled kernel seconds of each arm, one run per arm per round, order alternating."""
    samples: dict[str, list[float]] = {arm: [] for arm in kernels}
    order = list(kernels)
    for kernel in kernels.values():
        gpu.kernel_seconds(kernel, 1)                       # warm
    for r in range(rounds):
        for arm in (order if r % 2 == 0 else order[::-1]):
            samples[arm].append(gpu.kernel_seconds(kernels[arm], 1)[0])
    return samples


def run_layer(layer: Layer, runtime: Any, rules: Any, rng: np.random.Generator,
              args: argparse.Namespace) -> dict[str, Any]:
    torch = TORCH
    p = layer.problem.replace(dtype="F32", fast_math=False)
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(np.float32)
    ref, scale = gpu.reference64(torch, p, x, w)
    results: dict[str, Any] = {}
    for alg, params in gpu.candidates(p, rules, args.max_variants):
        name = gpu.label(alg, params)
        try:
            off, off_check = build(p, alg, params, runtime, x, w, ref, scale, False)
            on, on_check = build(p, alg, params, runtime, x, w, ref, scale,
                                 True if args.on == "everywhere" else None)
        except ConvselError as exc:
            results[name] = {"algorithm": alg, "failed": str(exc)}
            continue
        affected = off_check["config_ids"] != on_check["config_ids"]
        arms = {"off": off, "on": on, "off_again": off} if affected else {"off": off}
        samples = interleaved(arms, args.rounds)
        med = {arm: statistics.median(s) for arm, s in samples.items()}
        entry: dict[str, Any] = {"algorithm": alg, "params": params, "affected": affected,
                                 "check": {"off": off_check, "on": on_check},
                                 "samples_s": samples, "kernel_s": {
                                     "off": med["off"], "on": med.get("on", med["off"])}}
        if affected:
            entry["on_over_off"] = med["on"] / med["off"]
            entry["aa_over_off"] = med["off_again"] / med["off"]
        results[name] = entry
    del ref, scale
    cudnn = gpu.time_cudnn(torch, p, "fp32", 10)
    row: dict[str, Any] = {"layer": layer.name, "batch": p.n, "problem": p.to_dict(),
                           "candidates": results, "cudnn_s": cudnn["loop_s"],
                           "cudnn_single_s": cudnn["single_s"]}
    for arm in ("off", "on"):
        ok = {k: v for k, v in results.items() if "kernel_s" in v
              and v["check"][arm]["correct"]}
        best = min(ok, key=lambda k: ok[k]["kernel_s"][arm]) if ok else None
        row[f"best_{arm}"] = best
        if best is not None:
            row[f"best_{arm}_s"] = ok[best]["kernel_s"][arm]
            row[f"ratio_{arm}"] = ok[best]["kernel_s"][arm] / cudnn["loop_s"]
    row["incorrect"] = sorted(f"{k}:{arm}" for k, v in results.items() if "check" in v
                              for arm in ("off", "on") if not v["check"][arm]["correct"])
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("ratio_off") and r.get("ratio_on")]
    pairs = [v for r in rows for v in r["candidates"].values() if v.get("affected")]
    on_off = [v["on_over_off"] for v in pairs]
    aa = [v["aa_over_off"] for v in pairs]
    best_ig = []           # per layer: the fastest implicit-GEMM-kernel candidate, each arm
    for r in rows:
        aff = [v for v in r["candidates"].values() if v.get("affected")
               and v["check"]["off"]["correct"] and v["check"]["on"]["correct"]]
        if aff:
            best_ig.append(min(v["kernel_s"]["on"] for v in aff)
                           / min(v["kernel_s"]["off"] for v in aff))
    def ms(values: list[float]) -> float | None:
        mean = gpu.geomean(values)
        return None if mean is None else 1e3 * mean

    return {"layers": len(done),
            "geomean_vs_cudnn_off": gpu.geomean([r["ratio_off"] for r in done]),
            "geomean_vs_cudnn_on": gpu.geomean([r["ratio_on"] for r in done]),
            "geomean_convsel_ms_off": ms([r["best_off_s"] for r in done]),
            "geomean_convsel_ms_on": ms([r["best_on_s"] for r in done]),
            "geomean_cudnn_ms": ms([r["cudnn_s"] for r in done]),
            "candidates_compared": len(pairs),
            "geomean_on_over_off": gpu.geomean(on_off),
            "on_faster_by_over_2pct": sum(v < 0.98 for v in on_off),
            "on_slower_by_over_2pct": sum(v > 1.02 for v in on_off),
            "geomean_aa": gpu.geomean(aa),
            "aa_min_max": [min(aa), max(aa)] if aa else None,
            "layer_best_ig_on_over_off_geomean": gpu.geomean(best_ig),
            "incorrect": [i for r in rows for i in r["incorrect"]]}


def print_row(r: dict[str, Any]) -> None:
    def ms(key: str) -> str:
        return f"{r[key] * 1e3:7.4f}" if r.get(key) else "      -"
    ig_pairs = [v["on_over_off"] for v in r["candidates"].values() if v.get("affected")]
    spread = (f"{min(ig_pairs):.3f}..{max(ig_pairs):.3f}" if ig_pairs else "-")
    print(f"{r['layer'][:30]:<30} off {ms('best_off_s')} ({r.get('ratio_off', 0):.3f}) "
          f"on {ms('best_on_s')} ({r.get('ratio_on', 0):.3f}) cuDNN {ms('cudnn_s')} "
          f"| on/off per candidate {spread} | {r['best_off']} -> {r['best_on']}", flush=True)


def run_meta(runtime: Any, torch: Any, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """What a run records of its devices and settings (``extra``: the script's own); printed
    in one line as it starts."""
    meta = {"opencl": {**device_identity(runtime), **device_info(runtime.device)},
            "cuda_device": torch.cuda.get_device_name(0) if gpu.DEV == "cuda" else None,
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "net": args.net, "batch": args.batch, "rounds": args.rounds,
            "max_variants": args.max_variants, "cudnn_loop": gpu.LOOP, **extra,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"OpenCL: {meta['opencl'].get('name')}; cuDNN {meta['cudnn']}", flush=True)
    return meta


def net_layers(net: str, batch: int) -> list[Layer]:
    """The net's distinct layers at ``batch``."""
    layers, _ = load_layers(None, [net])
    return distinct([Layer(x.net, x.name, x.problem.replace(n=batch)) for x in layers])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", default="resnet50")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--budget-s", type=float, default=400.0)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--on", choices=("everywhere", "default"), default="everywhere")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    global TORCH
    TORCH = torch
    gpu.DEV = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    runtime, rules = get_runtime(None), load_rules()
    meta = run_meta(runtime, torch, args, on=args.on)
    layers = net_layers(args.net, args.batch)
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
    write(args.out, meta, rows, left, started)
    print(json.dumps(summarise(rows), indent=1))
    if left:
        print(f"budget ran out: {len(left)} layer(s) not run: {', '.join(left)}")
    return 0


def write(out: Path, meta: dict, rows: list, left: list, started: float) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "summary": summarise(rows), "not_run": left,
           "elapsed_s": time.perf_counter() - started, "layers": rows}
    out.write_text(json.dumps(gpu.jsonable(doc), indent=1))


if __name__ == "__main__":
    sys.exit(main())
