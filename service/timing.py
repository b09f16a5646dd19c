"""The process's one timing slot, shared by /v1/tune and /v1/find: the timings of two
measurements running at once would disturb both, so a second waits its turn (503 with
Retry-After for the time the running one has left)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import BusyError
from .state import ServiceState

MAX_BUDGET_S = 60.0              # a request's time budget at most (the settings may cut it)
_running = threading.Lock()      # held while a measurement runs
_running_until = 0.0             # when the running measurement's budget ends (Retry-After)


class TuningBusyError(BusyError):
    """Another tuning is running on this server (HTTP 503 with Retry-After)."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, f"a tuning is already running on this server (one at a "
                                 f"time); retry after {retry_after} s")


def budget(state: ServiceState, requested: float) -> float:
    """A request's time budget, cut to the server's CONVSEL_MAX_TUNE_SECONDS."""
    return min(requested, state.settings.max_tune_seconds)


@contextmanager
def timing_slot(state: ServiceState, budget_s: float) -> Iterator[None]:
    """The slot for about ``budget_s`` seconds; taken, it raises :class:`TuningBusyError`
    with the time left as Retry-After."""
    global _running_until
    if not _running.acquire(blocking=False):
        wait = max(state.settings.retry_after_seconds,
                   math.ceil(_running_until - time.monotonic()))
        raise TuningBusyError(wait)
    try:
        _running_until = time.monotonic() + budget_s
        yield
    finally:
        _running.release()
