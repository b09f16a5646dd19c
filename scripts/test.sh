#!/usr/bin/env bash
# Set everything up (dev extras), lint (ruff), type-check (mypy --strict) and run the suite.
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev || exit 1
.venv/bin/ruff check . || exit 1
.venv/bin/mypy || exit 1          # strict on convsel/ ([tool.mypy] in pyproject.toml)

# -- PostgreSQL (tuning store tests) ----------------------------------------------------------
# scripts/postgres.sh installs Debian's postgresql package when it is missing, starts a private
# server on 127.0.0.1 as the `postgres` user and prints its URL. Under CI a server that cannot
# start fails the PostgreSQL tests (CONVSEL_REQUIRE_POSTGRES=1) instead of skipping them.
if pg_url="$(bash scripts/postgres.sh)"; then
  export CONVSEL_TEST_POSTGRES_URL="$pg_url"
else
  echo "scripts/test.sh: PostgreSQL did not start; the PostgreSQL tests will say why" >&2
fi
if [ -n "${CI:-}" ]; then export CONVSEL_REQUIRE_POSTGRES=1; fi
# -- end PostgreSQL ---------------------------------------------------------------------------

.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
