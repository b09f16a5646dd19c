"""scripts/test.sh stops the PostgreSQL server it started, however pytest ends, and leaves
running one it found running (issue 25, item 16). test.sh runs for real in a copy of the
repository's scripts whose setup, ruff, mypy and pytest are stand-ins; scripts/postgres.sh is
the real one, on its own port and directory, so it starts a real server."""

from __future__ import annotations

import glob
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from repo import ROOT

STAND_IN = "#!/usr/bin/env bash\nexit 0\n"
# pytest's stand-in: says whether the server runs while "the suite" runs, then exits as told.
FAKE_PYTEST = """#!/usr/bin/env bash
if bash scripts/postgres.sh status 2>/dev/null; then echo running > pytest-saw; \
else echo stopped > pytest-saw; fi
echo "$CONVSEL_TEST_POSTGRES_URL" >> pytest-saw
exit "${FAKE_PYTEST_RC:-0}"
"""


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture(scope="module")
def server_dir():
    if not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
        pytest.skip("needs PostgreSQL's server binaries (Debian's postgresql package; "
                    "scripts/postgres.sh installs it as root)")
    # Under /tmp itself: the server runs as `postgres`, which cannot enter pytest's tmp dirs.
    directory = tempfile.mkdtemp(prefix="convsel-pg-test-")
    yield {"CONVSEL_PG_DIR": directory, "CONVSEL_PG_PORT": str(free_port())}
    subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop"],
                   env={**os.environ, "CONVSEL_PG_DIR": directory}, capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def sandbox(tmp_path, server_dir):
    repo = tmp_path / "repo"
    for name in ("test.sh", "postgres.sh"):
        _executable(repo / "scripts" / name, (ROOT / "scripts" / name).read_text())
    _executable(repo / "scripts" / "setup.sh", STAND_IN)
    for tool in ("ruff", "mypy"):
        _executable(repo / ".venv" / "bin" / tool, STAND_IN)
    _executable(repo / ".venv" / "bin" / "python", FAKE_PYTEST)
    _executable(tmp_path / "bin" / "chromium", STAND_IN)   # test.sh installs none then
    env = {**os.environ, **server_dir, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    for name in ("CI", "CONVSEL_TEST_POSTGRES_URL", "CONVSEL_REQUIRE_POSTGRES"):
        env.pop(name, None)
    return repo, env


def _script(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)


def _running(repo: Path, env: dict) -> bool:
    """Whether a server listens on the sandbox's port (asked of the socket, not the script)."""
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", int(env["CONVSEL_PG_PORT"]))) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("pytest_rc", [0, 1])
def test_a_server_test_sh_started_is_stopped(sandbox, pytest_rc):
    repo, env = sandbox
    assert not _running(repo, env)
    done = _script(repo, {**env, "FAKE_PYTEST_RC": str(pytest_rc)}, "scripts/test.sh")
    assert done.returncode == pytest_rc, done.stderr
    saw, url = (repo / "pytest-saw").read_text().split()
    assert saw == "running" and url.endswith(f":{env['CONVSEL_PG_PORT']}/convsel")
    assert not _running(repo, env), "scripts/test.sh left the server it started running"


def test_a_server_already_running_is_left_running(sandbox):
    repo, env = sandbox
    assert _script(repo, env, "scripts/postgres.sh").returncode == 0
    try:
        assert _script(repo, env, "scripts/test.sh").returncode == 0
        assert (repo / "pytest-saw").read_text().split()[0] == "running"
        assert _running(repo, env), "scripts/test.sh stopped a server it did not start"
    finally:
        _script(repo, env, "scripts/postgres.sh", "stop")


RECORDING_PYTEST = """#!/usr/bin/env bash
echo "$*" >> pytest-args
echo "${PYTHONPATH:-}" >> pytest-pythonpath
echo "${CONVSEL_GEMM:-}/${CONVSEL_TEST_GEMM:-}" >> pytest-gemm
exit 0
"""


def _pytest_calls(repo: Path, env: dict, *args: str) -> list[str]:
    return [call for call, _, _ in _pytest_calls_and_paths(repo, env, *args)]


def _pytest_calls_and_paths(repo: Path, env: dict, *args: str) -> list[tuple[str, str, str]]:
    """Each pytest call's arguments, the PYTHONPATH it ran with and its GEMM settings
    (``CONVSEL_GEMM/CONVSEL_TEST_GEMM``)."""
    _executable(repo / ".venv" / "bin" / "python", RECORDING_PYTEST)
    for name in ("pytest-args", "pytest-pythonpath", "pytest-gemm"):
        (repo / name).unlink(missing_ok=True)
    env = {k: v for k, v in env.items() if k not in ("CONVSEL_GEMM", "CONVSEL_TEST_GEMM")}
    done = _script(repo, env, "scripts/test.sh", *args)
    assert done.returncode == 0, done.stderr
    return list(zip(*((repo / name).read_text().splitlines()
                      for name in ("pytest-args", "pytest-pythonpath", "pytest-gemm")),
                    strict=True))


def test_the_whole_suite_runs_in_a_parallel_part_then_a_serial_one(sandbox):
    """Tests that never time a kernel on every core, the rest one at a time (and none twice),
    then the numpy backend's tests as without the cpu extra (numba unimportable), all with
    numpy's BLAS; then those tests again with oneMKL's GEMM (x86-64); given test paths, just
    those, in one process."""
    repo, env = sandbox
    calls = _pytest_calls_and_paths(repo, env, "-q")
    (parallel, p1, g1), (serial, p2, g2), (no_numba, p3, g3) = calls[:3]
    assert g1 == g2 == g3 == "numpy/"
    if platform.machine() == "x86_64":
        [(with_mkl, p4, g4)] = calls[3:]
        assert with_mkl == no_numba and g4 == "mkl/mkl" and "without_numba" not in p4
    else:
        assert calls[3:] == []
    assert parallel.startswith("-m pytest -n auto --dist worksteal tests/algorithms ")
    assert parallel.endswith(" -q") and "--ignore" not in parallel
    paths = parallel.split()[6:-1]
    assert "tests/backends" in paths and "tests/service" not in paths
    assert serial.split()[2:] == [f"--ignore={p}" for p in paths] + ["-q"]
    assert "without_numba" not in p1 + p2
    assert p3.split(":")[0] == str(repo / "tests" / "without_numba")
    assert no_numba == ("-m pytest -p no:cacheprovider -k numpy tests/backends/numpy "
                        "tests/algorithms/test_correctness.py -q")
    [only] = _pytest_calls(repo, env, "tests/service", "-x")
    assert only == "-m pytest tests/service -x"


def test_the_numba_blocker_makes_numba_unimportable():
    """What the third part relies on: with tests/without_numba first on the path, importing
    numba fails as where it is not installed, and the numpy backend says it runs pure numpy."""
    root = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(root / "without_numba")}
    code = ("try:\n    import numba\nexcept ModuleNotFoundError as e:\n"
            "    print('missing', e.name)\n"
            "from convsel.backends.numpy import accel\nprint(accel.describe())\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["missing numba", "pure numpy (numba not installed)"]


def test_a_mypy_failure_fails_the_run(sandbox):
    repo, env = sandbox
    _executable(repo / ".venv" / "bin" / "mypy", "#!/usr/bin/env bash\necho 'error: x'\nexit 1\n")
    done = _script(repo, env, "scripts/test.sh", "-q")
    assert done.returncode != 0 and "error: x" in done.stdout
