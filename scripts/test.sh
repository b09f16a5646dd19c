#!/usr/bin/env bash
# Set everything up (dev extras), lint (ruff) and run the whole test suite.
# Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."

# -- Chromium (the service's /docs test renders the page headless) ----------------------------
# Debian's chromium, installed with apt-get when it is missing and apt-get can run (root);
# without it tests/test_service_operator.py skips the /docs rendering test and says why.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" -eq 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >/dev/null 2>&1 || echo "scripts/test.sh: could not install chromium" >&2
fi
# -- end Chromium -----------------------------------------------------------------------------

bash scripts/setup.sh dev || exit 1
.venv/bin/ruff check . || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
