"""Time every OpenCL algorithm on each layer of a net: kernel time from profiling events and
wall time of a whole run (upload, kernels, download), on any OpenCL device.

    python benchmarks/opencl.py --net resnet50 [--algorithm direct ...] [--dtype F16]
        [--device 0:0] [--repeats 5] [--limit 10] [--out results/opencl-resnet50.json]

Prints one row per layer and algorithm (medians over --repeats runs after one warm-up run;
the program build and first-launch code generation happen in prepare and the warm-up, and
are not timed) and writes JSON with the device identity and every sample. Winograd runs the
tile ACL's GPU heuristic picks for the kernel (§5.1).
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

from convsel import algorithms
from convsel.algorithms import supports as algorithm_supports
from convsel.backends import implementation
from convsel.backends.opencl import device_identity, get_runtime
from convsel.errors import ConvselError
from convsel.problem import ConvProblem
from convsel.rules import Rules, load_rules
from convsel.tuning.layers import Layer, distinct, load_layers

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = tuple(a for a in algorithms.ALGORITHMS if "opencl" in algorithms.spec(a).backends)


def gpu_tile(p: ConvProblem, rules: Rules) -> tuple[int, int] | None:
    """ACL's NHWC tile for this kernel: the table's side on each axis the kernel spans."""
    side = rules.gpu.winograd.tile_by_kernel_extent.get(max(p.kh, p.kw))
    if side is None:
        return None
    return (1 if p.kh == 1 else side, 1 if p.kw == 1 else side)


def time_one(p: ConvProblem, algorithm: str, runtime: Any, rules: Rules, repeats: int,
             rng: np.random.Generator) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if algorithm == "winograd":
        params["tile"] = gpu_tile(p, rules)
    verdict = algorithm_supports(algorithm, p, rules, params)
    if not verdict.ok:
        return {"skipped": verdict.reason}
    module = implementation(algorithm, "opencl")
    device_verdict = module.supports(p, verdict.params, runtime)
    if not device_verdict.ok:
        return {"skipped": device_verdict.reason}
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = rng.standard_normal(p.weights_shape).astype(dtype)
    b = rng.standard_normal(p.k).astype(dtype)
    started = time.perf_counter()
    kernel = module.prepare(p, w, b, dict(verdict.params), runtime)
    kernel.run(x)                                   # warm-up: first-launch code generation
    prepare_s = time.perf_counter() - started
    wall, device = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        kernel.run(x)
        wall.append(time.perf_counter() - t0)
        device.append(kernel.kernel_ns() * 1e-9)
    kernel_s = statistics.median(device)
    return {"params": {k: list(v) for k, v in verdict.params.items()},
            "kernel_s": kernel_s, "wall_s": statistics.median(wall),
            "gflops": p.flops / kernel_s / 1e9 if kernel_s > 0 else None,
            "prepare_s": prepare_s, "kernel_samples_s": device, "wall_samples_s": wall,
            "workspace_bytes": kernel.workspace_bytes}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:9.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=None, help="layer file (default: shared/data)")
    parser.add_argument("--net", action="append", help="net(s) of the layer file")
    parser.add_argument("--algorithm", action="append", choices=ALGORITHMS)
    parser.add_argument("--dtype", default="F32", choices=["F32", "F16"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="first N distinct layers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    layers, messages = load_layers(args.layers, args.net or ["resnet50"])
    for message in messages:
        print(f"warning: {message}", file=sys.stderr)
    layers = distinct([Layer(x.net, x.name, x.problem.replace(dtype=args.dtype))
                       for x in layers])[: args.limit]
    runtime, rules = get_runtime(args.device), load_rules()
    ident = device_identity(runtime)
    print(f"device: {ident['name']} ({ident['vendor']}, driver {ident['driver']})")
    print(f"{'layer':<34} {'algorithm':<14} {'kernel ms':>9} {'wall ms':>9} {'GFLOP/s':>8}")
    rng, rows = np.random.default_rng(0), []
    for layer in layers:
        for algorithm in args.algorithm or ALGORITHMS:
            try:
                result = time_one(layer.problem, algorithm, runtime, rules, args.repeats, rng)
            except ConvselError as exc:
                result = {"error": str(exc)}
            rows.append({"net": layer.net, "layer": layer.name, "algorithm": algorithm,
                         "problem": layer.problem.to_dict(), **result})
            if "kernel_s" in result:
                print(f"{layer.label[:34]:<34} {algorithm:<14} {_ms(result['kernel_s'])} "
                      f"{_ms(result['wall_s'])} {result['gflops']:8.2f}", flush=True)
            elif "error" in result:
                print(f"{layer.label[:34]:<34} {algorithm:<14} error: {result['error'][:60]}")
    out = args.out or ROOT / "results" / f"opencl-{'-'.join(args.net or ['resnet50'])}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": ident, "dtype": args.dtype, "repeats": args.repeats,
                               "command": " ".join(["python", "benchmarks/opencl.py",
                                                    *(argv or sys.argv[1:])]),
                               "results": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
