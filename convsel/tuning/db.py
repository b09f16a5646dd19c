"""The tuning database: measured winners per (problem, backend, device, versions), and the
models fitted on them, in SQLite (embedded, the default) or PostgreSQL (shared by replicas).

Entries are keyed so that one is only ever used where it was measured: the problem (its
canonical ``to_dict`` JSON), the backend, the device identity (vendor, name, driver),
convsel's version and :data:`IMPLEMENTATIONS_VERSION`; models are keyed the same way, less the
problem. ``CONVSEL_TUNING_DB`` (or ``db=``/``--db``) is a file path for SQLite or a
``postgresql://user:password@host:port/dbname`` URL: both engines hold one schema
(:mod:`convsel.tuning.store.schema`), so entries, models, export and import behave alike.
Writes are transactions; several tuners, service workers and replicas can share one store.
Entries travel between machines as JSON (:meth:`TuningDB.export_json`,
:meth:`TuningDB.import_json`), the way MIOpen ships its system find-db.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from .. import config
from .._version import __version__
from ..errors import TuningDatabaseError
from ..problem import ConvProblem
from .entry import DEVICE_FIELDS, IMPLEMENTATIONS_VERSION, TuningEntry, problem_key
from .store import Engine, Transaction, is_url
from .store.schema import (
    APPLICATION,
    ENTRY_COLUMNS,
    ENTRY_KEY,
    ENV_VAR,
    MODEL_COLUMNS,
    MODEL_KEY,
    MODEL_KEY_FIELDS,
    SCHEMA_VERSION,
    upsert,
)
from .store.sqlite import SQLiteEngine

if TYPE_CHECKING:
    from .store.postgres import PostgresEngine

__all__ = ["APPLICATION", "ENTRY_UPSERT", "EXPORT_FORMAT", "ENV_VAR", "MODEL_KEY_FIELDS",
           "SCHEMA_VERSION", "TuningDB", "TuningEntry", "close_open", "default_path",
           "default_target", "entry_of_row", "entry_row", "open_db", "problem_key"]

EXPORT_FORMAT = "convsel-tuning-export"
DEFAULT_TIMEOUT = 10.0   # seconds, when neither timeout= nor CONVSEL_TUNING_DB_TIMEOUT says
_COLUMNS = ENTRY_COLUMNS
_ENTRY_UPSERT = upsert("entries", ENTRY_COLUMNS, ENTRY_KEY)
_ENTRY_IMPORT = upsert("entries", ENTRY_COLUMNS, ENTRY_KEY, only_if_newer=True)
_MODEL_UPSERT = upsert("models", MODEL_COLUMNS, MODEL_KEY)
_MODEL_IMPORT = upsert("models", MODEL_COLUMNS, MODEL_KEY, only_if_newer=True)


def default_path() -> Path:
    """The SQLite file used by default: ``$CONVSEL_TUNING_DB`` when it is a path, else
    ``tuning.sqlite`` in the user's data directory."""
    env = config.current().tuning_db
    if env and not is_url(env):
        return Path(env).expanduser()
    return platformdirs.user_data_path("convsel") / "tuning.sqlite"


def default_target() -> str | Path:
    """``$CONVSEL_TUNING_DB`` as given (a PostgreSQL URL or a path), else :func:`default_path`."""
    env = config.current().tuning_db
    return env.strip() if env and is_url(env) else default_path()


class TuningDB:
    """A tuning database: an SQLite file or a PostgreSQL database. Opening checks it is
    convsel's (creating or migrating its tables as needed); one object serves several threads
    (SQLite: a short connection per call; PostgreSQL: a connection pool).

    Parameters
    ----------
    path : str or Path, optional
        An SQLite file path or a ``postgresql://`` URL. Defaults to :func:`default_target`.
    timeout : float, optional
        Seconds a write waits for another writer (SQLite), or a call to connect or for a pooled
        connection (PostgreSQL). Default: ``$CONVSEL_TUNING_DB_TIMEOUT``, else 10.
    create : bool
        Create a missing SQLite file (and its directory). Reading callers pass False: a
        mistyped path is then an error instead of a new, empty database.

    Attributes
    ----------
    engine : str
        ``"sqlite"`` or ``"postgresql"``.
    location : str
        The file path, or the URL without its password; safe to print.
    path : Path or str
        The SQLite file's Path, or ``location`` for PostgreSQL.

    Raises
    ------
    TuningDatabaseError
        The file is not SQLite, or the database is another program's, was written by a newer
        convsel, cannot be created or read; the server cannot be reached or refuses the
        credentials.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 timeout: float | None = None, create: bool = True):
        target = path if path is not None else default_target()
        timeout = timeout or _configured_timeout()
        self.timeout = timeout
        self._store: Engine
        self._postgres: PostgresEngine | None = None
        if is_url(target):
            from .store.postgres import PostgresEngine

            self._store = self._postgres = PostgresEngine(str(target).strip(), timeout=timeout)
            self.path: Path | str = self._store.location
        else:
            _refuse_mangled_url(target)
            self._store = SQLiteEngine(target, timeout=timeout, create=create)
            self.path = self._store.path

    def __repr__(self) -> str:
        return f"TuningDB({self.location!r}{'' if self.writable else ', read-only'})"

    @property
    def engine(self) -> str:
        return self._store.name

    @property
    def location(self) -> str:
        return self._store.location

    @property
    def writable(self) -> bool:
        return self._store.writable

    @property
    def read_only_reason(self) -> str:
        return self._store.read_only_reason

    @property
    def schema_version(self) -> int:
        return self._store.schema_version

    def close(self) -> None:
        """Close the PostgreSQL connection pool (nothing to do for SQLite)."""
        self._store.close()

    def change_token(self) -> Hashable | None:
        """A value that moves with every committed write to a PostgreSQL store, known without
        a query (its change notices, :mod:`convsel.tuning.store.notify`); None where there is
        none to trust (SQLite, or no listener connected just now): ask the store instead."""
        return None if self._postgres is None else self._postgres.change_token()

    def _require_writable(self, what: str) -> None:
        self._store.refresh()   # a volume remounted read-write again, a disk with room again
        if not self.writable:
            raise TuningDatabaseError(f"tuning database {self.location} is read-only "
                                      f"({self.read_only_reason}); {what}")

    # -- reading ------------------------------------------------------------------------------
    def lookup(self, problem: ConvProblem, backend: str,
               device: Mapping[str, str]) -> TuningEntry | None:
        """The entry for this problem on this backend and device, measured by this convsel
        and these implementations; None if there is none."""
        key = (problem_key(problem), backend, *(str(device[k]) for k in DEVICE_FIELDS),
               __version__, IMPLEMENTATIONS_VERSION)
        rows = self._store.rows(f"SELECT {', '.join(_COLUMNS)} FROM entries WHERE "
                                + " AND ".join(f"{c}=?" for c in ENTRY_KEY), key)
        return _entry(rows[0]) if rows else None

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
        rows = self._store.rows(sql + " ORDER BY created, backend, problem", args)
        return [_entry(row) for row in rows]

    def status(self) -> dict[str, Any]:
        """JSON-ready health (for /readyz, /v1/tuning and ``convsel db``): ``engine``,
        ``path`` (the SQLite file, or the PostgreSQL URL without its password: one key, so a
        service that hides host paths hides both), writable, entry and model counts, schema
        version. A damaged store (SQLite's quick_check fails) raises TuningDatabaseError."""
        self._store.refresh()
        self._store.check_intact()
        count = self._store.rows("SELECT COUNT(*) FROM entries")[0][0]
        models = (self._store.rows("SELECT COUNT(*) FROM models")[0][0]
                  if self.schema_version >= 2 else 0)
        return {"engine": self.engine, "path": self.location,
                "ok": True, "writable": self.writable,
                "read_only_reason": self.read_only_reason or None, "entries": int(count),
                "models": int(models), "schema_version": self.schema_version}

    # -- writing ------------------------------------------------------------------------------
    def record(self, entry: TuningEntry) -> None:
        """Insert or replace ``entry`` (one transaction)."""
        self.record_many([entry])

    def record_many(self, entries: list[TuningEntry]) -> None:
        """Insert or replace several entries in one transaction: all or none are written."""
        self._require_writable("nothing was recorded")
        self._write_entries(_ENTRY_UPSERT, entries)

    def _write_entries(self, sql: str, entries: list[TuningEntry]) -> None:
        # One order for every writer, so two transactions over the same keys cannot deadlock.
        rows = sorted({_key(e): _row(e) for e in entries}.values())
        with self._store.transaction() as tx:
            tx.executemany(sql, rows)

    # -- several tables in one transaction (convsel.tuning.fleet) -------------------------------
    def transaction(self, what: str = "nothing was written"
                    ) -> AbstractContextManager[Transaction]:
        """One write transaction over any of the store's tables, all or nothing: its
        ``execute``, ``executemany`` and ``rows`` take the shared SQL (``?`` placeholders).
        ``what`` ends the message when the store is read-only."""
        self._require_writable(what)
        return self._store.transaction()

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read outside a transaction (the shared SQL, ``?`` placeholders)."""
        return self._store.rows(sql, args)

    def delete(self, *, backend: str | None = None) -> int:
        """Remove every entry (of one backend); returns how many."""
        return self.remove(backend=backend)["entries"]

    def remove(self, *, backend: str | None = None, device: str | None = None,
               problem: ConvProblem | None = None, winner: str | None = None,
               stale: bool = False, models: bool = False,
               dry_run: bool = False) -> dict[str, int]:
        """Remove the entries (and, with ``models``, the models) that match every given
        filter; with none given, every entry. Returns ``{"entries": n, "models": m}``, the
        rows removed (or, with ``dry_run``, that would be).

        ``device`` is the device's name; ``problem`` and ``winner`` (a label such as
        ``"winograd:4x4"``) select entries only, so models are left alone when either is
        given; ``stale`` keeps only rows of another convsel or implementations version, which
        this convsel never uses.
        """
        where, args = [], []
        for column, value in (("backend", backend), ("device", device)):
            if value is not None:
                where.append(f"{column}=?")
                args.append(value)
        if stale:
            where.append("NOT (convsel_version=? AND implementations_version=?)")
            args += [__version__, IMPLEMENTATIONS_VERSION]
        entry_where, entry_args = list(where), list(args)
        if problem is not None:
            entry_where.append("problem=?")
            entry_args.append(problem_key(problem))
        if winner is not None:
            entry_where.append("winner=?")
            entry_args.append(winner)
        plans = [("entries", entry_where, entry_args)]
        if models and problem is None and winner is None and self.schema_version >= 2:
            plans.append(("models", where, args))
        counts = {"entries": 0, "models": 0}
        if dry_run:
            for table, conditions, values in plans:
                counts[table] = int(self._store.rows(
                    f"SELECT COUNT(*) FROM {table}{_where(conditions)}", values)[0][0])
            return counts
        self._require_writable("nothing was removed")
        with self._store.transaction() as tx:
            for table, conditions, values in plans:
                counts[table] = tx.execute(f"DELETE FROM {table}{_where(conditions)}", values)
        return counts

    def prune(self, *, dry_run: bool = False) -> dict[str, int]:
        """Remove the entries and models of other convsel or implementations versions: this
        convsel never uses them (``convsel db list`` marks them)."""
        return self.remove(stale=True, models=True, dry_run=dry_run)

    # -- models ---------------------------------------------------------------------------------
    def save_model(self, key: Mapping[str, str], family: str, model: Mapping[str, Any],
                   meta: Mapping[str, Any]) -> None:
        """Insert or replace the model for ``key`` (backend, vendor, device, driver) under this
        convsel's and these implementations' versions. ``model`` and ``meta`` are stored as
        JSON text (never pickled), so they must be JSON-serialisable."""
        self._require_writable("the model was not saved")
        try:
            model_text = json.dumps(model, sort_keys=True, allow_nan=False)
            meta_text = json.dumps(meta, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TuningDatabaseError(f"model {family!r} cannot be stored: model and meta must "
                                      f"be JSON-serialisable ({exc})") from exc
        row = (*_model_key(key), str(family), model_text, meta_text, time.time())
        with self._store.transaction() as tx:
            tx.execute(_MODEL_UPSERT, row)

    def load_model(self, key: Mapping[str, str]) -> dict[str, Any] | None:
        """``{"family", "model", "meta", "created"}`` for ``key`` saved by this convsel and
        these implementations; None if there is none."""
        if self.schema_version < 2:
            return None   # a read-only file from before models existed holds none
        rows = self._store.rows("SELECT family, model, meta, created FROM models WHERE "
                                + " AND ".join(f"{c}=?" for c in MODEL_KEY), _model_key(key))
        if not rows:
            return None
        family, model, meta, created = rows[0]
        return {"family": family, "model": self._json(model, "model", key),
                "meta": self._json(meta, "meta", key), "created": created}

    def models(self) -> list[dict[str, Any]]:
        """Every stored model (any version), without its body: key fields, versions, family,
        meta and created, oldest first."""
        if self.schema_version < 2:
            return []
        columns = (*MODEL_KEY, "family", "meta", "created")
        rows = self._store.rows(f"SELECT {', '.join(columns)} FROM models "
                                "ORDER BY created, backend, device")
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
            raise TuningDatabaseError(f"tuning database {self.location}: the stored {what} of the "
                                      f"model for {where} is not valid JSON ({exc}); save the "
                                      f"model again or delete it") from exc

    # -- moving between machines --------------------------------------------------------------
    def export_json(self) -> dict[str, Any]:
        """Every entry and every fitted model as one JSON document (:meth:`import_json`
        reads it)."""
        return {"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION,
                "convsel_version": __version__, "exported": time.time(),
                "entries": [e.to_dict() for e in self.entries()],
                "models": self._model_rows()}

    def _model_rows(self) -> list[dict[str, Any]]:
        if self.schema_version < 2:
            return []
        rows = self._store.rows(f"SELECT {', '.join(MODEL_COLUMNS)} FROM models "
                                "ORDER BY created, backend, device")
        out = []
        for row in rows:
            item = dict(zip(MODEL_COLUMNS, row, strict=True))
            for field in ("model", "meta"):
                item[field] = self._json(item[field], field, item)
            out.append(item)
        return out

    def import_json(self, document: Any) -> dict[str, Any]:
        """Add the entries and models of an exported document; where both hold a key, the
        newer wins.

        Returns ``{"imported": n, "kept": n, "models_imported": n, "models_kept": n,
        "rejected": [reason, ...]}``. A document that is not an export raises
        TuningDatabaseError; a bad entry or model is rejected with its index.
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
        models = []
        for i, raw in enumerate(document.get("models") or []):
            try:
                models.append(_model_import_row(raw))
            except (ValueError, TypeError, KeyError) as exc:
                rejected.append(f"model {i}: {exc}")
        self._require_writable("nothing was imported")
        existing = {_key(e): e.created for e in self.entries()}
        newer = [e for e in incoming if existing.get(_key(e), -1.0) < e.created]
        # The upsert keeps a row another writer made newer since the read above.
        self._write_entries(_ENTRY_IMPORT, newer)
        stored = {tuple(m[c] for c in MODEL_KEY): m["created"] for m in self._model_rows()}
        newer_models = [m for m in models if stored.get(m[:len(MODEL_KEY)], -1.0) < m[-1]]
        if newer_models:
            with self._store.transaction() as tx:
                tx.executemany(_MODEL_IMPORT, sorted(newer_models))
        return {"imported": len(newer), "kept": len(incoming) - len(newer),
                "models_imported": len(newer_models),
                "models_kept": len(models) - len(newer_models), "rejected": rejected}


def _configured_timeout() -> float:
    text = config.current().tuning_db_timeout
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise TuningDatabaseError(f"{config.variable('tuning_db_timeout')}={text!r}: expected "
                                  "seconds, a number above 0")
    return seconds


def _refuse_mangled_url(target: str | os.PathLike[str]) -> None:
    # Path("postgresql://u:pw@h/db") is "postgresql:/u:pw@h/db": opening it would create an
    # SQLite file named after the URL, password included, instead of reaching the server.
    text = os.fspath(target)
    if text.lower().startswith(("postgresql:", "postgres:")):
        raise TuningDatabaseError(
            f"tuning database {text.split(':', 1)[0]}:/...: a PostgreSQL URL that was turned "
            f"into a file path (its '//' is lost); pass {ENV_VAR} / --db as a string "
            f"postgresql://user:password@host:port/dbname")


def _where(conditions: list[str]) -> str:
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def _model_import_row(raw: Any) -> tuple[Any, ...]:
    """A models row from an exported model, checked: text key fields, a family, JSON model and
    meta, a finite ``created``."""
    if not isinstance(raw, dict):
        raise TypeError(f"expected an object, got {type(raw).__name__}")
    for field in (*MODEL_KEY, "family"):
        if not isinstance(raw.get(field), str) or not raw[field]:
            raise ValueError(f"{field!r} must be a non-empty string")
    created = float(raw["created"])
    if created != created or created in (float("inf"), float("-inf")):
        raise ValueError("'created' must be a finite number")
    texts = [json.dumps(raw[field], sort_keys=True, allow_nan=False)
             for field in ("model", "meta")]
    return (*(raw[c] for c in MODEL_KEY), raw["family"], *texts, created)


def _model_key(key: Mapping[str, str]) -> tuple[str, ...]:
    missing = [k for k in MODEL_KEY_FIELDS if k not in key]
    if missing:
        raise TuningDatabaseError(f"model key {dict(key)!r} lacks {', '.join(missing)}; a "
                                  f"model key has {', '.join(MODEL_KEY_FIELDS)}")
    return (*(str(key[k]) for k in MODEL_KEY_FIELDS), __version__, IMPLEMENTATIONS_VERSION)


def entry_row(e: TuningEntry) -> tuple[Any, ...]:
    """``e`` as a row of ``entries`` (:data:`ENTRY_COLUMNS` order), for :data:`ENTRY_UPSERT`."""
    return _row(e)


def entry_of_row(row: tuple[Any, ...]) -> TuningEntry:
    """The entry of a row of ``entries`` read in :data:`ENTRY_COLUMNS` order."""
    return _entry(row)


ENTRY_UPSERT = _ENTRY_UPSERT


def _key(e: TuningEntry) -> tuple[str, ...]:
    return (problem_key(e.problem), e.backend, *(e.device[k] for k in DEVICE_FIELDS),
            e.convsel_version, e.implementations_version)


def _row(e: TuningEntry) -> tuple[Any, ...]:
    return (*_key(e), e.winner, json.dumps(list(e.tie)),
            json.dumps({k: dict(v) for k, v in e.timings.items()}, sort_keys=True), e.created)


def _entry(row: tuple[Any, ...]) -> TuningEntry:
    problem, backend, vendor, device, driver, cv, iv, winner, tie, timings, created = row
    try:
        return TuningEntry(problem=ConvProblem.from_dict(json.loads(problem)), backend=backend,
                           device={"vendor": vendor, "name": device, "driver": driver},
                           winner=winner, tie=tuple(json.loads(tie)),
                           timings=json.loads(timings), convsel_version=cv,
                           implementations_version=iv, created=float(created))
    except (TypeError, ValueError, KeyError) as exc:
        raise TuningDatabaseError(f"a stored entry ({backend}, {device}, problem "
                                  f"{str(problem)[:200]}) is corrupt: {exc}; delete it or "
                                  f"import a good export") from exc


_open: dict[tuple[int, str | Path], TuningDB] = {}
_open_lock = threading.Lock()
# The last failure to open each store: when it ended, how long it took, and its error.
# Keyed by create= too for a file (a missing one is refused only without it), not a server.
_failed: dict[tuple[tuple[int, str | Path], bool | None],
              tuple[float, float, TuningDatabaseError]] = {}


def open_db(db: TuningDB | str | os.PathLike[str] | None = None, *,
            create: bool = True) -> TuningDB:
    """``db`` itself, or the (cached) database at that path or URL, or the default one.

    Cached per process (a forked child opens its own connections) and per path or URL.
    Raises TuningDatabaseError when the store cannot be used; a failure is not cached, so a
    repaired file or a restarted server is picked up on the next call. ``create=False`` (for
    callers that only read) refuses an SQLite file that does not exist yet. An open that took
    a while to fail (a server that does not answer) is not tried again for as long as it
    took: calls that were waiting meanwhile, or come within that time, get its error at once
    instead of each waiting out a connect timeout of its own (a measured answer opens the
    store twice). A failure that came at once (a missing file) is tried again at once.
    """
    if isinstance(db, TuningDB):
        return db
    target = db if db is not None else default_target()
    slot = (os.getpid(), _store_key(target))
    key = slot[1]
    asked = time.monotonic()
    with _open_lock:
        if slot not in _open:
            failure = (slot, None if isinstance(key, str) else create)
            ended, took, error = _failed.get(failure, (-math.inf, 0.0, None))
            if error is not None and (ended >= asked or time.monotonic() < ended + took):
                raise TuningDatabaseError(str(error))
            started = time.monotonic()
            try:
                _open[slot] = TuningDB(key, create=create)
            except TuningDatabaseError as exc:
                ended = time.monotonic()
                _failed[failure] = (ended, ended - started, exc)
                raise
        return _open[slot]


def _store_key(target: str | os.PathLike[str]) -> str | Path:
    """The URL, or the path with ``~`` expanded: the key of the per-process open store."""
    if isinstance(target, (str, Path)) and not str(target).startswith("~"):
        return _plain_store_key(target)     # a policy opens its store on every answer
    return str(target).strip() if is_url(target) else Path(target).expanduser()


@functools.lru_cache(maxsize=256)
def _plain_store_key(target: str | Path) -> str | Path:
    # without "~" the key depends on the target alone (not on $HOME): safe to remember
    return str(target).strip() if is_url(target) else Path(target)


def close_open(db: str | os.PathLike[str] | None = None) -> None:
    """Close and forget this process's cached databases (every one, or the one at ``db``):
    their PostgreSQL pools give their connections back to the server."""
    wanted = None if db is None else (
        str(db).strip() if is_url(db) else Path(db).expanduser())
    with _open_lock:
        for pid, target in list(_open):
            if wanted is None or target == wanted:
                database = _open.pop((pid, target))
                if pid == os.getpid():   # a parent's pool is not ours to close
                    database.close()
