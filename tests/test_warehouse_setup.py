"""The warehouse's set-up runs once per process and file (``Warehouse.setup_once``), and again on any other
file at the same path: a restored copy (a new inode) or a deleted and re-created file."""
from __future__ import annotations

import os
import shutil

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.warehouse import Warehouse


def test_set_up_runs_once_per_file_and_again_for_a_replaced_or_recreated_file(tmp_path):
    calls = []

    def op(con):
        calls.append(con.execute("SELECT 1").fetchone()[0])

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.setup_once("probe", op)
    wh.setup_once("probe", op)
    Warehouse(tmp_path / "w.duckdb").setup_once("probe", op)
    assert calls == [1]  # the same file in this process: once
    shutil.copyfile(wh.path, tmp_path / "copy.duckdb")
    os.replace(tmp_path / "copy.duckdb", wh.path)  # a restored backup: another file at the same path
    wh.setup_once("probe", op)
    assert calls == [1, 1]
    wh.path.unlink()
    Warehouse(wh.path).setup_once("probe", op)  # deleted and created again (its inode number may be reused)
    assert calls == [1, 1, 1]


def test_a_deleted_and_recreated_warehouse_gets_its_ledger_tables_again(tmp_path):
    path = tmp_path / "w.duckdb"
    PrivacyLedger(Warehouse(path))
    path.unlink()
    led = PrivacyLedger(Warehouse(path))
    assert led.registrations() == [] and len(led.charges()) == 0
