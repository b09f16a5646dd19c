"""What a cached read of the store used, recorded while it runs (:mod:`convsel.tuning.cache`).

Here, beneath the engines, so that an engine can say "a query went to the server"
(:func:`read_directly`) without knowing of the cache above it. A context variable: each
thread (and each asyncio task) records its own read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field

from .changelog import Scope


@dataclass
class Reads:
    """What one cached read used (see :mod:`convsel.tuning.store.changelog` for scopes)."""

    scopes: set[Scope] = field(default_factory=set)
    everything: bool = False     # a cached read it made depends on the whole store
    direct: bool = False         # it queried the server itself
    until: float = math.inf      # time.monotonic() after which it is to be read again
    # store location -> the token this read was taken under: a read nested in it (an answer
    # reading its model) is taken under the same one, not another look at the store
    tokens: dict[Hashable, Hashable] = field(default_factory=dict)


reading: ContextVar[Reads | None] = ContextVar("convsel_cache_reading", default=None)


def uses(scope: Scope) -> None:
    """The value being read depends on ``scope``."""
    reads = reading.get()
    if reads is not None:
        reads.scopes.add(scope)


def expires(seconds: float) -> None:
    """The value being read is to be read again after ``seconds``, whatever changes."""
    reads = reading.get()
    if reads is not None:
        reads.until = min(reads.until, time.monotonic() + seconds)


def read_directly() -> None:
    """A query is going to the server: the value being read, unless its reader declared a
    scope, depends on the whole store (nothing says what the query read)."""
    reads = reading.get()
    if reads is not None:
        reads.direct = True
