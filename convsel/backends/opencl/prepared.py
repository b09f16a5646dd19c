"""What every OpenCL algorithm shares: buffer planning and checks, and the prepared kernel.

An algorithm module plans its buffers (checked against the device's limits before anything
is allocated or launched), builds its programs, binds arguments once, and hands back an
:class:`OpenCLKernel`: ``run(x)`` uploads a numpy x, launches the steps and reads y back;
``run_device(x)`` runs on ``pyopencl.array.Array`` s without touching the host or blocking.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyopencl as cl

from ...errors import InvalidProblemError, KernelBuildError, UnsupportedError
from ...problem import ConvProblem
from ...verdict import Verdict, failed, passed
from .runtime import KernelLaunchError, Runtime

NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16}


@dataclass
class Step:
    """One launch: a kernel with its arguments bound, its global size and tuner id."""

    name: str
    kernel: cl.Kernel
    gws: tuple[int, int, int]
    config_id: str


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


def bind(program: cl.Program, name: str, args: Sequence[Any]) -> cl.Kernel:
    """A fresh kernel object (each prepared conv owns its arguments) with ``args`` bound;
    Python ints become cl_int."""
    try:
        kernel = cl.Kernel(program, name)
        values = [np.int32(a) if isinstance(a, (int, np.integer)) else a for a in args]
        kernel.set_args(*values)
        # Kept so a device-resident run can bind the caller's buffers in place of x and y.
        setattr(kernel, "bound_args", tuple(values))  # noqa: B010 - not a declared attribute
    except cl.Error as exc:   # a program that built but holds no usable kernel of that name
        raise KernelBuildError(f"kernel {name} cannot be created from its built program",
                               log=str(exc)) from exc
    return kernel


# Tests set this to NaN: the output buffer (the kernel's own, or the caller's on the device
# path) is then filled with it before every run, so an element a kernel never writes shows up
# instead of a stale value from the previous run.
OUTPUT_FILL: float | None = None


def _padded(gws: tuple[int, int, int], lws: tuple[int, int, int] | None) -> tuple[int, ...]:
    # Kernels bound-check their ids; OpenCL 1.2 needs the global size a multiple of the local.
    return gws if lws is None else tuple(math.ceil(g / s) * s for g, s in zip(gws, lws))


def _out_of_order(queue: cl.CommandQueue) -> bool:
    return bool(queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)


class OpenCLKernel:
    """A convolution prepared on one device: ``run(x_nhwc) -> y_nhwc`` on host arrays, and
    :meth:`run_device` on ``pyopencl.array.Array`` s that stay on the device.

    Weights and workspace live on the device for the kernel's lifetime. A device run binds
    the caller's buffers as the kernels' input and output (under the lock, restored after
    enqueueing: OpenCL latches argument values at enqueue), so in-flight runs share no
    input or output buffer; they do share the workspace, so a run waits for the previous
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
        self.steps = steps
        self.workspace_bytes = int(workspace_bytes)
        self.last_events: list[tuple[str, cl.Event]] = []
        self._x, self._y = x_buf, y_buf
        self._keep = list(keep)          # weights, workspace: alive as long as the kernel
        self._dtype = NUMPY_DTYPES[problem.dtype]
        p = problem
        self._in_shape = (p.n, p.h, p.w, p.c)
        self._out_shape = (p.n, p.out_h, p.out_w, p.k)
        self._out_bytes = int(np.prod(self._out_shape)) * np.dtype(self._dtype).itemsize
        self._in_bytes = int(np.prod(self._in_shape)) * np.dtype(self._dtype).itemsize
        self._lock = threading.Lock()
        self._last: tuple[cl.Event, cl.CommandQueue] | None = None
        self._layout_kernel: Any = None      # made at the first NCHW device-resident run

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
        q = self._queue(queue)
        with self._lock:
            with self._launch_errors(q):
                upload = cl.enqueue_copy(q, self._x, x, is_blocking=False,
                                         wait_for=self._waits(q, wait_for))
                done = self._enqueue(q, self._x, self._y, [upload])
                cl.enqueue_copy(q, y, self._y, is_blocking=True, wait_for=[done])
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
        nchw = self.problem.layout == "NCHW"
        x_arr = self._device_array("x", x, self._nchw(self._in_shape) if nchw else
                                   self._in_shape, shape)
        q = self._queue(queue if queue is not None else x_arr.queue)
        y_arr = self._output_array(out, x_arr, q, self._nchw(self._out_shape) if nchw else
                                   self._out_shape)
        waits = [*(wait_for or ()), *x_arr.events, *y_arr.events]
        if not nchw:
            return self._run_nhwc(x_arr, y_arr, q, waits)
        return self._run_nchw(x_arr, y_arr, q, waits)

    def _run_nhwc(self, x_arr: Any, y_arr: Any, q: cl.CommandQueue,
                  waits: list[cl.Event]) -> Any:
        with self._lock:
            with self._launch_errors(q):
                done = self._enqueue(q, cast(cl.Buffer, x_arr.base_data),
                                     cast(cl.Buffer, y_arr.base_data), self._waits(q, waits))
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
        with self._lock:
            with self._launch_errors(q):
                x_nhwc, y_nhwc = self._x, self._y
                swap = self._transposer()
                into = swap.enqueue(q, cast(cl.Buffer, x_arr.base_data), x_nhwc, n, c, h * w,
                                    self._waits(q, waits))
                conv = self._enqueue(q, x_nhwc, y_nhwc, [into])
                done = swap.enqueue(q, y_nhwc, cast(cl.Buffer, y_arr.base_data), n,
                                    plane_out, k, [conv])
                self._last = (done, q)
                q.flush()
        y_arr.add_event(done)
        return y_arr

    def _transposer(self) -> Any:
        """The NCHW <-> NHWC kernel, made at the first NCHW device run (lock held)."""
        if self._layout_kernel is None:
            from .layout import Transposer

            self._layout_kernel = Transposer(self.runtime, np.dtype(self._dtype).itemsize)
        return self._layout_kernel

    @staticmethod
    def _nchw(nhwc: tuple[int, ...]) -> tuple[int, ...]:
        n, h, w, c = nhwc
        return (n, c, h, w)

    def _output_array(self, out: Any, x_arr: Any, q: cl.CommandQueue,
                      expected: tuple[int, ...]) -> Any:
        import pyopencl.array as cl_array

        if out is None:
            return cl_array.empty(q, expected, self._dtype)
        if isinstance(out, cl.Buffer):
            raise InvalidProblemError("out", "cl.Buffer", "out must be a pyopencl.array.Array: "
                                      "wrap the buffer as pyopencl.array.Array(queue, shape, "
                                      "dtype, data=buffer)")
        y_arr = self._device_array("out", out, expected, None)
        if y_arr.base_data.int_ptr == x_arr.base_data.int_ptr:
            raise InvalidProblemError("out", "the buffer of x", "the output must not "
                                      "share memory with the input")
        return y_arr

    def _device_array(self, name: str, value: Any, expected: tuple[int, ...],
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
            nbytes = int(np.prod(expected)) * np.dtype(self._dtype).itemsize
            if value.size < nbytes:
                raise InvalidProblemError(name, f"{value.size} bytes", f"the buffer must "
                                          f"hold {nbytes} bytes ({expected} {self.problem.dtype})")
            self._check_context(name, value.context)
            return cl_array.Array(value.context, expected, self._dtype, data=value)
        if not isinstance(value, cl_array.Array):
            raise InvalidProblemError(name, type(value).__name__, "expected a "
                                      "pyopencl.array.Array or a cl.Buffer with shape=")
        self._check_context(name, cast(cl.Context, value.context))
        if value.shape != expected:
            raise InvalidProblemError(name, value.shape, f"expected {layout} shape {expected}")
        if value.dtype != self._dtype:
            raise InvalidProblemError(name, str(value.dtype), f"device arrays must be "
                                      f"{np.dtype(self._dtype).name} for this "
                                      f"{self.problem.dtype} problem (no conversion on the "
                                      "device)")
        if value.offset or not value.flags.c_contiguous:
            raise InvalidProblemError(name, f"offset {value.offset}, strides {value.strides}",
                                      "device arrays must be C-contiguous and start at "
                                      "their buffer's beginning")
        return value

    def _check_context(self, name: str, context: cl.Context) -> None:
        if context != self.runtime.context:
            raise InvalidProblemError(name, "another OpenCL context", "device arrays must "
                                      "live on the prepared convolution's context: make them "
                                      "with its queue (op.queue)")

    def _queue(self, queue: cl.CommandQueue | None) -> cl.CommandQueue:
        if queue is None:
            return self.runtime.queue
        if queue.context != self.runtime.context:
            raise InvalidProblemError("queue", "another OpenCL context", "the queue must "
                                      "belong to the prepared convolution's context")
        return queue

    # -- launching ----------------------------------------------------------------------
    def _waits(self, queue: cl.CommandQueue, waits: Sequence[cl.Event] | None,
               ) -> list[cl.Event]:
        """``waits`` plus the previous run's last event where ``queue`` would not order the
        two runs' uses of the shared workspace."""
        out = list(waits or ())
        if self._last is not None:
            event, last_queue = self._last
            if last_queue != queue or _out_of_order(queue):
                out.append(event)
        return out

    def _enqueue(self, queue: cl.CommandQueue, x_buf: cl.Buffer, y_buf: cl.Buffer,
                 waits: list[cl.Event]) -> cl.Event:
        """Enqueue the steps reading ``x_buf`` and writing ``y_buf``; their last event.
        Called with the lock held."""
        ooo = _out_of_order(queue)
        # Local sizes first, with the kernel's own buffers bound: a tuning run may launch.
        sizes = [self._local_size(step) for step in self.steps]
        io = self._io_arguments()
        direct = io is not None or (x_buf is self._x and y_buf is self._y)
        events: list[tuple[str, cl.Event]] = []
        if not direct:     # a step not made by bind(): go through the kernel's own buffers
            waits = [cl.enqueue_copy(queue, self._x, x_buf, byte_count=self._in_bytes,
                                     wait_for=waits or None)]
            events.append(("copy_in", waits[0]))    # part of this run's device time
            x_run, y_run = self._x, self._y
        else:
            x_run, y_run = x_buf, y_buf
        self._bind(io, x_run, y_run)
        try:
            last = None
            if OUTPUT_FILL is not None:
                pattern = np.array([OUTPUT_FILL], dtype=self._dtype)
                last = cl.enqueue_fill_buffer(queue, y_run, pattern, 0, self._out_bytes,
                                              wait_for=waits or None)
                waits = [last] if ooo else []
            for step, lws in zip(self.steps, sizes):
                last = cl.enqueue_nd_range_kernel(queue, step.kernel, _padded(step.gws, lws),
                                                  lws, wait_for=waits or None)
                events.append((step.name, last))
                waits = [last] if ooo else []
        finally:
            self._bind(io, self._x, self._y)
        if last is None:
            last = cl.enqueue_marker(queue, wait_for=waits or None)
        if not direct:
            last = cl.enqueue_copy(queue, y_buf, self._y, byte_count=self._out_bytes,
                                   wait_for=[last])
            events.append(("copy_out", last))
        self.last_events = events
        self._last = (last, queue)
        return last

    def _local_size(self, step: Step) -> tuple[int, int, int] | None:
        # a kernel compiled for a fixed work-group size (its local-memory tiles assume it)
        # launches at that size; otherwise the tuner's choice, if any
        rt = self.runtime
        fixed = rt.required_local_size(step.kernel)
        if fixed is not None:
            return fixed
        return rt.tuner.local_size(rt, step.kernel, step.gws, step.config_id) \
            if step.config_id else None

    def _io_arguments(self) -> list[tuple[cl.Kernel, int, str]] | None:
        """(kernel, argument index, "x" or "y") of every binding of the kernel's own input
        and output buffers, or None when a step's arguments are unknown (not from bind())."""
        found = []
        for step in self.steps:
            args = getattr(step.kernel, "bound_args", None)
            if args is None:
                return None
            found += [(step.kernel, i, "x" if a is self._x else "y")
                      for i, a in enumerate(args) if a is self._x or a is self._y]
        if self.steps and {which for _, _, which in found} != {"x", "y"}:
            return None       # x or y reaches the kernels some other way (a sub-buffer)
        return found

    @staticmethod
    def _bind(io: list[tuple[cl.Kernel, int, str]] | None, x_buf: cl.Buffer,
              y_buf: cl.Buffer) -> None:
        for kernel, index, which in io or ():
            kernel.set_arg(index, x_buf if which == "x" else y_buf)

    @contextmanager
    def _launch_errors(self, queue: cl.CommandQueue) -> Iterator[None]:
        rt = self.runtime
        try:
            yield
        except cl.Error as exc:
            self._last = None
            reset = queue == rt.queue
            if reset:         # the caller's own queue is the caller's to recover
                rt.recover()
            raise KernelLaunchError(f"OpenCL launch failed on {rt.identity['name']} "
                                    f"({', '.join(s.name for s in self.steps)}): {exc}"
                                    + ("; the queue was reset" if reset else "")) from exc

    def device_timer(self, x: np.ndarray) -> Callable[[], float]:
        """A run on device-resident copies of ``x`` and the output that returns its device
        time in seconds: from the first step's start to the last step's end, by the
        profiling events (so gaps between the steps count, the host's launch and the
        transfers do not). For tuning: every candidate moves the same bytes in and out."""
        import pyopencl.array as cl_array

        with self._launch_errors(self.queue):
            x_dev = cl_array.to_device(self.queue, np.ascontiguousarray(x, dtype=self._dtype))
            y_dev = cl_array.empty(self.queue, self._out_shape, self._dtype)

        def run() -> float:
            self._run_nhwc(x_dev, y_dev, self.queue, [*y_dev.events])
            return self.span_ns() * 1e-9
        return run

    def span_ns(self) -> int:
        """Device time of the latest run from its first step's start to its last step's end
        (ns); waits for the run to finish."""
        events = [e for _, e in self.last_events]
        if not events:
            return 0
        cl.wait_for_events(events)
        return int(max(e.profile.end for e in events) - min(e.profile.start for e in events))

    def kernel_ns(self) -> int:
        """Total device time of the latest run's steps (and of the copies a run through the
        kernel's own buffers needs), from their profiling events (ns); waits for the run to
        finish."""
        events = [e for _, e in self.last_events]
        if events:
            cl.wait_for_events(events)
        return int(sum(e.profile.end - e.profile.start for e in events))
