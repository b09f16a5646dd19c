"""A tuning service for a fleet: devices upload what they measured, anyone asks for any
device class's answer.

- ``POST /v1/tuning/entries``: an upload in the ``convsel db export`` format, stored in one
  transaction with a per-entry report (accepted, merged, flagged, rejected); needs the API
  token when the server has one; ``?partial=true`` stores the entries that pass instead of
  refusing the upload. Who sent it (the token's id, the ``X-Convsel-Client`` name) is kept
  with every entry.
- ``GET /v1/devices``: the device classes the store (and the shipped layer) knows.
- ``POST /v1/fit/jobs``: fit a device class's model in a worker process; answers 202 with the
  job, which ``GET /v1/fit/jobs/{id}`` reports from any replica sharing the store.

The ``device`` of ``/v1/select``, ``/v1/select/batch`` and ``/v1/plan`` names a device class
for the measured and predicted policies (the library resolves it).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from convsel import TuningDatabaseError, arguments, learn
from convsel.tuning import (
    Limits,
    TuningDB,
    UploadRefused,
    device_classes,
    get_fit_job,
    open_db,
    receive,
    stored_class,
)

from ..auth import TOKEN
from ..convert import json_body, validate_body
from ..errors import ConflictError, TooLargeError, error_body, responses
from ..fit_jobs import FitJobOut, FitJobStarted, requester, start_job
from ..limits import BodyRule
from ..schemas import MAX_NAME, Backend, ErrorBody, ModelFamily
from ..state import ServiceState, StateDep, state_of
from ..upload_schema import EntryIn

router = APIRouter(prefix="/v1", tags=["fleet"])
BODIES = {"/v1/tuning/entries": BodyRule("max_upload_body_bytes")}
MAX_SHOWN_ERRORS = 20


class UploadIn(BaseModel):
    """A ``convsel db export`` document; each entry is checked by the library."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["convsel-tuning-export"]
    schema_version: int | None = None
    convsel_version: str | None = Field(None, max_length=64)
    exported: float | None = None
    # The schema states each entry; the wire takes any objects (upload_model) and the library
    # checks them one by one, so that partial=true stores the good ones.
    entries: list[EntryIn] = Field(min_length=1, description="entries as `convsel db export` "
                                   "writes them; at most CONVSEL_MAX_UPLOAD_ENTRIES")
    models: list[Any] | None = Field(None, description="ignored: the server fits its own")


class FitJobIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    backend: Backend = Field(  # type: ignore[valid-type]
        description="the device class's backend")
    device: str = Field(max_length=MAX_NAME, min_length=1,
                        description="the device class's name, as GET /v1/devices lists it")
    families: list[ModelFamily] | None = Field(  # type: ignore[valid-type]
        None, max_length=len(learn.model_families()),
        description="model families to compare (default: every installed one)")


class OutcomeOut(BaseModel):
    index: int
    status: Literal["accepted", "merged", "flagged", "rejected"]
    reason: str
    backend: str | None
    device: str | None
    problem: dict[str, Any] | None
    used: bool = Field(description="false: another convsel or implementations version's "
                       "entry, kept and never used")
    winner: str | None = Field(description="the stored entry's winner after this upload")
    tie: list[str]


class UploadReportOut(BaseModel):
    stored: bool
    uploader: str
    received: float
    count: int
    accepted: int
    merged: int
    flagged: int
    rejected: int
    notes: list[str]
    entries: list[OutcomeOut]
    entries_shown: int


class DevicesOut(BaseModel):
    devices: list[dict[str, Any]] = Field(description="one per device class: layer (user or "
                                          "system), backend, vendor, name, driver, entries, "
                                          "shapes, uploads, model, fit_job")
    count: int
    store: dict[str, Any]


OPENAPI_MODELS = (UploadIn, FitJobIn)
NOT_FOUND = {404: {"model": ErrorBody, "description": "no fit job of that id in the store"}}
NO_CLASS = {409: {"model": ErrorBody, "description": "the store has no such device class "
                  "(upload its timings first)"}}


@lru_cache(maxsize=8)
def upload_model(limit: int) -> type[UploadIn]:
    """The upload with this server's entry limit, checked while the list is parsed (the
    parser stops at entry ``limit + 1`` instead of building a million of them)."""
    return create_model(  # type: ignore[no-any-return, call-overload]
        "UploadIn", __base__=UploadIn, __module__=__name__,
        entries=(list[dict[str, Any]], Field(max_length=limit)))


@router.post("/tuning/entries", dependencies=[TOKEN], response_model=UploadReportOut,
             responses=responses(401, 413, 415, 422, 503),
             openapi_extra=json_body("UploadIn"))
async def upload_entries(request: Request, partial: bool = False) -> Any:
    """Store measured entries from a device (all or nothing, or with ``partial=true`` the
    ones that pass); answers a report per entry: accepted (first of its key), merged
    (combined with earlier measurements), flagged (its winner contradicts the stored one
    beyond the noise: kept, not merged) or rejected (why)."""
    state = state_of(request)
    limit = state.settings.max_upload_entries
    try:
        body = upload_model(limit).model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_input=False)
        if errors[0]["type"] == "too_long" and errors[0]["loc"] == ("entries",):
            raise TooLargeError("entries", errors[0]["ctx"]["actual_length"], limit,
                                "entries per upload") from None
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    uploader = requester(request, state)
    document = body.model_dump(exclude_none=True)
    try:
        report = await anyio.to_thread.run_sync(_receive, state, document, uploader, partial)
    except UploadRefused as exc:
        return JSONResponse(_refused_body(exc), status_code=422)
    return report


def _receive(state: ServiceState, document: dict[str, Any], uploader: str,
             partial: bool) -> dict[str, Any]:
    db = state.store()
    report = receive(db, document, uploader=uploader, partial=partial,
                     limits=Limits(entries=state.settings.max_upload_entries))
    return dict(state.public(report.to_dict()))


def _refused_body(exc: UploadRefused) -> dict[str, Any]:
    report = exc.report.to_dict()
    rejected = [o for o in report["entries"] if o["reason"] and o["status"] == "rejected"
                and not o["reason"].startswith("not stored")]
    body = error_body("invalid_problem", f"upload refused, nothing was stored: {exc}",
                      field=exc.field, value=exc.value, rule=exc.rule,
                      errors=[{"loc": ["body", "entries", o["index"]], "msg": o["reason"],
                               "type": "rejected"} for o in rejected[:MAX_SHOWN_ERRORS]])
    return {**body, "report": {k: report[k] for k in
                               ("stored", "count", "accepted", "merged", "flagged", "rejected")}}


@router.get("/devices", response_model=DevicesOut, responses=responses(503))
async def devices(state: StateDep) -> dict[str, Any]:
    """The device classes this server knows: its store's (``layer: user``: entries of this
    convsel and of other versions, distinct shapes, uploads with how many uploaders and how
    many were flagged, the model and its status, the latest fit job) and those shipped with
    convsel (``layer: system``). ``store`` says whether the store could be read."""
    return await anyio.to_thread.run_sync(_devices, state)


def _devices(state: ServiceState) -> dict[str, Any]:
    try:
        db: TuningDB | None = open_db(state.settings.tuning_db, create=False)
        store = {"ok": True, "reason": None}
    except TuningDatabaseError as exc:
        db, store = None, {"ok": False, "reason": str(exc)}
    found = device_classes(db)
    return dict(state.public({"devices": found, "count": len(found), "store": store}))


@router.post("/fit/jobs", status_code=202, dependencies=[TOKEN], response_model=FitJobStarted,
             responses={**responses(401, 413, 415, 422, 503), **NO_CLASS},
             openapi_extra=json_body("FitJobIn"))
async def start_fit(request: Request) -> JSONResponse:
    """Fit the cost model of a device class in the store, in a worker process: answers 202
    with the job at once (``Location``: where to poll). The fitted model is stored where
    every replica's predicted policy reads it, unless it was rejected while the stored one
    was accepted. Needs the API token when the server has one."""
    state = state_of(request)
    body = validate_body(FitJobIn, await request.body(), json=True)
    backend = arguments.backend(body.backend)
    ident = await anyio.to_thread.run_sync(_stored_class, state, backend, body.device)
    return await start_job(request, backend, ident, families=body.families)


def _stored_class(state: ServiceState, backend: str, device: str) -> dict[str, str]:
    ident = stored_class(state.store(), backend, device)
    if ident is None:
        # The store's state, not the request: the same body is served once timings are in.
        rule = (f"no device class of that name on {backend} in this server's store (GET "
                "/v1/devices lists them; upload its timings first)")
        raise ConflictError("device", device, rule, f"device={device!r}: {rule}")
    return dict(ident)


@router.get("/fit/jobs/{job_id}", response_model=FitJobOut,
            responses={**responses(503), **NOT_FOUND})
async def fit_job(job_id: str, state: StateDep) -> Any:
    """A fit job: queued, running, done (with the model's identity, whether it is in use and
    why) or failed (why); ``lost`` when its worker died with its replica."""
    job = await anyio.to_thread.run_sync(_job, state, job_id)
    if job is None:
        return JSONResponse(error_body("not_found", f"no fit job {job_id[:64]!r} in this "
                                       "server's store", field="job_id", value=job_id[:64]),
                            status_code=404)
    return state.public(job)


def _job(state: ServiceState, job_id: str) -> dict[str, Any] | None:
    return get_fit_job(state.store(), job_id)
