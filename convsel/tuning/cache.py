"""Reads of the tuning database kept per process, and forgotten when the store changes.

Answering a selection from the database (the measured policy's entry, the predicted policy's
model) costs a query and a JSON parse per call, and a model's integrity check hashes its
whole body: milliseconds. :func:`cached` keeps what was read under a :func:`token` of the
store, and reads again only when the token moved:

- SQLite: the file's and its write-ahead log's size and modification time, and the WAL index
  header (its change counter moves with every committed transaction, whoever wrote it), for
  a few microseconds of ``stat`` and ``pread``;
- PostgreSQL: the store's change notices (:mod:`convsel.tuning.store.notify`). Every write
  transaction sends ``NOTIFY`` as it commits, and one listener thread per process and store
  counts them: the token is that count, an attribute read. This process's own writes move it
  at once; another replica's move it when its notice arrives, within milliseconds of the
  commit on a healthy link (not at the very next call, as asking the server would).
  Whenever the listener cannot vouch for the count (starting, the server restarting, its
  connection lost or silent for seconds), the token is one small query instead (how many
  entries and models, and the newest of each), so another replica's write is seen at the
  next call for a round trip per call; a new listener connection moves the count, since
  notices sent while none listened are lost. So staleness is never silent: at worst a
  notice's flight (a fraction of a millisecond on a local server), or, after a network cut
  nobody noticed, the 3 s for which a heartbeat-proven connection is trusted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from ..errors import TuningDatabaseError
from .db import TuningDB

_SERVER_TOKEN = ("SELECT (SELECT COUNT(*) FROM entries), (SELECT MAX(created) FROM entries), "
                 "(SELECT COUNT(*) FROM models), (SELECT MAX(created) FROM models)")
# The WAL index header SQLite keeps in the -shm file: its change counter and frame count.
_WAL_INDEX_HEADER = 48
_MAX_VALUES = 65536     # per process; cleared whole beyond (a process asking this much
                        # about distinct problems is a benchmark, not a service)

T = TypeVar("T")

_values: dict[tuple[Hashable, ...], tuple[Hashable, Any]] = {}
_lock = threading.Lock()


def token(db: TuningDB) -> Hashable:
    """A value that changes whenever ``db`` may have changed (see the module docstring)."""
    if db.engine != "sqlite":
        told = db.change_token()
        if told is not None:
            return told
        return ("asked", *db.rows(_SERVER_TOKEN)[0])
    path = str(db.path)
    parts: list[Any] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(path + suffix)
        except OSError:
            parts.append(None)
            continue
        parts.append((st.st_mtime_ns, st.st_size, st.st_ino))
    try:
        fd = os.open(path + "-shm", os.O_RDONLY)
    except OSError:
        parts.append(None)
    else:
        try:
            parts.append(os.pread(fd, _WAL_INDEX_HEADER, 0))
        finally:
            os.close(fd)
    return tuple(parts)


def cached(db: TuningDB, key: tuple[Hashable, ...], read: Callable[[], T]) -> T:
    """``read()``'s value for ``key`` in ``db``, read again only when the store changed (read
    every time where the store cannot say whether it changed)."""
    try:
        now = token(db)
    except (TuningDatabaseError, OSError):
        return read()
    full = (db.location, *key)
    with _lock:
        hit = _values.get(full)
    if hit is not None and hit[0] == now:
        return hit[1]     # type: ignore[no-any-return]
    value = read()
    with _lock:
        if len(_values) >= _MAX_VALUES:
            _values.clear()
        _values[full] = (now, value)
    return value


def clear(kinds: tuple[str, ...] | None = None) -> None:
    """Forget every cached read, or those of ``kinds`` (the first element of their key)."""
    with _lock:
        if kinds is None:
            _values.clear()
            return
        for full in [k for k in _values if len(k) > 1 and k[1] in kinds]:
            del _values[full]
