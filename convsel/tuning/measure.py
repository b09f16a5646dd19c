"""Time every algorithm that can run a problem, and decide whether one of them wins.

Each candidate is prepared once (weights transformed, outside the timing) and warmed up, then
all are timed in interleaved rounds until each has ``min_runs`` runs and ``min_time``
seconds (see :mod:`convsel.tuning.timing`). The median is kept with its interquartile range
and the timing's quality: its spread, its outliers, what else ran on the machine meanwhile
and with how many threads (see :mod:`convsel.tuning.quality`).

A candidate is the winner only if it beats the runner-up by more than the noise of both:
the statistical noise of their medians and, for a noisy timing, as much as the host's load
and its spread may have slowed it. Otherwise the close ones are kept as a tie, which the
rules break when the policy answers (see :mod:`convsel.policies.measured`). A tie that may
be the noise's doing is timed again first: its candidates only, interleaved, with twice the
runs (``TimingSettings.retimes`` times at most); still noisy, it is recorded as a tie with
its noise named, never as a winner.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import algorithms, backends, threads
from ..algorithms import label_of
from ..errors import ConvselError, FallbackWarning, UnsupportedError
from ..problem import ConvProblem
from ..rules import Rules, as_rules
from ..verdict import failed
from . import quality
from .entry import TuningEntry
from .identity import device_identity
from .timing import Race, TimingSettings

# Two medians closer than this fraction of the faster one are not told apart, whatever the
# IQRs say: a handful of runs on a shared machine does not resolve finer differences.
NOISE_FLOOR = 0.03


@dataclass(frozen=True)
class Variant:
    """One algorithm with fixed parameters; ``label`` names it in timings and the database."""

    label: str
    algorithm: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure` found for one problem on one backend and device.

    ``timings`` maps each label to ``{"algorithm", "params", "median_s", "iqr_s", "runs",
    "min_s", "pruned", "spread", "outliers", "environment", "noise", "clock"}`` (and
    ``"retimed": n`` for a timing that replaced a noisy one), or to ``{"algorithm", "params",
    "error"}`` when preparing or running it raised; ``skipped`` holds the labels that cannot
    run this problem here, with why. ``retimed`` counts the re-times of a noisy tie.
    """

    problem: ConvProblem
    backend: str
    device: Mapping[str, str]
    timings: Mapping[str, Mapping[str, Any]]
    skipped: Mapping[str, str]
    winner: str | None
    tie: tuple[str, ...]
    untimed: tuple[str, ...] = ()    # not timed fully: the time budget ran out
    retimed: int = 0

    @property
    def confident(self) -> bool:
        """A winner beyond the noise of every other (a tie is not a winner)."""
        return self.winner is not None

    @property
    def noise(self) -> list[str]:
        """Why the fastest candidates' timings are noisy (empty when they are clean)."""
        return quality.reasons(self.timings, [self.winner] if self.winner else self.tie)

    @property
    def fastest(self) -> str | None:
        """The label with the smallest median (the winner, or the first of a tie)."""
        ok = timed(self.timings)
        return min(ok, key=lambda k: ok[k]["median_s"]) if ok else None

    @property
    def complete(self) -> bool:
        """False when a time budget left candidates untimed."""
        return not self.untimed

    @property
    def errors(self) -> dict[str, str]:
        return {k: v["error"] for k, v in self.timings.items() if "error" in v}

    def entry(self) -> TuningEntry:
        """The database entry for this measurement (errors and skips included)."""
        timings = {**{k: dict(v) for k, v in self.timings.items()},
                   **{k: {"skipped": v} for k, v in self.skipped.items()}}
        return TuningEntry(problem=self.problem, backend=self.backend, device=self.device,
                           winner=self.winner, tie=self.tie, timings=timings)


@dataclass(frozen=True)
class Shortlist:
    """The only candidates worth timing for one problem (a cost model's few best, say), and
    why: every other candidate is skipped with ``reason``."""

    labels: frozenset[str]
    reason: str


def timed(timings: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The timings that hold a median (no error, not skipped)."""
    return {k: v for k, v in timings.items() if "median_s" in v}


def candidates(problem: ConvProblem, backend: str, rules: Rules | None = None,
               exclude: Collection[str] = ()) -> tuple[list[Variant], dict[str, str]]:
    """Every (algorithm, parameters) that may run ``problem`` on ``backend``, and the
    algorithms that will not be timed, with why: unsupported, excluded by the caller, or
    dominated (its home says it cannot win here, :func:`convsel.algorithms.dominated`).
    Winograd gives one candidate per output tile."""
    loaded = as_rules(rules)
    found: list[Variant] = []
    skipped: dict[str, str] = {}
    # likely-fast algorithms first (the registry's timing order), so that pruning has a
    # yardstick before the slow ones run
    for alg in algorithms.TIMING_ORDER:
        verdict = algorithms.supports(alg, problem, loaded)
        if verdict.ok:
            verdict = backends.implemented(alg, backend)
        if verdict.ok and alg in exclude:
            verdict = failed(f"not timed: {alg} excluded by the caller")
        if verdict.ok:
            verdict = algorithms.dominated(alg, problem)
        if not verdict.ok:
            skipped[alg] = verdict.reason
            continue
        found += [Variant(label_of(alg, params), alg, params)
                  for params in algorithms.variants(alg, problem, loaded)]
    return found, skipped


def noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The difference of medians below which two timings are not told apart statistically.

    Twice the standard error of the difference (about 95%), each median's error estimated
    from its IQR and run count (sigma ~ IQR / 1.349, SE(median) ~ 1.2533 sigma / sqrt(n)),
    but never less than the noise floor: :data:`NOISE_FLOOR` of the faster median.
    """
    def se(t: Mapping[str, Any]) -> float:
        return 0.929 * float(t["iqr_s"]) / math.sqrt(max(int(t.get("runs", 1)), 1))

    floor = NOISE_FLOOR * min(a["median_s"], b["median_s"])
    return float(max(2.0 * math.hypot(se(a), se(b)), floor))


def decide(timings: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, tuple[str, ...]]:
    """``(winner, ())`` when the fastest beats every other by more than the noise, else
    ``(None, tie)`` with the labels within noise of the fastest, fastest first.

    A candidate ties statistically only if the gap is within the noise of the pair *and*
    within the fastest's own noise band (``noise(best, best)``): a candidate with few,
    scattered runs has a wide spread of its own, which must not stretch the band around a
    precise winner. It also ties when either timing is noisy and its median is within the
    ratio the noise may have caused (:func:`convsel.tuning.quality.bound`: a timing under a
    CPU hog may be twice as slow as on a quiet machine). A pruned candidate (left the race
    for being ``prune_factor`` times slower) never ties.
    """
    ok = sorted(timed(timings).items(), key=lambda kv: kv[1]["median_s"])
    if not ok:
        return None, ()
    best = ok[0][1]
    band = noise(best, best)
    close = [k for k, t in ok
             if t is best or (not t.get("pruned") and (
                 t["median_s"] - best["median_s"] <= min(noise(best, t), band)
                 or t["median_s"] < best["median_s"] * quality.bound(best, t)))]
    return (ok[0][0], ()) if len(close) == 1 else (None, tuple(close))


def measure(problem: ConvProblem, backend: str = "numpy", device: Any = None, *,
            rules: Rules | None = None, settings: TimingSettings | None = None,
            on_candidate: Callable[[str], None] | None = None,
            build: Callable[..., Any] | None = None,
            budget_s: float | None = None, exclude: Collection[str] = (),
            max_workspace_bytes: int | None = None,
            shortlist: Shortlist | None = None) -> Measurement:
    """Time every candidate of ``problem`` on ``backend`` and decide the winner.

    Parameters
    ----------
    problem : ConvProblem
        An F32 or F16 problem (the others are selection-only and cannot be timed).
    backend, device
        Where to run; ``device`` is passed to the backend's ``get_runtime``.
    settings : TimingSettings, optional
        Warm-up runs, minimum runs and time, maximum runs, data seed, prune factor, and the
        clock: on OpenCL a run is timed by its profiling events on device-resident data
        unless ``clock="wall"``; each timing records its ``clock``.
    on_candidate : callable, optional
        Called with each label before it is timed (progress display).
    build : callable, optional
        :func:`convsel.execute.build` or a stand-in with its signature (tests).
    budget_s : float, optional
        Stop after about this many seconds (checked between runs: a run is never cut short);
        candidates not started are skipped with that reason, and ``untimed`` lists them and
        those stopped before their minimum runs.
    exclude : collection of str
        Algorithms not to time (skipped with that reason).
    max_workspace_bytes : int, optional
        Variants whose workspace on ``backend`` (the registry's estimate) is larger are not
        built; they are skipped with a reason starting "excluded by the workspace limit".
    shortlist : Shortlist, optional
        Time only these labels; the others are skipped with its reason. Ignored when none of
        the candidates left is on it (an answer from nothing timed would be no answer).

    Returns
    -------
    Measurement
        A candidate that raises is recorded with its error and the others continue; one the
        backend turns down (UnsupportedError, or a fallback to another backend) is skipped.

    Raises
    ------
    UnsupportedError
        The problem's dtype cannot run, or no candidate exists.
    """
    if not problem.is_float:
        raise UnsupportedError(f"dtype {problem.dtype} is selection-only: only F32 and F16 "
                               "problems can be timed")
    settings = settings or TimingSettings()
    with threads.limited(settings.threads):
        return _measure(problem, backend, device, rules, settings, on_candidate, build,
                        budget_s, exclude, max_workspace_bytes, shortlist)


def _measure(problem: ConvProblem, backend: str, device: Any, rules: Rules | None,
             settings: TimingSettings, on_candidate: Callable[[str], None] | None,
             build: Callable[..., Any] | None, budget_s: float | None,
             exclude: Collection[str], max_workspace_bytes: int | None,
             shortlist: Shortlist | None) -> Measurement:
    if build is None:
        from ..execute import build as default_build
    builder = build or default_build
    found, skipped = candidates(problem, backend, rules, exclude)
    if max_workspace_bytes is not None:
        found = _within_workspace(problem, backend, found, max_workspace_bytes, skipped)
    if shortlist is not None:
        found = _shortlisted(found, shortlist, skipped)
    x, w, bias = _data(problem, settings.seed)
    race, timings = Race(settings, budget_s), dict[str, dict[str, Any]]()
    infos: dict[str, dict[str, Any]] = {c.label: {"algorithm": c.algorithm,
                       "params": {k: list(v) if isinstance(v, (tuple, list)) else v
                                  for k, v in c.params.items()}} for c in found}
    untimed: list[str] = []
    runners: dict[str, tuple[Callable[[], Any], bool]] = {}
    for cand in found:
        if race.out_of_time:
            skipped[cand.label] = f"not timed: the {budget_s:g} s time budget was spent"
            untimed.append(cand.label)
            continue
        if on_candidate is not None:
            on_candidate(cand.label)
        try:
            op = _build(builder, problem, w, bias, cand, backend, device)
            run, clock = _runner(op, x, settings.clock)
            infos[cand.label]["clock"] = clock
            runners[cand.label] = (run, clock == "device")
            race.enter(cand.label, run, self_timed=clock == "device")
        except _Skip as exc:
            skipped[cand.label] = str(exc)
        except _FAILURES as exc:
            race.lanes.pop(cand.label, None)
            timings[cand.label] = {**infos[cand.label], "error": _describe(exc)}
    if found and all(skipped.get(c.label) == _NO_DEVICE_CLOCK for c in found):
        raise UnsupportedError(f"no candidate on {backend} has a device clock: time it with "
                               "clock 'auto' or 'wall'", backend=backend)
    progress = None if on_candidate is None else lambda n: on_candidate(f"round {n}")
    with threads.limited(settings.threads):   # again: building may have loaded another BLAS
        race.run(progress)
        return _decided(problem, backend, device, settings, on_candidate, race, infos, runners,
                        timings, skipped, untimed)


def _decided(problem: ConvProblem, backend: str, device: Any, settings: TimingSettings,
             on_candidate: Callable[[str], None] | None, race: Race,
             infos: Mapping[str, Mapping[str, Any]],
             runners: Mapping[str, tuple[Callable[[], Any], bool]],
             timings: dict[str, dict[str, Any]], skipped: dict[str, str],
             untimed: list[str]) -> Measurement:
    """The race's timings with their quality, the winner or tie, and the re-times of a tie
    that may be the noise's doing."""
    timings.update({k: {**infos[k], "error": _describe(e)} for k, e in race.errors.items()})
    timings.update(_assessed(race, infos))
    untimed += race.cut_short()
    winner, tie = decide(timings)
    retimed = 0
    while winner is None and retimed < settings.retimes and not untimed \
            and any(quality.noisy(timings[k]) for k in tie):
        retimed += 1
        if on_candidate is not None:
            on_candidate(f"re-time {retimed}: {', '.join(tie)}")
        again = _retime(tie, runners, settings, race.deadline)
        if again.cut_short() or not again.stats():
            break
        timings.update({k: {**v, "retimed": retimed} for k, v in _assessed(again, infos).items()})
        timings.update({k: {**infos[k], "error": _describe(e)} for k, e in again.errors.items()})
        winner, tie = decide(timings)
    return Measurement(problem, backend, device_identity(backend, device), timings, skipped,
                       winner, tie, tuple(untimed), retimed)


def _assessed(race: Race, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each timing of ``race`` with its quality (spread, outliers, environment, noise)."""
    return {k: quality.assess({**infos[k], **st}, race.environment)
            for k, st in race.stats().items()}


# A re-time races at most this many of the tied candidates (the fastest of them).
_RETIME_AT_MOST = 4


def _retime(labels: Collection[str], runners: Mapping[str, tuple[Callable[[], Any], bool]],
            settings: TimingSettings, deadline: float | None) -> Race:
    """The tied candidates timed again among themselves, interleaved, with twice the runs."""
    import time

    left = None if deadline is None else deadline - time.perf_counter()
    race = Race(settings.longer(), left)
    for label in list(labels)[:_RETIME_AT_MOST]:
        run, self_timed = runners[label]
        try:
            race.enter(label, run, self_timed=self_timed)
        except _FAILURES as exc:
            race.lanes.pop(label, None)
            race.errors[label] = exc
    race.run()
    return race


WORKSPACE_EXCLUDED = "excluded by the workspace limit"


def _within_workspace(p: ConvProblem, backend: str, found: list[Variant], limit: int,
                      skipped: dict[str, str]) -> list[Variant]:
    kept = []
    for cand in found:
        need = algorithms.workspace_bytes(cand.algorithm, p, cand.params, backend)
        if need is not None and need <= limit:
            kept.append(cand)
        else:
            skipped[cand.label] = (f"{WORKSPACE_EXCLUDED}: needs {need} bytes, more than "
                                   f"{limit}" if need is not None else
                                   f"{WORKSPACE_EXCLUDED}: no workspace estimate on {backend}")
    return kept


def _shortlisted(found: list[Variant], shortlist: Shortlist,
                 skipped: dict[str, str]) -> list[Variant]:
    kept = [c for c in found if c.label in shortlist.labels]
    if not kept:
        return found
    skipped.update({c.label: f"not timed: {shortlist.reason}"
                    for c in found if c.label not in shortlist.labels})
    return kept


# What a candidate may raise that is its own failure, reported for it while the others go on.
_FAILURES = (ConvselError, ArithmeticError, ImportError, MemoryError, RuntimeError, ValueError)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Skip(Exception):
    """The backend turned the candidate down: a capability gap, not a failure."""


def _build(build: Callable[..., Any], p: ConvProblem, w: np.ndarray, bias: np.ndarray,
           cand: Variant, backend: str, device: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        try:
            kernel, used, why = build(p, cand.algorithm, cand.params, backend, w, bias, device)
        except UnsupportedError as exc:
            raise _Skip(str(exc)) from exc
    if used != backend:
        # timing the numpy fallback would credit OpenCL with numpy's speed
        raise _Skip(why or f"ran on {used}, not {backend}")
    return kernel


_NO_DEVICE_CLOCK = "no device clock here: time it with clock 'wall' or 'auto'"


def _runner(op: Any, x: np.ndarray, clock: str) -> tuple[Callable[[], Any], str]:
    """What to time for ``op`` and by which clock ("device" or "wall")."""
    device_timer = getattr(op, "device_timer", None)
    if clock != "wall" and device_timer is not None:
        return device_timer(x), "device"
    if clock == "device":
        raise _Skip(_NO_DEVICE_CLOCK)
    return functools.partial(op.run, x), "wall"


def _data(p: ConvProblem, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    # kernels run NHWC; a layout change is the front door's, not the algorithm's, time
    x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(dtype)
    w = (rng.standard_normal(p.weights_shape) / np.sqrt(p.kh * p.kw * p.c / p.groups))
    return x, w.astype(dtype), rng.standard_normal(p.k).astype(dtype)
