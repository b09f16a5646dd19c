"""What an NCHW problem costs on the device path: NHWC against NCHW device-resident runs of
ResNet-50-sized layers (batch 32, implicit GEMM, F32). The NCHW run adds two on-device
transposes (NCHW -> NHWC scratch, NHWC result -> NCHW) and their scratch allocations.

    python3 benchmarks/nchw.py --out results/nchw-device-DATE-HOST.json

Prints and saves the median wall time of 30 synchronised runs per layer and layout.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pyopencl.array as cl_array

import convsel
from convsel.problem import ConvProblem

LAYERS = [(56, 64, 64, 3), (56, 256, 64, 1), (28, 128, 128, 3), (14, 256, 256, 3),
          (7, 512, 2048, 1)]     # (H = W, C, K, kernel), stride 1, "same" padding


def median_ms(p: ConvProblem, runs: int) -> float:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(p.weights_shape).astype(np.float32)
    op = convsel.prepare(p, w, backend="opencl", algorithm="implicit_gemm")
    x = cl_array.to_device(op.queue, rng.standard_normal(p.input_shape).astype(np.float32))
    y = op.run(x)
    op.queue.finish()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        op.run(x, out=y)
        op.queue.finish()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for h, c, k, kernel in LAYERS:
        ms = {layout: median_ms(ConvProblem(args.batch, h, h, c, k, kernel, kernel,
                                            pad=kernel // 2, layout=layout), args.runs)
              for layout in ("NHWC", "NCHW")}
        rows.append({"layer": f"{h}x{h}x{c}->{k} {kernel}x{kernel}", "batch": args.batch,
                     "nhwc_ms": ms["NHWC"], "nchw_ms": ms["NCHW"],
                     "nchw_over_nhwc": ms["NCHW"] / ms["NHWC"]})
        print(f"{rows[-1]['layer']:<22} NHWC {ms['NHWC']:.3f} ms  NCHW {ms['NCHW']:.3f} ms  "
              f"x{rows[-1]['nchw_over_nhwc']:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": convsel.backends.opencl.get_runtime().identity,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
