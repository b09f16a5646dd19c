"""Fused loops for the numpy backend, compiled by numba (the ``cpu`` extra).

Each module here does in one pass over memory what the pure numpy code does in several:
:mod:`.depthwise` (every tap, the bias and the activation of a depthwise layer),
:mod:`.epilogue` (bias and activation after a GEMM). The algorithms in
:mod:`convsel.backends.numpy` call them when :func:`convsel.backends.numpy.accel.enabled`
says so at prepare time; importing this package imports numba.

How the loops are written, because numba vectorises only some forms (measured on AVX-512,
one thread: the same depthwise loop ran 0.47 ms or 3.1 ms by how it indexed):

- The innermost loop indexes one-dimensional contiguous slices with the loop variable of a
  ``range`` that starts at 0, or with unsigned offsets (``uintp``): a signed computed index
  gets numba's negative-index wraparound, which turns vector loads into gathers.
- Sizes the loops unroll over (kernel taps) are compile-time constants of a kernel built
  per size (a closure), so the tap loops unroll and the accumulator stays in a register.
- Fast-math allows contraction into FMAs and reassociation, never ``nnan``/``ninf``: NaN and
  Inf in the data must reach the output as they do in numpy.

Compiled code is cached on disk (numba's ``cache=True``), so a process pays each kernel's
compile time (about a second) once per machine and kernel size, not on every start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numba

from ..threads import thread_count
from . import vectors

# before any kernel compiles: numba fixes its CPU features at the first compile
vectors.apply()

FASTMATH = frozenset({"contract", "reassoc", "arcp", "nsz"})

# Below this many output values per thread, a kernel runs in the calling thread alone: a
# hand-over to a pool thread costs tens of microseconds.
MIN_VALUES_PER_THREAD = 1 << 15


def jit() -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit`` with this package's settings: cached; fast-math without nnan/ninf;
    numpy's error model (no exception checks in the loops); the GIL released, so that
    :func:`spread` can run pieces of one kernel in several threads."""
    return numba.njit(cache=True, fastmath=set(FASTMATH), nogil=True,  # type: ignore[no-any-return]
                      error_model="numpy", boundscheck=False)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def alone(kernel: Callable[..., None], jobs: int, *args: Any) -> None:
    """Run ``kernel(0, jobs, *args)`` in the calling thread (see :func:`spread`)."""
    kernel(0, jobs, *args)


def _workers(n: int) -> ThreadPoolExecutor:
    """The pool of helper threads (grown to ``n``); idle, they sleep on a queue."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < n:
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="convsel-fused")
        return _pool


def spread(kernel: Callable[..., None], jobs: int, values: int, *args: Any) -> None:
    """Run ``kernel(start, stop, *args)`` over the jobs [0, jobs) split into contiguous
    ranges, one per thread (the backend's thread count; fewer when ``values``, the output
    values the kernel writes, would give a thread less than MIN_VALUES_PER_THREAD).

    Why not numba's own ``parallel=True``: its thread pools stay busy after a kernel (the
    OpenMP layer's threads spin for milliseconds; the workqueue layer's poll), and on two
    cores they took the cores from OpenBLAS's threads in the GEMM that follows. Measured
    on the quiet host (2 pinned cores): every layer that mixed the two ran in about 8 ms
    (OpenMP layer) instead of 0.15-1.5; with the workqueue layer the GEMM after an im2col
    ran at half speed. Python's pool threads sleep on a queue between kernels.

    Kernels next to a GEMM (im2col, Winograd's transforms, the epilogue) run :func:`alone`
    instead: after each GEMM OpenBLAS's own worker threads keep spinning on the other cores
    for a while, so a second thread of ours only fights them for a core (quiet host, 2
    cores: the ResNet-50 stem's im2col 3.3 ms spread over two threads, 0.4 expected from
    one)."""
    in_threads(kernel, jobs, min(thread_count(), values // MIN_VALUES_PER_THREAD), *args)


def in_threads(kernel: Callable[..., None], jobs: int, n: int, *args: Any) -> None:
    """Run ``kernel(start, stop, *args)`` over the jobs [0, jobs) split into ``n`` (at most
    ``jobs``, at least 1) contiguous ranges, the first in the calling thread, the others in
    the pool's threads; returns when all are done (re-raising the first failure)."""
    n = max(1, min(n, jobs))
    if n == 1:
        kernel(0, jobs, *args)
        return
    bounds = [jobs * i // n for i in range(n + 1)]
    pool = _workers(n - 1)
    pending: list[Future[None]] = [pool.submit(kernel, bounds[i], bounds[i + 1], *args)
                                   for i in range(1, n)]
    kernel(bounds[0], bounds[1], *args)
    for job in pending:
        job.result()
