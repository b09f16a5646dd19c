"""convsel's OpenCL kernels against cuDNN on one GPU, in one run, in three precisions: every
OpenCL algorithm and its variants on the distinct layers of a few nets at batch 1 and 32,
each output checked against a float64 reference on the same inputs, cuDNN timed on the same
shapes in the same precision.

    python benchmarks/gpu.py [--net resnet50 --net vgg16 ...] [--batch 1 --batch 32]
        [--repeats 7] [--budget-s 480] [--max-variants 8] [--out results.json]

Precisions. fp32: the F32 problem, exact float arithmetic, against cuDNN with TF32 off.
tf32: the same problem with fast_math on, so the TF32 tensor-core variants may run too
(fastest of exact and TF32), against cuDNN with ``allow_tf32`` (PyTorch's default for
convolutions). fp16: the F16 problem (implicit_gemm, gemm_1x1 and winograd in F16 storage,
and the F16 tensor-core variants), against cuDNN half on channels_last.

Timing. convsel: kernel time from OpenCL profiling events (the sum over a prepared
convolution's launches), input uploaded once, median of ``--repeats`` runs after a warm-up
run (which also builds and code-generates). cuDNN: ``torch.nn.functional.conv2d`` on
channels_last tensors, ``cudnn.benchmark = True``, CUDA events around a loop of ``LOOP``
back-to-back calls (as a network runs them; the median of ``--repeats`` loops, divided by
``LOOP``); the single-call figure (events around one call, which adds launch latency that
profiling events do not count) is kept beside it as ``cudnn_single_s``.

Ceilings. The float32 one is cuBLAS SGEMM's (51 TFLOP/s, issue 12); the tensor-core ones
are measured at start by a register-only loop of independent mma.sync per warp over the
whole GPU (``tc_ceiling``), and each layer's tensor-core best is reported as a fraction.

Checking. The float64 reference is cuDNN's float64 convolution on the GPU (checked once
against convsel.reference.conv2d_reference at start) of the inputs as the problem holds them
(F16 ones for fp16). Exact candidates: max|y - ref| / max(sum|x|*|w|) against the
correctness suite's bounds (tests/tolerances.py); tensor-core candidates: per output,
|y - ref| / (sum|x|*|w|) against ``mma.error_bound``. A candidate that fails is reported and
not counted as fastest.

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
from convsel.backends.opencl import (  # noqa: E402
    device_identity,
    device_info,
    get_runtime,
    mma,  # noqa: E402
)
from convsel.backends.opencl import program as cl_program  # noqa: E402
from convsel.errors import ConvselError  # noqa: E402
from convsel.problem import ConvProblem  # noqa: E402
from convsel.reference import conv2d_reference  # noqa: E402
from convsel.rules import load_rules  # noqa: E402
from convsel.tuning.layers import Layer, distinct, load_layers  # noqa: E402

CEILING_TFLOPS = 51.0     # cuBLAS SGEMM on 8192^3 on the H100 (issue 12)
LOOP = 20                 # cuDNN calls back to back per timed loop
F16_ALGORITHMS = ("implicit_gemm", "gemm_1x1", "winograd")   # the F32 winners, in F16
TF32_ALGORITHMS = ("implicit_gemm", "winograd")      # those with tensor-core variants
PRECISIONS = ("fp32", "tf32", "fp16")
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
                ) -> tuple[Any, Any]:
    """(float64 output NHWC on the GPU, the error scale sum|x|*|w| of each output)."""
    f = torch.nn.functional
    xt = torch.from_numpy(x).to(DEV).double().permute(0, 3, 1, 2)
    wt = torch.from_numpy(w).to(DEV).double().permute(0, 3, 1, 2)      # OHWI -> OIHW
    xt = f.pad(xt, torch_pad(p))
    y = f.conv2d(xt, wt, **torch_conv_args(p))
    scale = f.conv2d(xt.abs(), wt.abs(), **torch_conv_args(p)).permute(0, 2, 3, 1)
    return y.permute(0, 2, 3, 1).contiguous(), scale.clamp_min(1e-30).contiguous()


def winograd_scale64(torch: Any, p: ConvProblem, x: np.ndarray, w: np.ndarray,
                     tile: tuple[int, int]) -> Any:
    """mma.winograd_scale of each output (on the GPU), its convolutions of |x| by torch in
    float64."""
    f = torch.nn.functional
    x_abs = torch.from_numpy(x).to(DEV).double().abs().permute(0, 3, 1, 2)

    def conv(q: ConvProblem, _x: Any, filt: np.ndarray) -> np.ndarray:
        wt = torch.from_numpy(np.ascontiguousarray(filt)).to(DEV).permute(0, 3, 1, 2)
        y = f.conv2d(f.pad(x_abs, torch_pad(q)), wt, **torch_conv_args(q))
        return y.permute(0, 2, 3, 1).cpu().numpy()

    w_abs = np.abs(w.astype(np.float64))
    scale = mma.winograd_scale(p, x_abs, w_abs, np.zeros(p.k), tile, conv)
    return torch.from_numpy(scale).to(DEV).clamp_min(1e-30)


def time_cudnn(torch: Any, p: ConvProblem, mode: str, repeats: int) -> dict[str, float]:
    """Seconds per F.conv2d call, channels_last, in ``mode`` fp32|tf32|fp16: ``loop_s``
    (events around LOOP back-to-back calls, median over ``repeats`` loops, per call) and
    ``single_s`` (events around one call, median of ``repeats``)."""
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

    def timed(calls: int) -> float:
        if DEV != "cuda":
            t0 = time.perf_counter()
            for _ in range(calls):
                f.conv2d(xt, wt, **args)
            return (time.perf_counter() - t0) / calls
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            f.conv2d(xt, wt, **args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / calls

    with torch.no_grad():
        for _ in range(3):
            f.conv2d(xt, wt, **args)
        single = statistics.median(timed(1) for _ in range(repeats))
        loop = statistics.median(timed(LOOP) for _ in range(repeats))
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"loop_s": loop, "single_s": single}


# -- the tensor-core ceiling -------------------------------------------------------------------
CEILING_SOURCE = """
// Register-only mma.sync: every warp runs ITERS rounds of CHAINS independent mma.sync on
// fragments made from its lane id; the sums are stored so nothing is optimised away.
__kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void mma_ceiling(__global float* out, int iters) {
    const int lane = get_local_id(0) & 31;
    const uint a0 = 0x3f800000u ^ (uint)lane, a1 = a0 + 1u, a2 = a0 + 2u, a3 = a0 + 3u;
    const uint b0 = 0x3c003c00u ^ (uint)lane, b1 = b0 + 1u;
    float acc[8][4];
    for (int c = 0; c < 8; ++c)
        for (int r = 0; r < 4; ++r) acc[c][r] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < 8; ++c) MMA(acc[c], a0, a1, a2, a3, b0, b1);
    }
    float sum = 0.0f;
    for (int c = 0; c < 8; ++c)
        for (int r = 0; r < 4; ++r) sum += acc[c][r];
    out[get_global_id(0)] = sum;
}
"""


def tc_ceiling(runtime: Any, math_mode: str, iters: int = 4096) -> float | None:
    """TFLOP/s of the register-only mma.sync loop (best of 3 launches), or None when the
    device has no tensor cores."""
    import pyopencl as cl

    if not mma.tensor_cores(runtime).ok:
        return None
    source = cl_program.kernel_source("mma") + CEILING_SOURCE
    program = runtime.program(source, (f"-DMATH_{math_mode.upper()}",))
    groups = 8 * int(runtime.device.max_compute_units)
    out = cl.Buffer(runtime.context, cl.mem_flags.WRITE_ONLY, size=groups * 128 * 4)
    kernel = cl.Kernel(program, "mma_ceiling")
    kernel.set_args(out, np.int32(iters))
    k = 8 if math_mode == "tf32" else 16
    flops = groups * 4 * iters * 8 * (2 * 16 * 8 * k)
    best = math.inf
    for _ in range(4):
        event = cl.enqueue_nd_range_kernel(runtime.queue, kernel, (groups * 128,), (128,))
        event.wait()
        best = min(best, (event.profile.end - event.profile.start) * 1e-9)
    return flops / best / 1e12


def ldmatrix_builds(runtime: Any) -> str:
    """Whether the tensor-core kernel builds with its ldmatrix fragment loads here; if not,
    the run goes on with 64-bit pair loads (implicit_gemm_mma.LDMATRIX off) and says why."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    if not mma.tensor_cores(runtime).ok:
        return "not tried: no tensor cores"
    p = ConvProblem(2, 8, 8, 32, 32, 3, 3, pad=1, fast_math=True)
    w = np.ones(p.weights_shape, np.float32)
    try:
        for math_mode, q in (("tf32", p), ("f16", p.replace(dtype="F16"))):
            igm.prepare(q, w.astype(np.float16 if math_mode == "f16" else np.float32), None,
                        {"math": math_mode, "mma": (64, 64, 2, 2)}, runtime)
    except ConvselError as exc:
        igm.LDMATRIX = False
        return f"FAILED, running with pair loads instead: {exc}"
    return "builds (tf32, f16)"


# -- convsel's OpenCL kernels -----------------------------------------------------------------
def candidates(p: ConvProblem, rules: Any, max_variants: int,
               names: tuple[str, ...] = OPENCL_ALGORITHMS) -> list[tuple[str, dict]]:
    """Every (algorithm, resolved params) to time: each algorithm's first ``max_variants``
    exact variants, all its named split-K ones and all its tensor-core ones (those the
    problem's dtype and fast_math allow)."""
    out = []
    for alg in names:
        if not algorithms.supports(alg, p, rules).ok:
            continue
        found = algorithms.variants(alg, p, rules)
        # the named split-K variants come after the tiles and are not cut
        exact = ([v for v in found if "math" not in v and "split" not in v][:max_variants]
                 + [v for v in found if "math" not in v and "split" in v])
        for params in exact + [v for v in found if "math" in v]:
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
                  x: np.ndarray, w: np.ndarray, ref: Any, scale: Any,
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
    diff = (yt - ref).abs()
    err = float(diff.max().item()) / float(scale.max().item()) if finite else math.inf
    math_mode = params.get("math")
    if math_mode is None:
        bound = tolerance(alg, p.dtype)
        check = err
    elif alg == "winograd":     # tensor cores: per output, against its transformed magnitudes
        tile = tuple(int(v) for v in params["tile"])
        bound = mma.winograd_error_bound(tile, (p.kh, p.kw), p.c)
        wscale = winograd_scale64(torch, p, x, w, tile)
        check = float((diff / wscale).max().item()) if finite else math.inf
        del wscale
    else:            # tensor cores: per output, against its own sum of |products|
        splits = max(1, int(kernel.workspace_bytes) // (4 * y.size))    # split-K partials
        sums = splits * int(params.get("warps_k") or 1)              # and sliced K's
        bound = mma.error_bound(math_mode, p.dtype, p.kh * p.kw * p.c, sums)
        check = float((diff / scale).max().item()) if finite else math.inf
    first = kernel_seconds(kernel, 1)[0]
    # slow candidates get fewer runs: they cannot be the fastest, and time is short
    samples = [first] + kernel_seconds(kernel, repeats - 1 if first < 0.02 else 2)
    kernel_s = statistics.median(samples)
    return {"kernel_s": kernel_s, "samples_s": samples, "prepare_s": prepare_s,
            "gflops": p.flops / kernel_s / 1e9, "error": err, "checked_error": check,
            "bound": bound, "correct": finite and check <= bound,
            "math": mma.math_description(math_mode, p.dtype),
            "workspace_bytes": kernel.workspace_bytes, "steps": [s.name for s in kernel.steps]}


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
    """Per net and batch, per precision: geomean, max and min of best convsel / cuDNN (loop
    timed), layers above 1.5x, and the fp32 geomean against single-call cuDNN timing."""
    out: dict[str, Any] = {}
    for net in sorted({r["net"] for r in rows}):
        for batch in sorted({r["batch"] for r in rows}):
            mine = [r for r in rows if r["net"] == net and r["batch"] == batch]
            entry: dict[str, Any] = {}
            for prec in PRECISIONS:
                ratios = [r[f"ratio_{prec}"] for r in mine if r.get(f"ratio_{prec}")]
                if not ratios:
                    continue
                single = [r[f"ratio_{prec}_single_call"] for r in mine
                          if r.get(f"ratio_{prec}_single_call")]
                entry[prec] = {"layers": len(ratios), "geomean_vs_cudnn": geomean(ratios),
                               "geomean_vs_cudnn_single_call": geomean(single),
                               "max_ratio": max(ratios), "min_ratio": min(ratios),
                               "layers_above_1_5": sum(v > 1.5 for v in ratios)}
                fractions = [r[f"best_{prec}_fraction_of_tc_ceiling"] for r in mine
                             if r.get(f"best_{prec}_fraction_of_tc_ceiling")]
                if fractions:
                    entry[prec]["geomean_fraction_of_tc_ceiling"] = geomean(fractions)
            if entry:
                out[f"{net}_b{batch}"] = entry
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
    parser.add_argument("--ablation", nargs="?", const="pipeline", choices=sorted(ABLATIONS),
                        help="first time each tensor-core step of this ablation on a few "
                        "layers (default: pipeline); 'epilogue' then adopts the faster")
    parser.add_argument("--diagnose", action="store_true",
                        help="time the cp.async kernel whole, without copies, without mma")
    args = parser.parse_args(argv)
    import torch

    global DEV
    DEV = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    nets = args.net or ["resnet50", "vgg16", "squeezenet1_1"]
    batches = args.batch or [32, 1]
    runtime, rules = get_runtime(None), load_rules()
    ident = device_identity(runtime)
    ceilings = {m: tc_ceiling(runtime, m) for m in mma.MATH_MODES}
    meta = {"opencl": {**ident, **device_info(runtime.device)},
            "tensor_cores": mma.tensor_cores(runtime).reason,
            "tc_ceiling_tflops": ceilings,
            "cuda_device": torch.cuda.get_device_name(0) if DEV == "cuda" else None,
            "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "ceiling_tflops": CEILING_TFLOPS, "nets": nets, "batches": batches,
            "repeats": args.repeats, "max_variants": args.max_variants, "cudnn_loop": LOOP,
            "reference": "torch float64 conv2d on the GPU",
            "reference_vs_convsel_reference_max_abs": check_reference(torch),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"OpenCL: {ident['name']} driver {ident['driver']}; cuDNN {meta['cudnn']}; "
          f"torch {torch.__version__}", flush=True)
    print(f"tensor cores: {meta['tensor_cores']}; register-only mma.sync ceiling (TFLOP/s): "
          f"{ceilings}", flush=True)
    meta["ldmatrix"] = ldmatrix_builds(runtime)
    print(f"ldmatrix: {meta['ldmatrix']}", flush=True)
    if args.ablation and mma.tensor_cores(runtime).ok:
        meta["ablation"] = ablation(torch, runtime, rules, args)
        if args.ablation == "epilogue":
            meta["adopted"] = adopt_stage_out(meta["ablation"])
        if args.ablation == "v6":
            meta["adopted"] = adopt_v6(meta["ablation"])
        if args.ablation == "stages":
            meta["adopted"] = adopt_stages(meta["ablation"])
        if args.ablation == "v8":
            meta["adopted"] = adopt_v8(meta["ablation"])
    if args.diagnose and mma.tensor_cores(runtime).ok:
        meta["diagnosis"] = diagnose(torch, runtime, args)
    out = args.out or ROOT / "benchmarks" / "results" / "gpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    left: list[str] = []
    rng = np.random.default_rng(0)
    print("layer, batch | precision: best convsel ms, cuDNN ms (loop), ratio, best tensor-core "
          "variant's share of the mma.sync ceiling | best tf32 / fp16 candidates", flush=True)
    for net in nets:
        for batch in batches:
            layers, _ = load_layers(None, [net])
            layers = distinct([Layer(x.net, x.name, x.problem.replace(n=batch))
                               for x in layers])[: args.limit]
            for layer in layers:
                if time.perf_counter() - started > args.budget_s:
                    left.append(f"{layer.label} b{batch}")
                    continue
                rows.append(run_layer(torch, layer, batch, runtime, rules, rng, args,
                                      ceilings))
                write(out, meta, rows, left, started)
    write(out, meta, rows, left, started)
    print(json.dumps(summarise(rows), indent=1))
    if left:
        print(f"budget ran out: {len(left)} layer(s) not run: {', '.join(left)}")
    print(f"wrote {out}")
    return 0


def run_precision(torch: Any, p: ConvProblem, names: tuple[str, ...], runtime: Any,
                  rules: Any, rng: np.random.Generator, args: argparse.Namespace,
                  ) -> dict[str, Any]:
    """Every candidate of ``p`` (F32, F32 with fast math, or F16) timed and checked."""
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(dtype)
    ref, scale = reference64(torch, p, x, w)
    results: dict[str, Any] = {}
    for alg, params in candidates(p, rules, args.max_variants, names):
        if args.algorithm and alg not in args.algorithm:
            continue
        if p.fast_math and "math" not in params:
            continue            # an exact candidate: timed already as the fp32 problem
        try:
            r = run_candidate(torch, p, alg, params, runtime, x, w, ref, scale, args.repeats)
        except ConvselError as exc:
            r = {"failed": str(exc)}
        results[label(alg, params)] = {"algorithm": alg, "params": params, **r}
    del ref, scale
    return results


def _best(results: dict[str, Any], tensor_cores: bool | None = None) -> str | None:
    ok = {k: v for k, v in results.items() if v.get("correct")
          and (tensor_cores is None or ("math" in v["params"]) == tensor_cores)}
    return min(ok, key=lambda k: ok[k]["kernel_s"]) if ok else None


def run_layer(torch: Any, layer: Layer, batch: int, runtime: Any, rules: Any,
              rng: np.random.Generator, args: argparse.Namespace,
              ceilings: dict[str, float | None]) -> dict[str, Any]:
    p = layer.problem.replace(dtype="F32", fast_math=False)
    problems = {"fp32": (p, OPENCL_ALGORITHMS),
                "tf32": (p.replace(fast_math=True), TF32_ALGORITHMS),
                "fp16": (p.replace(dtype="F16"), F16_ALGORITHMS)}
    results = {prec: run_precision(torch, q, names, runtime, rules, rng, args)
               for prec, (q, names) in problems.items()}
    # fast math may run every exact candidate too: the best of both is the answer
    results["tf32"] = {**results["fp32"], **{k: v for k, v in results["tf32"].items()
                                              if "math" in v["params"]}}
    cudnn = {mode: time_cudnn(torch, p, mode, max(args.repeats, 10)) for mode in PRECISIONS}
    row: dict[str, Any] = {"net": layer.net, "layer": layer.name, "batch": batch,
                           "problem": p.to_dict(), "gflop": p.flops / 1e9,
                           "candidates": results,
                           "cudnn_s": {m: c["loop_s"] for m, c in cudnn.items()},
                           "cudnn_single_s": {m: c["single_s"] for m, c in cudnn.items()}}
    for prec in PRECISIONS:
        best = _best(results[prec])
        row[f"best_{prec}"] = best
        if best is None:
            continue
        b = results[prec][best]
        row.update({f"best_{prec}_s": b["kernel_s"], f"best_{prec}_gflops": b["gflops"],
                    f"ratio_{prec}": b["kernel_s"] / cudnn[prec]["loop_s"],
                    f"ratio_{prec}_single_call": b["kernel_s"] / cudnn[prec]["single_s"],
                    f"cudnn_{prec}_gflops": p.flops / cudnn[prec]["loop_s"] / 1e9})
        tc = _best(results[prec], tensor_cores=True)
        ceiling = ceilings.get("tf32" if prec == "tf32" else "f16")
        if tc is not None and ceiling and prec != "fp32":
            tc_gflops = results[prec][tc]["gflops"]
            row.update({f"best_tc_{prec}": tc, f"best_tc_{prec}_s": results[prec][tc]["kernel_s"],
                        f"best_{prec}_fraction_of_tc_ceiling": tc_gflops / (ceiling * 1e3)})
    if row.get("best_fp32_gflops"):
        row["best_fp32_fraction_of_ceiling"] = row["best_fp32_gflops"] / (CEILING_TFLOPS * 1e3)
    bad = [f"{prec}:{k}" for prec in PRECISIONS for k, v in results[prec].items()
           if "kernel_s" in v and not v["correct"]]
    if bad:
        row["incorrect"] = sorted(set(bad))
    print_row(layer, batch, row)
    return row


def print_row(layer: Layer, batch: int, row: dict[str, Any]) -> None:
    def ms(key: str) -> str:
        v = row.get(key)
        return f"{v * 1e3:7.3f}" if v else "      -"

    def ratio(key: str) -> str:
        v = row.get(key)
        return f"{v:5.2f}" if v else "    -"

    def pct(key: str) -> str:
        v = row.get(key)
        return f"{100 * v:4.0f}%" if v else "    -"

    print(f"{layer.label[:30]:<30} {batch:>2} | fp32 {ms('best_fp32_s')} "
          f"cuDNN {row['cudnn_s']['fp32'] * 1e3:7.3f} {ratio('ratio_fp32')} | tf32 "
          f"{ms('best_tf32_s')} cuDNN {row['cudnn_s']['tf32'] * 1e3:7.3f} "
          f"{ratio('ratio_tf32')} {pct('best_tf32_fraction_of_tc_ceiling')} | fp16 "
          f"{ms('best_fp16_s')} cuDNN {row['cudnn_s']['fp16'] * 1e3:7.3f} "
          f"{ratio('ratio_fp16')} {pct('best_fp16_fraction_of_tc_ceiling')} | "
          f"{str(row.get('best_tf32'))[:40]} / {str(row.get('best_fp16'))[:40]}"
          + (f"  INCORRECT: {row['incorrect']}" if row.get("incorrect") else ""), flush=True)


# -- what each step of the tensor-core pipeline buys -------------------------------------------
ABLATION_TILE = (128, 64, 2, 2)
V4 = {"ROUND_WEIGHTS": False, "FRAG2": False, "MMA_FREE": False, "CP_ASYNC_L1": False}
V5 = {"ROUND_WEIGHTS": True, "CP_ASYNC_L1": True}
ASYNC16 = {"load": "async", "slice": 16}
ABLATION_STEPS = (   # (name, params, implicit_gemm_mma knobs): v5's steps, from v4's kernel on
    ("reg (v4 kernel)", {"load": "registers"}, V4),
    ("reg +B rounded", {"load": "registers"}, {**V4, "ROUND_WEIGHTS": True}),
    ("reg +B rnd +frag2", {"load": "registers"}, {**V4, **V5, "FRAG2": True}),
    ("reg +B rnd +mma_free", {"load": "registers"}, {**V4, **V5, "MMA_FREE": True}),
    ("async 32w 2st .cg (v4)", {"load": "async", "slice": 32, "stages": 2}, V4),
    ("async 32w 2st .ca", {"load": "async", "slice": 32, "stages": 2}, {**V4, **V5}),
    ("async 16w 4st .ca", {**ASYNC16, "stages": 4}, {**V4, **V5}),
    ("async 16w 4st .ca +frag2 +free", {**ASYNC16, "stages": 4},
     {**V4, **V5, "FRAG2": True, "MMA_FREE": True}),
    ("128x128x2x2 reg (v4)", {"mma": (128, 128, 2, 2), "load": "registers"}, V4),
    ("128x128x2x2 reg +B rnd", {"mma": (128, 128, 2, 2), "load": "registers"}, {**V4, **V5}),
    ("128x128x2x2 async 16w 3st .ca", {"mma": (128, 128, 2, 2), **ASYNC16, "stages": 3},
     {**V4, **V5}),
    ("128x128x4x4 reg", {"mma": (128, 128, 4, 4), "load": "registers"}, {**V4, **V5}),
    ("128x128x4x4 async 16w 3st .ca", {"mma": (128, 128, 4, 4), **ASYNC16, "stages": 3},
     {**V4, **V5}),
)
ABLATION_LAYERS = ("layer1.{0,1,2}.conv2", "layer3.{1..5}.conv2", "layer3.{1..5}.conv1",
                   "layer4.0.downsample")
# v5 run 3: the output tile through local memory (STAGE_OUT) or from the fragments, on the
# layers whose time is mostly output (the 1x1 expansions) and two others; the run then goes on
# with whichever was faster in geometric mean (meta["adopted"])
EPILOGUE_STEPS = (
    ("async staged out", {"load": "async"}, {"STAGE_OUT": True}),
    ("async fragment out", {"load": "async"}, {"STAGE_OUT": False}),
    ("64x64x2x2 async staged out", {"mma": (64, 64, 2, 2), "load": "async"},
     {"STAGE_OUT": True}),
    ("64x64x2x2 async fragment out", {"mma": (64, 64, 2, 2), "load": "async"},
     {"STAGE_OUT": False}),
)
EPILOGUE_LAYERS = ("layer1.{0,1,2}.conv3", "layer2.{0..3}.conv3", "layer3.{1..5}.conv2",
                   "layer4.0.downsample")
# v6: specialised builds (SPECIALISE: NO_BOUNDS for 1x1, C_WHOLE), the next slice's copies
# issued after the first k-steps (ISSUE_AT), and split-K 2 on the few-work-group layers; the run
# then goes on with the SPECIALISE and ISSUE_AT that were fastest in geometric mean on 128x64
# (meta["adopted"])
V5_BUILD = {"SPECIALISE": False, "ISSUE_AT": 0}
SPEC = {"SPECIALISE": True, "ISSUE_AT": 0}
ASYNC = {"load": "async"}
V6_STEPS = (
    ("async (v5)", ASYNC, V5_BUILD),
    ("async +spec", ASYNC, SPEC),
    ("async +spec +issue@1", ASYNC, {**SPEC, "ISSUE_AT": 1}),
    ("async +spec +issue@2", ASYNC, {**SPEC, "ISSUE_AT": 2}),
    ("async +spec split 2", {**ASYNC, "split": 2}, SPEC),
    ("64x64 async (v5)", {**ASYNC, "mma": (64, 64, 2, 2)}, V5_BUILD),
    ("64x64 async +spec +issue@1", {**ASYNC, "mma": (64, 64, 2, 2)}, {**SPEC, "ISSUE_AT": 1}),
    ("64x64 async +spec split 2", {**ASYNC, "mma": (64, 64, 2, 2), "split": 2}, SPEC),
    ("128x128 async (v5)", {**ASYNC, "mma": (128, 128, 2, 2)}, V5_BUILD),
    ("128x128 async +spec +issue@1", {**ASYNC, "mma": (128, 128, 2, 2)},
     {**SPEC, "ISSUE_AT": 1}),
)
V6_LAYERS = ("layer1.{0,1,2}.conv2", "layer3.{1..5}.conv2", "layer3.{1..5}.conv1",
             "layer4.0.downsample", "layer2.{0..3}.conv3", "layer3.0.conv1")
# v6 (2): slices and cp.async stages now that a work-group may declare more than 48 KiB of
# local memory (implicit_gemm_mma.local_memory_limit); the run then goes on with each tile's
# fastest (slice, stages) in geometric mean (meta["adopted"], implicit_gemm_mma.ASYNC_PIPELINES)
STAGE_CHOICES = {(128, 64, 2, 2): ((32, 2), (32, 3), (32, 4), (64, 2)),
                 (128, 128, 2, 2): ((16, 3), (32, 2), (32, 3)),
                 (64, 64, 2, 2): ((32, 3), (32, 4), (64, 2))}
STAGES_STEPS = tuple(
    (f"{'x'.join(map(str, tile))} {sw}w {st}st",
     {"load": "async", "mma": tile, "slice": sw, "stages": st}, {})
    for tile, choices in STAGE_CHOICES.items() for sw, st in choices)
# v7: the bytes local memory moves per mma (ldmatrix reads plus cp.async fills) are what a warp
# tile of 64x32 (128x64x2x2) spends most on: 64x64 warp tiles in work-groups of 1-8 warps read
# a third less per mma; and a slice's k-steps rolled (ROLL_KSTEPS) for fewer registers per
# work-item (more work-groups per SM). Decided by hand from the run (no adoption).
ROLL = {"ROLL_KSTEPS": True}
V7_TILES = ((128, 64, 2, 1), (64, 128, 1, 2), (256, 128, 4, 2), (256, 64, 4, 1), (64, 64, 1, 1))
V7_STEPS = (
    ("128x64x2x2 (v6)", ASYNC, {}),
    ("128x64x2x2 rolled", ASYNC, ROLL),
    ("128x128x2x2 (v6)", {**ASYNC, "mma": (128, 128, 2, 2)}, {}),
    ("128x128x2x2 rolled", {**ASYNC, "mma": (128, 128, 2, 2)}, ROLL),
    ("64x64x2x2 (v6)", {**ASYNC, "mma": (64, 64, 2, 2)}, {}),
    ("64x64x2x2 rolled", {**ASYNC, "mma": (64, 64, 2, 2)}, ROLL),
    *((f"{'x'.join(map(str, t))} 32w 2st", {**ASYNC, "mma": t, "slice": 32, "stages": 2}, {})
      for t in V7_TILES),
    ("128x64x2x1 32w 2st rolled", {**ASYNC, "mma": (128, 64, 2, 1), "slice": 32, "stages": 2},
     ROLL),
)
V7_LAYERS = (*V6_LAYERS, "layer2.{1,2,3}.conv2", "layer4.0.conv1")
# v7 (3, "l1"): A (input rows) and B (weights) copied through L1 or L2 only apart
# (CP_ASYNC_L1 for A, CP_ASYNC_L1_B for B), on the three offered cp.async tiles
L1_CHOICES = (("A .ca B .ca (v6)", {}),
              ("A .cg B .ca", {"CP_ASYNC_L1": False, "CP_ASYNC_L1_B": True}),
              ("A .ca B .cg", {"CP_ASYNC_L1": True, "CP_ASYNC_L1_B": False}))
L1_STEPS = tuple((f"{'x'.join(map(str, t))} {name}", {**ASYNC, "mma": t}, knobs)
                 for t in ((128, 64, 2, 2), (128, 128, 2, 2), (64, 64, 2, 2))
                 for name, knobs in L1_CHOICES)
# v7 (2, "caps"): register caps for one more work-group per SM: 128x64x2x2 at 128 (4 per SM,
# 48 KiB each), 64x64x2x2 in 3 stages at 128 (4 per SM) and in 2 at 96 (5 per SM),
# 128x128x2x2 at 168 (3 per SM, 64 KiB each). Run in v7 with the form
# "-cl-nv-maxrregcount N", which the driver refused at build; implicit_gemm_mma now passes
# v4's "=N" again, accepted and ignored. And cp.async through L2 only with deeper pipelines.
T64 = (64, 64, 2, 2)
T128 = (128, 128, 2, 2)
CAPS_STEPS = (
    ("128x64x2x2 (v6)", ASYNC, {}),
    ("128x64x2x2 cap 128", ASYNC, {"MAX_REGISTERS": 128}),
    ("64x64x2x2 (v6)", {**ASYNC, "mma": T64}, {}),
    ("64x64x2x2 32w 3st", {**ASYNC, "mma": T64, "slice": 32, "stages": 3}, {}),
    ("64x64x2x2 32w 3st cap 128", {**ASYNC, "mma": T64, "slice": 32, "stages": 3},
     {"MAX_REGISTERS": 128}),
    ("64x64x2x2 32w 2st cap 96", {**ASYNC, "mma": T64, "slice": 32, "stages": 2},
     {"MAX_REGISTERS": 96}),
    ("128x128x2x2 (v6)", {**ASYNC, "mma": T128}, {}),
    ("128x128x2x2 cap 168", {**ASYNC, "mma": T128}, {"MAX_REGISTERS": 168}),
    # and cp.async through L2 only (.cg) with deeper pipelines: .ca's L1 fill and read cost
    # local-memory bandwidth (the L1 is the same SRAM) beside the copies' own writes; v5
    # measured .cg only with 2 stages (13-39% slower), where L2's latency was not hidden
    *((f"{'x'.join(map(str, t))} .cg 32w {st}st", {**ASYNC, "mma": t, "slice": 32, "stages": st},
       {"CP_ASYNC_L1": False})
      for t, st in (((128, 64, 2, 2), 3), ((128, 64, 2, 2), 4), (T64, 4), (T128, 3))),
)
# v7 (4, "mask"): each A row's pixel bounds found once per tap (TAP_MASK) on the padded 3x3
# layers (1x1 layers build NO_BOUNDS, which it leaves alone)
MASK_STEPS = tuple((f"{'x'.join(map(str, t))} {name}", {**ASYNC, "mma": t}, knobs)
                   for t in ((128, 64, 2, 2), (128, 128, 2, 2), (64, 64, 2, 2))
                   for name, knobs in (("(v6)", {}), ("+tap mask", {"TAP_MASK": True})))
MASK_LAYERS = ("layer1.{0,1,2}.conv2", "layer2.{1,2,3}.conv2", "layer3.0.conv2",
               "layer3.{1..5}.conv2", "layer4.{1,2}.conv2")
# v8: the stem's input padded to whole-pixel load units (PAD_STEM 4 or 8 channels, the pad
# step's time included) against v7's word gather, staged by registers and by cp.async (conv1
# only); and the work-groups' order grouped along M (GROUP_M) on the layers of several block
# columns (N > BN) and large M. Each step names the layers it runs on; the run then goes on
# with the PAD_STEM and GROUP_M fastest in geometric mean (meta["adopted"]).
STEM = ("conv1",)
WIDE = ("layer1.{0,1,2}.conv3", "layer2.0.conv1", "layer2.{0..3}.conv3", "layer2.0.downsample",
        "layer3.{0..5}.conv3")
T12864 = (128, 64, 2, 2)
V8_STEPS = (
    *((f"stem {'x'.join(map(str, t))} reg pad {pad}", {"mma": t, "load": "registers"},
       {"PAD_STEM": pad}, STEM)
      for t in ((128, 64, 2, 2), (128, 64, 4, 2), T128) for pad in (0, 4, 8)),
    *((f"stem {'x'.join(map(str, t))} async pad {pad}", {"mma": t, "load": "async"},
       {"PAD_STEM": pad}, STEM)
      for t in (T12864, T128, T64) for pad in (4, 8)),
    *((f"{'x'.join(map(str, t))} async order {g or 'launch'}", {**ASYNC, "mma": t},
       {"GROUP_M": g}, WIDE)
      for t in (T12864, T128) for g in (None, 8, 32)),
)
ABLATIONS = {"pipeline": (ABLATION_STEPS, ABLATION_LAYERS),
             "epilogue": (EPILOGUE_STEPS, EPILOGUE_LAYERS),
             "v6": (V6_STEPS, V6_LAYERS),
             "stages": (STAGES_STEPS, V6_LAYERS),
             "v7": (V7_STEPS, V7_LAYERS),
             "caps": (CAPS_STEPS, V7_LAYERS),
             "l1": (L1_STEPS, V7_LAYERS),
             "mask": (MASK_STEPS, MASK_LAYERS),
             "v8": (V8_STEPS, STEM + WIDE)}


def ablation(torch: Any, runtime: Any, rules: Any, args: argparse.Namespace,
             ) -> list[dict[str, Any]]:
    """Each step of the chosen ablation (:data:`ABLATIONS`; tile :data:`ABLATION_TILE` unless
    a step names one; the kernel's build knobs of implicit_gemm_mma set as the step names
    them, restored after), on a few ResNet-50 layers at batch 32, in TF32 and F16: kernel ms,
    checked like every candidate."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    steps, names = ABLATIONS[args.ablation]
    layers, _ = load_layers(None, ["resnet50"])
    chosen = [x for x in distinct(layers) if any(x.name.startswith(n) for n in names)]
    rng = np.random.default_rng(1)
    rows = []
    print(f"ablation on mma {ABLATION_TILE} (ms per layer; TF32 then F16):", flush=True)
    for layer in chosen:
        for math_mode, dtype in (("tf32", "F32"), ("f16", "F16")):
            p = layer.problem.replace(n=32, dtype=dtype, fast_math=True)
            npd = np.float16 if dtype == "F16" else np.float32
            x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(npd)
            w = (rng.standard_normal(p.weights_shape) / math.sqrt(p.kh * p.kw * p.c)).astype(npd)
            ref, scale = reference64(torch, p, x, w)
            times = {}
            for name, step, knobs, *only in steps:
                if only and not layer.name.startswith(only[0]):
                    continue                    # a step of other layers (v8)
                params = {"math": math_mode, "mma": ABLATION_TILE, **step}
                saved = {k: getattr(igm, k) for k in knobs}
                for k, v in knobs.items():
                    setattr(igm, k, v)
                try:
                    r = run_candidate(torch, p, "implicit_gemm", params, runtime, x, w, ref,
                                      scale, args.repeats)
                except ConvselError as exc:
                    r = {"failed": str(exc)}
                finally:
                    for k, v in saved.items():
                        setattr(igm, k, v)
                times[name] = r.get("kernel_s") if r.get("correct") else None
                rows.append({"layer": layer.name, "math": math_mode, "step": name,
                             "knobs": knobs, **r})
            del ref, scale
            cells = " ".join(f"{t * 1e3:7.3f}" if t else "      -" for t in times.values())
            print(f"  {layer.name[:28]:<28} {math_mode}: {cells}", flush=True)
    print("  columns: " + " | ".join(step[0] for step in steps), flush=True)
    return rows


DIAGNOSE_TILES = ((128, 64, 2, 2), (64, 64, 2, 2))


def diagnose(torch: Any, runtime: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Kernel time of the cp.async variants of :data:`DIAGNOSE_TILES` on the ablation's
    layers, whole, without their copies ("no_loads": what the mma and fragment loads alone
    take) and without their mma ("no_mma": what staging and fragment loads alone take).
    Diagnosis only: the stripped kernels' outputs are wrong by design and not checked."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    layers, _ = load_layers(None, ["resnet50"])
    names = ABLATION_LAYERS + EPILOGUE_LAYERS
    chosen = [x for x in distinct(layers) if any(x.name.startswith(n) for n in names)]
    rng = np.random.default_rng(2)
    rows = []
    print("diagnosis (kernel ms: whole | no copies | no mma):", flush=True)
    for layer in chosen:
        for math_mode, dtype in (("tf32", "F32"), ("f16", "F16")):
            p = layer.problem.replace(n=32, dtype=dtype, fast_math=True)
            npd = np.float16 if dtype == "F16" else np.float32
            x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(npd)
            w = rng.standard_normal(p.weights_shape).astype(npd)
            for tile in DIAGNOSE_TILES:
                params = {"math": math_mode, "mma": tile, "load": "async"}
                times = {}
                for mode in (None, "no_loads", "no_mma"):
                    igm.DIAGNOSE = mode
                    try:
                        kernel = igm.prepare(p, w, None, dict(params), runtime)
                        kernel.run(x)
                        times[mode or "whole"] = statistics.median(
                            kernel_seconds(kernel, args.repeats))
                    except ConvselError as exc:
                        times[mode or "whole"] = None
                        print(f"  {layer.name} {mode}: {exc}", flush=True)
                    finally:
                        igm.DIAGNOSE = None
                rows.append({"layer": layer.name, "math": math_mode, "tile": tile, **times})
                cells = " ".join(f"{t * 1e3:7.3f}" if t else "      -" for t in times.values())
                print(f"  {layer.name[:28]:<28} {math_mode} {'x'.join(map(str, tile))}: "
                      f"{cells}", flush=True)
    return rows


def adopt_stage_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """After the "epilogue" ablation: STAGE_OUT on or off for the rest of the run, whichever
    gave the lower geometric mean of kernel times over the (layer, math, tile) pairs that both
    ran correctly; what was measured, and chosen."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    times: dict[tuple[str, str, str], dict[bool, float]] = {}
    for r in rows:
        if r.get("correct") and r.get("kernel_s"):
            tile = r["step"].replace(" staged out", "").replace(" fragment out", "")
            times.setdefault((r["layer"], r["math"], tile), {})[r["knobs"]["STAGE_OUT"]] = \
                r["kernel_s"]
    pairs = [t for t in times.values() if len(t) == 2]
    if not pairs:
        return {"STAGE_OUT": igm.STAGE_OUT, "why": "no pair measured"}
    ratio = math.exp(sum(math.log(t[True] / t[False]) for t in pairs) / len(pairs))
    igm.STAGE_OUT = ratio < 1.0
    print(f"STAGE_OUT: staged / fragment-stored geomean {ratio:.3f} over {len(pairs)} pairs: "
          f"running with STAGE_OUT={igm.STAGE_OUT}", flush=True)
    return {"STAGE_OUT": igm.STAGE_OUT, "staged_over_fragment_geomean": ratio,
            "pairs": len(pairs)}


def adopt_v6(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """After the "v6" ablation: SPECIALISE and ISSUE_AT for the rest of the run, the 128x64
    steps' geometric mean of kernel times over the (layer, math) pairs where all ran correctly
    deciding (SPECIALISE against v5's build, then ISSUE_AT 0, 1 or 2 with it)."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    steps = {"v5": "async (v5)", 0: "async +spec", 1: "async +spec +issue@1",
             2: "async +spec +issue@2"}
    times: dict[tuple[str, str], dict[Any, float]] = {}
    for r in rows:
        for key, step in steps.items():
            if r["step"] == step and r.get("correct") and r.get("kernel_s"):
                times.setdefault((r["layer"], r["math"]), {})[key] = r["kernel_s"]
    whole = [t for t in times.values() if len(t) == len(steps)]
    if not whole:
        return {"SPECIALISE": igm.SPECIALISE, "ISSUE_AT": igm.ISSUE_AT,
                "why": "no layer ran every step"}
    means = {key: math.exp(sum(math.log(t[key]) for t in whole) / len(whole)) for key in steps}
    igm.SPECIALISE = means[0] < means["v5"]
    issue = min((0, 1, 2), key=lambda k: means[k])
    igm.ISSUE_AT = issue
    print(f"v6: geomean ms over {len(whole)} pairs "
          + ", ".join(f"{steps[k]} {v * 1e3:.4f}" for k, v in means.items())
          + f": running with SPECIALISE={igm.SPECIALISE} ISSUE_AT={igm.ISSUE_AT}", flush=True)
    return {"SPECIALISE": igm.SPECIALISE, "ISSUE_AT": igm.ISSUE_AT,
            "geomean_ms": {str(k): v * 1e3 for k, v in means.items()}, "pairs": len(whole)}


def adopt_stages(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """After the "stages" ablation: each tile's cp.async (slice, stages) of the lowest
    geometric mean of kernel times over the (layer, math) pairs where all its choices ran
    correctly, for the rest of the run (implicit_gemm_mma.ASYNC_PIPELINES)."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    adopted: dict[str, Any] = {}
    for tile, choices in STAGE_CHOICES.items():
        names = {f"{'x'.join(map(str, tile))} {sw}w {st}st": (sw, st) for sw, st in choices}
        times: dict[tuple[str, str], dict[tuple[int, int], float]] = {}
        for r in rows:
            if r["step"] in names and r.get("correct") and r.get("kernel_s"):
                times.setdefault((r["layer"], r["math"]), {})[names[r["step"]]] = r["kernel_s"]
        whole = [t for t in times.values() if len(t) == len(choices)]
        if not whole:
            continue
        means = {c: math.exp(sum(math.log(t[c]) for t in whole) / len(whole)) for c in choices}
        best = min(means, key=lambda c: means[c])
        igm.ASYNC_PIPELINES[tile] = best
        key = "x".join(map(str, tile))
        adopted[key] = {"slice_stages": best, "pairs": len(whole),
                        "geomean_ms": {f"{c[0]}w {c[1]}st": v * 1e3 for c, v in means.items()}}
        print(f"stages: {key}: " + ", ".join(f"{c[0]}w {c[1]}st {v * 1e3:.4f}"
                                             for c, v in means.items())
              + f" ms over {len(whole)} pairs: running with {best[0]}w {best[1]}st", flush=True)
    return adopted


def adopt_v8(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """After the "v8" ablation: PAD_STEM (0, 4 or 8) by the geometric mean over TF32 and F16
    of the stem's fastest correct time at each value (the pad step's time included), and
    GROUP_M (None, 8, 32) by the geometric mean of its times on each tile over the layers
    where every value ran correctly, kept only if it beats the launch order by more than 2%;
    set in implicit_gemm_mma for the rest of the run."""
    from convsel.backends.opencl import implicit_gemm_mma as igm

    stem: dict[int, dict[str, float]] = {}
    order: dict[Any, dict[tuple[str, str, str], float]] = {}
    for r in rows:
        if not r.get("correct"):
            continue
        if "PAD_STEM" in r["knobs"]:
            best = stem.setdefault(r["knobs"]["PAD_STEM"], {})
            best[r["math"]] = min(best.get(r["math"], math.inf), r["kernel_s"])
        elif "GROUP_M" in r["knobs"]:
            tile = r["step"].split()[0]
            order.setdefault(r["knobs"]["GROUP_M"], {})[(r["layer"], r["math"], tile)] = \
                r["kernel_s"]
    pads = {pad: geomean(list(t.values())) for pad, t in stem.items() if len(t) == 2}
    if pads:
        igm.PAD_STEM = min(pads, key=lambda k: pads[k] or math.inf)
    common = set.intersection(*(set(t) for t in order.values())) if order else set()
    groups = {g: geomean([t[k] for k in sorted(common)]) for g, t in order.items()}
    launch = groups.get(None)
    best_g = min(groups, key=lambda k: groups[k] or math.inf) if groups else None
    if launch and best_g is not None and (groups[best_g] or math.inf) < 0.98 * launch:
        igm.GROUP_M = best_g
    out = {"PAD_STEM": igm.PAD_STEM, "GROUP_M": igm.GROUP_M,
           "stem_geomean_ms_by_pad": {k: v * 1e3 if v else None for k, v in pads.items()},
           "geomean_ms_by_group_m": {str(k): v * 1e3 if v else None
                                     for k, v in groups.items()}}
    print(f"adopted for the run: {out}", flush=True)
    return out


def write(out: Path, meta: dict, rows: list, left: list, started: float) -> None:
    summary = summarise(rows)
    head: dict[str, Any] = {}
    for batch in (32, 1):
        for prec in PRECISIONS:
            entry = (summary.get(f"resnet50_b{batch}") or {}).get(prec) or {}
            head[f"geomean_vs_cudnn_{prec}_b{batch}"] = entry.get("geomean_vs_cudnn")
    data = {**head, "meta": meta, "summary": summary, "not_run": left,
            "elapsed_s": time.perf_counter() - started, "layers": rows}
    out.write_text(json.dumps(jsonable(data), indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
