"""A plan over backends: each node's backend, the answer it runs there, and the switches.

:mod:`convsel.onnx.placement` decides where (ArmNN's first supported, or the least total
time); this module asks the policy what each backend would run and writes the outcome into
the plan's nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..backends import DEVICE_RESIDENT, Placement, Preference
from ..backends.transfer import TransferCost
from ..policies import Policy
from ..policies.across import (
    AcrossPolicy,
    Estimate,
    answer_for,
    input_bytes,
    measured_transfer,
    output_bytes,
)
from ..rules import Rules
from ..targets import Target
from ..verdict import TraceStep
from .nodes import NodePlan
from .placement import Costs, Flow, Placed, fastest, first_supported, switches


def place(nodes: Sequence[NodePlan], order: Preference, device: Any, policy: Policy,
          target: Target, rules: Rules, flow: Flow) -> tuple[tuple[NodePlan, ...],
                                                             dict[str, Any]]:
    """``nodes`` placed on ``order``'s backends, and the placement's model-level facts."""
    spaces = {str(e): e.space(device) for e in _order_for(order)}
    if isinstance(policy, AcrossPolicy):
        placed, transfers, how = _fastest(nodes, policy, target, rules, flow, spaces)
    else:
        placed, how = _first(nodes, order, device), _FIRST
        transfers = _measured_links(placed, order, device, spaces)
    chosen = [n.backend for n in placed]
    moves = switches(chosen, flow, spaces, [input_bytes(n.problem) for n in placed],
                     [output_bytes(n.problem) for n in placed], transfers)
    placed = [dataclasses.replace(n, copies=moves.per_node[i]) for i, n in enumerate(placed)]
    return tuple(placed), {
        "backends": [str(e) for e in order], "assignment": how, "switches": moves.count,
        "transfer_ms": None if moves.seconds is None else moves.seconds * 1e3,
        "transfers": {place: cost.to_dict() for place, cost in (transfers or {}).items()
                      if spaces[place] != "host"}}


_FIRST = "first supported: each Conv on the first backend in the list that supports it"
_FASTEST = ("fastest: each backend's timings or model, host-device copies counted where "
            "neighbouring Convs run apart, the least total time over the model")


def _measured_links(placed: Sequence[NodePlan], order: Preference, device: Any,
                    spaces: dict[str, str]) -> dict[str, TransferCost]:
    """The copy cost of each device a first-supported plan uses, measured as the fastest
    plan's are (:func:`convsel.backends.transfer.transfer_cost`): what its switches cost."""
    used = {n.backend for n in placed}
    return {str(e): measured_transfer(e.backend, e.device_or(device))
            for e in _order_for(order) if str(e) in used and spaces[str(e)] != "host"}


def _order_for(order: Preference) -> list[Placement]:
    """The backends a Conv may go to: the list, or one name and numpy behind it (where a
    single backend's call falls back)."""
    entries = list(order)
    if order.single and entries[0].backend != "numpy":
        entries.append(Placement("numpy"))
    return entries


def _first(nodes: Sequence[NodePlan], order: Preference, device: Any) -> list[NodePlan]:
    out = []
    for n in nodes:
        s = n.selection
        where: Placed = first_supported(s.algorithm, n.problem, s.params, _order_for(order),
                                        device)
        out.append(dataclasses.replace(n, backend=where.backend,
                                       passed_over=where.passed_over))
    return out


def _fastest(nodes: Sequence[NodePlan], policy: AcrossPolicy, target: Target, rules: Rules,
             flow: Flow, spaces: dict[str, str]
             ) -> tuple[list[NodePlan], dict[str, TransferCost], str]:
    estimates = [policy.estimates(n.problem, target, rules) for n in nodes]
    transfers = {e.place: e.transfer for e in estimates[0]}
    costs = [Costs(_kernels(n, ests, policy, spaces), input_bytes(n.problem),
                   output_bytes(n.problem)) for n, ests in zip(nodes, estimates, strict=True)]
    chosen = fastest(costs, flow, spaces, transfers)
    out = []
    for n, ests, cost, where in zip(nodes, estimates, costs, chosen, strict=True):
        e = next(x for x in ests if x.place == where)
        others = [_why_not(x, n, cost) for x in ests if x.place != where]
        step = TraceStep("placement.fastest", True, _why(e, n, cost))
        sel = answer_for(e, n.problem, ests, (step,))
        out.append(dataclasses.replace(n, selection=sel, backend=where,
                                       passed_over=tuple(others)))
    return out, transfers, _FASTEST


def _kernels(n: NodePlan, estimates: list[Estimate], policy: AcrossPolicy,
             spaces: dict[str, str]) -> dict[str, float]:
    """Each backend's own time for ``n``: those with a figure, else (none has one) the first
    that supports the rules' answer, at no cost (nothing to weigh but the copies)."""
    known = {e.place: k for e in estimates if (k := e.kernel_s(n.problem)) is not None}
    if known:
        return known
    order = [Placement(e.backend, _index(e.place)) for e in estimates]
    device = next((getattr(p, "device", None) for _, p in policy.per_backend), None)
    s = n.selection
    where = first_supported(s.algorithm, n.problem, s.params, order, device)
    return {where.backend or estimates[0].place: 0.0}


def _index(place: str) -> int | None:
    _, colon, index = place.partition(":")
    return int(index) if colon else None


def _why(e: Estimate, n: NodePlan, cost: Costs) -> str:
    if e.place not in cost.kernel_s or e.compute_s is None:
        return (f"{e.place}: no backend has a timing or a model of this Conv; the first that "
                "supports the rules' answer")
    where = "host memory" if not DEVICE_RESIDENT[e.backend] else "device memory"
    return (f"{e.place} {e.label} {cost.kernel_s[e.place] * 1e3:.3g} ms ({e.how}, in "
            f"{where}): part of the model's least total time")


def _why_not(x: Estimate, n: NodePlan, cost: Costs) -> str:
    if x.place not in cost.kernel_s:
        return f"{x.place}: not compared ({x.how})"
    return (f"{x.place}: {x.label} {cost.kernel_s[x.place] * 1e3:.3g} ms ({x.how}); the "
            "model's total is less elsewhere, copies included")
