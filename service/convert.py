"""Wire models -> library calls: problems, selections, and validation of bodies the routes
read themselves. Errors keep the library's field/value/rule, with the field's wire path.

The service checks structure (service.schemas) and its own limits; everything else (the
problem's geometry, targets, policies and their options) is the library's to judge.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from convsel import (
    BackendUnavailableError,
    ConvProblem,
    InvalidProblemError,
    Rules,
    arguments,
    backends,
    choose,
)
from convsel.policies import options_for

from .errors import TooLargeError
from .state import ServiceState

M = TypeVar("M", bound=BaseModel)


def to_problem(model: BaseModel, where: str = "problem") -> ConvProblem:
    """The library's ConvProblem; an invalid field is reported as ``problem.<field>``."""
    return _with_path(where, ConvProblem.from_dict, _fields(model))


def _fields(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(exclude_unset=True, exclude_none=True)


def _with_path(where: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except InvalidProblemError as exc:
        raise type(exc)(f"{where}.{exc.field}", exc.value, exc.rule) from None


def check_size(state: ServiceState, p: ConvProblem) -> None:
    """The server's limits on work it runs (/v1/conv2d, /v1/tune): tensor elements and
    flops. Refused with 413 before any array is allocated."""
    s = state.settings
    padded = p.n * (p.h + p.pad[0] + p.pad[1]) * (p.w + p.pad[2] + p.pad[3]) * p.c
    # The padded input is a buffer too (im2col, direct, tuning): a 1x1 input with a pad of
    # 60000 and a dilated kernel is small in x, y and flops, and 14 G elements padded.
    # The numpy backend's planar im2col (few-channel inputs) splits the input into one plane
    # per stride phase: stride_h x stride_w x n x c planes, however small the input, and a
    # Python loop over them. A stride of 65535 on a 1x1 input is 4.3 G elements.
    phases = p.stride[0] * p.stride[1] * p.n * p.c
    for name, elements in (("x", p.n * p.h * p.w * p.c), ("y", p.n * p.out_h * p.out_w * p.k),
                           ("pad", padded), ("stride", phases)):
        if elements > s.max_tensor_elements:
            raise TooLargeError(name, elements, s.max_tensor_elements, "tensor elements")
    if p.flops > s.max_conv_flops:
        raise TooLargeError("problem", p.flops, s.max_conv_flops, "convolution flops")


def validate_body(model: type[M], data: Any, *, json: bool = False,
                  loc: tuple[str | int, ...] = ("body",)) -> M:
    """Validate a body a route read itself, failing like FastAPI does (422, field locations)."""
    try:
        return model.model_validate_json(data) if json else model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None


def json_body(model_name: str) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body that the route validates itself (the model
    must be listed in ``service.app.OPENAPI_MODELS``, through its module's
    ``OPENAPI_MODELS``)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model_name}"}}}}}


def selection_options(state: ServiceState, policy: str, backend: str | list[str] | None,
                      device: str | None) -> dict[str, Any]:
    """The policy's options: what the client gave (an option the policy does not take is
    refused when the policy is built), and the server's defaults for the options the policy
    takes (measured and predicted: backend, device, tuning database). A backend list that
    names a device index takes no server device beside it."""
    s = state.settings
    server_device = None if backend is not None and _names_a_device(backend) else \
        s.opencl_device
    return options_for(policy, {"backend": backend, "device": device},
                       defaults={"backend": s.default_backend, "device": server_device,
                                 "db": s.tuning_db})


def _names_a_device(backend: str | list[str] | backends.Preference) -> bool:
    return any(e.device is not None for e in arguments.backends(backend))


def backends_and_device(state: ServiceState, given: str | list[str] | None
                        ) -> tuple[backends.Preference, str | None]:
    """The request's backends (one, or several in order of preference), else the server's,
    and the device for the entries that name none: the server's, unless one names its
    index."""
    # None is "the server's"; an empty name is the library's to refuse, as for targets
    chosen = arguments.backends(state.settings.default_backend if given is None else given)
    return chosen, None if _names_a_device(chosen) else state.settings.opencl_device


def backends_to_run(state: ServiceState, given: str | list[str] | None
                    ) -> tuple[backends.Preference, str | None]:
    """:func:`backends_and_device` for work that times on the backend: one backend that
    cannot run here is 503, as :func:`backend_to_run`; a list passes over those that
    cannot, as the library does."""
    chosen, device = backends_and_device(state, given)
    if chosen.single:
        ready = backends.available(chosen.first.backend)
        if not ready.ok:
            raise BackendUnavailableError(ready.reason, backend=chosen.first.backend)
    return chosen, device


def backend_to_run(state: ServiceState, given: str | None) -> str:
    """The request's backend, else the server's, if it can run here: a backend that cannot
    (no OpenCL device) is 503, as when the library finds it so."""
    backend = arguments.backend(state.settings.default_backend if given is None else given)
    ready = backends.available(backend)
    if not ready.ok:
        raise BackendUnavailableError(ready.reason, backend=backend)
    return backend


def run_select(state: ServiceState, problem: ConvProblem, target: str | None, policy: str,
               options: dict[str, Any]) -> dict[str, Any]:
    """The policy's selection as the wire answer (the normalised problem +
    ``Selection.to_dict()``)."""
    sel = choose(problem, state.target(target),
                 rules=state.loaded_rules(), policy=policy, **options)
    answer = {"problem": problem.to_dict(), **sel.to_dict()}
    state.metrics.selection(answer)
    return state.hide_database(answer)     # a trace may name the tuning database's path


def select_json(state: ServiceState, problem: BaseModel, target: str | None, policy: str,
                options: dict[str, Any]) -> bytes:
    """:func:`run_select`'s answer as JSON bytes.

    Under policy "acl" with no options, the answer is a pure function of (problem, target,
    rules): the service's one cache holds its encoding, keyed by the problem's fields as sent,
    the target and the rules (their digest). It saves ConvProblem's validation and the
    encoding, ~50 of the ~60 us a selection costs here (the library caches only select()
    itself). "measured" reads a database that changes: never cached.
    """
    if policy != "acl" or options:
        return to_json(run_select(state, to_problem(problem), target, policy, options))
    key = problem.model_dump_json(exclude_unset=True, exclude_none=True)
    body, labels = _acl_answer(key, state.target(target),
                               state.loaded_rules())
    state.metrics.selection(labels)
    return body


@lru_cache(maxsize=4096)
def _acl_answer(problem_json: str, target: str, rules: Rules) -> tuple[bytes, dict[str, str]]:
    # Errors are never cached (lru_cache keeps only returned values).
    problem = _with_path("problem", ConvProblem.from_dict, json.loads(problem_json))
    answer = {"problem": problem.to_dict(),
              **choose(problem, target, rules=rules, policy="acl").to_dict()}
    labels = {k: answer[k] for k in ("method", "algorithm", "policy", "source")}
    return to_json(answer), labels


__all__ = ["backend_to_run", "backends_and_device", "backends_to_run", "check_size",
           "json_body", "run_select", "select_json", "selection_options", "to_problem",
           "validate_body"]
