"""Small value types shared by the predicates and the heuristics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer of one validate() predicate: ``ok``, the reason, and any chosen parameters
    (the Winograd output tile, for instance)."""

    ok: bool
    reason: str
    params: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.ok


def passed(reason: str, **params: Any) -> Verdict:
    return Verdict(True, reason, params)


def failed(reason: str) -> Verdict:
    return Verdict(False, reason)


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One rule as evaluated: its id, whether it fired (decided the answer), and why."""

    id: str
    fired: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "fired": self.fired, "reason": self.reason}


class Trace(list[TraceStep]):
    """The rules in evaluation order; :meth:`rule` records one and returns whether it fired."""

    def rule(self, rule_id: str, fired: bool, reason: str) -> bool:
        self.append(TraceStep(rule_id, bool(fired), reason))
        return bool(fired)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a heuristic returns: the ACL method, the rule that decided, and parameters."""

    method: str
    rule: str
    params: dict[str, Any] = field(default_factory=dict)
