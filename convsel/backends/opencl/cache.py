"""The runtime program cache: built OpenCL programs, bounded LRU, with readable counters.

Modelled on OpenVINO's CPU runtime parameters cache: ``get_or_create(key, builder)`` returns
the cached value for ``key`` or calls ``builder()`` once and keeps the result; the least
recently used entry is evicted when the cache is full. A program is defined by the device it
was built for (identity and driver version), its source and its build options, so
:func:`program_key` hashes exactly those.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ... import config
from ...errors import InvalidProblemError

T = TypeVar("T")

CAPACITY_ENV = config.variable("cl_cache_capacity")
DEFAULT_CAPACITY = 256


def program_key(identity: Mapping[str, Any], source: str, options: tuple[str, ...]) -> str:
    """The cache key of a program: SHA-256 over the device identity (vendor, name, driver,
    platform version), the source text and the build options, in that order."""
    h = hashlib.sha256()
    for name in sorted(identity):
        h.update(f"{name}={identity[name]}\n".encode())
    h.update(b"\0source\0")
    h.update(hashlib.sha256(source.encode()).digest())
    h.update(b"\0options\0")
    h.update("\0".join(options).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the counters; ``to_dict()`` is the JSON form the service reports."""

    capacity: int
    size: int
    hits: int
    misses: int
    evictions: int

    def to_dict(self) -> dict[str, int]:
        return {"capacity": self.capacity, "size": self.size, "hits": self.hits,
                "misses": self.misses, "evictions": self.evictions}


def capacity_from_env(default: int = DEFAULT_CAPACITY) -> int:
    """``$CONVSEL_CL_CACHE_CAPACITY`` if set (a positive integer), else ``default``."""
    raw = config.current().cl_cache_capacity
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidProblemError(CAPACITY_ENV, raw, "must be a positive integer") from None
    return _check_capacity(value, CAPACITY_ENV)


def _check_capacity(value: int, field: str = "capacity") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidProblemError(field, value, "must be a positive integer")
    return value


class RuntimeCache:
    """A thread-safe bounded LRU of built objects with hit/miss/eviction counters.

    ``builder`` runs outside the lock, so a slow build does not block lookups of other keys;
    two threads missing the same key at once may both build, and the first result is kept.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = _check_capacity(capacity)
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        with self._lock:
            self._capacity = _check_capacity(value)
            self._evict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get_or_create(self, key: Hashable, builder: Callable[[], T]) -> T:
        """The value cached under ``key``, or ``builder()``'s result, cached.

        An exception from ``builder`` propagates and nothing is cached, so a failed build
        is retried by the next call (a build error is not sticky).
        """
        with self._lock:
            if key in self._entries:
                self.hits += 1
                self._entries.move_to_end(key)
                return self._entries[key]  # type: ignore[no-any-return]
            self.misses += 1
        value = builder()
        with self._lock:
            if key in self._entries:       # another thread built it meanwhile
                self._entries.move_to_end(key)
                return self._entries[key]  # type: ignore[no-any-return]
            self._entries[key] = value
            self._evict()
        return value

    def _evict(self) -> None:
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
            self.evictions += 1

    def clear(self) -> None:
        """Drop every entry; the counters keep counting."""
        with self._lock:
            self._entries.clear()

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._capacity, len(self._entries), self.hits, self.misses,
                              self.evictions)
