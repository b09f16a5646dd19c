"""A Python client for convsel's HTTP service, on httpx (``pip install 'convsel[client]'``).

    from convsel.client import Client

    with Client("http://127.0.0.1:8000") as c:
        sel = c.select({"n": 1, "h": 56, "w": 56, "c": 64, "k": 64, "kh": 3, "kw": 3, "pad": 1})
        y = c.conv2d(x, w, pad=1)                   # numpy in, numpy out

The service's error bodies (code, message, field, value, rule) come back as the library's
own exceptions: a 422 ``invalid_problem`` is :class:`~convsel.errors.InvalidProblemError`
with the same field, value and rule; ``unsupported`` is
:class:`~convsel.errors.UnsupportedError`; ``backend_unavailable``
:class:`~convsel.errors.BackendUnavailableError`, and so on. Answers with no library
counterpart (413, 503 busy, 401) are :class:`ServiceError` subclasses, which are
:class:`~convsel.errors.ConvselError` too. Every raised error carries ``status`` and ``code``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import config
from .errors import (
    BackendUnavailableError,
    ConvselError,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
)
from .problem import ConvProblem

NPY = "application/x-npy"
# Tensors larger than this (all together, as .npy) go as multipart file parts rather than
# base64 inside JSON: a third smaller on the wire and no base64 pass on either side.
MULTIPART_ABOVE_BYTES = 256 * 1024

try:
    import httpx
except ImportError as exc:   # pragma: no cover - depends on the environment
    raise ImportError("convsel.client needs httpx: pip install 'convsel[client]'") from exc


class ServiceError(ConvselError):
    """An error answer with no library counterpart; ``status``, ``code``, ``field``,
    ``value``, ``rule`` are the service's."""

    def __init__(self, message: str, *, status: int, code: str, field: str | None = None,
                 value: Any = None, rule: str | None = None,
                 retry_after: float | None = None) -> None:
        self.status, self.code = status, code
        self.field, self.value, self.rule = field, value, rule
        self.retry_after = retry_after
        super().__init__(message)


class TooLargeError(ServiceError):
    """413: a body, tensor, convolution or model over one of the server's limits."""


class BusyError(ServiceError):
    """503 busy: the server's convolution pool or its one tuning slot is full;
    ``retry_after`` says when to try again."""


class UnauthorizedError(ServiceError):
    """401: the route needs ``Authorization: Bearer <token>`` (``Client(token=...)``)."""


def _invalid(cls: type[InvalidProblemError]) -> Any:
    return lambda body: cls(body.get("field") or "request", body.get("value"),
                            body.get("rule") or body.get("message", ""))


def _message(cls: type[ConvselError]) -> Any:
    return lambda body: cls(body.get("message", ""))


# service error code -> how to build the library's exception from the body
_LIBRARY_ERRORS: dict[str, Any] = {
    "invalid_problem": _invalid(InvalidProblemError),
    "validation_error": _invalid(InvalidProblemError),
    "malformed_body": _invalid(InvalidProblemError),
    "unknown_target": _invalid(UnknownTargetError),
    "unsupported": _message(UnsupportedError),
    "backend_unavailable": _message(BackendUnavailableError),
    "tuning_database_unavailable": _message(TuningDatabaseError),
    "kernel_build_failed": _message(KernelBuildError),
    "rule_file_invalid": _message(RuleFileError),
}
_SERVICE_ERRORS: dict[str, type[ServiceError]] = {
    "too_large": TooLargeError, "busy": BusyError, "unauthorized": UnauthorizedError,
}


def error_from_response(response: httpx.Response) -> ConvselError:
    """The exception a service error answer stands for (see the module's docstring)."""
    try:
        body = response.json()
        if not isinstance(body, dict) or "code" not in body:
            raise ValueError("not the service's error body")
    except ValueError:
        body = {"code": f"http_{response.status_code}",
                "message": f"HTTP {response.status_code}: {response.text[:500]}"}
    code = str(body["code"])
    retry = response.headers.get("retry-after")
    exc: ConvselError
    if code in _LIBRARY_ERRORS:
        exc = _LIBRARY_ERRORS[code](body)
    else:
        cls = _SERVICE_ERRORS.get(code, ServiceError)
        exc = cls(str(body.get("message", "")), status=response.status_code, code=code,
                  field=body.get("field"), value=body.get("value"), rule=body.get("rule"),
                  retry_after=float(retry) if retry and retry.isdigit() else None)
    # every raised error says what the service answered, library classes included
    for name, value in (("status", response.status_code), ("code", code),
                        ("errors", body.get("errors"))):
        setattr(exc, name, value)
    return exc


class Client:
    """convsel's HTTP API from Python.

    Parameters
    ----------
    base_url : str
        The server, e.g. ``"http://127.0.0.1:8000"``.
    token : str, optional
        Sent as ``Authorization: Bearer <token>`` (routes guarded by ``CONVSEL_API_TOKEN``).
        Defaults to ``$CONVSEL_API_TOKEN`` (:func:`convsel.config.current`).
    timeout : float
        Seconds per request (tuning and find run up to their budget on the server).
    """

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 120.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        if token is None:   # the library's one configuration: $CONVSEL_API_TOKEN
            configured = config.current().api_token
            token = configured.get_secret_value() if configured is not None else None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response)
        return response

    def _post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._request("POST", path, json=_drop_none(body)).json())

    # -- routes --------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/healthz").json())

    def ready(self) -> dict[str, Any]:
        return dict(self._request("GET", "/readyz").json())

    def select(self, problem: ConvProblem | Mapping[str, Any], target: str | None = None, *,
               policy: str = "acl", backend: str | None = None,
               device: str | None = None) -> dict[str, Any]:
        """``POST /v1/select``: the method for one problem, with trace and candidates."""
        return self._post_json("/v1/select", {"problem": _problem(problem), "target": target,
                                              "policy": policy, "backend": backend,
                                              "device": device})

    def select_batch(self, problems: Sequence[ConvProblem | Mapping[str, Any]],
                     target: str | None = None, *, policy: str = "acl",
                     backend: str | None = None, device: str | None = None) -> dict[str, Any]:
        """``POST /v1/select/batch``: many problems in order; a bad one has an ``error``
        entry at its index (not raised)."""
        return self._post_json("/v1/select/batch", {
            "problems": [_problem(p) for p in problems], "target": target, "policy": policy,
            "backend": backend, "device": device})

    def conv2d(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
               stride: Any = 1, pad: Any = 0, dilation: Any = 1, groups: int | None = None,
               activation: Any = None, fast_math: bool = False, layout: str = "NHWC",
               weights_layout: str = "OHWI", algorithm: str = "auto",
               backend: str | None = None, target: str | None = None, policy: str = "acl",
               multipart: bool | None = None) -> np.ndarray:
        """``POST /v1/conv2d``: run the convolution on the server; y comes back as an array
        in ``layout`` and x's dtype (float32, or float16 for F16).

        The problem is derived from the arrays as :func:`convsel.conv2d` does. Tensors go as
        ``.npy`` multipart file parts when they are large (``multipart=None``: over
        :data:`MULTIPART_ABOVE_BYTES`), else base64 inside JSON.
        """
        from .api import problem_from_arrays

        problem = problem_from_arrays(x, w, stride=stride, pad=pad, dilation=dilation,
                                      groups=groups, activation=activation,
                                      fast_math=fast_math, weights_layout=weights_layout,
                                      layout=layout)
        wire = np.float16 if problem.dtype == "F16" else np.float32
        tensors = {name: np.ascontiguousarray(a, dtype=wire)
                   for name, a in (("x", x), ("w", w), ("bias", bias)) if a is not None}
        fields = _drop_none({"algorithm": algorithm, "backend": backend, "target": target,
                             "weights_layout": weights_layout, "policy": policy})
        size = sum(a.nbytes for a in tensors.values())
        headers = {"Accept": NPY}
        if multipart if multipart is not None else size > MULTIPART_ABOVE_BYTES:
            files = {name: (f"{name}.npy", _npy(a), NPY) for name, a in tensors.items()}
            data = {**fields, "problem": json.dumps(problem.to_dict())}
            response = self._request("POST", "/v1/conv2d", data=data, files=files,
                                     headers=headers)
        else:
            import base64

            body = {"problem": problem.to_dict(), **fields,
                    **{n: base64.b64encode(_npy(a)).decode() for n, a in tensors.items()}}
            response = self._request("POST", "/v1/conv2d", json=body, headers=headers)
        y: np.ndarray = np.load(io.BytesIO(response.content), allow_pickle=False)
        return y

    def plan(self, model: str | os.PathLike[str] | bytes, target: str | None = None, *,
             policy: str = "acl", input_shapes: Mapping[str, Sequence[int]] | None = None,
             layout: str = "NCHW", fast_math: bool = False) -> dict[str, Any]:
        """``POST /v1/plan``: the method for every Conv of an ONNX model (a path or bytes)."""
        data = model if isinstance(model, bytes) else Path(model).read_bytes()
        form: dict[str, Any] = _drop_none({"target": target, "policy": policy,
                                           "layout": layout,
                                           "fast_math": "true" if fast_math else "false"})
        shapes = [f"{name}={','.join(str(d) for d in dims)}"
                  for name, dims in (input_shapes or {}).items()]
        if shapes:
            form["input_shape"] = shapes
        response = self._request("POST", "/v1/plan", data=form,
                                 files={"model": ("model.onnx", data,
                                                  "application/octet-stream")})
        return dict(response.json())

    def find(self, problem: ConvProblem | Mapping[str, Any], *, target: str | None = None,
             backend: str | None = None, budget_s: float = 10.0,
             max_workspace_bytes: int | None = None, store: bool = False,
             top: int | None = None) -> dict[str, Any]:
        """``POST /v1/find``: every algorithm and variant, ranked by time measured on the
        server, each with spread, workspace, status and reason (with ``top``, only the
        server's model's ``top`` best-predicted candidates and ACL's pick are timed)."""
        body = {"problem": _problem(problem), "target": target, "backend": backend,
                "budget_s": budget_s, "max_workspace_bytes": max_workspace_bytes,
                "store": store}
        if top is not None:   # absent, not null: an older server rejects unknown fields
            body["top"] = top
        return self._post_json("/v1/find", body)

    def tune(self, problem: ConvProblem | Mapping[str, Any], *, target: str | None = None,
             backend: str | None = None, device: str | None = None, budget_s: float = 10.0,
             retune: bool = False) -> dict[str, Any]:
        """``POST /v1/tune``: time the problem on the server and record the winner."""
        return self._post_json("/v1/tune", {
            "problem": _problem(problem), "target": target, "backend": backend,
            "device": device, "budget_s": budget_s, "retune": retune})


def _problem(problem: ConvProblem | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(problem, ConvProblem):
        return problem.to_dict()
    if isinstance(problem, Mapping):
        return dict(problem)
    raise InvalidProblemError("problem", type(problem).__name__,
                              "expected a ConvProblem or a mapping of its fields")


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
