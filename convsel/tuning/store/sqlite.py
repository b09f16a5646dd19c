"""The SQLite engine: one file, WAL mode, short connections, ``BEGIN IMMEDIATE`` writes.

Readers never block the writer (WAL) and writers queue on the busy timeout, so several tuners
and the service can share one file on one machine. An unwritable file is opened read-only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from ..._version import __version__
from ...errors import TuningDatabaseError
from . import schema
from .schema import ENV_VAR


class SQLiteEngine:
    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0):
        self.path = Path(path).expanduser()
        self.location = str(self.path)
        self.timeout = timeout
        self.writable = True
        self.read_only_reason = ""
        self.schema_version = 0
        self._ro_query = "mode=ro"
        self._open_and_check()

    # -- opening ------------------------------------------------------------------------------
    def _open_and_check(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._open_read_only(f"cannot create {self.path.parent}: {exc.strerror or exc}")
            return
        try:
            with closing(self._connect()) as con:
                self._initialise(con)
                _probe_write(con)
        except sqlite3.DatabaseError as exc:
            if not _is_permission_error(exc):
                raise self._error(exc) from exc
            self._open_read_only(f"{self.path} is not writable ({exc})")

    def _open_read_only(self, reason: str) -> None:
        if not self.path.exists():
            raise TuningDatabaseError(f"tuning database {self.path}: {reason}, and no database "
                                      f"exists there to read; set {ENV_VAR} to a writable path")
        self.writable, self.read_only_reason = False, reason
        for mode in ("mode=ro", "immutable=1"):
            # A WAL file in a read-only directory cannot get its -shm file; immutable reads it
            # without one (and without seeing later writes by others, which is acceptable).
            self._ro_query = mode
            try:
                with closing(self._connect()) as con:
                    self._check(con)
                return
            except sqlite3.OperationalError as exc:
                if mode == "immutable=1" or not _is_permission_error(exc):
                    raise self._error(exc) from exc
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc

    def _connect(self) -> sqlite3.Connection:
        if self.writable:
            con = _connect(str(self.path), self.timeout, uri=False)
            con.execute("PRAGMA journal_mode=WAL")   # readers never block the writer
        else:
            con = _connect(f"{self.path.resolve().as_uri()}?{self._ro_query}", self.timeout,
                           uri=True)
        con.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        return con

    def _initialise(self, con: sqlite3.Connection) -> None:
        if not _tables(con):
            with _transaction(con):
                for statement in schema.create_statements(self.name):
                    con.execute(statement)   # executescript would COMMIT first
                con.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)", schema.META_ROWS)
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

    def _error(self, exc: sqlite3.Error) -> TuningDatabaseError:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            why = f"another process held it longer than the {self.timeout:g} s busy timeout"
        elif _is_permission_error(exc):
            why = "the file or its directory is not writable"
        else:
            why = "a corrupt file, or not an SQLite database; move it away"
        return TuningDatabaseError(f"tuning database {self.path} cannot be used: {exc} ({why}; "
                                   f"or set {ENV_VAR} / --db to another path)")

    @contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        try:
            with closing(self._connect()) as con:
                yield con
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc

    # -- the engine interface -----------------------------------------------------------------
    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._session() as con:
            return con.execute(sql, args).fetchall()

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        with self._session() as con, _transaction(con):
            yield _Transaction(con)

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own connection."""


class _Transaction:
    def __init__(self, con: sqlite3.Connection):
        self._con = con

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return int(self._con.execute(sql, args).rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._con.executemany(sql, rows)


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


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _probe_write(con: sqlite3.Connection) -> None:
    # SQLite opens an unwritable file read-only without a word; only a write tells.
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("UPDATE meta SET value=value WHERE key='application'")
    finally:
        con.execute("ROLLBACK")


def _is_permission_error(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("readonly", "read-only", "unable to open", "permission"))
