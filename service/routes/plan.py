"""POST /v1/plan: upload an ONNX model (multipart), get the plan of every Conv as JSON.

The model is parsed with the ``onnx`` package and never run; external data files named inside
the model are never opened. The upload is size-limited (``CONVSEL_MAX_MODEL_BYTES`` when the
settings define it, else ``CONVSEL_MAX_BODY_BYTES``); a model that cannot be planned is a 422
naming the node or the reason.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, FastAPI, File, Form, UploadFile
from pydantic import BaseModel, ConfigDict

from convsel.onnx import plan
from convsel.onnx.errors import PlanError
from convsel.onnx.shapes import parse_input_shape

from ..errors import TooLargeError
from ..state import ServiceState, StateDep

router = APIRouter(tags=["plan"])
_CHUNK = 1 << 20


class PlanResponse(BaseModel):
    """The plan: model facts, per-node answers (see ``convsel.onnx.NodePlan.to_dict``), the
    summary, convolution-like nodes that were skipped, and the rules that answered."""

    model_config = ConfigDict(extra="allow")

    model: dict[str, Any]
    target: str
    policy: str
    summary: dict[str, Any]
    nodes: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    rules: dict[str, str]
    convsel: str


@router.post("/v1/plan", response_model=PlanResponse, summary="plan every Conv of an ONNX model",
             responses={413: {"description": "the model is larger than the limit"},
                        422: {"description": "not ONNX, no Conv, bad opset or unknown shape"}})
async def post_plan(
    state: StateDep,
    model: Annotated[UploadFile, File(description="the .onnx file")],
    target: Annotated[str | None, Form(description="cpu, G77, ...")] = None,
    policy: Annotated[str, Form(description="acl or measured")] = "acl",
    input_shape: Annotated[list[str] | None, Form(
        description="NAME=D0,D1,... for an input left unknown (repeatable)")] = None,
    fast_math: Annotated[bool, Form()] = False,
    layout: Annotated[str, Form(description="NCHW or NHWC")] = "NCHW",
) -> dict[str, Any]:
    """Answer for every 2-D Conv node: method, algorithm, deciding rule, fused activation,
    near misses of ACL's tables and, with ``policy=measured``, the tuning database's timing."""
    data = await _read_limited(model, _limit(state))
    shapes = dict(parse_input_shape(text) for text in input_shape or [])
    run = partial(plan, data, target or state.settings.default_target, policy,
                  input_shapes=shapes, fast_math=fast_math, layout=layout,
                  rules=state.loaded_rules(), **_policy_options(state, policy))
    result = await anyio.to_thread.run_sync(run)   # shape inference is CPU-bound
    return result.to_dict()


def _limit(state: ServiceState) -> int:
    s = state.settings
    return int(getattr(s, "max_model_bytes", s.max_body_bytes))


async def _read_limited(upload: UploadFile, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := await upload.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise TooLargeError("model", size, limit, "model size in bytes")
        chunks.append(chunk)
    if not size:
        raise PlanError("not an ONNX model: the upload is empty", value=upload.filename)
    return b"".join(chunks)


def _policy_options(state: ServiceState, policy: str) -> dict[str, Any]:
    if policy != "measured":
        return {}
    s = state.settings
    options: dict[str, Any] = {"backend": s.default_backend}
    if s.tuning_db is not None:
        options["db"] = s.tuning_db
    if s.default_device is not None:
        options["device"] = s.default_device
    return options


def ready(app: FastAPI) -> dict[str, Any]:
    """Planning is optional: a missing ``onnx`` package is reported, never made unready."""
    try:
        import onnx
    except ImportError as exc:
        return {"ok": True, "available": False, "reason": str(exc)}
    return {"ok": True, "available": True, "onnx": onnx.__version__}
