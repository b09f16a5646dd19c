"""Tensor shapes and element types: onnx's shape inference, with user overrides.

Shapes a model already carries (``value_info``, graph outputs) may be stale, so they are dropped
before inference wherever onnx can recompute them; only the outputs of ops onnx has no schema
for (custom domains) keep the model's own hints. ``input_shapes`` overrides win over all.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidProblemError
from .errors import PlanError
from .reader import DEFAULT_DOMAINS, require_onnx

Dim = int | str | None               # a size, a symbolic name, or unknown
_MAX_DIM = 1 << 63                   # ONNX dims are int64
_SHAPE_ARG = re.compile(r"^\s*([^=\s][^=]*?)\s*=\s*([0-9][0-9,x\s]*)$")


@dataclass(frozen=True)
class TensorInfo:
    """What inference knows of one tensor: ONNX element type (0: unknown) and dims
    (None: rank unknown)."""

    elem_type: int
    dims: tuple[Dim, ...] | None

    @property
    def known(self) -> bool:
        return self.dims is not None and all(isinstance(d, int) for d in self.dims)

    def describe(self) -> str:
        if self.dims is None:
            return "unknown"
        return "(" + ", ".join("?" if d is None else str(d) for d in self.dims) + ")"


def parse_input_shape(text: str, field: str = "input_shape") -> tuple[str, tuple[int, ...]]:
    """``"x=1,3,224,224"`` (or ``1x3x224x224``) -> ``("x", (1, 3, 224, 224))``. ``field`` is
    what the caller calls it in errors (``--input-shape``, or the HTTP form's field)."""
    match = _SHAPE_ARG.match(text)
    dims = [d for d in re.split(r"[,x\s]+", match.group(2)) if d] if match else []
    if not match or not dims:
        raise InvalidProblemError(field, text,
                                  "expected NAME=D0,D1,... such as input=1,3,224,224")
    shape = tuple(int(d) for d in dims)
    if min(shape) < 1:
        raise InvalidProblemError(field, text, "every dimension must be >= 1")
    return match.group(1), shape


def infer(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None,
          ) -> dict[str, TensorInfo]:
    """Run onnx's shape inference on ``model`` (changed in place: pass a copy) and return
    every tensor's :class:`TensorInfo`, initializers included.

    Raises
    ------
    InvalidProblemError
        An ``input_shapes`` entry that names no tensor of the graph or is no shape.
    PlanError
        Shape inference that fails.
    """
    onnx = require_onnx()
    graph = model.graph
    _drop_recomputable_shapes(graph)
    for name, shape in (input_shapes or {}).items():
        _override(onnx, graph, name, shape)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False,
                                                     strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError, TypeError) as exc:
        raise PlanError(f"onnx shape inference failed: {exc}") from None
    return tensor_table(inferred.graph)


def tensor_table(graph: Any) -> dict[str, TensorInfo]:
    """Name -> TensorInfo for inputs, value_info, outputs and initializers of ``graph``."""
    table: dict[str, TensorInfo] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        info = _value_info(value)
        if info.dims is not None or value.name not in table:
            table[value.name] = info
    for init in graph.initializer:
        table[init.name] = TensorInfo(init.data_type, tuple(int(d) for d in init.dims))
    return table


def _value_info(value: Any) -> TensorInfo:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return TensorInfo(tensor.elem_type, None)
    dims: list[Dim] = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return TensorInfo(tensor.elem_type, tuple(dims))


def _drop_recomputable_shapes(graph: Any) -> None:
    custom = {out for node in graph.node if node.domain not in DEFAULT_DOMAINS
              for out in node.output}
    keep = [v for v in graph.value_info if v.name in custom]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    for value in graph.output:
        if value.name not in custom and value.type.HasField("tensor_type"):
            value.type.tensor_type.ClearField("shape")


def _override(onnx: Any, graph: Any, name: str, shape: Sequence[int]) -> None:
    try:
        dims = [operator.index(d) for d in shape]
    except TypeError:
        dims = []
    if not dims or min(dims) < 1 or max(dims) >= _MAX_DIM:
        raise InvalidProblemError(f"input_shapes[{name!r}]", shape,
                                  f"expected a sequence of integers from 1 to {_MAX_DIM - 1}")
    for value in graph.input:
        if value.name == name:
            declared = value.type.tensor_type
            if declared.HasField("shape") and len(declared.shape.dim) != len(dims):
                raise InvalidProblemError(f"input_shapes[{name!r}]", shape, f"the input has "
                                          f"rank {len(declared.shape.dim)}, not {len(dims)}")
            _set_dims(value, dims)
            return
    produced = {out for node in graph.node for out in node.output}
    if name not in produced:
        inputs = [v.name for v in graph.input]
        raise InvalidProblemError("input_shapes", name, f"no tensor of the graph has this "
                                  f"name; graph inputs: {', '.join(inputs) or 'none'}")
    for value in graph.value_info:
        if value.name == name:
            _set_dims(value, dims)
            return
    # An intermediate tensor: its element type is learnt from the node that reads it.
    graph.value_info.append(onnx.helper.make_tensor_value_info(name, 0, dims))


def _set_dims(value: Any, dims: list[int]) -> None:
    tensor = value.type.tensor_type
    tensor.ClearField("shape")
    shape = tensor.shape
    for d in dims:
        shape.dim.add().dim_value = d
