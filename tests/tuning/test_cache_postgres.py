"""Cached reads of a PostgreSQL tuning store, kept until a change notice (LISTEN/NOTIFY) says
the store changed: another process's write is seen once its notice arrives, a repeated read
asks the server nothing, and while the listener is down every read asks the server again.

A real server (the ``postgres_url`` fixture: tests/conftest.py, scripts/postgres.sh). Waits
for a notice are bounded polls, never timing assertions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from cache_entries import P1, entry
from repo import ROOT

import convsel.tuning.db as dbmod
from convsel import choose
from convsel.policies import device as policy_device
from convsel.tuning import cache
from convsel.tuning.db import TuningDB
from convsel.tuning.store import notify

NOTICE_S = 2.0      # how long a test waits for a notice to arrive
CONNECT_S = 10.0    # ... and for the listener to connect (again), retries included


def eventually(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def winner(db: TuningDB) -> str:
    return choose(P1, "cpu", policy="measured", db=db).algorithm


def listener(db: TuningDB) -> notify.Listener:
    assert eventually(lambda: db.change_token() is not None, CONNECT_S), "never listened"
    found = db._postgres._listener     # type: ignore[union-attr]
    assert found is not None
    return found


def count_queries(db: TuningDB, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read this TuningDB sends the server outside a transaction (the token query and
    the cached reads all go through its engine's rows), recorded as it passes."""
    sent: list[str] = []
    real = db._store.rows

    def rows(sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        sent.append(sql)
        return real(sql, args)

    monkeypatch.setattr(db._store, "rows", rows)
    return sent


def write_elsewhere(url: str, fast: str, slow: str) -> None:
    """Record an entry from another process (so no local count moves: only the notice)."""
    code = ("import sys\nfrom test_cache_postgres import entry\n"
            "from convsel.tuning.db import TuningDB\n"
            "db = TuningDB(sys.argv[1])\ndb.record(entry(sys.argv[2], sys.argv[3]))\n"
            "db.close()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "tests" / "tuning"), str(ROOT / "tests"),
         os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code, url, fast, slow], check=True, timeout=120,
                   env=env)


@pytest.fixture(autouse=True)
def _fresh():
    cache.clear()
    yield
    cache.clear()
    policy_device.cached_identity.cache_clear()


def test_another_process_write_is_seen_once_its_notice_arrives(postgres_url):
    db = TuningDB(postgres_url)
    db.record(entry("direct", "gemm_1x1"))
    heard = listener(db)
    assert winner(db) == "direct"
    notices = heard.notices
    write_elsewhere(postgres_url, "gemm_1x1", "direct")
    assert eventually(lambda: heard.notices > notices, NOTICE_S), "no notice arrived"
    assert winner(db) == "gemm_1x1"
    db.close()


def test_a_write_in_this_process_is_seen_at_once(postgres_url):
    reader, writer = TuningDB(postgres_url), TuningDB(postgres_url)
    writer.record(entry("direct", "gemm_1x1"))
    listener(reader)
    assert winner(reader) == "direct"
    writer.record(entry("gemm_1x1", "direct"))     # no wait: this process's commit counts
    assert winner(reader) == "gemm_1x1"
    reader.close()
    writer.close()


def test_a_repeated_read_without_writes_does_not_ask_the_server(postgres_url, monkeypatch):
    db = TuningDB(postgres_url)
    db.record(entry("direct", "gemm_1x1"))
    listener(db)
    answers = {policy: choose(P1, "cpu", policy=policy, db=db) for policy in
               ("measured", "predicted")}           # read once (predicted: no model, rules)
    sent = count_queries(db, monkeypatch)
    reads = []
    for batch in range(2):
        if batch:
            time.sleep(notify.HEARTBEAT_S * 1.5)    # a heartbeat between: it moves nothing
        for _ in range(50):
            for policy, first in answers.items():
                assert choose(P1, "cpu", policy=policy, db=db) is first
            assert cache.cached(db, ("probe",), lambda: reads.append(1) or len(reads)) == 1
    assert sent == [] and reads == [1]
    db.close()


def test_while_the_listener_is_down_reads_ask_the_server_and_it_reconnects(
        postgres_server, postgres_url, monkeypatch):
    import psycopg

    db = TuningDB(postgres_url)
    db.record(entry("direct", "gemm_1x1"))
    heard = listener(db)
    before = db.change_token()
    assert winner(db) == "direct"
    name = postgres_url.rsplit("/", 1)[1]
    # Opened before the database refuses connections: the writer (and db's pooled one).
    with psycopg.connect(postgres_server, autocommit=True) as admin, \
            psycopg.connect(postgres_url, autocommit=True) as writer:
        # Refusing new connections keeps the listener down until the test lets it back.
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                "application_name = %s AND datname = %s",
                (notify.APPLICATION_NAME, name)).fetchall()
            assert killed == [(True,)]
            assert eventually(lambda: heard.drops >= 1, CONNECT_S)
            assert db.change_token() is None      # untrusted from the moment it was lost
            # Another writer commits; no listener hears it.
            with writer.transaction():
                writer.execute(dbmod.ENTRY_UPSERT.replace("?", "%s"),
                               dbmod.entry_row(entry("gemm_1x1", "direct")))
                writer.execute(notify.NOTIFY)
            sent = count_queries(db, monkeypatch)
            assert winner(db) == "gemm_1x1"          # at once, by asking
            asked = len(sent)
            assert asked >= 1
            assert winner(db) == "gemm_1x1" and len(sent) > asked   # every call asks
            assert heard.connections == 1
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    assert eventually(lambda: heard.connections == 2 and db.change_token() is not None,
                      CONNECT_S), f"the listener did not reconnect ({heard.last_error})"
    after = db.change_token()
    assert after != before       # a new connection moves the count: notices were lost
    assert winner(db) == "gemm_1x1"
    asked = len(sent)
    assert winner(db) == "gemm_1x1" and len(sent) == asked     # cached again
    db.close()


def test_a_forked_child_starts_its_own_listener(postgres_url):
    db = TuningDB(postgres_url)
    parent = listener(db)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:      # the child: the parent's listener thread did not come along
        try:
            ok = eventually(lambda: db.change_token() is not None, CONNECT_S)
            mine = db._postgres._listener      # type: ignore[union-attr]
            good = ok and mine is not parent and mine is not None and mine.pid == os.getpid()
            os.write(write, b"1" if good else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert db.change_token() is not None and db._postgres._listener is parent  # type: ignore[union-attr]
    db.close()


def test_the_listener_stops_when_no_store_uses_it(postgres_url):
    db = TuningDB(postgres_url)
    heard = listener(db)
    db.close()
    assert eventually(lambda: heard.stopped, CONNECT_S)
    assert eventually(lambda: not heard._thread.is_alive(), CONNECT_S)


def test_the_listener_does_not_keep_a_process_alive(postgres_url):
    code = ("import sys, time\nfrom convsel.tuning.db import TuningDB\n"
            "db = TuningDB(sys.argv[1])\ndeadline = time.monotonic() + 10\n"
            "while db.change_token() is None and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
            "print(db.change_token() is not None)\n")   # then returns, db still open
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, postgres_url], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
