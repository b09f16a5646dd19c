"""convsel's OpenCL kernels against cuDNN on one GPU, in one run: every OpenCL algorithm and
its variants on the distinct layers of a few nets at batch 1 and 32, each output checked
against a float64 reference on the same inputs, cuDNN timed on the same shapes.

    python benchmarks/gpu.py [--net resnet50 --net vgg16 ...] [--batch 1 --batch 32]
        [--repeats 7] [--budget-s 480] [--max-variants 8] [--out results.json]

Timing. convsel: kernel time from OpenCL profiling events (the sum over a prepared
convolution's launches), input uploaded once, median of ``--repeats`` runs after a warm-up
run (which also builds and code-generates). cuDNN: ``torch.nn.functional.conv2d`` on
channels_last tensors, ``cudnn.benchmark = True``, CUDA events around each call, median of
``--repeats`` after warm-up; float32 with TF32 off (the comparison), TF32 and half for the
record. At batch 1 CUDA events include launch latency that profiling events do not.

Checking. The float64 reference is cuDNN's float64 convolution on the GPU (checked once
against convsel.reference.conv2d_reference at start); the error is
max|y - ref| / max(sum|x|*|w|), the correctness suite's measure, against its bounds
(tests/tolerances.py). A candidate that fails is reported and not counted as fastest.

Budget: when ``--budget-s`` runs out, the layers left are skipped and listed; the JSON is
rewritten after every layer, so a run cut short still leaves its figures.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from tolerances import tolerance  # noqa: E402

from convsel import algorithms  # noqa: E402
from convsel.backends import implementation  # noqa: E402
from convsel.backends.opencl import device_identity, device_info, get_runtime  # noqa: E402
from convsel.errors import ConvselError  # noqa: E402
from convsel.problem import ConvProblem  # noqa: E402
from convsel.reference import conv2d_reference  # noqa: E402
from convsel.rules import load_rules  # noqa: E402
from convsel.tuning.layers import Layer, distinct, load_layers  # noqa: E402

CEILING_TFLOPS = 51.0     # cuBLAS SGEMM on 8192^3 on the H100 (issue 12)
DEV = "cuda"              # "cpu" when torch has no GPU: a smoke test of this script only
OPENCL_ALGORITHMS = tuple(a for a in algorithms.TIMING_ORDER
                          if "opencl" in algorithms.spec(a).backends)


# -- cuDNN through torch ----------------------------------------------------------------------
def torch_conv_args(p: ConvProblem) -> dict[str, Any]:
    return {"stride": p.stride, "dilation": p.dilation, "groups": p.groups}


def torch_pad(p: ConvProblem) -> tuple[int, int, int, int]:
    top, bottom, left, right = p.pad
    return (left, right, top, bottom)          # F.pad order: last axis first


def reference64(torch: Any, p: ConvProblem, x: np.ndarray, w: np.ndarray,
                ) -> tuple[Any, float]:
    """(float64 output NHWC on the GPU, the error scale max sum|x|*|w|)."""
    f = torch.nn.functional
    xt = torch.from_numpy(x).to(DEV).double().permute(0, 3, 1, 2)
    wt = torch.from_numpy(w).to(DEV).double().permute(0, 3, 1, 2)      # OHWI -> OIHW
    xt = f.pad(xt, torch_pad(p))
    y = f.conv2d(xt, wt, **torch_conv_args(p))
    scale = f.conv2d(xt.abs(), wt.abs(), **torch_conv_args(p)).max().item()
    return y.permute(0, 2, 3, 1).contiguous(), float(scale) or 1.0


def time_cudnn(torch: Any, p: ConvProblem, mode: str, repeats: int) -> float:
    """Median seconds of one F.conv2d call, channels_last, in ``mode`` fp32|tf32|fp16."""
    f = torch.nn.functional
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    dtype = torch.float16 if mode == "fp16" and DEV == "cuda" else torch.float32
    top, bottom, left, right = p.pad
    xt = torch.randn(p.n, p.c, p.h + top + bottom, p.w + left + right, device=DEV,
                     dtype=dtype).to(memory_format=torch.channels_last)
    wt = torch.randn(p.k, p.c // p.groups, p.kh, p.kw, device=DEV,
                     dtype=dtype).to(memory_format=torch.channels_last)
    args = torch_conv_args(p)
    with torch.no_grad():
        for _ in range(3):
            f.conv2d(xt, wt, **args)
        samples = []
        for _ in range(repeats):
            if DEV != "cuda":
                t0 = time.perf_counter()
                f.conv2d(xt, wt, **args)
                samples.append(time.perf_counter() - t0)
                continue
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            f.conv2d(xt, wt, **args)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e-3)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return statistics.median(samples)


# -- convsel's OpenCL kernels -----------------------------------------------------------------
def candidates(p: ConvProblem, rules: Any, max_variants: int) -> list[tuple[str, dict]]:
    out = []
    for alg in OPENCL_ALGORITHMS:
        if not algorithms.supports(alg, p, rules).ok:
            continue
        for params in algorithms.variants(alg, p, rules)[:max_variants]:
            verdict = algorithms.supports(alg, p, rules, params)
            if verdict.ok:
                out.append((alg, {**params, **verdict.params}))
    return out


def kernel_seconds(kernel: Any, repeats: int) -> list[float]:
    """Profiling-event time of the prepared launches, input already on the device."""
    rt = kernel.runtime
    samples = []
    for _ in range(repeats):
        events = [rt.enqueue(s.kernel, s.gws, s.config_id) for s in kernel.steps]
        events[-1].wait()
        samples.append(sum(e.profile.end - e.profile.start for e in events) * 1e-9)
    return samples


def run_candidate(torch: Any, p: ConvProblem, alg: str, params: dict, runtime: Any,
                  x: np.ndarray, w: np.ndarray, ref: Any, scale: float,
                  repeats: int) -> dict[str, Any]:
    module = implementation(alg, "opencl")
    verdict = module.supports(p, params, runtime)
    if not verdict.ok:
        return {"skipped": verdict.reason}
    started = time.perf_counter()
    kernel = module.prepare(p, w, None, dict(params), runtime)
    y = kernel.run(x)                                   # warm-up, and the checked output
    prepare_s = time.perf_counter() - started
    yt = torch.from_numpy(y).to(DEV).double()
    finite = bool(torch.isfinite(yt).all().item())
    err = float((yt - ref).abs().max().item()) / scale if finite else math.inf
    bound = tolerance(alg, p.dtype)
    first = kernel_seconds(kernel, 1)[0]
    # slow candidates get fewer runs: they cannot be the fastest, and time is short
    samples = [first] + kernel_seconds(kernel, repeats - 1 if first < 0.02 else 2)
    kernel_s = statistics.median(samples)
    return {"kernel_s": kernel_s, "samples_s": samples, "prepare_s": prepare_s,
            "gflops": p.flops / kernel_s / 1e9, "error": err, "bound": bound,
            "correct": finite and err <= bound, "workspace_bytes": kernel.workspace_bytes,
            "steps": [s.name for s in kernel.steps]}


def label(alg: str, params: dict) -> str:
    return algorithms.label_of(alg, params)


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def check_reference(torch: Any) -> float:
    """torch's float64 conv against convsel's reference on one small layer (max abs diff)."""
    p = ConvProblem(2, 13, 11, 16, 24, 3, 3, stride=(2, 1), pad=(1, 0, 1, 1))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    ours = conv2d_reference(p, x, w, None)
    theirs = reference64(torch, p, x, w)[0].cpu().numpy()
    return float(np.abs(ours - theirs).max())


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for net in sorted({r["net"] for r in rows}):
        for batch in sorted({r["batch"] for r in rows}):
            mine = [r for r in rows if r["net"] == net and r["batch"] == batch
                    and r.get("ratio_fp32")]
            if not mine:
                continue
            ratios = [r["ratio_fp32"] for r in mine]
            wino = [r["winograd_ratio_fp32"] for r in mine if r.get("winograd_ratio_fp32")]
            out[f"{net}_b{batch}"] = {
                "layers": len(mine), "geomean_vs_cudnn_fp32": geomean(ratios),
                "max_ratio": max(ratios), "min_ratio": min(ratios),
                "layers_above_1_5": sum(v > 1.5 for v in ratios),
                "winograd_3x3s1_layers": len(wino),
                "winograd_3x3s1_beating_cudnn": sum(v < 1.0 for v in wino)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", action="append")
    parser.add_argument("--batch", action="append", type=int)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget-s", type=float, default=480.0)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--algorithm", action="append", choices=OPENCL_ALGORITHMS)
    parser.add_argument("--limit", type=int, default=None, help="first N layers per net")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    global DEV
    DEV = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    nets = args.net or ["resnet50", "vgg16", "squeezenet1_1"]
    batches = args.batch or [32, 1]
    runtime, rules = get_runtime(None), load_rules()
    ident = device_identity(runtime)
    meta = {"opencl": {**ident, **device_info(runtime.device)},
            "cuda_device": torch.cuda.get_device_name(0) if DEV == "cuda" else None,
            "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "ceiling_tflops": CEILING_TFLOPS, "nets": nets, "batches": batches,
            "repeats": args.repeats, "max_variants": args.max_variants,
            "reference": "torch float64 conv2d on the GPU",
            "reference_vs_convsel_reference_max_abs": check_reference(torch),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"OpenCL: {ident['name']} driver {ident['driver']}; cuDNN {meta['cudnn']}; "
          f"torch {torch.__version__}", flush=True)
    out = args.out or ROOT / "benchmarks" / "results" / "gpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    left: list[str] = []
    rng = np.random.default_rng(0)
    print(f"{'net/layer':<34} {'b':>2} {'best convsel':<40} {'ms':>8} {'GFLOP/s':>8} "
          f"{'%51T':>5} {'cuDNN ms':>8} {'ratio':>6} {'tf32':>6} {'fp16':>6}", flush=True)
    for net in nets:
        for batch in batches:
            layers, _ = load_layers(None, [net])
            layers = distinct([Layer(x.net, x.name, x.problem.replace(n=batch))
                               for x in layers])[: args.limit]
            for layer in layers:
                if time.perf_counter() - started > args.budget_s:
                    left.append(f"{layer.label} b{batch}")
                    continue
                rows.append(run_layer(torch, layer, batch, runtime, rules, rng, args))
                write(out, meta, rows, left, started)
    write(out, meta, rows, left, started)
    print(json.dumps(summarise(rows), indent=1))
    if left:
        print(f"budget ran out: {len(left)} layer(s) not run: {', '.join(left)}")
    print(f"wrote {out}")
    return 0


def run_layer(torch: Any, layer: Layer, batch: int, runtime: Any, rules: Any,
              rng: np.random.Generator, args: argparse.Namespace) -> dict[str, Any]:
    p = layer.problem
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
    w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(np.float32)
    ref, scale = reference64(torch, p, x, w)
    results: dict[str, Any] = {}
    for alg, params in candidates(p, rules, args.max_variants):
        if args.algorithm and alg not in args.algorithm:
            continue
        try:
            r = run_candidate(torch, p, alg, params, runtime, x, w, ref, scale, args.repeats)
        except ConvselError as exc:
            r = {"failed": str(exc)}
        results[label(alg, params)] = {"algorithm": alg, "params": params, **r}
    del ref
    cudnn = {mode: time_cudnn(torch, p, mode, max(args.repeats, 10))
             for mode in ("fp32", "tf32", "fp16")}
    ok = {k: v for k, v in results.items() if v.get("correct")}
    best = min(ok, key=lambda k: ok[k]["kernel_s"]) if ok else None
    row: dict[str, Any] = {"net": layer.net, "layer": layer.name, "batch": batch,
                           "problem": p.to_dict(), "gflop": p.flops / 1e9,
                           "candidates": results, "cudnn_s": cudnn, "best": best}
    if best:
        b = ok[best]
        row.update(best_s=b["kernel_s"], best_gflops=b["gflops"],
                   best_fraction_of_ceiling=b["gflops"] / (CEILING_TFLOPS * 1e3),
                   ratio_fp32=b["kernel_s"] / cudnn["fp32"],
                   cudnn_fp32_gflops=p.flops / cudnn["fp32"] / 1e9)
        wino = [v["kernel_s"] for v in ok.values() if v["algorithm"] == "winograd"]
        if wino and (p.kh, p.kw) == (3, 3):
            row["winograd_ratio_fp32"] = min(wino) / cudnn["fp32"]
    bad = [k for k, v in results.items() if "kernel_s" in v and not v["correct"]]
    if bad:
        row["incorrect"] = bad
    print(f"{layer.label[:34]:<34} {batch:>2} {str(best)[:40]:<40} "
          f"{row.get('best_s', math.nan) * 1e3:8.3f} {row.get('best_gflops', math.nan):8.0f} "
          f"{100 * row.get('best_fraction_of_ceiling', math.nan):5.1f} "
          f"{cudnn['fp32'] * 1e3:8.3f} {row.get('ratio_fp32', math.nan):6.2f} "
          f"{cudnn['tf32'] * 1e3:6.3f} {cudnn['fp16'] * 1e3:6.3f}"
          + (f"  INCORRECT: {bad}" if bad else ""), flush=True)
    return row


def write(out: Path, meta: dict, rows: list, left: list, started: float) -> None:
    summary = summarise(rows)
    head = {
        "geomean_vs_cudnn_fp32_b32":
            (summary.get("resnet50_b32") or {}).get("geomean_vs_cudnn_fp32"),
        "geomean_vs_cudnn_fp32_b1":
            (summary.get("resnet50_b1") or {}).get("geomean_vs_cudnn_fp32")}
    data = {**head, "meta": meta, "summary": summary, "not_run": left,
            "elapsed_s": time.perf_counter() - started, "layers": rows}
    out.write_text(json.dumps(jsonable(data), indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
