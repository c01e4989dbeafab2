#!/usr/bin/env bash
# Run the test suite (sets up .venv first if needed). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
tmp_home="$(mktemp -d)"
trap 'rm -rf "$tmp_home"' EXIT
export PREFECT_HOME="$tmp_home/prefect"
mkdir -p -m 700 "$PREFECT_HOME"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-90}"
export DPR_HOME="$tmp_home/dpr"
# Compiled Python files are kept (git-ignored __pycache__ folders). Where the environment sets
# PYTHONDONTWRITEBYTECODE, every worker compiled the project anew and pytest rewrote every test module's asserts
# again at each collection (20 s -> 9-10 s of CPU per worker once kept), and each `dpr` or child process
# compiled the project's modules again.
unset PYTHONDONTWRITEBYTECODE
# Worker processes (pytest-xdist): 2 by default (this machine has 2 cores and much of a flow test waits on
# the Prefect API or a subprocess); DPR_TEST_WORKERS=0 runs everything in this process. Each worker gets its
# own DPR_HOME and PREFECT_HOME below these (tests/conftest.py). Tests of one module stay on one worker.
workers="${DPR_TEST_WORKERS:-2}"
if [ "$workers" != "0" ]; then
  set -- -n "$workers" --dist loadfile "$@"
fi
.venv/bin/python -m pytest "$@"
