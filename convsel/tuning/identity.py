"""Which device a timing belongs to: the tuning database's device key."""

from __future__ import annotations

from typing import Any

from .. import backends


def device_identity(backend: str, device: Any = None) -> dict[str, str]:
    """vendor, name and driver of ``device`` on ``backend``. On OpenCL this opens the
    device's runtime (a context): the key names the device that would run the problem."""
    module = backends.backend_module(backend)
    ident = module.device_identity(module.get_runtime(device))
    return {k: str(ident.get(k, "")) for k in ("vendor", "name", "driver")}
