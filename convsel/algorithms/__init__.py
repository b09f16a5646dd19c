"""convsel's algorithms: ids, ACL method names, hard constraints, variants and workspace
estimates, all derived from the one table in :mod:`convsel.algorithms.registry`, which lists
one home module per algorithm. Pure: no arrays, no devices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..problem import ConvProblem
from ..rules import Rules
from ..verdict import Verdict, failed
from .gemm_1x1 import is_plain_1x1
from .registry import REGISTRY
from .spec import AlgorithmSpec
from .winograd import winograd_tiles

SPECS: dict[str, AlgorithmSpec] = {s.id: s for s in REGISTRY}
ALGORITHMS: tuple[str, ...] = tuple(SPECS)
TIMING_ORDER: tuple[str, ...] = tuple(sorted(ALGORITHMS, key=lambda a: SPECS[a].timing_rank))
METHOD_ALGORITHMS: dict[str, tuple[str, ...]] = {}
for _spec in REGISTRY:
    for _method in dict.fromkeys((_spec.cpu_method, _spec.gpu_method)):
        METHOD_ALGORITHMS.setdefault(_method, ())
        METHOD_ALGORITHMS[_method] += (_spec.id,)

FALLBACK_ALGORITHM = "im2col_gemm"   # supports every valid problem

__all__ = ["ALGORITHMS", "FALLBACK_ALGORITHM", "METHOD_ALGORITHMS", "SPECS", "TIMING_ORDER",
           "AlgorithmSpec", "algorithm_for", "dominated", "is_plain_1x1", "label_of",
           "method_for", "spec", "supports", "variants", "winograd_tiles", "workspace_bytes"]


def spec(algorithm: str) -> AlgorithmSpec:
    """The registry entry of ``algorithm``; KeyError names the known ones."""
    try:
        return SPECS[algorithm]
    except KeyError:
        raise KeyError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")


def method_for(algorithm: str, gpu: bool) -> str:
    """ACL's name for the method an algorithm implements on that side."""
    s = spec(algorithm)
    return s.gpu_method if gpu else s.cpu_method


def algorithm_for(method: str, p: ConvProblem) -> str:
    """The implementation that runs an ACL method on this problem."""
    names = METHOD_ALGORITHMS[method]
    for name in names[:-1]:   # the last runs it when no other does (asked per candidate)
        if SPECS[name].acl_pick(p):
            return name
    return names[-1]


def supports(algorithm: str, p: ConvProblem, rules: Rules,
             params: Mapping[str, Any] | None = None) -> Verdict:
    """Whether ``algorithm`` can compute ``p`` (any backend), with the reason; ``params``
    of the verdict are the parameters resolved for ``p``."""
    s = SPECS.get(algorithm)
    if s is None:
        return failed(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return s.supports(p, rules, params or {})


def variants(algorithm: str, p: ConvProblem, rules: Rules) -> list[dict[str, Any]]:
    """The parameter sets of ``algorithm`` worth timing on ``p`` (``[{}]`` when it has none)."""
    return spec(algorithm).variants(p, rules)


def workspace_bytes(algorithm: str, p: ConvProblem, params: Mapping[str, Any] | None = None,
                    backend: str | None = None) -> int | None:
    """The workspace ``algorithm`` needs for ``p`` with resolved ``params`` on ``backend``
    (None: the largest over its backends), from the registry's pure estimate; None when the
    registry has no estimate for it."""
    return spec(algorithm).workspace_bytes(p, params or {}, backend)


def dominated(algorithm: str, p: ConvProblem) -> Verdict:
    """Fails when ``algorithm`` provably cannot win on ``p`` (so tuning need not time it),
    with the reason."""
    return spec(algorithm).dominated(p)


def label_of(algorithm: str, params: Mapping[str, Any] | None = None) -> str:
    """A variant's name in timings and the database: ``"winograd:4x4"`` for one parameter,
    ``"alg:a=1,b=2x2"`` for several, the bare id for none."""
    if not params:
        return algorithm
    values = {k: _text(v) for k, v in sorted(params.items())}
    if len(values) == 1:
        return f"{algorithm}:{next(iter(values.values()))}"
    return f"{algorithm}:" + ",".join(f"{k}={v}" for k, v in values.items())


def _text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)
