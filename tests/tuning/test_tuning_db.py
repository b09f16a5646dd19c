"""The tuning database: round trip, keying, concurrent writers, corruption, read-only paths."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3

import pytest

import convsel.tuning.db as dbmod
import convsel.tuning.store.sqlite as sqlite_store
from convsel import ConvProblem, TuningDatabaseError
from convsel.tuning.db import TuningDB, TuningEntry, default_path

DEVICE = {"vendor": "x86_64", "name": "test-cpu", "driver": "numpy 2"}
OTHER_DEVICE = {"vendor": "x86_64", "name": "other-cpu", "driver": "numpy 2"}


def entry(h: int = 8, device: dict[str, str] = DEVICE, winner: str | None = "im2col_gemm",
          created: float = 1000.0, **changes: object) -> TuningEntry:
    timings = {"im2col_gemm": {"algorithm": "im2col_gemm", "params": {}, "median_s": 1e-3,
                               "iqr_s": 1e-5, "runs": 5, "min_s": 9e-4, "pruned": False},
               "direct": {"algorithm": "direct", "params": {}, "error": "RuntimeError: boom"}}
    return TuningEntry(problem=ConvProblem(1, h, h, 4, 8, 3, 3, pad=1, activation="relu"),
                       backend="numpy", device=device, winner=winner, tie=(),
                       timings=timings, created=created, **changes)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path):
    return TuningDB(tmp_path / "sub" / "tuning.sqlite")


def test_round_trip_keeps_every_field(db):
    e = entry()
    db.record(e)
    got = db.lookup(e.problem, "numpy", DEVICE)
    assert got == e
    assert db.status()["entries"] == 1 and db.status()["writable"]


def test_record_replaces_the_same_key(db):
    db.record(entry(winner="im2col_gemm"))
    db.record(entry(winner="direct"))
    assert [e.winner for e in db.entries()] == ["direct"]


def test_another_device_backend_or_version_is_never_used(db, monkeypatch):
    db.record(entry(device=OTHER_DEVICE))
    db.record(entry(convsel_version="0.0.1"))
    db.record(entry(implementations_version="0"))
    p = entry().problem
    assert db.lookup(p, "numpy", DEVICE) is None
    assert db.lookup(p, "opencl", OTHER_DEVICE) is None
    assert db.lookup(p, "numpy", OTHER_DEVICE) is not None
    assert len(db.entries()) == 3 and len(db.entries(device=DEVICE)) == 2
    monkeypatch.setattr(dbmod, "IMPLEMENTATIONS_VERSION", "0")
    assert db.lookup(p, "numpy", DEVICE) is not None     # now the "0" entry matches


def test_problem_key_is_canonical():
    a = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1, stride=1)
    b = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=(1, 1, 1, 1), stride=(1, 1))
    assert dbmod.problem_key(a) == dbmod.problem_key(b)
    assert dbmod.problem_key(a) != dbmod.problem_key(a.replace(layout="NCHW"))


def test_default_path_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "env.sqlite"))
    assert default_path() == tmp_path / "env.sqlite"
    monkeypatch.delenv("CONVSEL_TUNING_DB")
    assert default_path().name == "tuning.sqlite" and "convsel" in str(default_path())


def test_export_import_moves_entries_and_newer_wins(db, tmp_path):
    db.record(entry(h=8))
    db.record(entry(h=9, device=OTHER_DEVICE))
    doc = json.loads(json.dumps(db.export_json()))
    other = TuningDB(tmp_path / "other.sqlite")
    other.record(entry(h=8, winner="direct", created=2000.0))  # newer than the export's
    result = other.import_json(doc)
    assert result == {"imported": 1, "kept": 1, "models_imported": 0, "models_kept": 0,
                      "rejected": []}
    assert other.lookup(entry(h=8).problem, "numpy", DEVICE).winner == "direct"
    assert other.lookup(entry(h=9).problem, "numpy", OTHER_DEVICE) is not None


def test_import_rejects_bad_entries_by_index_and_foreign_documents(db):
    doc = db.export_json()
    doc["entries"] = [entry().to_dict(), {"problem": {"h": 1}}, "junk"]
    result = db.import_json(doc)
    assert result["imported"] == 1
    assert [r.split(":")[0] for r in result["rejected"]] == ["entry 1", "entry 2"]
    with pytest.raises(TuningDatabaseError, match="not a convsel tuning export"):
        db.import_json({"entries": []})


def _writer(path: str, worker: int, count: int) -> None:
    database = TuningDB(path, timeout=30)
    for i in range(count):
        database.record(entry(h=8 + worker * 100 + i))


def test_concurrent_writers_from_several_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    TuningDB(path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    reader = TuningDB(path)
    seen = [reader.status()["entries"] for _ in range(20)]   # reads run alongside the writes
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert reader.status()["entries"] == 100
    assert seen == sorted(seen)
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_corrupt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(TuningDatabaseError, match="junk.sqlite cannot be used.*corrupt"):
        TuningDB(path)


def test_a_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(TuningDatabaseError, match="another program.*users"):
        TuningDB(path)


def test_a_newer_schema_is_refused(db):
    with sqlite3.connect(db.path) as con:
        con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(TuningDatabaseError, match="schema version 99.*newer convsel"):
        TuningDB(db.path)


def test_a_path_that_cannot_be_created_is_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TuningDatabaseError, match="cannot create.*no database exists"):
        TuningDB(blocker / "tuning.sqlite")


def _readonly_connect(real):
    def connect(target: str, timeout: float, *, uri: bool) -> sqlite3.Connection:
        # a read-write open gets what SQLite gives for an unwritable file
        return real(target.replace("mode=rwc", "mode=ro").replace("mode=rw", "mode=ro"),
                    timeout, uri=uri)
    return connect


def test_a_read_only_database_reads_and_refuses_writes(db, monkeypatch):
    db.record(entry())
    monkeypatch.setattr(sqlite_store, "_connect", _readonly_connect(sqlite_store._connect))
    ro = TuningDB(db.path)
    assert not ro.writable and "not writable" in ro.read_only_reason
    assert ro.lookup(entry().problem, "numpy", DEVICE) is not None
    assert ro.status()["writable"] is False
    with pytest.raises(TuningDatabaseError, match="read-only.*nothing was recorded"):
        ro.record(entry(h=20))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
def test_a_read_only_directory_for_real(db):
    db.record(entry())
    os.chmod(db.path, 0o444)
    os.chmod(db.path.parent, 0o555)
    try:
        ro = TuningDB(db.path)
        assert not ro.writable
        assert ro.lookup(entry().problem, "numpy", DEVICE) is not None
    finally:
        os.chmod(db.path.parent, 0o755)
        os.chmod(db.path, 0o644)
