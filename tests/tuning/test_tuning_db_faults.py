"""The tuning database under real file faults (issue 25, item 10): a real SQLite file that is
truncated, deleted, overwritten in place, remounted read-only or whose disk fills up, while one
TuningDB (cached by open_db, as the service and the policies hold it) stays open on it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_tuning_db import DEVICE, entry

import convsel.tuning.db as dbmod
from convsel import TuningDatabaseError
from convsel.tuning.db import open_db

WORKER = Path(__file__).resolve().parents[1] / "sqlite_fault_worker.py"
PAGE = 4096


@pytest.fixture
def cached(tmp_path):
    """The database as open_db caches it, holding one entry."""
    path = tmp_path / "tuning.sqlite"
    db = open_db(path)
    db.record(entry(h=8))
    yield db
    dbmod.close_open(path)


def found(db, h=8):
    return db.lookup(entry(h=h).problem, "numpy", DEVICE) is not None


@pytest.mark.parametrize("fault", ["truncate", "delete"])
def test_a_truncated_or_deleted_file_gets_its_tables_again(cached, fault):
    if fault == "truncate":
        os.truncate(cached.path, 0)
    else:
        os.remove(cached.path)
    assert not found(cached)                 # the old entry is gone with the file ...
    assert cached.status()["entries"] == 0   # ... and the tables are there again
    cached.record(entry(h=9))                # no restart needed to record
    assert found(cached, h=9) and open_db(cached.path) is cached


def _overwrite_a_leaf_page_of_entries(path: Path) -> None:
    """Garbage over the last table-leaf page (b-tree page type 0x0D) that is not ``meta``'s,
    as a bad sector or a stray write would leave it: SQLite reads the rest without noticing."""
    with sqlite3.connect(path) as con:
        meta_root = con.execute("SELECT rootpage FROM sqlite_master WHERE name='meta'")\
            .fetchone()[0]
    data = bytearray(path.read_bytes())
    leaves = [n for n in range(2, len(data) // PAGE + 1)
              if data[(n - 1) * PAGE] == 0x0D and n != meta_root]
    page = leaves[-1]
    data[(page - 1) * PAGE:page * PAGE] = bytes((i * 37 + 11) % 256 for i in range(PAGE))
    path.write_bytes(bytes(data))


def _integrity_check(path: Path) -> str:
    with sqlite3.connect(path) as con:
        try:
            return str(con.execute("PRAGMA integrity_check").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            return str(exc)   # "database disk image is malformed"


def test_overwritten_pages_make_status_fail_and_writes_refused(cached):
    cached.record_many([entry(h=10 + i) for i in range(60)])   # several pages of entries
    dbmod.close_open(cached.path)                              # checkpoint the WAL
    _overwrite_a_leaf_page_of_entries(cached.path)
    assert _integrity_check(cached.path) != "ok"
    db = open_db(cached.path)
    with pytest.raises(TuningDatabaseError, match="is damaged: SQLite's quick_check"):
        db.status()                          # what /readyz and `convsel db path` report
    with pytest.raises(TuningDatabaseError, match="is damaged"):
        db.record(entry(h=300))              # a tune records nothing into a damaged file


def test_reading_never_creates_a_store(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "x.sqlite"
    with pytest.raises(TuningDatabaseError, match="no tuning database at .*x.sqlite"):
        open_db(path, create=False)
    assert not (tmp_path / "no").exists()


def _in_a_private_mount_namespace(scenario: str, tmp_path: Path) -> dict:
    if not (shutil.which("unshare") and shutil.which("mount")):
        pytest.skip("needs util-linux's unshare and mount to make a real file-system fault")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here ({probe.stderr.strip()}): no way "
                    "to mount a small file system without root")
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable,
                           str(WORKER), scenario, str(mount_point)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_read_only_remount_keeps_reads_and_recovers_writes(tmp_path):
    steps = _in_a_private_mount_namespace("remount-ro", tmp_path)
    assert steps["lookup_ro"] == {"ok": True, "value": True}, steps
    status = steps["status_ro"]["value"]
    assert status["writable"] is False and "mounted read-only" in status["read_only_reason"]
    assert not steps["record_ro"]["ok"] and "read-only" in steps["record_ro"]["error"]
    assert steps["record_rw"]["ok"] and steps["status_rw"]["value"] is True, steps
    assert steps["entries_rw"]["value"] == 2


def test_a_full_disk_is_named_as_such_not_as_a_corrupt_file(tmp_path):
    steps = _in_a_private_mount_namespace("full", tmp_path)
    error = steps["record_full"]["error"]
    assert "disk holding it is full" in error and "corrupt" not in error, error
    assert steps["lookup_full"] == {"ok": True, "value": True}, steps   # reads still work
    assert steps["record_freed"]["ok"] and steps["entries_freed"]["value"] == 2, steps
