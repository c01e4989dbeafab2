"""Every environment fault ends in one true line (issue 47 item 5).

Each fault is made real and cheap: a write-ahead log with flipped bytes next to a real warehouse, a
``DPR_MEMORY_LIMIT`` below what a run needs, a home on a read-only bind mount (a private mount namespace:
``unshare -m``, skipped where the machine does not allow it), and a real Prefect server killed with SIGKILL
while a small release runs (``tests/ops_fixtures.py``). ``dpr`` runs as the owner runs it, through its console
script; the tests read its exit code and its error lines, and the details log the line names.
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from dpcore.runtime.faults import environment_fault

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).with_name("dpr"))


def dpr(*args: str, home: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}
    full.update(DPR_HOME=str(home), **(env or {}))
    return subprocess.run([DPR, *args], env=full, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def the_error_line(res: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a command's stderr (fails on none or several, or on a traceback)."""
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr[-4000:]
    assert "Traceback" not in res.stderr and "nanobind" not in res.stderr, res.stderr[-4000:]
    return errors[0]


def details_of(line: str) -> str:
    """The details log the line names: it exists, is the owner's only (0600), and holds the traceback."""
    assert line.endswith(")") and " (details: " in line, line
    path = Path(line.rsplit(" (details: ", 1)[1][:-1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, oct(path.stat().st_mode)
    text = path.read_text()
    assert "Traceback" in text
    return text


def home_with_ledger(home: Path, monkeypatch) -> Path:
    """A home with a ledger (one budget, the marker), closed by this process; its warehouse path."""
    from dpcore.budget.amounts import PrivacyCost
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.budget.ledger_home import open_home_warehouse
    from dpcore.storage.settings import Settings
    from dpcore.storage.warehouse import let_go

    monkeypatch.setenv("DPR_HOME", str(home))
    for name in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_MEMORY_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    wh = open_home_warehouse(Settings.from_env())
    PrivacyLedger(wh).ensure_budget("tiny", PrivacyCost(3, 0), "replace-one")
    let_go(wh.path)
    return wh.path


# ------------------------------------------------------------------------------------------ a damaged WAL
def test_a_damaged_write_ahead_log_is_one_line_naming_it(tmp_path, monkeypatch):
    """Was a 58-line traceback ("Failure while replaying WAL file ... Corrupt WAL file"), no error line."""
    warehouse = home_with_ledger(tmp_path / "home", monkeypatch)
    # a process that commits and dies without closing: its changes are only in the write-ahead log
    code = textwrap.dedent(f"""
        import duckdb, os
        con = duckdb.connect({str(warehouse)!r})
        con.execute("SET checkpoint_threshold = '1GB'")
        con.execute("CREATE TABLE internal.after_the_kill AS SELECT range AS i FROM range(2000)")
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    wal = warehouse.with_name(warehouse.name + ".wal")
    data = bytearray(wal.read_bytes())
    assert len(data) > 400
    for i in range(len(data) // 3, len(data) // 3 + 100):  # 100 bytes flipped inside the log
        data[i] ^= 0xFF
    wal.write_bytes(bytes(data))
    res = dpr("budget", home=tmp_path / "home")
    assert res.returncode == 1, res.stderr[-3000:]
    line = the_error_line(res)
    assert f"write-ahead log {wal} is damaged" in line and "restore the warehouse" in line, line
    assert "Do not delete the .wal" in line and "recover --from-bundles" in line, line
    assert "Corrupt WAL file" in details_of(line)
    assert wal.exists()  # nothing was deleted or rewritten to get past it


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_write_ahead_log_lost_after_a_charge_is_refused_as_behind_the_marker(tmp_path, monkeypatch, how):
    """Deleting or truncating the WAL was accepted silently and a charge went back to unspent: a charge that
    was only in the log is missing from the warehouse, whose rows are then behind the home's marker (issue 47
    sections 2 and 5), so every command refuses before any charge and says how to restore."""
    warehouse = home_with_ledger(tmp_path / "home", monkeypatch)
    # a process that charges through the ledger (the marker follows) and dies without a checkpoint
    code = textwrap.dedent(f"""
        import os
        from dpcore.budget.amounts import PrivacyCost
        from dpcore.budget.ledger import ChargeRequest, PrivacyLedger
        from dpcore.budget.ledger_home import open_home_warehouse
        from dpcore.storage.settings import Settings
        wh = open_home_warehouse(Settings.from_env())
        wh.run(lambda con: con.execute("SET checkpoint_threshold = '1GB'"))
        PrivacyLedger(wh).reserve(ChargeRequest("tiny", "r1", "s", "m", PrivacyCost(1), "dp", {{}}))
        os._exit(0)
    """)
    env = {**os.environ, "DPR_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
    wal = warehouse.with_name(warehouse.name + ".wal")
    assert wal.exists() and wal.stat().st_size > 0
    if how == "deleted":
        wal.unlink()
    else:
        wal.write_bytes(wal.read_bytes()[:16])
    res = dpr("budget", home=tmp_path / "home")
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    line = the_error_line(res)
    assert "is behind this home's marker" in line and "restore your latest backup" in line, line


# --------------------------------------------------------------------------------------- the memory floor
def test_the_plan_refuses_a_memory_cap_below_the_floor_as_the_run_does(tmp_path, monkeypatch):
    """`dpr plan` said the release fits under DPR_MEMORY_LIMIT=80MiB while the run refused it: one decision
    (dpcore.run.cost_plan.release_blockers, issue 48.3) lists the floor among its reasons."""
    from click.testing import CliRunner

    from dpr.plan_cmd import plan

    home_with_ledger(tmp_path / "home", monkeypatch)
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "80MiB")
    res = CliRunner().invoke(plan, [str(ROOT / "specs" / "demo.yaml")])
    assert res.exit_code == 2, res.output
    assert "DPR_MEMORY_LIMIT=80MiB is below the 192 MiB a run needs" in res.output, res.output


def test_a_memory_cap_below_the_floor_is_refused_before_anything_is_read_or_charged(tmp_path):
    """``DPR_MEMORY_LIMIT=80MiB`` was accepted: the plan reserved the whole release and DuckDB ran out of memory."""
    from dpcore.runtime.chunks import MemoryLimitError
    from dpcore.storage.settings import MEMORY_FLOOR, check_memory_floor

    check_memory_floor({"DPR_MEMORY_LIMIT": f"{MEMORY_FLOOR}"})  # the floor itself is allowed
    check_memory_floor({})  # unset: the 2 GiB default
    with pytest.raises(MemoryLimitError, match=r"DPR_MEMORY_LIMIT=191MiB is below the 192 MiB a run needs"):
        check_memory_floor({"DPR_MEMORY_LIMIT": "191MiB"})
    home = tmp_path / "home"
    res = dpr("run", str(ROOT / "specs" / "demo.yaml"), home=home, env={"DPR_MEMORY_LIMIT": "80MiB"})
    assert res.returncode == 2, res.stderr[-3000:]
    line = the_error_line(res)
    assert line.startswith("error: DPR_MEMORY_LIMIT=80MiB is below the 192 MiB a run needs") and "192MiB" in line
    assert not home.exists() or not (home / "warehouse.duckdb").exists()  # nothing opened, reserved or charged


def test_every_flow_refuses_a_memory_cap_below_the_floor_at_its_start(monkeypatch):
    """A deployment's run (a worker's environment) meets the same refusal in ``tasks.common.resolve``."""
    from dpcore.runtime.chunks import MemoryLimitError
    from tasks.common import resolve

    monkeypatch.setenv("DPR_MEMORY_LIMIT", "80MiB")
    with pytest.raises(MemoryLimitError, match="DPR_MEMORY_LIMIT=80MiB is below"):
        resolve(str(ROOT / "specs" / "demo.yaml"), None)


def test_a_release_that_runs_out_of_duckdbs_memory_ends_in_one_line_without_leak_reports(tmp_path, prefect_harness):
    """Under 96 MiB (allowed here by lowering the floor in the child) validation runs out of DuckDB's 24 MiB: was a
    traceback, no error line, and ``nanobind: leaked 28 instances!`` from the interpreter's teardown. The run
    uses the session's Prefect API (``prefect_harness``), not a temporary server of its own."""
    from prefect.settings import PREFECT_API_URL

    from ops_fixtures import small_spec

    spec = small_spec(tmp_path / "spec.yaml", release_id="oom-r1", limit=1000)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import dpcore.storage.settings\ndpcore.storage.settings.MEMORY_FLOOR = 0\n")
    home = tmp_path / "home"
    env = {"DPR_SPECS_DIR": str(tmp_path), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    assert dpr("dataset", "add", "nycflights13", "--spec", str(spec), home=home, env=env).returncode == 0
    res = dpr("run", str(spec), home=home, env={**env, "DPR_MEMORY_LIMIT": "96MiB",
                                                "PYTHONPATH": os.pathsep.join(
                                                    [str(tmp_path / "site"), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert res.returncode == 1, res.stderr[-3000:]
    line = the_error_line(res)  # also: no traceback, no nanobind report
    assert line.startswith("error: DuckDB ran out of memory under DPR_MEMORY_LIMIT=96MiB"), line
    assert "OutOfMemoryException" in details_of(line)


def test_duckdb_out_of_memory_is_one_line_naming_the_setting(monkeypatch):
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "300MiB")
    try:
        try:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block of size 256.0 KiB")
        except duckdb.Error as inner:
            raise RuntimeError("the rules step failed") from inner
    except RuntimeError as exc:
        line = environment_fault(exc)
    assert line is not None and "\n" not in line
    assert line.startswith("DuckDB ran out of memory under DPR_MEMORY_LIMIT=300MiB") and "raise DPR_MEMORY_LIMIT" in line


# -------------------------------------------------------------------------------------- a read-only home
def _read_only(home: Path, *args: str) -> list[str]:
    """``args`` run in a private mount namespace in which ``home`` is bind-mounted read-only on itself."""
    return ["unshare", "-m", "sh", "-c", 'mount --make-rprivate / && mount --bind -o ro "$0" "$0" && exec "$@"',
            str(home), *args]


def test_a_read_only_home_shows_its_budget_and_refuses_a_run(tmp_path, monkeypatch):
    """``dpr budget`` exited 1 (EROFS on the lock file) and could not show the budget."""
    home = tmp_path / "home"
    home_with_ledger(home, monkeypatch)
    before = sorted(p.name for p in home.iterdir())
    probe = subprocess.run(_read_only(home, "sh", "-c", f'touch "{home}/probe"'), capture_output=True, text=True,
                           timeout=60)
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"a read-only bind mount in a private mount namespace is not allowed here: {probe.stderr[-300:]}")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DPR_")}, "DPR_HOME": str(home)}
    res = subprocess.run(_read_only(home, DPR, "budget"), env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "budget tiny (datasets: tiny; replace-one neighbours): cap ε=3 δ=0, spent ε=0 δ=0" in res.stdout
    assert "read from" in res.stdout and "without writing" in res.stdout
    js = subprocess.run(_read_only(home, DPR, "budget", "tiny", "--json"), env=env, capture_output=True, text=True,
                        timeout=120)
    assert js.returncode == 0 and '"budget": "tiny"' in js.stdout, js.stderr[-3000:]
    run = subprocess.run(_read_only(home, DPR, "run", str(ROOT / "specs" / "demo.yaml")), env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]  # docs/operating.md: a home that is not writable is refused
    assert "is not writable" in the_error_line(run)
    assert sorted(p.name for p in home.iterdir()) == before  # nothing written (it could not be)


# ------------------------------------------------------------------------------ the Prefect server killed
def test_the_orchestrator_killed_during_a_release_is_one_line_saying_how_to_resume(tmp_path):
    """Was a hang of about 2.5 minutes, then exit 1 with an httpx.ConnectError traceback and no error line."""
    from ops_fixtures import DPR as OPS_DPR, make_env, register, small_spec, start_server, stop_all

    ops = make_env(tmp_path / "ops")
    spec = small_spec(ops.dpr_home.parent / "spec.yaml", release_id="killed-r1", limit=1000)
    ops.env["DPR_SPECS_DIR"] = str(spec.parent)
    ops.env["PREFECT_CLIENT_MAX_RETRIES"] = "1"  # the wait after the kill: 2 s a request (dpr's default: 3)
    server = start_server(ops)
    try:
        register(ops, spec)
        log = ops.logs / "run.err"
        with open(log, "wb") as err:
            proc = subprocess.Popen([OPS_DPR, "run", str(spec)], cwd=ROOT, env=ops.env, stdout=subprocess.PIPE,
                                    stderr=err, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 180
            while "Task run 'ingest" not in log.read_text(errors="replace"):  # the release is under way
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            os.killpg(server.pid, signal.SIGKILL)
            t0 = time.monotonic()
            proc.wait(timeout=150)
            waited = time.monotonic() - t0
        stderr = log.read_text(errors="replace")
    finally:
        stop_all(ops)
    res = subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)
    assert res.returncode == 1, stderr[-4000:]
    line = the_error_line(res)
    assert f"the Prefect server at {ops.api_url} stopped answering" in line, line
    assert "the orchestrator went away" in line and "run the same command again" in line, line
    assert "resumes within its reservation" in line, line
    assert "ConnectError" in details_of(line)
    assert waited < 90, waited


def test_a_connection_error_anywhere_in_the_chain_is_the_orchestrator_gone(monkeypatch):
    import httpx

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    try:
        try:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        except httpx.ConnectError as inner:
            raise RuntimeError("the flow run crashed") from inner
    except RuntimeError as exc:
        line = environment_fault(exc)
    assert line.startswith("the Prefect server at http://127.0.0.1:9/api stopped answering (ConnectError"), line
    assert environment_fault(OSError(errno.ENOENT, "missing")) is None
