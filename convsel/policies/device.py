"""The device a policy answers for: its identity, the tuning database's key for its timings
and its model, read once per process for each (backend, device)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..tuning.identity import device_identity


def identity(backend: str, device: Any) -> dict[str, str]:
    """vendor, name and driver of ``device`` on ``backend`` (cached: on OpenCL, reading it
    opens a context)."""
    try:
        return dict(cached_identity(backend, device))
    except TypeError:  # an unhashable device handle
        return device_identity(backend, device)


@lru_cache(maxsize=64)
def cached_identity(backend: str, device: Any) -> tuple[tuple[str, str], ...]:
    """The cache behind :func:`identity`; ``cache_clear()`` forgets it (a test that changes
    the BLAS environment, which is part of the numpy backend's identity)."""
    return tuple(device_identity(backend, device).items())
