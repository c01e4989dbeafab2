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
    """The registration fingerprinted t1 (the fixture): the runs over it do not compute them again (issue 29:
    the first run after ``dpr dataset add`` reads the raw table the registration stored)."""
    calls = _count_fingerprinting(monkeypatch)
    assert led.register_records("d", 'raw."t1"', "id", b"k" * 32) == "d"
    assert led.register_records("d", 'raw."t1"', "id", b"k" * 32) == "d"
    assert calls == []
    assert _fingerprints(led) == 3
    assert led.register_records("d", 'raw."t2"', "id", b"k" * 32) == "d"
    assert led.register_records("d", 'raw."t2"', "id", b"k" * 32) == "d"
    assert calls == ['raw."t2"']
    assert _fingerprints(led) == 4


def test_the_first_run_after_a_registration_does_not_fingerprint_again(tmp_path, monkeypatch):
    """``dpr dataset add`` then a run of the same spec: the run's ingest reuses the registration's raw table, whose
    ids the registration put in the budget's fingerprints; the run adds nothing and computes nothing."""
    from dpcore.pipeline import ingest_stage
    from dpcore.registration import register
    from dpcore.settings import Settings
    from dpcore.spec import load_spec
    from dpcore.steps.common import open_stores

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "dpr"))
    csv = tmp_path / "t.csv"
    csv.write_text("id,x\na,1\nb,2\nc,3\n")
    spec_path = tmp_path / "t.yaml"
    spec_path.write_text(
        "release_id: t-r1\n"
        f"dataset: {{name: t, source: {{kind: csv, path: {csv}}}, record_id: id}}\n"
        "schema: {numeric: {x: {min: 0, max: 10}}}\n"
        "budget: {epsilon: 1.0}\n")
    spec, settings = load_spec(spec_path), Settings.from_env()
    register(spec, settings)
    calls = _count_fingerprinting(monkeypatch)
    ingested = ingest_stage(spec, settings)
    assert calls == []
    wh = open_stores(settings).warehouse
    assert wh.query("SELECT count(*) FROM ledger.record_fingerprints")[0][0] == 3
    assert wh.query("SELECT count(*) FROM ledger.fingerprinted_tables WHERE table_sql = ?",
                    [ingested.qualified_table])[0][0] == 1


def test_another_table_or_owner_key_is_fingerprinted(led, monkeypatch):
    calls = _count_fingerprinting(monkeypatch)
    led.register_records("d", 'raw."t1"', "id", b"k" * 32)
    led.register_records("d", 'raw."t2"', "id", b"k" * 32)
    assert _fingerprints(led) == 4  # a, b, c, d: c only once
    led.register_records("d", 'raw."t2"', "id", b"k" * 32)
    led.register_records("d", 'raw."t2"', "id", b"j" * 32)  # a new owner key: new fingerprints
    assert calls == ['raw."t2"', 'raw."t2"']  # t1 under key k: by the registration (the fixture)
    assert _fingerprints(led) == 6
    led.register_records("d", 'raw."t1"', "id", b"j" * 32)
    assert calls == ['raw."t2"', 'raw."t2"', 'raw."t1"']
    assert _fingerprints(led) == 8  # a, b under key j (c came with t2)
