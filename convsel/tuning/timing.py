"""Time several runnable candidates fairly on a noisy machine.

Each candidate gets its warm-up runs as it arrives (:meth:`Race.enter`); one whose first run
is hopelessly slow stops there. Then :meth:`Race.run` times the rest *in rounds*, one run of
each per round, so that a burst of load from another process lands on every candidate alike
instead of on whichever was being timed. A candidate leaves the rounds once it has
``min_runs`` runs and ``min_time`` seconds of them (or ``max_runs``), or once the median of
three or more runs is ``prune_factor`` times the best median (it cannot win or tie).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Settings:
    """How long to time each candidate."""

    warmup: int = 1
    min_runs: int = 5
    min_time: float = 0.05
    max_runs: int = 100
    seed: int = 0
    prune_factor: float = 3.0


@dataclass
class _Lane:
    run: Callable[[], Any]
    times: list[float] = field(default_factory=list)
    pruned: bool = False
    done: bool = False

    @property
    def median(self) -> float:
        return float(np.median(self.times)) if self.times else float("inf")


class Race:
    """Candidates timed against each other; ``errors`` holds the ones whose run raised."""

    def __init__(self, settings: Settings, budget_s: float | None = None) -> None:
        self.settings = settings
        self.deadline = time.perf_counter() + budget_s if budget_s is not None else None
        self.lanes: dict[str, _Lane] = {}
        self.errors: dict[str, BaseException] = {}
        self._fastest_first_run = float("inf")

    @property
    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def enter(self, label: str, run: Callable[[], Any]) -> bool:
        """Warm ``run`` up; False if it was dropped (hopeless after one run), else True."""
        lane = _Lane(run)
        self.lanes[label] = lane
        for _ in range(self.settings.warmup):
            first = _timed(run)
            limit = 2 * self.settings.prune_factor * self._fastest_first_run
            self._fastest_first_run = min(self._fastest_first_run, first)
            if first > limit:  # hopeless: a cold run this slow says enough
                lane.times, lane.pruned, lane.done = [first], True, True
                lane.run = _nothing   # let its kernel (and workspace) go now
                return False
        return True

    def run(self, on_round: Callable[[int], None] | None = None) -> None:
        """Time the entered candidates in rounds until each is done or time runs out."""
        was_enabled = gc.isenabled()
        gc.disable()  # a collection inside one run would be noise, as in timeit
        try:
            rounds = 0
            while not self.out_of_time:
                active = [k for k, lane in self.lanes.items() if not lane.done]
                if not active:
                    break
                rounds += 1
                if on_round is not None:
                    on_round(rounds)
                self._round(active)
        finally:
            if was_enabled:
                gc.enable()

    def _round(self, active: list[str]) -> None:
        s = self.settings
        for label in active:
            lane = self.lanes[label]
            try:
                lane.times.append(_timed(lane.run))
            except Exception as exc:  # noqa: BLE001 - reported per candidate by the caller
                self.errors[label] = exc
                del self.lanes[label]
        best = min((lane.median for lane in self.lanes.values()), default=float("inf"))
        for label in active:
            lane = self.lanes.get(label)
            if lane is None:
                continue
            n = len(lane.times)
            if n >= s.max_runs or (n >= s.min_runs and sum(lane.times) >= s.min_time):
                lane.done = True
            elif n >= 3 and lane.median > s.prune_factor * best:
                lane.done = lane.pruned = True

    def stats(self) -> dict[str, dict[str, Any]]:
        """Median, IQR, min and run count per candidate that ran at least once."""
        out = {}
        for label, lane in self.lanes.items():
            if not lane.times:
                continue
            q1, median, q3 = np.percentile(lane.times, [25, 50, 75])
            out[label] = {"median_s": float(median), "iqr_s": float(q3 - q1),
                          "min_s": float(min(lane.times)), "runs": len(lane.times),
                          "pruned": lane.pruned}
        return out

    def cut_short(self) -> list[str]:
        """Candidates the time budget stopped before they were done."""
        return [k for k, lane in self.lanes.items() if not lane.done]


def _nothing() -> None:
    return None


def _timed(run: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0
