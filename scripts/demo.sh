#!/usr/bin/env bash
# Run the whole release pipeline on the bundled demo (NYC flights 2013).
# Extra arguments go to the pipeline, e.g. --release-id demo-2013-r2 or --spec my.yaml (or DPR_SPEC=my.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export PREFECT_HOME="${PREFECT_HOME:-$PWD/var/prefect}"
mkdir -p "$PREFECT_HOME"
chmod 700 "$PREFECT_HOME"  # Prefect's database holds the runs' parameters: owner-only
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# the temporary Prefect server can take longer than the 20 s default to start on a busy 2-core machine
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-90}"
export PREFECT_LOGGING_LEVEL="${PREFECT_LOGGING_LEVEL:-INFO}"
# Prefect's database is created once, as part of the set-up (about 15 s): a run's temporary API server then
# starts in about 9 s instead of about 22 s (flows/prefect_api.py)
if [ ! -s "$PREFECT_HOME/prefect.db" ] && [ -z "${PREFECT_API_URL:-}" ]; then
  echo "demo: creating Prefect's database in $PREFECT_HOME (once)"
  .venv/bin/prefect server database upgrade -y >/dev/null
fi
# the spec the demo runs on (dpr's operator commands read DPR_SPEC when --spec is not given)
export DPR_SPEC="${DPR_SPEC:-specs/demo.yaml}"
# A run of an unregistered dataset name is refused: the data owner registers it first. The demo's owner is
# whoever runs it, so the demo registers the dataset of the spec it runs (DPR_SPEC unless --spec says
# otherwise); a registration that is already there, identical, is accepted without reading the data.
spec="$DPR_SPEC"
args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --spec) spec="${args[$((i + 1))]:-$spec}" ;;
    --spec=*) spec="${args[$i]#--spec=}" ;;
  esac
done
name=$(.venv/bin/python -c 'import sys
from dpcore.run.errors import user_facing
from dpcore.release.spec import load_spec
with user_facing():
    print(load_spec(sys.argv[1]).dataset.name)' "$spec")
.venv/bin/dpr dataset add "$name" --spec "$spec"
exec .venv/bin/python -m flows.release_pipeline --spec "$spec" "$@"
