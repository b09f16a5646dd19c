"""Policies: who decides which algorithm runs. Each composes the pure
:func:`convsel.selection.acl_selection` (ACL's rules) with data it is handed (tuning timings,
a fitted model).

One small interface, :class:`Policy`: ``choose(problem, target, rules) -> Selection``. A
policy is a frozen dataclass whose fields are its options: :func:`get_policy` checks the
options' names against those fields and their values through :mod:`convsel.arguments`, and
nothing else lists them. ``conv2d``, ``prepare``, the ONNX planner, the CLI and the service
all ask a policy through :func:`choose` (or :func:`get_policy` for one they keep, and
:func:`decide` with arguments already checked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol

from .. import algorithms, arguments
from ..errors import InvalidProblemError
from ..problem import ConvProblem
from ..rules import Rules, as_rules
from ..selection import Selection, limit_workspace
from ..targets import Target, resolve_target
from .acl import AclPolicy

if TYPE_CHECKING:
    from ..backends import Placement
    from ..learn.stored import StoredModel


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection: ...


def _acl() -> type[Any]:
    return AclPolicy


def _measured() -> type[Any]:
    from .composed import MeasuredPolicy  # the tuning store is imported only when used

    return MeasuredPolicy


def _predicted() -> type[Any]:
    from .predicted import PredictedPolicy  # the model's learner is imported only when used

    return PredictedPolicy


# name -> the policy's class, imported when first asked for; the one list of policies
POLICIES: dict[str, Callable[[], type[Any]]] = {
    "acl": _acl,
    "measured": _measured,
    "predicted": _predicted,
}


def policy_class(name: str) -> type[Any]:
    """The class of the policy ``name``; an unknown name is the caller's error."""
    if not isinstance(name, str) or name not in POLICIES:
        raise InvalidProblemError("policy", name, f"unknown policy; known: {', '.join(POLICIES)}")
    return POLICIES[name]()


def policy_options(name: str) -> tuple[str, ...]:
    """The options the policy ``name`` takes: its class's fields, in their order."""
    return _options_of(policy_class(name))


# a class's fields do not change: read once (every choose() checks its options)
_OPTIONS: dict[type[Any], tuple[str, ...]] = {}


def _options_of(cls: type[Any]) -> tuple[str, ...]:
    found = _OPTIONS.get(cls)
    if found is None:
        found = _OPTIONS[cls] = tuple(f.name for f in fields(cls) if f.init)
    return found


class _DerivedOptions(Mapping[str, tuple[str, ...]]):
    """Each policy's options, read from its class when asked (which imports the class)."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        if not isinstance(name, str) or name not in POLICIES:
            raise KeyError(name)
        return policy_options(name)

    def __iter__(self) -> Iterator[str]:
        return iter(POLICIES)

    def __len__(self) -> int:
        return len(POLICIES)


# policy name -> the options it takes (the service and CLI pass only these)
POLICY_OPTIONS: Mapping[str, tuple[str, ...]] = _DerivedOptions()


def policies_taking(option: str) -> list[str]:
    """The policies that take ``option``: where an option given to another one belongs."""
    takers = []
    for name in POLICIES:
        try:
            if option in policy_options(name):
                takers.append(name)
        except ImportError:   # its layer cannot be imported here: it takes nothing here
            continue
    return takers


def options_for(name: str, given: Mapping[str, Any],
                defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The options to build the policy ``name`` with (None values are not options): every
    option ``given`` (one the policy does not take is refused when it is built), and each of
    ``defaults`` that the policy takes and was not given, such as the backend a caller runs
    on or a server's tuning database."""
    options = {k: v for k, v in given.items() if v is not None}
    takes = POLICY_OPTIONS.get(name, ())
    options.update({k: v for k, v in (defaults or {}).items()
                    if k in takes and k not in options and v is not None})
    return options


def get_policy(name: str, **options: Any) -> Policy:
    """The policy ``name`` with its options, each checked; an unknown name or an option the
    policy does not take is the caller's error, naming the policies that do take it."""
    cls = policy_class(name)
    takes = _options_of(cls)
    for option in sorted(options):
        if option not in takes:
            takers = policies_taking(option)
            raise InvalidProblemError(option, options[option], f"policy {name!r} takes "
                                      f"{', '.join(takes) or 'no options'}" + (
                                          f"; {option} applies to policy "
                                          f"{' or '.join(takers)}" if takers else ""))
    if "backend" not in options:
        return _built(cls, options)
    chosen = arguments.backends(options["backend"])
    device = arguments.device_beside(chosen, options.get("device"))
    rest = {k: v for k, v in options.items() if k not in ("backend", "device")}
    if chosen.single:
        return _built(cls, {**rest, **_placement(chosen.first, device)})
    from .across import AcrossPolicy  # several backends compared: only when asked

    return AcrossPolicy(tuple((str(e), _built(cls, {**rest, **_placement(e, device)}))
                              for e in chosen))


def _placement(entry: Placement, device: Any) -> dict[str, Any]:
    """The options that put a policy on ``entry``: its backend, and its device when one is
    named (by the entry's index or beside the argument)."""
    placed = entry.device_or(device)
    return {"backend": entry.backend, **({} if placed is None else {"device": placed})}


def _built(cls: type[Any], options: Mapping[str, Any]) -> Policy:
    policy: Policy = cls(**{k: arguments.check(k, v) for k, v in options.items()})
    return policy


def choose(problem: ConvProblem, target: str | Target = "cpu", *, policy: str | Policy = "acl",
           rules: Rules | str | None = None, max_workspace_bytes: int | None = None,
           workspace_backend: str | None = None, **options: Any) -> Selection:
    """What ``policy`` runs for ``problem`` on ``target``, as a :class:`Selection` with its
    reasons. ``options`` go to the policy named (its fields: ``backend``, ``device``, ``db``,
    ``tune``, ``tune_budget_s`` for "measured"; ``backend``, ``device``, ``db``, ``model`` for
    "predicted"); a policy object carries its own.

    ``max_workspace_bytes`` keeps the policy's answer if its workspace fits, else takes the
    first that fits: the measured policy's timed candidates fastest first, then the order of
    :func:`convsel.selection.workspace_order`; the trace names what was excluded and why.
    ``workspace_backend`` says whose workspace to estimate (default: the policy's backend,
    else the largest over the backends that implement each algorithm).
    """
    problem = arguments.problem(problem)
    max_workspace_bytes = arguments.workspace_limit(max_workspace_bytes)
    if workspace_backend is not None:
        workspace_backend = arguments.backend(workspace_backend)
    chosen = _policy(policy, options)
    loaded = as_rules(rules)
    return decide(problem, resolve_target(target, loaded), loaded, chosen,
                  max_workspace_bytes=max_workspace_bytes, workspace_backend=workspace_backend)


def _policy(policy: str | Policy, options: dict[str, Any]) -> Policy:
    if isinstance(policy, str) or not hasattr(policy, "choose"):
        return get_policy(policy, **options)   # type: ignore[arg-type]
    if options:
        first = sorted(options)[0]
        raise InvalidProblemError(first, options[first], f"options go with a policy's name; "
                                  f"the {policy.name!r} policy object was given its own")
    return policy


def decide(problem: ConvProblem, target: Target, rules: Rules, policy: Policy, *,
           max_workspace_bytes: int | None = None,
           workspace_backend: str | None = None) -> Selection:
    """:func:`choose` with its arguments checked and resolved (by an entry point): the
    policy's answer, within the workspace limit."""
    sel = policy.choose(problem, target, rules)
    if max_workspace_bytes is None:
        return sel
    placed = sel.backend.partition(":")[0] if sel.backend else None   # chosen among several
    backend = workspace_backend or placed or getattr(policy, "backend", None)
    return limit_workspace(sel, problem, target, rules, max_workspace_bytes, backend,
                           _measured_ranking(sel, problem, rules))


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


def stored_model(backend: str, device: Any = None,
                 db: Any = None) -> tuple[StoredModel | None, str]:
    """The fitted model that the "predicted" policy answers from on ``backend``/``device``
    with ``db`` (default: ``$CONVSEL_TUNING_DB``), or None and why there is none."""
    from .predicted import load_stored  # the model's learner is imported only when used

    return load_stored(backend, device, db)


__all__ = ["POLICIES", "POLICY_OPTIONS", "AclPolicy", "Policy", "choose", "decide",
           "get_policy", "options_for", "policies_taking", "policy_class", "policy_options",
           "stored_model"]
