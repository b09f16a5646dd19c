"""What one algorithm's home states: :class:`AlgorithmSpec`, filled in by each module of
:mod:`convsel.algorithms` (``direct.py``, ``winograd.py``, ...) and listed by
:mod:`convsel.algorithms.registry`. Pure: no arrays, no devices."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, passed
from .cost import candidate_features

Constraint = Callable[[ConvProblem, Rules, Mapping[str, Any]], Verdict]
Variants = Callable[[ConvProblem, Rules], list[dict[str, Any]]]
# a pure estimate of a prepared kernel's ``workspace_bytes`` (params resolved)
Estimate = Callable[[ConvProblem, Mapping[str, Any]], int]
Features = Callable[[ConvProblem, Mapping[str, Any]], dict[str, float]]


def no_variants(p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    return [{}]


def always(p: ConvProblem) -> bool:
    return True


def never_dominated(p: ConvProblem) -> Verdict:
    return passed("not dominated")


def backend_modules(algorithm: str, *backends: str) -> dict[str, str]:
    """backend -> the module implementing ``algorithm`` there: by convention
    ``convsel.backends.<backend>.<algorithm>``."""
    return {b: f"convsel.backends.{b}.{algorithm}" for b in backends}


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything about one algorithm that is not backend code.

    ``cpu_method``/``gpu_method`` are ACL's ConvolutionMethod names for it on each side;
    ``acl_pick`` says, for a problem whose ACL method maps to several algorithms, whether
    this one runs it (checked in registry order). ``supports`` holds the hard constraints
    and resolves parameters; ``variants`` lists the parameter sets worth timing.
    ``backends`` maps a backend to the module implementing it there.

    ``workspace`` maps a backend to the pure estimate of the kernel's workspace (a backend
    missing here has no estimate, and a workspace limit then excludes it);
    ``workspace_headroom`` is the part of that estimate the kernel takes only on some
    devices (OpenCL split-K on GPUs): the estimate minus it is exact on the others.

    ``features`` is the algorithm's part of a cost model's feature row
    (:data:`convsel.algorithms.cost.CANDIDATE_FEATURES`, see
    :mod:`convsel.learn.features`); ``backend_features`` replaces it on a backend whose
    kernel does other work than ``features`` describes (:meth:`features_on`).
    ``dominated`` fails for a problem on which the algorithm provably cannot win, so that
    tuning does not time it.

    ``tolerance`` maps a dtype to the correctness bound on ``max |y - ref|`` relative to
    the largest ``Σ|x|·|w| + |bias|`` of an output (the tests' one tolerance table; never
    loosened per test). ``description``, ``colour`` (reports) and ``timing_rank`` (the
    order candidates are timed and listed in) are display data.
    """

    id: str
    description: str
    cpu_method: str
    gpu_method: str
    supports: Constraint
    backends: Mapping[str, str]
    timing_rank: int
    colour: str
    tolerance: Mapping[str, float]
    variants: Variants = no_variants
    acl_pick: Callable[[ConvProblem], bool] = always
    workspace: Mapping[str, Estimate] = field(default_factory=dict)
    workspace_headroom: Mapping[str, Estimate] = field(default_factory=dict)
    features: Features = candidate_features
    backend_features: Mapping[str, Features] = field(default_factory=dict)
    dominated: Callable[[ConvProblem], Verdict] = never_dominated

    def workspace_bytes(self, p: ConvProblem, params: Mapping[str, Any],
                        backend: str | None = None) -> int | None:
        """The workspace on ``backend``, or the largest over the backends implementing it
        (None: no estimate for that backend, or for one of them)."""
        names = [backend] if backend is not None else list(self.backends)
        if any(b not in self.workspace for b in names):
            return None
        return max(self.workspace[b](p, params) for b in names)

    def features_on(self, p: ConvProblem, params: Mapping[str, Any],
                    backend: str = "") -> dict[str, float]:
        """The algorithm's part of a feature row as ``backend``'s kernel runs it (``""``: the
        description every backend shares)."""
        return self.backend_features.get(backend, self.features)(p, params)

    def headroom_bytes(self, p: ConvProblem, params: Mapping[str, Any], backend: str) -> int:
        """The device-dependent part of the estimate on ``backend`` (0 when it has none)."""
        part = self.workspace_headroom.get(backend)
        return part(p, params) if part is not None else 0
