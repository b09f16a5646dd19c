"""Errors of model planning: every one names the model-level reason or the node at fault.

    InvalidProblemError (ValueError)
    └── PlanError                       the model cannot be planned; ``node`` names the node
        └── UnknownShapeError           a Conv's input shape stays unknown after inference
    BackendUnavailableError
    └── OnnxUnavailableError            the optional ``onnx`` package is not installed
"""

from __future__ import annotations

from typing import Any

from ..errors import BackendUnavailableError, InvalidProblemError


class PlanError(InvalidProblemError):
    """A model that cannot be planned. ``node`` is the ONNX node's name, or None when the
    reason concerns the whole model (not ONNX, no Conv nodes, an unsupported opset)."""

    def __init__(self, reason: str, *, node: str | None = None, value: Any = None) -> None:
        self.node = node
        self.reason = reason
        if node is None:
            super().__init__("model", value, reason)
        else:
            super().__init__("node", node, reason)

    def __str__(self) -> str:
        where = f"node {self.node!r}" if self.node is not None else "model"
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, for a service's 422 answer."""
        return {"node": self.node, "reason": self.reason}


class UnknownShapeError(PlanError):
    """A Conv whose input shape is unknown or symbolic; ``inputs`` lists the graph inputs
    that an ``input_shapes`` override could fix."""


class OnnxUnavailableError(BackendUnavailableError, ImportError):
    """Planning needs the ``onnx`` package: ``pip install 'convsel[onnx]'``."""
