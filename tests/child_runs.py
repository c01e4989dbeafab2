"""Flow runs in child processes against the session's Prefect test server.

Shared by the operations tests (``tests/test_operations.py``, ``tests/test_coco_dask.py``) and the
end-to-end leak test (``tests/test_leak_end_to_end.py``): each child is a separate OS process
(``python -c``) that talks to the ``prefect_harness`` API through ``PREFECT_API_URL``, with its own
``DPR_HOME`` (and, when asked, its own ``PREFECT_HOME``), and reports each flow's outcome as one
``OPS-RESULT <json>`` line on stdout.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def api_url() -> str:
    """The API URL of the running Prefect test harness (``prefect_harness`` fixture)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness did not set an API URL"
    return url


def child_env(tmp_path: Path, dpr_home: Path, prefect_home: Path | None = None, **extra: str) -> dict[str, str]:
    """A child's environment: no PREFECT_* or DPR_* from the caller (but DPR_SPECS_DIR), the harness API, INFO logs.

    ``prefect_home`` defaults to ``tmp_path/prefect_home`` (shared by the children of one test).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPR_")) or k == "DPR_SPECS_DIR"}
    home = prefect_home or tmp_path / "prefect_home"
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        PREFECT_API_URL=api_url(),
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="INFO",
        DPR_HOME=str(dpr_home),
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


PRELUDE = """
import json, os, sys, time, traceback
from pathlib import Path
SYNC = Path(os.environ["OPS_SYNC"]) if os.environ.get("OPS_SYNC") else None
def wait_go(name):
    if SYNC is None:
        return
    (SYNC / f"ready-{name}").touch()
    while not (SYNC / "go").exists():
        time.sleep(0.02)
def report(name, fn):
    run_id = None
    try:
        state = fn(return_state=True)
        run_id = str(state.state_details.flow_run_id)
        out = state.result()
        res = {"name": name, "ok": True, "run": run_id, "out": out}
    except Exception as exc:
        res = {"name": name, "ok": False, "run": run_id, "error": type(exc).__name__, "message": str(exc)}
    print("OPS-RESULT " + json.dumps(res, default=str), flush=True)
"""
"""Code every child starts with: ``wait_go(name)`` (start together via ``OPS_SYNC``) and
``report(name, fn)`` (run a flow with ``return_state=True``, print its outcome as ``OPS-RESULT``)."""


def spawn(code: str, env: dict[str, str]) -> subprocess.Popen:
    """Start ``PRELUDE + code`` in a child Python process (stdout and stderr captured)."""
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[list[dict], str]:
    """Wait for a child: its ``OPS-RESULT`` records and its whole console output (stdout + stderr)."""
    out, err = proc.communicate(timeout=timeout)
    results = [json.loads(line.removeprefix("OPS-RESULT ")) for line in out.splitlines() if line.startswith("OPS-RESULT ")]
    return results, out + err


async def read_runs(run_ids: list[str]) -> tuple[list, list, list, list]:
    """What the Prefect API holds about these flow runs: (logs, artifacts, flow runs, task runs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )

    ids = [uuid.UUID(r) for r in run_ids]
    logs: list = []
    async with get_client() as client:
        offset = 0
        while True:
            batch = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids)), limit=200, offset=offset
            )
            logs += batch
            if len(batch) < 200:
                break
            offset += 200
        arts = await client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)))
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        task_runs = await client.read_task_runs(task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=ids)))
    return logs, arts, runs, task_runs


async def prefect_texts(run_ids: list[str], progress: dict | None = None) -> list[str]:
    """Every text the API holds about these flow runs: logs, artifacts, state messages, parameters,
    task-run names and messages. ``progress`` receives ``{key: (data, description)}`` of the
    progress artifacts."""
    logs, arts, runs, task_runs = await read_runs(run_ids)
    texts = [log.message for log in logs]
    texts += [json.dumps(a.data, default=str) + str(a.description or "") + str(a.key) for a in arts]
    if progress is not None:
        progress.update({a.key: (a.data, a.description) for a in arts if a.type == "progress"})
    texts += [f"{r.state.message} {r.parameters}" for r in runs if r.state]
    texts += [f"{t.name} {t.state.message}" for t in task_runs if t.state]
    assert arts and len(runs) == len(run_ids)
    return texts


async def _flow_run_texts(run_id: str) -> tuple[list[str], list[str]]:
    """Log messages of the flow run and its task runs, and the run/task-run state messages (Prefect API)."""
    logs, _arts, runs, tasks = await read_runs([run_id])
    states = [str(r.state.message) for r in runs if r.state] + [f"{t.name} {t.state.message}" for t in tasks if t.state]
    return [f"{log.name} {log.message}" for log in logs], states


def flushed_texts(run_id: str, expect: str, timeout: float = 20.0) -> tuple[list[str], list[str]]:
    """:func:`_flow_run_texts` of an in-process flow run after sending the queued API logs, polling until
    ``expect`` is among them."""
    import asyncio
    import time

    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    deadline = time.monotonic() + timeout
    while True:
        logs, states = asyncio.run(_flow_run_texts(run_id))
        if any(expect in m for m in logs) or time.monotonic() > deadline:
            return logs, states
        time.sleep(0.5)
