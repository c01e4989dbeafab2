#!/usr/bin/env bash
# Create the process work pool (if missing) and deploy everything in prefect.yaml.
# Needs PREFECT_API_URL pointing at a running Prefect server.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
: "${PREFECT_API_URL:?set PREFECT_API_URL, e.g. http://127.0.0.1:4200/api}"
export PREFECT_CLI_PROMPT=false
.venv/bin/prefect work-pool inspect release-pool >/dev/null 2>&1 || .venv/bin/prefect work-pool create release-pool --type process
.venv/bin/prefect deploy --all --no-prompt
