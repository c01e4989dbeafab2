"""Period arithmetic of a series (issue 30): month ends, ISO weeks, quarters, days, time zones (UTC)."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from dpcore.release.periods import (
    Period, PeriodError, parse_label, parse_period, period_containing, period_ended_before, periods_between,
)

UTC = timezone.utc


@pytest.mark.parametrize("kind,label,start,end", [
    ("monthly", "2013-01", date(2013, 1, 1), date(2013, 2, 1)),
    ("monthly", "2013-12", date(2013, 12, 1), date(2014, 1, 1)),  # the year turns
    ("monthly", "2012-02", date(2012, 2, 1), date(2012, 3, 1)),  # a leap February ends on the 29th
    ("quarterly", "2013-Q1", date(2013, 1, 1), date(2013, 4, 1)),
    ("quarterly", "2013-Q4", date(2013, 10, 1), date(2014, 1, 1)),
    ("weekly", "2013-W01", date(2012, 12, 31), date(2013, 1, 7)),  # ISO week 1 of 2013 starts in 2012
    ("weekly", "2015-W53", date(2015, 12, 28), date(2016, 1, 4)),  # a 53-week ISO year
    ("daily", "2013-02-28", date(2013, 2, 28), date(2013, 3, 1)),
    ("daily", "2012-02-29", date(2012, 2, 29), date(2012, 3, 1)),
])
def test_labels_round_trip_and_bounds(kind, label, start, end):
    p = parse_period(kind, label)
    assert (p.start, p.end, p.label) == (start, end, label)
    assert p.start_utc == datetime(start.year, start.month, start.day, tzinfo=UTC)
    assert parse_label(label) == p
    assert p.next().previous() == p and p.next().start == end


@pytest.mark.parametrize("kind,text", [
    ("monthly", "2013-13"), ("monthly", "2013-5"), ("monthly", "2013-05-01"), ("quarterly", "2013-Q5"),
    ("weekly", "2013-W54"), ("weekly", "2013-W53"),  # 2013 has 52 ISO weeks
    ("daily", "2013-02-29"), ("daily", "2013-02"), ("monthly", 201305), ("monthly", None),
])
def test_bad_labels_are_refused_with_the_form(kind, text):
    with pytest.raises(PeriodError, match="write it as"):
        parse_period(kind, text, "--period")


def test_a_yaml_date_is_a_daily_label():
    assert parse_period("daily", date(2013, 5, 31)).label == "2013-05-31"


def test_unknown_kind_is_refused():
    with pytest.raises(PeriodError, match="unknown period kind 'hourly'"):
        parse_period("hourly", "2013-05")


def test_the_period_ended_before_a_scheduled_start():
    # the monthly-release cron: 03:00 UTC on the 1st releases the month that just ended
    assert period_ended_before("monthly", datetime(2013, 6, 1, 3, tzinfo=UTC)).label == "2013-05"
    # exactly at the month's end it has ended; one second before, it has not
    assert period_ended_before("monthly", datetime(2013, 6, 1, tzinfo=UTC)).label == "2013-05"
    assert period_ended_before("monthly", datetime(2013, 5, 31, 23, 59, 59, tzinfo=UTC)).label == "2013-04"
    assert period_ended_before("monthly", datetime(2014, 1, 1, 3, tzinfo=UTC)).label == "2013-12"
    assert period_ended_before("quarterly", datetime(2013, 7, 1, 3, tzinfo=UTC)).label == "2013-Q2"
    assert period_ended_before("quarterly", datetime(2014, 1, 15, tzinfo=UTC)).label == "2013-Q4"
    # Monday 2013-01-07 starts ISO week 2: week 1 has ended
    assert period_ended_before("weekly", datetime(2013, 1, 7, 3, tzinfo=UTC)).label == "2013-W01"
    assert period_ended_before("weekly", datetime(2013, 1, 6, 23, tzinfo=UTC)).label == "2012-W52"
    assert period_ended_before("daily", datetime(2013, 3, 1, 0, 30, tzinfo=UTC)).label == "2013-02-28"


def test_time_zones_are_converted_to_utc():
    # 01:00 on June 1st at UTC+02:00 is 23:00 UTC on May 31st: May has not ended in UTC
    cest = timezone(timedelta(hours=2))
    assert period_ended_before("monthly", datetime(2013, 6, 1, 1, tzinfo=cest)).label == "2013-04"
    # 22:00 on May 31st at UTC-05:00 is 03:00 UTC on June 1st: May has ended
    est = timezone(timedelta(hours=-5))
    assert period_ended_before("monthly", datetime(2013, 5, 31, 22, tzinfo=est)).label == "2013-05"
    assert period_containing("daily", datetime(2013, 5, 31, 22, tzinfo=est)).label == "2013-06-01"


def test_a_naive_time_is_refused():
    with pytest.raises(PeriodError, match="time zone"):
        period_ended_before("monthly", datetime(2013, 6, 1, 3))


def test_periods_between_in_order():
    first, last = parse_period("monthly", "2013-11"), parse_period("monthly", "2014-02")
    assert [p.label for p in periods_between(first, last)] == ["2013-11", "2013-12", "2014-01", "2014-02"]
    assert list(periods_between(last, first)) == []
    assert parse_period("quarterly", "2013-Q4").shift(-4).label == "2012-Q4"
    assert Period("monthly", date(2013, 1, 1)).shift(25).label == "2015-02"
