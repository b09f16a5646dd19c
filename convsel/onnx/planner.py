"""plan(): the method ACL would choose (or convsel measured) for every Conv of an ONNX model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..acl.tables import parse_near_misses
from ..errors import ConvselError, InvalidProblemError, UnsupportedError
from ..policies import POLICIES, choose
from ..problem import LAYOUTS, ConvProblem
from ..rules import Rules, default_rules, load_rules
from ..selection import Selection, select
from ..targets import Target, resolve_target
from .errors import PlanError
from .fusion import GraphIndex, fused_activation, node_label
from .mapping import Skip, conv_problem
from .reader import DEFAULT_DOMAINS, ModelSource, default_opset, load_model
from .shapes import TensorInfo, infer
from .summary import Runnable, runnable, summarize
from .timing import measured_time

# Convolution-like ops that are not ai.onnx Conv: listed as skipped, never planned.
_OTHER_CONVS = ("ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv")


@dataclass(frozen=True)
class NodePlan:
    """One Conv node's answer. ``acl`` is ACL's rules' answer when the policy is not "acl"."""

    name: str
    index: int
    inputs: tuple[str, ...]
    output: str
    problem: ConvProblem
    selection: Selection
    runnable: Runnable
    activation_node: str | None = None
    fusion_note: str | None = None
    acl: Selection | None = None

    @property
    def near_misses(self) -> list[dict[str, str]]:
        """Table rows this problem missed by one small difference, with the rule's id."""
        return [{"rule": s.id, **m} for s in self.selection.trace
                for m in parse_near_misses(s.reason)]

    @property
    def time(self) -> dict[str, Any] | None:
        return measured_time(self.selection, self.acl or self.selection)

    def to_dict(self) -> dict[str, Any]:
        s = self.selection
        out: dict[str, Any] = {
            "name": self.name, "index": self.index, "inputs": list(self.inputs),
            "output": self.output, "problem": self.problem.to_dict(),
            "shape": str(self.problem), "method": s.method, "algorithm": s.algorithm,
            "params": s.to_dict()["params"], "rule": s.rule, "reason": s.reason,
            "source": s.source, "fallback": s.fallback,
            "activation": str(self.problem.activation) if self.problem.activation else None,
            "activation_node": self.activation_node, "fusion_note": self.fusion_note,
            "near_misses": self.near_misses, "runnable": self.runnable.to_dict(),
            "flops": self.problem.flops, "time": self.time,
            "trace": [step.to_dict() for step in s.trace],
        }
        if self.acl is not None:
            out["acl"] = {"method": self.acl.method, "algorithm": self.acl.algorithm,
                          "rule": self.acl.rule, "reason": self.acl.reason}
        return out


@dataclass(frozen=True)
class Skipped:
    """A convolution-like node that is not planned, and why."""

    name: str
    op_type: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "op_type": self.op_type, "reason": self.reason}


@dataclass(frozen=True)
class ModelPlan:
    """The plan of a whole model: one :class:`NodePlan` per Conv, in graph order."""

    model: Mapping[str, Any]
    target: str
    policy: str
    nodes: tuple[NodePlan, ...]
    skipped: tuple[Skipped, ...]
    rules: Rules

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.nodes, self.skipped)

    def to_dict(self) -> dict[str, Any]:
        return {"model": dict(self.model), "target": self.target, "policy": self.policy,
                "summary": self.summary, "nodes": [n.to_dict() for n in self.nodes],
                "skipped": [s.to_dict() for s in self.skipped],
                "rules": {"version": self.rules.version, "digest": self.rules.digest},
                "convsel": __version__}


def plan(model: ModelSource, target: str | Target = "cpu", policy: str = "acl", *,
         input_shapes: Mapping[str, Sequence[int]] | None = None, fast_math: bool = False,
         layout: str = "NCHW", rules: Rules | str | None = None,
         **policy_options: Any) -> ModelPlan:
    """Plan every 2-D ``Conv`` of an ONNX model: the method, algorithm and deciding rule.

    Parameters
    ----------
    model : path, bytes or onnx.ModelProto
        Parsed with the ``onnx`` package, never run; external data files are never read.
    target : str
        As for :func:`convsel.select`: ``"cpu"``, ``"G77"``, ...
    policy : {"acl", "measured"}
        "measured" answers from the tuning database where it holds a node's problem (and
        reports ACL's answer beside it); ``policy_options`` go to it (``backend=``, ``db=``).
    input_shapes : mapping, optional
        Shapes for graph inputs (or intermediate tensors) that shape inference leaves
        unknown or symbolic, e.g. ``{"input": (1, 3, 224, 224)}``.
    fast_math : bool
        ACL's ``enable_fast_math`` for every node (off by default, as in ACL's graph API).
    layout : {"NCHW", "NHWC"}
        The layout ACL runs the model in; ONNX itself is NCHW.

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
    loaded = rules if isinstance(rules, Rules) else (
        default_rules() if rules is None else load_rules(rules))
    resolved = resolve_target(target, loaded)
    if str(layout).upper() not in LAYOUTS:
        raise InvalidProblemError("layout", layout, f"known: {', '.join(LAYOUTS)}")
    if policy not in POLICIES:
        raise InvalidProblemError("policy", policy, f"unknown policy; known: "
                                  f"{', '.join(POLICIES)}")
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
                                        policy, policy_options, fast_math=fast_math,
                                        layout=layout))
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
    return ModelPlan(info, resolved.name, policy, tuple(nodes), tuple(skipped), loaded)


def _plan_node(node: Any, i: int, name: str, tensors: Mapping[str, TensorInfo],
               index: GraphIndex, info: Mapping[str, Any], target: Target, rules: Rules,
               policy: str, options: Mapping[str, Any], **problem_options: Any) -> NodePlan:
    fusion = fused_activation(node, index)
    unknown = [n for n, dims in info["inputs"].items() if dims is None or not all(
        isinstance(d, int) for d in dims)]
    problem = conv_problem(node, name, tensors, unknown, activation=fusion.activation,
                           **problem_options)
    acl = select(problem, target, rules=rules)
    chosen = acl if policy == "acl" else _select(problem, target, rules, policy, options)
    return NodePlan(
        name=name, index=i, inputs=tuple(node.input), output=node.output[0], problem=problem,
        selection=chosen, runnable=runnable(chosen.method, problem, rules, dict(chosen.params)),
        activation_node=fusion.node, fusion_note=fusion.note,
        acl=None if policy == "acl" else acl)


def _select(problem: ConvProblem, target: Target, rules: Rules, policy: str,
            options: Mapping[str, Any]) -> Selection:
    try:
        return choose(problem, target, rules=rules, policy=policy, **options)
    except ImportError as exc:
        raise UnsupportedError(f"policy {policy!r} needs convsel's tuning database "
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
