"""POST /v1/select and /v1/select/batch: which method a policy chooses, and why."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import Field, ValidationError, create_model

from convsel import InvalidProblemError, Target, resolve_target
from convsel.policies import Policy, get_policy

from ..convert import json_body, select_json, selection_options, to_problem, validate_body
from ..errors import TooLargeError, describe_error, responses
from ..limits import BodyRule
from ..schemas import (
    BATCH_FIELD,
    ProblemIn,
    SelectBatchRequest,
    SelectBatchResponse,
    SelectRequest,
    SelectResponse,
)
from ..state import ServiceState, state_of

router = APIRouter(prefix="/v1", tags=["selection"])
OPENAPI_MODELS = (SelectRequest, SelectBatchRequest)
BODIES = {"/v1/select": BodyRule("max_select_body_bytes"),
          "/v1/select/batch": BodyRule("max_batch_body_bytes")}


@router.post("/select", response_model=SelectResponse,
             responses=responses(413, 415, 422, 503), openapi_extra=json_body("SelectRequest"))
async def select_one(request: Request) -> Response:
    """The method and algorithm for one problem, with the trace, every candidate's verdict
    and the rules' version/digest. ACL's rules answer on the event loop (cheap, cached); a
    policy that reads the tuning database answers from a worker thread, so a database that
    does not answer never stalls the loop."""
    # The hot route, kept to ~1/3 of FastAPI's usual per-request cost: the body validated
    # straight from bytes, state without a dependency, and the answer (Selection.to_dict,
    # whose shape the schema tests check) serialised without re-validation.
    body = validate_body(SelectRequest, await request.body(), json=True)
    state = state_of(request)
    options = selection_options(state, body.policy, body.backend, body.device)
    args = (state, body.problem, body.target, body.policy, options)
    answer = (select_json(*args) if body.policy == "acl" and not options
              else await run_in_threadpool(select_json, *args))
    return Response(answer, media_type="application/json")


@router.post("/select/batch", response_model=SelectBatchResponse,
             responses=responses(413, 415, 422, 503),
             openapi_extra=json_body("SelectBatchRequest"))
async def select_batch(request: Request) -> dict[str, Any]:
    """Many problems on one target, answered in order. A malformed item, a bad target,
    policy or option fails the whole batch (422); a well-formed problem that the library
    refuses gives an ``error`` entry at its index."""
    state = state_of(request)
    limit = state.settings.max_batch_size
    try:
        body = batch_model(limit).model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if errors[0]["type"] == "too_long" and errors[0]["loc"] == ("problems",):
            raise TooLargeError("problems", errors[0]["ctx"]["actual_length"], limit,
                                "batch size") from None
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    rules = state.loaded_rules()
    # The library judges the shared fields once, for the whole batch.
    target = resolve_target(state.target(body.target), rules)
    policy = get_policy(body.policy,
                        **selection_options(state, body.policy, body.backend, body.device))
    results = await run_in_threadpool(_answer_all, state, body, target, policy)
    failed = sum(1 for r in results if r["error"] is not None)
    return {"results": results, "count": len(results), "failed": failed}


@lru_cache(maxsize=8)
def batch_model(limit: int) -> type[SelectBatchRequest]:
    """The batch request with this server's item limit, checked while the list is parsed:
    the parser stops at item ``limit + 1`` instead of building (and reporting on) them all."""
    return create_model(  # type: ignore[no-any-return, call-overload]
        "SelectBatchRequest", __base__=SelectBatchRequest, __module__=__name__,
        problems=(list[ProblemIn], Field(max_length=limit, json_schema_extra=BATCH_FIELD)))


def _answer_all(state: ServiceState, body: SelectBatchRequest, target: Target,
                policy: Policy) -> list[dict[str, Any]]:
    return [_answer(state, i, item, target, policy) for i, item in enumerate(body.problems)]


def _answer(state: ServiceState, index: int, item: Any, target: Target,
            policy: Policy) -> dict[str, Any]:
    try:
        problem = to_problem(item, f"problems.{index}")
        sel = policy.choose(problem, target, state.loaded_rules())
    except InvalidProblemError as exc:   # this item's fault; server faults fail the batch
        return {"index": index, "selection": None, "error": describe_error(exc)[1]}
    answer = {"problem": problem.to_dict(), **sel.to_dict()}
    state.metrics.selection(answer)
    return {"index": index, "selection": state.hide_database(answer), "error": None}
