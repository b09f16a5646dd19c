"""Time several runnable candidates fairly on a noisy, shared machine.

Each candidate gets its warm-up runs as it arrives (:meth:`Race.enter`); one whose first run
is hopelessly slow runs once more when every candidate has arrived, and stops there if that
run is hopeless too (two runs back to back could both land in one burst of another process's
load, or one slow spell of a shared GPU). :meth:`Race.run` then times the rest
in ``rounds``: in each round every candidate runs a *block* of consecutive timed runs, its
share of ``min_runs`` and ``min_time``. Blocks keep a candidate's thread pool (BLAS) hot, as
it is when a layer runs; rounds spread each candidate over the whole measurement, so a burst
of load from another process does not land on one candidate only. A fast candidate starts
each block with one untimed run, which absorbs waking its threads up (on a busy 2-core
machine a sleeping BLAS thread waits for the scheduler's next tick: 4-8 ms, more than the
whole convolution). A candidate whose *fastest* run is ``prune_factor`` times slower than the
best median in two rounds leaves: contention only adds time, so it cannot win or tie (one
slow round alone may be another process's burst).

A run is timed by the host's clock around it, unless it times itself: a device run returns
the seconds its profiling events span (:meth:`Race.enter` with ``self_timed``), which leaves
out the host's launch and wait and the input and output transfers, equal for every candidate.

While the rounds run, :class:`~convsel.tuning.quality.Contention` measures how busy other
processes keep this process's cores: :attr:`Race.environment` (see
:mod:`convsel.tuning.quality`), which every timing of the race records with its spread.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import arguments
from ..errors import InvalidProblemError
from .quality import Contention, Environment, run_statistics

CLOCKS = ("auto", "wall", "device")

# Below this median a block starts with an untimed run (cheap, and it matters: waking a
# sleeping BLAS thread on a busy machine costs milliseconds).
_REWARM_BELOW_S = 0.01


@dataclass(frozen=True)
class TimingSettings:
    """How long to time each candidate (totals over all rounds)."""

    warmup: int = 1
    min_runs: int = 8
    min_time: float = 0.08
    max_runs: int = 96
    rounds: int = 4
    seed: int = 0
    prune_factor: float = 3.0
    # "auto": the device's own clock where the prepared kernel offers one (OpenCL profiling
    # events on device-resident data), else the host's; "wall": always the host's, transfers
    # included; "device": the device's or the candidate is skipped.
    clock: str = "auto"
    # BLAS and OpenMP threads while timing (threadpoolctl); None: as the process has them.
    # Either way each timing records the threads it ran with (see convsel.threads).
    threads: int | None = None
    # A race whose tie may be the noise's doing (a tied timing is noisy) is timed again, its
    # tied candidates only, interleaved, with twice the runs, up to this many times.
    retimes: int = 2

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise InvalidProblemError("clock", self.clock, f"one of {', '.join(CLOCKS)}")
        if self.threads is not None:
            arguments.whole_number("threads", self.threads, 1,
                                   "or None for the process's own setting")
        arguments.whole_number("retimes", self.retimes, 0)

    def longer(self) -> TimingSettings:
        """These settings with twice the runs and time, in two more rounds (a re-time)."""
        return dataclasses.replace(self, warmup=max(self.warmup, 1), min_runs=2 * self.min_runs,
                                   min_time=2 * self.min_time, max_runs=2 * self.max_runs,
                                   rounds=self.rounds + 2)


@dataclass
class _Lane:
    run: Callable[[], Any]
    self_timed: bool = False    # run() returns its own duration in seconds
    suspect: bool = False       # the warm-up run was hopeless: run() checks it once more
    times: list[float] = field(default_factory=list)
    first: float = math.inf     # the warm-up run, the only estimate before the first block
    block_start: int = 0        # index in times where this round's block began
    slow_rounds: int = 0
    pruned: bool = False
    done: bool = False

    @property
    def median(self) -> float:
        return float(statistics.median(self.times)) if self.times else math.inf

    @property
    def fast(self) -> bool:
        return (self.median if self.times else self.first) < _REWARM_BELOW_S


class Race:
    """Candidates timed against each other; ``errors`` holds the ones whose run raised."""

    def __init__(self, settings: TimingSettings, budget_s: float | None = None) -> None:
        self.settings = settings
        self.deadline = time.perf_counter() + budget_s if budget_s is not None else None
        self.lanes: dict[str, _Lane] = {}
        self.errors: dict[str, BaseException] = {}
        self._fastest_first_run = math.inf
        self.environment: Environment | None = None   # measured by run()

    @property
    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def enter(self, label: str, run: Callable[[], Any], *, self_timed: bool = False) -> None:
        """Warm ``run`` up. With ``self_timed``, ``run()`` returns the seconds it took by its
        own clock."""
        lane = _Lane(run, self_timed)
        self.lanes[label] = lane
        for _ in range(self.settings.warmup):
            lane.first = first = _sample(lane)
            limit = self._hopeless_above()
            self._fastest_first_run = min(self._fastest_first_run, first)
            if first > limit:
                lane.suspect = True
                return

    def _hopeless_above(self) -> float:
        return 2 * self.settings.prune_factor * self._fastest_first_run

    def _recheck_suspects(self) -> None:
        """A candidate whose warm-up was hopeless runs once more, now that the others have
        run in between; hopeless again, it is dropped with that one run recorded."""
        limit = self._hopeless_above()
        for label, lane in list(self.lanes.items()):
            if not lane.suspect:
                continue
            lane.suspect = False
            try:
                again = _sample(lane)
            except Exception as exc:  # noqa: BLE001 - reported per candidate by the caller
                self.errors[label] = exc
                del self.lanes[label]
                continue
            if min(lane.first, again) > limit:
                lane.times, lane.pruned, lane.done = [min(lane.first, again)], True, True
                lane.run = _nothing   # let its kernel (and workspace) go now

    def run(self, on_round: Callable[[int], None] | None = None) -> None:
        """Time the entered candidates round by round until each is done or time runs out."""
        was_enabled = gc.isenabled()
        gc.disable()  # a collection inside one run would be noise, as in timeit
        contention = Contention()
        try:
            self._recheck_suspects()
            for number in range(1, max(1, self.settings.rounds) + 1):
                active = [k for k, lane in self.lanes.items() if not lane.done]
                if not active or self.out_of_time:
                    break
                if on_round is not None:
                    on_round(number)
                for label in active:
                    self._block(label, number)
                self._prune(active)
        finally:
            if was_enabled:
                gc.enable()
            self.environment = contention.stop()
        if not self.out_of_time:   # else the unfinished ones are cut short
            for lane in self.lanes.values():
                lane.done = True

    def _block(self, label: str, number: int) -> None:
        """This round's share of runs for one candidate, consecutively."""
        s, lane = self.settings, self.lanes[label]
        share = number / max(1, s.rounds)
        runs_due = min(math.ceil(s.min_runs * share), math.ceil(s.max_runs * share))
        time_due = s.min_time * share
        lane.block_start = len(lane.times)
        try:
            if lane.fast:
                lane.run()
            while (len(lane.times) < runs_due or sum(lane.times) < time_due) and \
                    len(lane.times) < math.ceil(s.max_runs * share):
                lane.times.append(_sample(lane))
                if self.out_of_time:
                    return
        except Exception as exc:  # noqa: BLE001 - reported per candidate by the caller
            self.errors[label] = exc
            del self.lanes[label]

    def _prune(self, active: list[str]) -> None:
        """A candidate whose fastest run of this round is ``prune_factor`` times the best
        median, for the second round, leaves: one slow round can be another process's burst
        landing on its whole block."""
        best = min((lane.median for lane in self.lanes.values()), default=math.inf)
        for label in active:
            lane = self.lanes.get(label)
            if lane is None or not lane.times[lane.block_start:]:
                continue
            if min(lane.times[lane.block_start:]) > self.settings.prune_factor * best:
                lane.slow_rounds += 1
            if lane.slow_rounds >= 2:
                lane.done = lane.pruned = True
                lane.run = _nothing

    def stats(self) -> dict[str, dict[str, Any]]:
        """Median, IQR, min, run count, spread and outliers per candidate that ran at least
        once (:func:`~convsel.tuning.quality.run_statistics`), and whether it was pruned."""
        return {label: {**run_statistics(lane.times), "pruned": lane.pruned}
                for label, lane in self.lanes.items() if lane.times}

    def cut_short(self) -> list[str]:
        """Candidates the time budget stopped before they were done."""
        return [k for k, lane in self.lanes.items() if not lane.done]


def _nothing() -> None:
    return None


def _sample(lane: _Lane) -> float:
    if lane.self_timed:
        return float(lane.run())
    t0 = time.perf_counter()
    lane.run()
    return time.perf_counter() - t0
