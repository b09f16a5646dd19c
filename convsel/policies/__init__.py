"""Policies: who decides which algorithm runs. Each composes the pure :func:`convsel.select`
(ACL's rules) with data it is handed (tuning timings, a fitted model).

One small interface, :class:`Policy`: ``choose(problem, target, rules) -> Selection``.
``conv2d``, ``prepare``, the ONNX planner, the CLI and the service all ask a policy through
:func:`choose` (or :func:`get_policy` for one they keep).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .. import algorithms
from ..errors import InvalidProblemError
from ..problem import ConvProblem
from ..rules import Rules, as_rules
from ..selection import Selection, limit_workspace
from ..targets import Target, resolve_target
from .acl import AclPolicy


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection: ...


def _measured(**options: Any) -> Policy:
    from .measured import MeasuredPolicy  # the tuning store is imported only when used

    return MeasuredPolicy(**options)


def _predicted(**options: Any) -> Policy:
    from .predicted import PredictedPolicy  # the model's learner is imported only when used

    return PredictedPolicy(**options)


# name -> factory taking the policy's options; the one list of policies
POLICIES: dict[str, Callable[..., Policy]] = {
    "acl": lambda: AclPolicy(),
    "measured": _measured,
    "predicted": _predicted,
}
# the options each policy takes (the service and CLI pass only these)
POLICY_OPTIONS: dict[str, tuple[str, ...]] = {
    "acl": (),
    "measured": ("backend", "device", "db", "tune", "tune_budget_s", "verify"),
    "predicted": ("backend", "device", "db", "abstain"),
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
           rules: Rules | str | None = None, max_workspace_bytes: int | None = None,
           workspace_backend: str | None = None, **options: Any) -> Selection:
    """What ``policy`` runs for ``problem`` on ``target``, as a :class:`Selection` with its
    reasons. ``options`` go to the policy (``backend``, ``device``, ``db``, ``tune``,
    ``tune_budget_s`` for "measured"; ``backend``, ``device``, ``db`` for "predicted").

    ``max_workspace_bytes`` keeps the policy's answer if its workspace fits, else takes the
    first that fits: the measured policy's timed candidates fastest first, then the order of
    :func:`convsel.selection.workspace_order`; the trace names what was excluded and why.
    ``workspace_backend`` says whose workspace to estimate (default: the policy's backend,
    else the largest over the backends that implement each algorithm).
    """
    if not isinstance(problem, ConvProblem):
        raise InvalidProblemError("problem", type(problem).__name__, "expected a ConvProblem")
    loaded = as_rules(rules)
    chosen = policy if not isinstance(policy, str) else get_policy(policy, **options)
    resolved = resolve_target(target, loaded)
    sel = chosen.choose(problem, resolved, loaded)
    if max_workspace_bytes is None:
        return sel
    backend = workspace_backend or getattr(chosen, "backend", None)
    return limit_workspace(sel, problem, resolved, loaded, max_workspace_bytes, backend,
                           _measured_ranking(sel, problem, loaded))


def _measured_ranking(sel: Selection, p: ConvProblem,
                      rules: Rules) -> list[tuple[str, dict[str, Any]]]:
    """The measured candidates of ``sel``, fastest first, as (algorithm, params)."""
    timings = dict((sel.measurement or {}).get("timings") or {})
    timed = sorted((t["median_ms"], label) for label, t in timings.items() if "median_ms" in t)
    by_label = {algorithms.label_of(a, params): (a, params)
                for a in algorithms.ALGORITHMS if algorithms.supports(a, p, rules).ok
                for params in algorithms.variants(a, p, rules)}
    return [(by_label[label][0], dict(by_label[label][1])) for _, label in timed
            if label in by_label]


__all__ = ["POLICIES", "AclPolicy", "Policy", "choose", "get_policy"]
