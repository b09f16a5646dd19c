"""Registers, spills and local memory of the tensor-core kernel's builds, as NVIDIA's compiler
reports them (``-cl-nv-verbose``: ptxas's own "Used N registers, ... spill stores" lines),
for each declared mma tile and both pipelines on one ResNet-50 layer (and with sliced K), a
few tiles with their fragments double-buffered (FRAG2), and the stem's flat reduction.
A spilling or register-starved build explains a slow variant that timings alone cannot.

    python3 benchmarks/gpu_mma_registers.py [--budget-s 60] [--out registers.txt]

Needs an NVIDIA OpenCL device (elsewhere it says so and exits 0). Builds only, runs nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# a cached binary comes without the compiler's log: build from source every time
os.environ["PYOPENCL_NO_CACHE"] = "1"
os.environ["CUDA_CACHE_DISABLE"] = "1"

from convsel.algorithms.implicit_gemm import (  # noqa: E402
    MMA_ASYNC_TILES,
    MMA_SLICED_TILES,
    MMA_TILES,
)
from convsel.backends.opencl import get_runtime, mma  # noqa: E402
from convsel.backends.opencl import implicit_gemm_mma as igm  # noqa: E402
from convsel.backends.opencl import program as prog  # noqa: E402
from convsel.problem import ConvProblem  # noqa: E402

LAYER = ConvProblem(32, 14, 14, 256, 256, 3, 3, pad=1)      # ResNet-50 layer3.x.conv2
STEM = ConvProblem(32, 224, 224, 3, 64, 7, 7, stride=2, pad=3)   # conv1: the flat reduction
V7_TILES = ((128, 64, 2, 1), (64, 128, 1, 2), (256, 128, 4, 2), (256, 64, 4, 1), (64, 64, 1, 1))
# (tile, register cap): whether ptxas takes implicit_gemm_mma.MAX_REGISTERS (v7: the form
# with a space was refused at build, v4: "=N" accepted and ignored)
REGISTER_CAPS = (((128, 64, 2, 2), 128), ((64, 64, 2, 2), 128), ((64, 64, 2, 2), 96),
                 ((128, 128, 2, 2), 168))
FRAG2_TILES = ((128, 64, 2, 2), (128, 128, 2, 2), (64, 64, 2, 2), (128, 128, 4, 4))
PTXAS_LINE = re.compile(r"(entry function '\w+'|Used \d+ registers.*|\d+ bytes stack frame.*)")


def build_log(runtime, source: str, options: list[str]) -> str:
    import pyopencl as cl

    program = cl.Program(runtime.context, source).build(options=options)
    return str(program.get_build_info(runtime.device, cl.program_build_info.LOG))


def report(log: str) -> str:
    found = [m.group(1).strip() for m in PTXAS_LINE.finditer(log)]
    return "; ".join(found) if found else f"(no ptxas lines; log: {log.strip()[:300]!r})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runtime = get_runtime(None)
    if not mma.tensor_cores(runtime).ok:
        print(f"no tensor cores here: {mma.tensor_cores(runtime).reason}")
        return 0
    source = prog.program_source("implicit_gemm_mma", preamble=prog.kernel_source("mma"),
                                 after=("splitk",))
    started, lines = time.perf_counter(), []
    # (layer, math, tile, load, FRAG2, warps_k, ROLL_KSTEPS[, register cap]): v7's register
    # caps, its 64x64-warp tiles and the async tiles with their k-steps rolled or not first,
    # then sliced K, every tile and pipeline on layer3's 3x3, then FRAG2 on a few, then the
    # stem's flat reduction
    cases = [("layer3.conv2", LAYER, m, t, "async", False, 1, False, cap)
             for m in mma.MATH_MODES for t, cap in REGISTER_CAPS]
    cases += [("layer3.conv2", LAYER, m, t, "async", False, 1, roll) for m in mma.MATH_MODES
              for t in (*MMA_ASYNC_TILES, *V7_TILES) for roll in (False, True)]
    cases += [("layer3.conv2", LAYER, m, t, load, False, 2, False) for m in mma.MATH_MODES
              for t in MMA_SLICED_TILES for load in ("registers", "async")]
    cases += [("layer3.conv2", LAYER, m, t, load, False, 1, False) for m in mma.MATH_MODES
              for t in MMA_TILES for load in ("registers", "async")]
    cases += [("layer3.conv2", LAYER, m, t, load, True, 1, False) for m in mma.MATH_MODES
              for t in FRAG2_TILES for load in ("registers", "async")]
    cases += [("conv1", STEM, m, t, "registers", False, 1, False) for m in mma.MATH_MODES
              for t in MMA_TILES]
    for name, layer, math_mode, tile, load, frag2, warps_k, roll, *cap in cases:
        what = (f"{name} {math_mode} mma={'x'.join(map(str, tile))} {load} frag2={int(frag2)} "
                f"warps_k={warps_k} roll={int(roll)} cap={cap[0] if cap else None}")
        if time.perf_counter() - started > args.budget_s:
            lines.append(f"budget ran out before {what}")
            break
        p = layer.replace(dtype="F16" if math_mode == "f16" else "F32", fast_math=True)
        params: dict = {"math": math_mode, "mma": tile, "load": load, "warps_k": warps_k}
        if tile in V7_TILES:
            params.update(slice=32, stages=2)
        verdict = igm.supports(p, params, runtime)
        if not verdict.ok:
            lines.append(f"{what}: not run here: {verdict.reason}")
            continue
        defaults = igm.FRAG2, igm.ROLL_KSTEPS, igm.MAX_REGISTERS
        igm.FRAG2, igm.ROLL_KSTEPS = frag2, roll
        igm.MAX_REGISTERS = cap[0] if cap else None
        try:
            config = igm.configure(p, params, runtime)
            options = igm.build_options(p, config, None, emulate=False)
        finally:
            igm.FRAG2, igm.ROLL_KSTEPS, igm.MAX_REGISTERS = defaults
        log = build_log(runtime, source, [*options, "-cl-nv-verbose"])
        lines.append(f"{what} slice={config.slice_words} stages={config.stages}: "
                     f"{report(log)}")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
