"""Wire models -> library calls: problems, selections, and validation of bodies the routes
read themselves. Errors keep the library's field/value/rule, with the field's wire path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from convsel.errors import InvalidProblemError
from convsel.policies import choose
from convsel.problem import ConvProblem
from convsel.rules import Rules
from convsel.selection import select

from .errors import FeatureUnavailableError
from .schemas import ProblemIn
from .state import ServiceState

M = TypeVar("M", bound=BaseModel)


def to_problem(model: ProblemIn, where: str = "problem") -> ConvProblem:
    """The library's ConvProblem; an invalid field is reported as ``problem.<field>``."""
    try:
        return _problem(model.model_dump_json(exclude_unset=True, exclude_none=True))
    except InvalidProblemError as exc:
        raise type(exc)(f"{where}.{exc.field}", exc.value, exc.rule) from None


@lru_cache(maxsize=4096)
def _problem(canonical_json: str) -> ConvProblem:
    # ConvProblem validation costs ~50-80 us, most of a cached select(); a service sees the
    # same layers over and over. Keyed by the exact fields given; errors are never cached.
    return ConvProblem.from_dict(json.loads(canonical_json))


def validate_body(model: type[M], data: Any, *, json: bool = False,
                  loc: tuple[str | int, ...] = ("body",)) -> M:
    """Validate a body a route read itself, failing like FastAPI does (422, field locations)."""
    try:
        return model.model_validate_json(data) if json else model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_input=False)]
        ) from None


def json_body(model_name: str) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body that the route validates itself (the model
    must be listed in the route module's ``OPENAPI_MODELS``)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model_name}"}}}}}


@contextmanager
def policy_available(policy: str) -> Iterator[None]:
    """Until the tuning layer is installed, policy="measured" cannot import it: a 503
    saying so, never a 500."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("convsel.tuning"):
            raise
        raise FeatureUnavailableError("policy", policy, "this server has no tuning layer "
                                      "(convsel.tuning); use policy 'acl'") from None


def selection_options(state: ServiceState, policy: str, backend: str | None,
                      device: str | None) -> dict[str, Any]:
    """Options for select(): what the client gave, and for "measured" the server defaults."""
    options = {k: v for k, v in (("backend", backend), ("device", device)) if v is not None}
    if policy == "measured":
        options.setdefault("backend", state.settings.default_backend)
        options.setdefault("device", state.settings.default_device)
        if state.settings.tuning_db is not None:
            options["db"] = str(state.settings.tuning_db)
    return options


def run_select(state: ServiceState, problem: ConvProblem, target: str | None, policy: str,
               options: dict[str, Any]) -> dict[str, Any]:
    """select() as the wire answer (the normalised problem + ``Selection.to_dict()``)."""
    with policy_available(policy):
        sel = choose(problem, target or state.settings.default_target,
                     rules=state.loaded_rules(), policy=policy, **options)
    answer = {"problem": problem.to_dict(), **sel.to_dict()}
    state.metrics.selection(answer)
    return answer


def select_json(state: ServiceState, problem: ConvProblem, target: str | None, policy: str,
                options: dict[str, Any]) -> bytes:
    """:func:`run_select`'s answer as JSON bytes. Under policy "acl" the answer is a pure
    function of (problem, target, rules), so its encoding is memoised like select() itself;
    "measured" reads a database that changes, so it is never memoised."""
    if policy != "acl" or options:
        return to_json(run_select(state, problem, target, policy, options))
    body, labels = _acl_answer(problem, target or state.settings.default_target,
                               state.loaded_rules())
    state.metrics.selection(labels)
    return body


@lru_cache(maxsize=4096)
def _acl_answer(problem: ConvProblem, target: str, rules: Rules) -> tuple[bytes, dict[str, str]]:
    answer = {"problem": problem.to_dict(), **select(problem, target, rules=rules).to_dict()}
    labels = {k: answer[k] for k in ("method", "algorithm", "policy", "source")}
    return to_json(answer), labels
