"""One planted tuning entry, for the answer-cache tests on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from convsel import ConvProblem
from convsel.tuning.db import TuningEntry
from convsel.tuning.measure import decide, device_identity

P1 = ConvProblem(1, 8, 8, 32, 16, 1, 1)


def t(median: float, alg: str) -> dict[str, Any]:
    return {"algorithm": alg, "params": {}, "median_s": median, "iqr_s": 0.0, "runs": 5}


def entry(fast: str, slow: str) -> TuningEntry:
    """P1 on this machine's numpy, ``fast`` timed 3x faster than ``slow``."""
    timings = {fast: t(1e-3, fast), slow: t(3e-3, slow)}
    return TuningEntry(problem=P1, backend="numpy", device=device_identity("numpy"),
                       winner=decide(timings)[0], tie=(), timings=timings)
