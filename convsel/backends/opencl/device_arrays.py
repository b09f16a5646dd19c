"""The caller's device arrays for a prepared convolution: checked, wrapped, never converted.

A device-resident run takes ``pyopencl.array.Array`` s (or a ``cl.Buffer`` with its shape)
in the problem's layout and dtype, on the prepared convolution's context. Anything else is
an InvalidProblemError naming the argument: there is no silent copy or conversion on the
device path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pyopencl as cl

from ...errors import InvalidProblemError
from ...problem import ConvProblem
from .runtime import Runtime


def nchw(nhwc: tuple[int, ...]) -> tuple[int, ...]:
    n, h, w, c = nhwc
    return (n, c, h, w)


class DeviceArrays:
    """Checks the arrays and queues a caller hands to one prepared convolution."""

    def __init__(self, problem: ConvProblem, runtime: Runtime, dtype: Any) -> None:
        self.problem = problem
        self.runtime = runtime
        self.context = runtime.context
        self.dtype = dtype
        p = problem
        in_nhwc, out_nhwc = (p.n, p.h, p.w, p.c), (p.n, p.out_h, p.out_w, p.k)
        layout_nchw = p.layout == "NCHW"
        self.in_shape = nchw(in_nhwc) if layout_nchw else in_nhwc
        self.out_shape = nchw(out_nhwc) if layout_nchw else out_nhwc

    def queue(self, queue: cl.CommandQueue | None) -> cl.CommandQueue:
        """``queue``, checked to be on this context; the runtime's queue when None."""
        if queue is None:
            return self.runtime.queue     # read now: a recovery replaces it
        if queue.context != self.context:
            raise InvalidProblemError("queue", "another OpenCL context", "the queue must "
                                      "belong to the prepared convolution's context")
        return queue

    def input(self, value: Any, shape: Sequence[int] | None) -> Any:
        return self.array("x", value, self.in_shape, shape)

    def output(self, out: Any, x_arr: Any, queue: cl.CommandQueue) -> Any:
        """The array to write: ``out`` checked (not aliasing ``x``), or a new one."""
        import pyopencl.array as cl_array

        if out is None:
            return cl_array.empty(queue, self.out_shape, self.dtype)
        if isinstance(out, cl.Buffer):
            raise InvalidProblemError("out", "cl.Buffer", "out must be a pyopencl.array.Array: "
                                      "wrap the buffer as pyopencl.array.Array(queue, shape, "
                                      "dtype, data=buffer)")
        y_arr = self.array("out", out, self.out_shape, None)
        if y_arr.base_data.int_ptr == x_arr.base_data.int_ptr:
            raise InvalidProblemError("out", "the buffer of x", "the output must not "
                                      "share memory with the input")
        return y_arr

    def array(self, name: str, value: Any, expected: tuple[int, ...],
              shape: Sequence[int] | None) -> Any:
        """``value`` as a C-contiguous Array on this context with ``expected`` shape and the
        problem's dtype, else an InvalidProblemError naming ``name``."""
        import pyopencl.array as cl_array

        layout = self.problem.layout
        if isinstance(value, cl.Buffer):
            if shape is None:
                raise InvalidProblemError("shape", None, f"a cl.Buffer {name} needs shape= "
                                          f"({layout} {expected})")
            if tuple(shape) != expected:
                raise InvalidProblemError("shape", tuple(shape), f"expected {layout} shape "
                                          f"{expected} for {name}")
            nbytes = int(np.prod(expected)) * np.dtype(self.dtype).itemsize
            if value.size < nbytes:
                raise InvalidProblemError(name, f"{value.size} bytes", f"the buffer must "
                                          f"hold {nbytes} bytes ({expected} {self.problem.dtype})")
            self._check_context(name, value.context)
            return cl_array.Array(value.context, expected, self.dtype, data=value)
        if not isinstance(value, cl_array.Array):
            raise InvalidProblemError(name, type(value).__name__, "expected a "
                                      "pyopencl.array.Array or a cl.Buffer with shape=")
        self._check_context(name, cast(cl.Context, value.context))
        if value.shape != expected:
            raise InvalidProblemError(name, value.shape, f"expected {layout} shape {expected}")
        if value.dtype != self.dtype:
            raise InvalidProblemError(name, str(value.dtype), f"device arrays must be "
                                      f"{np.dtype(self.dtype).name} for this "
                                      f"{self.problem.dtype} problem (no conversion on the "
                                      "device)")
        if value.offset or not value.flags.c_contiguous:
            raise InvalidProblemError(name, f"offset {value.offset}, strides {value.strides}",
                                      "device arrays must be C-contiguous and start at "
                                      "their buffer's beginning")
        return value

    def _check_context(self, name: str, context: cl.Context) -> None:
        if context != self.context:
            raise InvalidProblemError(name, "another OpenCL context", "device arrays must "
                                      "live on the prepared convolution's context: make them "
                                      "with its queue (op.queue)")
