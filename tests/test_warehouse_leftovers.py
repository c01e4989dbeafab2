"""What killed runs leave in the warehouse's scratch folder is removed by the next run (issue 47 §6).

Private chunk folders (``<warehouse>.scratch/<nonce>/``) and PostgreSQL spool parts
(``<warehouse>.scratch/postgres-<nonce>.csv``) of a process that died are removed when a run unit opens
(:func:`dpcore.run.release_runs.open_run`); what a live process that uses the warehouse may hold is kept
(:func:`dpcore.storage.warehouse_lease.clear_leftovers`: presence files under the file's ``flock``). Every process here
is a real one: the run that clears, and a live holder that is later killed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUN = """
import sys
from pathlib import Path
from dpcore.run.release_runs import close_run, open_run
from dpcore.storage.warehouse import Warehouse
path = Path(sys.argv[1])
Warehouse(path).query("SELECT 1")  # the warehouse exists (made here the first time)
close_run(open_run(path, "nycflights13", sys.argv[2], "probe", ["line"]))
"""

_HOLDER = """
import sys, time
from pathlib import Path
from dpcore.storage.warehouse import Warehouse
path = Path(sys.argv[1])
Warehouse(path).query("SELECT 1")
Warehouse(path).let_go()
folder = path.with_name(path.name + ".scratch") / "live0001"
folder.mkdir(parents=True)
(folder / "part-0.parquet").write_bytes(b"private rows")
print("ready", flush=True)
time.sleep(120)
"""


def _run(wh: Path, release_id: str) -> None:
    subprocess.run([sys.executable, "-c", _RUN, str(wh), release_id], cwd=ROOT, check=True, timeout=120)


def test_the_next_run_removes_what_dead_processes_left_and_keeps_what_a_live_one_holds(tmp_path):
    wh = tmp_path / "home" / "warehouse.duckdb"
    wh.parent.mkdir()
    _run(wh, "first")
    scratch = wh.with_name(wh.name + ".scratch")
    scratch.mkdir(exist_ok=True)
    stale = scratch / "dead0001"  # a chunk folder of a killed run
    stale.mkdir()
    (stale / "part-0.parquet").write_bytes(b"private rows")
    spool = scratch / "postgres-dead0002.csv"  # a spool part of a killed PostgreSQL ingest
    spool.write_bytes(b"c0,c1\n1,2\n")
    hour_ago = time.time() - 3600
    for p in (stale / "part-0.parquet", stale, spool):
        os.utime(p, (hour_ago, hour_ago))

    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(wh)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        _run(wh, "second")
        assert not stale.exists() and not spool.exists()  # left by dead processes: removed
        assert (scratch / "live0001" / "part-0.parquet").exists()  # a live process's: kept
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # the holder dies without cleaning up
        holder.wait(timeout=30)
    assert (scratch / "live0001").exists()
    _run(wh, "third")
    assert not (scratch / "live0001").exists()  # its process died: removed by the next run
    assert not [p for p in wh.with_name(wh.name + ".locks").glob("live-*")]  # no presence file of a dead process
