"""A release id names one release (issue 28 §1-2, issue 33 §2; DESIGN.md rules 2 and 10).

* A finished release id re-run on changed data returns the stored release: no ingest, no charge, and a
  result that does not depend on whether the data changed.
* The same release id asked for a different release (another spec) is refused before any charge.
* A second live run of the same release id is refused at once, charging nothing.
* The plan and the run use one key: over random sequences of (same or changed data, same or changed spec,
  same or new release id, cap just enough or one unit short), every run charges exactly what its plan
  said, or nothing, and never stops after a charge because of the budget.
"""
from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.run.cost_plan import plan_release
from dpcore.budget.ledger import ChargeRequest, PrivacyLedger
from dpcore.run.release_runs import ReleaseIdTakenError, ReleaseInProgressError, close_run, open_run
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.storage.warehouse import Warehouse
from owner_registration import register_spec

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]  # registers its own cap
ROOT = Path(__file__).resolve().parents[1]


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


def _spec(small_spec_path: Path, tmp_path: Path, data: Path, name="s.yaml", coco_eps=0.5, release="id-r1") -> Path:
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(data)}
    spec["release_id"] = release
    spec["steps"]["coco"].update({"enabled": True, "epsilon_per_level": coco_eps, "max_group_size": 60})
    # the detector and its owner-only rules charge nothing and are not what a release id is about (their stored
    # re-runs are the leak test's); off, a release here is cheaper (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False
    spec["budget"]["epsilon"] = 100
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    register_spec(path)  # the data owner, with this spec's cap (an identical registration again is accepted)
    return path


@pytest.fixture
def flights_1000(small_flights_csv: Path, tmp_path: Path) -> Path:
    """The small table's first 1,000 flights (the tests' data; the size is not what a release id is about, and
    each release here runs in about two thirds of the 3,000 rows' time)."""
    out = tmp_path / "flights_1000.csv"
    out.write_text("\n".join(small_flights_csv.read_text().splitlines()[:1001]) + "\n")
    return out


def _variant(small_flights_csv: Path, tmp_path: Path, extra_rows: int) -> Path:
    """The small table with its first ``extra_rows`` valid rows repeated under new ids (a changed dataset)."""
    lines = small_flights_csv.read_text().splitlines()
    out = tmp_path / f"flights_{extra_rows}.csv"
    new = []
    for i, line in enumerate(lines[1:1 + extra_rows]):
        cells = line.split(",")
        cells[0] = f"F9{i:05d}"
        new.append(",".join(cells))
    out.write_text("\n".join(lines + new) + "\n")
    return out


def test_a_finished_release_id_returns_the_stored_release_whatever_the_data_now_holds(
        dpr_home, small_spec_path, flights_1000, tmp_path):
    from flows.release_pipeline import release_pipeline

    data = tmp_path / "input.csv"
    data.write_text(flights_1000.read_text())
    path = _spec(small_spec_path, tmp_path, data)
    first = release_pipeline(spec_path=str(path))
    led = _ledger()
    spent, charges = led.status("nycflights13").spent, led.charges("nycflights13")
    n_ingests = led.wh.query("SELECT count(*) FROM raw.ingests")[0][0]
    bundle = Path(first["bundle"])
    manifest = (bundle / "manifest.json").read_text()

    data.write_text(_variant(flights_1000, tmp_path, 5).read_text())  # one more month of flights arrives
    again = release_pipeline(spec_path=str(path))
    same = release_pipeline(spec_path=str(path))  # and nothing changed since: the same public outcome
    assert again == same
    assert again["stored_release"] and again["charged_by_this_run"] == {"epsilon": 0.0, "delta": 0.0}
    assert {k: v for k, v in again.items() if k not in ("stored_release", "charged_by_this_run")} == \
        {k: v for k, v in first.items() if k not in ("stored_release", "charged_by_this_run")}
    assert led.status("nycflights13").spent == spent and led.charges("nycflights13").equals(charges)
    assert led.wh.query("SELECT count(*) FROM raw.ingests")[0][0] == n_ingests  # the new data was not even read
    assert (bundle / "manifest.json").read_text() == manifest
    plan = plan_release(load_spec(path), led)
    assert plan.finished and plan.new == PrivacyCost(0) and not plan.problems


def test_a_finished_release_id_asked_for_another_release_is_refused_before_any_charge(
        dpr_home, small_spec_path, flights_1000, tmp_path):
    from flows.release_pipeline import release_pipeline

    release_pipeline(spec_path=str(_spec(small_spec_path, tmp_path, flights_1000)))
    led = _ledger()
    spent = led.status("nycflights13").spent
    other = _spec(small_spec_path, tmp_path, flights_1000, name="other.yaml", coco_eps=0.25)
    plan = plan_release(load_spec(other), led)
    assert not plan.finished and any(p.startswith("release_id:") and "new release id" in p for p in plan.problems)
    with pytest.raises(ReleaseIdTakenError, match="a release id names one release.*Nothing was charged"):
        release_pipeline(spec_path=str(other))
    assert led.status("nycflights13").spent == spent
    # under a new release id it is a new release
    out = release_pipeline(spec_path=str(other), release_id="id-r2")
    assert not out["stored_release"] and out["charged_by_this_run"]["epsilon"] > 0


def test_a_second_live_run_of_the_same_release_id_is_refused_and_charges_nothing(
        dpr_home, small_spec_path, flights_1000, tmp_path):
    from flows.release_pipeline import release_pipeline

    path = _spec(small_spec_path, tmp_path, flights_1000)
    spec = load_spec(path)
    settings = Settings.from_env()
    lines = [ln.key for ln in plan_release(spec, None).lines]
    # another process holds the release's run lock (a live run): the OS lock, not a status in the ledger
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from dpcore.run.release_runs import open_run
        open_run(__import__("pathlib").Path({str(settings.warehouse)!r}), "nycflights13", "id-r1", "pipeline",
                 {lines!r})
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ReleaseInProgressError, match="being run by another live process.*nothing was charged"):
            release_pipeline(spec_path=str(path))
        assert _ledger().charges().empty
    finally:
        holder.kill()
        holder.wait()
    # the holder died (as a crashed run would): its lock went with it, the release runs
    out = release_pipeline(spec_path=str(path))
    assert not out["stored_release"]
    # and within one process, too
    run = open_run(settings.warehouse, "nycflights13", "id-r9", "pipeline", lines)
    try:
        with pytest.raises(ReleaseInProgressError):
            open_run(settings.warehouse, "nycflights13", "id-r9", "pipeline", lines)
    finally:
        close_run(run)


@pytest.mark.timeout(1200)
def test_every_run_charges_exactly_its_plan_or_nothing(dpr_home, small_spec_path, flights_1000, tmp_path):
    """Random sequences of runs (issue 28 §2): the plan's new charges are what the run charges, or the run is
    refused having charged nothing; a run never stops half way for lack of budget."""
    from flows.release_pipeline import release_pipeline

    rng = random.Random(28)
    datas = [flights_1000, _variant(flights_1000, tmp_path, 3)]
    specs = [_spec(small_spec_path, tmp_path, flights_1000, name=f"p{i}.yaml", coco_eps=e)
             for i, e in enumerate((0.5, 0.25))]
    data = tmp_path / "live.csv"
    release, outcomes = 0, []
    for step in range(10):
        spec_i = rng.randrange(2)
        if step and rng.random() < 0.5:
            release += 1  # a new release id
        data.write_text(datas[rng.randrange(2)].read_text())
        text = yaml.safe_load(specs[spec_i].read_text())
        text["dataset"]["source"]["path"] = str(data)
        # the owner raises the cap by 10 before each run (more than any run costs; the filler below spends it
        # down), so a run refused for lack of budget does not end the sequence
        cap = 100 + 10 * step
        text["budget"]["epsilon"] = cap
        path = tmp_path / f"run{step}.yaml"
        path.write_text(yaml.safe_dump(text))
        rid = f"prop-{release}"
        led = _ledger()
        if step:
            led.set_cap("nycflights13", PrivacyCost(cap, led.status("nycflights13").cap.delta), reason="test sequence")
        plan = plan_release(load_spec(path, release_id=rid), led)
        enough = rng.random() < 0.6
        if plan.budget_known and not plan.problems and plan.new != PrivacyCost(0):
            # spend the budget down (another release, charged directly) so that what is left is just enough
            # for this run, or one ledger unit short of it
            left_u = plan.remaining.units_floor[0] - plan.new.units[0] + (0 if enough else 1)
            if left_u > 0:
                led.reserve(ChargeRequest("nycflights13", f"filler-{step}", "filler", "m",
                                          PrivacyCost.from_units(left_u, 0), "dp", neighbour="replace-one"))
            plan = plan_release(load_spec(path, release_id=rid), led)
        before = led.status("nycflights13").spent if plan.budget_known else PrivacyCost(0)
        try:
            out = release_pipeline(spec_path=str(path), release_id=rid)
        except (BudgetExceededError, ReleaseIdTakenError) as exc:
            outcomes.append((step, rid, type(exc).__name__, str(exc)[:400]))
            assert plan.problems, (step, str(exc))  # the plan said it would be refused
            assert _ledger().status("nycflights13").spent == before, step  # and it charged nothing
            continue
        outcomes.append((step, rid, "stored" if out["stored_release"] else "released"))
        assert not plan.problems, (step, plan.problems)
        after = _ledger().status("nycflights13").spent
        assert after - before == plan.new and after == before + plan.new, (step, plan.new, after, before)
        assert PrivacyCost(Fraction(out["charged_by_this_run"]["epsilon"])).epsilon == pytest.approx(
            float(plan.new.epsilon))
    kinds = {o[2] for o in outcomes}
    assert {"released", "stored"} <= kinds, outcomes  # the sequence covered re-runs and new releases
