"""One Conv node's answer in a plan, and a node left out: the types the planner builds and the
summary reads (here, so that each imports them and neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..acl.tables import parse_near_misses
from ..problem import ConvProblem
from ..selection import Selection
from .timing import measured_time


@dataclass(frozen=True)
class Runnable:
    """Whether convsel can run the method the answer names: its algorithm supports the
    problem (:func:`convsel.algorithms.supports`) and some backend implements it
    (:data:`convsel.backends.IMPLEMENTATIONS`)."""

    ok: bool
    algorithm: str
    backends: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "algorithm": self.algorithm, "backends": list(self.backends),
                "reason": self.reason}


@dataclass(frozen=True)
class NodePlan:
    """One Conv node's answer. ``acl`` is ACL's rules' answer when the policy is not "acl".

    Planned over backends (``backend=`` of :func:`convsel.plan`), ``backend`` is where it
    runs (None: no backend of the list supports it), ``passed_over`` the backends it does
    not run on with why, and ``copies`` whether its input is copied in and its output out
    between host and device; ``produces`` names the tensor its result (after a fused
    activation) is read from.
    """

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
    produces: str = ""
    backend: str | None = None
    passed_over: tuple[str, ...] = ()
    copies: tuple[bool, bool] = (False, False)

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
            "backend": self.backend, "passed_over": list(self.passed_over),
            "copies": {"in": self.copies[0], "out": self.copies[1]},
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
