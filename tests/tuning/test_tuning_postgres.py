"""The tuning store on a real PostgreSQL server: round trip, errors, migration, concurrent
writers, kill -9 during a commit, and replicas (processes, then two `convsel serve`) sharing
measurements through one database.

The server comes from the ``postgres_server`` fixture (tests/conftest.py, scripts/postgres.sh);
each test gets a fresh database (``postgres_url``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo import ROOT
from store_worker import DEVICE, SMALL, entry

import convsel.tuning.db as dbmod
from convsel import TuningDatabaseError
from convsel.policies import choose
from convsel.tuning.db import TuningDB, open_db
from convsel.tuning.store import schema

KEY = {"backend": "numpy", "vendor": "x86_64", "device": "worker-cpu", "driver": "numpy 2"}


def password(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def with_part(url: str, *, password: str | None = None, port: int | None = None,
              dbname: str | None = None) -> str:
    creds, rest = url.split("://", 1)[1].split("@", 1)
    user, old_password = creds.split(":", 1)
    hostport, old_db = rest.split("/", 1)
    host, old_port = hostport.rsplit(":", 1)
    return (f"postgresql://{user}:{password or old_password}@{host}:{port or old_port}/"
            f"{dbname or old_db}")


def admin(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "store_worker.py"), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


# -- one process --------------------------------------------------------------------------------

def test_round_trip_of_entries_and_models(postgres_url):
    db = TuningDB(postgres_url)
    e = entry(1)
    db.record(e)
    assert db.lookup(e.problem, "numpy", DEVICE) == e
    db.record_many([entry(i) for i in range(2, 12)])
    db.record(entry(1, winner="im2col_gemm"))              # the same key: replaced
    assert db.lookup(e.problem, "numpy", DEVICE).winner == "im2col_gemm"
    assert len(db.entries()) == 11 and len(db.entries(backend="opencl")) == 0
    db.save_model(KEY, "tree", {"weights": [0.5, 1.5]}, {"trained_on": 11})
    got = db.load_model(KEY)
    assert (got["family"], got["model"], got["meta"]) == ("tree", {"weights": [0.5, 1.5]},
                                                          {"trained_on": 11})
    assert [m["family"] for m in db.models()] == ["tree"]
    status = db.status()
    assert (status["engine"], status["entries"], status["models"]) == ("postgresql", 11, 1)
    assert status["schema_version"] == schema.SCHEMA_VERSION and status["writable"]
    assert password(postgres_url) not in json.dumps(status) + repr(db) + str(db.path)
    assert status["path"].startswith("postgresql://convsel@127.0.0.1:")
    assert db.delete(backend="numpy") == 11 and db.status()["entries"] == 0
    db.close()


def test_versions_keep_entries_and_models_apart(postgres_url, monkeypatch):
    db = TuningDB(postgres_url)
    db.record(entry(1))
    db.save_model(KEY, "tree", {"w": 1}, {})
    monkeypatch.setattr(dbmod, "IMPLEMENTATIONS_VERSION", "another")
    assert db.lookup(entry(1).problem, "numpy", DEVICE) is None
    assert db.load_model(KEY) is None
    monkeypatch.setattr(dbmod, "__version__", "9.9.9")
    db.save_model(KEY, "linear", {"w": 2}, {})
    monkeypatch.undo()
    assert db.load_model(KEY)["family"] == "tree" and len(db.models()) == 2
    db.close()


def test_export_from_sqlite_and_import_into_postgres(tmp_path, postgres_url):
    lite = TuningDB(tmp_path / "tuning.sqlite")
    lite.record_many([entry(i, created=2000.0) for i in range(1, 6)])
    model_key = {"backend": "numpy", "vendor": DEVICE["vendor"], "device": DEVICE["name"],
                 "driver": DEVICE["driver"]}
    lite.save_model(model_key, "roofline", {"coef": [1.0]}, {"id": "m"})
    pg = TuningDB(postgres_url)
    pg.record(entry(1, created=3000.0, winner="winograd"))   # newer than the export's
    result = pg.import_json(json.loads(json.dumps(lite.export_json())))
    assert result == {"imported": 4, "kept": 1, "models_imported": 1, "models_kept": 0,
                      "rejected": []}
    assert pg.load_model(model_key)["model"] == {"coef": [1.0]}   # models travel too
    assert pg.lookup(entry(1).problem, "numpy", DEVICE).winner == "winograd"
    assert {e.problem for e in pg.entries()} == {e.problem for e in lite.entries()}
    back = TuningDB(tmp_path / "back.sqlite")
    assert back.import_json(pg.export_json())["imported"] == 5
    pg.close()


def test_errors_are_clear_and_never_show_the_password(postgres_url):
    secret = "not-the-password-4711"
    cases = [(with_part(postgres_url, password=secret), "authentication failed"),
             (with_part(postgres_url, password=secret, port=1), "cannot be reached"),
             (with_part(postgres_url, dbname="no_such_db"), "does not exist")]
    for url, why in cases:
        with pytest.raises(TuningDatabaseError, match=why) as caught:
            TuningDB(url, timeout=5)
        assert password(url) not in str(caught.value)
        assert "convsel@127.0.0.1" in str(caught.value)
    with pytest.raises(TuningDatabaseError, match="not a valid PostgreSQL URL"):
        TuningDB("postgresql://host:notaport:x/db?bad", timeout=1)


def test_a_foreign_or_newer_database_is_refused(postgres_url):
    with admin(postgres_url) as con:
        con.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(TuningDatabaseError, match="PostgreSQL database of another program.*"
                                                  "users"):
        TuningDB(postgres_url)
    with admin(postgres_url) as con:
        con.execute("DROP TABLE users")
    TuningDB(postgres_url).close()
    with admin(postgres_url) as con:
        con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(TuningDatabaseError, match="schema version 99.*newer convsel"):
        TuningDB(postgres_url)


def test_corrupt_stored_json_is_a_database_error(postgres_url):
    db = TuningDB(postgres_url)
    db.record(entry(1))
    db.save_model(KEY, "tree", {"w": 1}, {})
    with admin(postgres_url) as con:
        con.execute("UPDATE models SET model = '{\"w\": ['")
        con.execute("UPDATE entries SET timings = 'garbage'")
    with pytest.raises(TuningDatabaseError, match="stored model .*not valid JSON"):
        db.load_model(KEY)
    with pytest.raises(TuningDatabaseError, match="stored entry .*corrupt"):
        db.entries()
    db.close()


def test_a_schema_1_database_is_migrated(postgres_url):
    with admin(postgres_url) as con:
        for statement in schema.BASE.format(float="DOUBLE PRECISION").split(";"):
            if statement.strip():
                con.execute(statement)
        con.execute("INSERT INTO meta VALUES ('application', %s), ('schema_version', '1')",
                    (schema.APPLICATION,))
    TuningDB(postgres_url).record(entry(1))     # opening migrated it, entries still work
    with admin(postgres_url) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'"
                           ).fetchone() == (str(schema.SCHEMA_VERSION),)
    db = TuningDB(postgres_url)
    db.save_model(KEY, "tree", {"w": 1}, {})
    assert db.load_model(KEY)["model"] == {"w": 1} and db.status()["entries"] == 1
    db.close()


def test_a_server_restart_is_survived_by_the_pool(postgres_url):
    # The pool checks a connection before lending it: one the server dropped is replaced.
    db = TuningDB(postgres_url)
    db.record(entry(1))
    with admin(postgres_url) as con:
        con.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                    "datname = current_database() AND pid <> pg_backend_pid()")
    assert db.lookup(entry(1).problem, "numpy", DEVICE) is not None
    db.close()


def test_a_database_gone_away_is_an_error_and_measured_answers_from_the_rules(postgres_url):
    db = TuningDB(postgres_url, timeout=1)
    db.record(entry(1))
    name = postgres_url.rsplit("/", 1)[1]
    with admin(with_part(postgres_url, dbname="postgres")) as con:
        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    started = time.monotonic()
    with pytest.raises(TuningDatabaseError, match="database does not exist") as caught:
        db.lookup(entry(1).problem, "numpy", DEVICE)
    assert time.monotonic() - started < 10 and password(postgres_url) not in str(caught.value)
    sel = choose(SMALL, "cpu", policy="measured", backend="numpy", db=db)
    assert sel.source == "rules" and "unavailable" in sel.trace[-1].reason
    db.close()


# -- several processes --------------------------------------------------------------------------

def test_writers_starting_together_on_an_empty_database_lose_no_rows(postgres_url):
    # Four processes create the schema at once (advisory lock), then write 40 rows each and
    # all rewrite one shared key, interleaved: nothing fails and nothing is lost.
    procs = [worker("write", postgres_url, str(w), "40") for w in range(4)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outputs
    db = TuningDB(postgres_url)
    assert db.status()["entries"] == 4 * 40 + 1
    assert db.lookup(SMALL, "numpy", DEVICE).winner in {"w0", "w1", "w2", "w3"}
    db.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_kill_9_inside_a_transaction_or_its_commit_leaves_the_store_intact(engine, tmp_path,
                                                                          request):
    url = (str(tmp_path / "tuning.sqlite") if engine == "sqlite"
           else request.getfixturevalue("postgres_url"))
    TuningDB(url).close()
    batch, rng, outcomes = 25, random.Random(15), []
    count = 0
    for trial in range(6):
        # Even trials kill inside an open transaction (the worker holds it after inserting);
        # odd ones around the COMMIT itself.
        inside = trial % 2 == 0
        proc = worker("commits", url, str(batch), str(trial * 100_000),
                      "0.5" if inside else "0")
        event = f"{'inserted' if inside else 'commit'} {rng.randrange(0, 3)}\n"
        line = ""
        while line != event:
            line = proc.stdout.readline()
            assert line, f"worker ended early: {proc.stderr.read()[-2000:]}"
        time.sleep(rng.uniform(0, 0.004))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        rest = proc.stdout.read()    # what readline had buffered too: not communicate()
        proc.stdout.close()
        proc.stderr.close()
        kind, last = (line + rest).strip().splitlines()[-1].split()
        # Batches 0..last-1 committed. Killed after "inserted last": that transaction was
        # open, so it is gone. After "commit last": it is wholly in or wholly out.
        allowed = {int(last) * batch} | ({(int(last) + 1) * batch} if kind == "commit" else set())
        db = TuningDB(url, timeout=30)
        now = db.status()["entries"]
        assert now - count in allowed, (trial, kind, last, now - count)
        outcomes.append(f"{kind}:{'in' if now - count > int(last) * batch else 'out'}")
        count = now
        assert len(db.entries()) == now              # every stored row still parses
        db.record(entry(10_000_000 + trial))          # and nothing is left locked
        count += 1
        db.close()
    if engine == "sqlite":
        with sqlite3.connect(url) as con:
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    print(f"{engine}: last event before each kill and whether its batch stayed: {outcomes}")


def test_a_tune_in_one_process_is_used_by_measured_in_another(postgres_url):
    reader = TuningDB(postgres_url)                   # open (pool connected) before the write
    before = choose(SMALL, "cpu", policy="measured", backend="numpy", db=postgres_url)
    assert before.source == "rules"
    proc = worker("tune", postgres_url)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    tuned = json.loads(out)
    assert tuned["complete"] and (tuned["winner"] or tuned["tie"])
    after = choose(SMALL, "cpu", policy="measured", backend="numpy", db=postgres_url)
    assert after.source == "tuning-db", after.trace[-1]
    assert after.measurement["timings"]
    assert reader.lookup(SMALL, "numpy", after.measurement["device"]) is not None
    assert open_db(postgres_url).status()["entries"] == 1
    reader.close()


def test_a_url_turned_into_a_path_is_refused_not_made_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TuningDatabaseError, match="turned into a file path") as caught:
        TuningDB(Path("postgresql://convsel:hush-4711@127.0.0.1:5432/convsel"))
    assert "hush-4711" not in str(caught.value) and list(tmp_path.iterdir()) == []


def test_two_service_replicas_share_one_store(postgres_url):
    httpx = pytest.importorskip("httpx")
    from service.config import Settings

    if Settings.model_fields["tuning_db"].annotation != (str | None):
        pytest.skip("service.config.Settings.tuning_db is not a str, so CONVSEL_TUNING_DB "
                    "cannot carry a URL to the service (branch `service` makes it one)")
    env = {**os.environ, "CONVSEL_TUNING_DB": postgres_url}
    replicas = []
    try:
        for _ in range(2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = subprocess.Popen([sys.executable, "-m", "convsel.cli", "serve", "--host",
                                     "127.0.0.1", "--port", str(port), "--workers", "1"],
                                    env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            replicas.append((f"http://127.0.0.1:{port}", proc))
        for url, proc in replicas:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, "a replica exited before it was ready"
                assert time.monotonic() < deadline, "a replica was not ready within 60 s"
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        (a, _), (b, _) = replicas
        problem = {"n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3, "pad": 1}
        body = {"problem": problem, "policy": "measured", "backend": "numpy"}
        assert httpx.post(f"{b}/v1/select", json=body, timeout=30).json()["source"] == "rules"
        tuned = httpx.post(f"{a}/v1/tune", json={"problem": problem}, timeout=120)
        assert tuned.status_code == 200 and tuned.json()["recorded"] is True, tuned.text
        answer = httpx.post(f"{b}/v1/select", json=body, timeout=30)
        assert answer.status_code == 200 and answer.json()["source"] == "tuning-db", answer.text
        listed = httpx.get(f"{b}/v1/tuning", timeout=30)
        assert listed.json()["count"] == 1
        assert listed.json()["database"]["engine"] == "postgresql"
        for url, _ in replicas:
            text = httpx.get(f"{url}/readyz", timeout=30).text + listed.text
            assert password(postgres_url) not in text
    finally:
        for _, proc in replicas:
            proc.send_signal(signal.SIGTERM)
        for _, proc in replicas:
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def test_the_db_command_speaks_to_postgresql(postgres_url, tmp_path, capsys):
    from convsel.cli import main

    TuningDB(postgres_url).record_many([entry(i) for i in range(1, 4)])
    assert main(["db", "--db", postgres_url, "path"]) == 0
    assert main(["db", "--db", postgres_url, "export", str(tmp_path / "e.json")]) == 0
    assert main(["db", "--db", str(tmp_path / "t.sqlite"), "import",
                 str(tmp_path / "e.json")]) == 0
    out = capsys.readouterr().out
    assert "postgresql://convsel@127.0.0.1" in out and password(postgres_url) not in out
    assert TuningDB(tmp_path / "t.sqlite").status()["entries"] == 3
