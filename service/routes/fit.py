"""POST /v1/fit: fit this server's cost model from its tuning database (the "predicted"
policy's model). GET /v1/fit: the model's identity. /readyz reports it under ``detail.fit``.

Fitting is bounded like /v1/tune: one at a time per process (503 with Retry-After
otherwise), and it reads at most ``max_entries`` entries (newest first). It needs the operator's
token when ``CONVSEL_API_TOKEN`` is set.
"""

from __future__ import annotations

import hmac
import os
import threading
from typing import Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from convsel import backends
from convsel.errors import InvalidProblemError, TuningDatabaseError
from convsel.tuning.db import open_db
from convsel.tuning.identity import device_identity

from ..errors import BusyError, responses
from ..state import ServiceState, StateDep

MAX_ENTRIES = 20000
_running = threading.Lock()


async def _require_token_from_env(request: Request) -> None:
    token = os.environ.get("CONVSEL_API_TOKEN")
    if not token:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # constant time: the answer's timing must not reveal a prefix of the token
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                              token.encode()):
        raise HTTPException(401, "send 'Authorization: Bearer <token>' (CONVSEL_API_TOKEN)",
                            headers={"WWW-Authenticate": "Bearer"})


try:   # the service's own token dependency, where this service has one
    from ..auth import TOKEN  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    TOKEN = Depends(_require_token_from_env)

router = APIRouter(prefix="/v1", tags=["tuning"])


class FitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str | None = Field(None, description="numpy or opencl; default: the server's")
    device: str | None = Field(None, description="OpenCL device; default: the server's")
    families: list[str] | None = Field(None, description="model families to compare "
                                       "(default: every installed one)")
    max_entries: int = Field(MAX_ENTRIES, ge=8, le=MAX_ENTRIES,
                             description="fit on at most this many entries, newest first")


class FitBusyError(BusyError):
    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, "a fit is already running on this server (one at a time); "
                                 f"retry after {retry_after} s")


@router.post("/fit", dependencies=[TOKEN], responses=responses(422, 503))
async def fit_model(body: FitRequest, state: StateDep) -> dict[str, Any]:
    """Fit the cost model of this server's backend and device and store it in the database;
    answers the stored model's identity and each family's held-out regret."""
    if not _running.acquire(blocking=False):
        raise FitBusyError(state.settings.retry_after_seconds)
    try:
        return await anyio.to_thread.run_sync(_fit, state, body)
    finally:
        _running.release()


@router.get("/fit", responses=responses(503))
async def model_identity(state: StateDep, backend: str | None = None) -> dict[str, Any]:
    """The identity of the model the predicted policy uses here (null when there is none)."""
    return await anyio.to_thread.run_sync(_identity, state, backend)


def ready(app: FastAPI) -> dict[str, Any]:
    """A missing model never makes the service unready: the rules answer instead."""
    return {"ok": True, **_identity(app.state.convsel, None)}


def _where(state: ServiceState, backend: str | None,
           device: str | None) -> tuple[str, Any, dict[str, str]]:
    s = state.settings
    backend, device = backend or s.default_backend, device or s.default_device
    if backend not in backends.BACKENDS:
        raise InvalidProblemError("backend", backend,
                                  f"unknown backend; known: {', '.join(backends.BACKENDS)}")
    return backend, device, device_identity(backend, device)


def _identity(state: ServiceState, backend: str | None) -> dict[str, Any]:
    from convsel.policies.predicted import load_stored

    try:
        backend, device, _ = _where(state, backend, None)
    except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
        return {"model": None, "reason": str(exc)}
    model, why = load_stored(backend, device, state.settings.tuning_db)
    return {"backend": backend, "model": model.identity() if model else None,
            "reason": why or None}


def _fit(state: ServiceState, body: FitRequest) -> dict[str, Any]:
    from convsel.learn.fit import fit
    from convsel.learn.stored import model_key

    backend, _, ident = _where(state, body.backend, body.device)
    try:
        db = open_db(state.settings.tuning_db)
    except TuningDatabaseError as exc:
        raise InvalidProblemError("tuning_db", "server", f"cannot be opened: {exc}") from exc
    entries = [e for e in db.entries(backend=backend, device=ident) if e.is_current]
    result = fit(entries[-body.max_entries:], families=body.families, device=ident)
    db.save_model(model_key(backend, ident), result.family, result.model.to_data(),
                  result.meta)
    stored = db.load_model(model_key(backend, ident))
    return {"backend": backend, "device": ident, "family": result.family,
            "id": result.meta["id"], "training_problems": result.meta["training_problems"],
            "training_rows": result.meta["training_rows"],
            "held_out": result.meta["held_out"], "fit_seconds": result.meta["fit_seconds"],
            "created": stored["created"] if stored else None}
