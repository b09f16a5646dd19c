"""Several measurements of one problem on one device class, as one entry.

Devices of one class (same backend, vendor, name and driver) time the same shape on
different machines, on different days, under different load. Their entries combine into
robust statistics per candidate:

- ``median_s``: the median of the uploads' medians (one slow machine cannot move it much);
- ``iqr_s``: the pooled spread: the uploads' own IQRs pooled by their runs, combined (root
  sum of squares) with the spread *between* their medians (twice the median absolute
  deviation, an IQR for normal scatter), because the difference between two machines of one
  class is noise too when deciding a winner;
- ``min_s``: the fastest run seen; ``runs``: all runs; ``uploads``: how many were combined.

Other fields of a candidate (its clock, its timing quality) come from the upload whose median
is nearest the combined one. The winner is then decided from the combined timings by the
tuner's own rule (:func:`convsel.tuning.measure.decide`).

Two uploads that each name a winner, and whose timings each put their own winner ahead of the
other's beyond the noise, disagree: :func:`dispute` says why, and the new upload is kept
aside (flagged) rather than allowed to overwrite the stored answer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..entry import TuningEntry
from ..measure import decide

STAT_FIELDS = ("median_s", "iqr_s", "min_s", "runs")


def combine(observations: Sequence[TuningEntry]) -> TuningEntry:
    """One entry from measurements of one key (the newest first gives ties of other fields to
    the newest): one observation is returned as it is."""
    if not observations:
        raise ValueError("nothing to combine")
    if len(observations) == 1:
        return observations[0]
    newest = max(observations, key=lambda o: o.created)
    labels = list(dict.fromkeys(label for o in observations for label in o.timings))
    timings: dict[str, dict[str, Any]] = {}
    for label in labels:
        timed = [o.timings[label] for o in observations
                 if "median_s" in o.timings.get(label, {})]
        if timed:
            timings[label] = combined_stats(timed)
        else:   # never timed: the newest word on why (an error, or skipped)
            have = [o for o in observations if label in o.timings]
            timings[label] = dict(max(have, key=lambda o: o.created).timings[label])
    winner, tie = decide(timings)
    return TuningEntry(problem=newest.problem, backend=newest.backend, device=newest.device,
                       winner=winner, tie=tie, timings=timings,
                       convsel_version=newest.convsel_version,
                       implementations_version=newest.implementations_version,
                       created=newest.created)


def combined_stats(timed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One candidate's statistics from several timings of it (see the module docstring)."""
    medians = [float(t["median_s"]) for t in timed]
    median = statistics.median(medians)
    runs = [max(int(t.get("runs", 1)), 1) for t in timed]
    within = math.sqrt(sum(r * float(t["iqr_s"]) ** 2 for r, t in zip(runs, timed, strict=True))
                       / sum(runs))
    between = 2.0 * statistics.median(abs(m - median) for m in medians)
    nearest = min(timed, key=lambda t: abs(float(t["median_s"]) - median))
    out = dict(nearest)
    out.update({"median_s": median, "iqr_s": math.hypot(within, between),
                "min_s": min(float(t.get("min_s", t["median_s"])) for t in timed),
                "runs": sum(runs), "uploads": sum(int(t.get("uploads", 1)) for t in timed),
                "between_s": between})
    if "spread" in out and median > 0:   # the timing-quality field (IQR over median)
        out["spread"] = out["iqr_s"] / median
    # a candidate pruned in every upload stays pruned: it never ties (measure.decide)
    out["pruned"] = all(bool(t.get("pruned")) for t in timed)
    return out


def beats(timings: Mapping[str, Mapping[str, Any]], a: str, b: str) -> bool:
    """Whether ``a`` beats ``b`` beyond the noise in these timings (both timed)."""
    pair = {k: timings[k] for k in (a, b) if "median_s" in timings.get(k, {})}
    if len(pair) < 2:
        return False
    winner, _ = decide(pair)
    return winner == a


def dispute(stored: TuningEntry, incoming: TuningEntry) -> str:
    """Why ``incoming`` contradicts ``stored`` beyond the noise ("" when it does not): each
    names a winner, and each one's timings put its own winner ahead of the other's."""
    a, b = stored.winner, incoming.winner
    if a is None or b is None or a == b:
        return ""
    if not (beats(stored.timings, a, b) and beats(incoming.timings, b, a)):
        return ""
    return (f"its winner {b} ({_ms(incoming.timings[b])} against {a} "
            f"{_ms(incoming.timings[a])}) contradicts the stored winner {a} "
            f"({_ms(stored.timings[a])} against {b} {_ms(stored.timings[b])}), each beyond "
            "the noise")


def _ms(t: Mapping[str, Any]) -> str:
    return f"{float(t['median_s']) * 1e3:.3g} ms"
