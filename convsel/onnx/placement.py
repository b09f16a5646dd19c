"""Which backend runs each Conv of a model, and how often tensors cross between host and device.

convsel runs only the Convs (with their fused activations): every other op's tensors, the
model's inputs and its outputs are taken to live on the host. A Conv on a device-resident
backend (OpenCL) therefore copies its input in unless the Conv before it ran on the same
device, and copies its output out if anything convsel does not run reads it, or a Conv on
another backend does: each such copy is a host↔device *switch*.

Two ways to assign, as the policy allows:

- :func:`first_supported` is ArmNN's ``Optimize(..., backendPreferences)``: each Conv goes
  to the first backend in the list that supports its algorithm, the others passed over with
  the reason;
- :func:`fastest` (the measured and predicted policies) takes each backend's timing or
  prediction of each Conv (:mod:`convsel.policies.across`) and minimises the model's total:
  the Convs' own times plus every copy, by dynamic programming over the data flow. Each Conv
  reads one tensor, so the Convs that feed each other form a forest, on which this is exact.
  A Conv no backend has a figure for goes to the first backend that supports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Placement, supports_on
from ..backends.transfer import TransferCost


@dataclass(frozen=True)
class Flow:
    """The data flow between the planned Convs, by their position in the plan: the Conv each
    reads its input from (None: a tensor convsel does not compute), the Convs reading each
    one's output, and whether anything else reads that output (or the model returns it)."""

    parent: tuple[int | None, ...]
    children: tuple[tuple[int, ...], ...]
    to_host: tuple[bool, ...]


def data_flow(inputs: Sequence[str], produced: Sequence[str],
              consumers: Mapping[str, Sequence[str]], outputs: set[str]) -> Flow:
    """The :class:`Flow` of Convs reading ``inputs[i]`` and producing ``produced[i]`` (after
    any fused activation); ``consumers`` lists the nodes reading each tensor by name,
    ``outputs`` the graph's outputs. A Conv's own name is its key in ``consumers``' lists."""
    producer = {tensor: i for i, tensor in enumerate(produced)}
    parent = tuple(producer.get(x) for x in inputs)
    children = tuple(tuple(j for j, p in enumerate(parent) if p == i)
                     for i in range(len(produced)))
    to_host = tuple(
        produced[i] in outputs or len(consumers.get(produced[i], ())) > len(children[i])
        for i in range(len(produced)))
    return Flow(parent, children, to_host)


@dataclass(frozen=True)
class Placed:
    """Where one Conv runs (None: no backend of the list supports it) and the backends
    passed over for it, with why."""

    backend: str | None
    passed_over: tuple[str, ...]


def first_supported(algorithm: str, problem: Any, params: Mapping[str, Any],
                    order: Sequence[Placement], device: Any) -> Placed:
    """ArmNN's assignment: the first backend of ``order`` whose support check accepts."""
    passed: list[str] = []
    for entry in order:
        verdict = supports_on(algorithm, problem, params, entry.backend, entry.device_or(device))
        if verdict.ok:
            return Placed(str(entry), tuple(passed))
        passed.append(f"not supported by backend {entry}: {verdict.reason}")
    return Placed(None, tuple(passed))


@dataclass(frozen=True)
class Costs:
    """What :func:`fastest` weighs for one Conv: each allowed backend's own time (seconds),
    the bytes it reads and writes, and each backend's copy cost."""

    kernel_s: Mapping[str, float]
    in_bytes: int
    out_bytes: int


def fastest(costs: Sequence[Costs], flow: Flow, spaces: Mapping[str, str],
            transfers: Mapping[str, TransferCost]) -> list[str]:
    """The backend of each Conv that minimises the model's time: each Conv's ``kernel_s`` on
    its backend plus every host↔device copy the assignment makes (``spaces`` names each
    backend's memory, "host" for numpy; ``transfers`` each backend's copy cost). Between
    equal totals the earlier backend of each Conv's ``kernel_s`` wins."""
    def copy(place: str, nbytes: int) -> float:
        return 0.0 if spaces[place] == "host" else transfers[place].seconds(nbytes)

    n = len(costs)
    best: list[dict[str, float]] = [{} for _ in range(n)]   # subtree cost given placement
    mode: list[dict[str, bool]] = [{} for _ in range(n)]    # True: children may leave
    for v in reversed(range(n)):        # children come after their parent in graph order
        for place, kernel in costs[v].kernel_s.items():
            same = sum(_best_child(c, place, best, spaces, copy, costs, same_space=True)[1]
                       for c in flow.children[v])
            free = sum(_best_child(c, place, best, spaces, copy, costs, same_space=False)[1]
                       for c in flow.children[v])
            out = copy(place, costs[v].out_bytes)
            if spaces[place] == "host":
                total, leave = free, True
            elif flow.to_host[v]:
                total, leave = out + free, True
            else:
                total, leave = min((same, False), (out + free, True))
            best[v][place], mode[v][place] = kernel + total, leave
    chosen: list[str] = [""] * n
    for v in range(n):
        parent = flow.parent[v]
        if parent is None:
            chosen[v] = min(costs[v].kernel_s, key=lambda b: best[v][b] + copy(
                b, costs[v].in_bytes))
        else:
            chosen[v] = _best_child(v, chosen[parent], best, spaces, copy, costs,
                                    same_space=not mode[parent][chosen[parent]])[0]
    return chosen


def _best_child(c: int, parent_place: str, best: list[dict[str, float]],
                spaces: Mapping[str, str], copy: Any, costs: Sequence[Costs], *,
                same_space: bool) -> tuple[str, float]:
    """The best backend for Conv ``c`` reading from ``parent_place``, and its cost with the
    copy in (the parent's copy out is the parent's to count): in the parent's memory only,
    or anywhere. A child that cannot stay in that memory costs infinity there."""
    options = []
    for place in costs[c].kernel_s:
        stays = spaces[place] == spaces[parent_place]
        if same_space and not stays:
            continue
        options.append((place, best[c][place] + (0.0 if stays else copy(
            place, costs[c].in_bytes))))
    if not options:
        return parent_place, float("inf")
    return min(options, key=lambda o: o[1])


@dataclass(frozen=True)
class Switches:
    """The copies an assignment makes: how many, their estimated time (None where a copy
    cost is unknown) and, per Conv, its copies in and out."""

    count: int
    seconds: float | None
    per_node: tuple[tuple[bool, bool], ...]


def switches(chosen: Sequence[str | None], flow: Flow, spaces: Mapping[str, str],
             in_bytes: Sequence[int], out_bytes: Sequence[int],
             transfers: Mapping[str, TransferCost] | None = None) -> Switches:
    """Count the host↔device copies of an assignment (a Conv no backend runs stays on the
    host): one into a device Conv whose input is elsewhere, one out of a device Conv whose
    output anything elsewhere reads."""
    def space(v: int | None) -> str:
        place = None if v is None else chosen[v]
        return "host" if place is None else spaces[place]

    per_node, count, seconds = [], 0, 0.0
    for v, place in enumerate(chosen):
        here = space(v)
        copy_in = here != "host" and space(flow.parent[v]) != here
        copy_out = here != "host" and (flow.to_host[v] or any(
            space(c) != here for c in flow.children[v]))
        per_node.append((copy_in, copy_out))
        count += copy_in + copy_out
        if transfers is not None and place is not None and here != "host":
            cost = transfers.get(place)
            seconds = seconds + (cost.seconds(in_bytes[v]) * copy_in
                                 + cost.seconds(out_bytes[v]) * copy_out
                                 if cost is not None else float("nan"))
    known = transfers is not None and seconds == seconds   # nan: a cost unknown
    return Switches(count, seconds if known else None, tuple(per_node))
