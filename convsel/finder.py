"""find(): every algorithm and variant that could run a problem, ranked by measured time, as
cuDNN's ``cudnnFindConvolutionForwardAlgorithm`` and MIOpen's Find do.

Each entry has its status (``ok``, ``error``, ``unsupported``, ``excluded-by-workspace``,
``skipped``), the reason, the median time with its spread (IQR) and run count, and the
workspace it needs. Timing is :func:`convsel.tuning.measure.measure`'s (interleaved rounds,
pruning of hopeless candidates, the tie rule); a complete measurement can be stored in the
tuning database, where the measured policy then finds it.

Given several backends (``backend=["numpy", "opencl"]`` or ``"auto"``), every candidate of
each is timed and all are ranked together, each entry naming its backend; a device backend's
entries carry the cost of copying the input in and the output out (``transfer_s``, measured
by :mod:`convsel.backends.transfer`) where their clock left it out, and rank by that total,
what a call on host arrays costs. A backend that cannot be used here is passed over with why.

(The module is ``finder``, not ``find``: a submodule named ``find`` would replace the
function ``convsel.find`` on the package the first time it is imported.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import algorithms, arguments, backends, tables
from .backends import Preference
from .errors import KernelBuildError, TuningDatabaseError, UnsupportedError
from .problem import ConvProblem
from .rules import Rules, as_rules
from .selection import acl_selection
from .targets import Target, resolve_target
from .tuning.db import TuningDB, open_db
from .tuning.measure import WORKSPACE_EXCLUDED, Measurement, Shortlist, decide, measure
from .tuning.timing import TimingSettings

STATUSES = ("ok", "error", "excluded-by-workspace", "skipped", "unsupported")


@dataclass(frozen=True)
class FindEntry:
    """One candidate: ``label`` names it as the tuning database does (``winograd:4x4``)."""

    label: str
    algorithm: str
    params: Mapping[str, Any]
    status: str
    reason: str
    workspace_bytes: int | None = None
    median_s: float | None = None
    iqr_s: float | None = None
    min_s: float | None = None
    runs: int = 0
    pruned: bool = False
    rank: int | None = None      # 1 = fastest; None unless status is "ok"
    clock: str | None = None     # "device" (profiling events) or "wall" (host, transfers in)
    backend: str | None = None   # where it ran, when several backends were timed
    transfer_s: float | None = None   # copies in and out the clock left out (several backends)

    @property
    def cost_s(self) -> float | None:
        """What ranks it: its median, plus the copies its clock left out."""
        if self.median_s is None:
            return None
        return self.median_s + (self.transfer_s or 0.0)

    @property
    def qualified(self) -> str:
        """``backend/label`` when several backends were timed, else the label."""
        return f"{self.backend}/{self.label}" if self.backend else self.label

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "backend": self.backend, "label": self.label,
                "algorithm": self.algorithm,
                "params": {k: list(v) if isinstance(v, tuple) else v
                           for k, v in self.params.items()},
                "status": self.status, "reason": self.reason,
                "median_ms": _ms(self.median_s), "iqr_ms": _ms(self.iqr_s),
                "min_ms": _ms(self.min_s), "runs": self.runs, "pruned": self.pruned,
                "clock": self.clock, "transfer_ms": _ms(self.transfer_s),
                "workspace_bytes": self.workspace_bytes}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


@dataclass(frozen=True)
class FindResult:
    """What :func:`find` measured: ``results`` ranked (timed fastest first, then the rest),
    ``winner`` or ``tie`` as the tuning database records them, ``acl`` the label ACL's rules
    pick, ``stored`` whether the measurement went into the tuning database (``note`` says why
    not)."""

    problem: ConvProblem
    backend: str
    device: Mapping[str, str]
    results: tuple[FindEntry, ...]
    winner: str | None
    tie: tuple[str, ...]
    acl: str
    complete: bool
    max_workspace_bytes: int | None = None
    stored: bool = False
    note: str | None = None
    database: str | None = None
    measurement: Measurement | None = field(default=None, repr=False, compare=False)
    narrowed: str | None = None    # with ``top``: what was timed, or why everything was
    passed_over: tuple[str, ...] = ()   # backends of a list that were not timed, and why
    devices: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # by backend

    @property
    def best(self) -> FindEntry | None:
        """The fastest candidate that ran (rank 1), or None."""
        return next((r for r in self.results if r.status == "ok"), None)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "backend": self.backend,
                "device": dict(self.device), "winner": self.winner, "tie": list(self.tie),
                "acl": self.acl, "complete": self.complete,
                "max_workspace_bytes": self.max_workspace_bytes, "stored": self.stored,
                "note": self.note, "database": self.database, "narrowed": self.narrowed,
                "passed_over": list(self.passed_over),
                "devices": {k: dict(v) for k, v in self.devices.items()},
                "results": [r.to_dict() for r in self.results]}

    def table(self) -> str:
        """The ranking as readable text."""
        on = (", ".join(f"{b} on {d.get('name', '?')}" for b, d in self.devices.items())
              if self.devices else f"{self.backend} on {self.device.get('name', '?')}")
        lines = [f"problem  {self.problem}",
                 f"backend  {on}   ACL's rules pick {self.acl}"]
        rows = [(r.rank or "-", r.qualified, r.status,
                 f"{r.median_s * 1e3:.4g}" if r.median_s is not None else "-",
                 f"{r.iqr_s * 1e3:.2g}" if r.iqr_s is not None else "-",
                 r.runs or "-", _size(r.workspace_bytes), r.reason + (
                     f" (+ {r.transfer_s * 1e3:.3g} ms copying x in and y out)"
                     if r.transfer_s else "")) for r in self.results]
        # columns as wide as their widest cell: a long variant label keeps its row in line
        lines.append(tables.render(("#", "candidate", "status", "median ms", "IQR ms", "runs",
                                    "workspace", "reason"), rows,
                                   right={"#", "median ms", "IQR ms", "runs", "workspace"}))
        lines += [f"passed over: {why}" for why in self.passed_over]
        verdict = (f"winner {self.winner}" if self.winner else
                   f"tie {'/'.join(self.tie)}" if self.tie else "nothing ran")
        lines.append(verdict + ("" if self.complete else " (the time budget cut it short)"))
        if self.narrowed:
            lines.append(self.narrowed)
        if self.stored:
            lines.append(f"stored in {self.database}")
        elif self.note:
            lines.append(self.note)
        return "\n".join(lines)


def find(problem: ConvProblem, w: np.ndarray | None = None, *, weights_layout: str = "OHWI",
         backend: str | Sequence[str] | Preference = "numpy", device: Any = None,
         target: str = "cpu",
         rules: Rules | str | None = None, max_workspace_bytes: int | None = None,
         store: bool = False, db: TuningDB | str | os.PathLike[str] | None = None,
         settings: TimingSettings | None = None, budget_s: float | None = None,
         on_candidate: Callable[[str], None] | None = None,
         top: int | None = None) -> FindResult:
    """Time every algorithm and variant that can run ``problem`` on ``backend``; rank them.

    Parameters
    ----------
    problem : ConvProblem
        F32 or F16 (the others cannot run, so cannot be timed).
    w : ndarray, optional
        Weights to time with (``weights_layout``); random ones otherwise. The input is
        random either way: timings do not depend on values.
    backend, device
        Where to time: one backend, or several (a list, ``"opencl,numpy"``, ``"auto"``),
        ranked together (each entry names its backend, ``winner``/``tie`` read
        ``backend/label``, and a device's entries add the copies of x and y its clock left
        out: ``transfer_s``); ``device`` is the device of the entries that name none.
    target : str
        The ACL target whose rules' pick is reported as ``acl`` (and breaks a tie later).
    max_workspace_bytes : int, optional
        Candidates whose workspace (the registry's estimate for ``backend``, equal to the
        kernels' own) is larger are not built: status ``excluded-by-workspace``.
    store : bool
        Record the measurement in the tuning database (``db``; default
        ``$CONVSEL_TUNING_DB`` or the user data directory), unless the budget cut it short.
    settings, budget_s
        How long to time each candidate; about how long all of it may take.
    top : int, optional
        Time only the ``top`` candidates that this device's fitted model (in ``db``) predicts
        fastest, and ACL's pick; the others are ``skipped`` with that reason. Without a
        usable model every candidate is timed, and ``narrowed`` says why.

    Returns
    -------
    FindResult
        ``results``: ``ok`` entries fastest first (``rank`` 1, 2, ...), then ``error``,
        ``excluded-by-workspace``, ``skipped`` (not timed: dominated, budget spent) and
        ``unsupported`` ones, each with its reason.
    """
    problem = arguments.runnable(arguments.problem(problem))
    order = arguments.backends(backend)
    device = arguments.device_beside(order, device)
    max_workspace_bytes = arguments.workspace_limit(max_workspace_bytes)
    budget_s = arguments.seconds("budget_s", budget_s)
    top = arguments.top(top)
    weights = None if w is None else arguments.weights(
        problem, w, arguments.weights_layout(weights_layout))
    loaded = as_rules(rules)
    on = resolve_target(target, loaded)
    acl = algorithms.label_of(*_acl_pick(problem, on, loaded))
    timing = _Timing(loaded, settings, _with_weights(weights), budget_s, on_candidate,
                     max_workspace_bytes)
    if not order.single:
        return _find_across(problem, order, device, on, acl, timing, top, store, db)
    backend, device = order.first.backend, order.first.device_or(device)
    shortlist, narrowed = _narrow(problem, on, loaded, top, backend, device, db)
    m = timing.measure(problem, backend, device, shortlist)
    result = FindResult(problem, backend, dict(m.device), _rank(m, backend, loaded), m.winner,
                        m.tie, acl, m.complete, max_workspace_bytes, measurement=m,
                        narrowed=narrowed)
    return _store(result, m, db) if store else result


def _acl_pick(p: ConvProblem, target: Target, rules: Rules) -> tuple[str, Mapping[str, Any]]:
    acl = acl_selection(p, target, rules)
    return acl.algorithm, acl.params


@dataclass(frozen=True)
class _Timing:
    """How :func:`find` times, the same on every backend it is given."""

    rules: Rules
    settings: TimingSettings | None
    build: Callable[..., Any] | None
    budget_s: float | None
    on_candidate: Callable[[str], None] | None
    max_workspace_bytes: int | None

    def measure(self, p: ConvProblem, backend: str, device: Any,
                shortlist: Shortlist | None) -> Measurement:
        return measure(p, backend, device, rules=self.rules, settings=self.settings,
                       build=self.build, budget_s=self.budget_s, on_candidate=self.on_candidate,
                       max_workspace_bytes=self.max_workspace_bytes, shortlist=shortlist)


def _find_across(p: ConvProblem, order: Preference, device: Any, target: Target, acl: str,
                 timing: _Timing, top: int | None, store: bool, db: Any) -> FindResult:
    """Time every backend of ``order`` and rank all their candidates together."""
    from .backends.transfer import transfer_cost

    entries: list[FindEntry] = []
    passed: list[str] = []
    devices: dict[str, Mapping[str, str]] = {}
    notes: list[str] = []
    measured: list[Measurement] = []
    deadline = None if timing.budget_s is None else time.monotonic() + timing.budget_s
    for i, entry in enumerate(order):
        place, on = str(entry), entry.device_or(device)
        ready = backends.available(entry.backend)
        # the budget is the whole call's: each backend gets its share of what is left
        share = None if deadline is None else max(deadline - time.monotonic(), 1e-3) / (
            len(order) - i)
        try:
            if not ready.ok:
                raise UnsupportedError(ready.reason, backend=entry.backend)
            shortlist, narrowed = _narrow(p, target, timing.rules, top, entry.backend, on, db)
            m = replace(timing, budget_s=share).measure(p, entry.backend, on, shortlist)
            copy = transfer_cost(entry.backend, on)
        except (UnsupportedError, KernelBuildError) as exc:
            passed.append(f"{place}: {exc}")
            continue
        measured.append(m)
        devices[place] = dict(m.device)
        notes += [f"{place}: {narrowed}"] if narrowed else []
        moved = copy.seconds(_bytes(p, p.input_shape)) + copy.seconds(_bytes(p, p.output_shape))
        entries += [replace(e, backend=place, transfer_s=moved if e.clock == "device" else None)
                    for e in _rank(m, entry.backend, timing.rules)]
    if not measured:
        raise UnsupportedError(f"no backend of {order} can time {p}: {'; '.join(passed)}")
    ranked = _ranked(entries)
    winner, tie = decide({e.qualified: {"median_s": e.cost_s, "iqr_s": e.iqr_s,
                                        "runs": e.runs, "pruned": e.pruned}
                          for e in ranked if e.status == "ok"})
    ranked = tuple(_across_verdict(e, ranked[0], winner, tie) for e in ranked)
    first = next(iter(devices.values()))
    result = FindResult(p, str(order), first, ranked, winner, tie, acl,
                        all(m.complete for m in measured), timing.max_workspace_bytes,
                        narrowed="; ".join(notes) or None, passed_over=tuple(passed),
                        devices=devices)
    if not store:
        return result
    stored = [_store(result, m, db) for m in measured]
    return replace(result, stored=all(s.stored for s in stored),
                   note="; ".join(s.note for s in stored if s.note) or None,
                   database=next((s.database for s in stored if s.database), None))


def _across_verdict(e: FindEntry, best: FindEntry, winner: str | None,
                    tie: tuple[str, ...]) -> FindEntry:
    """``e``'s reason against every backend's candidates (its own backend's race judged it
    against that backend's alone)."""
    if e.status != "ok" or e.pruned or e.cost_s is None or best.cost_s is None:
        return e
    if e.qualified == winner:
        why = "fastest of every backend, beyond the noise of every other"
    elif e.qualified in tie:
        why = f"tied within noise with {', '.join(x for x in tie if x != e.qualified)}"
    else:
        why = f"{e.cost_s / best.cost_s:.2f}x the cost of {best.qualified}"
    return replace(e, reason=why)


def _bytes(p: ConvProblem, shape: tuple[int, ...]) -> int:
    size = 2 if p.dtype == "F16" else 4
    for d in shape:
        size *= d
    return size


def _narrow(problem: ConvProblem, target: Target, rules: Rules, top: int | None, backend: str,
            device: Any, db: Any) -> tuple[Shortlist | None, str | None]:
    if top is None:
        return None, None
    from .policies.predicted import shortlist  # the learner is imported only when asked

    found, why = shortlist(problem, target, rules, top=top, backend=backend, device=device,
                           db=db)
    if found is None:
        return None, f"top {top}: {why}; every candidate timed"
    return found, f"top {top}: timed {', '.join(sorted(found.labels))} (the others: {found.reason})"


def _with_weights(weights: np.ndarray | None) -> Callable[..., Any] | None:
    """execute.build, timing the caller's weights instead of random ones."""
    if weights is None:
        return None
    from .execute import build

    def build_with(problem: ConvProblem, alg: str, params: Mapping[str, Any], be: str,
                   w: np.ndarray, bias: Any, device: Any) -> Any:
        return build(problem, alg, params, be, weights, bias, device)

    return build_with


def _rank(m: Measurement, backend: str,
          rules: Rules) -> tuple[FindEntry, ...]:
    entries: list[FindEntry] = []
    for label, t in m.timings.items():
        alg, params = str(t["algorithm"]), _params(t.get("params"))
        space = algorithms.workspace_bytes(alg, m.problem, params, backend)
        if "median_s" in t:
            why = ("left the race: its fastest runs were several times the best median"
                   if t.get("pruned") else _verdict(label, t, m))
            entries.append(FindEntry(label, alg, params, "ok", why, space, t["median_s"],
                                     t["iqr_s"], t.get("min_s"), int(t["runs"]),
                                     bool(t.get("pruned")), clock=t.get("clock")))
        else:
            entries.append(FindEntry(label, alg, params, "error", str(t["error"]), space))
    for label, why in m.skipped.items():
        alg, _, _ = label.partition(":")
        found = _variant_params(m.problem, label, rules)
        status = ("excluded-by-workspace" if why.startswith(WORKSPACE_EXCLUDED) else
                  "skipped" if why.startswith("not timed") else "unsupported")
        space = (algorithms.workspace_bytes(alg, m.problem, found, backend)
                 if found is not None and status != "unsupported" else None)
        entries.append(FindEntry(label, alg, found or {}, status, why, space))
    return _ranked(entries)


def _ranked(entries: list[FindEntry]) -> tuple[FindEntry, ...]:
    """``entries`` in the order of :data:`STATUSES`, the timed ones fastest first (their
    copies counted) and numbered."""
    order = {s: i for i, s in enumerate(STATUSES)}
    entries = sorted(entries, key=lambda e: (order[e.status], e.cost_s or 0.0, e.qualified))
    ranked, rank = [], 0
    for e in entries:
        if e.status == "ok":
            rank += 1
            e = replace(e, rank=rank)
        ranked.append(e)
    return tuple(ranked)


def _verdict(label: str, t: Mapping[str, Any], m: Measurement) -> str:
    if m.winner == label:
        return "fastest, beyond the noise of every other"
    if label in m.tie:
        return f"tied within noise with {', '.join(x for x in m.tie if x != label)}"
    fastest = m.fastest
    if fastest is None:
        return "timed"
    ratio = t["median_s"] / m.timings[fastest]["median_s"]
    return f"{ratio:.2f}x the median of {fastest}"


def _params(raw: Any) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in dict(raw or {}).items()}


def _variant_params(p: ConvProblem, label: str, rules: Rules) -> dict[str, Any] | None:
    """The params a skipped label stands for (None: a whole algorithm that cannot run)."""
    alg = label.partition(":")[0]
    if alg not in algorithms.ALGORITHMS:
        return None
    verdict = algorithms.supports(alg, p, rules)
    if not verdict.ok:
        return None
    for params in algorithms.variants(alg, p, rules):
        if algorithms.label_of(alg, params) == label:
            return {**params, **algorithms.supports(alg, p, rules, params).params}
    return {**verdict.params} if label == alg else None


def _store(result: FindResult, m: Measurement, db: Any) -> FindResult:
    if not m.complete:
        return replace(result, note="not stored: the time budget ran out before "
                                    f"{', '.join(m.untimed)} were timed fully")
    try:
        database = open_db(db)
        database.record(m.entry())
    except TuningDatabaseError as exc:
        return replace(result, note=f"not stored: {exc}")
    return replace(result, stored=True, database=str(database.path))


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "-"
    if nbytes < 1024:
        return f"{nbytes} B"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.3g} {unit}"
    return ""
