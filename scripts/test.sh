#!/usr/bin/env bash
# Run the test suite (sets up .venv first if needed). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
tmp_home="$(mktemp -d)"
trap 'rm -rf "$tmp_home"' EXIT
export PREFECT_HOME="$tmp_home/prefect"
mkdir -p "$PREFECT_HOME"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-90}"
export DPR_HOME="$tmp_home/dpr"
.venv/bin/python -m pytest "$@"
