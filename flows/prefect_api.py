"""Which Prefect API a command's flow runs talk to, and starting one early when there is none.

A flow run needs a Prefect API. In order of preference:

1. ``PREFECT_API_URL`` set by the caller (a deployment's worker, a test harness, an operator);
2. the server kept by ``dpr server start`` (its record ``$PREFECT_HOME/dpr-server.json``, used while it answers);
3. a temporary server for this process only, started by :func:`start_temporary` and stopped at exit.

Why (3) is ours and not Prefect's own temporary server (issue 29, goal 5): Prefect starts its temporary
server inside the first client call, so the flow process first imports Prefect's whole server package
(about 7 s on this machine, only to reach the class that launches a subprocess), and then waits while the
subprocess imports it again and starts (about 9 s more with an existing database). :func:`start_temporary`
launches the same subprocess (the same uvicorn command, environment and settings as
``prefect.server.api.server.SubprocessASGIServer``) without importing Prefect's server, as early as the
entry point can, so its start overlaps the command's own imports and checks; :func:`ready` waits for its
health check just before the first flow call and points Prefect's settings at it. The server is
stopped at exit, and dies with its parent if the parent is killed (``PR_SET_PDEATHSIG``), so a killed run
leaves no server behind.

Nothing here imports Prefect at module import (the entry points call it before their imports).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

#: Exit code of uvicorn when its port is taken (Prefect's own launcher retries on it too).
_PORT_IN_USE = 3

_temporary: "_TemporaryServer | None" = None

#: The temporary server skips registering Prefect's block types (and importing every installed Prefect
#: collection, such as prefect-dask, to find theirs): no flow of this project uses a block, the server lives
#: for one command (its UI is off), and a kept ``dpr server`` or Prefect's own server registers them in the
#: same database when it starts. Measured on 2 cores (server CPU seconds until its health check answers,
#: 3 starts each at a load of 5-7): 6.0-7.5 -> 3.7-4.6 on a database fresh from ``prefect server database
#: upgrade`` (the first run of a home: every block type written); on later starts 4.8 -> 4.2-5.2, within
#: the noise (issue 29, goal 5).
NO_BLOCK_REGISTRATION = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
                         "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false"}


def prefect_home() -> Path:
    """``PREFECT_HOME``, else ``$DPR_HOME/prefect`` (``var/prefect``), as the commands set it."""
    home = os.environ.get("DPR_HOME", "var")
    return Path(os.environ.get("PREFECT_HOME") or os.path.join(home, "prefect"))


def private_prefect_home() -> Path:
    """Create :func:`prefect_home` owner-only (0700; an existing one is made 0700) and return it.

    Prefect's database and logs hold operators' parameters (e.g. the record ids an AIQ query asked about), so
    no other user may read into the folder, whatever their modes (issue 46 §5).
    """
    home = prefect_home()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    home.chmod(0o700)
    return home


def kept_server_record() -> Path:
    """Where ``dpr server start`` records its server (0600)."""
    return prefect_home() / "dpr-server.json"


def healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether the Prefect API at ``url`` (``.../api``) answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:  # noqa: S310 (127.0.0.1 only)
            return r.status == 200
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (ours or not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kept_server() -> dict | None:
    """The server recorded by ``dpr server start`` if its process is alive and its API answers, else None."""
    try:
        rec = json.loads(kept_server_record().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or not pid_alive(int(rec.get("pid", -1))) or not healthy(str(rec.get("api_url"))):
        return None
    return rec


def use_kept_server() -> str | None:
    """Point this process at the kept ``dpr server`` (if one answers and the caller set no API); its URL or None."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    rec = kept_server()
    if rec is None:
        return None
    os.environ["PREFECT_API_URL"] = rec["api_url"]
    return rec["api_url"]


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the process that started it dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


class _TemporaryServer:
    """One Prefect API server subprocess for this process (see the module docstring)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.started = time.monotonic()
        self.proc = self._spawn()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> subprocess.Popen:
        # the command and environment of prefect.server.api.server.SubprocessASGIServer._run_uvicorn_command,
        # without the registration of Prefect's block types at start (:data:`NO_BLOCK_REGISTRATION`)
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1", **NO_BLOCK_REGISTRATION}
        env.pop("PREFECT_API_URL", None)
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "error", "--lifespan", "on"],
            env=env, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def wait(self, timeout: float) -> None:
        """Block until the API answers; a taken port is retried on another; a dead server is an error."""
        deadline = self.started + timeout
        while True:
            code = self.proc.poll()
            if code == _PORT_IN_USE:
                self.port = free_port()
                self.proc = self._spawn()
                continue
            if code is not None:
                raise RuntimeError(f"the temporary Prefect API server exited at start (code {code}); its errors "
                                   "are printed above. Start one with `dpr server start` or set PREFECT_API_URL.")
            if healthy(self.api_url, timeout=0.5):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the temporary Prefect API server did not answer within {timeout:g} s (stopped). Raise "
                    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or start one with `dpr server start`.")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_temporary() -> str | None:
    """Start this process's temporary API server now, unless an API is set or kept; return its URL or None.

    Call it as early as possible (before heavy imports): the server starts while the caller goes on.
    :func:`ready` waits for it. Idempotent. Sets ``PREFECT_API_URL`` in this process's environment (so child
    processes use the same server) only once the server answers (:func:`ready`).
    """
    global _temporary
    if _temporary is not None:
        return _temporary.api_url
    if os.environ.get("PREFECT_API_URL") or use_kept_server():
        return None
    if os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", "true").strip().lower() in ("0", "false", "no"):
        return None  # Prefect then refuses to run without an API, with its own message
    private_prefect_home()
    _temporary = _TemporaryServer()
    atexit.register(_stop_temporary)
    return _temporary.api_url


def _stop_temporary() -> None:
    """At exit: SIGTERM to the temporary server, without waiting for its shutdown (about a second of uvicorn's
    and Prefect's services): nothing of the run is left in it to flush, and it exits on its own."""
    global _temporary
    server, _temporary = _temporary, None
    if server is not None and server.proc.poll() is None:
        server.proc.terminate()


@contextlib.contextmanager
def ready() -> Iterator[None]:
    """Run flows inside this: the temporary server (if this process started one) answers, and Prefect uses it.

    Without a temporary server (an API was set or kept, or none was started) this changes nothing, and
    Prefect behaves as it always does.
    """
    if _temporary is None:
        yield
        return
    timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS") or 90)
    _temporary.wait(timeout)
    os.environ["PREFECT_API_URL"] = _temporary.api_url
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: _temporary.api_url}):
        yield
