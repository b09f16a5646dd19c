"""Small value types shared by the predicates and the heuristics."""

from __future__ import annotations

from typing import Any, NamedTuple

# NamedTuples rather than frozen dataclasses: select() builds a dozen of these per call and
# tuple construction is several times cheaper.

_NO_PARAMS: dict[str, Any] = {}


class Verdict(NamedTuple):
    """The answer of one validate() predicate: ``ok``, the reason, and any chosen parameters
    (the Winograd output tile, for instance). Truthy when ``ok``."""

    ok: bool
    reason: str
    params: dict[str, Any] = _NO_PARAMS

    def __bool__(self) -> bool:
        return self.ok


def passed(reason: str, **params: Any) -> Verdict:
    return Verdict(True, reason, params or _NO_PARAMS)


def failed(reason: str) -> Verdict:
    return Verdict(False, reason)


class TraceStep(NamedTuple):
    """One rule as evaluated: its id, whether it fired (decided the answer), and why."""

    id: str
    fired: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "fired": self.fired, "reason": self.reason}


class Trace(list[TraceStep]):
    """The rules in evaluation order; :meth:`rule` records one and returns whether it fired."""

    def rule(self, rule_id: str, fired: bool, reason: str) -> bool:
        fired = bool(fired)
        self.append(TraceStep(rule_id, fired, reason))
        return fired


class Decision(NamedTuple):
    """What a heuristic returns: the ACL method, the rule that decided, and parameters."""

    method: str
    rule: str
    params: dict[str, Any] = _NO_PARAMS
