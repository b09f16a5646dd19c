"""NCHW <-> NHWC on the device: the convolutions compute in NHWC, so a device-resident run of
an NCHW problem transposes its input into a scratch NHWC array and the NHWC result into the
caller's NCHW output (:meth:`OpenCLKernel.run_device`), each one tiled pass over the tensor."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyopencl as cl

from .program import kernel_source
from .runtime import Runtime

TILE = 16
_BIT_COPY = {2: "ushort", 4: "uint"}     # element size -> an OpenCL type that moves its bits


def swap_last2(runtime: Runtime, queue: cl.CommandQueue, src: cl.Buffer, dst: cl.Buffer,
               batches: int, a_len: int, b_len: int, itemsize: int,
               wait_for: Sequence[cl.Event] = ()) -> cl.Event:
    """Enqueue ``dst[n][b][a] = src[n][a][b]`` for (batches, a_len, b_len) ``src``.
    NCHW -> NHWC is (N, C, H*W); NHWC -> NCHW is (N, H*W, C)."""
    tile = TILE if runtime.device.max_work_group_size >= TILE * TILE else 8
    program = runtime.program(kernel_source("layout"),
                              (f"-DELEM_T={_BIT_COPY[itemsize]}", f"-DTILE={tile}"))
    kernel = cl.Kernel(program, "swap_last2")
    kernel.set_args(src, dst, np.int32(a_len), np.int32(b_len))
    gws = (math.ceil(b_len / tile) * tile, math.ceil(a_len / tile) * tile, batches)
    return cl.enqueue_nd_range_kernel(queue, kernel, gws, (tile, tile, 1),
                                      wait_for=list(wait_for) or None)
