#!/usr/bin/env bash
# Create and fill the local virtual environment (.venv) when it is missing or
# when pyproject.toml changed since it was filled. Idempotent and quick when
# nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ]; then
  echo "[bootstrap] installing the environment into .venv (about a minute the first time)…" >&2
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
