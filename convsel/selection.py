"""select(): which conv2d method ACL would choose for a problem on a target, and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple

from . import algorithms, arguments
from .acl import cpu as acl_cpu
from .acl import gpu as acl_gpu
from .errors import WorkspaceLimitError
from .problem import ConvProblem
from .rules import METHODS, Rules, as_rules
from .targets import Target, resolve_target
from .verdict import Decision, Trace, TraceStep


class Candidate(NamedTuple):
    """One ACL method with its validate() verdict on the target, and the convsel algorithm
    that would run it."""

    method: str
    algorithm: str
    valid: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "algorithm": self.algorithm, "valid": self.valid,
                "reason": self.reason}


@dataclass(frozen=True)
class Selection:
    """The answer of :func:`select`.

    ``method`` is ACL's ConvolutionMethod name, ``algorithm`` the convsel implementation that
    runs it, ``rule`` the id of the rule that decided, ``trace`` every rule in evaluation order
    and ``candidates`` every method's validate() verdict. ``params`` carries choices such as
    the Winograd output tile. ``source`` is "rules" or "tuning-db". ``backend`` names where
    it runs when the policy chose among several backends (``"opencl"``, ``"opencl:1"``);
    None when the caller's one backend runs it.
    """

    method: str
    algorithm: str
    rule: str
    target: str
    trace: tuple[TraceStep, ...]
    candidates: tuple[Candidate, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    policy: str = "acl"
    source: str = "rules"
    rules_version: str = ""
    rules_digest: str = ""
    fallback: str | None = None      # why the algorithm differs from the method's own, if it does
    measurement: Mapping[str, Any] | None = None
    backend: str | None = None

    @property
    def reason(self) -> str:
        """The deciding rule's reason."""
        return next((s.reason for s in reversed(self.trace) if s.fired), "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "algorithm": self.algorithm, "backend": self.backend,
            "rule": self.rule,
            "reason": self.reason, "target": self.target, "policy": self.policy,
            "source": self.source,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()},
            "fallback": self.fallback, "measurement": dict(self.measurement or {}) or None,
            "trace": [s.to_dict() for s in self.trace],
            "candidates": [c.to_dict() for c in self.candidates],
            "rules": {"version": self.rules_version, "digest": self.rules_digest},
        }

    def explain(self) -> str:
        """Readable text: the answer, then each rule and each candidate."""
        lines = [f"method     {self.method}", f"algorithm  {self.algorithm}"
                 + (f"  ({', '.join(f'{k}={v}' for k, v in self.params.items())})"
                    if self.params else "")
                 + (f"  on {self.backend}" if self.backend else ""),
                 f"target     {self.target}   policy {self.policy} ({self.source})",
                 f"decided by {self.rule}: {self.reason}"]
        if self.fallback:
            lines.append(f"fallback   {self.fallback}")
        lines.append("trace:")
        lines += [f"  {'*' if s.fired else '-'} {s.id:<32} {s.reason}" for s in self.trace]
        lines.append("candidates:")
        lines += [f"  {'ok ' if c.valid else 'no '} {c.method:<12} {c.algorithm:<14} {c.reason}"
                  for c in self.candidates]
        lines.append(f"rules      {self.rules_version} ({self.rules_digest})")
        return "\n".join(lines)


def select(problem: ConvProblem, target: str | Target = "cpu", *,
           rules: Rules | str | None = None, max_workspace_bytes: int | None = None,
           backend: str | None = None) -> Selection:
    """Return the conv2d method ACL would choose for ``problem`` on ``target``, with reasons.

    Parameters
    ----------
    problem : ConvProblem
    target : str
        ``"cpu"``, ``"cpu-nofp16"``, a Mali model (``"G77"``), a family (``"VALHALL"``) or a
        Mali device name (``"Mali-G78AE r0p1"``); case-insensitive.
    rules : Rules or path, optional
        Rule data; defaults to ``$CONVSEL_HEURISTICS`` or the packaged heuristics.yaml.
    max_workspace_bytes : int, optional
        Run nothing whose workspace (the registry's estimate) is larger: ACL's choice if it
        fits, else the first that fits in :func:`workspace_order`; the trace names each one
        excluded with its workspace. :class:`~convsel.errors.WorkspaceLimitError` (an
        :class:`UnsupportedError`) when nothing fits.
    backend : str, optional
        Whose workspace to estimate; by default the largest over the backends that
        implement the algorithm (a bound that holds wherever it runs).

    Pure: values in, a Selection out; no arrays, no devices, no tuning data. Other policies
    (measured, predicted) build on this in :mod:`convsel.policies`.

    Raises
    ------
    InvalidProblemError
        Not a ConvProblem, an unknown target or backend, a limit that is not an integer
        >= 0. A valid problem that no method supports is not an error: the answer is the
        fallback, with the reasons.
    """
    problem = arguments.problem(problem)
    max_workspace_bytes = arguments.workspace_limit(max_workspace_bytes)
    backend = None if backend is None else arguments.backend(backend)
    loaded = as_rules(rules)
    resolved = resolve_target(target, loaded)
    return limit_workspace(acl_selection(problem, resolved, loaded), problem, resolved, loaded,
                           max_workspace_bytes, backend)


@lru_cache(maxsize=4096)
def acl_selection(problem: ConvProblem, target: Target, rules: Rules) -> Selection:
    """ACL's answer, as :func:`select` gives it without a workspace limit, for arguments
    already checked and resolved: what the policies build on (cached: it is pure)."""
    trace = Trace()
    heuristic = acl_gpu if target.is_gpu else acl_cpu
    verdicts = heuristic.candidates(problem, target, rules)
    decision = _grouped(problem, rules, trace) or heuristic.get_convolution_method(
        problem, target, rules, verdicts, trace)
    candidates = tuple(Candidate(m, algorithms.algorithm_for(m, problem), verdicts[m].ok,
                                 verdicts[m].reason) for m in METHODS)
    algorithm, params, fallback = _runnable(decision, problem, rules)
    return Selection(method=decision.method, algorithm=algorithm, rule=decision.rule,
                     target=target.name, trace=tuple(trace), candidates=candidates,
                     params=params, rules_version=rules.version, rules_digest=rules.digest,
                     fallback=fallback)


def workspace_order(p: ConvProblem, rules: Rules, selection: Selection,
                    ranked: Sequence[tuple[str, Mapping[str, Any]]] = ()
                    ) -> list[tuple[str, dict[str, Any]]]:
    """The order in which a workspace limit tries (algorithm, params): the selection's own
    answer; then ``ranked`` (a policy's preference, such as measured times, fastest first);
    then each algorithm whose ACL method validated, then every other algorithm that can run
    the problem, both in the registry's timing order (likely-fast first), each with its
    variants (every Winograd tile the rules pair with the kernel). ``direct`` needs one small
    band of output as workspace, so it usually ends the search."""
    valid = {c.algorithm for c in selection.candidates if c.valid}
    order: list[tuple[str, dict[str, Any]]] = [(selection.algorithm, dict(selection.params))]
    order += [(a, dict(params)) for a, params in ranked]
    for acl_valid in (True, False):
        for alg in algorithms.TIMING_ORDER:
            if (alg in valid) != acl_valid or not algorithms.supports(alg, p, rules).ok:
                continue
            for params in algorithms.variants(alg, p, rules):
                order.append((alg, {**params, **algorithms.supports(alg, p, rules,
                                                                    params).params}))
    unique: list[tuple[str, dict[str, Any]]] = []
    for item in order:
        if item not in unique:
            unique.append(item)
    return unique


def limit_workspace(sel: Selection, p: ConvProblem, target: Target, rules: Rules,
                    max_workspace_bytes: int | None,
                    backend: str | None = None,
                    ranked: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Selection:
    """``sel`` if its workspace fits ``max_workspace_bytes`` (or there is no limit), else the
    first (algorithm, params) of :func:`workspace_order` that fits, with the trace saying
    which were excluded and why. Raises WorkspaceLimitError when none fits. The arguments are
    the checked ones of an entry point (:func:`select`, :func:`convsel.choose`)."""
    if max_workspace_bytes is None:
        return sel
    steps: list[TraceStep] = []
    for alg, params in workspace_order(p, rules, sel, ranked):
        fit = workspace_fit(alg, p, params, backend, max_workspace_bytes)
        label = algorithms.label_of(alg, params)
        if fit.ok:
            assert fit.needed is not None
            return _fitted(sel, target, alg, params, label, fit.needed, max_workspace_bytes,
                           steps)
        steps.append(TraceStep("workspace.excluded", False, f"{label}: {fit.why}"))
    listed = "; ".join(s.reason for s in steps)
    raise WorkspaceLimitError(f"no algorithm runs {p} within max_workspace_bytes="
                              f"{max_workspace_bytes} ({listed})", limit=max_workspace_bytes)


class WorkspaceFit(NamedTuple):
    """Whether a variant's workspace on a backend fits a limit: ``needed`` bytes (None: no
    estimate, or not on that backend) and, when it does not fit, ``why``."""

    ok: bool
    needed: int | None
    why: str


def workspace_fit(algorithm: str, p: ConvProblem, params: Mapping[str, Any],
                  backend: str | None, max_workspace_bytes: int) -> WorkspaceFit:
    """The one judgement of a workspace limit: the registry's estimate for ``backend`` (None:
    the largest over the backends that implement the algorithm) against the limit."""
    spec = algorithms.spec(algorithm)
    if backend is not None and backend not in spec.backends:
        return WorkspaceFit(False, None, f"not implemented on the {backend} backend")
    need = spec.workspace_bytes(p, params, backend)
    if need is None:
        return WorkspaceFit(False, None, "the registry has no workspace estimate for it, so a "
                                         "limit excludes it")
    if need > max_workspace_bytes:
        return WorkspaceFit(False, need, f"needs {_size(need)} of workspace, over the limit of "
                                         f"{_size(max_workspace_bytes)}")
    return WorkspaceFit(True, need, "")


def require_workspace(algorithm: str, p: ConvProblem, params: Mapping[str, Any],
                      backend: str, max_workspace_bytes: int | None) -> None:
    """Refuse to build ``algorithm`` on ``backend`` when its workspace does not fit the limit
    (a named algorithm, or what a fallback would build): WorkspaceLimitError."""
    if max_workspace_bytes is None:
        return
    fit = workspace_fit(algorithm, p, params, backend, max_workspace_bytes)
    if not fit.ok:
        label = algorithms.label_of(algorithm, params)
        raise WorkspaceLimitError(f"{label} on {backend}: {fit.why} (max_workspace_bytes="
                                  f"{max_workspace_bytes})", limit=max_workspace_bytes,
                                  needed=fit.needed, algorithm=algorithm, backend=backend)


def _fitted(sel: Selection, target: Target, alg: str, params: dict[str, Any], label: str,
            need: int, max_workspace_bytes: int, steps: list[TraceStep]) -> Selection:
    if not steps:   # the answer fits: say so, change nothing else
        note = TraceStep("workspace.fits", False, f"{label} needs {_size(need)} of workspace, "
                         f"within the limit of {_size(max_workspace_bytes)}")
        return replace(sel, trace=(*sel.trace, note))
    chosen = TraceStep("workspace.limit", True,
                       f"{label} is the first in the workspace order that fits: needs "
                       f"{_size(need)}, limit {_size(max_workspace_bytes)}")
    first = algorithms.label_of(sel.algorithm, sel.params)
    return replace(sel, algorithm=alg, params=params,
                   method=algorithms.method_for(alg, target.is_gpu), rule="workspace.limit",
                   fallback=f"{first} needs more workspace than the limit "
                            f"({_size(max_workspace_bytes)}); running {label} instead",
                   trace=(*sel.trace, *steps, chosen))


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        nbytes /= 1024  # type: ignore[assignment]
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.3g} {unit}"
    return ""


def _grouped(p: ConvProblem, rules: Rules, trace: Trace) -> Decision | None:
    """convsel's extension: ACL's Conv2d rejects groups != 1, convsel still runs them."""
    if p.groups == 1:
        return None
    kind = "depthwise" if p.is_depthwise else "grouped"
    choice = rules.convsel.grouped.depthwise if p.is_depthwise else rules.convsel.grouped.other
    trace.rule("convsel.grouped", True,
               f"groups={p.groups} ({kind}): ACL's Conv2d has no groups (CpuConv2d/ClConv2d "
               f"validate() reject groups != 1; ACL runs these as a depthwise layer or split "
               f"per group); convsel runs it as {choice.method} "
               f"({algorithms.algorithm_for(choice.method, p)}), which handles groups")
    return Decision(choice.method, "convsel.grouped")


def _runnable(decision: Decision, p: ConvProblem,
              rules: Rules) -> tuple[str, dict[str, Any], str | None]:
    """The algorithm for the decided method, or the documented fallback if it cannot run it."""
    algorithm = algorithms.algorithm_for(decision.method, p)
    verdict = algorithms.supports(algorithm, p, rules, decision.params)
    if verdict.ok:
        return algorithm, {**decision.params, **verdict.params}, None
    why = (f"{algorithm} cannot run this problem ({verdict.reason}); "
           f"running {algorithms.FALLBACK_ALGORITHM} instead")
    return algorithms.FALLBACK_ALGORITHM, {}, why
