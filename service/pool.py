"""Bounded execution of convolutions: a fixed thread pool plus an admission counter.

Convolutions are CPU-bound (numpy releases the GIL inside BLAS), so they run on their own
threads, never on the event loop. At most ``workers + queued`` may be in flight; one more is
refused at once with :class:`~service.errors.BusyError` (HTTP 503, Retry-After) instead of
piling up memory. A slot is freed when its work *finishes*, even if the client went away.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from .errors import BusyError

T = TypeVar("T")


class ConvPool:
    """``with pool.admit() as slot: result = await slot.run(fn, *args)``."""

    def __init__(self, workers: int, queued: int, retry_after: int,
                 on_reject: Callable[[], None] | None = None) -> None:
        self.capacity = workers + queued
        self.retry_after = retry_after
        self._on_reject = on_reject
        self._executor = ThreadPoolExecutor(max_workers=workers,
                                            thread_name_prefix="convsel-conv")
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextmanager
    def admit(self) -> Iterator[Slot]:
        """Reserve a slot or raise BusyError; the slot is freed on exit unless work was
        handed to the pool, in which case the work's completion frees it."""
        with self._lock:
            full = self._in_flight >= self.capacity
            if not full:
                self._in_flight += 1
        if full:
            if self._on_reject is not None:
                self._on_reject()
            raise BusyError(self.capacity, self.retry_after)
        slot = Slot(self)
        try:
            yield slot
        finally:
            if not slot.submitted:
                self._release()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future = self._executor.submit(fn, *args)
        future.add_done_callback(lambda _: self._release())
        return future

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1


class Slot:
    """One admitted convolution."""

    def __init__(self, pool: ConvPool) -> None:
        self._pool = pool
        self.submitted = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the pool's threads and await its result (or exception)."""
        if self.submitted:
            raise RuntimeError("a slot runs one piece of work")
        self.submitted = True
        return await asyncio.wrap_future(self._pool._submit(fn, *args))
