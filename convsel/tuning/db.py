"""The tuning database: measured winners per (problem, backend, device, versions), in SQLite.

One file holds every machine's entries, keyed so that an entry is only ever used where it was
measured: the problem (its canonical ``to_dict`` JSON), the backend, the device identity
(vendor, name, driver), convsel's version and :data:`IMPLEMENTATIONS_VERSION`. Writes are
transactions in WAL mode with a busy timeout, so several tuners and the service can share one
file. Entries travel between machines as JSON (:meth:`TuningDB.export_json`,
:meth:`TuningDB.import_json`), the way MIOpen ships its system find-db.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from .. import config
from .._version import __version__
from ..errors import TuningDatabaseError
from ..problem import ConvProblem
from .entry import DEVICE_FIELDS, IMPLEMENTATIONS_VERSION, TuningEntry, problem_key

SCHEMA_VERSION = 2
APPLICATION = "convsel-tuning"
EXPORT_FORMAT = "convsel-tuning-export"
ENV_VAR = "CONVSEL_TUNING_DB"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    problem TEXT NOT NULL, backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL,
    driver TEXT NOT NULL, convsel_version TEXT NOT NULL, implementations_version TEXT NOT NULL,
    winner TEXT, tie TEXT NOT NULL, timings TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (problem, backend, vendor, device, driver, convsel_version,
                 implementations_version));
"""
# Migrations from schema N-1 to N (the key is N); a new file gets _SCHEMA then every one.
_MIGRATIONS: dict[int, str] = {
    2: """
CREATE TABLE IF NOT EXISTS models (
    backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL, driver TEXT NOT NULL,
    convsel_version TEXT NOT NULL, implementations_version TEXT NOT NULL,
    family TEXT NOT NULL, model TEXT NOT NULL, meta TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (backend, vendor, device, driver, convsel_version, implementations_version));
""",
}
MODEL_KEY_FIELDS = ("backend", "vendor", "device", "driver")
_COLUMNS = ("problem", "backend", "vendor", "device", "driver", "convsel_version",
            "implementations_version", "winner", "tie", "timings", "created")


def default_path() -> Path:
    """``$CONVSEL_TUNING_DB``, else ``tuning.sqlite`` in the user's data directory."""
    env = config.current().tuning_db
    if env:
        return Path(env).expanduser()
    return platformdirs.user_data_path("convsel") / "tuning.sqlite"


class TuningDB:
    """A tuning database file. Opening checks it is convsel's; each call uses a short
    connection, so one object can serve several threads.

    Parameters
    ----------
    path : str or Path, optional
        Defaults to :func:`default_path`. A missing file is created (with its directory).
    timeout : float
        Seconds a write waits for another writer before giving up.

    Raises
    ------
    TuningDatabaseError
        The file is not SQLite, is another program's SQLite file, was written by a newer
        convsel, or can be neither created nor read.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 10.0):
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.timeout = timeout
        self.writable = True
        self.read_only_reason = ""
        self._ro_query = "mode=ro"
        self.schema_version = 0
        self._open_and_check()

    def __repr__(self) -> str:
        return f"TuningDB({str(self.path)!r}{'' if self.writable else ', read-only'})"

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
                for statement in _statements(_SCHEMA, *_MIGRATIONS.values()):
                    con.execute(statement)   # executescript would COMMIT first
                con.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                                [("application", APPLICATION),
                                 ("schema_version", str(SCHEMA_VERSION))])
        if self._check(con) < SCHEMA_VERSION:
            self._migrate(con)

    def _migrate(self, con: sqlite3.Connection) -> None:
        with _transaction(con):
            # Read again under the write lock: another process may have migrated meanwhile.
            version = self._check(con)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _statements(_MIGRATIONS[target]):
                    con.execute(statement)
            con.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                        (str(SCHEMA_VERSION),))
        self.schema_version = SCHEMA_VERSION

    def _check(self, con: sqlite3.Connection) -> int:
        """The file's schema version, after checking the file is convsel's and not newer."""
        tables = _tables(con)
        if "meta" not in tables:
            raise TuningDatabaseError(
                f"{self.path} is an SQLite file of another program (tables: "
                f"{', '.join(sorted(tables)) or 'none'}), not a convsel tuning database; "
                f"point {ENV_VAR} or --db elsewhere")
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("application") != APPLICATION:
            raise TuningDatabaseError(f"{self.path} is not a convsel tuning database "
                                      f"(application={meta.get('application')!r})")
        try:
            version = int(meta.get("schema_version", "0"))
        except ValueError:
            version = 0
        if version > SCHEMA_VERSION:
            raise TuningDatabaseError(
                f"{self.path} has schema version {version}, written by a newer convsel; this "
                f"convsel {__version__} reads schema {SCHEMA_VERSION}")
        if version < 1 or "entries" not in tables:
            raise TuningDatabaseError(f"{self.path} has schema version {version} and no "
                                      f"migration to {SCHEMA_VERSION}")
        self.schema_version = version
        return version

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

    # -- reading ------------------------------------------------------------------------------
    def lookup(self, problem: ConvProblem, backend: str,
               device: Mapping[str, str]) -> TuningEntry | None:
        """The entry for this problem on this backend and device, measured by this convsel
        and these implementations; None if there is none."""
        key = (problem_key(problem), backend, *(str(device[k]) for k in DEVICE_FIELDS),
               __version__, IMPLEMENTATIONS_VERSION)
        with self._session() as con:
            row = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM entries WHERE problem=? AND "
                              "backend=? AND vendor=? AND device=? AND driver=? AND "
                              "convsel_version=? AND implementations_version=?", key).fetchone()
        return _entry(row) if row else None

    def entries(self, *, backend: str | None = None,
                device: Mapping[str, str] | None = None) -> list[TuningEntry]:
        """Every entry (any version), optionally only those of one backend and device."""
        where, args = [], []
        if backend is not None:
            where.append("backend=?")
            args.append(backend)
        if device is not None:
            where += ["vendor=?", "device=?", "driver=?"]
            args += [str(device[k]) for k in DEVICE_FIELDS]
        sql = f"SELECT {', '.join(_COLUMNS)} FROM entries"
        sql += f" WHERE {' AND '.join(where)}" if where else ""
        with self._session() as con:
            rows = con.execute(sql + " ORDER BY created", args).fetchall()
        return [_entry(row) for row in rows]

    def status(self) -> dict[str, Any]:
        """JSON-ready health: path, writable, entry count (for /readyz and ``convsel db``)."""
        with self._session() as con:
            count = con.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            models = (con.execute("SELECT COUNT(*) FROM models").fetchone()[0]
                      if self.schema_version >= 2 else 0)
        return {"path": str(self.path), "ok": True, "writable": self.writable,
                "read_only_reason": self.read_only_reason or None, "entries": count,
                "models": models, "schema_version": self.schema_version}

    # -- writing ------------------------------------------------------------------------------
    def record(self, entry: TuningEntry) -> None:
        """Insert or replace ``entry`` (one transaction)."""
        self.record_many([entry])

    def record_many(self, entries: list[TuningEntry]) -> None:
        """Insert or replace several entries in one transaction: all or none are written."""
        if not self.writable:
            raise TuningDatabaseError(f"tuning database {self.path} is read-only "
                                      f"({self.read_only_reason}); nothing was recorded")
        rows = [_row(e) for e in entries]
        with self._session() as con, _transaction(con):
            con.executemany(f"INSERT OR REPLACE INTO entries ({', '.join(_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(_COLUMNS))})", rows)

    def delete(self, *, backend: str | None = None) -> int:
        """Remove every entry (of one backend); returns how many."""
        if not self.writable:
            raise TuningDatabaseError(f"tuning database {self.path} is read-only")
        with self._session() as con, _transaction(con):
            cur = (con.execute("DELETE FROM entries WHERE backend=?", (backend,)) if backend
                   else con.execute("DELETE FROM entries"))
            return int(cur.rowcount)

    # -- models ---------------------------------------------------------------------------------
    def save_model(self, key: Mapping[str, str], family: str, model: Mapping[str, Any],
                   meta: Mapping[str, Any]) -> None:
        """Insert or replace the model for ``key`` (backend, vendor, device, driver) under this
        convsel's and these implementations' versions. ``model`` and ``meta`` are stored as
        JSON text (never pickled), so they must be JSON-serialisable."""
        if not self.writable:
            raise TuningDatabaseError(f"tuning database {self.path} is read-only "
                                      f"({self.read_only_reason}); the model was not saved")
        try:
            model_text = json.dumps(model, sort_keys=True, allow_nan=False)
            meta_text = json.dumps(meta, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TuningDatabaseError(f"model {family!r} cannot be stored: model and meta must "
                                      f"be JSON-serialisable ({exc})") from exc
        row = (*_model_key(key), str(family), model_text, meta_text, time.time())
        with self._session() as con, _transaction(con):
            con.execute(f"INSERT OR REPLACE INTO models ({', '.join(_MODEL_COLUMNS)}) VALUES "
                        f"({', '.join('?' * len(_MODEL_COLUMNS))})", row)

    def load_model(self, key: Mapping[str, str]) -> dict[str, Any] | None:
        """``{"family", "model", "meta", "created"}`` for ``key`` saved by this convsel and
        these implementations; None if there is none."""
        if self.schema_version < 2:
            return None   # a read-only file from before models existed holds none
        with self._session() as con:
            row = con.execute("SELECT family, model, meta, created FROM models WHERE "
                              + " AND ".join(f"{c}=?" for c in _MODEL_COLUMNS[:6]),
                              _model_key(key)).fetchone()
        if row is None:
            return None
        family, model, meta, created = row
        return {"family": family, "model": self._json(model, "model", key),
                "meta": self._json(meta, "meta", key), "created": created}

    def models(self) -> list[dict[str, Any]]:
        """Every stored model (any version), without its body: key fields, versions, family,
        meta and created, oldest first."""
        if self.schema_version < 2:
            return []
        columns = (*_MODEL_COLUMNS[:7], "meta", "created")
        with self._session() as con:
            rows = con.execute(f"SELECT {', '.join(columns)} FROM models "
                               "ORDER BY created").fetchall()
        out = []
        for row in rows:
            item = dict(zip(columns, row, strict=True))
            item["meta"] = self._json(item["meta"], "meta", item)
            out.append(item)
        return out

    def _json(self, text: str, what: str, key: Mapping[str, Any]) -> Any:
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            where = ", ".join(f"{k}={key.get(k)!r}" for k in MODEL_KEY_FIELDS)
            raise TuningDatabaseError(f"tuning database {self.path}: the stored {what} of the "
                                      f"model for {where} is not valid JSON ({exc}); save the "
                                      f"model again or delete it") from exc

    # -- moving between machines --------------------------------------------------------------
    def export_json(self) -> dict[str, Any]:
        """Every entry as one JSON document (:meth:`import_json` reads it)."""
        return {"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION,
                "convsel_version": __version__, "exported": time.time(),
                "entries": [e.to_dict() for e in self.entries()]}

    def import_json(self, document: Any) -> dict[str, Any]:
        """Add the entries of an exported document; where both hold a key, the newer wins.

        Returns ``{"imported": n, "kept": n, "rejected": [reason, ...]}``. A document that is
        not an export raises TuningDatabaseError; a bad entry is rejected with its index.
        """
        if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
            raise TuningDatabaseError(f"not a convsel tuning export (expected \"format\": "
                                      f"\"{EXPORT_FORMAT}\")")
        incoming, rejected = [], []
        for i, raw in enumerate(document.get("entries") or []):
            try:
                incoming.append(TuningEntry.from_dict(raw))
            except (ValueError, TypeError, KeyError) as exc:
                rejected.append(f"entry {i}: {exc}")
        existing = {_key(e): e.created for e in self.entries()}
        newer = [e for e in incoming if existing.get(_key(e), -1.0) < e.created]
        self.record_many(newer)
        return {"imported": len(newer), "kept": len(incoming) - len(newer),
                "rejected": rejected}


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
    con.execute("COMMIT")


def _statements(*scripts: str) -> list[str]:
    return [s for script in scripts for s in script.split(";") if s.strip()]


_MODEL_COLUMNS = (*MODEL_KEY_FIELDS, "convsel_version", "implementations_version", "family",
                  "model", "meta", "created")


def _model_key(key: Mapping[str, str]) -> tuple[str, ...]:
    missing = [k for k in MODEL_KEY_FIELDS if k not in key]
    if missing:
        raise TuningDatabaseError(f"model key {dict(key)!r} lacks {', '.join(missing)}; a "
                                  f"model key has {', '.join(MODEL_KEY_FIELDS)}")
    return (*(str(key[k]) for k in MODEL_KEY_FIELDS), __version__, IMPLEMENTATIONS_VERSION)


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


def _key(e: TuningEntry) -> tuple[str, ...]:
    return (problem_key(e.problem), e.backend, *(e.device[k] for k in DEVICE_FIELDS),
            e.convsel_version, e.implementations_version)


def _row(e: TuningEntry) -> tuple[Any, ...]:
    return (*_key(e), e.winner, json.dumps(list(e.tie)),
            json.dumps({k: dict(v) for k, v in e.timings.items()}, sort_keys=True), e.created)


def _entry(row: tuple[Any, ...]) -> TuningEntry:
    problem, backend, vendor, device, driver, cv, iv, winner, tie, timings, created = row
    return TuningEntry(problem=ConvProblem.from_dict(json.loads(problem)), backend=backend,
                       device={"vendor": vendor, "name": device, "driver": driver},
                       winner=winner, tie=tuple(json.loads(tie)), timings=json.loads(timings),
                       convsel_version=cv, implementations_version=iv, created=created)


_open: dict[Path, TuningDB] = {}
_open_lock = threading.Lock()


def open_db(db: TuningDB | str | os.PathLike[str] | None = None) -> TuningDB:
    """``db`` itself, or the (cached) database at that path or the default path.

    Raises TuningDatabaseError when the file cannot be used; a failure is not cached, so a
    repaired file is picked up on the next call.
    """
    if isinstance(db, TuningDB):
        return db
    path = Path(db).expanduser() if db is not None else default_path()
    with _open_lock:
        if path not in _open:
            _open[path] = TuningDB(path)
        return _open[path]
