"""Series of any cadence (issue 48, item 2): yearly periods, every n-th period, a listed set of periods.

Pure functions of the spec and public labels (no flow run, no data); the plan runs on an empty ledger.
"""
from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpcore.release.periods import PeriodError, parse_label, parse_period, period_ended_before
from dpcore.release.series import backfill_periods, run_period, series_release_pattern
from dpcore.run.series_plan import plan_series
from dpcore.release.spec import SpecError, load_spec
from test_series_spec import series_spec

UTC = timezone.utc


def test_yearly_periods():
    p = parse_period("yearly", "2018")
    assert p.label == "2018" and p.start == date(2018, 1, 1) and p.end == date(2019, 1, 1)
    assert p.next().label == "2019" and p.shift(-4).label == "2014"
    assert parse_period("yearly", 2018) == p  # YAML reads an unquoted 2018 as an int
    assert parse_label("2018") == p and parse_label("2018-05").kind == "monthly"
    assert period_ended_before("yearly", datetime(2019, 1, 1, 3, tzinfo=UTC)).label == "2018"
    with pytest.raises(PeriodError, match="write it as YYYY"):
        parse_period("yearly", "2018-01")


def test_a_yearly_spec_with_unquoted_years(tmp_path):
    path = series_spec(tmp_path, series={"period": "yearly", "first": 2010})
    spec = load_spec(path, period="2014")
    assert spec.release_id == "nycflights13-2014" and spec.dataset.source.path.endswith("flights_2014.csv")
    import re

    rx = re.compile(series_release_pattern(spec))
    assert rx.fullmatch("nycflights13-2016") and not rx.fullmatch("nycflights13-2016-01")


def test_a_bad_period_kind_is_the_first_and_only_error(tmp_path):
    # before: the first error was about release_id ("must be 1-128 characters ..."), the unfilled template
    with pytest.raises(SpecError) as info:
        load_spec(series_spec(tmp_path, series={"period": "annual", "first": "2010"}))
    lines = str(info.value).splitlines()
    assert lines[1].startswith("  - series.period:") and "yearly" in lines[1]
    assert "release_id" not in str(info.value) and "dataset.source" not in str(info.value)


def test_every_other_year(tmp_path):
    path = series_spec(tmp_path, series={"period": "yearly", "first": 2010, "every": 2})
    assert backfill_periods(path, "2010", "2017") == ["2010", "2012", "2014", "2016"]
    assert backfill_periods(path, "2011", "2013") == ["2012"]
    with pytest.raises(SpecError, match=r"'2011' is not a period of the series: series.every is 2.*next one is 2012"):
        load_spec(path, period="2011")
    cad = load_spec(path).series.cadence()
    assert cad.describe() == "every 2 years"
    # a deployment's run on 2015-06-01 releases the last existing period that ended: 2014
    assert run_period(True, None, datetime(2015, 6, 1, tzinfo=UTC), True, cad) == "2014"


def test_listed_periods(tmp_path, dpr_home, small_flights_csv, register_dataset):
    path = series_spec(tmp_path, series={"period": "yearly", "periods": [2010, 2012, 2016, 2018]})
    spec = load_spec(path)
    assert spec.period == "2010" and spec.series.cadence().last.label == "2018"
    # the backfill runs over the listed periods only, and does not stop at 2014 (the survey skipped it)
    assert backfill_periods(path, "2010", "2018") == ["2010", "2012", "2016", "2018"]
    with pytest.raises(SpecError, match=r"'2014' is not a period of the series: series.periods lists only 2010, "):
        load_spec(path, period="2014")
    with pytest.raises(SpecError, match=r"no period in that range"):
        backfill_periods(path, "2013", "2015")
    cad = spec.series.cadence()
    assert run_period(True, None, datetime(2016, 3, 1, tzinfo=UTC), True, cad) == "2012"
    # after the series' last period: that period, which the run then refuses (series.last), never 2018 again
    assert run_period(True, None, datetime(2024, 3, 1, tzinfo=UTC), True, cad) == "2023"
    # the plan's runway counts only the listed periods: 2010 and 2012 fit the demo's budget (8.1 of 20 each),
    # the next one planned is 2016, never the skipped 2014
    import yaml

    d = yaml.safe_load(path.read_text())
    d["steps"]["aiq"]["enabled"] = False  # asks about record ids: needs the roster series_spec leaves out
    path.write_text(yaml.safe_dump(d))
    lines = small_flights_csv.read_text().splitlines()[:101]
    (tmp_path / "flights_2010.csv").write_text("\n".join(lines) + "\n")
    register_dataset(path)
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.settings import Settings
    from dpcore.storage.warehouse import Warehouse

    rows = plan_series(path, PrivacyLedger(Warehouse(Settings.from_env().warehouse)))
    assert [(r.period, r.status) for r in rows] == [("2010", "fits"), ("2012", "fits"), ("2016", "refused")], \
        [r.reason for r in rows]


@pytest.mark.parametrize("series, message", [
    ({"period": "yearly", "first": 2010, "every": 2, "periods": [2010]}, "give one"),
    ({"period": "yearly", "periods": [2012, 2010]}, r"series.periods\[1\] '2010' is not after '2012'"),
    ({"period": "yearly", "first": 2011, "periods": [2010, 2012]}, "outside series.first"),
    ({"period": "yearly", "first": 2010, "every": 0}, r"series.every: .*greater than or equal to 1"),
])
def test_bad_cadences_are_refused_naming_the_key(tmp_path, series, message):
    with pytest.raises(SpecError, match=message):
        load_spec(series_spec(tmp_path, series=series))


def test_a_quarterly_run_without_a_period_suggests_a_quarter(tmp_path):
    from dpr.main import cli as main

    path = series_spec(tmp_path, series={"period": "quarterly", "first": "2013-Q1"})
    res = CliRunner().invoke(main, ["run", str(path)])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "--period 2013-Q1" in text and "2013-05" not in text and "--from 2013-Q1 --to 2013-Q4" in text


def test_the_series_page_title_says_the_cadence(tmp_path):
    from dpcore.publish.series_page import build_series_page

    path = series_spec(tmp_path, series={"period": "yearly", "periods": [2010, 2012]})
    page = build_series_page(load_spec(path), tmp_path / "bundles")
    assert page.markdown.startswith("# Series of nycflights13 (yearly, 2 listed periods, from 2010)")
    path = series_spec(tmp_path, series={"period": "yearly", "first": 2010, "every": 2})
    assert "(every 2 years, from 2010)" in build_series_page(load_spec(path), tmp_path / "bundles").markdown


def test_empty_periods_are_stated_and_the_option_is_checked(tmp_path):
    from dpcore.release.series import empty_period_note

    daily = load_spec(series_spec(tmp_path, series={"period": "daily", "first": "2013-01-01"}))
    note = empty_period_note(daily)
    assert "refused before any charge" in note and "whether anyone had a record in that period" in note
    assert "series.empty_periods: release" in note
    # releasing an empty period with steps that cannot run on zero rows is refused, naming them
    with pytest.raises(SpecError, match=r"series.empty_periods: release .* steps.detect.* cannot run on zero rows"):
        load_spec(series_spec(tmp_path, series={"period": "daily", "first": "2013-01-01",
                                                "empty_periods": "release"}))


def test_older_series_specs_hash_as_before(tmp_path):
    # the keys added for issue 48 count only when set: a stored release's spec hash does not move
    from dpcore.release.spec import _drop_unset_period, _hash_json

    spec = load_spec(series_spec(tmp_path))
    data = spec.model_dump(mode="json", by_alias=True)  # what the hash read before issue 48, plus the new keys
    data["budget"].pop("series_cap", None)
    _drop_unset_period(data["dataset"])
    for key in ("every", "periods", "empty_periods"):
        data["series"].pop(key)
    assert spec.content_hash() == _hash_json(data)
    listed = load_spec(series_spec(tmp_path, series={"period": "monthly", "first": "2013-01", "every": 2}))
    assert listed.content_hash() != spec.content_hash()


def test_series_plot_intervals_stop_at_zero():
    # the tables state each interval clipped at 0: the bars below a value stop at 0 too
    from dpcore.publish.series_page import clipped_errors

    below, above = clipped_errors([3.0, 10.0, 0.0], [5.0, 2.0, 4.0])
    assert below == [3.0, 2.0, 0.0] and above == [5.0, 2.0, 4.0]
