"""The device a policy answers for: its identity, the tuning database's key for its timings
and its model, read once per process for each (backend, device).

A device may also be named by a *device class* that the tuning store or convsel's shipped
system layer knows (``device="NVIDIA H100 80GB HBM3"``): the policies then answer from that
class's timings and model, whether or not this machine has such a device
(:func:`convsel.tuning.fleet.resolve`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..errors import TuningDatabaseError
from ..tuning.db import open_db
from ..tuning.fleet import resolve
from ..tuning.identity import device_identity


def identity(backend: str, device: Any, db: Any = None) -> dict[str, str]:
    """vendor, name and driver of ``device`` on ``backend`` (cached: on OpenCL, reading it
    opens a context); a device class of the store ``db`` or of the shipped layer when
    ``device`` is its name."""
    if isinstance(device, str) and device.strip():
        named = device_class(backend, device.strip(), db)
        if named is not None:
            return named
    try:
        return dict(cached_identity(backend, device))
    except TypeError:  # an unhashable device handle
        return device_identity(backend, device)


def device_class(backend: str, name: str, db: Any) -> dict[str, str] | None:
    """The identity of the device class called ``name``: in the store ``db`` (when it can be
    opened), else in the shipped system layer; None when neither knows it."""
    try:
        database = open_db(db, create=False)   # naming a device never makes a store
    except (TuningDatabaseError, OSError):
        database = None      # the shipped layer may still know it
    return resolve(backend, name, database)


@lru_cache(maxsize=64)
def cached_identity(backend: str, device: Any) -> tuple[tuple[str, str], ...]:
    """The cache behind :func:`identity`; ``cache_clear()`` forgets it (a test that changes
    the BLAS environment, which is part of the numpy backend's identity)."""
    return tuple(device_identity(backend, device).items())



def is_local(backend: str, device: Any, ident: dict[str, str]) -> bool:
    """Whether ``ident`` is the device this machine opens for ``device`` on ``backend``: a
    class named from the store may be another machine's, which cannot be timed here."""
    try:
        return dict(cached_identity(backend, device)) == ident
    except TypeError:   # an unhashable device handle
        return device_identity(backend, device) == ident
    except Exception:  # noqa: BLE001 - a device this machine cannot open is not local
        return False
