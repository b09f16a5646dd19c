"""Fitting a device class's cost model off the request path, as a job any replica can report on.

:func:`submit` records a job in the store (``fit_jobs``); the service runs :func:`run` in a
worker *process* (fitting is seconds of CPU: never on a request's thread or the event loop),
which fits the class's model from the store's entries, stores it where every replica's
predicted policy reads it, and records the outcome; :func:`get` reads the job back, from any
process sharing the store. A newly fitted model replaces the class's model unless it was
rejected (it did not beat ACL's rules) while the stored one was not: the newest *accepted*
model is the one in use.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import InvalidProblemError
from ..db import TuningDB, open_db
from ..entry import DEVICE_FIELDS, TuningEntry, problem_key

STATUSES = ("queued", "running", "done", "failed")
# A job still running this long after it was submitted lost its worker (a killed replica).
STALE_S = 3600.0
_COLUMNS = ("id", "backend", "vendor", "device", "driver", "requester", "status", "submitted",
            "finished", "result")


def submit(db: TuningDB, backend: str, ident: Mapping[str, str], requester: str, *,
           newest: int | None = None) -> dict[str, Any]:
    """Record a queued fit of ``backend`` on the device ``ident``; returns the job.

    Raises
    ------
    InvalidProblemError
        (field ``entries``) The store holds timings of too few problems of that device to
        fit (counted among the ``newest`` entries, when given): no job is recorded.
    """
    from ...learn.fit import MIN_PROBLEMS  # the learners stay out of the server's process

    problems = len({problem_key(e.problem) for e in _current(db, backend, ident, newest)})
    if problems < MIN_PROBLEMS:
        raise InvalidProblemError(
            "entries", problems, f"a model needs timings of at least {MIN_PROBLEMS} problems "
            f"on this backend and device; the store has {problems}: run `convsel tune --sample "
            "200` or upload timings first")
    job_id = uuid.uuid4().hex[:16]
    row = (job_id, backend, *(str(ident[k]) for k in DEVICE_FIELDS), requester, "queued",
           time.time(), None, None)
    with db.transaction("no fit job was started") as tx:
        tx.execute(f"INSERT INTO fit_jobs ({', '.join(_COLUMNS)}) VALUES "
                   f"({', '.join('?' * len(_COLUMNS))})", row)
    found = get(db, job_id)
    assert found is not None
    return found


def _current(db: TuningDB, backend: str, ident: Mapping[str, str],
             newest: int | None) -> list[TuningEntry]:
    """The entries of this convsel on the device, the ``newest`` of them when given."""
    entries = [e for e in db.entries(backend=backend, device=ident) if e.is_current]
    return entries if newest is None else entries[-newest:]


def get(db: TuningDB, job_id: str) -> dict[str, Any] | None:
    """The job ``job_id`` (JSON-ready), or None when the store has no such job."""
    if db.schema_version < 3:
        return None
    rows = db.rows(f"SELECT {', '.join(_COLUMNS)} FROM fit_jobs WHERE id=?", (job_id,))
    return _job(rows[0]) if rows else None


def latest_jobs(db: TuningDB) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each device class's most recent job, by (backend, vendor, name, driver)."""
    if db.schema_version < 3:
        return {}
    rows = db.rows(f"SELECT {', '.join(_COLUMNS)} FROM fit_jobs ORDER BY submitted")
    return {tuple(row[1:5]): _job(row) for row in rows}


def _job(row: Sequence[Any]) -> dict[str, Any]:
    job = dict(zip(_COLUMNS, row, strict=True))
    result = json.loads(job.pop("result")) if job["result"] else None
    status = job["status"]
    if status in ("queued", "running") and time.time() - float(job["submitted"]) > STALE_S:
        status = "lost"   # its worker died (a killed replica): submit it again
    return {"id": job["id"], "status": status, "backend": job["backend"],
            "device": {"vendor": job["vendor"], "name": job["device"],
                       "driver": job["driver"]},
            "requester": job["requester"], "submitted": job["submitted"],
            "finished": job["finished"], "result": result}


def _finish(db: TuningDB, job_id: str, status: str, result: Mapping[str, Any] | None) -> None:
    with db.transaction("the job's outcome was not recorded") as tx:
        tx.execute("UPDATE fit_jobs SET status=?, finished=?, result=? WHERE id=?",
                   (status, time.time() if status in ("done", "failed") else None,
                    json.dumps(result, allow_nan=False) if result is not None else None,
                    job_id))


def stop(db: TuningDB, job_id: str, why: str) -> None:
    """Mark the job failed with ``why``, unless it finished (its worker was stopped)."""
    with db.transaction("the job's outcome was not recorded") as tx:
        tx.execute("UPDATE fit_jobs SET status='failed', finished=?, result=? WHERE id=? AND "
                   "status IN ('queued', 'running')",
                   (time.time(), json.dumps({"error": why}), job_id))


def run(target: str | None, job_id: str, families: Sequence[str] | None = None,
        newest: int | None = None) -> str:
    """Run the job ``job_id`` of the store at ``target`` (path or URL): the worker process's
    entry point. Returns the job's final status; the outcome is in the store."""
    db = open_db(target)
    job = get(db, job_id)
    if job is None:
        return "failed"
    _finish(db, job_id, "running", None)
    try:
        result = fit_class(db, job["backend"], job["device"], families=families,
                           newest=newest)
    except (InvalidProblemError, ValueError, ArithmeticError) as exc:
        _finish(db, job_id, "failed", {"error": str(exc)[:2000]})
        return "failed"
    except Exception as exc:  # noqa: BLE001 - a worker reports every failure in the job
        _finish(db, job_id, "failed", {"error": f"{type(exc).__name__}: {exc}"[:2000]})
        return "failed"
    _finish(db, job_id, "done", result)
    return "done"


def fit_class(db: TuningDB, backend: str, ident: Mapping[str, str], *,
              families: Sequence[str] | None = None,
              newest: int | None = None) -> dict[str, Any]:
    """Fit the model of ``backend`` on ``ident`` from ``db``'s entries of this convsel (the
    ``newest`` of them, when given) and store it, unless it was rejected while the stored one
    was accepted; returns what was fitted, whether it is in use, and why."""
    from ...learn.fit import fit  # scipy and the learners load in the worker only
    from ...learn.stored import model_key

    result = fit(_current(db, backend, ident, newest), families=families, device=ident)
    key = model_key(backend, ident)
    previous = db.load_model(key)
    accepted = result.meta.get("accepted") is not False
    kept = previous["meta"].get("id") if previous is not None \
        and previous["meta"].get("accepted") is not False and not accepted else None
    kept_previous = kept is not None
    if not kept_previous:
        db.save_model(key, result.family, result.model.to_data(), result.meta)
    meta = result.meta
    return {"family": result.family, "id": meta["id"], "accepted": accepted,
            "in_use": not kept_previous and accepted,
            "why": ("rejected (it did not beat ACL's rules); the stored model "
                    f"{kept} stays in use" if kept_previous else
                    "rejected: stored, the policies answer from ACL's rules" if not accepted
                    else "stored: every replica's predicted policy answers from it"),
            "training_problems": meta.get("training_problems"),
            "training_rows": meta.get("training_rows"), "held_out": meta.get("held_out"),
            "fit_seconds": meta.get("fit_seconds")}


__all__ = ["STATUSES", "fit_class", "get", "latest_jobs", "run", "stop", "submit"]
