"""Suite-wide setup: nothing a test does may write into the user's real tuning database."""

import os

import pytest

# learn_support's fixtures (fresh_learn_caches) for the learned-policy tests in every folder
pytest_plugins = ["learn_support"]


@pytest.fixture(scope="session", autouse=True)
def private_tuning_db(tmp_path_factory):
    # Session-wide and in os.environ (not monkeypatch) so subprocesses, such as the real
    # `convsel serve` test, inherit it too.
    path = tmp_path_factory.mktemp("tuning") / "tuning.sqlite"
    previous = os.environ.get("CONVSEL_TUNING_DB")
    os.environ["CONVSEL_TUNING_DB"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("CONVSEL_TUNING_DB", None)
    else:
        os.environ["CONVSEL_TUNING_DB"] = previous


# -- PostgreSQL -------------------------------------------------------------------------------
# A real server, started once per session by scripts/postgres.sh (which installs Debian's
# package when it is missing and runs the server as the `postgres` user). scripts/test.sh
# starts it first and passes CONVSEL_TEST_POSTGRES_URL; CONVSEL_REQUIRE_POSTGRES=1 (set there
# under CI) turns "cannot start" from a skip into a failure, so CI never skips these silently.

def _postgres_unavailable(reason: str) -> None:
    if os.environ.get("CONVSEL_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required (CONVSEL_REQUIRE_POSTGRES=1) but {reason}")
    pytest.skip(f"no PostgreSQL server for these tests: {reason}")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a running PostgreSQL server whose role may create databases."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        _postgres_unavailable(f"psycopg is not installed ({exc}); pip install -e '.[dev]'")
    url = os.environ.get("CONVSEL_TEST_POSTGRES_URL", "").strip()
    if not url:
        import subprocess
        from pathlib import Path

        script = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"
        try:
            done = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                                  timeout=600, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _postgres_unavailable(f"{script.name} did not finish ({exc})")
        if done.returncode != 0 or not done.stdout.strip():
            _postgres_unavailable(f"{script.name} failed: {done.stderr.strip()[-800:]}")
        url = done.stdout.strip().splitlines()[-1]
    return url


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database on the session's server, dropped after the test."""
    import uuid

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    import convsel.tuning.db as dbmod

    name = f"convsel_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(postgres_server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _postgres_unavailable(f"cannot create a database on the server ({exc})")
    params = conninfo_to_dict(postgres_server)
    url = (f"postgresql://{params['user']}:{params['password']}@{params['host']}:"
           f"{params['port']}/{name}")
    yield url
    dbmod.close_open(url)
    _drop_database(make_conninfo(postgres_server), name)


def _drop_database(server: str, name: str) -> None:
    """DROP ... WITH (FORCE) ends the test's own sessions, but not a server process of
    another role, such as an autovacuum worker that has just started on the new database
    ("must be a member of the role whose process is being terminated"): such a worker
    finishes in moments, so the drop is tried again for a few seconds."""
    import time

    import psycopg

    deadline = time.monotonic() + 15
    while True:
        try:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
