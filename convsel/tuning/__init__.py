"""Measured selection: time every algorithm on this machine, remember the winner, and report
how far each policy's pick is from the fastest.

- :mod:`~convsel.tuning.db`: the SQLite tuning database (:class:`TuningDB`).
- :mod:`~convsel.tuning.measure`: ``measure.measure()`` times the candidates of one problem.
- :mod:`~convsel.tuning.policy`: ``select(..., policy="measured")`` answers from the database.
- :mod:`~convsel.tuning.report`: per-layer regret of each policy against the fastest.
"""

from .db import TuningDB, default_path
from .entry import IMPLEMENTATIONS_VERSION, TuningEntry
from .measure import Measurement, Settings
from .policy import select_measured

__all__ = [
    "IMPLEMENTATIONS_VERSION",
    "Measurement",
    "Settings",
    "TuningDB",
    "TuningEntry",
    "default_path",
    "select_measured",
]
