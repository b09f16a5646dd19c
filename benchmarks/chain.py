"""A net's convolutions chained on an OpenCL device, device-resident: wall time of the whole
chain against the sum of its kernel times, and against the numpy-in/numpy-out path.

    python benchmarks/chain.py --net resnet50 --batch 1 --batch 32 [--repeats 20]
        [--host-repeats 3] [--algorithm gemm_1x1 ...] [--limit N] [--device 0:0]
        [--out results/chain.json]

For each batch: every distinct layer of the net (layers.json), with bias and a fused ReLU,
runs the OpenCL algorithm with the shortest kernel time on that layer (each supported
algorithm timed by profiling events, median of 3 device-resident runs after a warm-up;
Winograd with the tile ACL's GPU table gives the kernel). Then the chain: each layer's
``op.run(x, out=y)`` on device arrays, one after another on the shared queue without
waiting; a layer whose input shape is the previous layer's output shape reads that output,
the others read their own device input. Per pass: wall time from the first enqueue to
``queue.finish()``; the sum of the kernels' profiling times; the device span (first kernel
start to last kernel end). The host path is the same layers with ``op.run(numpy x)`` (upload,
kernels, download, blocking), wall time summed over layers. Medians over the passes. Each
layer's device output is also checked equal to the host path's output for the same input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl.array as cl_array
from opencl import ALGORITHMS, gpu_tile  # benchmarks/opencl.py

import convsel
from convsel.backends.opencl import device_identity, get_runtime
from convsel.errors import ConvselError, FallbackWarning
from convsel.problem import ConvProblem
from convsel.rules import load_rules
from convsel.tuning.layers import Layer, distinct, load_layers

ROOT = Path(__file__).resolve().parents[1]


def candidates(p: ConvProblem, w: np.ndarray, b: np.ndarray, device: Any, names: list[str],
               rules: Any) -> list[tuple[str, Any]]:
    """(algorithm, prepared op) for every algorithm that runs ``p`` on the OpenCL device."""
    out = []
    for name in names:
        params = {"tile": gpu_tile(p, rules)} if name == "winograd" else None
        if name == "winograd" and params["tile"] is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)   # numpy is not a candidate
                out.append((name, convsel.prepare(p, w, b, algorithm=name, backend="opencl",
                                                  device=device, params=params)))
        except (ConvselError, FallbackWarning):
            continue
    return out


def kernel_s(op: Any, x: Any, y: Any, runs: int) -> float:
    """Median kernel time (s) of ``runs`` device-resident runs after a warm-up."""
    op.run(x, out=y)
    samples = []
    for _ in range(runs):
        op.run(x, out=y)
        samples.append(op.kernel.kernel_ns() * 1e-9)
    return statistics.median(samples)


def fastest(layer: Layer, p: ConvProblem, device: Any, names: list[str], rules: Any,
            rng: np.random.Generator) -> dict[str, Any]:
    """The layer's data, its fastest op and every candidate's kernel time."""
    w = (rng.standard_normal(p.weights_shape) / np.sqrt(p.kh * p.kw * p.c)).astype(np.float32)
    b = (0.1 * rng.standard_normal(p.k)).astype(np.float32)
    x_host = rng.standard_normal(p.input_shape).astype(np.float32)
    ops = candidates(p, w, b, device, names, rules)
    if not ops:
        raise SystemExit(f"no OpenCL algorithm runs {layer.label}")
    queue = ops[0][1].queue
    x = cl_array.to_device(queue, x_host)
    y = cl_array.empty(queue, p.output_shape, np.float32)
    times = {name: kernel_s(op, x, y, 3) for name, op in ops}
    best = min(times, key=times.__getitem__)
    return {"layer": layer, "problem": p, "op": dict(ops)[best], "algorithm": best,
            "candidates_s": times, "x": x, "x_host": x_host, "y": y}


def chain_pass(chain: list[dict[str, Any]], queue: Any) -> dict[str, float]:
    """One device-resident pass over the chain: wall, kernel sum and device span (s)."""
    queue.finish()
    started = time.perf_counter()
    for link in chain:
        link["op"].run(link["input"], out=link["y"])
    queue.finish()
    wall = time.perf_counter() - started
    events = [e for link in chain for _, e in link["op"].kernel.last_events]
    kernels = sum(e.profile.end - e.profile.start for e in events) * 1e-9
    span = (max(e.profile.end for e in events) - min(e.profile.start for e in events)) * 1e-9
    return {"wall_s": wall, "kernel_sum_s": kernels, "device_span_s": span}


def host_pass(chain: list[dict[str, Any]]) -> float:
    """Wall time (s) of every layer's numpy-in/numpy-out run, summed."""
    total = 0.0
    for link in chain:
        started = time.perf_counter()
        link["op"].run(link["x_host"])
        total += time.perf_counter() - started
    return total


def link_inputs(chain: list[dict[str, Any]]) -> int:
    """Feed each layer the previous layer's output where the shapes allow; how many do."""
    fed = 0
    for prev, link in zip([None, *chain], chain):
        if prev is not None and prev["problem"].output_shape == link["problem"].input_shape:
            link["input"], fed = prev["y"], fed + 1
        else:
            link["input"] = link["x"]
    return fed


def device_matches_host(chain: list[dict[str, Any]]) -> bool:
    """Each layer's device output equals its host-path output for the same input."""
    for link in chain:
        x = link["input"].get()
        y = link["op"].run(link["input"]).get()
        if not np.array_equal(y, link["op"].run(x)):
            return False
    return True


def run_batch(layers: list[Layer], batch: int, args: argparse.Namespace, device: Any,
              rules: Any) -> dict[str, Any]:
    rng = np.random.default_rng(batch)
    chain = []
    for layer in layers:
        p = layer.problem.replace(n=batch, activation="relu")
        chain.append(fastest(layer, p, device, args.algorithm or list(ALGORITHMS), rules, rng))
        link = chain[-1]
        print(f"  batch {batch} {layer.label[:40]:<40} {link['algorithm']:<14} "
              f"{link['candidates_s'][link['algorithm']] * 1e3:8.3f} ms", flush=True)
    fed = link_inputs(chain)
    queue = chain[0]["op"].queue
    chain_pass(chain, queue)                               # warm-up
    passes = [chain_pass(chain, queue) for _ in range(args.repeats)]
    host_pass(chain)                                       # warm-up
    hosts = [host_pass(chain) for _ in range(args.host_repeats)]
    med = {k: statistics.median(p[k] for p in passes) for k in passes[0]}
    result = {
        "batch": batch, "layers": len(chain), "inputs_from_previous_layer": fed,
        "device_wall_s": med["wall_s"], "kernel_sum_s": med["kernel_sum_s"],
        "device_span_s": med["device_span_s"],
        "wall_over_kernel_sum": med["wall_s"] / med["kernel_sum_s"],
        "host_path_wall_s": statistics.median(hosts),
        "host_over_device_wall": statistics.median(hosts) / med["wall_s"],
        "device_equals_host": device_matches_host(chain),
        "passes": passes, "host_path_samples_s": hosts,
        "per_layer": [{"layer": link["layer"].name, "problem": link["problem"].to_dict(),
                       "algorithm": link["algorithm"], "candidates_kernel_s":
                       link["candidates_s"]} for link in chain],
    }
    print(f"batch {batch}: device-resident wall {med['wall_s'] * 1e3:.2f} ms, kernel sum "
          f"{med['kernel_sum_s'] * 1e3:.2f} ms (wall/kernels {result['wall_over_kernel_sum']:.3f}"
          f", device span {med['device_span_s'] * 1e3:.2f} ms); numpy in/out "
          f"{result['host_path_wall_s'] * 1e3:.2f} ms ({result['host_over_device_wall']:.1f}x); "
          f"device == host: {result['device_equals_host']}", flush=True)
    for link in chain:            # free this batch's device memory before the next
        link.clear()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=None, help="layer file (default: the package's)")
    parser.add_argument("--net", default="resnet50")
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--algorithm", action="append", choices=ALGORITHMS)
    parser.add_argument("--device", default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--host-repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="first N distinct layers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    layers, messages = load_layers(args.layers, [args.net])
    for message in messages:
        print(f"warning: {message}", file=sys.stderr)
    layers = distinct(layers)[: args.limit]
    runtime, rules = get_runtime(args.device), load_rules()
    ident = device_identity(runtime)
    print(f"device: {ident['name']} ({ident['vendor']}, driver {ident['driver']})")
    results = [run_batch(layers, batch, args, args.device, rules)
               for batch in args.batch or [1, 32]]
    out = args.out or ROOT / "results" / f"chain-{args.net}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "device": ident, "net": args.net, "dtype": "F32", "activation": "relu",
        "pyopencl": __import__("pyopencl").VERSION_TEXT, "numpy": np.__version__,
        "command": " ".join(["python", "benchmarks/chain.py", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results},
        indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
