#!/usr/bin/env bash
# Local operations stack for operators: a Prefect server on 127.0.0.1, the
# deployments of prefect.yaml, and one process worker. Stops everything on
# Ctrl-C / SIGTERM (worker first, then the server).
#
#   ./deployments/start_local.sh                 # UI at http://127.0.0.1:4200
#   PREFECT_PORT=4300 ./deployments/start_local.sh aiq-query   # other port, deploy only aiq-query
#
# Environment (all optional):
#   PREFECT_PORT  server port (default 4200)
#   PREFECT_HOME  Prefect's database and settings (default ./var/prefect)
#   DPR_HOME      where the flow runs keep the warehouse and the bundles
#                 (default ./var: var/warehouse.duckdb, var/bundles/)
# Arguments are deployment names for deploy.sh (default: all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh

PORT="${PREFECT_PORT:-4200}"
export PREFECT_HOME="${PREFECT_HOME:-$PWD/var/prefect}"
export DPR_HOME="${DPR_HOME:-$PWD/var}"
export PREFECT_API_URL="http://127.0.0.1:$PORT/api"
export PREFECT_SERVER_ANALYTICS_ENABLED="${PREFECT_SERVER_ANALYTICS_ENABLED:-false}"
export PREFECT_CLI_PROMPT=false
# Prefect's home holds operators' parameters (e.g. the record ids an AIQ query asked about): owner-only (0700),
# and the server writes its database and log owner-only too (umask 077 in its subshell; the worker's flow runs
# keep the caller's umask for the bundles).
mkdir -p "$PREFECT_HOME" "$DPR_HOME"
chmod 700 "$PREFECT_HOME"
logs="$PREFECT_HOME/logs"
mkdir -p -m 700 "$logs"

server_pid=""
worker_pid=""

# alive PID: running and not a zombie (our children stay zombies until reaped)
alive() {
  local state
  state=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# stop PID [seconds per signal]: TERM, then TERM again (a worker that has run a
# flow ignores its first signal), then KILL.
stop() {
  local pid="$1" grace="${2:-15}" sig
  [ -n "$pid" ] || return 0
  for sig in TERM TERM KILL; do
    alive "$pid" || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq "$((grace * 5))"); do
      alive "$pid" || return 0
      sleep 0.2
    done
  done
}

shutdown() {
  trap - INT TERM EXIT
  echo "[start_local] stopping the worker, then the server…" >&2
  stop "$worker_pid" 5
  stop "$server_pid" 10
  wait 2>/dev/null || true
  rm -f "$logs/server.pid" "$logs/worker.pid"
  echo "[start_local] stopped" >&2
}
trap 'shutdown; exit 0' INT TERM
trap shutdown EXIT

# setsid: Ctrl-C reaches this script only, which then stops the worker before the server.
(umask 077; exec setsid .venv/bin/prefect server start --host 127.0.0.1 --port "$PORT" >"$logs/server.log" 2>&1) &
server_pid=$!
echo "$server_pid" >"$logs/server.pid"
echo "[start_local] server starting on http://127.0.0.1:$PORT (log: $logs/server.log)" >&2
.venv/bin/python - "$PREFECT_API_URL" "$server_pid" <<'EOF'
import os, sys, time, urllib.request
url, pid = sys.argv[1] + "/health", int(sys.argv[2])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        sys.exit(0)
    except Exception:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    raise OSError
        except OSError:
            sys.exit("[start_local] the server exited; see its log")
        time.sleep(0.5)
sys.exit("[start_local] the server did not become healthy within 120 s")
EOF

./deployments/deploy.sh "$@"

# A run of an unregistered dataset name is refused before ingest. Whoever starts this local stack is the
# demo's data owner: register the demo dataset in the workers' DPR_HOME (nycflights13: the dataset of
# specs/demo.yaml and of the monthly-release deployment's specs/demo_series.yaml, one budget with one cap);
# already registered identically, this reads nothing and changes nothing.
.venv/bin/dpr dataset add nycflights13 --spec specs/demo.yaml

install -m 600 /dev/null "$logs/worker.log"  # owner-only; the worker itself keeps the caller's umask
setsid .venv/bin/prefect worker start --pool release-pool --type process >>"$logs/worker.log" 2>&1 &
worker_pid=$!
echo "$worker_pid" >"$logs/worker.pid"
echo "[start_local] worker started (log: $logs/worker.log); DPR_HOME=$DPR_HOME" >&2
echo "[start_local] ready: UI at http://127.0.0.1:$PORT  (Ctrl-C to stop)"

# Stay in the foreground until a signal arrives or a process dies.
while alive "$server_pid" && alive "$worker_pid"; do
  sleep 1 &
  wait $! || true
done
echo "[start_local] a process exited unexpectedly; see $logs" >&2
exit 1
