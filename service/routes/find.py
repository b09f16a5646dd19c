"""POST /v1/find: time every algorithm and variant for one problem on this server, ranked
(``convsel.find``; cuDNN's cudnnFindConvolutionForwardAlgorithm, MIOpen's Find).

Bounded as /v1/tune is, and sharing its guard: one timing at a time per process (503 with
Retry-After), a time budget per request, the size limits of /v1/conv2d, and the server's
``CONVSEL_MAX_WORKSPACE_BYTES`` as a ceiling on the request's own workspace limit. Timing costs
the server seconds of CPU, so the route takes the API token when the server has one.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from convsel import find

from ..auth import TOKEN
from ..convert import backends_to_run, check_size, json_body, to_problem, validate_body
from ..errors import responses
from ..schemas import MAX_NAME, BackendList, RunnableProblemIn, integral
from ..state import ServiceState, state_of
from ..timing import MAX_BUDGET_S, budget, timing_slot

router = APIRouter(prefix="/v1", tags=["tuning"])


# more than any problem has candidates: a larger top is a mistake, not a wish for all of them
MAX_TOP = 64
# (the range before the validator: pydantic then states it as minimum/maximum in the schema)
Bytes = Annotated[StrictInt, Field(ge=0), BeforeValidator(integral)]
Top = Annotated[StrictInt, Field(ge=1, le=MAX_TOP), BeforeValidator(integral)]


class FindRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    problem: RunnableProblemIn  # type: ignore[valid-type]
    target: str | None = Field(None, max_length=MAX_NAME, json_schema_extra={
        "x-convsel": "target"}, description="the ACL target whose rules' pick is "
        "reported beside the ranking; default: the server's")
    backend: BackendList | None = Field(
        None, description="where to time (default: the server's); several are timed and "
        "ranked together, a device's candidates with the copies of x and y its clock left "
        "out (transfer_ms); winner and tie then read backend/label")
    budget_s: float = Field(10.0, gt=0, le=MAX_BUDGET_S,
                            description="stop timing after about this many seconds (the "
                            "server's CONVSEL_MAX_TUNE_SECONDS when smaller)")
    max_workspace_bytes: Bytes | None = Field(
        None, description="do not build candidates whose workspace is larger; the server's "
        "own limit applies when smaller or when this is absent")
    store: bool = Field(False, description="record a complete measurement in the server's "
                        "tuning database")
    top: Top | None = Field(None, description="time only the candidates the server's fitted "
                            "model predicts fastest (this many) and ACL's pick; every "
                            "candidate where the server has no usable model")


class FindEntryOut(BaseModel):
    rank: int | None
    backend: str | None = Field(None, description="where it ran, when several were timed")
    label: str
    algorithm: str
    params: dict[str, Any]
    status: str = Field(description="ok, error, excluded-by-workspace, skipped, unsupported")
    reason: str
    median_ms: float | None
    iqr_ms: float | None
    min_ms: float | None
    runs: int
    pruned: bool
    clock: str | None = Field(None, description="what the times are: device (profiling "
                              "events, OpenCL) or wall (the host's clock around the call)")
    transfer_ms: float | None = Field(None, description="several backends: the copies of x "
                                      "in and y out that a device clock leaves out")
    workspace_bytes: int | None


class FindResponse(BaseModel):
    problem: dict[str, Any]
    backend: str
    device: dict[str, str]
    winner: str | None
    tie: list[str]
    acl: str
    complete: bool
    max_workspace_bytes: int | None
    stored: bool
    note: str | None
    database: str | None
    narrowed: str | None = Field(None, description="with top: what was timed, or why every "
                                 "candidate was")
    passed_over: list[str] = Field([], description="backends of the list not timed, with why")
    devices: dict[str, dict[str, str]] = Field({}, description="several backends: each one's "
                                              "device")
    results: list[FindEntryOut]
    elapsed_s: float


OPENAPI_MODELS = (FindRequest,)


@router.post("/find", response_model=FindResponse, dependencies=[TOKEN],
             responses=responses(401, 413, 415, 422, 503),
             openapi_extra=json_body("FindRequest"))
async def find_route(request: Request) -> Any:
    """Every algorithm and variant that can run ``problem`` here, ranked by measured time,
    each with its spread, workspace, status and reason. Needs the API token when the server
    has one."""
    state = state_of(request)
    body = validate_body(FindRequest, await request.body(), json=True)
    problem = to_problem(body.problem)
    check_size(state, problem)
    with timing_slot(state, budget(state, body.budget_s)):
        return await anyio.to_thread.run_sync(_find, state, problem, body)


def _find(state: ServiceState, problem: Any, body: FindRequest) -> dict[str, Any]:
    s = state.settings
    backend, device = backends_to_run(state, body.backend)
    limit = s.max_workspace_bytes if body.max_workspace_bytes is None else min(
        body.max_workspace_bytes, s.max_workspace_bytes)
    started = time.perf_counter()
    target = s.default_target if body.target is None else body.target
    result = find(problem, backend=backend, device=device, target=target,
                  rules=state.loaded_rules(),
                  max_workspace_bytes=limit, store=body.store, db=s.tuning_db,
                  budget_s=budget(state, body.budget_s), top=body.top)
    answer = {**result.to_dict(), "elapsed_s": round(time.perf_counter() - started, 3)}
    if not s.show_paths:
        answer["database"] = None
    return state.hide_database(answer)   # "no model ... in <path>" when top finds none
