#!/usr/bin/env bash
# Create the process work pool (if missing) and deploy prefect.yaml non-interactively.
#
#   PREFECT_API_URL=http://127.0.0.1:4200/api ./deployments/deploy.sh              # every deployment
#   PREFECT_API_URL=http://127.0.0.1:4200/api ./deployments/deploy.sh aiq-query    # only the named ones
#
# Needs PREFECT_API_URL pointing at a running Prefect server. The deployments
# record the project root as their working directory (see prefect.yaml), so a
# worker started anywhere runs the flows from this checkout.
#
# The pool's base job template is deployments/process_pool_template.json, with
# this checkout and its venv's python filled in (deployments/pool_template.py):
# the command and the working directory are fixed, the environment is the
# worker's own, and there are no job variables (the server refuses a run that
# sets one). An existing pool of that name gets the template too.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
: "${PREFECT_API_URL:?set PREFECT_API_URL, e.g. http://127.0.0.1:4200/api}"
export PREFECT_CLI_PROMPT=false
POOL=release-pool   # = definitions.work_pools.release_pool.name in prefect.yaml

if ! .venv/bin/python - "$PREFECT_API_URL" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/health", timeout=10).read()
except Exception as exc:
    sys.exit(f"deploy.sh: no Prefect server answers at {sys.argv[1]} ({exc}); start one first")
EOF
then
  exit 1
fi

template=$(mktemp "${TMPDIR:-/tmp}/release-pool-template.XXXXXX.json")
trap 'rm -f "$template"' EXIT
.venv/bin/python deployments/pool_template.py "$template" "$PWD" "$PWD/.venv/bin/python"
if .venv/bin/prefect work-pool inspect "$POOL" >/dev/null 2>&1; then
  .venv/bin/prefect work-pool update "$POOL" --base-job-template "$template"
  echo "work pool '$POOL' exists: base job template set (no job variables)"
else
  .venv/bin/prefect work-pool create "$POOL" --type process --base-job-template "$template"
fi

args=()
if [ "$#" -eq 0 ]; then
  args+=(--all)
else
  for name in "$@"; do args+=(--name "$name"); done
fi
.venv/bin/prefect deploy "${args[@]}" --no-prompt
