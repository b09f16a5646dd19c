"""The fastest backend per layer, for real: tune a small chain of Convs on numpy and on OpenCL,
then ask the measured policy across both, per layer (a call on host arrays) and for the whole
chain (copies counted only where neighbours run apart), beside ArmNN-style first-supported.

    PYTHONPATH=. python benchmarks/across.py [--out benchmarks/results/across-....json]

The chain is built here as an ONNX model (the onnx extra): a few MobileNet-like layers,
small enough for a shared machine. Each layer is timed with :func:`convsel.find` on each
backend and stored in a private tuning database, which the measured policy then reads.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import convsel
from convsel.tuning.timing import TimingSettings

# (name, K, kernel, stride, groups): a MobileNet-like stretch on a 1x16x28x28 input
LAYERS = [("conv3x3", 32, 3, 1, 1), ("project", 16, 1, 1, 1), ("depthwise", 16, 3, 1, 16),
          ("expand", 64, 1, 1, 1), ("conv3x3_s2", 64, 3, 2, 1), ("project2", 32, 1, 1, 1)]
INPUT = (1, 16, 28, 28)


def chain_model(hw: int = INPUT[2], width: int = 1) -> Any:
    """The chain on a 1 x 16*width x hw x hw input, every layer ``width`` times as wide
    (depthwise stays depthwise)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shape = [INPUT[0], INPUT[1] * width, hw, hw]
    nodes, inits, cur, channels = [], [], "input", shape[1]
    for name, k, kernel, stride, groups in LAYERS:
        k, groups = k * width, groups * width if groups > 1 else 1
        w = numpy_helper.from_array(rng.standard_normal(
            (k, channels // groups, kernel, kernel)).astype(np.float32), f"{name}.w")
        inits.append(w)
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [cur, w.name], [f"{name}.out"], name=name,
                                      kernel_shape=[kernel, kernel], strides=[stride] * 2,
                                      pads=[pad] * 4, group=groups))
        nodes.append(helper.make_node("Relu", [f"{name}.out"], [f"{name}.relu"],
                                      name=f"{name}.relu"))
        cur, channels = f"{name}.relu", k
    graph = helper.make_graph(nodes, "across", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            cur, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             producer_name="benchmarks/across.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--db", default=None, help="tuning database (default: a fresh one)")
    parser.add_argument("--hw", type=int, default=INPUT[2], help="input height and width")
    parser.add_argument("--width", type=int, default=1, help="channel multiplier")
    parser.add_argument("--note", default="ILLUSTRATIVE ONLY: a shared, loaded 2-core "
                        "development VM; OpenCL is PoCL's CPU driver on the same cores as "
                        "numpy. The figures show the mechanism, not a speed claim.",
                        help="what the figures are (the machine, how quiet it was)")
    args = parser.parse_args()
    db = args.db or str(Path(tempfile.mkdtemp()) / "across.sqlite")
    settings = TimingSettings(warmup=2, min_runs=7, min_time=0.05)
    model = chain_model(args.hw, args.width)
    acl_plan = convsel.plan(model, "cpu")
    started = time.perf_counter()
    layers = []
    for node in acl_plan.nodes:
        best = {}
        for backend in ("numpy", "opencl"):
            found = convsel.find(node.problem, backend=backend, settings=settings,
                                 store=True, db=db)
            top = found.best
            best[backend] = None if top is None else {
                "label": top.label, "median_ms": top.median_s * 1e3,
                "iqr_ms": (top.iqr_s or 0) * 1e3, "clock": top.clock, "stored": found.stored}
        sel = convsel.choose(node.problem, policy="measured", backend=["numpy", "opencl"],
                             db=db)
        layers.append({"node": node.name, "problem": str(node.problem), "best": best,
                       "chosen": {"backend": sel.backend, "algorithm": sel.algorithm,
                                  "params": sel.to_dict()["params"], "reason": sel.reason},
                       "compared": sel.measurement["backends"] if sel.measurement else None})
    tuned_s = time.perf_counter() - started
    fastest = convsel.plan(model, "cpu", "measured", backend=["numpy", "opencl"], db=db)
    first = convsel.plan(model, "cpu", backend="opencl,numpy")
    report = {
        "what": "benchmarks/across.py: the fastest backend per layer (numpy vs OpenCL)",
        "caveat": args.note, "chain": {"hw": args.hw, "width": args.width},
        "host": platform.node(), "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"), "convsel": convsel.__version__,
        "backends": convsel.backends.capabilities(transfers=True),
        "settings": {"warmup": settings.warmup, "min_runs": settings.min_runs,
                     "min_time": settings.min_time},
        "tuning_seconds": round(tuned_s, 1), "layers": layers,
        "plan_fastest": _plan(fastest), "plan_first_supported": _plan(first)}
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(summary(report))
    return 0


def _plan(result: Any) -> dict[str, Any]:
    d = result.to_dict()
    return {"placement": d["placement"], "switches": d["summary"]["switches"],
            "transfer_ms": d["summary"]["transfer_ms"], "backends": d["summary"]["backends"],
            "nodes": [{"node": n["name"], "backend": n["backend"], "algorithm": n["algorithm"],
                       "copies": n["copies"], "passed_over": n["passed_over"]}
                      for n in d["nodes"]]}


def summary(report: dict[str, Any]) -> str:
    lines = [report["caveat"], "",
             f"{'layer':<12} {'numpy best':<26} {'opencl best (kernel)':<30} chosen"]
    for layer in report["layers"]:
        cells = []
        for backend in ("numpy", "opencl"):
            b = layer["best"][backend]
            cells.append("-" if b is None else f"{b['label']} {b['median_ms']:.3g} ms")
        chosen = layer["chosen"]
        lines.append(f"{layer['node']:<12} {cells[0]:<26} {cells[1]:<30} "
                     f"{chosen['backend']} {chosen['algorithm']}")
    for key in ("plan_fastest", "plan_first_supported"):
        p = report[key]
        placed = ", ".join(f"{n['node']}:{n['backend']}" for n in p["nodes"])
        spent = "" if p["transfer_ms"] is None else f", {p['transfer_ms']:.3g} ms of copies"
        lines.append(f"{key}: {placed}; {p['switches']} switches{spent}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
