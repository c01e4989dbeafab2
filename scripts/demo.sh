#!/usr/bin/env bash
# Run the whole release pipeline on the bundled demo (NYC flights 2013).
# Extra arguments go to the pipeline, e.g. --release-id demo-2013-r2 or --spec my.yaml (or DPR_SPEC=my.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export PREFECT_HOME="${PREFECT_HOME:-$PWD/var/prefect}"
mkdir -p "$PREFECT_HOME"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# the temporary Prefect server can take longer than the 20 s default to start on a busy 2-core machine
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-90}"
export PREFECT_LOGGING_LEVEL="${PREFECT_LOGGING_LEVEL:-INFO}"
# the spec the demo runs on (dpr's operator commands read DPR_SPEC when --spec is not given)
export DPR_SPEC="${DPR_SPEC:-specs/demo.yaml}"
exec .venv/bin/python -m flows.release_pipeline --spec "$DPR_SPEC" "$@"
