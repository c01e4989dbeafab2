"""Shared output and error handling of the ``dpr`` commands (rich tables, exit codes)."""
from __future__ import annotations

import json
import os
from fractions import Fraction
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dpcore.run.errors import user_facing

#: Exit code of a refused command (see :mod:`dpr`).
REFUSED = 2

import sys

# a pipe or a file gets wide tables (rich's default there is 80 columns, which folds every cell)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def eps(x: Fraction | float) -> str:
    """An epsilon or delta for display (exact values stay in the ledger)."""
    return f"{float(x):.6g}"


def cost(c: Any) -> str:
    """A :class:`~dpcore.budget.amounts.PrivacyCost` as ``ε=… δ=…``."""
    return f"ε={eps(c.epsilon)} δ={float(c.delta):.3g}"


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table with ``columns`` and ``rows`` (cells shown as text, never markup)."""
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    return t


def print_json(obj: Any) -> None:
    """JSON on stdout (``--json``)."""
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str, ensure_ascii=False))


def refuse(message: str) -> None:
    """Print ``message`` as an error and exit with :data:`REFUSED`."""
    err.print("error: " + message, markup=False)
    raise SystemExit(REFUSED)


#: Turn the pipeline's expected errors (bad spec, input, request, budget) into one line and exit code 2.
refusals = user_facing


def prefect_environment() -> None:
    """The environment the demo script sets for a local flow run (unless the caller set it)."""
    home = os.environ.get("DPR_HOME", "var")
    os.environ.setdefault("PREFECT_HOME", os.path.join(home, "prefect"))
    os.makedirs(os.environ["PREFECT_HOME"], mode=0o700, exist_ok=True)
    os.chmod(os.environ["PREFECT_HOME"], 0o700)  # Prefect's database holds the runs' parameters: owner-only
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    # a request to a Prefect server that went away is retried 3 times (2 + 4 + 8 s, with jitter), not Prefect's 5
    # (62 s per request, about 2.5 minutes for a release): the command then ends with one line (dpcore.runtime.faults.
    # orchestrator_gone) and running it again resumes the release; a caller's own setting wins
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", "3")
    from flows.prefect_api import start_temporary

    # the caller's PREFECT_API_URL, else the server `dpr server start` keeps, else a temporary server for this
    # command, started now so that it boots while the command imports its flow (flows/prefect_api.py)
    start_temporary()
