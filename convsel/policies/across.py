"""The fastest backend per layer: one policy per backend, composed.

Given several backends (``backend=["numpy", "opencl"]`` or ``"auto"``), the measured and the
predicted policy are asked once per backend, each with that backend's own timings or fitted
model, and their answers compared: the candidate is (backend, algorithm, variant). A device
backend's figure leaves out the copies of the layer's input and output between host and
device (tuning times OpenCL kernels on device-resident data), so they are added from the
device's measured copy cost (:mod:`convsel.backends.transfer`) where a call would make them:
for one layer, a call on host arrays makes both; in a whole model the planner counts them
only where a neighbouring layer runs elsewhere (:mod:`convsel.onnx.placement`).

A backend that has neither a timing nor a model for the problem cannot be compared: the
answer comes from those that can, and the trace says which could not and why. When none can,
the rules' answer runs on the first backend, in the order given, that supports it.
:func:`convsel.policies.get_policy` builds this policy when a backend argument names more
than one backend; each backend's own policy knows nothing of the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import algorithms, backends
from ..backends.transfer import TransferCost, transfer_cost
from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection
from ..targets import Target
from ..verdict import TraceStep

# Two backends whose costs are closer than this fraction of the faster are not told apart
# (the tuning's noise floor): the order of preference decides between them.
CLOSE = 0.03


@dataclass(frozen=True)
class Estimate:
    """One backend's answer for one layer and what running it there costs.

    ``compute_s`` is the measured median (or the model's prediction) of the backend's pick;
    None when it has neither, ``how`` says why. ``with_copies`` when that figure already holds
    the host↔device copies (a device timed by the host's clock on host arrays).
    """

    place: str
    backend: str
    selection: Selection
    compute_s: float | None
    with_copies: bool
    transfer: TransferCost
    how: str

    @property
    def resident(self) -> bool:
        return backends.DEVICE_RESIDENT[self.backend]

    def copy_s(self, nbytes: int) -> float:
        """One copy of ``nbytes`` between host and this backend's memory (0 on the host)."""
        return self.transfer.seconds(nbytes) if self.resident else 0.0

    def kernel_s(self, p: ConvProblem) -> float | None:
        """The layer's own cost here, the copies taken out where the figure held them."""
        if self.compute_s is None:
            return None
        if not self.with_copies:
            return self.compute_s
        return max(self.compute_s - self.copy_s(input_bytes(p)) - self.copy_s(output_bytes(p)),
                   0.0)

    def host_call_s(self, p: ConvProblem) -> float | None:
        """The layer called alone on host arrays: its kernel, the input copied in and the
        output copied out."""
        kernel = self.kernel_s(p)
        if kernel is None:
            return None
        return kernel + self.copy_s(input_bytes(p)) + self.copy_s(output_bytes(p))

    @property
    def label(self) -> str:
        return algorithms.label_of(self.selection.algorithm, self.selection.params)

    def to_dict(self, p: ConvProblem) -> dict[str, Any]:
        kernel, call = self.kernel_s(p), self.host_call_s(p)
        return {"backend": self.place, "label": self.label,
                "algorithm": self.selection.algorithm, "source": self.selection.source,
                "kernel_ms": None if kernel is None else kernel * 1e3,
                "copies_ms": (self.copy_s(input_bytes(p)) + self.copy_s(output_bytes(p))) * 1e3,
                "host_call_ms": None if call is None else call * 1e3,
                "transfer": self.transfer.to_dict(), "how": self.how}


def input_bytes(p: ConvProblem) -> int:
    return p.n * p.h * p.w * p.c * _itemsize(p)


def output_bytes(p: ConvProblem) -> int:
    n, *rest = p.output_shape
    size = n
    for d in rest:
        size *= d
    return size * _itemsize(p)


def _itemsize(p: ConvProblem) -> int:
    return 2 if p.dtype == "F16" else 4


@dataclass(frozen=True)
class AcrossPolicy:
    """The measured or predicted policy over several backends: ``per_backend`` holds each
    backend's own policy, in the caller's order of preference, by its placement
    (``"opencl:1"``). ``transfers`` gives a placement's copy cost instead of measuring it
    (tests; a known link)."""

    per_backend: tuple[tuple[str, Any], ...]
    transfers: tuple[tuple[str, TransferCost], ...] = ()

    @property
    def name(self) -> str:
        return str(self.per_backend[0][1].name)

    @property
    def places(self) -> tuple[str, ...]:
        return tuple(place for place, _ in self.per_backend)

    def estimates(self, problem: ConvProblem, target: Target, rules: Rules) -> list[Estimate]:
        """Each backend's answer and cost, in the order of preference."""
        given = dict(self.transfers)
        out = []
        for place, policy in self.per_backend:
            backend = str(policy.backend)
            transfer = given.get(place) or measured_transfer(
                backend, getattr(policy, "device", None))
            out.append(estimate(place, backend, policy.choose(problem, target, rules),
                                transfer))
        return out

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        return choose_across(problem, self.estimates(problem, target, rules),
                             {place: getattr(policy, "device", None)
                              for place, policy in self.per_backend})


def measured_transfer(backend: str, device: Any) -> TransferCost:
    """``backend``'s measured copy cost on ``device``, or an unknown one (a device that cannot
    be opened gives no figure, and the plan says so, rather than failing)."""
    try:
        return transfer_cost(backend, device)
    except Exception as exc:  # noqa: BLE001 - a device that cannot be opened: no copy figure
        return TransferCost(0.0, float("inf"), f"not measured: {exc}")


def estimate(place: str, backend: str, sel: Selection, transfer: TransferCost) -> Estimate:
    """What ``sel`` (the answer of ``backend``'s policy) costs, from its measurement."""
    m: Mapping[str, Any] = sel.measurement or {}
    resident = backends.DEVICE_RESIDENT[backend]
    if sel.source == "tuning-db":
        t = dict(m.get("timings") or {}).get(str(m.get("chosen")), {})
        if t.get("median_ms") is not None:
            clock = str(t.get("clock") or ("device" if resident else "wall"))
            return Estimate(place, backend, sel, float(t["median_ms"]) / 1e3,
                            resident and clock == "wall", transfer,
                            f"measured median, {clock} clock")
    if sel.source == "model":
        ranking = list(m.get("ranking") or [])
        if ranking and ranking[0].get("predicted_ms") is not None:
            model = dict(m.get("model") or {}).get("id", "?")
            return Estimate(place, backend, sel, float(ranking[0]["predicted_ms"]) / 1e3,
                            False, transfer, f"predicted by model {model}")
    why = sel.trace[-1].reason if sel.trace else "no timing or model"
    return Estimate(place, backend, sel, None, False, transfer, why)


def choose_across(p: ConvProblem, estimates: list[Estimate],
                  devices: Mapping[str, Any]) -> Selection:
    """The fastest of ``estimates`` for a call on host arrays (the order of preference
    between close ones); without any figure, the first backend that supports the rules'
    answer. The answer names the backend and says which were passed over, and why."""
    unknown = [TraceStep("across.not-compared", False, f"{e.place}: no timing or model to "
                         f"compare ({e.how})") for e in estimates if e.compute_s is None]
    known = [e for e in estimates if e.compute_s is not None]
    if not known:
        return _first_supported(p, estimates, devices, unknown)
    best = known[0]
    for e in known[1:]:
        if _cost(e, p) < _cost(best, p) * (1 - CLOSE):
            best = e
    compared = "; ".join(_line(e, p) for e in known)
    close = [e.place for e in known
             if e is not best and _cost(e, p) <= _cost(best, p) * (1 + CLOSE)]
    step = TraceStep("across.fastest", True, (
        f"fastest of {', '.join(e.place for e in known)} for a call on host arrays "
        f"(copies of x and y between host and device counted): {compared} -> {best.place}"
        + (f" (within {CLOSE:.0%} of {', '.join(close)}: the order of preference decides)"
           if close else "")))
    return answer_for(best, p, estimates, (*unknown, step))


def _cost(e: Estimate, p: ConvProblem) -> float:
    cost = e.host_call_s(p)
    assert cost is not None
    return cost


def _line(e: Estimate, p: ConvProblem) -> str:
    kernel = e.kernel_s(p) or 0.0
    copies = _cost(e, p) - kernel
    text = f"{e.place} {e.label} {kernel * 1e3:.3g} ms ({e.how})"
    return text + (f" + {copies * 1e3:.3g} ms of copies" if copies > 0 else "")


def _first_supported(p: ConvProblem, estimates: list[Estimate], devices: Mapping[str, Any],
                     unknown: list[TraceStep]) -> Selection:
    passed: list[str] = []
    for e in estimates:
        sel = e.selection
        verdict = backends.supports_on(sel.algorithm, p, sel.params, e.backend,
                                       devices.get(e.place))
        if verdict.ok:
            step = TraceStep("across.first-supported", True, (
                f"no backend has a timing or a model of this problem: the rules' answer "
                f"{e.label} runs on the first backend in the order of preference that "
                f"supports it: {e.place}" + (f" ({'; '.join(passed)})" if passed else "")))
            return answer_for(e, p, estimates, (*unknown, step))
        passed.append(f"not supported by backend {e.place}: {verdict.reason}")
    step = TraceStep("across.none-supports", False, "; ".join(passed))
    return answer_for(estimates[0], p, estimates, (*unknown, step))


def answer_for(e: Estimate, p: ConvProblem, estimates: list[Estimate],
               steps: tuple[TraceStep, ...]) -> Selection:
    """``e``'s answer on its backend, ``steps`` saying why it was chosen, every backend's
    estimate in its measurement (``backends``)."""
    fired = any(s.fired for s in steps)
    return dataclasses.replace(
        e.selection, backend=e.place, rule=steps[-1].id if fired else e.selection.rule,
        trace=(*e.selection.trace, *steps),
        measurement={**dict(e.selection.measurement or {}),
                     "backends": [x.to_dict(p) for x in estimates]})
