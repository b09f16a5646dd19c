"""POST /v1/conv2d: run one convolution remotely.

The body is JSON (tensors as base64 ``.npy``) or ``multipart/form-data`` (tensors as ``.npy``
file parts, ``problem`` as JSON text, other fields as text). The answer is JSON, or the raw
``.npy`` of y when ``Accept`` asks for ``application/x-npy``; either way the ``X-Convsel-*``
headers say what ran. Decoding, the convolution and encoding run on the bounded pool.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from convsel import ConvProblem, InvalidProblemError, WorkspaceLimitError, prepare

from ..convert import backends_and_device, check_size, to_problem, validate_body
from ..errors import TooLargeError, responses
from ..limits import JSON, MULTIPART, BodyRule
from ..npy import NPY_MEDIA_TYPE, decode_base64, decode_file, encode_base64, encode_bytes
from ..schemas import (
    CONV2D_FORM_ENCODING,
    CONV2D_FORM_SCHEMA,
    Conv2dRequest,
    Conv2dResponse,
)
from ..state import ServiceState, StateDep

router = APIRouter(prefix="/v1", tags=["convolution"])
OPENAPI_MODELS = (Conv2dRequest,)
BODIES = {"/v1/conv2d": BodyRule("max_conv_body_bytes", JSON + MULTIPART)}

TENSORS = ("x", "w", "bias")
_WIRE_DTYPES = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16)}
_UNSAFE_HEADER_CHARS = re.compile(r"[^\x20-\x7e]+")
_HEADERS_DOC = {f"X-Convsel-{name}": {"schema": {"type": "string"}, "description": text}
                for name, text in [("Method", "ACL method"), ("Algorithm", "convsel algorithm"),
                                   ("Backend", "backend that ran"), ("Time-Ms", "prepare + run"),
                                   ("Fallback", "why what ran differs, or 'none'")]}


@dataclass
class Job:
    """A request as read off the socket: JSON bytes, or multipart fields and the uploaded
    files (spooled to disk past 1 MiB by the form parser, decoded from there)."""

    body: bytes | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    files: dict[str, BinaryIO] = field(default_factory=dict)


@router.post(
    "/conv2d", response_model=Conv2dResponse,
    responses={200: {"content": {NPY_MEDIA_TYPE: {"schema": {"type": "string",
                                                              "format": "binary"}}},
                     "headers": _HEADERS_DOC},
               **responses(413, 415, 422, 503)},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Conv2dRequest"}},
        "multipart/form-data": {"schema": CONV2D_FORM_SCHEMA,
                                "encoding": CONV2D_FORM_ENCODING}}}})
async def conv2d(request: Request, state: StateDep) -> Response:
    """Run the convolution with the selected (``algorithm: auto``) or named algorithm; y
    comes back in the problem's layout and dtype. 503 + Retry-After when the pool is full."""
    assert state.pool is not None
    # The body first, then a slot: a client trickling its body must not hold a slot (ten
    # of them once made every conv2d 503); service.limits bounds how long the read takes.
    async with _read(request) as job:
        with state.pool.admit() as slot:
            result = await slot.run(_execute, job, state)
    headers = _headers(result)
    if NPY_MEDIA_TYPE in request.headers.get("accept", ""):
        return Response(encode_bytes(result.pop("y")), media_type=NPY_MEDIA_TYPE,
                        headers=headers)
    result["y"] = encode_base64(result["y"])
    return JSONResponse(result, headers=headers)


@asynccontextmanager
async def _read(request: Request) -> AsyncIterator[Job]:
    """The body as a Job; multipart uploads stay open (on disk) until the job is done.
    The media type is one of the route's (service.limits checked it)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in MULTIPART:
        yield Job(body=await request.body())
        return
    job = Job()
    async with request.form(max_files=len(TENSORS), max_fields=16,
                            max_part_size=64 * 1024) as form:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                job.files[name] = value.file
            else:
                job.fields[name] = value
        yield job


def _execute(job: Job, state: ServiceState) -> dict[str, Any]:
    """On a pool thread: parse, check, convolve. Returns the answer with y as an array."""
    request, tensors = _parse(job, state)
    problem = to_problem(request.problem)
    check_size(state, problem)
    for name, array in tensors.items():
        _check_dtype(name, array, problem)
    s = state.settings
    order, device = backends_and_device(state, request.backend)
    start = time.perf_counter()
    try:
        # "auto" chooses among what fits the server's limit; a named algorithm over it (or a
        # fallback over it) is refused before it is built
        op = prepare(problem, tensors["w"], tensors.get("bias"),
                     weights_layout=request.weights_layout, algorithm=request.algorithm,
                     backend=order, target=state.target(request.target), device=device,
                     policy=request.policy, rules=state.loaded_rules(),
                     max_workspace_bytes=s.max_workspace_bytes)
    except WorkspaceLimitError as exc:   # the server's limit: too large, as its others are
        if exc.needed is None:
            raise
        raise TooLargeError("problem", exc.needed, exc.limit,
                            f"{exc.algorithm or 'algorithm'} workspace bytes") from exc
    y = op.run(tensors["x"])
    seconds = time.perf_counter() - start
    state.metrics.convolution(op.algorithm, op.backend, op.fallback is not None, seconds)
    return {"y": y, "shape": list(y.shape), "dtype": str(y.dtype), "method": op.method,
            "algorithm": op.algorithm, "backend": op.backend,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in op.params.items()},
            "fallback": op.fallback, "passed_over": list(op.passed_over),
            "time_ms": round(seconds * 1e3, 3)}


def _parse(job: Job, state: ServiceState) -> tuple[Conv2dRequest, dict[str, np.ndarray]]:
    limits = state.tensor_limits
    if job.body is not None:
        request = validate_body(Conv2dRequest, job.body, json=True)
        job.body = None   # the bytes are parsed: let them go before the tensors are decoded
        tensors = {}
        for name in TENSORS:
            text = getattr(request, name)
            if text is not None:
                tensors[name] = decode_base64(name, text, limits)
                setattr(request, name, "")   # each text freed once its tensor exists
        return request, tensors
    for name in job.fields.keys() & set(TENSORS):
        raise InvalidProblemError(name, "text field", "send tensors as .npy file parts")
    unknown = sorted(job.files.keys() - set(TENSORS))
    if unknown:
        raise InvalidProblemError(unknown[0], "file", "unknown file part; known: x, w, bias")
    fields = dict(job.fields)
    if "problem" in fields:
        fields["problem"] = _json_field("problem", fields["problem"])
    placeholders = {name: "" for name in job.files}   # the model's tensor fields are text
    request = validate_body(Conv2dRequest, {**fields, **placeholders})
    return request, {name: decode_file(name, stream, limits)
                     for name, stream in job.files.items()}


def _json_field(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidProblemError(name, text[:64], f"not valid JSON: {exc}") from None
    except RecursionError:   # json nests by recursion: 2,000 levels exceed Python's stack
        raise InvalidProblemError(name, text[:64], "JSON nested too deeply") from None


def _check_dtype(name: str, array: np.ndarray, p: ConvProblem) -> None:
    expected = _WIRE_DTYPES.get(p.dtype)
    if expected is not None and array.dtype != expected:
        raise InvalidProblemError(name, str(array.dtype), f"dtype must be {expected} to match "
                                  f"problem.dtype={p.dtype}")


def _headers(result: dict[str, Any]) -> dict[str, str]:
    fallback = result["fallback"] or "none"
    return {"X-Convsel-Method": result["method"], "X-Convsel-Algorithm": result["algorithm"],
            "X-Convsel-Backend": result["backend"], "X-Convsel-Time-Ms": str(result["time_ms"]),
            "X-Convsel-Fallback": _UNSAFE_HEADER_CHARS.sub(" ", fallback)[:512]}


def ready(app: FastAPI) -> dict[str, Any]:
    """The convolution pool exists (the lifespan ran) and how full it is."""
    pool = app.state.convsel.pool
    if pool is None:
        return {"ok": False, "reason": "convolution pool not started"}
    return {"ok": True, "in_flight": pool.in_flight, "capacity": pool.capacity}
