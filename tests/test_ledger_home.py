"""A deleted, replaced or stale warehouse never resets the budget silently (issue 33, part 6; DESIGN.md rule 11).

Releases are made with the real ledger and the real bundle writer (no Prefect); the home is then damaged as
an operator would: the warehouse deleted, replaced by another, restored from an older copy, truncated or
overwritten. The ``dpr`` command line is run through its console entry point (a fresh process each time).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.publish.bundle import StepOutput, write_bundle
from dpcore.budget.ledger import ChargeRequest
from dpcore.budget.ledger_home import LedgerMissingError, ledger_id, read_marker, recover_from_bundles, recoveries
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.steps.common import open_stores

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).with_name("dpr"))


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("DPR_HOME", str(h))
    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    return h


def _release(release_id: str, *steps: tuple[str, float]) -> dict:
    """One release of the demo dataset: a charge per (step, epsilon) through the ledger, then its bundle."""
    settings = Settings.from_env()
    spec = load_spec(ROOT / "specs" / "demo.yaml", release_id=release_id)
    stores = open_stores(settings)
    stores.ledger.ensure_budget(spec.dataset.name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact),
                                spec.budget.neighbour)
    keys = []
    for step, eps in steps:
        req = ChargeRequest(dataset=spec.dataset.name, release_id=release_id, step=step,
                            mechanism="m", cost=PrivacyCost(Fraction(str(eps)), Fraction(1, 10**7)), notion="dp")
        keys.append(stores.ledger.release_once(req, lambda: {"value": 1}).key)
    out = write_bundle(settings.bundles, spec, stores.ledger, "ingest-1", None, [StepOutput(release_id, keys=keys)],
                       owner_key=settings.owner_secret())
    return out.manifest


def _spent(dataset: str = "nycflights13") -> PrivacyCost:
    return open_stores(Settings.from_env()).ledger.status(dataset).spent


def dpr(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPR_HOME": str(home)}
    return subprocess.run([DPR, *args], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_each_manifest_names_its_ledger_and_the_exact_totals_so_far(home):
    first = _release("r1", ("a", 0.5))
    second = _release("r2", ("a", 0.25), ("b", 0.125))
    lid = ledger_id(open_stores(Settings.from_env()).warehouse)
    assert first["ledger"]["id"] == second["ledger"]["id"] == lid == read_marker(Settings.from_env())
    assert second["ledger"]["budget"] == "nycflights13"
    # the demo's budget is replace-one: each add/remove charge counts twice
    assert int(first["ledger"]["spent_total_units"]["epsilon"]) == 10**18
    assert int(second["ledger"]["spent_total_units"]["epsilon"]) == int(1.75 * 10**18)
    assert second["ledger"]["cap_units"]["epsilon"] == str(20 * 10**18)
    assert os.stat(home / "ledger.json").st_mode & 0o777 == 0o600


def test_a_deleted_warehouse_is_refused_until_recovered_from_the_bundles(home):
    _release("r1", ("a", 0.5))
    _release("r2", ("a", 0.25), ("b", 0.125))
    spent = _spent()
    old = ledger_id(open_stores(Settings.from_env()).warehouse)
    (home / "warehouse.duckdb").unlink()

    with pytest.raises(LedgerMissingError) as err:
        open_stores(Settings.from_env())
    msg = str(err.value)
    assert "\n" not in msg and str(home / "warehouse.duckdb") in msg and old in msg
    assert "dpr budget recover --from-bundles" in msg and "docs/backups.md" in msg
    assert not (home / "warehouse.duckdb").exists()  # no fresh ledger was started

    lid, done = recover_from_bundles(Settings.from_env())
    assert lid != old and [(d.from_ledger, d.budget, d.manifests) for d in done] == [(old, "nycflights13", 2)]
    assert _spent() == spent  # exactly what the latest manifest says: never less
    charges = open_stores(Settings.from_env()).ledger.charges("nycflights13")
    assert list(charges["status"]) == ["recovered"] and list(charges["step"]) == ["recovery"]
    assert [r["from_ledger"] for r in recoveries(open_stores(Settings.from_env()).warehouse)] == [old]
    assert read_marker(Settings.from_env()) == lid
    assert recover_from_bundles(Settings.from_env())[1] == []  # again: nothing more

    # the recovered ledger goes on from the recovered total
    third = _release("r3", ("a", 0.5))
    after = _spent()
    assert after.epsilon == spent.epsilon + 1 and after.delta > spent.delta  # 0.5 add/remove = 1 replace-one
    assert third["ledger"]["id"] == lid


def test_the_marker_alone_is_enough_to_refuse_a_new_ledger(home):
    open_stores(Settings.from_env())  # a ledger is started: the marker names it; no bundle yet
    assert read_marker(Settings.from_env())
    (home / "warehouse.duckdb").unlink()
    with pytest.raises(LedgerMissingError, match="the marker"):
        open_stores(Settings.from_env())


def test_a_replacing_warehouse_of_another_ledger_is_refused(home, tmp_path):
    _release("r1", ("a", 0.5))
    (home / "warehouse.duckdb").unlink()
    other = tmp_path / "other"
    shutil.copytree(home, other)  # ...a fresh home elsewhere makes its own ledger...
    shutil.rmtree(other / "bundles")
    (other / "ledger.json").unlink()
    env = {**os.environ, "DPR_HOME": str(other)}
    subprocess.run([sys.executable, "-c", "from dpcore.storage.settings import Settings; from dpcore.steps.common import "
                    "open_stores; open_stores(Settings.from_env())"], env=env, check=True, cwd=ROOT)
    shutil.copyfile(other / "warehouse.duckdb", home / "warehouse.duckdb")  # ...and is copied into this home
    res = dpr("budget", home=home)
    assert res.returncode == 2, res.stderr
    assert "was replaced" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_an_older_copy_of_the_warehouse_is_refused_and_recovery_raises_it_to_the_bundles(home, tmp_path):
    _release("r1", ("a", 0.5))
    backup = tmp_path / "backup.duckdb"
    shutil.copyfile(home / "warehouse.duckdb", backup)
    _release("r2", ("a", 0.25))
    spent = _spent()
    shutil.copyfile(backup, home / "warehouse.duckdb")  # restored from last week's backup

    res = dpr("budget", home=home)
    assert res.returncode == 2 and "misses charges that 1 bundle(s) published" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    plan = dpr("plan", str(ROOT / "specs" / "demo.yaml"), home=home)
    assert plan.returncode == 2 and "misses charges" in plan.stderr

    rec = dpr("budget", "recover", "--from-bundles", "--json", home=home)
    assert rec.returncode == 0, rec.stderr
    (done,) = json.loads(rec.stdout)["recovered"]
    assert done["budget"] == "nycflights13" and done["added"]["epsilon"] == pytest.approx(0.5)
    shown = dpr("budget", "--json", home=home)
    assert shown.returncode == 0, shown.stderr
    (b,) = json.loads(shown.stdout)
    assert Fraction(str(b["spent"]["epsilon"])) >= spent.epsilon
    assert b["recoveries"] and b["charges"][-1]["status"] == "recovered"
    text = dpr("budget", "nycflights13", home=home)
    assert text.returncode == 0 and "recovered from bundles" in text.stdout, text.stderr


def test_the_cli_refuses_a_deleted_warehouse_in_one_line_and_recovers(home):
    _release("r1", ("a", 0.5))
    (home / "warehouse.duckdb").unlink()
    for args in (("budget",), ("budget", "nycflights13"), ("plan", str(ROOT / "specs" / "demo.yaml"))):
        res = dpr(*args, home=home)
        assert res.returncode == 2, (args, res.stderr)
        assert "the ledger of this home is missing" in res.stderr and "nothing has been charged" not in res.stdout
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (home / "warehouse.duckdb").exists()
    bare = dpr("budget", "recover", home=home)
    assert bare.returncode == 2 and "--from-bundles" in bare.stderr
    rec = dpr("budget", "recover", "--from-bundles", home=home)
    assert rec.returncode == 0 and "recovered into ledger" in rec.stdout, rec.stderr
    shown = dpr("budget", home=home)
    assert shown.returncode == 0 and "recovered" in shown.stdout and "ε=1" in shown.stdout, shown.stdout


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "empty"])
def test_a_damaged_warehouse_is_one_line_naming_the_file_and_the_backup(home, damage):
    _release("r1", ("a", 0.5))
    path = home / "warehouse.duckdb"
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 3], "overwritten": b"not a database\n" * 1000,
                      "empty": b""}[damage])
    for args in (("budget",), ("plan", str(ROOT / "specs" / "demo.yaml"))):
        res = dpr(*args, home=home)
        assert res.returncode == 1, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert str(path) in lines[0] and "docs/backups.md" in lines[0] and "not a readable DuckDB database" in lines[0]


def _charge_rows(home: Path) -> int:
    import duckdb

    from dpcore.storage.warehouse import let_go

    let_go(home / "warehouse.duckdb")
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM ledger.charges").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("rollback", ["damaged manifest", "moved bundle", "deleted marker"])
def test_an_older_copy_is_refused_before_any_charge_whatever_the_bundles_say(home, tmp_path, rollback):
    """Issue 47 §2: an older copy of the warehouse, with r2's evidence tampered: refused, nothing charged."""
    _release("r1", ("a", 0.5))
    backup = tmp_path / "backup.duckdb"
    shutil.copyfile(home / "warehouse.duckdb", backup)
    _release("r2", ("a", 0.25))
    marker = json.loads((home / "ledger.json").read_text())
    assert marker["count"] == 2 and marker["spent_units"]["nycflights13"][0] == str(int(1.5 * 10**18))
    shutil.copyfile(backup, home / "warehouse.duckdb")  # restored from an older copy...
    r2 = home / "bundles" / "nycflights13" / "r2"
    if rollback == "damaged manifest":  # ...and r2's manifest truncated
        (r2 / "manifest.json").write_text((r2 / "manifest.json").read_text()[:100])
    elif rollback == "moved bundle":  # ...and r2's folder moved away
        shutil.move(str(r2), str(tmp_path / "r2"))
    else:  # ...and the marker deleted, r2's manifest truncated too
        (home / "ledger.json").unlink()
        (r2 / "manifest.json").write_text((r2 / "manifest.json").read_text()[:100])
    rows = _charge_rows(home)

    for args in (("budget",), ("plan", str(ROOT / "specs" / "demo.yaml"))):
        res = dpr(*args, home=home)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "nothing was charged" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    from dpcore.budget import ledger_home

    ledger_home._VERIFIED.clear()  # as in a new process (the copy kept the file's inode, which this one checked)
    with pytest.raises(LedgerMissingError):
        _release("r3", ("a", 0.5))
    assert _charge_rows(home) == rows  # nothing charged

    if rollback == "moved bundle":  # the owner's way out: the marker's total is a floor of the recovery
        rec = dpr("budget", "recover", "--from-bundles", "--json", home=home)
        assert rec.returncode == 0, rec.stderr
        shown = dpr("budget", "--json", home=home)
        (b,) = json.loads(shown.stdout)
        assert Fraction(str(b["spent"]["epsilon"])) == Fraction(3, 2)
        assert dpr("budget", home=home).returncode == 0  # the marker follows the recovered ledger


def test_a_published_bundle_is_never_rewritten(home):
    """Issue 47 §1: the same charges again (a run resumed after it published) keep the bundle as it is; other
    charges under the same release id are refused, the bundle untouched."""
    from dpcore.publish.bundle import BundleExistsError

    _release("r1", ("a", 0.5))
    bundle = home / "bundles" / "nycflights13" / "r1"
    published = {p: p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()}
    again = _release("r1", ("a", 0.5))  # the stored answer, the same charge: the bundle as published
    assert {p: p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()} == published
    assert again == json.loads((bundle / "manifest.json").read_text())
    with pytest.raises(BundleExistsError, match="never rewritten"):
        _release("r1", ("b", 0.25))
    assert {p: p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()} == published
