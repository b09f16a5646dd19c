#!/usr/bin/env bash
# Set everything up (dev extras), lint (ruff), type-check (mypy --strict) and run the suite.
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."

# -- Chromium (the service's /docs test renders the page headless) ----------------------------
# Debian's chromium, installed with apt-get when it is missing and apt-get can run (root);
# without it tests/service/test_service_operator.py skips the /docs rendering test and says why.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" -eq 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >/dev/null 2>&1 || echo "scripts/test.sh: could not install chromium" >&2
fi
# -- end Chromium -----------------------------------------------------------------------------

bash scripts/setup.sh dev || exit 1
.venv/bin/ruff check . || exit 1
# mypy (strict on convsel/: [tool.mypy] in pyproject.toml) runs beside the suite's first part,
# which leaves part of a core idle; its verdict is read before the second part (before any
# test when test paths are given), and a failure fails the run.
mypy_log="$(mktemp)"
.venv/bin/mypy > "$mypy_log" 2>&1 &
mypy_pid=$!
mypy_verdict() {
  wait "$mypy_pid"
  local rc=$?
  cat "$mypy_log"
  rm -f "$mypy_log"
  return "$rc"
}

# -- PostgreSQL (tuning store tests) ----------------------------------------------------------
# scripts/postgres.sh installs Debian's postgresql package when it is missing, starts a private
# server on 127.0.0.1 as the `postgres` user and prints its URL. Under CI a server that cannot
# start fails the PostgreSQL tests (CONVSEL_REQUIRE_POSTGRES=1) instead of skipping them. A
# server this script started is stopped when it exits (however it exits); one that was already
# running is someone else's and keeps running.
pg_was_running=0
bash scripts/postgres.sh status 2>/dev/null && pg_was_running=1
if pg_url="$(bash scripts/postgres.sh)"; then
  export CONVSEL_TEST_POSTGRES_URL="$pg_url"
  if [ "$pg_was_running" -eq 0 ]; then
    trap 'bash scripts/postgres.sh stop' EXIT
  fi
else
  echo "scripts/test.sh: PostgreSQL did not start; the PostgreSQL tests will say why" >&2
fi
if [ -n "${CI:-}" ]; then export CONVSEL_REQUIRE_POSTGRES=1; fi
# -- end PostgreSQL ---------------------------------------------------------------------------

# -- the suite ----------------------------------------------------------------------------------
# Whole suite (no test paths given): in two parts. The tests that never judge a timing (the
# algorithms' and backends' correctness against float64, ACL's rules, ONNX planning and the
# cost models on planted timings, the argument checks) run on every core (pytest-xdist): on a
# fresh machine they are mostly the OpenCL driver compiling a kernel per geometry (about 4 min
# of one core). The rest runs one test at a time: tuning, the service and the CLI time real
# kernels or judge the host's contention, which a second worker on the other core would
# disturb.
PARALLEL=(tests/algorithms tests/backends tests/acl tests/onnx tests/learn
          tests/test_architecture.py tests/test_config.py tests/test_foreign_arrays.py
          tests/test_front_door.py tests/test_problem.py tests/test_public_api.py
          tests/test_target_names.py)
pytest_run() {
  .venv/bin/python -m pytest "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests; that is a failure, not a pass" >&2
    return 1
  fi
  return "$rc"
}
given_paths=0
for arg in "$@"; do
  case "$arg" in -*) ;; *) given_paths=1 ;; esac
done
if [ "$given_paths" -eq 1 ]; then
  mypy_verdict || exit 1
  pytest_run "$@"
  exit $?
fi
# The first three parts multiply with numpy's own BLAS (OpenBLAS), the reference; the fourth
# with oneMKL.
export CONVSEL_GEMM=numpy
pytest_run -n auto --dist worksteal "${PARALLEL[@]}" "$@"
first=$?
mypy_verdict || exit 1
pytest_run "${PARALLEL[@]/#/--ignore=}" "$@"
second=$?
# The numpy backend as a machine without the cpu extra runs it: numba cannot be imported
# (tests/without_numba/sitecustomize.py), so every kernel takes the pure numpy path and the
# fused kernels' tests skip; the same correctness tests and tolerances pass (about 15 s).
PYTHONPATH="$PWD/tests/without_numba${PYTHONPATH:+:$PYTHONPATH}" \
  pytest_run -p no:cacheprovider -k numpy tests/backends/numpy \
  tests/algorithms/test_correctness.py "$@"
third=$?
# The same tests with every GEMM of the numpy backend through oneMKL (the mkl extra, which
# has wheels for x86-64 only); test_mkl.py fails the part if oneMKL did not load.
if [ "$(uname -m)" = x86_64 ]; then
  CONVSEL_GEMM=mkl CONVSEL_TEST_GEMM=mkl pytest_run -p no:cacheprovider -k numpy \
    tests/backends/numpy tests/algorithms/test_correctness.py "$@"
  fourth=$?
else
  echo "scripts/test.sh: no oneMKL wheel for $(uname -m): the oneMKL part is skipped" >&2
  fourth=0
fi
[ "$first" -eq 0 ] && [ "$second" -eq 0 ] && [ "$third" -eq 0 ] && [ "$fourth" -eq 0 ]
