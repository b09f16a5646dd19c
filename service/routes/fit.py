"""POST /v1/fit: fit this server's cost model from its tuning database (the "predicted"
policy's model). GET /v1/fit: the model's identity. /readyz reports it under ``detail.fit``.

Fitting is bounded like /v1/tune: one at a time per process (503 with Retry-After
otherwise), and it reads at most ``max_entries`` entries (newest first). It needs the operator's
token when ``CONVSEL_API_TOKEN`` is set.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from convsel import InvalidProblemError, TuningDatabaseError
from convsel.learn import fit_and_store
from convsel.tuning import open_db

from ..auth import TOKEN
from ..convert import json_body, validate_body
from ..errors import BusyError, ConflictError, responses
from ..fitted import model_in_use, where
from ..schemas import MAX_NAME, Backend, integral
from ..state import ServiceState, StateDep, state_of

MAX_ENTRIES = 20000
_running = threading.Lock()

router = APIRouter(prefix="/v1", tags=["tuning"])


class FitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    backend: Backend | None = Field(  # type: ignore[valid-type]
        None, description="default: the server's")
    device: str | None = Field(None, max_length=MAX_NAME,
                               description="OpenCL device; default: the server's")
    families: list[Literal["roofline", "gbt"]] | None = Field(
        None, max_length=2, description="model families to compare (default: every "
        "installed one)")
    max_entries: Annotated[StrictInt, BeforeValidator(integral)] = Field(
        MAX_ENTRIES, ge=8, le=MAX_ENTRIES,
                             description="fit on at most this many entries, newest first")


class FitResponse(BaseModel):
    backend: str
    device: dict[str, str]
    family: str
    id: str
    training_problems: int
    training_rows: int
    held_out: dict[str, Any]
    fit_seconds: float
    created: float | None


class ModelIdentity(BaseModel):
    backend: str | None = None
    model: dict[str, Any] | None
    reason: str | None


OPENAPI_MODELS = (FitRequest,)


class FitBusyError(BusyError):
    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, "a fit is already running on this server (one at a time); "
                                 f"retry after {retry_after} s")


@router.post("/fit", response_model=FitResponse, dependencies=[TOKEN],
             responses=responses(401, 409, 413, 415, 422, 503),
             openapi_extra=json_body("FitRequest"))
async def fit_model(request: Request) -> dict[str, Any]:
    """Fit the cost model of this server's backend and device and store it in the database;
    answers the stored model's identity and each family's held-out regret. Needs the API
    token when the server has one."""
    state = state_of(request)
    body = validate_body(FitRequest, await request.body(), json=True)
    if not _running.acquire(blocking=False):
        raise FitBusyError(state.settings.retry_after_seconds)
    try:
        return await anyio.to_thread.run_sync(_fit, state, body)
    finally:
        _running.release()


@router.get("/fit", response_model=ModelIdentity, responses=responses(422, 503))
async def model_identity(state: StateDep,
                         backend: Backend | None = None,  # type: ignore[valid-type]
                         ) -> dict[str, Any]:
    """The identity of the model the predicted policy uses here (null when there is none)."""
    return await anyio.to_thread.run_sync(model_in_use, state, backend)


def ready(app: FastAPI) -> dict[str, Any]:
    """A missing model never makes the service unready: the rules answer instead."""
    return {"ok": True, **model_in_use(app.state.convsel, None)}


def _fit(state: ServiceState, body: FitRequest) -> dict[str, Any]:
    backend, _, ident = where(state, body.backend, body.device)
    try:
        db = open_db(state.settings.tuning_db)
    except TuningDatabaseError as exc:   # the server's store: 503, as everywhere
        raise TuningDatabaseError(state.public(str(exc))) from None
    try:
        stored = fit_and_store(db, backend, ident, newest=body.max_entries,
                               families=body.families)
    except InvalidProblemError as exc:
        if exc.field != "entries":
            raise
        # Too few timings in this server's database: its state, not the request, is at fault
        # (and no schema could say so): 409, until `convsel tune` has added more.
        raise ConflictError(exc.field, exc.value, exc.rule, str(exc)) from None
    meta = stored["meta"]
    return {"backend": backend, "device": ident, "family": stored["family"], "id": meta["id"],
            "training_problems": meta["training_problems"],
            "training_rows": meta["training_rows"], "held_out": meta["held_out"],
            "fit_seconds": meta["fit_seconds"], "created": stored["created"]}
