"""What every OpenCL algorithm shares: buffer planning and checks, and the prepared kernel.

An algorithm module plans its buffers (checked against the device's limits before anything
is allocated or launched), builds its programs, binds arguments once (:func:`.launch.bind`),
and hands back an :class:`OpenCLKernel`: ``run(x)`` uploads a numpy x, launches the steps and
reads y back; ``run_device(x)`` runs on ``pyopencl.array.Array`` s without touching the host
or blocking. The kernel's two halves live beside it: launching (:mod:`.launch`) and the
caller's device arrays (:mod:`.device_arrays`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyopencl as cl

from ...errors import InvalidProblemError, UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed, passed
from .device_arrays import DeviceArrays
from .launch import Launcher, Step
from .runtime import Runtime

NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16}


@dataclass
class BufferPlan:
    """Bytes and element counts of every device buffer an algorithm needs."""

    sizes: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, count: int, item_bytes: int) -> BufferPlan:
        self.counts[name] = int(count)
        self.sizes[name] = int(count) * item_bytes
        return self


def io_plan(p: ConvProblem) -> BufferPlan:
    """Input, output and weights, which every algorithm holds on the device."""
    size = p.element_size
    return (BufferPlan().add("x", p.n * p.h * p.w * p.c, size)
            .add("y", p.n * p.out_h * p.out_w * p.k, size)
            .add("w", p.k * p.kh * p.kw * (p.c // p.groups), size))


def plan_verdict(p: ConvProblem, plan: BufferPlan, runtime: Runtime) -> Verdict:
    if p.dtype not in NUMPY_DTYPES:
        return failed(f"the OpenCL backend runs F32 and F16, not {p.dtype}")
    why = runtime.check_buffers(plan.sizes, plan.counts)
    return failed(why) if why else passed("buffers fit the device")


def check_plan(p: ConvProblem, plan: BufferPlan, runtime: Runtime, algorithm: str) -> None:
    """Raise UnsupportedError, before any allocation or launch, if the plan does not fit."""
    verdict = plan_verdict(p, plan, runtime)
    if not verdict.ok:
        raise UnsupportedError(f"opencl {algorithm} on {runtime.identity['name']}: "
                               f"{verdict.reason}", algorithm=algorithm, backend="opencl")


def bias_buffer(runtime: Runtime, bias: np.ndarray | None, dtype: Any) -> cl.Buffer:
    """The bias on the device; a one-element dummy when there is none (HAS_BIAS unset)."""
    if bias is None:
        return runtime.buffer(2)
    return runtime.buffer(0, np.ascontiguousarray(bias, dtype=dtype))


def bias_options(bias: np.ndarray | None) -> list[str]:
    return ["-DHAS_BIAS"] if bias is not None else []


# Tests set this to NaN: the output buffer (the kernel's own, or the caller's on the device
# path) is then filled with it before every run, so an element a kernel never writes shows up
# instead of a stale value from the previous run.
OUTPUT_FILL: float | None = None


class OpenCLKernel:
    """A convolution prepared on one device: ``run(x_nhwc) -> y_nhwc`` on host arrays, and
    :meth:`run_device` on ``pyopencl.array.Array`` s that stay on the device.

    Two parts: a :class:`~.launch.Launcher` enqueues the steps (binding the caller's buffers
    as the kernels' input and output, ordering runs that share the workspace) and a
    :class:`~.device_arrays.DeviceArrays` checks what a device-resident caller hands in.
    Weights and workspace live on the device for the kernel's lifetime. In-flight runs share
    no input or output buffer; they do share the workspace, so a run waits for the previous
    run's last event whenever the queue alone would not order them (another queue, or an
    out-of-order one).

    ``last_events`` holds (step name, event) of the latest run; :meth:`kernel_ns` needs a
    profiling queue (the runtime's is one). A failed launch or transfer on the runtime's
    queue gives the runtime a fresh queue and raises :class:`KernelLaunchError`.
    """

    def __init__(self, runtime: Runtime, problem: ConvProblem, x_buf: cl.Buffer,
                 y_buf: cl.Buffer, steps: list[Step], workspace_bytes: int,
                 keep: Sequence[cl.Buffer] = ()) -> None:
        self.runtime = runtime
        self.problem = problem
        self.workspace_bytes = int(workspace_bytes)
        self._keep = list(keep)          # weights, workspace: alive as long as the kernel
        self._dtype = NUMPY_DTYPES[problem.dtype]
        p, itemsize = problem, np.dtype(self._dtype).itemsize
        self._in_shape = (p.n, p.h, p.w, p.c)
        self._out_shape = (p.n, p.out_h, p.out_w, p.k)
        self.launcher = Launcher(runtime, steps, x_buf, y_buf,
                                 int(np.prod(self._in_shape)) * itemsize,
                                 int(np.prod(self._out_shape)) * itemsize, self._dtype)
        self.arrays = DeviceArrays(problem, runtime, self._dtype)
        self._layout_kernel: Any = None      # made at the first NCHW device-resident run

    @property
    def steps(self) -> list[Step]:
        return self.launcher.steps

    @steps.setter
    def steps(self, steps: list[Step]) -> None:
        self.launcher.steps = steps

    @property
    def last_events(self) -> list[tuple[str, cl.Event]]:
        return self.launcher.last_events

    @property
    def queue(self) -> cl.CommandQueue:
        """The runtime's queue: the default for runs, shared by every kernel on the device."""
        return self.runtime.queue

    @property
    def context(self) -> cl.Context:
        return self.runtime.context

    # -- host arrays --------------------------------------------------------------------
    def run(self, x: np.ndarray, *, queue: cl.CommandQueue | None = None,
            wait_for: Sequence[cl.Event] | None = None) -> np.ndarray:
        """Upload ``x``, run, read ``y`` back; blocks until ``y`` is on the host."""
        if x.shape != self._in_shape:
            raise InvalidProblemError("x", x.shape, f"expected NHWC shape {self._in_shape}")
        x = np.ascontiguousarray(x, dtype=self._dtype)
        y = np.empty(self._out_shape, dtype=self._dtype)
        q = self.arrays.queue(queue)
        go = self.launcher
        with go.lock, go.errors(q):
            upload = cl.enqueue_copy(q, go.x_buf, x, is_blocking=False,
                                     wait_for=go.waits(q, wait_for))
            done = go.enqueue(q, go.x_buf, go.y_buf, [upload], OUTPUT_FILL)
            cl.enqueue_copy(q, y, go.y_buf, is_blocking=True, wait_for=[done])
        return y

    # -- device arrays ------------------------------------------------------------------
    def run_device(self, x: Any, *, out: Any = None, queue: cl.CommandQueue | None = None,
                   wait_for: Sequence[cl.Event] | None = None,
                   shape: Sequence[int] | None = None) -> Any:
        """Convolve a device array (or a ``cl.Buffer`` with ``shape``) in the problem's
        layout; returns the output ``pyopencl.array.Array`` (``out`` when given) once
        enqueued, without blocking.

        The queue is ``queue``, else ``x``'s, else the runtime's. The run waits for
        ``wait_for`` and the events of ``x`` and ``out`` (pyopencl's ``Array.events``), and
        its last event is added to the output's events. An NCHW problem's arrays are NCHW:
        they are transposed to and from NHWC scratch arrays on the device around the run.
        """
        x_arr = self.arrays.input(x, shape)
        q = self.arrays.queue(queue if queue is not None else x_arr.queue)
        y_arr = self.arrays.output(out, x_arr, q)
        waits = [*(wait_for or ()), *x_arr.events, *y_arr.events]
        if self.problem.layout != "NCHW":
            return self._run_nhwc(x_arr, y_arr, q, waits)
        return self._run_nchw(x_arr, y_arr, q, waits)

    def _run_nhwc(self, x_arr: Any, y_arr: Any, q: cl.CommandQueue,
                  waits: list[cl.Event]) -> Any:
        go = self.launcher
        with go.lock, go.errors(q):
            done = go.enqueue(q, cast(cl.Buffer, x_arr.base_data),
                              cast(cl.Buffer, y_arr.base_data), go.waits(q, waits),
                              OUTPUT_FILL)
            q.flush()      # start the device now, as ACL's scheduler does by default
        y_arr.add_event(done)
        return y_arr

    def _run_nchw(self, x_arr: Any, y_arr: Any, q: cl.CommandQueue,
                  waits: list[cl.Event]) -> Any:
        """Transpose x into the kernel's own NHWC input buffer, run, transpose its NHWC
        output into y: all three under the lock (those buffers are the op's, like the
        workspace: a later run on another queue waits for this one's last transpose). A
        fresh NHWC pair per run measured slower than both transposes on the H100."""
        (n, h, w, c), k = self._in_shape, self._out_shape[3]
        plane_out = self._out_shape[1] * self._out_shape[2]
        go = self.launcher
        with go.lock, go.errors(q):
            swap = self._transposer()
            into = swap.enqueue(q, cast(cl.Buffer, x_arr.base_data), go.x_buf, n, c, h * w,
                                go.waits(q, waits))
            conv = go.enqueue(q, go.x_buf, go.y_buf, [into], OUTPUT_FILL)
            done = swap.enqueue(q, go.y_buf, cast(cl.Buffer, y_arr.base_data), n,
                                plane_out, k, [conv])
            go.finished_at(done, q)
            q.flush()
        y_arr.add_event(done)
        return y_arr

    def _transposer(self) -> Any:
        """The NCHW <-> NHWC kernel, made at the first NCHW device run (lock held)."""
        if self._layout_kernel is None:
            from .layout import Transposer

            self._layout_kernel = Transposer(self.runtime, np.dtype(self._dtype).itemsize)
        return self._layout_kernel

    # -- timing -------------------------------------------------------------------------
    def device_timer(self, x: np.ndarray) -> Callable[[], float]:
        """A run on device-resident copies of ``x`` and the output that returns its device
        time in seconds: from the first step's start to the last step's end, by the
        profiling events (so gaps between the steps count, the host's launch and the
        transfers do not). For tuning: every candidate moves the same bytes in and out."""
        import pyopencl.array as cl_array

        with self.launcher.errors(self.queue):
            x_dev = cl_array.to_device(self.queue, np.ascontiguousarray(x, dtype=self._dtype))
            y_dev = cl_array.empty(self.queue, self._out_shape, self._dtype)

        def run() -> float:
            self._run_nhwc(x_dev, y_dev, self.queue, [*y_dev.events])
            return self.span_ns() * 1e-9
        return run

    def span_ns(self) -> int:
        """Device time of the latest run from its first step's start to its last step's end
        (ns); waits for the run to finish."""
        return self.launcher.span_ns()

    def kernel_ns(self) -> int:
        """Total device time of the latest run's steps (and of the copies a run through the
        kernel's own buffers needs), from their profiling events (ns); waits for the run."""
        return self.launcher.kernel_ns()
