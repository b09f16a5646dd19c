"""Spread numpy work over the cores that BLAS would use, where BLAS alone leaves them idle.

numpy's elementwise operations and copies run on one core, and BLAS splits small GEMMs
poorly (a batch of 16-row products runs about as fast on two threads as on one). Here the
caller cuts its work into independent parts and :func:`map_parallel` runs them in a thread
pool; numpy releases the GIL inside its copy loops, ufuncs and BLAS calls, so the parts
really run side by side. While they do, BLAS is switched to one thread per call (through
threadpoolctl) so that parts do not each start a full set of BLAS threads, and switched back
afterwards. The pool is as wide as BLAS's own thread setting (``OPENBLAS_NUM_THREADS`` and
the like, or the cores this process may run on), so a run pinned to two cores with two BLAS
threads uses two workers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from typing import Any, TypeVar

import numpy as np
import scipy.linalg.blas  # noqa: F401  (load scipy's BLAS so that its threads are controlled too)

from .profile import set_share

T = TypeVar("T")

_lock = threading.Lock()
_local = threading.local()


@cache
def _blas_libraries() -> tuple[Any, ...]:
    from threadpoolctl import ThreadpoolController

    return tuple(ThreadpoolController().select(user_api="blas").lib_controllers)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


@cache
def workers() -> int:
    """How many parts to run at once: BLAS's thread count, at most the usable cores."""
    threads = [lib.num_threads for lib in _blas_libraries()]
    return max(1, min([_cores(), *threads]))


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="convsel-numpy")


@contextmanager
def _blas_single_threaded() -> Iterator[None]:
    with _lock:
        libraries = _blas_libraries()
        before = [lib.num_threads for lib in libraries]
        for lib in libraries:
            lib.set_num_threads(1)
        try:
            yield
        finally:
            for lib, n in zip(libraries, before):
                lib.set_num_threads(n)


def map_parallel(fn: Callable[[T], Any], parts: Sequence[T]) -> None:
    """Run ``fn(part)`` for every part, side by side on :func:`workers` threads (in order,
    in this thread, when there is one part, one worker, or this is already a worker)."""
    if len(parts) <= 1 or workers() <= 1 or getattr(_local, "inside", False):
        for part in parts:
            fn(part)
        return

    share = 1.0 / min(len(parts), workers())
    errors = np.geterr()   # numpy's error state is per thread: the workers take the caller's

    def job(part: T) -> Any:
        _local.inside = True
        set_share(share)
        try:
            with np.errstate(**errors):
                return fn(part)
        finally:
            _local.inside = False
            set_share(1.0)

    with _blas_single_threaded():
        for future in [_pool().submit(job, part) for part in parts]:
            future.result()


def split(total: int, parts: int | None = None, minimum: int = 1) -> list[slice]:
    """``range(total)`` cut into at most ``parts`` (default: :func:`workers`) contiguous
    slices of at least ``minimum`` items each."""
    parts = max(1, min(parts or workers(), total // max(1, minimum)))
    edges = [total * i // parts for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(edges, edges[1:]) if b > a]
