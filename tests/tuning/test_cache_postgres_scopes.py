"""Invalidation per entry on a PostgreSQL store: a write names what it changed, and only the
answers that read it are read again (another problem's answer is served without a query);
what cannot be named (a write too large to name entry by entry, a bare notice from an older
convsel, a listener that cannot vouch) is read again as a whole, so no answer is ever older
than a change this process was told of.

A real server (the ``postgres_url`` fixture); another process writes through its own
TuningDB. Waits for a notice are bounded polls, never timing assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from repo import ROOT
from test_cache_postgres import CONNECT_S, NOTICE_S, count_queries, eventually, listener

import convsel.policies.measured as measured
import convsel.tuning.db as dbmod
import convsel.tuning.fleet.devices as classes
from convsel import ConvProblem, choose
from convsel.policies import device as policy_device
from convsel.tuning import cache
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import decide, device_identity
from convsel.tuning.store import notify

A = ConvProblem(1, 8, 8, 32, 16, 1, 1)
B = ConvProblem(1, 8, 8, 32, 16, 3, 3)


def entry_of(problem: ConvProblem, fast: str, slow: str, device: Any = None,
             **more: Any) -> TuningEntry:
    """``problem`` on ``device`` (this machine's numpy), ``fast`` timed 3x faster than
    ``slow``."""
    timings = {name: {"algorithm": name, "params": {}, "median_s": s, "iqr_s": 0.0, "runs": 5}
               for name, s in ((fast, 1e-3), (slow, 3e-3))}
    return TuningEntry(problem=problem, backend="numpy",
                       device=device or device_identity("numpy"),
                       winner=decide(timings)[0], tie=(), timings=timings, **more)


def winner(db: TuningDB, problem: ConvProblem) -> str:
    return choose(problem, "cpu", policy="measured", db=db).algorithm


def answer(db: TuningDB, problem: ConvProblem) -> Any:
    return choose(problem, "cpu", policy="measured", db=db)


def write_elsewhere(url: str, entries: list[TuningEntry]) -> None:
    """Record ``entries`` in one transaction of another process (only its notice tells)."""
    code = ("import json, sys\nfrom convsel.tuning.db import TuningDB, TuningEntry\n"
            "db = TuningDB(sys.argv[1])\n"
            "db.record_many([TuningEntry.from_dict(d) for d in json.loads(sys.argv[2])])\n"
            "db.close()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code, url, json.dumps([e.to_dict() for e in entries])],
                   check=True, timeout=120, env=env)


@pytest.fixture(autouse=True)
def _fresh():
    cache.clear()
    yield
    cache.clear()
    policy_device.cached_identity.cache_clear()


@pytest.fixture
def planted(postgres_url):
    """A store holding A and B (``direct`` fastest), both answers read once and kept."""
    db = TuningDB(postgres_url)
    db.record_many([entry_of(A, "direct", "im2col_gemm"), entry_of(B, "direct", "im2col_gemm")])
    heard = listener(db)
    assert winner(db, A) == "direct" and winner(db, B) == "direct"
    yield db, heard
    db.close()


def test_another_process_write_to_a_drops_as_answer_only(planted, postgres_url, monkeypatch):
    db, heard = planted
    kept_b = answer(db, B)
    sent = count_queries(db, monkeypatch)
    notices = heard.notices
    write_elsewhere(postgres_url, [entry_of(A, "im2col_gemm", "direct")])
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert answer(db, B) is kept_b and sent == []         # B's answer: no query
    assert winner(db, A) == "im2col_gemm"
    assert len(sent) == 1 and "problem IN" in sent[0]     # A's row, not the device's rows


def test_own_write_is_seen_at_once_and_its_notice_is_not_counted_twice(planted, postgres_url,
                                                                        monkeypatch):
    db, heard = planted
    kept_b = answer(db, B)
    writer = TuningDB(postgres_url)          # another store object of this process
    notices = heard.notices
    writer.record(entry_of(A, "im2col_gemm", "direct"))
    sent = count_queries(db, monkeypatch)
    assert winner(db, A) == "im2col_gemm" and answer(db, B) is kept_b   # no wait
    assert len(sent) == 1
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert winner(db, A) == "im2col_gemm" and len(sent) == 1   # its own notice: no re-read
    writer.close()


def test_a_write_to_another_table_keeps_entry_answers_but_not_unscoped_reads(planted,
                                                                             monkeypatch):
    db, heard = planted
    kept_b = answer(db, B)
    reads: list[int] = []
    assert cache.cached(db, ("probe",), lambda: reads.append(1) or len(reads)) == 1
    sent = count_queries(db, monkeypatch)
    with db.transaction() as tx:
        tx.execute("UPDATE fit_jobs SET status=? WHERE id=?", ("failed", "no such job"))
    assert answer(db, B) is kept_b and sent == []
    # a read that says nothing of what it depends on depends on every write
    assert cache.cached(db, ("probe",), lambda: reads.append(1) or len(reads)) == 2


def test_a_write_too_large_to_name_by_entry_drops_the_devices_answers(planted, postgres_url,
                                                                      monkeypatch):
    db, heard = planted
    kept_b = answer(db, B)
    many = [entry_of(ConvProblem(1, 8, 8, c, 16, 1, 1), "direct", "im2col_gemm")
            for c in range(33, 93)]   # not A's 32; 60 x ~170 bytes: over 8000 by entry
    notices = heard.notices
    sent = count_queries(db, monkeypatch)
    write_elsewhere(postgres_url, [entry_of(A, "im2col_gemm", "direct"), *many])
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert winner(db, A) == "im2col_gemm"
    assert answer(db, B) is not kept_b and winner(db, B) == "direct"     # read again
    assert len(sent) == 1 and "problem IN" not in sent[0]   # the device's rows, once


def test_a_bare_notice_from_an_older_convsel_drops_every_answer(planted, postgres_url):
    import psycopg

    db, heard = planted
    kept_b = answer(db, B)
    notices = heard.notices
    with psycopg.connect(postgres_url, autocommit=True) as writer:
        with writer.transaction():        # what convsel before payloads did: names nothing
            writer.execute(dbmod.ENTRY_UPSERT.replace("?", "%s"),
                           dbmod.entry_row(entry_of(A, "im2col_gemm", "direct")))
            writer.execute(notify.NOTIFY)
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert winner(db, A) == "im2col_gemm" and answer(db, B) is not kept_b


def test_a_merge_keeping_count_and_created_is_seen_while_the_listener_is_down(
        postgres_server, postgres_url):
    """The server is asked then (the listener cannot vouch): its answer must move with a write
    that changes neither how many entries there are nor the newest ``created``."""
    import psycopg

    db = TuningDB(postgres_url)
    stored = entry_of(A, "direct", "im2col_gemm")
    db.record_many([stored, entry_of(B, "direct", "im2col_gemm", created=stored.created + 60)])
    heard = listener(db)
    assert winner(db, A) == "direct"
    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server, autocommit=True) as admin, \
            psycopg.connect(postgres_url, autocommit=True) as writer:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "application_name = %s AND datname = %s",
                          (notify.APPLICATION_NAME, name))
            assert eventually(lambda: heard.drops >= 1, CONNECT_S)
            assert db.change_token() is None
            assert winner(db, A) == "direct"      # read again under the server's answer
            merged = entry_of(A, "im2col_gemm", "direct", created=stored.created)
            with writer.transaction():
                writer.execute(dbmod.ENTRY_UPSERT.replace("?", "%s"), dbmod.entry_row(merged))
            assert db.status()["entries"] == 2
            assert winner(db, A) == "im2col_gemm"
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    db.close()


def test_an_answer_for_a_named_class_follows_the_class_to_another_variant(postgres_url,
                                                                          monkeypatch):
    """The class a name stands for is resolved again after a while (the variant with most
    entries): an answer that used the name follows it, though its own entry never changed."""
    for module in (measured, classes):
        monkeypatch.setattr(module, "RESOLVE_TTL_S", 3.0)
    old, new = ({"vendor": "Arm", "name": "load board", "driver": d} for d in ("r1", "r2"))
    db = TuningDB(postgres_url)
    db.record(entry_of(A, "direct", "im2col_gemm", old))
    listener(db)

    def named() -> str:
        return choose(A, "cpu", policy="measured", db=db, device="load board").algorithm

    assert named() == "direct"        # resolving the name asked the server: any write drops it
    with db.transaction() as tx:
        tx.execute("UPDATE fit_jobs SET status=? WHERE id=?", ("failed", "no such job"))
    sent = count_queries(db, monkeypatch)
    assert named() == "direct" and sent == []     # answered again from the name kept
    write_elsewhere(postgres_url, [entry_of(A, "im2col_gemm", "direct", new),
                                   entry_of(B, "direct", "im2col_gemm", new)])
    assert eventually(lambda: named() == "im2col_gemm", CONNECT_S)
    db.close()


def test_the_model_is_kept_across_timings_and_read_again_after_a_refit(postgres_url,
                                                                        monkeypatch):
    """The predicted policy's model depends on its own row only: another process's timings
    leave it in place without a query, a model saved for the device is read again."""
    from convsel.learn.stored import model_key
    from convsel.policies.predicted import load_stored

    db = TuningDB(postgres_url)
    ident = device_identity("numpy")
    key = model_key("numpy", ident)
    db.save_model(key, "roofline", {"broken": True}, {})
    heard = listener(db)
    first = load_stored("numpy", None, db)
    assert first[0] is None and "cannot be used" in first[1], first
    sent = count_queries(db, monkeypatch)
    notices = heard.notices
    write_elsewhere(postgres_url, [entry_of(A, "direct", "im2col_gemm")])
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert load_stored("numpy", None, db) is first and sent == []
    db.save_model(key, "gbt", {"also": "broken"}, {})
    again = load_stored("numpy", None, db)
    assert again is not first and len(sent) >= 1
    db.close()
