"""Learned cost models: predict each algorithm's time on a shape never measured, from this
machine's own timings in the tuning database.

- :mod:`.features`: a candidate (problem, algorithm, variant) as numbers.
- :mod:`.models`: the model families (roofline least squares, the analytic cost model of
  :mod:`.analytic`, LightGBM trees, their combinations in :mod:`.combined`), stored as data;
  :mod:`.families` names them.
- :mod:`.fit`: fit from the database's timings, compare families by held-out regret and by
  leave-one-family-out extrapolation; keep one only if it beats ACL's rules.
- :mod:`.domain` and :mod:`.trust`: what a model has seen, and whether what fit measured of
  its extrapolation speaks for answering a shape outside that.
- :mod:`.stored`: a model read back from the database, ranking a problem's candidates.

The "predicted" policy (:mod:`convsel.policies.predicted`) answers from these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..tuning.db import TuningDB


def model_families() -> tuple[str, ...]:
    """The names of every model family ``fit`` can compare (whether or not its learner is
    installed here): what the CLI's ``--family`` and the service's ``families`` accept."""
    from .families import FAMILIES

    return tuple(FAMILIES)


def fit_and_store(db: TuningDB, backend: str, device: Mapping[str, str], *,
                  newest: int | None = None, families: Sequence[str] | None = None,
                  **options: Any) -> dict[str, Any]:
    """Fit the cost model of ``backend`` on ``device`` (a device identity, as
    :func:`convsel.tuning.device_identity` gives) from ``db``'s entries measured by this
    convsel (the ``newest`` of them, when given) and store it in ``db``, where the "predicted"
    policy finds it. ``options`` go to :func:`.fit.fit` (``folds``, ``statistic``).

    Returns the stored record, as :meth:`TuningDB.load_model` reads it back: ``family``,
    ``model``, ``meta`` (the model's id, training data and held-out regret per family) and
    ``created``.
    """
    # scipy and the model families load only when a model is fitted
    from .fit import fit
    from .stored import model_key

    entries = [e for e in db.entries(backend=backend, device=device) if e.is_current]
    if newest is not None:
        entries = entries[-newest:]
    result = fit(entries, families=families, device=device, **options)
    key = model_key(backend, device)
    db.save_model(key, result.family, result.model.to_data(), result.meta)
    stored = db.load_model(key)
    if stored is None:   # save_model raises when it cannot write: this is not a user error
        raise RuntimeError(f"the model saved for {backend} on {device} cannot be read back")
    return stored


__all__ = ["fit_and_store"]
