"""POST /v1/select and /v1/select/batch: which method ACL would choose, and why."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from convsel.errors import InvalidProblemError
from convsel.policies import POLICIES
from convsel.targets import resolve_target

from ..convert import (
    json_body,
    run_select,
    select_json,
    selection_options,
    to_problem,
    validate_body,
)
from ..errors import TooLargeError, describe_error, responses, validation_body
from ..schemas import (
    ProblemIn,
    SelectBatchRequest,
    SelectBatchResponse,
    SelectRequest,
    SelectResponse,
)
from ..state import ServiceState, StateDep, state_of

router = APIRouter(prefix="/v1", tags=["selection"])
OPENAPI_MODELS = (SelectRequest, SelectBatchRequest)


@router.post("/select", response_model=SelectResponse, responses=responses(413, 422, 503),
             openapi_extra=json_body("SelectRequest"))
async def select_one(request: Request) -> Response:
    """The method and algorithm for one problem, with the trace, every candidate's verdict
    and the rules' version/digest. Cheap (cached) and CPU-only, so it runs on the loop."""
    # The hot route, kept to ~1/3 of FastAPI's usual per-request cost: the body validated
    # straight from bytes, state without a dependency, and the answer (Selection.to_dict,
    # whose shape the schema tests check) serialised without re-validation.
    body = validate_body(SelectRequest, await request.body(), json=True)
    state = state_of(request)
    options = selection_options(state, body.policy, body.backend, body.device)
    return Response(select_json(state, to_problem(body.problem), body.target, body.policy,
                                options), media_type="application/json")


@router.post("/select/batch", response_model=SelectBatchResponse,
             responses=responses(413, 422, 503), openapi_extra=json_body("SelectBatchRequest"))
async def select_batch(request: Request, state: StateDep) -> dict[str, Any]:
    """Many problems on one target, answered in order; a bad problem gives an ``error``
    entry at its index. A bad target or policy fails the whole batch (422)."""
    # Validated from the bytes, like /v1/select: malformed JSON or text is a 422, never
    # FastAPI's 400.
    body = validate_body(SelectBatchRequest, await request.body(), json=True)
    limit = state.settings.max_batch_size
    if len(body.problems) > limit:
        raise TooLargeError("problems", len(body.problems), limit, "batch size")
    target = body.target or state.settings.default_target
    resolve_target(target, state.loaded_rules())
    if body.policy not in POLICIES:
        raise InvalidProblemError("policy", body.policy,
                                  f"unknown policy; known: {', '.join(POLICIES)}")
    options = selection_options(state, body.policy, body.backend, body.device)
    results = await run_in_threadpool(_answer_all, state, body, target, options)
    failed = sum(1 for r in results if r["error"] is not None)
    return {"results": results, "count": len(results), "failed": failed}


def _answer_all(state: ServiceState, body: SelectBatchRequest, target: str,
                options: dict[str, Any]) -> list[dict[str, Any]]:
    return [_answer(state, i, item, target, body.policy, options)
            for i, item in enumerate(body.problems)]


def _answer(state: ServiceState, index: int, item: Any, target: str, policy: str,
            options: dict[str, Any]) -> dict[str, Any]:
    where = f"problems.{index}"
    try:
        problem = to_problem(ProblemIn.model_validate(item), where)
        return {"index": index, "selection": run_select(state, problem, target, policy, options),
                "error": None}
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", "problems", index, *e["loc"])}
                  for e in exc.errors(include_input=False)]
        return {"index": index, "selection": None, "error": validation_body(errors)}
    except InvalidProblemError as exc:   # this item's fault; server faults fail the batch
        return {"index": index, "selection": None, "error": describe_error(exc)[1]}
