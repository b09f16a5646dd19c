"""POST /v1/plan: upload an ONNX model (multipart), get the plan of every Conv as JSON.

The model is parsed with the ``onnx`` package and never run; external data files named inside
the model are never opened. Models have their own limit (``CONVSEL_MAX_MODEL_BYTES``, 512 MiB:
the real ResNet-50 is 102 MB). The upload streams to a temporary file, the model is parsed from
it and its weights' values dropped before planning (shapes are all a plan needs). One plan
runs at a time per process (503 with Retry-After meanwhile): parsing a large model costs
a few times its size in memory. Work is bounded too, since planning time and memory grow
faster than the model (20,000 1x1 Convs in 505 KiB took 6 s and 309 MB): a model with more
than ``CONVSEL_MAX_PLAN_NODES`` nodes, or whose plan takes longer than
``CONVSEL_MAX_PLAN_SECONDS``, is answered 413 naming the limit. A model that cannot be planned
is a 422 naming the node or the reason.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Annotated, Any, BinaryIO, Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from convsel import plan
from convsel.onnx import PlanError, load_model, parse_input_shape
from convsel.policies import POLICIES

from ..convert import selection_options, validate_body
from ..errors import BusyError, TooLargeError, responses
from ..limits import MULTIPART, BodyRule
from ..schemas import MAX_NAME, TARGET_FIELD
from ..state import ServiceState, state_of

router = APIRouter(tags=["plan"])
_CHUNK = 1 << 20
_FIELD_BYTES = 64 * 1024
_KEEP_BYTES = 4096   # initializers up to this size keep their values (shape constants)
# The form's other fields on top of the model's own limit.
BODIES = {"/v1/plan": BodyRule("max_model_bytes", MULTIPART, overhead=1 << 20)}
_planning = threading.Lock()   # held from the start of a plan to the end of its thread
_planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="convsel-plan")


_BACKENDS_DOC = ("where the Convs run: one backend, or several in order of preference "
                 "('opencl,numpy'; 'opencl:1' names a device; 'auto'). Each node then names "
                 "its backend and the summary the host-device switches; acl takes the first "
                 "that supports each Conv, measured/predicted the least total time")


# What convsel.onnx.parse_input_shape reads: NAME=D0,D1,... (or 1x3x224x224), every
# dimension at least 1. Whether the model has a tensor of that name is the planner's to say.
_DIM = "0*[1-9][0-9]*"
INPUT_SHAPE = rf"^\s*[^=\s][^=]*?\s*=\s*{_DIM}([,x\s]+{_DIM})*[,x\s]*$"
InputShape = Annotated[str, Field(max_length=256, pattern=INPUT_SHAPE)]


class PlanForm(BaseModel):
    """The form's fields besides the ``model`` file part."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(None, max_length=MAX_NAME, json_schema_extra=TARGET_FIELD,
                               description="cpu, G77, ...; default: the server's")
    policy: Literal[tuple(POLICIES)] = "acl"  # type: ignore[valid-type]
    input_shape: list[InputShape] = Field(
        [], max_length=64, description="NAME=D0,D1,... for an input left unknown (repeatable)")
    fast_math: bool = False
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    backend: str | None = Field(None, max_length=MAX_NAME, description=_BACKENDS_DOC)
    device: str | None = Field(None, max_length=MAX_NAME, description="measured/predicted: "
                               "an OpenCL device, or a device class GET /v1/devices lists")


_FORM_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["model"], "additionalProperties": False,
    "properties": {
        "model": {"type": "string", "format": "binary", "description": "the .onnx file"},
        "target": {"type": "string", "maxLength": MAX_NAME, **TARGET_FIELD},
        "policy": {"type": "string", "enum": list(POLICIES), "default": "acl"},
        "input_shape": {"type": "array", "maxItems": 64,
                        "items": {"type": "string", "maxLength": 256,
                                  "pattern": INPUT_SHAPE},
                        "description": "NAME=D0,D1,... for an input left unknown"},
        "fast_math": {"type": "boolean", "default": False},
        "layout": {"type": "string", "enum": ["NCHW", "NHWC"], "default": "NCHW"},
        "backend": {"type": "string", "maxLength": MAX_NAME, "description": _BACKENDS_DOC},
        "device": {"type": "string", "maxLength": MAX_NAME,
                   "description": "measured/predicted: an OpenCL device, or a device class "
                                  "GET /v1/devices lists"},
    },
}


class PlanResponse(BaseModel):
    """The plan: model facts, per-node answers (see ``convsel.onnx.NodePlan.to_dict``), the
    summary, convolution-like nodes that were skipped, and the rules that answered."""

    model_config = ConfigDict(extra="allow")

    model: dict[str, Any]
    target: str
    policy: str
    placement: dict[str, Any] | None = Field(None, description="with backend: the backends, "
                                             "how Convs were assigned, the switches")
    summary: dict[str, Any]
    nodes: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    rules: dict[str, str]
    convsel: str


class PlanningBusyError(BusyError):
    """Another model is being planned in this process (HTTP 503 with Retry-After)."""

    def __init__(self, retry_after: int) -> None:
        self.retry_after = retry_after
        Exception.__init__(self, f"a model is already being planned on this server (one at a "
                                 f"time); retry after {retry_after} s")


@router.post("/v1/plan", response_model=PlanResponse, summary="plan every Conv of an ONNX model",
             responses=responses(413, 415, 422, 503),
             openapi_extra={"requestBody": {"required": True, "content": {
                 "multipart/form-data": {"schema": _FORM_SCHEMA}}}})
async def post_plan(request: Request) -> dict[str, Any]:
    """Answer for every 2-D Conv node: method, algorithm, deciding rule, fused activation,
    near misses of ACL's tables and, with ``policy=measured``, the tuning database's timing."""
    state = state_of(request)
    # The upload first (spooled to disk; service.limits bounds its pace), then the lock: one
    # trickling upload once held the lock and turned every other plan away.
    async with request.form(max_files=1, max_fields=80, max_part_size=_FIELD_BYTES) as form:
        upload = form.get("model")
        fields: dict[str, Any] = {k: v for k, v in form.multi_items()
                                  if k not in ("model", "input_shape")}
        fields["input_shape"] = form.getlist("input_shape")
        if not isinstance(upload, UploadFile):
            raise PlanError("send the model as the file part 'model'",
                            value=type(upload).__name__ if upload is not None else None)
        if any(isinstance(v, UploadFile) for v in fields.values()):
            raise PlanError("only 'model' may be a file part")
        options = validate_body(PlanForm, fields)
        return await _plan_in_time(state, upload, options)


async def _plan_in_time(state: ServiceState, upload: UploadFile,
                        options: PlanForm) -> dict[str, Any]:
    """Plan on the planning thread, one model at a time; 413 after CONVSEL_MAX_PLAN_SECONDS.
    A thread cannot be stopped: planning that overran finishes in the background and keeps
    the one planning place until then (the node limit bounds how long that is)."""
    if not _planning.acquire(blocking=False):
        raise PlanningBusyError(state.settings.retry_after_seconds)
    started = time.monotonic()
    work = _planner.submit(_plan_upload, state, upload.file, upload.filename, options)
    work.add_done_callback(lambda _: _planning.release())
    answer = asyncio.wrap_future(work)
    limit = state.settings.max_plan_seconds
    try:
        return await asyncio.wait_for(asyncio.shield(answer), limit)
    except TimeoutError:
        answer.add_done_callback(_ignore_outcome)
        raise TooLargeError("model", round(time.monotonic() - started, 3), limit,
                            "planning seconds", "CONVSEL_MAX_PLAN_SECONDS") from None


def _ignore_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()   # retrieved: an overrun plan's error is nobody's to report


def _plan_upload(state: ServiceState, upload: BinaryIO, filename: str | None,
                 form: PlanForm) -> dict[str, Any]:
    shapes = dict(parse_input_shape(text) for text in form.input_shape)
    with _model_file(upload, state.settings.max_model_bytes, filename) as path:
        try:
            model = _without_weights(load_model(path))
        except PlanError as exc:
            if exc.node is None and exc.value == path:
                exc.value = filename   # the temporary file's path means nothing to the caller
            raise
    nodes = _count_nodes(model.graph)
    if nodes > state.settings.max_plan_nodes:
        raise TooLargeError("model", nodes, state.settings.max_plan_nodes, "graph nodes",
                            "CONVSEL_MAX_PLAN_NODES")
    options = selection_options(state, form.policy, form.backend, form.device)
    # where the Convs run is plan's own argument; the policy gets it from there
    backend, device = options.pop("backend", form.backend), options.pop("device", None)
    result = plan(model, state.target(form.target), form.policy, input_shapes=shapes,
                  fast_math=form.fast_math, layout=form.layout, rules=state.loaded_rules(),
                  backend=backend, device=device, **options)
    return state.hide_database(result.to_dict())   # traces may name the tuning database


def _count_nodes(graph: Any) -> int:
    """Nodes of ``graph`` and of the graphs inside its nodes (If, Loop, Scan bodies): shape
    inference walks them all."""
    count, graphs = 0, [graph]
    while graphs:
        for node in graphs.pop().node:
            count += 1
            for attribute in node.attribute:
                graphs.extend(attribute.graphs)
                if attribute.HasField("g"):
                    graphs.append(attribute.g)
    return count


def _without_weights(model: Any) -> Any:
    """The model with its large initializers' values dropped (their shapes kept): planning
    reads shapes, and shape inference copies the whole model several times over (a 100 MB
    model cost 540 MB of peak memory with its weights, about 2x its size without). Dropped
    values are marked as external data, which the planner never opens."""
    from onnx import TensorProto

    for init in model.graph.initializer:
        if max(len(init.raw_data), 4 * len(init.float_data)) <= _KEEP_BYTES:
            continue
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.data_location = TensorProto.EXTERNAL
        del init.external_data[:]
        init.external_data.add(key="location", value="(not uploaded)")
    return model


@contextmanager
def _model_file(upload: BinaryIO, limit: int, filename: str | None) -> Iterator[str]:
    """The upload copied, in chunks, to a named temporary file that the planner opens: the
    parser reads the file once and frees the bytes as soon as the model is parsed."""
    upload.seek(0, 2)
    size = upload.tell()
    if size > limit:
        raise TooLargeError("model", size, limit, "model size in bytes")
    if not size:
        raise PlanError("not an ONNX model: the upload is empty", value=filename)
    upload.seek(0)
    with tempfile.NamedTemporaryFile(prefix="convsel-plan-", suffix=".onnx") as copy:
        shutil.copyfileobj(upload, copy, _CHUNK)
        copy.flush()
        yield copy.name


def ready(app: FastAPI) -> dict[str, Any]:
    """Planning is optional: a missing ``onnx`` package is reported, never made unready."""
    try:
        import onnx
    except ImportError as exc:
        return {"ok": True, "available": False, "reason": str(exc)}
    return {"ok": True, "available": True, "onnx": onnx.__version__}
