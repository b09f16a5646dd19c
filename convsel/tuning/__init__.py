"""Measurements and their store: time every algorithm on this machine, keep the timings, and
report how far each policy's pick is from the fastest.

- :mod:`~convsel.tuning.db`: the tuning database (:class:`TuningDB`): entries and models, in
  SQLite or PostgreSQL (:mod:`~convsel.tuning.store`: one schema, two engines).
- :mod:`~convsel.tuning.measure`: ``measure.measure()`` times the variants of one problem
  (through :mod:`convsel.execute`, never the front door).
- :mod:`~convsel.evaluation.report`: per-layer regret of each policy against the fastest.

The "measured" policy that answers from the database is :mod:`convsel.policies.measured`.

The names below are the store's public API (the service uses no other): open a database,
where the default one is, and the device key that entries and models are stored under; and
the fleet's (:mod:`~convsel.tuning.fleet`): receive an upload, list and name device classes,
fit a class's model as a job.
Timing goes through the front door, :func:`convsel.find`.
"""

from .db import TuningDB, default_path, default_target, open_db
from .entry import IMPLEMENTATIONS_VERSION, TuningEntry
from .fleet import (
    Limits,
    UploadRefused,
    device_classes,
    get_fit_job,
    receive,
    run_fit_job,
    stop_fit_job,
    stored_class,
    submit_fit_job,
)
from .identity import device_identity
from .store import is_url

__all__ = ["IMPLEMENTATIONS_VERSION", "Limits", "TuningDB", "TuningEntry", "UploadRefused",
           "default_path", "default_target", "device_classes", "device_identity", "get_fit_job",
           "is_url", "open_db", "receive", "run_fit_job", "stop_fit_job", "stored_class",
           "submit_fit_job"]
