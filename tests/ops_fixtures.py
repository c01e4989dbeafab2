"""Helpers for the operations tests: real Prefect processes on 127.0.0.1.

Every stack gets a free port, a temporary PREFECT_HOME, DPR_HOME and TMPDIR
(workers leave ``runner_storage/<uuid>`` folders in the temp directory), and
is stopped worker first, then server, with a second signal when the first is
ignored (a worker that has run a flow ignores its first SIGTERM) and SIGKILL
as the last resort.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFECT = str(BIN / "prefect")
DPR = str(BIN / "dpr")
FINAL_STATES = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class OpsEnv:
    """Paths, port and environment of one operations stack."""

    base: Path
    port: int
    env: dict[str, str]
    procs: list["Proc"] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def dpr_home(self) -> Path:
        return Path(self.env["DPR_HOME"])

    @property
    def prefect_home(self) -> Path:
        return Path(self.env["PREFECT_HOME"])

    @property
    def tmpdir(self) -> Path:
        return Path(self.env["TMPDIR"])

    @property
    def logs(self) -> Path:
        return self.base / "logs"

    @property
    def warehouse(self) -> Path:
        return self.dpr_home / "warehouse.duckdb"


def make_env(base: Path) -> OpsEnv:
    """A clean environment for subprocesses: no PREFECT_* or DPR_* from the caller but DPR_SPECS_DIR (conftest)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPR_")) or k == "DPR_SPECS_DIR"}
    port = free_port()
    for sub in ("prefect", "dpr", "tmp", "logs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        PREFECT_HOME=str(base / "prefect"),
        PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_CLI_PROMPT="false",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_LOGGING_LEVEL="INFO",
        DPR_HOME=str(base / "dpr"),
        TMPDIR=str(base / "tmp"),
        COLUMNS="200",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return OpsEnv(base=base, port=port, env=env)


class Proc:
    """A background process in its own session, output to a log file."""

    def __init__(self, name: str, args: list[str], ops: OpsEnv, grace: float = 10.0):
        self.name = name
        self.grace = grace
        self.log = ops.logs / f"{name}.log"
        self._fh = open(self.log, "wb")
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=ops.env, stdout=self._fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        ops.procs.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, grace: float | None = None) -> list[str]:
        """SIGTERM, a second SIGTERM if ignored, then SIGKILL to the whole group.

        Returns the signals that were needed (for the record)."""
        grace = self.grace if grace is None else grace
        sent: list[str] = []
        for sig in (signal.SIGTERM, signal.SIGTERM):
            if not self.alive():
                break
            self.popen.send_signal(sig)
            sent.append(sig.name)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            sent.append("SIGKILL")
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=30)
        # children of the group (e.g. a flow-run process a worker started) go too
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._fh.close()
        return sent


def wait_healthy(ops: OpsEnv, server: Proc, timeout: float = 120) -> float:
    """Seconds until ``/api/health`` answers."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not server.alive():
            raise RuntimeError(f"prefect server exited:\n{server.tail()}")
        try:
            if httpx.get(f"{ops.api_url}/health", timeout=2).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"prefect server not healthy after {timeout} s:\n{server.tail()}")


def start_server(ops: OpsEnv) -> Proc:
    server = Proc("server", [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(ops.port)], ops)
    wait_healthy(ops, server)
    return server


def start_worker(ops: OpsEnv, pool: str = "release-pool") -> Proc:
    # a worker that has run a flow ignores its first SIGTERM: do not wait long for it
    return Proc("worker", [PREFECT, "worker", "start", "--pool", pool, "--type", "process"], ops, grace=5.0)


def run(ops: OpsEnv, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a command in the project root with the stack's environment."""
    return subprocess.run(args, cwd=ROOT, env=ops.env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def deploy(ops: OpsEnv, *names: str) -> subprocess.CompletedProcess:
    """``deployments/deploy.sh`` (creates the pool and deploys prefect.yaml)."""
    out = run(ops, ["bash", str(ROOT / "deployments" / "deploy.sh"), *names])
    if out.returncode != 0:
        raise RuntimeError(f"deploy.sh failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def stop_all(ops: OpsEnv) -> dict[str, list[str]]:
    """Stop workers (and wrapper scripts) before the server, then clean the temp folders."""
    order = sorted(ops.procs, key=lambda p: p.name == "server")
    signals = {p.name: p.stop() for p in order}
    # workers leave empty runner_storage/<uuid> folders in their TMPDIR (ours)
    for storage in ops.tmpdir.rglob("runner_storage"):
        shutil.rmtree(storage, ignore_errors=True)
    shutil.rmtree(ops.tmpdir, ignore_errors=True)
    return signals


def register(ops: OpsEnv, spec: Path, name: str = "nycflights13") -> subprocess.CompletedProcess:
    """The data owner registers the dataset name in the stack's DPR_HOME (``dpr dataset add``), before any run."""
    out = run(ops, [DPR, "dataset", "add", name, "--spec", str(spec)])
    if out.returncode != 0:
        raise RuntimeError(f"dpr dataset add failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def small_spec(path: Path, release_id: str = "ops-r1", limit: int = 3000) -> Path:
    """The demo spec on the first ``limit`` flights (public files by absolute path)."""
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["release_id"] = release_id
    spec["dataset"]["source"] = {"kind": "demo", "limit": limit}
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = fleet
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    # the sample's ~1.5% rejected rows sit within noise reach of the demo's 5% gate; the gate has its own test
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.5
    # the tests' public roster: the demo roster plus every id of the sample (F999999 stays off it)
    roster = (ROOT / "specs" / "demo_roster.csv").read_text().split()[1:]
    spec["dataset"]["roster"] = {"ids": list(dict.fromkeys(roster + [f"F{i:06d}" for i in range(1, limit + 1)]))}
    path.write_text(yaml.safe_dump(spec))
    return path


# --- the REST API (what the UI calls) -------------------------------------------------


def api(ops: OpsEnv, method: str, route: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, f"{ops.api_url}{route}", timeout=30, **kwargs)


def deployment(ops: OpsEnv, flow_name: str, name: str) -> dict[str, Any]:
    r = api(ops, "GET", f"/deployments/name/{flow_name}/{name}")
    r.raise_for_status()
    return r.json()


def flow_run(ops: OpsEnv, run_id: str) -> dict[str, Any]:
    r = api(ops, "GET", f"/flow_runs/{run_id}")
    r.raise_for_status()
    return r.json()


def wait_final(ops: OpsEnv, run_id: str, timeout: float = 240, worker: Proc | None = None) -> dict[str, Any]:
    """Poll a flow run until it reaches a final state."""
    t0 = time.monotonic()
    fr: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout:
        fr = flow_run(ops, run_id)
        if fr["state_type"] in FINAL_STATES:
            return fr
        time.sleep(1)
    raise TimeoutError(
        f"flow run {run_id} still {fr.get('state_type')} after {timeout} s"
        + (f"\nworker log:\n{worker.tail()}" if worker else "")
    )


def run_id_from_cli(stdout: str) -> str:
    m = re.search(r"UUID: ([0-9a-f-]{36})", stdout)
    if not m:
        raise AssertionError(f"no flow-run UUID in the CLI output:\n{stdout}")
    return m.group(1)


def ledger_snapshot(warehouse: Path) -> dict[str, Any]:
    """Charges and running totals of the warehouse's ledger (empty before the first run)."""
    if not warehouse.exists():
        return {"charges": [], "spent": {}}
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse

    ledger = PrivacyLedger(Warehouse(warehouse))
    df = ledger.charges()
    charges = [
        {"key": r.key, "step": r.step, "status": r.status, "notion": r.notion, "release_id": r.release_id,
         "eps_units": str(r.eps_units), "delta_units": str(r.delta_units), "epsilon": float(r.epsilon),
         "stated_epsilon": float(r.stated_epsilon), "neighbour": r.neighbour, "flow_run_id": r.flow_run_id}
        for r in df.itertuples()
    ]
    spent = {row[0]: (str(row[1]), str(row[2])) for row in ledger.wh.query(
        "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY dataset")}
    return {"charges": charges, "spent": spent}
