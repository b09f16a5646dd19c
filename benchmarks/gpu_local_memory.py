"""Whether NVIDIA's OpenCL lets a work-group have more local memory than the 48 KiB it reports
(CL_DEVICE_LOCAL_MEM_SIZE): CUDA kernels opt in to up to 227 KiB per block on an H100, OpenCL
has no such call. Tried two ways, each checked by reading back what was written: a dynamic
``__local`` kernel argument (clSetKernelArg with a size and no value) of growing size, and a
static ``__local`` array of that size in the kernel's source.

    python3 benchmarks/gpu_local_memory.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from convsel.backends.opencl import get_runtime  # noqa: E402

KIB = 1024
SIZES_KIB = (48, 64, 96, 128, 160, 200, 227)
THREADS = 256
SOURCE = """
__kernel void touch(__global uint* out, %s uint words) {
%s
    for (uint i = get_local_id(0); i < words; i += get_local_size(0)) buf[i] = i * 3u + 1u;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint s = 0u;
    for (uint i = get_local_id(0); i < words; i += get_local_size(0)) s += buf[words - 1u - i];
    out[get_global_id(0)] = s;
}
"""


def expected(words: int) -> np.ndarray:
    per = np.zeros(THREADS, np.uint64)
    for t in range(THREADS):
        idx = np.arange(t, words, THREADS, dtype=np.uint64)
        per[t] = np.sum((words - 1 - idx) * 3 + 1)
    return (per % (1 << 32)).astype(np.uint32)


def attempt(runtime, size: int, dynamic: bool) -> str:
    words = size // 4
    if dynamic:
        src = SOURCE % ("__local uint* buf,", "")
    else:
        src = SOURCE % ("", f"    __local uint buf[{words}];")
    try:
        program = cl.Program(runtime.context, src).build()
        kernel = program.touch
        out = cl.Buffer(runtime.context, cl.mem_flags.WRITE_ONLY, THREADS * 4)
        args = [out, cl.LocalMemory(size), np.uint32(words)] if dynamic else \
            [out, np.uint32(words)]
        kernel.set_args(*args)
        cl.enqueue_nd_range_kernel(runtime.queue, kernel, (THREADS,), (THREADS,)).wait()
        got = np.empty(THREADS, np.uint32)
        cl.enqueue_copy(runtime.queue, got, out).wait()
        return "ran, correct" if np.array_equal(got, expected(words)) else "ran, WRONG"
    except cl.Error as exc:
        return f"refused: {str(exc).splitlines()[0][:120]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runtime = get_runtime(None)
    head = f"{runtime.device.name}: CL_DEVICE_LOCAL_MEM_SIZE {runtime.device.local_mem_size}"
    lines = [head + " bytes"]
    for kib in SIZES_KIB:
        for dynamic in (True, False):
            how = "dynamic __local argument" if dynamic else "static __local array"
            lines.append(f"{kib:4d} KiB {how}: {attempt(runtime, kib * KIB, dynamic)}")
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
