#!/usr/bin/env bash
# Create and fill the local virtual environment (.venv) when it is missing or
# when pyproject.toml changed since it was filled. Idempotent and quick when
# nothing changed. Prints a few progress lines; pip's own output (warnings
# included) goes to .venv/bootstrap.log, whose tail is shown if pip fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ]; then
  start=$(date +%s)
  if [ ! -x .venv/bin/python ]; then
    echo "[bootstrap] creating .venv with $("$PY" --version 2>&1)…" >&2
    "$PY" -m venv .venv
  fi
  log=.venv/bootstrap.log
  echo "[bootstrap] installing the project and its dependencies (about a minute the first time; pip's output: $log)…" >&2
  : > "$log"
  .venv/bin/python -m pip install --upgrade pip >>"$log" 2>&1 || true
  if ! .venv/bin/python -m pip install -e ".[dev]" >>"$log" 2>&1; then
    echo "[bootstrap] pip install failed; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
  echo "[bootstrap] environment ready in $(( $(date +%s) - start )) s" >&2
fi
