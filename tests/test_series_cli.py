"""``dpr plan --series`` and ``dpr run --period / --from --to`` on a small monthly series (issue 30)."""
from __future__ import annotations

import json

import pytest

from series_fixtures import make_series_spec
from test_dpr_cli import dpr, register

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]


@pytest.fixture
def series(tmp_path, small_spec_path, small_flights_csv):
    home = tmp_path / "home"
    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv)
    register(path, home)
    return path, home


def test_plan_series_shows_each_period_and_the_runway(series):
    path, home = series
    res = dpr("plan", str(path), "--series", "--periods", "5", "--json", home=home)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert [(p["period"], p["status"]) for p in got["periods"]] == [
        ("2013-01", "fits"), ("2013-02", "fits"), ("2013-03", "refused")]
    assert got["first_refused"] == "2013-03" and got["periods_that_fit"] == ["2013-01", "2013-02"]
    assert got["periods"][0]["charge"]["epsilon"] == pytest.approx(0.2)
    assert got["periods"][1]["left_series_cap"]["epsilon"] == pytest.approx(0.1)
    assert "budget.series_cap" in got["periods"][2]["reason"]
    res = dpr("plan", str(path), "--series", home=home)
    assert res.returncode == 0, res.stderr
    assert "runway: 2 more period(s) fit (2013-01 to 2013-02); the first refused period is 2013-03" in res.stdout
    # one period's plan, and a flag that does not go with --series
    res = dpr("plan", str(path), "--period", "2013-03", home=home)
    assert res.returncode == 0 and "nycflights13-2013-03" in res.stdout
    res = dpr("plan", str(path), "--series", "--period", "2013-02", home=home)
    assert res.returncode == 2 and "leave out --release-id and --period" in res.stderr


def test_run_refusals_name_the_flag_before_prefect_starts(series, small_spec_path):
    path, home = series
    res = dpr("run", str(path), home=home)
    assert res.returncode == 2 and "--period: SPEC is a series spec" in res.stderr
    res = dpr("run", str(path), "--period", "2013-02", "--from", "2013-01", home=home)
    assert res.returncode == 2 and "--period and --from/--to" in res.stderr
    res = dpr("run", str(path), "--from", "2013-01", home=home)
    assert res.returncode == 2 and "--to: a backfill needs both" in res.stderr
    res = dpr("run", str(path), "--period", "2013-2", home=home)
    assert res.returncode == 2 and "is not a monthly period: write it as YYYY-MM" in res.stderr
    res = dpr("run", str(small_spec_path), "--period", "2013-05", home=home)
    assert res.returncode == 2 and "declares no series" in res.stderr


def test_run_one_period(series):
    path, home = series
    res = dpr("run", str(path), "--period", "2013-02", home=home)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"bundle    : {home.resolve() / 'bundles' / 'nycflights13' / 'nycflights13-2013-02'}" in res.stdout
    assert (home / "bundles" / "nycflights13" / "nycflights13-2013-02" / "manifest.json").is_file()


def test_plan_series_of_an_unregistered_dataset_is_refused(tmp_path, small_spec_path, small_flights_csv):
    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv)
    res = dpr("plan", str(path), "--series", home=tmp_path / "fresh")
    assert res.returncode == 2 and "dataset nycflights13 is not registered" in res.stderr
    assert "runway: 2 more period(s) fit" in res.stdout  # against the spec's cap, as dpr plan does
