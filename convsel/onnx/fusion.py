"""Which activation ACL's graph would fuse into a Conv.

ACL's ``NodeFusionMutator`` fuses an activation into the convolution before it when the
convolution's output has exactly one consumer, that consumer is an activation of a supported
kind, and the convolution's output is not a graph output (no "output accessor"). The same
test is applied here to ONNX nodes. ONNX ops map to ACL activations through :data:`ACTIVATIONS`
and, for ``Clip``, through its bounds: ``[0, inf)`` is relu, ``[0, a]`` bounded_relu(a) and any
other finite ``[b, a]`` lu_bounded_relu(a, b); a half-open clip other than ``[0, inf)`` has no
ACL form and is not fused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..activation import Activation
from .mapping import attributes
from .reader import DEFAULT_DOMAINS, require_onnx

_FLT_MAX = 3.4028234663852886e38   # Clip-6's default bounds are +-FLT_MAX: no bound at all

# ONNX op -> ACL activation, from the node's attributes. ACL's supported fused activations are
# ABS, BOUNDED_RELU, ELU, HARD_SWISH, LEAKY_RELU, LINEAR, LOGISTIC, LU_BOUNDED_RELU, RELU, TANH
# (and three convsel does not implement: SOFT_RELU, SQRT, SQUARE).
ACTIVATIONS: dict[str, Callable[[dict[str, Any]], Activation]] = {
    "Relu": lambda a: Activation("relu"),
    "LeakyRelu": lambda a: Activation("leaky_relu", float(a.get("alpha", 0.01))),
    "Sigmoid": lambda a: Activation("logistic"),
    "Tanh": lambda a: Activation("tanh", 1.0, 1.0),
    "Elu": lambda a: Activation("elu", float(a.get("alpha", 1.0))),
    "HardSwish": lambda a: Activation("hard_swish"),
    "Abs": lambda a: Activation("abs"),
}


@dataclass(frozen=True)
class Fusion:
    """The outcome for one Conv: the fused activation and the node it came from, or a note
    saying why an activation that follows was not fused."""

    activation: Activation | None = None
    node: str | None = None
    note: str | None = None


class GraphIndex:
    """Consumers of every tensor, the graph outputs and the constant tensors of a graph."""

    def __init__(self, graph: Any, opset: int) -> None:
        self.opset = opset
        self.outputs = {v.name for v in graph.output}
        self.consumers: dict[str, list[tuple[str, Any]]] = {}
        for i, node in enumerate(graph.node):
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append((node_label(node, i), node))
        self._constants = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
                self._constants.update({out: node for out in node.output})

    def scalar(self, name: str) -> float | None:
        """The value of a constant scalar tensor, or None when it is not a readable constant.
        External data is never read (its path comes from the model)."""
        onnx = require_onnx()
        source = self._constants.get(name)
        if source is None:
            return None
        if isinstance(source, onnx.NodeProto):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in source.attribute}
            if "value_float" in attrs:
                return float(attrs["value_float"])
            source = attrs.get("value")
            if not isinstance(source, onnx.TensorProto):
                return None
        if source.data_location == onnx.TensorProto.EXTERNAL:
            return None
        values = onnx.numpy_helper.to_array(source).reshape(-1)
        return float(values[0]) if values.size == 1 else None


def node_label(node: Any, i: int) -> str:
    """How plans and errors name a node: its name, else ``op_type#position``."""
    return node.name or f"{node.op_type}#{i}"


def fused_activation(conv: Any, index: GraphIndex) -> Fusion:
    """The activation ACL's graph would fuse into ``conv``, or why one was not fused."""
    out = conv.output[0]
    consumers = index.consumers.get(out, [])
    activations = [(name, n) for name, n in consumers if n.domain in DEFAULT_DOMAINS
                   and (n.op_type in ACTIVATIONS or n.op_type == "Clip")]
    if not activations:
        return Fusion()
    name, act = activations[0]
    if out in index.outputs:
        return Fusion(note=f"{act.op_type} {name!r} not fused: the Conv's output "
                           f"{out!r} is also a graph output")
    if len(consumers) != 1:
        return Fusion(note=f"{act.op_type} {name!r} not fused: the Conv's output feeds "
                           f"{len(consumers)} nodes (ACL fuses only a sole consumer)")
    if act.op_type != "Clip":
        return Fusion(ACTIVATIONS[act.op_type](attributes(act)), name)
    return _clip(act, index, name)


def _clip(node: Any, index: GraphIndex, name: str) -> Fusion:
    if index.opset < 11:
        attrs = attributes(node)
        lo, hi = attrs.get("min", -_FLT_MAX), attrs.get("max", _FLT_MAX)
    else:
        bounds = [index.scalar(n) if n else None for n in (list(node.input) + ["", ""])[1:3]]
        missing = [n for n, v in zip(node.input[1:3], bounds) if n and v is None]
        if missing:
            return Fusion(note=f"Clip {name!r} not fused: bound {missing[0]!r} is not a "
                               "constant scalar")
        lo = bounds[0] if bounds[0] is not None else -math.inf
        hi = bounds[1] if bounds[1] is not None else math.inf
    lo = -math.inf if lo <= -_FLT_MAX else float(lo)
    hi = math.inf if hi >= _FLT_MAX else float(hi)
    if lo == 0 and hi == math.inf:
        return Fusion(Activation("relu"), name)
    if lo == 0 and math.isfinite(hi) and hi > 0:
        return Fusion(Activation("bounded_relu", hi), name)
    if math.isfinite(lo) and math.isfinite(hi) and lo <= hi:
        return Fusion(Activation("lu_bounded_relu", hi, lo), name)
    return Fusion(note=f"Clip {name!r} not fused: bounds [{lo:g}, {hi:g}] have no ACL "
                       "activation form")
