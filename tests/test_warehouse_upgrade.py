"""An upgrade keeps every release, and refusing creates nothing (issue 47 §1 and §3; DESIGN.md rules 2 and 11).

The homes under ``tests/fixtures/old_homes/`` were written by earlier versions of the project's own code
(``tests/fixtures/make_old_homes.py``: ``0dd6c78``, whose charge keys held the input's content hash and which
recorded no finished releases, and ``8cd7745``, before warehouses recorded their schema version): the demo
dataset's budget and release ``old-r1`` with its published bundle. Each is copied to a fresh home and opened
by the current code: ``dpr budget`` (its own process) shows the same totals, a re-run of ``old-r1`` through the
real release flow returns the stored release with nothing charged and the bundle byte for byte as it was, and
a new release id charges its plan once.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from dpcore.publish.bundle import BundleExistsError
from dpcore.budget.ledger_home import LedgerMissingError
from dpcore.run.release_runs import ReleaseIdTakenError
from dpcore.budget.ledger_upgrade import SCHEMA_VERSION, WarehouseVersionError, schema_version, upgrade
from dpcore.storage.settings import Settings
from dpcore.storage.warehouse import Warehouse, let_go

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
ROOT = Path(__file__).resolve().parents[1]
OLD = Path(__file__).resolve().parent / "fixtures" / "old_homes"
OLD_FINGERPRINTS = Path(__file__).resolve().parent / "fixtures" / "old_fingerprints"
DPR = str(Path(sys.executable).with_name("dpr"))
LAYOUTS = sorted(p.name for p in OLD.iterdir())


def _old_home(layout: str, tmp_path: Path, monkeypatch, folder: Path = OLD) -> Path:
    home = tmp_path / "home"
    shutil.copytree(folder / layout, home)
    gz = home / "warehouse.duckdb.gz"
    (home / "warehouse.duckdb").write_bytes(gzip.decompress(gz.read_bytes()))
    gz.unlink()
    os.chmod(home / "owner" / "owner.key", 0o600)
    monkeypatch.setenv("DPR_HOME", str(home))
    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    return home


def _raw(home: Path, sql: str) -> list[tuple]:
    let_go(home / "warehouse.duckdb")  # this process's kept connection, if any
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _bundle_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _spec(small_spec_path: Path, tmp_path: Path, release_id: str) -> Path:
    """The demo spec on the small flights table (conftest), as release ``release_id``."""
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["release_id"] = release_id
    path = tmp_path / f"{release_id}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_older_warehouse_is_upgraded_keeping_its_totals_and_finished_releases(
        layout, tmp_path, monkeypatch, small_spec_path):
    from flows.release_pipeline import release_pipeline

    home = _old_home(layout, tmp_path, monkeypatch)
    before = _raw(home, "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY 1")
    n_charges = _raw(home, "SELECT count(*) FROM ledger.charges")[0][0]
    bundle = home / "bundles" / "nycflights13" / "old-r1"
    published = _bundle_bytes(bundle)

    res = subprocess.run([DPR, "budget", "--json"], env={**os.environ, "DPR_HOME": str(home)},
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert _raw(home, "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY 1") == before
    assert _raw(home, "SELECT value FROM ledger.meta WHERE name = 'schema_version'") == [(str(SCHEMA_VERSION),)]

    # the old release id, run again through the release flow with the demo spec it was made with: the stored
    # release (no data read, nothing charged)
    out = release_pipeline(spec_path=str(ROOT / "specs" / "demo.yaml"), release_id="old-r1")
    assert out["stored_release"] is True and out["charged_by_this_run"] == {"epsilon": 0.0, "delta": 0.0}
    assert Path(out["bundle"]).parts[-2:] == bundle.parts[-2:]  # the fixture's home was elsewhere when stored
    assert _raw(home, "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY 1") == before
    assert _raw(home, "SELECT count(*) FROM ledger.charges")[0][0] == n_charges
    assert _bundle_bytes(bundle) == published
    # with another spec: refused where the old version recorded the planned lines (8cd7745), the stored release
    # where it did not (0dd6c78: the planned lines of a release finished then are unknown); never a charge
    other = str(_spec(small_spec_path, tmp_path, "old-r1"))
    if layout.startswith("v1-"):
        assert release_pipeline(spec_path=other)["stored_release"] is True
    else:
        with pytest.raises(ReleaseIdTakenError):
            release_pipeline(spec_path=other)
    assert _raw(home, "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY 1") == before
    assert _bundle_bytes(bundle) == published

    # a new release id charges its plan, once
    new = release_pipeline(spec_path=str(_spec(small_spec_path, tmp_path, "new-r1")))
    assert new["stored_release"] is False and new["charged_by_this_run"]["epsilon"] > 0
    after = _raw(home, "SELECT eps_spent FROM ledger.budgets WHERE dataset = 'nycflights13'")[0][0]
    assert after > before[0][1]
    again = release_pipeline(spec_path=str(_spec(small_spec_path, tmp_path, "new-r1")))
    assert again["stored_release"] is True
    assert _raw(home, "SELECT eps_spent FROM ledger.budgets WHERE dataset = 'nycflights13'")[0][0] == after
    assert _bundle_bytes(bundle) == published


def test_a_warehouse_of_a_newer_version_is_refused_naming_both_versions(tmp_path, monkeypatch):
    home = _old_home(LAYOUTS[-1], tmp_path, monkeypatch)
    wh = Warehouse(home / "warehouse.duckdb")
    upgrade(wh, home / "bundles")
    wh.run(lambda con: con.execute("UPDATE ledger.meta SET value = '99' WHERE name = 'schema_version'"))
    wh.let_go()
    res = subprocess.run([DPR, "budget"], env={**os.environ, "DPR_HOME": str(home)},
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2
    assert "schema version 99" in res.stderr and f"schema version {SCHEMA_VERSION}" in res.stderr
    with pytest.raises(WarehouseVersionError):
        upgrade(Warehouse(home / "warehouse.duckdb"), home / "bundles")
    assert schema_version(Warehouse(home / "warehouse.duckdb")) == 99


def test_a_published_bundle_is_never_rewritten_by_a_run_of_a_ledger_without_its_charges(
        tmp_path, monkeypatch, small_spec_path):
    """After a lost warehouse is recovered from the bundles, the old release ids' charges are not in the new
    ledger: a re-run of one would publish a second, freshly noised answer over the first. Refused, nothing
    charged, the bundle as it was."""
    from flows.release_pipeline import release_pipeline

    home = _old_home(LAYOUTS[-1], tmp_path, monkeypatch)
    bundle = home / "bundles" / "nycflights13" / "old-r1"
    published = _bundle_bytes(bundle)
    (home / "warehouse.duckdb").unlink()
    res = subprocess.run([DPR, "budget", "recover", "--from-bundles"], env={**os.environ, "DPR_HOME": str(home)},
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    spent = _raw(home, "SELECT dataset, eps_spent FROM ledger.budgets")
    n_charges = _raw(home, "SELECT count(*) FROM ledger.charges")[0][0]
    with pytest.raises(BundleExistsError, match="never rewritten"):
        release_pipeline(spec_path=str(ROOT / "specs" / "demo.yaml"), release_id="old-r1")
    assert _raw(home, "SELECT dataset, eps_spent FROM ledger.budgets") == spent
    assert _raw(home, "SELECT count(*) FROM ledger.charges")[0][0] == n_charges
    assert _bundle_bytes(bundle) == published


def test_a_run_on_a_home_whose_warehouse_is_missing_refuses_and_creates_nothing(
        tmp_path, monkeypatch, small_spec_path):
    from flows.release_pipeline import release_pipeline

    home = _old_home(LAYOUTS[-1], tmp_path, monkeypatch)
    Warehouse(home / "warehouse.duckdb").let_go()
    (home / "warehouse.duckdb").unlink()
    for _ in range(2):  # the second time too: no warehouse was created by the first refusal
        with pytest.raises(LedgerMissingError) as err:
            release_pipeline(spec_path=str(_spec(small_spec_path, tmp_path, "new-r1")))
        assert "is missing" in str(err.value) and "was replaced" not in str(err.value)
        assert not (home / "warehouse.duckdb").exists()
    res = subprocess.run([DPR, "budget"], env={**os.environ, "DPR_HOME": str(home)},
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 2 and "is missing" in res.stderr and "was replaced" not in res.stderr
    assert not (home / "warehouse.duckdb").exists()


def test_a_fresh_home_without_a_warehouse_is_refused_as_unregistered_and_creates_nothing(
        tmp_path, monkeypatch, small_spec_path):
    from dpcore.budget.ledger import DatasetNotRegisteredError
    from flows.release_pipeline import release_pipeline

    home = tmp_path / "fresh"
    monkeypatch.setenv("DPR_HOME", str(home))
    with pytest.raises(DatasetNotRegisteredError):
        release_pipeline(spec_path=str(_spec(small_spec_path, tmp_path, "new-r1")))
    assert not (home / "warehouse.duckdb").exists()
    assert Settings.from_env().warehouse == home / "warehouse.duckdb"


def test_hex_fingerprints_are_upgraded_to_124_bits_and_match_the_same_ids(tmp_path, monkeypatch):
    """Issue 51: a warehouse of schema 3 (written by ``6d31182``: dataset ``people``, ids p0..p99, registered with
    their HMACs as 64 hex digits) is upgraded to the 124-bit fingerprints; a registration of ids p50..p149 under
    another name then finds the same 50 overlapping ids, and sharing the budget adds only the 50 new ones."""
    from dpcore.budget.ledger import FINGERPRINT_TYPE, OverlapDecisionRequired
    from dpcore.release.spec import load_spec
    from dpcore.run.registration import register
    from dpcore.storage.lineage import owner_hmac

    home = _old_home("v3-6d31182", tmp_path, monkeypatch, OLD_FINGERPRINTS)
    settings = Settings.from_env()
    key = settings.owner_secret()
    old = {r[0] for r in _raw(home, "SELECT fp FROM ledger.record_fingerprints WHERE budget = 'people'")}
    assert old == {owner_hmac(key, f"p{i}") for i in range(100)}  # the fixture: hex HMACs of the ids
    assert _raw(home, "SELECT value FROM ledger.meta WHERE name = 'schema_version'") == [("3",)]

    csv = tmp_path / "renamed.csv"
    csv.write_text("pid,x\n" + "".join(f"p{i},{i % 10}\n" for i in range(50, 150)))
    spec = tmp_path / "renamed.yaml"
    spec.write_text("release_id: renamed-r1\n"
                    f"dataset: {{name: renamed, source: {{kind: csv, path: {csv}}}, record_id: pid}}\n"
                    "schema: {numeric: {x: {min: 0, max: 10}}}\nbudget: {epsilon: 1.0}\n")
    with pytest.raises(OverlapDecisionRequired) as err:
        register(load_spec(spec), settings)
    assert err.value.overlaps == {"people": 50}
    assert _raw(home, "SELECT value FROM ledger.meta WHERE name = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert _raw(home, "SELECT data_type FROM information_schema.columns WHERE table_name = 'record_fingerprints' "
                      "AND column_name = 'fp'") == [(FINGERPRINT_TYPE,)]
    now = {r[0] for r in _raw(home, "SELECT fp FROM ledger.record_fingerprints WHERE budget = 'people'")}
    assert now == {int(h[:31], 16) for h in old}  # the refusal added nothing
    out = register(load_spec(spec), settings, share="people")
    assert (out.overlaps, out.ids) == ({"people": 50}, 100)
    held = _raw(home, "SELECT count(*), count(DISTINCT fp) FROM ledger.record_fingerprints WHERE budget = 'people'")
    assert held == [(150, 150)]
