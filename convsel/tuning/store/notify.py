"""Change notices for a PostgreSQL tuning store, so a process knows what changed without asking.

Every write transaction of :class:`~convsel.tuning.store.postgres.PostgresEngine` sends a
notice on ``convsel_tuning`` before it commits, naming what it wrote
(:mod:`~convsel.tuning.store.changes`): the server delivers it exactly when the commit becomes
visible, and never for a transaction rolled back. One :class:`Listener` per process and store
(a daemon thread with its own connection, ``LISTEN convsel_tuning``) counts the notices in a
:class:`~convsel.tuning.store.changelog.ChangeLog`, and this process's own commits count at once
(:func:`wrote`), so a process reads its own writes without waiting for the server's notice (its
own notice, arriving later, is not counted twice).

:meth:`Listener.token` is the log's current view, for an attribute read, and None whenever it
cannot be trusted: before the first ``LISTEN`` took, after the connection was lost (a notice
sent meanwhile is lost with it), and when the connection has not proved itself for
:data:`TRUSTED_FOR_S` (a network cut leaves a quiet connection looking healthy: a ``SELECT 1``
every :data:`HEARTBEAT_S` proves it). None tells the caller to ask the server instead. A new
connection starts a new epoch of the log, since notices sent while none was listening are
lost. A view names the process and the listener too, so neither a forked child (whose listener
is its own: threads do not survive fork) nor a later listener can match a value read under
another.

The listener stops once no open engine uses it, and never keeps the interpreter alive.
"""

from __future__ import annotations

import itertools
import os
import selectors
import threading
import time
import uuid
import weakref
from typing import Any

from .changelog import ChangeLog, View
from .changes import Change, parse

CHANNEL = "convsel_tuning"
NOTIFY = f"NOTIFY {CHANNEL}"     # a notice naming nothing: readers take it as "everything"
SEND = "SELECT pg_notify(%s, %s)"
APPLICATION_NAME = "convsel-tuning-listener"   # how operators (and tests) find it on the server
HEARTBEAT_S = 1.0
TRUSTED_FOR_S = 3.0   # three missed heartbeats: a loaded machine may delay one or two
RETRY_S = (0.1, 0.25, 0.5, 1.0, 2.0)   # waits between tries to connect again, then the last
# A cut connection is found by the kernel within seconds, not the default two hours, so the
# thread gets to reconnect; the token stopped being trusted already (TRUSTED_FOR_S).
_LINK = {"application_name": APPLICATION_NAME, "keepalives": 1, "keepalives_idle": 5,
         "keepalives_interval": 2, "keepalives_count": 3}

_serials = itertools.count(1)
_listeners: dict[tuple[int, str], Listener] = {}
_registry = threading.Lock()


class Listener:
    """Counts the store's change notices; see the module docstring."""

    def __init__(self, url: str, connect: Any, kwargs: dict[str, Any]):
        self.pid = os.getpid()
        self.serial = next(_serials)
        self.connections = 0     # LISTEN connections made so far (the first one, then retries)
        self.notices = 0         # notices received from the server
        self.drops = 0           # connections lost or refused (counted once untrusted)
        self.last_error = ""
        self.stopped = False
        self._url = url
        self._connect = connect
        self._kwargs = {**kwargs, **_LINK, "autocommit": True}
        self.log = ChangeLog((self.pid, self.serial))
        self._proved_at = -float("inf")    # time.monotonic() of the last proof; -inf while down
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=APPLICATION_NAME, daemon=True)

    # -- what readers ask -------------------------------------------------------------------------
    def token(self) -> View | None:
        """The log's view, named by process and listener; None while it cannot be trusted."""
        if time.monotonic() - self._proved_at > TRUSTED_FOR_S:
            return None
        return self.log.view

    @property
    def listening(self) -> bool:
        return self.token() is not None

    # -- users ----------------------------------------------------------------------------------
    def use(self, engine: Any) -> None:
        self._users.add(engine)

    def release(self, engine: Any) -> None:
        with _registry:
            self._users.discard(engine)

    def _unused(self) -> bool:
        with _registry:
            if not self._users or self._stop.is_set():
                self.stopped = True
        return self.stopped

    # -- the thread -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._unused():
            try:
                self._listen()
                failures = 0      # it connected, then lost the connection: retry at once-ish
            except Exception as exc:   # noqa: BLE001 (any failure: the token is untrusted, retry)
                self.last_error = f"{type(exc).__name__}: {exc}".strip()
            finally:
                self._proved_at = -float("inf")
                self.drops += 1
            self._stop.wait(RETRY_S[min(failures, len(RETRY_S) - 1)])
            failures += 1

    def _listen(self) -> None:
        with self._connect(self._url, **self._kwargs) as con:
            # A handler, not con.notifies(): it sees notices that arrive during the heartbeat
            # query too, in every psycopg 3 release.
            con.add_notify_handler(self._noticed)
            con.execute(f"LISTEN {CHANNEL}")
            self.connections += 1
            self.log.new_epoch()                 # what was sent while none listened is lost
            self._proved_at = time.monotonic()   # after: readers see the new epoch
            with selectors.DefaultSelector() as readable:
                readable.register(con.fileno(), selectors.EVENT_READ)
                while not self._unused():
                    # Wake on a notice or a closed connection, else after a heartbeat's time;
                    # the query reads what arrived (the handler counts it) and proves the
                    # connection.
                    readable.select(HEARTBEAT_S)
                    con.execute("SELECT 1")
                    self._proved_at = time.monotonic()

    def _noticed(self, notice: Any) -> None:
        self.notices += 1
        change = parse(notice.payload)
        if not change.writer or change.writer != writer(self._url):
            self.log.apply(change)     # this process's own commits were counted by wrote()
        self._proved_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()


def listener(engine: Any, url: str, connect: Any, kwargs: dict[str, Any]) -> Listener | None:
    """This process's listener for ``url`` (started if there is none), now used by ``engine``;
    None where no thread can be started (the caller then asks the server every time)."""
    key = (os.getpid(), url)
    with _registry:
        found = _listeners.get(key)
        if found is None or found.stopped:
            found = Listener(url, connect, kwargs)
            try:
                found.start()
            except RuntimeError:     # "can't start new thread": at the process's limit
                return None
            _listeners[key] = found
        found.use(engine)
        return found


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock at the fork; the child's is free. The
    # parent's listeners stay in the table, unused (keyed by its pid): their connections are
    # the parent's, not for the child to close.
    global _registry
    _registry = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def wrote(url: str, change: Change) -> None:
    """This process committed ``change`` to ``url``: its readers must not wait for the
    notice."""
    found = _listeners.get((os.getpid(), url))
    if found is not None:
        found.log.apply(change)


_writers: dict[tuple[int, str], str] = {}


def writer(url: str) -> str:
    """What this process's notices to ``url`` are signed with, so that its listener knows
    them for its own (per URL: a listener of another URL naming the same database has not
    counted them)."""
    key = (os.getpid(), url)
    found = _writers.get(key)
    if found is None:
        found = _writers.setdefault(key, uuid.uuid4().hex[:12])
    return found
