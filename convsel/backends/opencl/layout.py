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


class Transposer:
    """``dst[n][b][a] = src[n][a][b]`` for a (batches, a_len, b_len) ``src``: NCHW -> NHWC is
    (N, C, H*W), NHWC -> NCHW is (N, H*W, C).

    One kernel object, made once: creating one costs ~0.25 ms on NVIDIA's driver, six times
    the transpose of a 25 MB tensor. Its arguments are set at each enqueue, so the caller
    serialises enqueues (the prepared convolution's lock)."""

    def __init__(self, runtime: Runtime, itemsize: int) -> None:
        self.tile = TILE if runtime.device.max_work_group_size >= TILE * TILE else 8
        program = runtime.program(kernel_source("layout"),
                                  (f"-DELEM_T={_BIT_COPY[itemsize]}", f"-DTILE={self.tile}"))
        self.kernel = cl.Kernel(program, "swap_last2")

    def enqueue(self, queue: cl.CommandQueue, src: cl.Buffer, dst: cl.Buffer, batches: int,
                a_len: int, b_len: int, wait_for: Sequence[cl.Event] = ()) -> cl.Event:
        t = self.tile
        self.kernel.set_args(src, dst, np.int32(a_len), np.int32(b_len))
        gws = (math.ceil(b_len / t) * t, math.ceil(a_len / t) * t, batches)
        return cl.enqueue_nd_range_kernel(queue, self.kernel, gws, (t, t, 1),
                                          wait_for=list(wait_for) or None)
