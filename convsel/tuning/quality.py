"""How far a timing can be trusted: its own spread, and what else was running meanwhile.

Each timing records (see :func:`assess`):

- ``spread``: its interquartile range over its median, and ``outliers``: how many runs lie
  beyond Tukey's fence (third quartile + 1.5 IQR);
- ``environment``: the race's :class:`Environment`: how long this process's threads waited
  for a core while it ran (the kernel's run-queue delay), how many cores' worth of CPU
  *other* processes used on this process's cores (the per-CPU counters minus this process's
  own CPU time), the 1-minute load average, the cores this process may use, and the BLAS
  and OpenMP threads its runs had;
- ``noise``: the reasons it is noisy, empty when it is clean.

A timing by the host's clock is slowed by other processes on its cores: with ``b`` of ``c``
cores busy elsewhere it gets at least ``(c - b) / c`` of the CPU, so its time may be up to
``c / (c - b)`` times what a quiet machine gives, and a process that ran ``u`` seconds and
waited ``w`` for a core would have been ``(u + w) / u`` times faster alone; the larger of the
two is :meth:`Environment.distortion`, without
bound when its threads outnumber the free cores (a BLAS thread waiting for a core stalls the
others: under one CPU hog on two cores, GEMM-based candidates ran 40x slower). A
device-clock timing (OpenCL profiling events) is not slowed by the host's load; only its
spread counts. :func:`bound` turns both into the ratio two medians must exceed before the
faster one is called the winner (:func:`convsel.tuning.measure.decide`).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import threads

# Other processes using at most this many of our cores' worth of CPU: a quiet machine.
BUSY_QUIET = 0.25
# A timing whose IQR is above this share of its median is noisy whatever the load.
MAX_SPREAD = 0.25
# More than this share of runs beyond Tukey's fence: noisy.
MAX_OUTLIER_SHARE = 0.25
# Threads outnumbering the free cores by this much: they wait for each other (noisy).
OVERSUBSCRIBED_BY = 0.5
# Waiting for cores this much longer than the process ran: loaded (10% slower at most).
QUIET_SLOWDOWN = 1.1
# A race shorter than this cannot measure others' load from the kernel's 10 ms counters
# (the run-queue delay, in nanoseconds, still says whether it was in this process's way).
_MIN_SAMPLED_S = 0.05


@dataclass(frozen=True)
class Environment:
    """What shared the machine while a race ran (see the module docstring).

    ``waited_s`` is how long this process's threads were ready to run but waited for a core
    (the kernel's run-queue delay, to the nanosecond), ``cpu_s`` the CPU time they got: a
    process that got ``u`` and waited ``w`` would have run ``(u + w) / u`` times faster
    alone. ``others_busy_cores`` comes from the per-CPU counters (10 ms ticks), so only a
    race of at least 50 ms measures it (``sampled`` says which measures exist)."""

    seconds: float
    cores: int
    others_busy_cores: float
    load_1m: float
    blas_threads: int
    openmp_threads: int
    waited_s: float = 0.0
    cpu_s: float = 0.0
    sampled: str = "run-queue+cpu-counters"
    pool_threads: int = 0        # the numpy backend's own (fused kernels, FFT); 0: unknown

    @property
    def free_cores(self) -> float:
        return max(self.cores - self.others_busy_cores, 0.0)

    @property
    def slowdown(self) -> float:
        """How much faster this process would have run without waiting for cores."""
        return (self.cpu_s + self.waited_s) / self.cpu_s if self.cpu_s > 0 else 1.0

    @property
    def oversubscribed(self) -> bool:
        """Several compute threads (BLAS's, or the backend's own pool) and not enough free
        cores for them (one thread is only slowed, by at most :meth:`distortion`; several
        wait for each other)."""
        threads = max(self.blas_threads, self.pool_threads)
        return threads > 1 and threads > self.free_cores + OVERSUBSCRIBED_BY

    @property
    def loaded(self) -> bool:
        return self.others_busy_cores > BUSY_QUIET or self.slowdown > QUIET_SLOWDOWN

    def distortion(self) -> float:
        """How many times slower the host's load may have made a host-clock run (1.0 on a
        quiet machine; unbounded when its threads outnumber the free cores: a BLAS thread
        that waits for a core stalls the others, 40x was seen under one CPU hog)."""
        if self.oversubscribed:
            return math.inf
        if not self.loaded:
            return 1.0
        return max(self.cores / max(self.free_cores, 0.25), self.slowdown)

    def reasons(self) -> list[str]:
        out = []
        if self.loaded:
            out.append(f"loaded: other processes used {self.others_busy_cores:.2f} of this "
                       f"process's {self.cores} core(s), its threads waited for a core "
                       f"{self.waited_s * 1e3:.3g} ms of {self.seconds * 1e3:.3g} ms (load "
                       f"average {self.load_1m:.2f})")
        if self.oversubscribed:
            out.append(f"oversubscribed: {max(self.blas_threads, self.pool_threads)} compute "
                       f"thread(s) for "
                       f"{self.free_cores:.2f} free core(s) (time with fewer threads: "
                       f"--threads 1)")
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key, digits in (("seconds", 4), ("others_busy_cores", 3), ("load_1m", 2),
                            ("waited_s", 6), ("cpu_s", 6)):
            data[key] = round(data[key], digits)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Environment:
        return cls(float(data.get("seconds", 0.0)), int(data.get("cores", 1)),
                   float(data.get("others_busy_cores", 0.0)), float(data.get("load_1m", 0.0)),
                   int(data.get("blas_threads", 0)), int(data.get("openmp_threads", 0)),
                   float(data.get("waited_s", 0.0)), float(data.get("cpu_s", 0.0)),
                   str(data.get("sampled", "")), int(data.get("pool_threads", 0)))


class Contention:
    """Measures how much other processes got in this process's way between
    :meth:`__init__` and :meth:`stop`: the run-queue delay of this process's threads, and
    how busy other processes kept its cores."""

    def __init__(self) -> None:
        self._cpus = _affinity()
        self._wall = time.perf_counter()
        self._own = time.process_time()     # every thread of this process, BLAS's included
        self._busy = _busy_seconds(self._cpus)
        self._waited = _run_queue_seconds()
        _remember(self._cpus, self._wall, self._busy, self._own)

    def stop(self) -> Environment:
        now = time.perf_counter()
        wall = now - self._wall
        own_now = time.process_time()
        own = own_now - self._own
        busy, waited = _busy_seconds(self._cpus), _run_queue_seconds()
        counts = threads.current()
        cores = len(self._cpus)
        sampled = []
        wait = 0.0
        if waited is not None and self._waited is not None:
            wait = max(waited - self._waited, 0.0)
            sampled.append("run-queue")
        others = 0.0
        # A race too short for the 10 ms counters reads them over the latest window that is
        # long enough (it ends now, so it holds this race): a lucky race that waited little
        # on a busy machine must still see the others.
        since = ((self._wall, self._busy, self._own) if wall >= _MIN_SAMPLED_S
                 else _window_start(self._cpus, now))
        if since is None:
            # no reading old enough yet (the first races of a process): let the counters run
            # on for what the race lacked, once; only others use the cores meanwhile
            time.sleep(_MIN_SAMPLED_S - wall)
            now, own_now = time.perf_counter(), time.process_time()
            busy = _busy_seconds(self._cpus)
            since = (self._wall, self._busy, self._own)
        if busy is not None and since is not None and since[1] is not None:
            span = now - since[0]
            others = min(max((busy - since[1]) - (own_now - since[2]), 0.0) / span,
                         float(cores))
            sampled.append("cpu-counters" if since[0] == self._wall
                           else f"cpu-counters over the last {span * 1e3:.0f} ms")
        _remember(self._cpus, now, busy, own_now)
        return Environment(wall, cores, others, _load_1m(), counts["blas"], counts["openmp"],
                           wait, own, "+".join(sampled) or "none", counts.get("pool", 0))


# Recent (wall, busy, own) readings of the counters, per CPU set: a short race reads the
# counters over a window that starts at one of them (see Contention.stop).
_RECENT: dict[tuple[int, ...], deque[tuple[float, float | None, float]]] = {}
_MAX_WINDOW_S = 2.0     # an older reading would mostly speak of before the race


def _remember(cpus: Sequence[int], wall: float, busy: float | None, own: float) -> None:
    _RECENT.setdefault(tuple(cpus), deque(maxlen=64)).append((wall, busy, own))


def _window_start(cpus: Sequence[int], now: float) -> tuple[float, float | None, float] | None:
    """The newest reading at least the counters' resolution old and at most
    :data:`_MAX_WINDOW_S` old (None: no such reading yet)."""
    for reading in reversed(_RECENT.get(tuple(cpus), ())):
        age = now - reading[0]
        if age > _MAX_WINDOW_S:
            return None
        if age >= _MIN_SAMPLED_S:
            return reading
    return None


def _run_queue_seconds() -> float | None:
    """Seconds this process's threads have waited on a run queue (ready, no core free)."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue    # a thread that ended meanwhile
    return total / 1e9


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _busy_seconds(cpus: Sequence[int]) -> float | None:
    """CPU seconds spent busy (not idle, not waiting for I/O) on ``cpus`` since boot."""
    wanted = {f"cpu{i}" for i in cpus}
    total = 0.0
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *fields = line.split()
                if name in wanted:
                    ticks = [int(v) for v in fields[:8]]
                    total += sum(ticks) - ticks[3] - ticks[4]   # less idle and iowait
    except (OSError, ValueError, IndexError):
        return None
    return total / _TICK


def _load_1m() -> float:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def run_statistics(times: Sequence[float]) -> dict[str, Any]:
    """Median, IQR, min, run count, spread (IQR / median) and Tukey outliers of ``times``."""
    q1, median, q3 = (float(v) for v in np.percentile(times, [25, 50, 75]))
    fence = q3 + 1.5 * (q3 - q1)
    return {"median_s": median, "iqr_s": q3 - q1, "min_s": float(min(times)),
            "runs": len(times), "spread": round((q3 - q1) / median, 4) if median > 0 else 0.0,
            "outliers": int(sum(t > fence for t in times))}


def assess(stats: Mapping[str, Any], environment: Environment | None) -> dict[str, Any]:
    """``stats`` with its ``environment`` and ``noise`` (the reasons it is noisy)."""
    out = dict(stats)
    reasons = []
    spread = float(stats.get("spread", 0.0))
    if spread > MAX_SPREAD:
        reasons.append(f"spread: IQR {spread:.0%} of the median")
    runs = int(stats.get("runs", 0))
    if runs >= 4 and int(stats.get("outliers", 0)) > MAX_OUTLIER_SHARE * runs:
        reasons.append(f"outliers: {stats['outliers']} of {runs} runs far above the rest")
    if environment is not None:
        out["environment"] = environment.to_dict()
        if stats.get("clock") != "device":   # the host's load does not slow a device clock
            reasons += environment.reasons()
    out["noise"] = reasons
    return out


def distortion(t: Mapping[str, Any]) -> float:
    """How many times slower than on a quiet machine ``t``'s median may be: the host's load
    for a host-clock timing, and its own spread."""
    factor = 1.0 + 2.0 * float(t.get("spread", 0.0)) if t.get("noise") else 1.0
    env = t.get("environment")
    if env and t.get("clock") != "device":
        factor *= Environment.from_dict(env).distortion()
    return factor


def bound(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The ratio of medians below which ``a`` and ``b`` cannot be told apart because of
    their noise (1.0 when both are clean: then only the statistical noise counts)."""
    return max(distortion(a), distortion(b))


def noisy(t: Mapping[str, Any]) -> bool:
    return bool(t.get("noise"))


def reasons(timings: Mapping[str, Mapping[str, Any]], labels: Sequence[str]) -> list[str]:
    """The distinct noise reasons of ``labels``' timings, each naming its labels."""
    found: dict[str, list[str]] = {}
    for label in labels:
        for reason in timings.get(label, {}).get("noise") or []:
            found.setdefault(str(reason), []).append(label)
    return [f"{', '.join(who)}: {why}" for why, who in found.items()]
