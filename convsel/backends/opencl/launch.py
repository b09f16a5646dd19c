"""Launching a prepared convolution's steps on a queue, and reading their device time.

A :class:`Step` is one kernel with its arguments bound (by :func:`bind`), its global size and
its tuner id. A :class:`Launcher` enqueues an op's steps reading any input buffer and writing
any output buffer: it rebinds the op's own buffers to the caller's for the enqueue (OpenCL
latches argument values at enqueue) and orders runs that share the op's workspace. What the
caller's buffers are, and whether they are valid, is :mod:`.device_arrays`' business.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from ...errors import KernelBuildError
from .runtime import KernelLaunchError, Runtime

Lws = tuple[int, int, int]
IoBinding = list[tuple[cl.Kernel, int, str]]


@dataclass
class Step:
    """One launch: a kernel with its arguments bound, its global size and tuner id."""

    name: str
    kernel: cl.Kernel
    gws: tuple[int, int, int]
    config_id: str


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


def padded(gws: tuple[int, int, int], lws: Lws | None) -> tuple[int, ...]:
    # Kernels bound-check their ids; OpenCL 1.2 needs the global size a multiple of the local.
    return gws if lws is None else tuple(math.ceil(g / s) * s for g, s in zip(gws, lws))


def out_of_order(queue: cl.CommandQueue) -> bool:
    return bool(queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)


class Launcher:
    """Enqueues one op's steps; keeps the events of the latest run.

    ``x_buf``/``y_buf`` are the op's own input and output buffers, which its steps were bound
    to. ``lock`` serialises enqueues (arguments are rebound around each one) and guards the
    op's own buffers and workspace; the caller holds it around :meth:`enqueue`.
    """

    def __init__(self, runtime: Runtime, steps: list[Step], x_buf: cl.Buffer,
                 y_buf: cl.Buffer, in_bytes: int, out_bytes: int, dtype: Any) -> None:
        self.runtime = runtime
        self.steps = steps
        self.x_buf, self.y_buf = x_buf, y_buf
        self.in_bytes, self.out_bytes = int(in_bytes), int(out_bytes)
        self.dtype = dtype
        self.lock = threading.Lock()
        self.last_events: list[tuple[str, cl.Event]] = []
        self._last: tuple[cl.Event, cl.CommandQueue] | None = None

    def waits(self, queue: cl.CommandQueue, waits: Sequence[cl.Event] | None,
              ) -> list[cl.Event]:
        """``waits`` plus the previous run's last event where ``queue`` would not order the
        two runs' uses of the shared workspace."""
        out = list(waits or ())
        if self._last is not None:
            event, last_queue = self._last
            if last_queue != queue or out_of_order(queue):
                out.append(event)
        return out

    def finished_at(self, event: cl.Event, queue: cl.CommandQueue) -> None:
        """Record the last event of work that used the op's buffers (a caller's extra step,
        such as a layout transpose after the run), so the next run waits for it."""
        self._last = (event, queue)

    def enqueue(self, queue: cl.CommandQueue, x_buf: cl.Buffer, y_buf: cl.Buffer,
                waits: list[cl.Event], fill: float | None) -> cl.Event:
        """Enqueue the steps reading ``x_buf`` and writing ``y_buf`` (``y`` filled with
        ``fill`` first, when given); their last event. Called with the lock held."""
        ooo = out_of_order(queue)
        # Local sizes first, with the kernel's own buffers bound: a tuning run may launch.
        sizes = [self.local_size(step) for step in self.steps]
        io = self.io_arguments()
        direct = io is not None or (x_buf is self.x_buf and y_buf is self.y_buf)
        events: list[tuple[str, cl.Event]] = []
        if not direct:     # a step not made by bind(): go through the kernel's own buffers
            waits = [cl.enqueue_copy(queue, self.x_buf, x_buf, byte_count=self.in_bytes,
                                     wait_for=waits or None)]
            events.append(("copy_in", waits[0]))    # part of this run's device time
            x_run, y_run = self.x_buf, self.y_buf
        else:
            x_run, y_run = x_buf, y_buf
        self._bind(io, x_run, y_run)
        try:
            last = None
            if fill is not None:
                pattern = np.array([fill], dtype=self.dtype)
                last = cl.enqueue_fill_buffer(queue, y_run, pattern, 0, self.out_bytes,
                                              wait_for=waits or None)
                waits = [last] if ooo else []
            for step, lws in zip(self.steps, sizes):
                last = cl.enqueue_nd_range_kernel(queue, step.kernel, padded(step.gws, lws),
                                                  lws, wait_for=waits or None)
                events.append((step.name, last))
                waits = [last] if ooo else []
        finally:
            self._bind(io, self.x_buf, self.y_buf)
        if last is None:
            last = cl.enqueue_marker(queue, wait_for=waits or None)
        if not direct:
            last = cl.enqueue_copy(queue, y_buf, self.y_buf, byte_count=self.out_bytes,
                                   wait_for=[last])
            events.append(("copy_out", last))
        self.last_events = events
        self._last = (last, queue)
        return last

    def local_size(self, step: Step) -> Lws | None:
        # a kernel compiled for a fixed work-group size (its local-memory tiles assume it)
        # launches at that size; otherwise the tuner's choice, if any
        rt = self.runtime
        fixed = rt.required_local_size(step.kernel)
        if fixed is not None:
            return fixed
        return rt.tuner.local_size(rt, step.kernel, step.gws, step.config_id) \
            if step.config_id else None

    def io_arguments(self) -> IoBinding | None:
        """(kernel, argument index, "x" or "y") of every binding of the op's own input and
        output buffers, or None when a step's arguments are unknown (not from bind())."""
        found = []
        for step in self.steps:
            args = getattr(step.kernel, "bound_args", None)
            if args is None:
                return None
            found += [(step.kernel, i, "x" if a is self.x_buf else "y")
                      for i, a in enumerate(args) if a is self.x_buf or a is self.y_buf]
        if self.steps and {which for _, _, which in found} != {"x", "y"}:
            return None       # x or y reaches the kernels some other way (a sub-buffer)
        return found

    @staticmethod
    def _bind(io: IoBinding | None, x_buf: cl.Buffer, y_buf: cl.Buffer) -> None:
        for kernel, index, which in io or ():
            kernel.set_arg(index, x_buf if which == "x" else y_buf)

    @contextmanager
    def errors(self, queue: cl.CommandQueue) -> Iterator[None]:
        """A failed enqueue or transfer becomes a KernelLaunchError; on the runtime's own
        queue the runtime gets a fresh queue (a caller's queue is the caller's to recover)."""
        rt = self.runtime
        try:
            yield
        except cl.Error as exc:
            self._last = None
            reset = queue == rt.queue
            if reset:
                rt.recover()
            raise KernelLaunchError(f"OpenCL launch failed on {rt.identity['name']} "
                                    f"({', '.join(s.name for s in self.steps)}): {exc}"
                                    + ("; the queue was reset" if reset else "")) from exc

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
        op's own buffers needs), from their profiling events (ns); waits for the run."""
        events = [e for _, e in self.last_events]
        if events:
            cl.wait_for_events(events)
        return int(sum(e.profile.end - e.profile.start for e in events))
