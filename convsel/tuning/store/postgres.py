"""The PostgreSQL engine: a database that several replicas share, through a connection pool.

psycopg 3 and psycopg-pool (the ``postgres`` extra) are imported only when a
``postgresql://`` URL is opened, so the SQLite default needs neither. Opening checks the
server with one direct connection first, so that an unreachable server, a wrong password or a
foreign database is reported in words instead of as a pool timeout. Schema creation and
migration run under a transaction-scoped advisory lock, so replicas starting together create
the tables once. The password never leaves this module: ``location`` is the URL without it,
and error messages are scrubbed of it.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..._version import __version__
from ...errors import TuningDatabaseError
from . import notify, schema
from .changes import Written, payload
from .reads import read_directly
from .schema import ENV_VAR

# pg_advisory_xact_lock key: "convsel" in ASCII, so it cannot collide with a small integer
_LOCK = int.from_bytes(b"convsel", "big")
POOL_MIN, POOL_MAX = 1, 4


def _driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise TuningDatabaseError(
            f"a PostgreSQL tuning database needs psycopg 3 and psycopg-pool ({exc}); install "
            "them with `pip install 'convsel[postgres]'`") from exc
    return psycopg, psycopg_pool


def describe(url: str) -> tuple[str, dict[str, str]]:
    """``(location, conninfo parameters)``: the URL without its password, and its parts."""
    psycopg, _ = _driver()
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise TuningDatabaseError(f"{ENV_VAR}: not a valid PostgreSQL URL ({exc})") from None
    user = f"{params['user']}@" if params.get("user") else ""
    host = params.get("host") or "localhost"
    host = f"[{host}]" if ":" in host else host
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{user}{host}{port}/{params.get('dbname', '')}", params


class PostgresEngine:
    name = "postgresql"

    def __init__(self, url: str, *, timeout: float = 10.0):
        self._psycopg, pool_module = _driver()
        self.location, params = describe(url)
        self._password = str(params.get("password") or "")
        self._url = url
        self.timeout = timeout
        self.writable = True
        self.read_only_reason = ""
        self.schema_version = 0
        connect_timeout = max(1, math.ceil(timeout))
        kwargs = {"autocommit": True, "connect_timeout": connect_timeout}
        self._kwargs = kwargs
        try:
            with self._psycopg.connect(url, **kwargs) as con:
                self._initialise(con)
        except self._psycopg.Error as exc:
            raise self._error(exc) from None
        # reconnect_timeout: the pool retries a lost connection with a doubling delay (1, 2,
        # 4, ... s); after a long outage the next try came up to half the outage late (20-45 s
        # once the server was back). Giving up after `timeout` lets the next request start a
        # fresh try at once.
        self._pool = pool_module.ConnectionPool(
            url, min_size=POOL_MIN, max_size=POOL_MAX, kwargs=kwargs, timeout=timeout,
            reconnect_timeout=timeout, open=True,
            check=pool_module.ConnectionPool.check_connection, name="convsel-tuning")
        self._finalizer = weakref.finalize(self, self._pool.close)
        self._listener: notify.Listener | None = None

    # -- opening ------------------------------------------------------------------------------
    def _initialise(self, con: Any) -> None:
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            tables = _tables(con)
            if not tables & schema.TABLES:
                if tables:
                    schema.check(self.location, tables, {}, what="a PostgreSQL database",
                                 convsel_version=__version__)
                for statement in schema.create_statements(self.name):
                    con.execute(statement)
                con.cursor().executemany(
                    "INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                    schema.META_ROWS)
            version = self._check(con)
            if version < schema.SCHEMA_VERSION:
                for statement in schema.migration_statements(version, self.name):
                    con.execute(statement)
                con.execute("UPDATE meta SET value=%s WHERE key='schema_version'",
                            (str(schema.SCHEMA_VERSION),))
                self.schema_version = schema.SCHEMA_VERSION
        row = con.execute("SELECT has_table_privilege('entries', 'INSERT')").fetchone()
        if not row[0]:
            self.writable = False
            self.read_only_reason = f"the user of {self.location} may not insert into entries"

    def _check(self, con: Any) -> int:
        tables = _tables(con)
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall()) \
            if "meta" in tables else {}
        self.schema_version = schema.check(self.location, tables, meta,
                                           what="a PostgreSQL database",
                                           convsel_version=__version__)
        return self.schema_version

    def _error(self, exc: BaseException) -> TuningDatabaseError:
        text = str(exc)
        if len(self._password) >= 4:   # libpq never quotes it; this is a second guard
            text = text.replace(self._password, "***")
        low = text.lower()
        if "password authentication failed" in low or "authentication failed" in low \
                or "no password supplied" in low or "pg_hba.conf" in low:
            why = f"authentication failed: check the user and password in {ENV_VAR}"
        elif "does not exist" in low and "database" in low:
            why = "the database does not exist: create it, or name another in the URL"
        elif any(s in low for s in ("connection refused", "could not connect", "timeout",
                                    "timed out", "could not translate host", "no route",
                                    "couldn't get a connection", "server closed",
                                    "connection is bad", "connection failed")):
            why = "the server cannot be reached: is it running, and are host and port right?"
        elif "permission denied" in low:
            why = "the user lacks a privilege on the tuning tables"
        else:
            why = "the server refused the request"
        return TuningDatabaseError(f"tuning database {self.location} cannot be used: {why} "
                                   f"({type(exc).__name__}: {text.strip()})")

    # -- the engine interface -----------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[Any]:
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as con:
                yield con
        except PoolTimeout as exc:   # an OperationalError too: caught first
            raise self._diagnose(exc) from None
        except self._psycopg.Error as exc:
            raise self._error(exc) from None

    def _diagnose(self, timeout: BaseException) -> TuningDatabaseError:
        # The pool only says it waited; one direct connection says why (server down, password
        # changed, database dropped), or shows that every pooled connection was busy.
        try:
            with self._psycopg.connect(self._url, **self._kwargs):
                pass
        except self._psycopg.Error as exc:
            return self._error(exc)
        return TuningDatabaseError(
            f"tuning database {self.location}: all {POOL_MAX} pooled connections stayed busy "
            f"for {self.timeout:g} s ({timeout}); the server is overloaded or a query hangs")

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        read_directly()   # a cached value read this way depends on the whole store
        with self._connection() as con:
            rows: list[tuple[Any, ...]] = con.execute(_pg(sql), args).fetchall()
            return rows

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        """One write transaction; it tells every listener (:mod:`.notify`) what it wrote
        (:mod:`.changes`) when it commits."""
        with self._connection() as con:
            tx = con.transaction()
            tx.__enter__()
            written = Written()
            try:
                yield _Transaction(con, written)
                written.change.writer = notify.writer(self._url)
                # delivered at the commit, dropped on rollback
                con.execute(notify.SEND, (notify.CHANNEL, payload(written.change)))
            except BaseException as exc:
                tx.__exit__(type(exc), exc, exc.__traceback__)
                raise
            try:
                _commit(tx)
            finally:
                # Also when the commit's outcome is unknown: a needless re-read costs little.
                notify.wrote(self._url, written.change)

    def change_token(self) -> Hashable | None:
        """What this process was told changed in this store, as a
        :class:`~convsel.tuning.store.changelog.View` (it moves with every committed write),
        known without asking the server; None while this process's listener cannot vouch for
        it (ask instead)."""
        found = self._listener
        if found is None or found.pid != os.getpid() or found.stopped:
            found = self._listener = notify.listener(self, self._url, self._psycopg.connect,
                                                     self._kwargs)
            if found is None:
                return None
        return found.token()

    def refresh(self) -> None:
        """Nothing to look at again: the server says per statement what may be written."""

    def check_intact(self) -> None:
        """The server keeps its own pages consistent (checksums, WAL replay)."""

    def close(self) -> None:
        if self._listener is not None:
            self._listener.release(self)
        self._finalizer()


class _Transaction:
    """Runs the statements of one transaction, and notes what they write (``written``)."""

    def __init__(self, con: Any, written: Written):
        self._con = con
        self._written = written

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        self._written.note(sql, [args])
        return int(self._con.execute(_pg(sql), args).rowcount)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._written.note(sql, rows)
            self._con.cursor().executemany(_pg(sql), rows)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._written.note(sql, [args])
        found: list[tuple[Any, ...]] = self._con.execute(_pg(sql), args).fetchall()
        return found


def _commit(tx: Any) -> None:
    tx.__exit__(None, None, None)


def _pg(sql: str) -> str:
    # The shared SQL uses "?"; psycopg's placeholder is "%s". No statement holds a literal ?.
    return sql.replace("?", "%s")


def _tables(con: Any) -> set[str]:
    rows = con.execute("SELECT table_name FROM information_schema.tables "
                       "WHERE table_schema = current_schema()").fetchall()
    return {r[0] for r in rows}
