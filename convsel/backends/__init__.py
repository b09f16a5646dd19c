"""Backends: where convolutions run. The table of backends and of (algorithm, backend)
implementations, the preference lists a backend argument reads into and the support check
live in :mod:`convsel.backends.registry` (see there for what a backend module exposes);
:func:`capabilities` reports what each backend and device supports."""

from __future__ import annotations

from typing import Any

from .registry import (
    BACKENDS,
    DEVICE_RESIDENT,
    IMPLEMENTATIONS,
    Placement,
    Preference,
    available,
    backend_module,
    backends_for,
    implementation,
    implemented,
    on_host,
    supports_on,
)


def capabilities(transfers: bool = False) -> list[dict[str, Any]]:
    """What each backend and device supports (dtypes, F16, fp64, tensor cores,
    device-resident arrays), JSON-ready; ``transfers`` measures each device's host↔device
    copy cost too. See :mod:`convsel.backends.capability`."""
    from .capability import capabilities as report  # opens each device: only when asked

    return report(transfers)


__all__ = ["BACKENDS", "DEVICE_RESIDENT", "IMPLEMENTATIONS", "Placement", "Preference",
           "available", "backend_module", "backends_for", "capabilities", "implementation",
           "implemented", "on_host", "supports_on"]
