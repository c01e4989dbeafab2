"""A raw table's record ids are fingerprinted into its budget once (issue 32, section 2: operator queries).

Every ingest adds the raw table's record-id fingerprints to the budget its dataset name charges
(:meth:`dpcore.ledger.PrivacyLedger.register_records`). A raw table never changes, so a run over an input
stored before (every operator query after the first) does not compute them again: the table, budget, id
column and owner key are recorded in ``ledger.fingerprinted_tables``. Another table or another owner key
is fingerprinted as before.
"""
from __future__ import annotations

import pytest

from dpcore import ledger as ledger_module
from dpcore.budget import PrivacyCost
from dpcore.ledger import PrivacyLedger
from dpcore.warehouse import Warehouse


@pytest.fixture
def led(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.run(lambda con: con.execute("CREATE SCHEMA IF NOT EXISTS raw"))
    for name, ids in (("t1", ["a", "b", "c"]), ("t2", ["c", "d"])):
        values = ", ".join(f"('{i}')" for i in ids)
        wh.run(lambda con, n=name, v=values: con.execute(f'CREATE TABLE raw."{n}" AS SELECT * FROM (VALUES {v}) t(id)'))
    led = PrivacyLedger(wh)
    led.register_dataset("d", 'raw."t1"', "id", b"k" * 32, PrivacyCost(1))
    return led


def _count_fingerprinting(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = ledger_module._fingerprint_table

    def counted(con, table_sql, id_column, pads):
        calls.append(table_sql)
        return real(con, table_sql, id_column, pads)

    monkeypatch.setattr(ledger_module, "_fingerprint_table", counted)
    return calls


def _fingerprints(led) -> int:
    return led.wh.query("SELECT count(*) FROM ledger.record_fingerprints WHERE budget = 'd'")[0][0]


def test_a_stored_raw_table_is_fingerprinted_once(led, monkeypatch):
    calls = _count_fingerprinting(monkeypatch)
    assert led.register_records("d", 'raw."t1"', "id", b"k" * 32) == "d"
    assert led.register_records("d", 'raw."t1"', "id", b"k" * 32) == "d"
    assert calls == ['raw."t1"']
    assert _fingerprints(led) == 3


def test_another_table_or_owner_key_is_fingerprinted(led, monkeypatch):
    calls = _count_fingerprinting(monkeypatch)
    led.register_records("d", 'raw."t1"', "id", b"k" * 32)
    led.register_records("d", 'raw."t2"', "id", b"k" * 32)
    assert _fingerprints(led) == 4  # a, b, c, d: c only once
    led.register_records("d", 'raw."t2"', "id", b"k" * 32)
    led.register_records("d", 'raw."t2"', "id", b"j" * 32)  # a new owner key: new fingerprints
    assert calls == ['raw."t1"', 'raw."t2"', 'raw."t2"']
    assert _fingerprints(led) == 6
