"""POST /v1/fit: fit this server's cost model from its tuning database (the "predicted"
policy's model). GET /v1/fit: the model's identity. /readyz reports it under ``detail.fit``.

A fit never runs on a request's thread or the event loop: POST /v1/fit answers 202 with a job
at once, the fit runs in a worker process (:mod:`service.fit_jobs`, shared with
``POST /v1/fit/jobs``) and ``GET /v1/fit/jobs/{id}`` reports it. It reads at most
``max_entries`` entries (newest first) and needs the operator's token when
``CONVSEL_API_TOKEN`` is set.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from convsel import learn

from ..auth import TOKEN
from ..convert import json_body, validate_body
from ..errors import responses
from ..fit_jobs import FitJobStarted, start_job
from ..fitted import model_in_use, where
from ..schemas import MAX_NAME, Backend, ModelFamily, integral
from ..state import StateDep, state_of

MAX_ENTRIES = 20000

router = APIRouter(prefix="/v1", tags=["tuning"])


class FitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    backend: Backend | None = Field(  # type: ignore[valid-type]
        None, description="default: the server's")
    device: str | None = Field(None, max_length=MAX_NAME,
                               description="OpenCL device; default: the server's")
    families: list[ModelFamily] | None = Field(  # type: ignore[valid-type]
        None, max_length=len(learn.model_families()),
        description="model families to compare (default: every installed one)")
    max_entries: Annotated[StrictInt, BeforeValidator(integral)] = Field(
        MAX_ENTRIES, ge=8, le=MAX_ENTRIES,
                             description="fit on at most this many entries, newest first")


class ModelIdentity(BaseModel):
    backend: str | None = None
    model: dict[str, Any] | None
    reason: str | None


OPENAPI_MODELS = (FitRequest,)


@router.post("/fit", status_code=202, response_model=FitJobStarted, dependencies=[TOKEN],
             responses=responses(401, 409, 413, 415, 422, 503),
             openapi_extra=json_body("FitRequest"))
async def fit_model(request: Request) -> JSONResponse:
    """Fit the cost model of this server's backend and device (or the request's) from its
    store, in a worker process: answers 202 with the job at once (``Location``: where to
    poll; when done, the job's result holds the model's identity, each family's held-out
    regret and whether the model is in use). 409 when the store has too few timings of that
    device. Needs the API token when the server has one."""
    state = state_of(request)
    body = validate_body(FitRequest, await request.body(), json=True)
    backend, _, ident = where(state, body.backend, body.device)
    return await start_job(request, backend, ident, families=body.families,
                           newest=body.max_entries)


@router.get("/fit", response_model=ModelIdentity, responses=responses(422, 503))
async def model_identity(state: StateDep,
                         backend: Backend | None = None,  # type: ignore[valid-type]
                         ) -> dict[str, Any]:
    """The identity of the model the predicted policy uses here (null when there is none)."""
    return await anyio.to_thread.run_sync(model_in_use, state, backend)


def ready(app: FastAPI) -> dict[str, Any]:
    """A missing model never makes the service unready: the rules answer instead."""
    return {"ok": True, **model_in_use(app.state.convsel, None)}
