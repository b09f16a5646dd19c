"""What every OpenCL algorithm shares: buffer planning and checks, and the prepared kernel.

An algorithm module plans its buffers (checked against the device's limits before anything
is allocated or launched), builds its programs, binds arguments once, and hands back an
:class:`OpenCLKernel` whose ``run(x)`` uploads x, launches the steps and reads y back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
        kernel.set_args(*[np.int32(a) if isinstance(a, (int, np.integer)) else a for a in args])
    except cl.Error as exc:   # a program that built but holds no usable kernel of that name
        raise KernelBuildError(f"kernel {name} cannot be created from its built program",
                               log=str(exc)) from exc
    return kernel


# Tests set this to NaN: the device output buffer is then filled with it before every run, so
# an element a kernel never writes shows up instead of a stale value from the previous run.
OUTPUT_FILL: float | None = None


class OpenCLKernel:
    """A convolution prepared on one device: ``run(x_nhwc) -> y_nhwc``.

    ``last_events`` holds (step name, profiling event) of the latest run, for kernel times.
    A failed launch or transfer gives the runtime a fresh queue and raises
    :class:`KernelLaunchError`; the next call runs normally.
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
        self._lock = threading.Lock()

    def run(self, x: np.ndarray) -> np.ndarray:
        if x.shape != self._in_shape:
            raise InvalidProblemError("x", x.shape, f"expected NHWC shape {self._in_shape}")
        x = np.ascontiguousarray(x, dtype=self._dtype)
        y = np.empty(self._out_shape, dtype=self._dtype)
        rt = self.runtime
        with self._lock:
            try:
                cl.enqueue_copy(rt.queue, self._x, x, is_blocking=True)
                if OUTPUT_FILL is not None:
                    pattern = np.array([OUTPUT_FILL], dtype=self._dtype)
                    cl.enqueue_fill_buffer(rt.queue, self._y, pattern, 0, y.nbytes)
                events = [(s.name, rt.enqueue(s.kernel, s.gws, s.config_id))
                          for s in self.steps]
                cl.enqueue_copy(rt.queue, y, self._y, is_blocking=True)
            except cl.Error as exc:
                rt.recover()
                raise KernelLaunchError(f"OpenCL launch failed on {rt.identity['name']} "
                                        f"({', '.join(s.name for s in self.steps)}): {exc}; "
                                        "the queue was reset") from exc
            self.last_events = events
        return y

    def kernel_ns(self) -> int:
        """Total kernel time of the latest run, from its profiling events (ns)."""
        return int(sum(e.profile.end - e.profile.start for _, e in self.last_events))
