"""Policies: who decides which algorithm runs. Each composes the pure :func:`convsel.select`
(ACL's rules) with data it is handed (tuning timings, a fitted model).

One small interface, :class:`Policy`: ``choose(problem, target, rules) -> Selection``.
``conv2d``, ``prepare``, the ONNX planner, the CLI and the service all ask a policy through
:func:`choose` (or :func:`get_policy` for one they keep).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import InvalidProblemError
from ..problem import ConvProblem
from ..rules import Rules, as_rules
from ..selection import Selection
from ..targets import Target, resolve_target
from .acl import AclPolicy


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection: ...


def _measured(**options: Any) -> Policy:
    from .measured import MeasuredPolicy  # the tuning store is imported only when used

    return MeasuredPolicy(**options)


# name -> factory taking the policy's options; the one list of policies
POLICIES: dict[str, Callable[..., Policy]] = {
    "acl": lambda: AclPolicy(),
    "measured": _measured,
}
# the options each policy takes (the service and CLI pass only these)
POLICY_OPTIONS: dict[str, tuple[str, ...]] = {
    "acl": (),
    "measured": ("backend", "device", "db", "tune"),
}


def get_policy(name: str, **options: Any) -> Policy:
    """The policy ``name`` with its options; unknown names and options are the caller's error."""
    if name not in POLICIES:
        raise InvalidProblemError("policy", name,
                                  f"unknown policy; known: {', '.join(POLICIES)}")
    extra = sorted(set(options) - set(POLICY_OPTIONS[name]))
    if extra:
        takes = ", ".join(POLICY_OPTIONS[name]) or "no options"
        raise InvalidProblemError(extra[0], options[extra[0]],
                                  f"policy {name!r} takes {takes}")
    return POLICIES[name](**options)


def choose(problem: ConvProblem, target: str | Target = "cpu", *, policy: str | Policy = "acl",
           rules: Rules | str | None = None, **options: Any) -> Selection:
    """What ``policy`` runs for ``problem`` on ``target``, as a :class:`Selection` with its
    reasons. ``options`` go to the policy (``backend``, ``device``, ``db``, ``tune`` for
    "measured")."""
    if not isinstance(problem, ConvProblem):
        raise InvalidProblemError("problem", type(problem).__name__, "expected a ConvProblem")
    loaded = as_rules(rules)
    chosen = policy if not isinstance(policy, str) else get_policy(policy, **options)
    return chosen.choose(problem, resolve_target(target, loaded), loaded)


__all__ = ["POLICIES", "AclPolicy", "Policy", "choose", "get_policy"]
