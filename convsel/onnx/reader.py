"""Read an ONNX model without running it and without touching files it points to.

External data (``data_location: EXTERNAL``) is never loaded: planning needs tensor shapes, not
weights, and a model's external-data paths are attacker-controlled in a service upload.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any, Union

from .errors import OnnxUnavailableError, PlanError

ModelSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]

# Conv has kept its meaning since opset 1; 7 (ONNX 1.2) is the first release with today's
# Relu/Clip without legacy attributes. Older models: onnx.version_converter.convert_version.
MIN_OPSET = 7
DEFAULT_DOMAINS = ("", "ai.onnx")


def require_onnx() -> ModuleType:
    """The ``onnx`` module, or :class:`OnnxUnavailableError` saying how to install it."""
    try:
        import onnx
    except ImportError as exc:
        raise OnnxUnavailableError(
            f"planning ONNX models needs the 'onnx' package ({exc}); "
            "install it with: pip install 'convsel[onnx]'", backend="onnx") from None
    return onnx


def load_model(model: ModelSource) -> Any:
    """Parse ``model`` (a path, the file's bytes or an ``onnx.ModelProto``) into a checked
    ModelProto. A ModelProto is copied, never changed.

    Raises
    ------
    PlanError
        Not an ONNX model, an unreadable path, or an opset this onnx cannot handle.
    """
    onnx = require_onnx()
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    else:
        proto = _parse(onnx, _read_bytes(model), _label(model))
    check_model_header(proto)
    return proto


def _read_bytes(model: ModelSource) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        try:
            return Path(model).read_bytes()
        except OSError as exc:
            raise PlanError(f"cannot read the model file: {exc.strerror or exc}",
                            value=str(model)) from None
    raise PlanError("expected a path, the model's bytes or an onnx.ModelProto",
                    value=type(model).__name__)


def _label(model: ModelSource) -> str:
    return str(model) if isinstance(model, (str, os.PathLike)) else f"<{len(model)} bytes>"


def _parse(onnx: ModuleType, data: bytes, label: str) -> Any:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    if not data:
        raise PlanError("not an ONNX model: the file is empty", value=label)
    try:
        # load_model_from_string never reads external data, unlike onnx.load(path).
        return onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise PlanError(f"not an ONNX model: the protobuf does not parse ({exc})",
                        value=label) from None


def check_model_header(proto: Any) -> None:
    """IR version, opset imports and a non-empty graph; a PlanError names what is wrong."""
    onnx = require_onnx()
    if proto.ir_version < 1 or not proto.HasField("graph"):
        raise PlanError("not an ONNX model: it has no IR version or no graph",
                        value=proto.ir_version)
    if proto.ir_version > onnx.IR_VERSION:
        raise PlanError(f"IR version {proto.ir_version} is newer than this onnx "
                        f"{onnx.__version__} reads (IR {onnx.IR_VERSION}); upgrade onnx",
                        value=proto.ir_version)
    opset = default_opset(proto)
    newest = onnx.defs.onnx_opset_version()
    if opset is None:
        raise PlanError("the model imports no ai.onnx opset (opset_import has no '' domain)",
                        value=[(o.domain, o.version) for o in proto.opset_import])
    if not MIN_OPSET <= opset <= newest:
        raise PlanError(f"unsupported ai.onnx opset {opset}: convsel plans opsets "
                        f"{MIN_OPSET}..{newest} (onnx {onnx.__version__}); convert older models "
                        f"with onnx.version_converter", value=opset)


def default_opset(proto: Any) -> int | None:
    """The model's ai.onnx opset version, or None when it imports none."""
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    return max(versions) if versions else None
