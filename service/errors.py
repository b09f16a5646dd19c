"""The one table from errors to HTTP answers, and the handlers that apply it.

Every error body has the same shape (:class:`service.schemas.ErrorBody`): a stable ``code``,
a readable ``message`` and, where known, the ``field``, ``value`` and ``rule`` at fault.
Bad input is always a 4xx; a 500 means a bug or a broken server, never the caller's input.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from convsel import (
    BackendUnavailableError,
    ConvselError,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
    WorkspaceLimitError,
)

log = logging.getLogger("convsel.service")


class TooLargeError(Exception):
    """A body, tensor or convolution over a configured limit (HTTP 413); ``setting`` names the
    variable that sets the limit."""

    def __init__(self, field: str, value: float, limit: float, what: str,
                 setting: str | None = None) -> None:
        self.field, self.value = field, value
        where = f" ({setting})" if setting else ""
        self.rule = f"{what} must be at most {limit:g}{where}"
        super().__init__(f"{field}: {what} {value:g} exceeds the limit {limit:g}{where}")


class BusyError(Exception):
    """Too many convolutions in flight (HTTP 503 with Retry-After)."""

    def __init__(self, in_flight: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"{in_flight} convolutions are running or queued, the most this "
                         f"server accepts; retry after {retry_after} s")


class ConflictError(Exception):
    """A well-formed request that the server's state cannot serve yet, such as fitting a
    model on a tuning database with too few timings (HTTP 409)."""

    def __init__(self, field: str, value: Any, rule: str, message: str) -> None:
        self.field, self.value, self.rule = field, value, rule
        super().__init__(message)


class UnauthorizedError(Exception):
    """A route that needs the operator's token, called without it (HTTP 401)."""

    field, value = "authorization", None
    rule = "send 'Authorization: Bearer <token>' (the server's CONVSEL_API_TOKEN)"

    def __init__(self, why: str) -> None:
        super().__init__(f"{why}: this route needs the API token")


# exception class -> (HTTP status, error code). Looked up along the exception's MRO, so a
# subclass not listed here gets its nearest listed base's answer.
ERRORS: dict[type[BaseException], tuple[int, str]] = {
    UnknownTargetError: (422, "unknown_target"),
    InvalidProblemError: (422, "invalid_problem"),
    BackendUnavailableError: (503, "backend_unavailable"),
    # the service passes only its own limit (CONVSEL_MAX_WORKSPACE_BYTES) to the library
    WorkspaceLimitError: (413, "too_large"),
    UnsupportedError: (422, "unsupported"),
    TuningDatabaseError: (503, "tuning_database_unavailable"),
    KernelBuildError: (500, "kernel_build_failed"),
    RuleFileError: (500, "rule_file_invalid"),
    ConvselError: (500, "convsel_error"),
    TooLargeError: (413, "too_large"),
    BusyError: (503, "busy"),
    ConflictError: (409, "conflict"),
    UnauthorizedError: (401, "unauthorized"),
}

# Starlette's own HTTP errors (routing, body limit) -> error code.
HTTP_CODES: dict[int, str] = {401: "unauthorized", 404: "not_found",
                              405: "method_not_allowed", 408: "request_timeout",
                              413: "too_large", 415: "unsupported_media_type"}


def status_and_code(exc: BaseException) -> tuple[int, str]:
    """The table's answer for ``exc``; (500, "internal_error") for anything unlisted."""
    for cls in type(exc).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return 500, "internal_error"


MAX_TEXT = 1000        # characters of a message or rule: an error never echoes a whole body
MAX_VALUE = 200        # characters of an echoed value
MAX_FIELD_ERRORS = 20  # entries of ``errors``


def error_body(code: str, message: str, *, field: str | None = None, value: Any = None,
               rule: str | None = None, errors: list[dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    """The JSON error body; ``value`` is made JSON-safe (tuples become lists, others text),
    and every text is cut to a bounded length."""
    return {"code": code, "message": _cut(message, MAX_TEXT),
            "field": None if field is None else _cut(field, MAX_VALUE),
            "value": _json_safe(value), "rule": None if rule is None else _cut(rule, MAX_TEXT),
            "errors": errors}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe_error(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(status, body) for a library or service exception: what the handlers and the batch
    route's per-item errors both send."""
    status, code = status_and_code(exc)
    if status >= 500 and code in ("internal_error", "convsel_error", "kernel_build_failed"):
        log.error("server error answering a request", exc_info=exc)
    return status, error_body(code, str(exc), field=getattr(exc, "field", None),
                              value=getattr(exc, "value", None),
                              rule=getattr(exc, "rule", None))


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """pydantic/FastAPI error list -> [{loc, msg, type}] without echoing the input back; the
    first :data:`MAX_FIELD_ERRORS` (a batch of bad items must not give a huge answer)."""
    return [{"loc": [_cut(str(p), MAX_VALUE) if not isinstance(p, int) else p
                     for p in e.get("loc", ()) if not str(p).startswith("as-")][:16],
             "msg": _cut(str(e.get("msg", "")), MAX_VALUE), "type": str(e.get("type", ""))}
            for e in list(errors)[:MAX_FIELD_ERRORS]]


def validation_body(errors: Any) -> dict[str, Any]:
    """The first error's field, value (what was sent there, cut as every echoed value; none
    for a missing field) and rule, and the first errors' locations."""
    errors = list(errors)
    items = validation_errors(errors)
    first = items[0] if items else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"])
    sent = errors[0].get("input") if errors and errors[0].get("type") != "missing" else None
    return error_body("validation_error", f"{where}: {first['msg']}" if where else first["msg"],
                      field=where or None, value=sent, rule=first["msg"], errors=items)


def _json_safe(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value, MAX_VALUE)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):   # a 10**30 is text: JSON readers lose precision past 2**53
        return value if abs(value) < 2**53 else _cut(str(value), MAX_VALUE)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)   # JSON has no NaN
    if isinstance(value, (tuple, list)) and len(value) <= 16:
        return [_json_safe(v) for v in value]
    return _cut(_repr(value), MAX_VALUE)


def _repr(value: Any) -> str:
    # repr of a container holding millions of items is itself a memory spike: show its size.
    if isinstance(value, (list, tuple, dict, set, str, bytes)) and len(value) > 64:
        return f"<{type(value).__name__} of {len(value)} items>"
    return repr(value)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status, body = describe_error(exc)
    headers = ({"Retry-After": str(exc.retry_after)} if isinstance(exc, BusyError) else
               {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else None)
    return JSONResponse(body, status_code=status, headers=headers)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(validation_body(exc.errors()), status_code=422)


def _on_http(allow: Mapping[str, str]) -> Callable[[Request, Exception],
                                                  Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = exc.headers
        if exc.status_code == 405 and request.url.path in allow:
            # Starlette's Allow names the first route of the path only: POST for /v1/fit,
            # which GET serves too.
            headers = {**(headers or {}), "Allow": allow[request.url.path]}
        return _http_answer(exc, headers)
    return handler


def _http_answer(exc: StarletteHTTPException, headers: Mapping[str, str] | None) -> JSONResponse:
    status = exc.status_code
    if status == 400:
        # FastAPI and Starlette answer a body they cannot parse (not UTF-8, broken multipart,
        # too many parts) with 400; the service's contract is 422 for malformed input.
        body = error_body("malformed_body", str(exc.detail), field="body",
                          rule="the body must parse as its content type")
        return JSONResponse(body, status_code=422, headers=headers)
    code = HTTP_CODES.get(status, f"http_{status}")
    body = error_body(code, str(exc.detail), field="body" if status in (408, 413) else None)
    return JSONResponse(body, status_code=status, headers=headers)


# nginx's "client closed request": the answer is never sent (nobody is listening), but the
# request log and the metrics record the request as the client's doing, not a server error.
CLIENT_CLOSED = 499


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    log.info("client closed the connection before its body arrived: %s %s", request.method,
             request.url.path)
    return Response(status_code=CLIENT_CLOSED)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)


def install(app: FastAPI, allow: Mapping[str, str] | None = None) -> None:
    """Register the handlers: one per table entry, FastAPI's validation errors, Starlette's
    HTTP errors, a client that hung up mid-body (499, logged without a traceback), and a
    last-resort 500 that never leaks a traceback. ``allow`` maps each path to the methods
    its routes serve, for the Allow header of a 405."""
    for cls in ERRORS:
        app.add_exception_handler(cls, _on_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http(allow or {}))
    app.add_exception_handler(ClientDisconnect, _on_disconnect)
    app.add_exception_handler(Exception, _on_unexpected)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the error statuses a route can answer."""
    from .schemas import ErrorBody  # schemas stay free of handler imports

    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
            for status in statuses}


_DESCRIPTIONS = {401: "the route needs the API token (CONVSEL_API_TOKEN is set)",
                 409: "the server's state cannot serve the request yet (too few timings)",
                 413: "a body, tensor or convolution over a configured limit",
                 415: "a body in a content type this route does not read",
                 422: "invalid input: the body names the field, the value and the rule",
                 503: "busy (Retry-After), or a backend or the tuning database unavailable"}
