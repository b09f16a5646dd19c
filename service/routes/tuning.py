"""POST /v1/tune: time every algorithm for one problem on this server and record the winner.
GET /v1/tuning: what the tuning database holds.

Tuning is bounded: one at a time per server process (another request meanwhile gets 503 with
Retry-After), a time budget per request (``budget_s``, checked between timed runs, so one slow
run may overrun it), and the size limits of /v1/conv2d. A measurement that the budget cut
short is returned but not recorded. The database is ``CONVSEL_TUNING_DB`` (or the user data
directory); when it cannot be opened the service still answers, with ACL's rules, and
/readyz reports it under ``detail.tuning``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from typing import Any, Literal

import anyio
from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from convsel import (
    ConvProblem,
    TuningDatabaseError,
    __version__,
    backends,
    choose,
    find,
)
from convsel.tuning import IMPLEMENTATIONS_VERSION, TuningDB, device_identity, open_db

from ..auth import TOKEN
from ..convert import backend_to_run, check_size, json_body, to_problem, validate_body
from ..errors import responses
from ..fitted import model_in_use
from ..schemas import MAX_NAME, Backend, RunnableProblemIn
from ..state import ServiceState, StateDep, state_of
from ..timing import MAX_BUDGET_S, budget, timing_slot

router = APIRouter(prefix="/v1", tags=["tuning"])


class TuneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    problem: RunnableProblemIn  # type: ignore[valid-type]
    target: str | None = Field(None, max_length=MAX_NAME, json_schema_extra={
        "x-convsel": "target"}, description="the ACL target whose rules break a tie; "
        "default: the server's")
    backend: Backend | None = Field(  # type: ignore[valid-type]
        None, description="default: the server's")
    device: str | None = Field(None, max_length=MAX_NAME,
                               description="OpenCL device; default: the server's")
    budget_s: float = Field(10.0, gt=0, le=MAX_BUDGET_S,
                            description="stop timing after about this many seconds")
    retune: bool = Field(False, description="time it again although the database has it")


OPENAPI_MODELS = (TuneRequest,)


class TuneResponse(BaseModel):
    """The measurement (or the stored entry, ``cached``) and what policy=measured now says."""

    model_config = ConfigDict(extra="allow")

    problem: dict[str, Any]
    backend: str
    device: dict[str, Any]
    cached: bool
    complete: bool
    recorded: bool
    note: str | None
    winner: str | None
    tie: list[str]
    timings: dict[str, Any]
    elapsed_s: float
    selection: dict[str, Any]


class DatabaseStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    ok: bool
    writable: bool
    entries: int
    path: str | None = Field(None, description="shown with CONVSEL_SHOW_PATHS=1")


class TuningEntryOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    problem: dict[str, Any]
    backend: str
    device: dict[str, Any]
    winner: str | None
    tie: list[str]
    timings: dict[str, Any]
    current: bool = Field(description="whether this server's convsel would use the entry")


class StoredModelOut(BaseModel):
    """One cost model stored in the database (its body left out)."""

    id: str | None
    family: str
    backend: str
    device: str
    driver: str
    convsel_version: str
    implementations_version: str
    training_problems: int | None
    current: bool = Field(description="whether this server's convsel and implementations "
                                      "versions would use it")
    created: float


class TuningResponse(BaseModel):
    """The database's status, its newest entries, and its cost models."""

    database: DatabaseStatus
    count: int
    returned: int
    entries: list[TuningEntryOut]
    model: dict[str, Any] = Field(description="what the predicted policy uses on this "
                                              "backend here (as GET /v1/fit)")
    models: list[StoredModelOut]


@router.post("/tune", response_model=TuneResponse, dependencies=[TOKEN],
             responses=responses(401, 413, 415, 422, 503), openapi_extra=json_body("TuneRequest"))
async def tune(request: Request) -> dict[str, Any]:
    """Time every algorithm that can run ``problem`` and record the result (bounded). Needs
    the API token when the server has one."""
    state = state_of(request)
    body = validate_body(TuneRequest, await request.body(), json=True)
    problem = to_problem(body.problem)
    check_size(state, problem)
    with timing_slot(state, budget(state, body.budget_s)):
        return await anyio.to_thread.run_sync(_tune, state, problem, body)


@router.get("/tuning", response_model=TuningResponse, responses=responses(422, 503))
async def tuning(state: StateDep,
                 backend: Literal[tuple(backends.BACKENDS)] | None = None,  # type: ignore
                 limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    """The database's status and its entries (newest last), with ``current`` telling whether
    this server's convsel and implementations would use each."""
    return await anyio.to_thread.run_sync(_listing, state, backend, limit)


def _listing(state: ServiceState, backend: str | None, limit: int) -> dict[str, Any]:
    """On a worker thread: every call here may wait on the database."""
    try:
        db = open_db(state.settings.tuning_db)
        entries = db.entries(backend=backend)
        stored = db.models()
        status = db.status()
    except TuningDatabaseError as exc:
        raise TuningDatabaseError(state.public(str(exc))) from None
    if not state.settings.show_paths:
        status.pop("path", None)
    in_use = model_in_use(state, backend)
    return {"database": state.public(status), "count": len(entries),
            "returned": min(limit, len(entries)),
            "entries": [{**e.to_dict(), "current": e.is_current} for e in entries[-limit:]],
            "model": in_use,
            "models": [_model_summary(m) for m in stored
                       if backend is None or m["backend"] == backend]}


def _model_summary(row: dict[str, Any]) -> dict[str, Any]:
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    return {"id": meta.get("id"), "family": row["family"], "backend": row["backend"],
            "device": row["device"], "driver": row["driver"],
            "convsel_version": row["convsel_version"],
            "implementations_version": row["implementations_version"],
            "training_problems": meta.get("training_problems"),
            "current": (row["convsel_version"], row["implementations_version"]) == (
                __version__, IMPLEMENTATIONS_VERSION),
            "created": row["created"]}


def ready(app: FastAPI) -> dict[str, Any]:
    """The database never makes the service unready: without it, answers come from rules."""
    state: ServiceState = app.state.convsel
    try:
        status = open_db(state.settings.tuning_db).status()
    except TuningDatabaseError as exc:
        return {"ok": True, "available": False, "reason": str(exc)}
    if not state.settings.show_paths:
        status.pop("path", None)
    return {"ok": True, "available": True, **status}


def _tune(state: ServiceState, problem: ConvProblem, body: TuneRequest) -> dict[str, Any]:
    try:
        return _tune_once(state, problem, body)
    finally:
        release_memory()


def release_memory() -> None:
    """Hand the heap's free pages back to the system after a tuning. Timing a large problem
    allocates and frees hundreds of MB of arrays in many sizes; glibc keeps the freed
    blocks in its arenas, and the server would keep that peak for good. (No gc.collect():
    the arrays are freed by reference counting, and a full collection costs 0.1-0.5 s on a
    large heap.)"""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_malloc_trim = _load_malloc_trim()


def _tune_once(state: ServiceState, problem: ConvProblem, body: TuneRequest) -> dict[str, Any]:
    s = state.settings
    backend = backend_to_run(state, body.backend)
    device = body.device if body.device is not None else s.opencl_device
    db, note = _database(state)
    started = time.perf_counter()
    entry = None if body.retune or db is None else db.lookup(
        problem, backend, device_identity(backend, device))
    if entry is not None:
        view = {"cached": True, "complete": True, "recorded": True, "note": None,
                "winner": entry.winner, "tie": list(entry.tie),
                "timings": dict(entry.timings), "device": dict(entry.device)}
    else:
        found = find(problem, backend=backend, device=device, target=state.target(body.target),
                     rules=state.loaded_rules(), budget_s=budget(state, body.budget_s),
                     store=db is not None, db=db)
        m = found.measurement
        assert m is not None   # find() keeps the measurement it ranked
        view = {"cached": False, "complete": m.complete, "recorded": found.stored,
                "note": note or state.public(found.note), "winner": m.winner, "tie": list(m.tie),
                "device": dict(m.device),
                "timings": {**m.timings, **{k: {"skipped": v} for k, v in m.skipped.items()}}}
    sel = choose(problem, state.target(body.target), rules=state.loaded_rules(),
                 policy="measured", backend=backend, device=device,
                 db=db if db is not None else s.tuning_db)
    return {"problem": problem.to_dict(), "backend": backend, **view,
            "elapsed_s": round(time.perf_counter() - started, 3),
            "selection": state.public(sel.to_dict())}


def _database(state: ServiceState) -> tuple[TuningDB | None, str | None]:
    try:
        return open_db(state.settings.tuning_db), None
    except TuningDatabaseError as exc:
        return None, f"not stored: {state.public(str(exc))}"
