"""The "predicted" policy's model on this server: which backend and device a request means,
and which fitted model the policy answers from there (GET /v1/fit, /v1/tuning, /readyz)."""

from __future__ import annotations

from typing import Any

from convsel import arguments
from convsel.policies import stored_model
from convsel.tuning import device_identity

from .state import ServiceState


def where(state: ServiceState, backend: str | None,
          device: str | None) -> tuple[str, Any, dict[str, str]]:
    """The request's backend and device, else the server's, with the device's identity."""
    s = state.settings
    backend = arguments.backend(s.default_backend if backend is None else backend)
    device = device or s.opencl_device
    return backend, device, device_identity(backend, device)


def model_in_use(state: ServiceState, backend: str | None) -> dict[str, Any]:
    """What the predicted policy uses on ``backend`` (default: the server's) here: the
    model's identity, or None and why."""
    try:
        backend, device, _ = where(state, backend, None)
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        return {"model": None, "reason": state.public(str(exc))}
    model, why = stored_model(backend, device, state.settings.tuning_db)
    return {"backend": backend, "model": model.identity() if model else None,
            "reason": state.hide_database(why) or None}
