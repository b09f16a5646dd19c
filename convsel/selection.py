"""select(): which conv2d method ACL would choose for a problem on a target, and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from . import algorithms
from .acl import cpu as acl_cpu
from .acl import gpu as acl_gpu
from .errors import InvalidProblemError
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
    the Winograd output tile. ``source`` is "rules" or "tuning-db".
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

    @property
    def reason(self) -> str:
        """The deciding rule's reason."""
        return next((s.reason for s in reversed(self.trace) if s.fired), "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method, "algorithm": self.algorithm, "rule": self.rule,
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
                    if self.params else ""),
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
           rules: Rules | str | None = None) -> Selection:
    """Return the conv2d method ACL would choose for ``problem`` on ``target``, with reasons.

    Parameters
    ----------
    problem : ConvProblem
    target : str
        ``"cpu"``, ``"cpu-nofp16"``, a Mali model (``"G77"``), a family (``"VALHALL"``) or a
        Mali device name (``"Mali-G78AE r0p1"``); case-insensitive.
    rules : Rules or path, optional
        Rule data; defaults to ``$CONVSEL_HEURISTICS`` or the packaged heuristics.yaml.

    Pure: values in, a Selection out; no arrays, no devices, no tuning data. Other policies
    (measured, predicted) build on this in :mod:`convsel.policies`.

    Raises
    ------
    InvalidProblemError
        Unknown target. A valid problem that no method supports is not an error:
        the answer is the fallback, with the reasons.
    """
    if not isinstance(problem, ConvProblem):
        raise InvalidProblemError("problem", type(problem).__name__, "expected a ConvProblem")
    loaded = as_rules(rules)
    return _select_acl(problem, resolve_target(target, loaded), loaded)


@lru_cache(maxsize=4096)
def _select_acl(p: ConvProblem, target: Target, rules: Rules) -> Selection:
    trace = Trace()
    heuristic = acl_gpu if target.is_gpu else acl_cpu
    verdicts = heuristic.candidates(p, target, rules)
    decision = _grouped(p, rules, trace) or heuristic.get_convolution_method(
        p, target, rules, verdicts, trace)
    candidates = tuple(Candidate(m, algorithms.algorithm_for(m, p), verdicts[m].ok,
                                 verdicts[m].reason) for m in METHODS)
    algorithm, params, fallback = _runnable(decision, p, rules)
    return Selection(method=decision.method, algorithm=algorithm, rule=decision.rule,
                     target=target.name, trace=tuple(trace), candidates=candidates,
                     params=params, rules_version=rules.version, rules_digest=rules.digest,
                     fallback=fallback)


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
