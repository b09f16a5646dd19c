"""The one table from errors to HTTP answers, and the handlers that apply it.

Every error body has the same shape (:class:`service.schemas.ErrorBody`): a stable ``code``,
a readable ``message`` and, where known, the ``field``, ``value`` and ``rule`` at fault.
Bad input is always a 4xx; a 500 means a bug or a broken server, never the caller's input.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from convsel.errors import (
    BackendUnavailableError,
    ConvselError,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
)

log = logging.getLogger("convsel.service")


class TooLargeError(Exception):
    """A body, tensor or convolution over a configured limit (HTTP 413)."""

    def __init__(self, field: str, value: int, limit: int, what: str) -> None:
        self.field, self.value = field, value
        self.rule = f"{what} must be at most {limit}"
        super().__init__(f"{field}: {what} {value} exceeds the limit {limit}")


class BusyError(Exception):
    """Too many convolutions in flight (HTTP 503 with Retry-After)."""

    def __init__(self, in_flight: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"{in_flight} convolutions are running or queued, the most this "
                         f"server accepts; retry after {retry_after} s")


class FeatureUnavailableError(Exception):
    """A valid request for a feature this build of the service lacks (HTTP 503)."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"{field}={value!r}: {rule}")


class UnsupportedMediaTypeError(Exception):
    """A request body in a content type the route does not read (HTTP 415)."""

    def __init__(self, content_type: str, accepted: tuple[str, ...]) -> None:
        self.field, self.value = "content-type", content_type
        self.rule = f"accepted: {', '.join(accepted)}"
        super().__init__(f"content-type {content_type!r} is not accepted; {self.rule}")


# exception class -> (HTTP status, error code). Looked up along the exception's MRO, so a
# subclass not listed here gets its nearest listed base's answer.
ERRORS: dict[type[BaseException], tuple[int, str]] = {
    UnknownTargetError: (422, "unknown_target"),
    InvalidProblemError: (422, "invalid_problem"),
    BackendUnavailableError: (503, "backend_unavailable"),
    UnsupportedError: (422, "unsupported"),
    TuningDatabaseError: (503, "tuning_database_unavailable"),
    KernelBuildError: (500, "kernel_build_failed"),
    RuleFileError: (500, "rule_file_invalid"),
    ConvselError: (500, "convsel_error"),
    TooLargeError: (413, "too_large"),
    BusyError: (503, "busy"),
    FeatureUnavailableError: (503, "feature_unavailable"),
    UnsupportedMediaTypeError: (415, "unsupported_media_type"),
}

# Starlette's own HTTP errors (routing, body limit) -> error code.
HTTP_CODES: dict[int, str] = {404: "not_found",
                              405: "method_not_allowed", 413: "too_large",
                              415: "unsupported_media_type"}


def status_and_code(exc: BaseException) -> tuple[int, str]:
    """The table's answer for ``exc``; (500, "internal_error") for anything unlisted."""
    for cls in type(exc).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return 500, "internal_error"


def error_body(code: str, message: str, *, field: str | None = None, value: Any = None,
               rule: str | None = None, errors: list[dict[str, Any]] | None = None,
               ) -> dict[str, Any]:
    """The JSON error body; ``value`` is made JSON-safe (tuples become lists, others text)."""
    return {"code": code, "message": message, "field": field, "value": _json_safe(value),
            "rule": rule, "errors": errors}


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
    """pydantic/FastAPI error list -> [{loc, msg, type}] without echoing the input back."""
    return [{"loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
             "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in errors]


def validation_body(errors: Any) -> dict[str, Any]:
    items = validation_errors(errors)
    first = items[0] if items else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"])
    return error_body("validation_error", f"{where}: {first['msg']}" if where else first["msg"],
                      field=where or None, rule=first["msg"], errors=items)


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)) and len(value) <= 16:
        return [_json_safe(v) for v in value]
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status, body = describe_error(exc)
    headers = ({"Retry-After": str(exc.retry_after)} if isinstance(exc, BusyError) else None)
    return JSONResponse(body, status_code=status, headers=headers)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(validation_body(exc.errors()), status_code=422)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status == 400:
        # FastAPI and Starlette answer a body they cannot parse (not UTF-8, broken multipart,
        # too many parts) with 400; the service's contract is 422 for malformed input.
        body = error_body("malformed_body", str(exc.detail), field="body",
                          rule="the body must parse as its content type")
        return JSONResponse(body, status_code=422, headers=exc.headers)
    code = HTTP_CODES.get(status, f"http_{status}")
    body = error_body(code, str(exc.detail), field="body" if status == 413 else None)
    return JSONResponse(body, status_code=status, headers=exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)


def install(app: FastAPI) -> None:
    """Register the handlers: one per table entry, FastAPI's validation errors, Starlette's
    HTTP errors, and a last-resort 500 that never leaks a traceback."""
    for cls in ERRORS:
        app.add_exception_handler(cls, _on_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the error statuses a route can answer."""
    from .schemas import ErrorBody  # schemas stay free of handler imports

    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
            for status in statuses}


_DESCRIPTIONS = {413: "a body, tensor or convolution over a configured limit",
                 415: "a body in a content type this route does not read",
                 422: "invalid input: the body names the field, the value and the rule",
                 503: "busy (Retry-After), a backend or a feature unavailable here"}
