"""Trust, but verify (MIOpen's phrase): time a stored winner against its runner-up again and
correct or flag the entry.

A stored entry is a claim: "on this device, ``winner`` beats every other candidate beyond the
noise". It may have been made on a loaded machine, by an older driver, or by chance. For each
entry, :func:`verify_entry` races its answer (the winner, or the fastest of its tie) against
the runner-up, interleaved, with the settings given, and then:

- ``confirmed``: the same candidate wins beyond the noise of both;
- ``corrected``: the runner-up wins beyond the noise: the entry's winner changes;
- ``flagged``: neither wins beyond the noise (a tie, or noisy timings): the entry becomes a
  tie of the two with the noise named, and the measured policy lets ACL's rules break it.

The entry is stored again with the two re-timed timings (marked ``verified``) and the other
candidates' timings as they were; the pair's new race decides its winner or tie.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConvselError
from ..rules import Rules
from .db import TuningDB
from .entry import TuningEntry
from .identity import device_identity
from .measure import Measurement, Shortlist, measure, timed
from .timing import TimingSettings

STATUSES = ("confirmed", "corrected", "flagged", "skipped")


@dataclass(frozen=True)
class Verified:
    """What verifying one entry found."""

    problem: str
    status: str
    answer: str | None          # what the entry answered before
    runner_up: str | None
    now: str | None             # the winner after (None: a tie, or skipped)
    reason: str
    ratio: float | None = None  # runner-up's median / the answer's median, re-timed
    entry: TuningEntry | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem, "status": self.status, "answer": self.answer,
                "runner_up": self.runner_up, "now": self.now, "reason": self.reason,
                "ratio": None if self.ratio is None else round(self.ratio, 4)}


def contenders(entry: TuningEntry) -> tuple[str | None, str | None]:
    """The entry's answer (its winner, or its tie's fastest) and the runner-up (the next
    fastest timed candidate that was not pruned)."""
    ok = sorted(timed(entry.timings).items(), key=lambda kv: kv[1]["median_s"])
    answer = entry.winner or (entry.tie[0] if entry.tie else (ok[0][0] if ok else None))
    rest = [k for k, t in ok if k != answer and not t.get("pruned")]
    return answer, (rest[0] if rest else None)


def verify_entry(entry: TuningEntry, *, device: Any = None, rules: Rules | None = None,
                 settings: TimingSettings | None = None,
                 build: Callable[..., Any] | None = None) -> Verified:
    """Race ``entry``'s answer against its runner-up again (see the module docstring)."""
    answer, runner_up = contenders(entry)
    name = str(entry.problem)
    if answer is None or runner_up is None:
        return Verified(name, "skipped", answer, runner_up, answer,
                        "fewer than two timed candidates: nothing to verify against")
    pair = frozenset({answer, runner_up})
    try:
        m = measure(entry.problem, entry.backend, device, rules=rules, settings=settings,
                    build=build, shortlist=Shortlist(pair, "not re-timed by verify"))
    except ConvselError as exc:
        return Verified(name, "skipped", answer, runner_up, None, f"cannot time it: {exc}")
    if not pair <= set(timed(m.timings)):
        failed = sorted(pair - set(timed(m.timings)))
        why = "; ".join(f"{k}: {m.timings.get(k, {}).get('error') or m.skipped.get(k)}"
                        for k in failed)
        return Verified(name, "skipped", answer, runner_up, None, f"did not run: {why}")
    ratio = m.timings[runner_up]["median_s"] / m.timings[answer]["median_s"]
    updated = _updated(entry, m, pair)
    if m.winner == answer:
        status, reason = "confirmed", f"{answer} beat {runner_up} again, by {ratio:.2f}x"
    elif m.winner == runner_up:
        status, reason = "corrected", (f"{runner_up} beat the stored answer {answer} by "
                                       f"{1 / ratio:.2f}x beyond the noise")
    else:
        status = "flagged"
        noise = "; ".join(m.noise) or "within the statistical noise"
        reason = f"{answer} and {runner_up} cannot be told apart ({ratio:.2f}x; {noise})"
    return Verified(name, status, answer, runner_up, m.winner, reason, ratio, updated)


def _updated(entry: TuningEntry, m: Measurement, pair: frozenset[str]) -> TuningEntry:
    """``entry`` with the pair's re-timed timings, and their race's winner or tie."""
    now = time.time()
    timings = {k: dict(v) for k, v in entry.timings.items()}
    timings.update({k: {**m.timings[k], "verified": now} for k in pair})
    return TuningEntry(problem=entry.problem, backend=entry.backend, device=entry.device,
                       winner=m.winner, tie=m.tie, timings=timings, created=now)


def verify(db: TuningDB, backend: str = "numpy", device: Any = None, *,
           rules: Rules | None = None, settings: TimingSettings | None = None,
           limit: int | None = None, store: bool = True,
           on_entry: Callable[[Verified], None] | None = None,
           build: Callable[..., Any] | None = None) -> list[Verified]:
    """Verify the current entries of ``backend`` on this device (the ``limit`` oldest when
    given); with ``store``, write back every entry that was confirmed, corrected or flagged."""
    ident = device_identity(backend, device)
    entries = [e for e in db.entries(backend=backend, device=ident) if e.is_current]
    out = []
    for entry in entries[:limit]:
        result = verify_entry(entry, device=device, rules=rules, settings=settings,
                              build=build)
        if store and result.entry is not None:
            db.record(result.entry)
        if on_entry is not None:
            on_entry(result)
        out.append(result)
    return out


def summary(results: list[Verified]) -> Mapping[str, int]:
    """How many entries ended in each status."""
    return {s: sum(r.status == s for r in results) for s in STATUSES}
