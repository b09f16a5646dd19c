"""Per-node runnability and the model-level summary of a plan."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .. import algorithms, backends
from ..problem import ConvProblem
from ..rules import Rules
from .nodes import NodePlan, Runnable, Skipped


def runnable(method: str, problem: ConvProblem, rules: Rules,
             params: dict[str, Any]) -> Runnable:
    """Can any backend run ``method`` itself (not a fallback) for ``problem``?"""
    algorithm = algorithms.algorithm_for(method, problem)
    verdict = algorithms.supports(algorithm, problem, rules, params)
    names = tuple(sorted(b for (a, b) in backends.IMPLEMENTATIONS if a == algorithm))
    if not verdict.ok:
        return Runnable(False, algorithm, names, verdict.reason)
    if not names:
        return Runnable(False, algorithm, names, f"no backend implements {algorithm}")
    return Runnable(True, algorithm, names, f"{algorithm} on {', '.join(names)}")


def summarize(nodes: Sequence[NodePlan], skipped: Sequence[Skipped],
              placement: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Counts by method and algorithm, and the nodes worth a look; planned over backends,
    the count per backend and ``placement``'s host↔device switches."""
    measured = [n for n in nodes if n.time is not None]
    placed = {} if placement is None else {
        "backends": dict(Counter(n.backend or "none" for n in nodes).most_common()),
        "switches": placement["switches"], "transfer_ms": placement["transfer_ms"],
        "unplaced": [{"node": n.name, "reasons": list(n.passed_over)} for n in nodes
                     if n.backend is None]}
    return {
        "convolutions": len(nodes),
        "methods": dict(Counter(n.selection.method for n in nodes).most_common()),
        "algorithms": dict(Counter(n.selection.algorithm for n in nodes).most_common()),
        "fused_activations": sum(1 for n in nodes if n.problem.activation is not None),
        "unrunnable": [{"node": n.name, "method": n.selection.method,
                        "reason": n.runnable.reason} for n in nodes if not n.runnable.ok],
        "near_misses": [n.name for n in nodes if n.near_misses],
        "differs_from_acl": [n.name for n in nodes if n.acl is not None
                             and n.acl.algorithm != n.selection.algorithm],
        "measured": len(measured),
        "measured_ms": sum(float(n.time["median_ms"]) for n in measured
                           if n.time and n.time.get("median_ms") is not None),
        "gflops": round(sum(n.problem.flops for n in nodes) / 1e9, 6),
        "skipped": len(skipped),
        **placed,
    }
