#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install convsel into it with the given extras.
# Usage: scripts/setup.sh [EXTRAS]    e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
"$python" - <<'PY' || { echo "convsel needs Python >= 3.11 (set PYTHON=...)" >&2; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
# Versions come from constraints.txt (the pins the suite passed with; the Dockerfile uses the
# same file; scripts/constraints.py rewrites it). Reinstall only when pyproject.toml, the pins
# or the requested extras changed since the last setup.
stamp=".venv/.convsel-installed-$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)-${extras:-none}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e "$spec"
  rm -f .venv/.convsel-installed-*
  touch "$stamp"
fi
