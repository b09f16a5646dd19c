"""Time every algorithm that can run a problem, and decide whether one of them wins.

Each candidate is prepared once (weights transformed, outside the timing), run ``warmup``
times, then run until it has both ``min_runs`` runs and ``min_time`` seconds (at most
``max_runs``). The median is kept with its interquartile range. A candidate is the winner only
if it beats the runner-up by more than the noise; otherwise the close ones are kept as a tie,
which the rules break when the policy answers (see :mod:`convsel.tuning.policy`).
"""

from __future__ import annotations

import functools
import gc
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import algorithms, backends
from ..errors import ConvselError, FallbackWarning, UnsupportedError
from ..problem import ConvProblem
from ..rules import Rules
from ..selection import _rules
from .db import TuningEntry

# Two medians closer than this fraction of the faster one are not told apart, whatever the
# IQRs say: a handful of runs on a shared machine does not resolve finer differences.
NOISE_FLOOR = 0.03
# After a few runs, a candidate this many times slower than the best so far cannot win or tie;
# it stops early (and says so) instead of spending the full time budget.
PRUNE_FACTOR = 3.0
# Likely-fast algorithms first, so that pruning has a yardstick before the slow ones run.
_TIMING_ORDER = ("gemm_1x1", "im2col_gemm", "winograd", "indirect_gemm", "fft", "direct")


@dataclass(frozen=True)
class Settings:
    """How long to time each candidate."""

    warmup: int = 1
    min_runs: int = 5
    min_time: float = 0.05
    max_runs: int = 100
    seed: int = 0


@dataclass(frozen=True)
class Candidate:
    """One algorithm with fixed parameters; ``label`` names it in timings and the database."""

    label: str
    algorithm: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure` found for one problem on one backend and device.

    ``timings`` maps each label to ``{"algorithm", "params", "median_s", "iqr_s", "runs",
    "min_s", "pruned"}``, or to ``{"algorithm", "params", "error"}`` when preparing or running
    it raised; ``skipped`` holds the labels that cannot run this problem here, with why.
    """

    problem: ConvProblem
    backend: str
    device: Mapping[str, str]
    timings: Mapping[str, Mapping[str, Any]]
    skipped: Mapping[str, str]
    winner: str | None
    tie: tuple[str, ...]
    untimed: tuple[str, ...] = ()    # left out when the time budget ran out

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


def _timing_rank(algorithm: str) -> int:
    return _TIMING_ORDER.index(algorithm) if algorithm in _TIMING_ORDER else len(_TIMING_ORDER)


def timed(timings: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The timings that hold a median (no error, not skipped)."""
    return {k: v for k, v in timings.items() if "median_s" in v}


def label_of(algorithm: str, params: Mapping[str, Any] | None = None) -> str:
    """``"winograd:4x4"`` for a Winograd tile, else the algorithm id."""
    tile = (params or {}).get("tile")
    return f"{algorithm}:{tile[0]}x{tile[1]}" if tile else algorithm


def device_identity(backend: str, device: Any = None) -> dict[str, str]:
    """vendor, name and driver of ``device`` on ``backend`` (the database's device key)."""
    module = backends.backend_module(backend)
    ident = module.device_identity(module.get_runtime(device))
    return {k: str(ident[k]) for k in ("vendor", "name", "driver")}


def candidates(problem: ConvProblem, backend: str,
               rules: Rules | None = None) -> tuple[list[Candidate], dict[str, str]]:
    """Every (algorithm, parameters) that may run ``problem`` on ``backend``, and the
    algorithms that cannot, with why. Winograd gives one candidate per output tile."""
    loaded = _rules(rules)
    found: list[Candidate] = []
    skipped: dict[str, str] = {}
    for alg in sorted(algorithms.ALGORITHMS, key=_timing_rank):
        verdict = algorithms.supports(alg, problem, loaded)
        if verdict.ok:
            verdict = backends.implemented(alg, backend)
        if not verdict.ok:
            skipped[alg] = verdict.reason
            continue
        if alg == "winograd":
            found += [Candidate(label_of(alg, {"tile": t}), alg, {"tile": t})
                      for t in algorithms.winograd_tiles(problem, loaded)]
        else:
            found.append(Candidate(alg, alg, {}))
    return found, skipped


def time_runs(run: Callable[[], Any], settings: Settings,
              give_up_after: float = float("inf")) -> dict[str, Any]:
    """Median and IQR of ``run()``'s wall time. A candidate slower than ``give_up_after``
    seconds stops early (``pruned``): after a warm-up run that slow, or a median of 3 runs."""
    was_enabled = gc.isenabled()
    gc.disable()  # a collection inside one run would be noise, as in timeit
    try:
        for _ in range(settings.warmup):
            t0 = time.perf_counter()
            run()
            first = time.perf_counter() - t0
            if first > 2 * give_up_after:   # hopeless: one run says enough
                return _stats([first], pruned=True)
        times = _repeat(run, settings, give_up_after)
    finally:
        if was_enabled:
            gc.enable()
    return _stats(times, pruned=len(times) < min(settings.min_runs, settings.max_runs))


def _repeat(run: Callable[[], Any], settings: Settings, give_up_after: float) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < settings.max_runs:
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        if len(times) >= settings.min_runs and time.perf_counter() - start >= settings.min_time:
            break
        if len(times) >= 3 and float(np.median(times)) > give_up_after:
            break
    return times


def _stats(times: list[float], *, pruned: bool) -> dict[str, Any]:
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    return {"median_s": float(median), "iqr_s": float(q3 - q1), "min_s": float(min(times)),
            "runs": len(times), "pruned": pruned}


def noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The difference below which two timings are not told apart: the larger IQR, or the
    noise floor of the faster median."""
    floor = NOISE_FLOOR * min(a["median_s"], b["median_s"])
    return float(max(a["iqr_s"], b["iqr_s"], floor))


def decide(timings: Mapping[str, Mapping[str, Any]]) -> tuple[str | None, tuple[str, ...]]:
    """``(winner, ())`` when the fastest beats every other by more than the noise, else
    ``(None, tie)`` with the labels within noise of the fastest, fastest first."""
    ok = sorted(timed(timings).items(), key=lambda kv: kv[1]["median_s"])
    if not ok:
        return None, ()
    best = ok[0][1]
    close = [k for k, t in ok if t["median_s"] - best["median_s"] <= noise(best, t)]
    return (ok[0][0], ()) if len(close) == 1 else (None, tuple(close))


def measure(problem: ConvProblem, backend: str = "numpy", device: Any = None, *,
            rules: Rules | None = None, settings: Settings = Settings(),
            on_candidate: Callable[[str], None] | None = None,
            prepare: Callable[..., Any] | None = None,
            budget_s: float | None = None) -> Measurement:
    """Time every candidate of ``problem`` on ``backend`` and decide the winner.

    Parameters
    ----------
    problem : ConvProblem
        An F32 or F16 problem (the others are selection-only and cannot be timed).
    backend, device
        Where to run; ``device`` is passed to the backend's ``get_runtime``.
    settings : Settings
        Warm-up runs, minimum runs and time, maximum runs, data seed.
    on_candidate : callable, optional
        Called with each label before it is timed (progress display).
    prepare : callable, optional
        :func:`convsel.ops.prepare` or a stand-in with its signature (tests).
    budget_s : float, optional
        Start no candidate after this many seconds; the ones not started are skipped with
        that reason (checked between candidates: one running candidate is not cut short).

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
    if prepare is None:
        from ..ops import prepare
    found, skipped = candidates(problem, backend, rules)
    x, w, bias = _data(problem, settings.seed)
    timings: dict[str, dict[str, Any]] = {}
    best = float("inf")
    started, untimed = time.perf_counter(), []
    for cand in found:
        if budget_s is not None and time.perf_counter() - started > budget_s:
            skipped[cand.label] = f"not timed: the {budget_s:g} s time budget was spent"
            untimed.append(cand.label)
            continue
        if on_candidate is not None:
            on_candidate(cand.label)
        info: dict[str, Any] = {"algorithm": cand.algorithm,
                                "params": {k: list(v) for k, v in cand.params.items()}}
        try:
            op = _prepare(prepare, problem, w, bias, cand, backend, device, rules)
            stats = time_runs(functools.partial(op.run, x), settings, PRUNE_FACTOR * best)
        except _Skip as exc:
            skipped[cand.label] = str(exc)
            continue
        except (ConvselError, ArithmeticError, ImportError, MemoryError, RuntimeError,
                ValueError) as exc:
            timings[cand.label] = {**info, "error": f"{type(exc).__name__}: {exc}"}
            continue
        timings[cand.label] = {**info, **stats}
        best = min(best, stats["median_s"])
    winner, tie = decide(timings)
    return Measurement(problem, backend, device_identity(backend, device), timings, skipped,
                       winner, tie, tuple(untimed))


class _Skip(Exception):
    """The backend turned the candidate down: a capability gap, not a failure."""


def _prepare(prepare: Callable[..., Any], p: ConvProblem, w: np.ndarray, bias: np.ndarray,
             cand: Candidate, backend: str, device: Any, rules: Rules | None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        try:
            op = prepare(p, w, bias, algorithm=cand.algorithm, backend=backend, device=device,
                         rules=rules, tile=cand.params.get("tile"))
        except UnsupportedError as exc:
            raise _Skip(str(exc)) from exc
    if getattr(op, "backend", backend) != backend:
        # timing the numpy fallback would credit OpenCL with numpy's speed
        raise _Skip(getattr(op, "fallback", None) or f"ran on {op.backend}, not {backend}")
    return op


def _data(p: ConvProblem, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = np.float16 if p.dtype == "F16" else np.float32
    x = rng.standard_normal(p.input_shape).astype(dtype)
    w = (rng.standard_normal(p.weights_shape) / np.sqrt(p.kh * p.kw * p.c / p.groups))
    return x, w.astype(dtype), rng.standard_normal(p.k).astype(dtype)
