"""Answers kept per process and forgotten when the tuning database changes: a repeated
problem is a dictionary lookup, and a write by this process or another one is seen at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cache_entries import P1, entry

from convsel import choose
from convsel.policies import device as policy_device
from convsel.tuning import cache
from convsel.tuning.db import TuningDB


@pytest.fixture(autouse=True)
def _fresh():
    cache.clear()
    yield
    policy_device.cached_identity.cache_clear()


def test_a_repeated_problem_is_answered_from_memory(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(entry("direct", "gemm_1x1"))
    first = choose(P1, "cpu", policy="measured", db=db)
    assert first.algorithm == "direct" and choose(P1, "cpu", policy="measured", db=db) is first


def test_a_write_by_this_process_is_seen_at_once(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(entry("direct", "gemm_1x1"))
    assert choose(P1, "cpu", policy="measured", db=db).algorithm == "direct"
    db.record(entry("gemm_1x1", "direct"))        # no pause: the WAL counter moves
    assert choose(P1, "cpu", policy="measured", db=db).algorithm == "gemm_1x1"


def test_a_write_by_another_process_is_seen_at_once(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(entry("direct", "gemm_1x1"))
    assert choose(P1, "cpu", policy="measured", db=db).algorithm == "direct"
    code = ("import sys\nsys.path.insert(0, sys.argv[2])\n"
            "from cache_entries import entry\nfrom convsel.tuning.db import TuningDB\n"
            "TuningDB(sys.argv[1]).record(entry('gemm_1x1', 'direct'))\n")
    here = str(__import__("pathlib").Path(__file__).parents[1])   # tests/: cache_entries
    subprocess.run([sys.executable, "-c", code, str(db.path), here], check=True, timeout=60)
    assert choose(P1, "cpu", policy="measured", db=db).algorithm == "gemm_1x1"
