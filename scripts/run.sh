#!/usr/bin/env bash
# Set everything up and start the convsel service on the embedded defaults
# (packaged heuristics, numpy + PoCL OpenCL backends, SQLite tuning DB in the user data dir,
# the onnx extra for POST /v1/plan).
# Extra arguments go to `convsel serve` (e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all   # the library, OpenCL, the service and onnx (for /v1/plan)
exec .venv/bin/convsel serve "$@"
