"""A series of periods through the release pipeline (issue 30), under prefect_test_harness.

Three monthly input files cut from the small flights sample; each period is its own release (its own
release id, charges and bundle); the run's period comes from the ``period`` parameter or, for a deployment's
run, from its scheduled start time; ``budget.series_cap`` refuses a period before its first charge, as the
series plan said.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.release.spec import SpecError
from dpcore.storage.warehouse import Warehouse
from series_fixtures import MONTHS, make_series_spec

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]

UTC = timezone.utc


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


@pytest.fixture
def series_path(tmp_path, small_spec_path, small_flights_csv, dpr_home, register_dataset) -> Path:
    """The small monthly series (tests/series_fixtures.py; series cap 0.5: two periods fit), registered."""
    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv)
    register_dataset(path)
    return path


def _releases(led: PrivacyLedger) -> dict[str, Fraction]:
    return {t["release_id"]: t["held"].epsilon for t in led.release_totals("nycflights13")}


def test_each_period_is_its_own_release_and_a_rerun_is_stored(series_path, dpr_home):
    from flows.release_pipeline import release_pipeline

    jan = release_pipeline(spec_path=str(series_path), period="2013-01")
    feb = release_pipeline(spec_path=str(series_path), period="2013-02")
    assert Path(jan["bundle"]) == dpr_home / "bundles" / "nycflights13" / "nycflights13-2013-01"
    assert Path(feb["bundle"]).name == "nycflights13-2013-02" and feb["period"] == "2013-02"
    manifest = json.loads((Path(feb["bundle"]) / "manifest.json").read_text())
    assert manifest["release_id"] == "nycflights13-2013-02"
    led = _ledger()
    assert _releases(led) == {"nycflights13-2013-01": Fraction(2, 10), "nycflights13-2013-02": Fraction(2, 10)}
    # the series page: both periods' released record counts with their intervals, from the bundles' tables
    page = dpr_home / "bundles" / "nycflights13" / "series"
    text = (page / "index.md").read_text()
    for month, out in (("2013-01", jan), ("2013-02", feb)):
        counts = pd.read_csv(Path(out["bundle"]) / "tables" / "record_counts__counts.csv").set_index("cell")
        row = next(line for line in text.splitlines() if line.startswith(f"| {month} | ")
                   and "±" in line)
        n, hw = counts.loc["input_rows", "noisy_count"], counts.loc["input_rows", "ci_half_width"]
        assert f"{n:,} (± {hw:,}, 95%)" in row
    pngs = {p.name: p.read_bytes() for p in page.glob("*.png")}
    assert {"record_counts.png", "budget.png"} <= set(pngs)
    again = release_pipeline(spec_path=str(series_path), period="2013-01")
    assert again["stored_release"] and again["charged_by_this_run"] == {"epsilon": 0.0, "delta": 0.0}
    assert led.status("nycflights13").spent.epsilon == Fraction(4, 10)
    # a re-run changes nothing on the page (rebuilt from the same stored releases)
    assert (page / "index.md").read_text() == text
    assert {p.name: p.read_bytes() for p in page.glob("*.png")} == pngs


def test_a_series_run_without_a_schedule_must_name_the_period(series_path):
    from flows.release_pipeline import release_pipeline

    with pytest.raises(SpecError, match="^period: this spec is a series and the run has no schedule"):
        release_pipeline(spec_path=str(series_path))
    assert _ledger().status("nycflights13").spent.epsilon == 0


def test_a_spec_without_series_refuses_a_period(dpr_home, small_spec_path, register_dataset):
    from flows.release_pipeline import release_pipeline

    register_dataset(small_spec_path)
    with pytest.raises(SpecError, match="declares no series, so it has no periods"):
        release_pipeline(spec_path=str(small_spec_path), period="2013-05")
    assert _ledger().status("nycflights13").spent.epsilon == 0


def test_a_missing_period_input_is_refused_before_ingest(series_path, tmp_path):
    from flows.release_pipeline import release_pipeline

    missing = tmp_path / "data" / "flights_2013-02.csv"
    missing.unlink()
    led = _ledger()
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'raw'"
    raw_before = led.wh.query(tables)[0][0]  # the registration's input
    with pytest.raises(SpecError) as err:
        release_pipeline(spec_path=str(series_path), period="2013-02")
    assert "period 2013-02" in str(err.value) and str(missing) in str(err.value)
    assert led.status("nycflights13").spent.epsilon == 0
    assert led.wh.query(tables)[0][0] == raw_before  # nothing was ingested for it (refused before ingest)


def test_the_series_cap_refuses_the_third_period_before_any_charge_as_the_plan_said(series_path):
    from dpcore.run.cost_plan import plan_release
    from dpcore.release.series import SeriesCapExceededError
    from dpcore.run.series_plan import plan_series
    from dpcore.release.spec import load_spec
    from flows.release_pipeline import release_pipeline

    led = _ledger()
    rows = plan_series(series_path, led, max_periods=4)
    assert [(r.period, r.status) for r in rows] == [("2013-01", "fits"), ("2013-02", "fits"), ("2013-03", "refused")]
    assert rows[1].left_series.epsilon == Fraction(1, 10)
    assert "budget.series_cap" in rows[2].reason
    for month in MONTHS[:2]:
        release_pipeline(spec_path=str(series_path), period=month)
    rows = plan_series(series_path, led, max_periods=4)
    assert [(r.period, r.status) for r in rows] == [("2013-01", "released"), ("2013-02", "released"),
                                                    ("2013-03", "refused")]
    before = led.charges("nycflights13")
    with pytest.raises(Exception, match=r"budget.series_cap: period 2013-03 would charge \(epsilon=0.2"):
        release_pipeline(spec_path=str(series_path), period="2013-03")
    assert len(led.charges("nycflights13")) == len(before)
    assert led.status("nycflights13").spent.epsilon == Fraction(4, 10)
    assert not (Path(Settings.from_env().bundles) / "nycflights13" / "nycflights13-2013-03").exists()
    # the ledger's reservation checks the cap again in its own transaction (a concurrent period cannot pass it)
    spec = load_spec(series_path, period="2013-03")
    plan = plan_release(spec, None)
    from dpcore.release.series import series_cap, series_release_pattern

    with pytest.raises(SeriesCapExceededError, match="budget.series_cap: release 'nycflights13-2013-03'"):
        led.reserve_lines("nycflights13", spec.release_id, [ln.request() for ln in plan.lines],
                          series=(series_release_pattern(spec), series_cap(spec)))
    assert led.status("nycflights13").spent.epsilon == Fraction(4, 10)


def test_a_deployment_run_releases_the_period_ended_before_its_scheduled_start(series_path, monkeypatch):
    """A run created from a deployment with a scheduled start time (what the schedule does), run in process:
    2013-03-01 03:00 UTC releases 2013-02; a second run of the same slot (a retry) releases nothing new."""
    import dpcore.runtime.fault_injection
    import dpcore.steps.common

    # a run of a deployment switches the fault hooks and seeded noise off for the rest of its process (issue
    # 46.1); this one runs in the test worker's process, so the switches are given back when the test ends
    monkeypatch.setattr(dpcore.runtime.fault_injection, "_inert", False)
    monkeypatch.setattr(dpcore.steps.common, "_test_noise_forbidden", False)
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    from flows.release_pipeline import release_pipeline

    dep_id = release_pipeline.to_deployment(name="series-test", parameters={"spec_path": str(series_path)}).apply()
    led = _ledger()
    outs = []
    for _ in range(2):
        with get_client(sync_client=True) as client:
            fr = client.create_flow_run_from_deployment(
                dep_id, state=Scheduled(scheduled_time=datetime(2013, 3, 1, 3, tzinfo=UTC)))
        outs.append(run_flow(release_pipeline, flow_run=fr, parameters={"spec_path": str(series_path)}))
    assert outs[0]["period"] == "2013-02" and not outs[0]["stored_release"]
    assert outs[1]["stored_release"] and outs[1]["period"] == "2013-02"
    assert _releases(led) == {"nycflights13-2013-02": Fraction(2, 10)}


def test_backfill_releases_in_order_returns_released_periods_as_stored_and_stops_at_a_failure(series_path, capsys):
    from flows.release_pipeline import main

    assert main(["--spec", str(series_path), "--period", "2013-01"]) == 0
    capsys.readouterr()
    led = _ledger()
    # 2013-01 is stored, 2013-02 released, 2013-03 refused by the series cap (0.6 > 0.5): the backfill stops there
    assert main(["--spec", str(series_path), "--from", "2013-01", "--to", "2013-03"]) == 2
    out, err = capsys.readouterr()
    assert "period    : 2013-01" in out and "stored    : this release id was finished before" in out
    assert "period    : 2013-02" in out
    assert "backfill stopped at period 2013-03" in err
    assert "released before it (kept): 2013-01, 2013-02" in err and "not run: none" in err
    assert "budget.series_cap" in err
    assert _releases(led) == {"nycflights13-2013-01": Fraction(2, 10), "nycflights13-2013-02": Fraction(2, 10)}


def test_an_operator_flow_refuses_a_series_spec(series_path):
    from flows.unattributed_publish import unattributed_publish

    with pytest.raises(SpecError, match="is a series spec: this flow has no period parameter"):
        unattributed_publish(spec_path=str(series_path), epsilon=0.1)
    assert _ledger().status("nycflights13").spent.epsilon == 0
