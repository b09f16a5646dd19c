"""The SQLite engine: one file, WAL mode, short connections, ``BEGIN IMMEDIATE`` writes.

Readers never block the writer (WAL) and writers queue on the busy timeout, so several tuners
and the service can share one file on one machine. An unwritable file is opened read-only.

One engine lives as long as the process (``open_db`` caches it), so it survives what happens
to the file meanwhile: a file truncated or deleted gets its tables again on the next call; a
file that stops being writable (a read-only remount, a full disk) is read read-only and looked
at again before the next write; a file whose pages were overwritten fails SQLite's
``quick_check`` and is refused for writing and reported by :meth:`check_intact`.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..._version import __version__
from ...errors import TuningDatabaseError
from . import schema
from .schema import ENV_VAR

T = TypeVar("T")

# Below this much free space an I/O error is the disk being full: SQLite reports a failed
# extension of its shared-memory file (-shm) as SQLITE_IOERR, not SQLITE_FULL.
_FULL_DISK_BYTES = 1 << 20


class SQLiteEngine:
    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0,
                 create: bool = True):
        self.path = Path(path).expanduser()
        self.location = str(self.path)
        self.timeout = timeout
        self.read_only_reason = ""
        self.schema_version = 0
        self._create = create
        self._mode = "rw"     # how calls open the file: rw, or read-only as ro or immutable
        self._lock = threading.RLock()   # one switch between read-write and read-only at a time
        self._intact_state: tuple[int, ...] | None = None   # file state at the last good check
        if not create and not self.path.exists():
            raise TuningDatabaseError(missing_message(self.path))
        with self._lock:
            self._open_and_check()

    @property
    def writable(self) -> bool:
        return self._mode == "rw"

    # -- opening ------------------------------------------------------------------------------
    def _open_and_check(self) -> None:
        if self._create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self._open_read_only(f"cannot create {self.path.parent}: {exc.strerror or exc}")
                return
        try:
            with closing(self._connect("rwc" if self._create else "rw")) as con:
                self._initialise(con)
                _probe_write(con)
        except sqlite3.DatabaseError as exc:
            if _kind(exc, self.path) not in _READ_ONLY_KINDS:
                raise self._error(exc) from exc
            self._open_read_only(self._why(exc))
            return
        self._mode, self.read_only_reason = "rw", ""

    def _open_read_only(self, reason: str) -> None:
        if not self.path.exists():
            raise TuningDatabaseError(f"tuning database {self.path}: {reason}, and no database "
                                      f"exists there to read; set {ENV_VAR} to a writable path")
        for mode in ("ro", "immutable"):
            # A WAL file in a read-only directory (or on a full disk) cannot get its -shm
            # file; immutable reads it without one (and without seeing later writes by
            # others, which is acceptable).
            try:
                with closing(self._connect(mode)) as con:
                    self._check(con)
            except sqlite3.OperationalError as exc:
                if mode == "immutable" or _kind(exc, self.path) not in _READ_ONLY_KINDS:
                    raise self._error(exc) from exc
                continue
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
            self._mode, self.read_only_reason = mode, reason
            return

    def _connect(self, mode: str | None = None) -> sqlite3.Connection:
        mode = mode or self._mode
        # mode=rw never creates: a file deleted under a running process is noticed (and made
        # again only by an engine allowed to create), not silently replaced by an empty one.
        query = {"rwc": "mode=rwc", "rw": "mode=rw", "ro": "mode=ro",
                 "immutable": "immutable=1"}[mode]
        con = _connect(f"{self.path.resolve().as_uri()}?{query}", self.timeout, uri=True)
        try:
            if mode in ("rwc", "rw"):
                con.execute("PRAGMA journal_mode=WAL")   # readers never block the writer
            con.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        except BaseException:
            con.close()
            raise
        return con

    def _initialise(self, con: sqlite3.Connection) -> None:
        if not _tables(con):
            with _transaction(con):
                if not _tables(con):   # another process may have created them meanwhile
                    for statement in schema.create_statements(self.name):
                        con.execute(statement)   # executescript would COMMIT first
                    con.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                                    schema.META_ROWS)
        if self._check(con) < schema.SCHEMA_VERSION:
            with _transaction(con):
                # Read again under the write lock: another process may have migrated already.
                for statement in schema.migration_statements(self._check(con), self.name):
                    con.execute(statement)
                con.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                            (str(schema.SCHEMA_VERSION),))
            self.schema_version = schema.SCHEMA_VERSION

    def _check(self, con: sqlite3.Connection) -> int:
        tables = _tables(con)
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) \
            if "meta" in tables else {}
        self.schema_version = schema.check(str(self.path), tables, meta, what="an SQLite file",
                                           convsel_version=__version__)
        return self.schema_version

    # -- faults -------------------------------------------------------------------------------
    def _why(self, exc: sqlite3.Error) -> str:
        why = _WHY[_kind(exc, self.path)].format(timeout=self.timeout,
                                                 free=_free_bytes(self.path))
        return f"{exc}: {why}"

    def _error(self, exc: sqlite3.Error) -> TuningDatabaseError:
        return TuningDatabaseError(f"tuning database {self.path} cannot be used: "
                                   f"{self._why(exc)}; or set {ENV_VAR} / --db to another path")

    def _recover(self, exc: sqlite3.Error) -> bool:
        """After ``exc``, make the engine fit for another try; False when it cannot be."""
        kind = _kind(exc, self.path)
        with self._lock:
            if kind == "gone" and self.writable:
                if not self._create:
                    raise TuningDatabaseError(missing_message(self.path)) from exc
                self._open_and_check()   # truncated or deleted: the tables again
                return True
            if kind in _READ_ONLY_KINDS and self.writable:
                self._open_read_only(self._why(exc))
                return True
        return False

    def _retrying(self, work: Callable[[], T], *, writes: bool = False) -> T:
        for attempt in (1, 2):
            try:
                return work()
            except sqlite3.DatabaseError as exc:
                if attempt == 2 or not self._recover(exc):
                    raise self._error(exc) from exc
                if writes and not self.writable:
                    raise self._read_only_error() from exc
        raise AssertionError("unreachable")

    def _read_only_error(self) -> TuningDatabaseError:
        return TuningDatabaseError(f"tuning database {self.path} cannot be written now "
                                   f"({self.read_only_reason}); nothing was written")

    def _reading(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def once() -> T:
            with closing(self._connect()) as con:
                return work(con)
        return self._retrying(once)

    # -- the engine interface -----------------------------------------------------------------
    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._reading(lambda con: con.execute(sql, args).fetchall())

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        self.refresh()
        if not self.writable:
            raise self._read_only_error()
        con = self._retrying(self._begin, writes=True)
        with closing(con):
            try:
                yield _Transaction(con)
                _commit(con)
            except sqlite3.DatabaseError as exc:
                _rollback(con)
                if self._recover(exc) and not self.writable:
                    raise self._read_only_error() from exc
                raise self._error(exc) from exc
            except BaseException:
                _rollback(con)
                raise

    def _begin(self) -> sqlite3.Connection:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            if not {"meta", "entries"} <= _tables(con):
                raise sqlite3.OperationalError("no such table: entries")   # truncated
            self._require_intact(con)
        except BaseException:
            _rollback(con)
            con.close()
            raise
        return con

    def refresh(self) -> None:
        """A store found read-only is looked at again: once the volume is writable again (or
        the disk has room), writes go through without a restart."""
        if self.writable:
            return
        with self._lock:
            if not self.writable:
                self._open_and_check()

    def check_intact(self) -> None:
        """Raise :class:`TuningDatabaseError` when SQLite's ``quick_check`` finds the file
        damaged (pages overwritten, a torn copy). Checked again only when the file changed."""
        self._reading(self._require_intact)

    def _require_intact(self, con: sqlite3.Connection) -> None:
        state = _file_state(self.path)
        if state is not None and state == self._intact_state:
            return
        try:
            problems = [str(r[0]) for r in con.execute("PRAGMA quick_check(3)").fetchall()]
        except sqlite3.DatabaseError as exc:
            if _kind(exc, self.path) != "corrupt":
                raise
            problems = [str(exc)]   # too damaged for the check to finish
        if problems != ["ok"]:
            self._intact_state = None
            raise TuningDatabaseError(
                f"tuning database {self.path} is damaged: SQLite's quick_check says "
                f"{'; '.join(problems)[:300]} (pages overwritten, or a torn copy); nothing is "
                f"written to it. Move it away (`convsel db export` may still save the readable "
                f"entries) or set {ENV_VAR} / --db to another path")
        self._intact_state = state

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own connection."""


def missing_message(path: Path) -> str:
    return (f"no tuning database at {path}: reading never creates one (a mistyped path?); "
            f"`convsel tune --db {path}` makes one")


class _Transaction:
    def __init__(self, con: sqlite3.Connection):
        self._con = con

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return int(self._con.execute(sql, args).rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._con.executemany(sql, rows)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._con.execute(sql, args).fetchall()


def _connect(target: str, timeout: float, *, uri: bool) -> sqlite3.Connection:
    # autocommit mode: transactions are explicit (BEGIN IMMEDIATE), never implicit.
    return sqlite3.connect(target, timeout=timeout, uri=uri, isolation_level=None,
                           check_same_thread=False)


@contextmanager
def _transaction(con: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so two writers queue on busy_timeout instead
    # of one failing when it upgrades a read lock.
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    _commit(con)


def _commit(con: sqlite3.Connection) -> None:
    con.execute("COMMIT")


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:   # a failed COMMIT may have rolled back already
        con.execute("ROLLBACK")


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _probe_write(con: sqlite3.Connection) -> None:
    # SQLite opens an unwritable file read-only without a word; only a write tells.
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("UPDATE meta SET value=value WHERE key='application'")
    finally:
        con.execute("ROLLBACK")


def _file_state(path: Path) -> tuple[int, ...] | None:
    """What changes when anyone writes the file: its and its WAL's identity, size and mtime."""
    try:
        main = path.stat()
    except OSError:
        return None
    try:
        wal = os.stat(f"{path}-wal")
        wal_state = (wal.st_size, wal.st_mtime_ns)
    except OSError:
        wal_state = (-1, -1)
    return (main.st_dev, main.st_ino, main.st_size, main.st_mtime_ns, *wal_state)


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return -1


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


_READ_ONLY_KINDS = frozenset({"permission", "read-only file system", "full", "io"})
_WHY = {
    "busy": "another process held it longer than the {timeout:g} s busy timeout",
    "permission": "the file or its directory is not writable",
    "read-only file system": "the file system holding it is mounted read-only",
    "full": "the disk holding it is full ({free} bytes free); free some space",
    "io": "an I/O error from the disk or file system: a failing disk, or a volume removed or "
          "remounted; the file itself may be fine",
    "gone": "the file was deleted or truncated",
    "corrupt": "a corrupt file, or not an SQLite database; move it away",
}


def _kind(exc: sqlite3.Error, path: Path) -> str:
    """What went wrong, from SQLite's primary result code (the message alone misleads: a full
    disk can read as "disk I/O error")."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    text = str(exc).lower()
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return "busy"
    if code == sqlite3.SQLITE_FULL:
        return "full"
    if "no such table" in text or (code == sqlite3.SQLITE_CANTOPEN and not path.exists()):
        return "gone"
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN) \
            or any(s in text for s in ("readonly", "read-only", "unable to open", "permission")):
        return "read-only file system" if _read_only_mount(path) else "permission"
    if code == sqlite3.SQLITE_IOERR:
        return "full" if 0 <= _free_bytes(path) < _FULL_DISK_BYTES else "io"
    if "locked" in text or "busy" in text:
        return "busy"
    return "corrupt"
