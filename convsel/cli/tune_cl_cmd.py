"""``convsel tune-cl``: tune the OpenCL kernels' local work sizes (ACL's CLTuner) for a layer
set or one problem, and write the tuning file."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from .. import algorithms
from ..errors import ConvselError
from ..rules import load_rules
from ..tuning.layers import Layer, distinct
from .problem_args import add_problem_arguments
from .tune_cmd import layers_from_args

# every algorithm the OpenCL backend implements, from the registry
ALGORITHMS = tuple(a for a in algorithms.ALGORITHMS if "opencl" in algorithms.spec(a).backends)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", default="normal", choices=["rapid", "normal", "exhaustive"],
                        help="candidate local sizes, as ACL's CLTuner (default normal)")
    parser.add_argument("--file", default=None, metavar="PATH",
                        help="tuning file (default: $CONVSEL_CL_TUNER_FILE or cl_tuner.lws in "
                             "the user cache directory); existing entries are kept")
    parser.add_argument("--device", default=None, help="OpenCL device: index, P:D or name")
    parser.add_argument("--layers", metavar="FILE", help="layer file: a JSON array as in "
                        "convsel/data/layers.json (the default when --net is given), or the "
                        "output of `convsel plan MODEL.onnx --json`")
    parser.add_argument("--net", action="append", metavar="NAME", help="only this net "
                        "(repeatable)")
    parser.add_argument("--algorithm", action="append", choices=ALGORITHMS,
                        help="only this algorithm (repeatable; default all that apply)")
    parser.add_argument("--f16", action="store_true", help="tune the layers as F16")
    add_problem_arguments(parser, required=False)


def _layers(args: argparse.Namespace) -> list[Layer]:
    layers = layers_from_args(args)
    if args.f16:
        layers = distinct([Layer(x.net, x.name, x.problem.replace(dtype="F16"))
                           for x in layers])
    return layers


def _variants(layer: Layer, names: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    rules = load_rules()
    out = []
    for name in names:
        if not algorithms.supports(name, layer.problem, rules).ok:
            continue
        out += [(name, params) for params in algorithms.variants(name, layer.problem, rules)]
    return out


def run(args: argparse.Namespace) -> int:
    from ..backends import implementation
    from ..backends.opencl import get_runtime, tuner

    layers = _layers(args)
    tuned = tuner.configure(args.mode, args.file or tuner.tuner_from_env().path
                            or tuner.default_file())
    runtime = get_runtime(args.device)
    print(f"tuning on {runtime.identity['name']} ({runtime.identity['driver']}), mode "
          f"{args.mode}, file {tuned.path} ({len(tuned.table)} entries already)")
    failures, started = 0, time.perf_counter()
    rng = np.random.default_rng(0)
    for layer in layers:
        p = layer.problem
        dtype = np.float16 if p.dtype == "F16" else np.float32
        x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
        w = rng.standard_normal(p.weights_shape).astype(dtype)
        for name, params in _variants(layer, tuple(args.algorithm or ALGORITHMS)):
            module = implementation(name, "opencl")
            if module is None:     # ALGORITHMS holds only what OpenCL implements
                continue
            before, t0 = tuned.tuned, time.perf_counter()
            try:
                if not module.supports(p, params, runtime).ok:
                    continue
                module.prepare(p, w, None, params, runtime).run(x)
            except ConvselError as exc:
                failures += 1
                print(f"{layer.label} {name}: not tuned: {exc}", file=sys.stderr)
                continue
            label = algorithms.label_of(name, params)
            print(f"{layer.label} {label}: {tuned.tuned - before} new kernel(s) in "
                  f"{time.perf_counter() - t0:.1f} s")
    print(f"{tuned.tuned} kernel configuration(s) tuned in {time.perf_counter() - started:.1f} "
          f"s; {len(tuned.table)} entries in {tuned.path}; {failures} failure(s)")
    return 1 if failures and not tuned.tuned else 0
