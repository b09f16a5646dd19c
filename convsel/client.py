"""A Python client for convsel's HTTP service, on httpx (``pip install 'convsel[client]'``).

    from convsel.client import AsyncClient, Client

    with Client("http://127.0.0.1:8000") as c:
        sel = c.select(problem, "G77")              # a convsel.Selection, as convsel.select's
        y = c.conv2d(x, w, pad=1)                   # numpy in, numpy out

    async with AsyncClient("http://127.0.0.1:8000") as c:
        sel = await c.select(problem, "G77")        # the same calls, awaited

Answers are the library's own types where the library has one: ``select`` gives a
:class:`~convsel.selection.Selection`, ``select_batch`` a list of them, ``find`` a
:class:`~convsel.finder.FindResult` (its ``measurement`` stays on the server), ``conv2d`` an
array. ``plan`` and ``tune`` give the service's JSON (``ModelPlan.to_dict()``'s form; a tuning
report whose ``selection`` is a Selection).

The service's error bodies (code, message, field, value, rule) come back as the library's
own exceptions: a 422 ``invalid_problem`` is :class:`~convsel.errors.InvalidProblemError`
with the same field, value and rule; ``unsupported`` is
:class:`~convsel.errors.UnsupportedError`; ``backend_unavailable``
:class:`~convsel.errors.BackendUnavailableError`, and so on. Answers with no library
counterpart (413, 503 busy, 401) are :class:`ServiceError` subclasses, which are
:class:`~convsel.errors.ConvselError` too. Every raised error carries ``status`` and ``code``.

A 503 with ``Retry-After`` (the server is busy: its convolution pool, its one tuning or its one
plan) is retried after the time it asks for, at most ``retries`` times and only while it asks
for no more than ``max_retry_wait_s``; then :class:`BusyError` is raised. The server refuses
such a request before doing any of its work, so sending it again is safe.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import io
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

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
from .finder import FindEntry, FindResult
from .problem import ConvProblem
from .selection import Candidate, Selection
from .verdict import TraceStep

NPY = "application/x-npy"
# Tensors larger than this (all together, as .npy) go as multipart file parts rather than
# base64 inside JSON: a third smaller on the wire and no base64 pass on either side.
MULTIPART_ABOVE_BYTES = 256 * 1024

try:
    import httpx
except ImportError as exc:   # pragma: no cover - depends on the environment
    raise ImportError("convsel.client needs httpx: pip install 'convsel[client]'") from exc

T = TypeVar("T")


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


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the answer's ``Retry-After`` asks to wait (delta-seconds or an HTTP date)."""
    text = response.headers.get("retry-after", "").strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_body(status: int, body: Any, *, text: str = "",
                    retry: float | None = None) -> ConvselError:
    """The exception a service error body (or an item of a batch) stands for."""
    if not isinstance(body, dict) or "code" not in body:
        body = {"code": f"http_{status}", "message": f"HTTP {status}: {text[:500]}"}
    code = str(body["code"])
    exc: ConvselError
    if code in _LIBRARY_ERRORS:
        exc = _LIBRARY_ERRORS[code](body)
    else:
        cls = _SERVICE_ERRORS.get(code, ServiceError)
        exc = cls(str(body.get("message", "")), status=status, code=code,
                  field=body.get("field"), value=body.get("value"), rule=body.get("rule"),
                  retry_after=retry)
    # every raised error says what the service answered, library classes included
    for name, value in (("status", status), ("code", code), ("errors", body.get("errors"))):
        setattr(exc, name, value)
    return exc


def error_from_response(response: httpx.Response) -> ConvselError:
    """The exception a service error answer stands for (see the module's docstring)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_from_body(response.status_code, body, text=response.text,
                           retry=retry_after(response))


# -- the library's types from the wire --------------------------------------------------------
def _tuples(params: Mapping[str, Any] | None) -> dict[str, Any]:
    # to_dict() writes tuples (a Winograd tile) as JSON lists; the library holds tuples
    return {k: tuple(v) if isinstance(v, list) else v for k, v in (params or {}).items()}


def selection_from_dict(d: Mapping[str, Any]) -> Selection:
    """A :class:`Selection` from its ``to_dict()`` form (what ``/v1/select`` answers)."""
    rules = d.get("rules") or {}
    return Selection(
        method=d["method"], algorithm=d["algorithm"], rule=d["rule"], target=d["target"],
        trace=tuple(TraceStep(s["id"], bool(s["fired"]), s["reason"]) for s in d["trace"]),
        candidates=tuple(Candidate(c["method"], c["algorithm"], bool(c["valid"]), c["reason"])
                         for c in d["candidates"]),
        params=_tuples(d.get("params")), policy=d.get("policy", "acl"),
        source=d.get("source", "rules"), rules_version=rules.get("version", ""),
        rules_digest=rules.get("digest", ""), fallback=d.get("fallback"),
        measurement=d.get("measurement"), backend=d.get("backend"))


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def find_result_from_dict(d: Mapping[str, Any]) -> FindResult:
    """A :class:`FindResult` from its ``to_dict()`` form (what ``/v1/find`` answers); its
    ``measurement`` (the raw timings object) stays on the server."""
    entries = tuple(FindEntry(
        label=r["label"], algorithm=r["algorithm"], params=_tuples(r.get("params")),
        status=r["status"], reason=r["reason"], workspace_bytes=r.get("workspace_bytes"),
        median_s=_seconds(r.get("median_ms")), iqr_s=_seconds(r.get("iqr_ms")),
        min_s=_seconds(r.get("min_ms")), runs=int(r.get("runs") or 0),
        pruned=bool(r.get("pruned")), rank=r.get("rank"), clock=r.get("clock"),
        backend=r.get("backend"), transfer_s=_seconds(r.get("transfer_ms")))
        for r in d["results"])
    return FindResult(
        problem=ConvProblem.from_dict(d["problem"]), backend=d["backend"],
        device=dict(d.get("device") or {}), results=entries, winner=d.get("winner"),
        tie=tuple(d.get("tie") or ()), acl=d["acl"], complete=bool(d["complete"]),
        max_workspace_bytes=d.get("max_workspace_bytes"), stored=bool(d.get("stored")),
        note=d.get("note"), database=d.get("database"), narrowed=d.get("narrowed"),
        passed_over=tuple(d.get("passed_over") or ()),
        devices={k: dict(v) for k, v in (d.get("devices") or {}).items()})


def _batch(d: Mapping[str, Any]) -> list[Selection | ConvselError]:
    out: list[Selection | ConvselError] = []
    for item in d["results"]:   # {"index", "selection", "error"}: one of the two is null
        out.append(error_from_body(422, item["error"]) if item.get("error") is not None
                   else selection_from_dict(item["selection"]))
    return out


def _tuned(d: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(d)
    if isinstance(out.get("selection"), dict):
        out["selection"] = selection_from_dict(out["selection"])
    return out


# -- one request, described once for both clients ---------------------------------------------
@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def _json_call(path: str, body: Mapping[str, Any],
               parse: Callable[[Any], T]) -> _Call[T]:
    return _Call("POST", path, lambda r: parse(r.json()), {"json": _drop_none(body)})


def _select(problem: ConvProblem | Mapping[str, Any], target: str | None, policy: str,
            backend: str | None, device: str | None) -> _Call[Selection]:
    return _json_call("/v1/select", {"problem": _problem(problem), "target": target,
                                     "policy": policy, "backend": backend, "device": device},
                      selection_from_dict)


def _select_batch(problems: Sequence[ConvProblem | Mapping[str, Any]], target: str | None,
                  policy: str, backend: str | None,
                  device: str | None) -> _Call[list[Selection | ConvselError]]:
    return _json_call("/v1/select/batch", {
        "problems": [_problem(p) for p in problems], "target": target, "policy": policy,
        "backend": backend, "device": device}, _batch)


def _conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, multipart: bool | None,
            **options: Any) -> _Call[np.ndarray]:
    from .api import problem_from_arrays

    fields = {k: options.pop(k) for k in ("algorithm", "backend", "target", "policy")}
    problem = problem_from_arrays(x, w, **options)
    wire = np.float16 if problem.dtype == "F16" else np.float32
    tensors = {name: np.ascontiguousarray(a, dtype=wire)
               for name, a in (("x", x), ("w", w), ("bias", bias)) if a is not None}
    form = _drop_none({**fields, "weights_layout": options["weights_layout"]})
    headers = {"Accept": NPY}
    size = sum(a.nbytes for a in tensors.values())
    if multipart if multipart is not None else size > MULTIPART_ABOVE_BYTES:
        files = {name: (f"{name}.npy", _npy(a), NPY) for name, a in tensors.items()}
        kwargs: dict[str, Any] = {"data": {**form, "problem": json.dumps(problem.to_dict())},
                                  "files": files, "headers": headers}
    else:
        body = {"problem": problem.to_dict(), **form,
                **{n: base64.b64encode(_npy(a)).decode() for n, a in tensors.items()}}
        kwargs = {"json": body, "headers": headers}
    return _Call("POST", "/v1/conv2d", _array, kwargs)


def _array(response: httpx.Response) -> np.ndarray:
    y: np.ndarray = np.load(io.BytesIO(response.content), allow_pickle=False)
    return y


def _plan(model: str | os.PathLike[str] | bytes, target: str | None, policy: str,
          input_shapes: Mapping[str, Sequence[int]] | None, layout: str,
          fast_math: bool) -> _Call[dict[str, Any]]:
    data = model if isinstance(model, bytes) else Path(model).read_bytes()
    form: dict[str, Any] = _drop_none({"target": target, "policy": policy, "layout": layout,
                                       "fast_math": "true" if fast_math else "false"})
    shapes = [f"{name}={','.join(str(d) for d in dims)}"
              for name, dims in (input_shapes or {}).items()]
    if shapes:
        form["input_shape"] = shapes   # the HTTP form's spelling of input_shapes
    return _Call("POST", "/v1/plan", lambda r: dict(r.json()), {
        "data": form, "files": {"model": ("model.onnx", data, "application/octet-stream")}})


def _find(problem: ConvProblem | Mapping[str, Any], target: str | None, backend: str | None,
          budget_s: float, max_workspace_bytes: int | None, store: bool,
          top: int | None) -> _Call[FindResult]:
    body = {"problem": _problem(problem), "target": target, "backend": backend,
            "budget_s": budget_s, "max_workspace_bytes": max_workspace_bytes, "store": store}
    if top is not None:   # absent, not null: an older server rejects unknown fields
        body["top"] = top
    return _json_call("/v1/find", body, find_result_from_dict)


def _tune(problem: ConvProblem | Mapping[str, Any], target: str | None, backend: str | None,
          device: str | None, budget_s: float, retune: bool) -> _Call[dict[str, Any]]:
    return _json_call("/v1/tune", {"problem": _problem(problem), "target": target,
                                   "backend": backend, "device": device, "budget_s": budget_s,
                                   "retune": retune}, _tuned)


def _get(path: str) -> _Call[dict[str, Any]]:
    return _Call("GET", path, lambda r: dict(r.json()))


def _upload(entries: Mapping[str, Any] | Sequence[Any], client: str | None,
            partial: bool) -> _Call[dict[str, Any]]:
    from .tuning.db import EXPORT_FORMAT
    from .tuning.entry import TuningEntry

    document = dict(entries) if isinstance(entries, Mapping) else {
        "format": EXPORT_FORMAT,
        "entries": [e.to_dict() if isinstance(e, TuningEntry) else dict(e) for e in entries]}
    return _Call("POST", "/v1/tuning/entries", lambda r: dict(r.json()), {
        "json": document, "params": {"partial": "true"} if partial else {},
        "headers": {"X-Convsel-Client": client} if client else {}})


def _fit(backend: str | None, device: str | None, families: Sequence[str] | None,
         max_entries: int | None) -> _Call[dict[str, Any]]:
    return _json_call("/v1/fit", {"backend": backend, "device": device,
                                  "families": None if families is None else list(families),
                                  "max_entries": max_entries}, dict)


_UNFINISHED = ("queued", "running")


@dataclass(frozen=True)
class _Retry:
    """Send the request again after ``seconds``."""

    seconds: float


class _Base:
    """What both clients share: the connection settings and the retry rule."""

    def __init__(self, token: str | None, retries: int, max_retry_wait_s: float) -> None:
        if retries < 0 or max_retry_wait_s < 0:
            raise InvalidProblemError("retries", retries, "retries and max_retry_wait_s must "
                                      "be >= 0")
        self._headers = _auth_headers(token)
        self.retries, self.max_retry_wait_s = retries, max_retry_wait_s

    def _outcome(self, call: _Call[T], response: httpx.Response, attempt: int) -> _Retry | T:
        """The parsed answer, or how long to wait before the next attempt."""
        if response.status_code < 400:
            return call.parse(response)
        wait = retry_after(response) if response.status_code == 503 else None
        if wait is not None and attempt < self.retries and wait <= self.max_retry_wait_s:
            return _Retry(wait)
        raise error_from_response(response)


class Client(_Base):
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
    retries : int
        How many times a 503 with ``Retry-After`` is sent again (0: never).
    max_retry_wait_s : float
        The longest ``Retry-After`` waited for; a longer one raises :class:`BusyError` at once.
    """

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 120.0,
                 retries: int = 3, max_retry_wait_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(token, retries, max_retry_wait_s)
        self._http = httpx.Client(base_url=base_url, headers=self._headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            outcome = self._outcome(call, self._http.request(call.method, call.path,
                                                             **call.kwargs), attempt)
            if not isinstance(outcome, _Retry):
                return outcome
            time.sleep(outcome.seconds)
            attempt += 1

    # -- routes --------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._send(_get("/healthz"))

    def ready(self) -> dict[str, Any]:
        return self._send(_get("/readyz"))

    def select(self, problem: ConvProblem | Mapping[str, Any], target: str | None = None, *,
               policy: str = "acl", backend: str | None = None,
               device: str | None = None) -> Selection:
        """``POST /v1/select``: the method for one problem, as :func:`convsel.choose`'s
        Selection (trace, candidates, params)."""
        return self._send(_select(problem, target, policy, backend, device))

    def select_batch(self, problems: Sequence[ConvProblem | Mapping[str, Any]],
                     target: str | None = None, *, policy: str = "acl",
                     backend: str | None = None,
                     device: str | None = None) -> list[Selection | ConvselError]:
        """``POST /v1/select/batch``: a Selection per problem, in order; a problem the library
        refuses is, at its index, the exception it raised (not raised here)."""
        return self._send(_select_batch(problems, target, policy, backend, device))

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
        return self._send(_conv2d(
            x, w, bias, multipart, stride=stride, pad=pad, dilation=dilation, groups=groups,
            activation=activation, fast_math=fast_math, layout=layout,
            weights_layout=weights_layout, algorithm=algorithm, backend=backend,
            target=target, policy=policy))

    def plan(self, model: str | os.PathLike[str] | bytes, target: str | None = None, *,
             policy: str = "acl", input_shapes: Mapping[str, Sequence[int]] | None = None,
             layout: str = "NCHW", fast_math: bool = False) -> dict[str, Any]:
        """``POST /v1/plan``: the method for every Conv of an ONNX model (a path or bytes), as
        ``ModelPlan.to_dict()``."""
        return self._send(_plan(model, target, policy, input_shapes, layout, fast_math))

    def find(self, problem: ConvProblem | Mapping[str, Any], *, target: str | None = None,
             backend: str | None = None, budget_s: float = 10.0,
             max_workspace_bytes: int | None = None, store: bool = False,
             top: int | None = None) -> FindResult:
        """``POST /v1/find``: every algorithm and variant, ranked by time measured on the
        server, as :func:`convsel.find`'s FindResult (with ``top``, only the server's model's
        ``top`` best-predicted candidates and ACL's pick are timed)."""
        return self._send(_find(problem, target, backend, budget_s, max_workspace_bytes,
                                store, top))

    def tune(self, problem: ConvProblem | Mapping[str, Any], *, target: str | None = None,
             backend: str | None = None, device: str | None = None, budget_s: float = 10.0,
             retune: bool = False) -> dict[str, Any]:
        """``POST /v1/tune``: time the problem on the server and record the winner; the
        report's ``selection`` is the measured policy's Selection."""
        return self._send(_tune(problem, target, backend, device, budget_s, retune))

    def upload(self, entries: Mapping[str, Any] | Sequence[Any], *, client: str | None = None,
               partial: bool = False) -> dict[str, Any]:
        """``POST /v1/tuning/entries``: entries measured here (TuningEntry objects, their
        dicts, or a whole ``convsel db export`` document) into the server's store; ``client``
        names this device in their provenance. Answers the per-entry report (accepted,
        merged, flagged, rejected); a rejected entry refuses the upload
        (:class:`~convsel.errors.InvalidProblemError`, nothing stored) unless ``partial``."""
        return self._send(_upload(entries, client, partial))

    def devices(self) -> dict[str, Any]:
        """``GET /v1/devices``: the device classes the server knows, with what it holds."""
        return self._send(_get("/v1/devices"))

    def fit(self, *, backend: str | None = None, device: str | None = None,
            families: Sequence[str] | None = None, max_entries: int | None = None,
            wait_s: float = 600.0, poll_s: float = 0.5) -> dict[str, Any]:
        """``POST /v1/fit``: fit the server's cost model in a worker process there, then poll
        the job for up to ``wait_s`` (0: not at all). Returns the job as last seen: its
        ``status`` (``done``, ``failed``, or still ``queued``/``running`` when the wait ran
        out) and, when done, the model's identity and whether it is in use."""
        started = self._send(_fit(backend, device, families, max_entries))
        job, deadline = started["job"], time.monotonic() + wait_s
        while job["status"] in _UNFINISHED and time.monotonic() < deadline:
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
            job = self._send(_get(started["poll"]))
        return dict(job)


class AsyncClient(_Base):
    """:class:`Client`'s calls on ``httpx.AsyncClient``: the same arguments, answers and
    errors, awaited (``async with AsyncClient(url) as c: sel = await c.select(p)``)."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 120.0,
                 retries: int = 3, max_retry_wait_s: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(token, retries, max_retry_wait_s)
        self._http = httpx.AsyncClient(base_url=base_url, headers=self._headers,
                                       timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            response = await self._http.request(call.method, call.path, **call.kwargs)
            outcome = self._outcome(call, response, attempt)
            if not isinstance(outcome, _Retry):
                return outcome
            await asyncio.sleep(outcome.seconds)
            attempt += 1

    async def health(self) -> dict[str, Any]:
        return await self._send(_get("/healthz"))

    async def ready(self) -> dict[str, Any]:
        return await self._send(_get("/readyz"))

    async def select(self, problem: ConvProblem | Mapping[str, Any],
                     target: str | None = None, *, policy: str = "acl",
                     backend: str | None = None, device: str | None = None) -> Selection:
        """See :meth:`Client.select`."""
        return await self._send(_select(problem, target, policy, backend, device))

    async def select_batch(self, problems: Sequence[ConvProblem | Mapping[str, Any]],
                           target: str | None = None, *, policy: str = "acl",
                           backend: str | None = None,
                           device: str | None = None) -> list[Selection | ConvselError]:
        """See :meth:`Client.select_batch`."""
        return await self._send(_select_batch(problems, target, policy, backend, device))

    async def conv2d(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
                     stride: Any = 1, pad: Any = 0, dilation: Any = 1,
                     groups: int | None = None, activation: Any = None,
                     fast_math: bool = False, layout: str = "NHWC",
                     weights_layout: str = "OHWI", algorithm: str = "auto",
                     backend: str | None = None, target: str | None = None,
                     policy: str = "acl", multipart: bool | None = None) -> np.ndarray:
        """See :meth:`Client.conv2d`."""
        return await self._send(_conv2d(
            x, w, bias, multipart, stride=stride, pad=pad, dilation=dilation, groups=groups,
            activation=activation, fast_math=fast_math, layout=layout,
            weights_layout=weights_layout, algorithm=algorithm, backend=backend,
            target=target, policy=policy))

    async def plan(self, model: str | os.PathLike[str] | bytes, target: str | None = None, *,
                   policy: str = "acl",
                   input_shapes: Mapping[str, Sequence[int]] | None = None,
                   layout: str = "NCHW", fast_math: bool = False) -> dict[str, Any]:
        """See :meth:`Client.plan`."""
        return await self._send(_plan(model, target, policy, input_shapes, layout, fast_math))

    async def find(self, problem: ConvProblem | Mapping[str, Any], *,
                   target: str | None = None, backend: str | None = None,
                   budget_s: float = 10.0, max_workspace_bytes: int | None = None,
                   store: bool = False, top: int | None = None) -> FindResult:
        """See :meth:`Client.find`."""
        return await self._send(_find(problem, target, backend, budget_s,
                                      max_workspace_bytes, store, top))

    async def tune(self, problem: ConvProblem | Mapping[str, Any], *,
                   target: str | None = None, backend: str | None = None,
                   device: str | None = None, budget_s: float = 10.0,
                   retune: bool = False) -> dict[str, Any]:
        """See :meth:`Client.tune`."""
        return await self._send(_tune(problem, target, backend, device, budget_s, retune))

    async def upload(self, entries: Mapping[str, Any] | Sequence[Any], *,
                     client: str | None = None, partial: bool = False) -> dict[str, Any]:
        """See :meth:`Client.upload`."""
        return await self._send(_upload(entries, client, partial))

    async def devices(self) -> dict[str, Any]:
        """See :meth:`Client.devices`."""
        return await self._send(_get("/v1/devices"))

    async def fit(self, *, backend: str | None = None, device: str | None = None,
                  families: Sequence[str] | None = None, max_entries: int | None = None,
                  wait_s: float = 600.0, poll_s: float = 0.5) -> dict[str, Any]:
        """See :meth:`Client.fit`."""
        started = await self._send(_fit(backend, device, families, max_entries))
        job, deadline = started["job"], time.monotonic() + wait_s
        while job["status"] in _UNFINISHED and time.monotonic() < deadline:
            await asyncio.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
            job = await self._send(_get(started["poll"]))
        return dict(job)


def _auth_headers(token: str | None) -> dict[str, str]:
    if token is None:   # the library's one configuration: $CONVSEL_API_TOKEN
        configured = config.current().api_token
        token = configured.get_secret_value() if configured is not None else None
    return {"Authorization": f"Bearer {token}"} if token else {}


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
