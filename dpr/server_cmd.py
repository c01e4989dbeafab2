"""``dpr server start|stop|status``: one local Prefect server that every ``dpr`` command reuses.

Without it, each command that runs a flow (``dpr run``, ``dpr aiq`` ...)
starts a temporary Prefect API server for its own run and stops it at the end
(about ten seconds per command; :mod:`flows.prefect_api`). ``dpr server start`` starts ``prefect server
start`` on 127.0.0.1 (a free port) in the background, with its database in
``$PREFECT_HOME`` when it is set, else ``$DPR_HOME/prefect`` (the same Prefect home every ``dpr`` command
uses: :func:`flows.prefect_api.prefect_home`), and records its address there in ``dpr-server.json`` (0600). While
it answers, every ``dpr`` command that runs a flow uses it
(``PREFECT_API_URL``, unless the caller set one): runs are recorded in
Prefect exactly as before, and are visible in its UI at the printed address.

``dpr server stop`` stops it; a server that died leaves a record that the
next command ignores (and ``status`` reports and removes).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from flows.prefect_api import free_port, healthy, kept_server_record, pid_alive, private_prefect_home
from flows.prefect_api import kept_server as running_server

from .console import err, out, refuse

#: Seconds ``dpr server start`` waits for the new server's health check.
START_TIMEOUT = 120.0


@click.group("server")
def server_group() -> None:
    """A local Prefect server that every dpr command reuses (fast commands; runs visible in its UI)."""


@server_group.command("start")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 (default: a free one).")
def start(port: int | None) -> None:
    """Start the server in the background (idempotent: an answering server is kept).

    Its database and log are in $PREFECT_HOME when it is set, else in $DPR_HOME/prefect.
    """
    rec = running_server()
    if rec is not None:
        out.print(f"dpr server: already running at {rec['ui_url']} (pid {rec['pid']})", markup=False)
        return
    home = private_prefect_home()  # 0700, also when it existed
    port = port or free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = home / "dpr-server.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    prefect = str(Path(sys.executable).parent / "prefect")
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        umask=0o077,  # its database and files owner-only
    )
    os.close(fd)
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            refuse(f"the Prefect server exited at start (code {proc.returncode}); its log: {log}")
        if healthy(api):
            break
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        refuse(f"the Prefect server did not answer within {START_TIMEOUT:g} s (stopped); its log: {log}")
    rec = {"pid": proc.pid, "api_url": api, "ui_url": f"http://127.0.0.1:{port}", "log": str(log)}
    path = kept_server_record()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(rec, f)
    out.print(f"dpr server: running at {rec['ui_url']} (pid {proc.pid}), its database in {home}; dpr commands now use "
              "it. Stop it with `dpr server stop`.", markup=False)


@server_group.command("status")
def status() -> None:
    """Say whether the server runs and where (exit 0 if it answers, 3 if not)."""
    rec = running_server()
    if rec is None:
        if kept_server_record().exists():
            kept_server_record().unlink()
            err.print("dpr server: not running (a stale record was removed); commands start a temporary "
                      "server per run", markup=False)
        else:
            err.print("dpr server: not running; commands start a temporary server per run "
                      "(`dpr server start` to keep one)", markup=False)
        raise SystemExit(3)
    out.print(f"dpr server: running at {rec['ui_url']} (pid {rec['pid']}); log {rec['log']}", markup=False)


@server_group.command("stop")
def stop() -> None:
    """Stop the server (nothing to do if none runs)."""
    path = kept_server_record()
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        out.print("dpr server: not running", markup=False)
        return
    pid = int(rec.get("pid", -1))
    # only a server that still answers at the recorded address is stopped: a dead server's pid may have been
    # reused by another process, which must not be signalled
    if running_server() is not None and pid > 0:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        for _ in range(100):
            if not pid_alive(pid):
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    out.print("dpr server: stopped", markup=False)
