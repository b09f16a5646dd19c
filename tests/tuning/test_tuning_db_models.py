"""Models in the tuning database: round trip, version isolation, corrupt JSON, migration."""

from __future__ import annotations

import json
import sqlite3

import pytest

import convsel.tuning.db as dbmod
import convsel.tuning.store.sqlite as sqlite_store
from convsel import TuningDatabaseError
from convsel._version import __version__
from convsel.tuning.db import TuningDB
from convsel.tuning.store import schema

KEY = {"backend": "numpy", "vendor": "x86_64", "device": "test-cpu", "driver": "numpy 2"}
MODEL = {"weights": [0.5, -1.25, 3.0], "classes": ["direct", "im2col_gemm"], "depth": 3}
META = {"trained_on": 42, "accuracy": 0.875, "features": ["h", "w", "c"]}


@pytest.fixture
def db(tmp_path):
    return TuningDB(tmp_path / "tuning.sqlite")


def test_round_trip_and_upsert(db):
    assert db.load_model(KEY) is None and db.models() == []
    db.save_model(KEY, "tree", MODEL, META)
    got = db.load_model(KEY)
    assert got is not None
    assert (got["family"], got["model"], got["meta"]) == ("tree", MODEL, META)
    assert isinstance(got["created"], float)
    db.save_model(KEY, "forest", {"trees": []}, {"n": 0})
    got = db.load_model(KEY)
    assert (got["family"], got["model"], got["meta"]) == ("forest", {"trees": []}, {"n": 0})
    listed = db.models()
    assert len(listed) == 1 and "model" not in listed[0]
    assert {k: listed[0][k] for k in KEY} == KEY
    assert listed[0]["family"] == "forest" and listed[0]["meta"] == {"n": 0}
    assert listed[0]["convsel_version"] == __version__
    assert db.status()["models"] == 1


def test_models_are_kept_apart_by_key_and_by_version(db, monkeypatch):
    db.save_model(KEY, "tree", MODEL, META)
    other = {**KEY, "device": "other-cpu"}
    assert db.load_model(other) is None
    assert db.load_model({**KEY, "backend": "opencl"}) is None
    monkeypatch.setattr(dbmod, "IMPLEMENTATIONS_VERSION", "another")
    assert db.load_model(KEY) is None      # a model fitted on other implementations is not used
    db.save_model(KEY, "linear", {"w": [1]}, {})
    assert db.load_model(KEY)["family"] == "linear"
    monkeypatch.setattr(dbmod, "__version__", "9.9.9")
    assert db.load_model(KEY) is None      # nor one saved by another convsel
    monkeypatch.undo()
    assert db.load_model(KEY)["family"] == "tree"
    assert len(db.models()) == 2


def test_a_corrupt_stored_model_is_a_database_error(db):
    db.save_model(KEY, "tree", MODEL, META)
    with sqlite3.connect(db.path) as con:
        con.execute("UPDATE models SET model='{\"weights\": [1,'")
    with pytest.raises(TuningDatabaseError, match="stored model .*device='test-cpu'.*not valid"):
        db.load_model(KEY)
    with sqlite3.connect(db.path) as con:
        con.execute("UPDATE models SET model='{}', meta='not json'")
    with pytest.raises(TuningDatabaseError, match="stored meta"):
        db.models()


def test_bad_keys_and_unserialisable_models_are_refused(db):
    with pytest.raises(TuningDatabaseError, match="lacks driver"):
        db.save_model({k: v for k, v in KEY.items() if k != "driver"}, "tree", MODEL, META)
    with pytest.raises(TuningDatabaseError, match="JSON-serialisable"):
        db.save_model(KEY, "tree", {"w": object()}, META)
    with pytest.raises(TuningDatabaseError, match="JSON-serialisable"):
        db.save_model(KEY, "tree", {"w": float("nan")}, META)
    assert db.models() == []


def _schema_1_file(path):
    """A database as convsel wrote it before models existed (schema 1)."""
    with sqlite3.connect(path) as con:
        con.executescript(schema.BASE.format(float="REAL"))
        con.executemany("INSERT INTO meta VALUES (?, ?)",
                        [("application", dbmod.APPLICATION), ("schema_version", "1")])
        con.execute("INSERT INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    ('{"h":1}', "numpy", "v", "d", "r", "0.0.1", "1", "direct", "[]", "{}", 1.0))


def test_a_schema_1_file_is_migrated_and_keeps_its_entries(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    db = TuningDB(path)
    assert db.status()["schema_version"] == dbmod.SCHEMA_VERSION
    assert db.status()["entries"] == 1 and db.models() == []
    db.save_model(KEY, "tree", MODEL, META)
    assert TuningDB(path).load_model(KEY)["model"] == MODEL
    with sqlite3.connect(path) as con:
        version = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    assert version == (str(dbmod.SCHEMA_VERSION),)
    assert json.loads(json.dumps(db.models()))[0]["family"] == "tree"


def test_a_read_only_schema_1_file_still_reads(tmp_path, monkeypatch):
    path = tmp_path / "old.sqlite"
    _schema_1_file(path)
    real = sqlite_store._connect

    def read_only(target, timeout, *, uri):   # what SQLite gives for an unwritable file
        return real(target.replace("mode=rwc", "mode=ro").replace("mode=rw", "mode=ro"),
                    timeout, uri=uri)

    monkeypatch.setattr(sqlite_store, "_connect", read_only)
    db = TuningDB(path)
    assert not db.writable and db.status()["schema_version"] == 1
    assert db.status()["entries"] == 1 and db.models() == [] and db.load_model(KEY) is None
    with pytest.raises(TuningDatabaseError, match="read-only.*not saved"):
        db.save_model(KEY, "tree", MODEL, META)
