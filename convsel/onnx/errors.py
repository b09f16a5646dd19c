"""Errors of model planning: every one names the model-level reason or the node at fault.

    InvalidProblemError (ValueError)
    └── PlanError                       the model cannot be planned; ``node`` names the node
        └── UnknownShapeError           a Conv's input shape stays unknown after inference
    BackendUnavailableError
    └── OnnxUnavailableError            the optional ``onnx`` package is not installed
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """A Conv whose input shape or weights' shape is unknown or symbolic. Where an override
    of the shapes could fix it, ``tensor`` is the Conv's input and ``inputs`` the graph
    inputs with unknown dimensions, and the hint names ``option``: the caller's spelling of
    that override (``input_shapes`` in Python, ``--input-shape`` on the command line; see
    :meth:`naming`)."""

    def __init__(self, reason: str, *, node: str, value: Any = None, tensor: str | None = None,
                 inputs: Sequence[str] = (), option: str = "input_shapes") -> None:
        self.unhinted, self.tensor, self.inputs, self.option = reason, tensor, tuple(inputs), \
            option
        super().__init__(reason if tensor is None else f"{reason}; {self._hint(tensor)}",
                         node=node, value=value)

    @classmethod
    def of_input(cls, tensor: str, described: str, *, node: str,
                 inputs: Sequence[str] = ()) -> UnknownShapeError:
        return cls(f"the shape of input {tensor!r} is {described} after shape inference",
                   node=node, value=described, tensor=tensor, inputs=inputs)

    def _hint(self, tensor: str) -> str:
        if self.inputs:
            return (f"give the shapes of the graph inputs with "
                    f"{_example(self.option, self.inputs[0], '1,3,224,224')} (inputs with "
                    f"unknown dims: {', '.join(self.inputs)})")
        return f"give its shape with {_example(self.option, tensor, 'N,C,H,W')}"

    def naming(self, option: str) -> UnknownShapeError:
        """The same error with its hint in another surface's spelling: ``"--input-shape"``
        (command line) or a form field's name such as ``"input_shape"`` (HTTP)."""
        assert self.node is not None
        return UnknownShapeError(self.unhinted, node=self.node, value=self.value,
                                 tensor=self.tensor, inputs=self.inputs, option=option)


def _example(option: str, name: str, dims: str) -> str:
    if option == "input_shapes":
        return f"input_shapes={{{name!r}: ({dims.replace(',', ', ')})}}"
    if option.startswith("--"):
        return f"{option} {name}={dims}"
    return f"the field {option}={name}={dims}"


class OnnxUnavailableError(BackendUnavailableError, ImportError):
    """Planning needs the ``onnx`` package: ``pip install 'convsel[onnx]'``."""
