"""plan(): the method ACL would choose (or convsel measured) for every Conv of an ONNX model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import arguments
from .._version import __version__
from ..backends import Preference
from ..errors import ConvselError, InvalidProblemError, UnsupportedError
from ..policies import Policy, decide, get_policy, options_for
from ..problem import LAYOUTS
from ..rules import Rules, as_rules
from ..selection import acl_selection
from ..targets import Target, resolve_target
from .assign import place
from .errors import PlanError
from .fusion import GraphIndex, fused_activation, node_label
from .mapping import Skip, conv_problem
from .nodes import NodePlan, Skipped
from .placement import Flow, data_flow
from .reader import DEFAULT_DOMAINS, ModelSource, default_opset, load_model
from .shapes import TensorInfo, infer
from .summary import runnable, summarize

# Convolution-like ops that are not ai.onnx Conv: listed as skipped, never planned.
_OTHER_CONVS = ("ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv")


@dataclass(frozen=True)
class ModelPlan:
    """The plan of a whole model: one :class:`NodePlan` per Conv, in graph order."""

    model: Mapping[str, Any]
    target: str
    policy: str
    nodes: tuple[NodePlan, ...]
    skipped: tuple[Skipped, ...]
    rules: Rules
    placement: Mapping[str, Any] | None = None   # planned over backends: order, switches

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.nodes, self.skipped, self.placement)

    def to_dict(self) -> dict[str, Any]:
        return {"model": dict(self.model), "target": self.target, "policy": self.policy,
                "placement": None if self.placement is None else dict(self.placement),
                "summary": self.summary, "nodes": [n.to_dict() for n in self.nodes],
                "skipped": [s.to_dict() for s in self.skipped],
                "rules": {"version": self.rules.version, "digest": self.rules.digest},
                "convsel": __version__}


def plan(model: ModelSource, target: str | Target = "cpu", policy: str = "acl", *,
         input_shapes: Mapping[str, Sequence[int]] | None = None, fast_math: bool = False,
         layout: str = "NCHW", rules: Rules | str | None = None,
         backend: str | Sequence[str] | Preference | None = None, device: Any = None,
         **policy_options: Any) -> ModelPlan:
    """Plan every 2-D ``Conv`` of an ONNX model: the method, algorithm and deciding rule.

    Parameters
    ----------
    model : path, bytes or onnx.ModelProto
        Parsed with the ``onnx`` package, never run; external data files are never read.
    target : str
        As for :func:`convsel.select`: ``"cpu"``, ``"G77"``, ...
    policy : {"acl", "measured", "predicted"}
        "measured" answers from the tuning database where it holds a node's problem (and
        reports ACL's answer beside it); ``policy_options`` go to it (``backend=``, ``db=``),
        checked once for the whole model (:func:`convsel.policies.get_policy`).
    input_shapes : mapping, optional
        Shapes for graph inputs (or intermediate tensors) that shape inference leaves
        unknown or symbolic, e.g. ``{"input": (1, 3, 224, 224)}``.
    fast_math : bool
        ACL's ``enable_fast_math`` for every node (off by default, as in ACL's graph API).
    layout : {"NCHW", "NHWC"}
        The layout ACL runs the model in; ONNX itself is NCHW.
    backend : str or list, optional
        Where the Convs run, as for :func:`convsel.prepare`: one backend (a Conv it does
        not support goes to numpy), or several in order of preference (``"opencl,numpy"``,
        ``"auto"``). With policy "acl" each Conv goes to the first that supports it
        (ArmNN's ``backendPreferences``); "measured" and "predicted" take each backend's
        timings or model and pick the assignment with the least total time, host↔device
        copies included (:mod:`convsel.onnx.placement`). Each node names its backend, the
        summary the host↔device switches. The backend (and ``device``) go to a policy
        that takes them.

    Returns
    -------
    ModelPlan

    Raises
    ------
    PlanError
        Not ONNX, an unsupported opset, no 2-D Conv, an unknown shape (naming the node).
    OnnxUnavailableError
        The ``onnx`` package is not installed.
    UnsupportedError
        ``policy="measured"`` where convsel's tuning layer cannot be imported.
    """
    loaded = as_rules(rules)
    resolved = resolve_target(target, loaded)
    if str(layout).upper() not in LAYOUTS:
        raise InvalidProblemError("layout", layout, f"known: {', '.join(LAYOUTS)}")
    order = None if backend is None else arguments.backends(backend)
    if order is not None:
        device = arguments.device_beside(order, device)
    chosen = _policy(policy, policy_options, {"backend": order, "device": device})
    proto = load_model(model)
    info = _model_info(proto)
    tensors = infer(proto, input_shapes)
    info["inputs"] = _input_shapes(proto.graph, tensors)
    index = GraphIndex(proto.graph, info["opset"])
    nodes, skipped = [], []
    for i, node in enumerate(proto.graph.node):
        name = node_label(node, i)
        if node.op_type == "Conv" and node.domain in DEFAULT_DOMAINS:
            try:
                nodes.append(_plan_node(node, i, name, tensors, index, info, resolved, loaded,
                                        chosen, fast_math=fast_math, layout=layout))
            except Skip as why:
                skipped.append(Skipped(name, node.op_type, str(why)))
            except ConvselError:
                raise
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                # A malformed node (missing inputs, attributes of the wrong type): the model
                # is at fault, and the answer names the node instead of crashing.
                raise PlanError(f"cannot read this Conv ({type(exc).__name__}: {exc})",
                                node=name) from None
        elif node.op_type in _OTHER_CONVS or node.op_type == "Conv":
            skipped.append(Skipped(name, node.op_type, f"{node.domain or 'ai.onnx'}."
                                   f"{node.op_type} is not a 2-D ai.onnx Conv"))
    if not nodes:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped)
        raise PlanError("the model has no 2-D Conv node to plan"
                        + (f" ({reasons})" if reasons else ""),
                        value=info.get("graph"))
    if order is None:
        return ModelPlan(info, resolved.name, policy, tuple(nodes), tuple(skipped), loaded)
    placed, placement = place(nodes, order, device, chosen, resolved, loaded,
                              _flow(proto.graph, nodes, index))
    return ModelPlan(info, resolved.name, policy, placed, tuple(skipped), loaded, placement)


def _flow(graph: Any, nodes: Sequence[NodePlan], index: GraphIndex) -> Flow:
    consumers = {tensor: [name for name, _ in readers]
                 for tensor, readers in index.consumers.items()}
    return data_flow([n.inputs[0] for n in nodes], [n.produces for n in nodes], consumers,
                     index.outputs)


def _plan_node(node: Any, i: int, name: str, tensors: Mapping[str, TensorInfo],
               index: GraphIndex, info: Mapping[str, Any], target: Target, rules: Rules,
               policy: Policy, **problem_options: Any) -> NodePlan:
    fusion = fused_activation(node, index)
    unknown = [n for n, dims in info["inputs"].items() if dims is None or not all(
        isinstance(d, int) for d in dims)]
    problem = conv_problem(node, name, tensors, unknown, activation=fusion.activation,
                           **problem_options)
    acl = acl_selection(problem, target, rules)
    by_rules = policy.name == "acl"
    chosen = acl if by_rules else decide(problem, target, rules, policy)
    return NodePlan(
        name=name, index=i, inputs=tuple(node.input), output=node.output[0], problem=problem,
        selection=chosen, runnable=runnable(chosen.method, problem, rules, dict(chosen.params)),
        activation_node=fusion.node, fusion_note=fusion.note, acl=None if by_rules else acl,
        produces=_produces(node, fusion.node, index))


def _produces(node: Any, activation: str | None, index: GraphIndex) -> str:
    """The tensor a Conv's result is read from: its fused activation's output, if any."""
    fused = [n for name, n in index.consumers.get(node.output[0], []) if name == activation]
    return str(fused[0].output[0]) if fused else str(node.output[0])


def _policy(name: str, options: Mapping[str, Any], placed: Mapping[str, Any]) -> Policy:
    """The policy every node is asked, its name and options checked once for the model; the
    backend and device where the policy takes them."""
    try:
        return get_policy(name, **options_for(name, options, defaults=placed))
    except ImportError as exc:
        raise UnsupportedError(f"policy {name!r} needs convsel's tuning database "
                               f"(convsel.tuning), which cannot be imported here ({exc}); "
                               "plan with policy 'acl'") from None


def _model_info(proto: Any) -> dict[str, Any]:
    producer = " ".join(p for p in (proto.producer_name, proto.producer_version) if p)
    return {"graph": proto.graph.name, "producer": producer or None,
            "ir_version": proto.ir_version, "opset": default_opset(proto)}


def _input_shapes(graph: Any, tensors: Mapping[str, TensorInfo]) -> dict[str, Any]:
    weights = {t.name for t in graph.initializer}
    return {v.name: (list(dims) if (dims := tensors[v.name].dims) is not None else None)
            for v in graph.input if v.name not in weights}
