"""The warehouse connection a process keeps between its operations (dpcore.storage.warehouse_lease)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from dpcore.storage import warehouse_lease as lease
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def opens(monkeypatch):
    """Counts the DuckDB connections opened on warehouse files."""
    count = [0]
    real = Warehouse._open

    def counted(self):
        count[0] += 1
        return real(self)

    monkeypatch.setattr(Warehouse, "_open", counted)
    return count


@pytest.fixture
def kept(tmp_path, monkeypatch) -> Warehouse:
    """A warehouse with an empty table ``internal.t (x INT)``, its connection kept for a minute between operations."""
    monkeypatch.setattr(lease, "IDLE_S", 60.0)
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.run(lambda con: con.execute("CREATE TABLE internal.t (x INT)"), transaction=True)
    return wh


def test_consecutive_operations_of_a_process_share_one_connection(opens, kept):
    wh = kept
    before = opens[0]
    for i in range(5):
        wh.run(lambda con, i=i: con.execute("INSERT INTO internal.t VALUES (?)", [i]), transaction=True)
    assert wh.query("SELECT count(*) FROM internal.t") == [(5,)]
    assert opens[0] == before  # no new connection
    assert lease.get(str(wh.path)) is not None
    wh.let_go()
    assert lease.get(str(wh.path)) is None


def test_with_leases_off_every_operation_opens_and_closes(tmp_path, opens, monkeypatch):
    monkeypatch.setattr(lease, "IDLE_S", 0.0)
    wh = Warehouse(tmp_path / "w.duckdb")
    before = opens[0]
    for _ in range(3):
        wh.query("SELECT 1")
    assert opens[0] == before + 3 and lease.get(str(wh.path)) is None


def test_an_idle_lease_is_given_up_after_its_idle_time(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "IDLE_S", 0.05)
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.query("SELECT 1")
    deadline = time.monotonic() + 5
    while (lease.get(str(wh.path)) is not None or wh.wal.exists()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lease.get(str(wh.path)) is None
    assert not wh.wal.exists()  # closed: DuckDB folded its log into the file


def test_a_failed_operation_gives_the_connection_up_and_rolls_back(kept):
    wh = kept

    def bad(con):
        con.execute("INSERT INTO internal.t VALUES (1)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        wh.run(bad, transaction=True)
    assert lease.get(str(wh.path)) is None
    assert wh.query("SELECT count(*) FROM internal.t") == [(0,)]


def test_an_operation_nested_in_another_gets_its_own_cursor(kept):
    wh = kept

    def outer(con):
        con.execute("INSERT INTO internal.t VALUES (1)")
        return wh.query("SELECT count(*) FROM internal.t")  # nested: its own transaction, sees committed rows

    assert wh.run(outer, transaction=True) == [(0,)]
    assert wh.query("SELECT count(*) FROM internal.t") == [(1,)]
    assert sum(1 for _ in wh.iter_batches("SELECT * FROM internal.t", rows=1)) == 1
    assert lease.get(str(wh.path)).depth == 0


def test_a_file_replaced_while_the_lease_is_idle_is_opened_afresh(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "IDLE_S", 60.0)
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.run(lambda con: con.execute("CREATE TABLE internal.t AS SELECT 1 AS x"), transaction=True)
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE SCHEMA internal; CREATE TABLE internal.t AS SELECT 2 AS x")
    con.close()
    wh.query("SELECT 1")  # the lease is open and idle
    os.replace(other, wh.path)  # a restored backup: another file at the same path
    assert wh.query("SELECT x FROM internal.t") == [(2,)]


def test_let_go_leaves_everything_committed_in_the_file_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "IDLE_S", 60.0)
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.run(lambda con: con.execute("CREATE TABLE internal.t AS SELECT 7 AS x"), transaction=True)
    wh.let_go()
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(wh.path, copy)  # the file only, no write-ahead log
    con = duckdb.connect(str(copy), read_only=True)
    assert con.execute("SELECT x FROM internal.t").fetchall() == [(7,)]
    con.close()


def test_another_process_waiting_for_the_file_makes_the_holder_let_go(kept):
    """This process keeps an idle lease meant to last a minute; another process asking for the file gets it
    within a second, and this process's next operation opens the file again and sees the other's write."""
    wh = kept
    assert lease.get(str(wh.path)) is not None
    code = ("import sys, time; sys.path.insert(0, %r); from dpcore.storage.warehouse import Warehouse; t = time.monotonic(); "
            "Warehouse(%r, timeout=30).run(lambda con: con.execute('INSERT INTO internal.t VALUES (42)'), "
            "transaction=True); print(time.monotonic() - t)") % (str(ROOT), str(wh.path))
    env = {**os.environ, "DPR_WAREHOUSE_IDLE_S": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) < 5  # it did not wait for this process's minute
    assert lease.get(str(wh.path)) is None
    assert wh.query("SELECT x FROM internal.t") == [(42,)]
