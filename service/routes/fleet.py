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

import hashlib
import multiprocessing
import queue
import threading
from functools import lru_cache
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from convsel import TuningDatabaseError, arguments
from convsel.tuning import (
    Limits,
    TuningDB,
    UploadRefused,
    device_classes,
    get_fit_job,
    open_db,
    receive,
    run_fit_job,
    stop_fit_job,
    stored_class,
    submit_fit_job,
)

from ..auth import TOKEN
from ..convert import json_body, validate_body
from ..errors import BusyError, ConflictError, TooLargeError, error_body, responses
from ..limits import BodyRule
from ..schemas import MAX_NAME, Backend, ErrorBody
from ..state import ServiceState, StateDep, state_of
from ..upload_schema import EntryIn

router = APIRouter(prefix="/v1", tags=["fleet"])
BODIES = {"/v1/tuning/entries": BodyRule("max_upload_body_bytes")}
CLIENT_HEADER = "x-convsel-client"
MAX_QUEUED_FITS = 4
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
    families: list[Literal["roofline", "gbt"]] | None = Field(
        None, max_length=2, description="model families to compare (default: every installed "
        "one)")


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


class FitJobOut(BaseModel):
    id: str
    status: Literal["queued", "running", "done", "failed", "lost"]
    backend: str
    device: dict[str, str]
    requester: str
    submitted: float
    finished: float | None
    result: dict[str, Any] | None


class FitJobStarted(BaseModel):
    job: FitJobOut
    poll: str


OPENAPI_MODELS = (UploadIn, FitJobIn)
NOT_FOUND = {404: {"model": ErrorBody, "description": "no fit job of that id in the store"}}
NO_CLASS = {409: {"model": ErrorBody, "description": "the store has no such device class "
                  "(upload its timings first)"}}


class FitQueueFullError(BusyError):
    def __init__(self, queued: int, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, f"{queued} fits are running or queued on this server, the "
                                 f"most it accepts; retry after {retry_after} s")


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
    uploader = _uploader(request, state)
    document = body.model_dump(exclude_none=True)
    try:
        report = await anyio.to_thread.run_sync(_receive, state, document, uploader, partial)
    except UploadRefused as exc:
        return JSONResponse(_refused_body(exc), status_code=422)
    return report


def _receive(state: ServiceState, document: dict[str, Any], uploader: str,
             partial: bool) -> dict[str, Any]:
    db = open_db(state.settings.tuning_db)
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


def _uploader(request: Request, state: ServiceState) -> str:
    """Who sent it: the token's id (never the token) and the client's own name, if given."""
    parts = []
    token = state.settings.api_token
    if token is not None:
        parts.append("token:" + hashlib.sha256(
            token.get_secret_value().encode()).hexdigest()[:8])
    name = request.headers.get(CLIENT_HEADER, "").strip()
    if name:
        printable = "".join(ch if ch.isprintable() else "?" for ch in name)
        parts.append("client:" + printable[:64])
    if not parts:
        host = request.client.host if request.client else "unknown"
        parts.append(f"anonymous ({host})")
    return " ".join(parts)


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


# -- fit jobs ----------------------------------------------------------------------------------
class FitRunner:
    """Runs fit jobs one at a time, each in a fresh worker process (spawned, not forked from a
    server holding threads and sockets), at most ``MAX_QUEUED_FITS`` waiting. On shutdown the
    running worker is stopped and every unfinished job of this server is marked failed."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str | None, str, list[str] | None]] = queue.Queue(
            MAX_QUEUED_FITS)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running: tuple[str | None, str, Any] | None = None
        self._stopping = False

    def submit(self, target: str | None, job_id: str, families: list[str] | None) -> None:
        """Queue the job; raises queue.Full when ``MAX_QUEUED_FITS`` wait already."""
        with self._lock:
            self._queue.put_nowait((target, job_id, families))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="convsel-fit-jobs",
                                                daemon=True)
                self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def _work(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        while not self._stopping:
            try:
                target, job_id, families = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if self._stopping:
                self._queue.put_nowait((target, job_id, families))   # shutdown marks it
                break
            process = spawn.Process(target=run_fit_job, args=(target, job_id, families),
                                    name=f"convsel-fit-{job_id}", daemon=True)
            with self._lock:
                self._running = (target, job_id, process)
            process.start()
            process.join()
            with self._lock:
                self._running = None

    def shutdown(self) -> None:
        """Stop the running worker and mark what did not finish as failed."""
        self._stopping = True
        with self._lock:
            running, self._running = self._running, None
        left = [running[:2]] if running else []
        if running:
            running[2].terminate()
            running[2].join(5)
        while True:
            try:
                target, job_id, _ = self._queue.get_nowait()
            except queue.Empty:
                break
            left.append((target, job_id))
        for target, job_id in left:
            try:
                stop_fit_job(open_db(target), job_id, "the server stopped before the fit "
                             "finished; submit it again")
            except TuningDatabaseError:
                pass   # the store is gone too: its jobs with it


RUNNER = FitRunner()


def shutdown() -> None:
    """The app's shutdown (service.app's lifespan): no fit worker outlives its server (an app
    created after it in the same process gets a runner of its own)."""
    global RUNNER
    stopping, RUNNER = RUNNER, FitRunner()
    stopping.shutdown()


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
    if RUNNER.waiting >= MAX_QUEUED_FITS:
        raise FitQueueFullError(RUNNER.waiting, state.settings.retry_after_seconds)
    job = await anyio.to_thread.run_sync(_submit, state, body, _uploader(request, state))
    try:
        RUNNER.submit(state.settings.tuning_db, job["id"], body.families)
    except queue.Full:
        await anyio.to_thread.run_sync(_stop, state, job["id"], "the server's queue of fits "
                                       "was full")
        raise FitQueueFullError(RUNNER.waiting, state.settings.retry_after_seconds) from None
    location = f"/v1/fit/jobs/{job['id']}"
    return JSONResponse({"job": state.public(job), "poll": location}, status_code=202,
                        headers={"Location": location})


def _stop(state: ServiceState, job_id: str, why: str) -> None:
    stop_fit_job(open_db(state.settings.tuning_db), job_id, why)


def _submit(state: ServiceState, body: FitJobIn, requester: str) -> dict[str, Any]:
    backend = arguments.backend(body.backend)
    db = open_db(state.settings.tuning_db)
    ident = stored_class(db, backend, body.device)
    if ident is None:
        # The store's state, not the request: the same body is served once timings are in.
        rule = (f"no device class of that name on {backend} in this server's store (GET "
                "/v1/devices lists them; upload its timings first)")
        raise ConflictError("device", body.device, rule, f"device={body.device!r}: {rule}")
    return submit_fit_job(db, backend, ident, requester)


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
    return get_fit_job(open_db(state.settings.tuning_db), job_id)
