"""The tuning database's one schema, for SQLite and PostgreSQL alike, and its migrations.

``meta`` says whose database it is (``application``) and its ``schema_version``; a database of
version N-1 is brought to N by ``MIGRATIONS[N]``, in the same transaction that bumps the
version, so a migration is never half applied. A new database gets version 1 then every
migration. The only dialect difference is the floating-point type of ``created``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ... import config
from ...errors import TuningDatabaseError

SCHEMA_VERSION = 3
APPLICATION = "convsel-tuning"
ENV_VAR = config.variable("tuning_db")

FLOAT = {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"}

BASE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    problem TEXT NOT NULL, backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL,
    driver TEXT NOT NULL, convsel_version TEXT NOT NULL, implementations_version TEXT NOT NULL,
    winner TEXT, tie TEXT NOT NULL, timings TEXT NOT NULL, created {float} NOT NULL,
    PRIMARY KEY (problem, backend, vendor, device, driver, convsel_version,
                 implementations_version));
"""

MIGRATIONS: dict[int, str] = {
    2: """
CREATE TABLE IF NOT EXISTS models (
    backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL, driver TEXT NOT NULL,
    convsel_version TEXT NOT NULL, implementations_version TEXT NOT NULL,
    family TEXT NOT NULL, model TEXT NOT NULL, meta TEXT NOT NULL, created {float} NOT NULL,
    PRIMARY KEY (backend, vendor, device, driver, convsel_version, implementations_version));
""",
    # Fleet uploads (convsel.tuning.fleet): every uploaded measurement of an entry's key, with
    # who sent it and when, from which the entry is merged; and fit jobs run off the request
    # path, which any replica can report on.
    3: """
CREATE TABLE IF NOT EXISTS uploads (
    problem TEXT NOT NULL, backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL,
    driver TEXT NOT NULL, convsel_version TEXT NOT NULL, implementations_version TEXT NOT NULL,
    digest TEXT NOT NULL, uploader TEXT NOT NULL, received {float} NOT NULL,
    status TEXT NOT NULL, note TEXT NOT NULL, winner TEXT, tie TEXT NOT NULL,
    timings TEXT NOT NULL, created {float} NOT NULL,
    PRIMARY KEY (problem, backend, vendor, device, driver, convsel_version,
                 implementations_version, digest));
CREATE INDEX IF NOT EXISTS uploads_by_device ON uploads (backend, vendor, device, driver);
CREATE TABLE IF NOT EXISTS fit_jobs (
    id TEXT PRIMARY KEY, backend TEXT NOT NULL, vendor TEXT NOT NULL, device TEXT NOT NULL,
    driver TEXT NOT NULL, requester TEXT NOT NULL, status TEXT NOT NULL,
    submitted {float} NOT NULL, finished {float}, result TEXT);
""",
}

TABLES = frozenset({"meta", "entries", "models", "uploads", "fit_jobs"})

ENTRY_KEY = ("problem", "backend", "vendor", "device", "driver", "convsel_version",
             "implementations_version")
ENTRY_COLUMNS = (*ENTRY_KEY, "winner", "tie", "timings", "created")
MODEL_KEY_FIELDS = ("backend", "vendor", "device", "driver")
MODEL_KEY = (*MODEL_KEY_FIELDS, "convsel_version", "implementations_version")
MODEL_COLUMNS = (*MODEL_KEY, "family", "model", "meta", "created")


def _statements(script: str, dialect: str) -> list[str]:
    text = script.replace("{float}", FLOAT[dialect])
    return [s.strip() for s in text.split(";") if s.strip()]


def create_statements(dialect: str) -> list[str]:
    """Everything a new database needs, at :data:`SCHEMA_VERSION`, ``meta`` rows included."""
    out = _statements(BASE, dialect)
    for version in sorted(MIGRATIONS):
        out += _statements(MIGRATIONS[version], dialect)
    return out


def migration_statements(from_version: int, dialect: str) -> list[str]:
    """The statements that bring a database of ``from_version`` to :data:`SCHEMA_VERSION`."""
    out: list[str] = []
    for version in range(from_version + 1, SCHEMA_VERSION + 1):
        out += _statements(MIGRATIONS[version], dialect)
    return out


def upsert(table: str, columns: tuple[str, ...], key: tuple[str, ...], *,
           only_if_newer: bool = False) -> str:
    """``INSERT ... ON CONFLICT DO UPDATE`` (standard in both engines): one atomic statement,
    so two writers of one key never fail, the later simply wins. ``only_if_newer`` keeps a
    stored row whose ``created`` is later than the incoming one."""
    updates = ", ".join(f"{c}=excluded.{c}" for c in columns if c not in key)
    sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
           f"({', '.join('?' * len(columns))}) ON CONFLICT ({', '.join(key)}) DO UPDATE SET "
           f"{updates}")
    return sql + f" WHERE excluded.created > {table}.created" if only_if_newer else sql


def check(where: str, tables: set[str], meta: Mapping[str, str], *, what: str,
          convsel_version: str) -> int:
    """The schema version of a database that holds ``tables`` and ``meta``, after checking it
    is convsel's, not newer than this convsel, and complete. ``what`` names the container in
    messages ("an SQLite file", "a PostgreSQL database")."""
    if "meta" not in tables:
        raise TuningDatabaseError(
            f"{where} is {what} of another program (tables: "
            f"{', '.join(sorted(tables)) or 'none'}), not a convsel tuning database; "
            f"point {ENV_VAR} or --db elsewhere")
    if meta.get("application") != APPLICATION:
        raise TuningDatabaseError(f"{where} is not a convsel tuning database "
                                  f"(application={meta.get('application')!r})")
    try:
        version = int(meta.get("schema_version", "0"))
    except ValueError:
        version = 0
    if version > SCHEMA_VERSION:
        raise TuningDatabaseError(
            f"{where} has schema version {version}, written by a newer convsel; this "
            f"convsel {convsel_version} reads schema {SCHEMA_VERSION}")
    if version < 1 or "entries" not in tables:
        raise TuningDatabaseError(f"{where} has schema version {version} and no "
                                  f"migration to {SCHEMA_VERSION}")
    return version


META_ROWS = (("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION)))
