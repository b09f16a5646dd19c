"""Reads of the tuning database kept per process, and forgotten when what they read changes.

Answering a selection from the database (the measured policy's entry, the predicted policy's
model) costs a query and a JSON parse per call, and a model's integrity check hashes its
whole body: milliseconds. :func:`cached` keeps what was read under a :func:`token` of the
store, and reads again only when the token says it may have changed:

- SQLite: the file's and its write-ahead log's size and modification time, and the WAL index
  header (its change counter moves with every committed transaction, whoever wrote it), for
  a few microseconds of ``stat`` and ``pread``. Any change reads everything again.
- PostgreSQL: the store's change notices (:mod:`convsel.tuning.store.notify`). Every write
  transaction names what it wrote (which entries, which devices' models) in a ``NOTIFY`` as
  it commits, and one listener thread per process and store logs them
  (:mod:`convsel.tuning.store.changelog`): the token is the log's view, an attribute read.
  A value that moved only with writes it does not depend on stays: an upload merging into
  one problem's entry re-reads that entry and the answers that used it, not every answer of
  every replica. This process's own writes count at once; another replica's when its notice
  arrives, within milliseconds of the commit on a healthy link.
  Whenever the listener cannot vouch for the log (starting, the server restarting, its
  connection lost or silent for seconds), the token is one small query instead (how many
  rows entries and models hold, and the sum of their rows' transaction ids, which moves with
  every insert, update and delete), so another replica's write is seen at the next call for
  a round trip per call; a new listener connection starts a new epoch, since notices sent
  while none listened are lost. So staleness is never silent: at worst a notice's flight (a
  fraction of a millisecond on a local server), or, after a network cut nobody noticed, the
  3 s for which a heartbeat-proven connection is trusted.

What a value depends on: what its reader declares (``scope``), else what it read, recorded as
it ran: the scopes of the cached reads it made, and :func:`uses` claims; a query that went to
the server outside a declared read (:func:`read_directly`), or nothing recorded at all, makes
it depend on the whole store (any notice drops it), as every value did before. A value that
used something kept for a while elsewhere (a device class's name, resolved for a few seconds)
says so (:func:`expires`), and is read again after that long.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import TuningDatabaseError
from .db import TuningDB
from .store.changelog import Scope, View
from .store.reads import Reads, expires, read_directly, reading, uses

__all__ = ["cached", "clear", "collection", "expires", "read_directly", "token", "uses"]

# Moves with every committed insert, update or delete, also one that keeps the row count and
# every `created` (a merge into an existing entry): each new row version has a new xmin.
_SERVER_TOKEN = ("SELECT (SELECT COUNT(*) FROM entries), "
                 "(SELECT SUM(xmin::text::bigint) FROM entries), "
                 "(SELECT COUNT(*) FROM models), (SELECT SUM(xmin::text::bigint) FROM models)")
# The WAL index header SQLite keeps in the -shm file: its change counter and frame count.
_WAL_INDEX_HEADER = 48
_MAX_VALUES = 65536     # per process; cleared whole beyond (a process asking this much
                        # about distinct problems is a benchmark, not a service)

T = TypeVar("T")


@dataclass(frozen=True)
class _Kept:
    stamp: Hashable                      # the token it was read under
    value: Any
    scopes: frozenset[Scope] | None      # what it depends on; None: the whole store
    until: float = math.inf              # time.monotonic() after which it is read again


_values: dict[tuple[Hashable, ...], _Kept] = {}
_lock = threading.Lock()
_refreshing: dict[tuple[Hashable, ...], threading.Lock] = {}


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


def cached(db: TuningDB, key: tuple[Hashable, ...], read: Callable[[], T], *,
           scope: Scope | None = None) -> T:
    """``read()``'s value for ``key`` in ``db``, read again only when what it depends on
    changed (read every time where the store cannot say whether it changed). ``scope``
    declares what ``read`` reads (see :mod:`convsel.tuning.store.changelog`); without it the
    value depends on what ``read`` is recorded reading (the module docstring)."""
    try:
        now = _token(db)
    except (TuningDatabaseError, OSError):
        return read()
    full = (db.location, *key)
    kept = _values.get(full)
    if kept is not None and _still_good(full, kept, now):
        _depend(kept.scopes, kept.until)
        return kept.value     # type: ignore[no-any-return]
    value, scopes, until = _recorded(read, scope, (db.location, now))
    _keep(full, _Kept(now, value, scopes, until))
    _depend(scopes, until)
    return value


def collection(db: TuningDB, key: tuple[Hashable, ...], scope: Scope,
               read_all: Callable[[], dict[str, T]],
               read_some: Callable[[set[str]], dict[str, T]]) -> Mapping[str, T]:
    """The rows of ``scope`` (a device's entries) by problem, as ``read_all()`` returns them,
    kept like :func:`cached`; on PostgreSQL only the problems a notice named are read again
    (``read_some(problems)``: those that still exist). Whoever uses a row says so
    (:func:`uses`): the collection's own reads count for nothing in the enclosing value."""
    try:
        now = _token(db)
    except (TuningDatabaseError, OSError):
        return read_all()
    full = (db.location, *key)
    kept = _values.get(full)
    if kept is not None and kept.stamp == now:
        return kept.value     # type: ignore[no-any-return]
    with _lock:
        refreshing = _refreshing.setdefault(full, threading.Lock())
    with refreshing:     # one refresh at a time: two would race to write the same rows
        now = token(db)
        kept = _values.get(full)
        if kept is not None and kept.stamp == now:
            return kept.value     # type: ignore[no-any-return]
        named = now.log.changed_items(kept.stamp, scope) \
            if isinstance(now, View) and kept is not None and isinstance(kept.stamp, View) \
            else None
        if named is None:
            rows = _recorded(read_all, scope)[0]
        else:
            rows = kept.value     # type: ignore[union-attr]
            found = _recorded(lambda: read_some(named), scope)[0] if named else {}
            for name in named:    # in place: readers only .get() from it
                if name in found:
                    rows[name] = found[name]
                else:
                    rows.pop(name, None)
        _keep(full, _Kept(now, rows, frozenset({scope})))
    return rows


def clear(kinds: tuple[str, ...] | None = None) -> None:
    """Forget every cached read, or those of ``kinds`` (the first element of their key)."""
    with _lock:
        if kinds is None:
            _values.clear()
            return
        for full in [k for k in _values if len(k) > 1 and k[1] in kinds]:
            del _values[full]


def _still_good(full: tuple[Hashable, ...], kept: _Kept, now: Hashable) -> bool:
    if kept.until != math.inf and time.monotonic() > kept.until:
        return False
    if kept.stamp == now:
        return True
    if not (isinstance(now, View) and isinstance(kept.stamp, View)) \
            or now.log.changed(kept.stamp, kept.scopes):
        return False
    # Nothing it depends on changed: stamp it with now, so the next call is one comparison.
    _values[full] = _Kept(now, kept.value, kept.scopes, kept.until)
    return True


def _token(db: TuningDB) -> Hashable:
    """:func:`token` of ``db``, or the one the read in progress (this value is part of it)
    was taken under: an answer looks at the store once, however many cached reads it makes
    (a change since then is seen by the next call, as one just after it would be)."""
    outer = reading.get()
    if outer is not None:
        known = outer.tokens.get(db.location)
        if known is not None:
            return known
    return token(db)


def _recorded(read: Callable[[], T], scope: Scope | None,
              taken: tuple[Hashable, Hashable] | None = None,
              ) -> tuple[T, frozenset[Scope] | None, float]:
    """``read()``, what it depends on, and until when it may be kept; ``taken``: (store
    location, token) it is read under."""
    outer = reading.get()
    reads = Reads(tokens=dict(outer.tokens) if outer is not None else {})
    if taken is not None:
        reads.tokens[taken[0]] = taken[1]
    token_ = reading.set(reads)
    try:
        value = read()
    finally:
        reading.reset(token_)
    if reads.everything:
        return value, None, reads.until
    if scope is not None:     # its queries are what the scope says it reads
        return value, frozenset({scope, *reads.scopes}), reads.until
    if reads.direct or not reads.scopes:
        return value, None, reads.until
    return value, frozenset(reads.scopes), reads.until


def _depend(scopes: frozenset[Scope] | None, until: float) -> None:
    reads = reading.get()
    if reads is None:
        return
    reads.until = min(reads.until, until)
    if scopes is None:
        reads.everything = True
    else:
        reads.scopes |= scopes


def _keep(full: tuple[Hashable, ...], kept: _Kept) -> None:
    with _lock:
        if len(_values) >= _MAX_VALUES:
            _values.clear()
            _refreshing.clear()
        _values[full] = kept
