"""Release periods of a series: monthly, weekly (ISO weeks), daily and quarterly, in UTC (issue 30).

A series spec (``series: {period: monthly, first: 2013-01}``) releases one
period per run. A period is named by a public label:

============  ==============  ===========================================
kind          label           covers (UTC, start inclusive, end exclusive)
============  ==============  ===========================================
``monthly``   ``2013-05``     2013-05-01 00:00 to 2013-06-01 00:00
``quarterly`` ``2013-Q2``     2013-04-01 00:00 to 2013-07-01 00:00
``weekly``    ``2013-W05``    the ISO week: Monday 00:00 to the next Monday
``daily``     ``2013-05-31``  2013-05-31 00:00 to 2013-06-01 00:00
============  ==============  ===========================================

The schedule is in UTC: :func:`period_ended_before` takes the period that
ended at or before a run's scheduled start time (converted to UTC; a naive
time is refused, since it could mean any zone), so a run scheduled for
03:00 UTC on the 1st releases the month that just ended, and a late or
retried run of the same schedule slot releases the same period.

Pure functions of public labels and times: no Prefect, no data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Iterator, Literal

PeriodKind = Literal["monthly", "weekly", "daily", "quarterly"]
#: The period kinds, in the order the spec documents them.
KINDS: tuple[str, ...] = ("monthly", "weekly", "daily", "quarterly")

#: How each kind's label is written (shown in error messages).
LABEL_FORMS = {"monthly": "YYYY-MM (2013-05)", "weekly": "YYYY-Www, an ISO week (2013-W05)",
               "daily": "YYYY-MM-DD (2013-05-31)", "quarterly": "YYYY-Qn (2013-Q2)"}

_PATTERNS = {
    "monthly": re.compile(r"(\d{4})-(\d{2})"),
    "weekly": re.compile(r"(\d{4})-W(\d{2})"),
    "daily": re.compile(r"(\d{4})-(\d{2})-(\d{2})"),
    "quarterly": re.compile(r"(\d{4})-Q([1-4])"),
}


class PeriodError(ValueError):
    """A period label or time that cannot name a period of the series; the message says the expected form."""


@dataclass(frozen=True, order=True)
class Period:
    """One period of a series: its kind and its first day (UTC).

    Attributes
    ----------
    kind : str
        ``monthly``, ``weekly``, ``daily`` or ``quarterly``.
    start : datetime.date
        The period's first day (a Monday for ISO weeks, the 1st of January, April, July or October for
        quarters).
    """

    kind: str
    start: date

    @property
    def label(self) -> str:
        """The public label (``2013-05``, ``2013-W05``, ``2013-05-31``, ``2013-Q2``)."""
        d = self.start
        if self.kind == "monthly":
            return f"{d.year:04d}-{d.month:02d}"
        if self.kind == "quarterly":
            return f"{d.year:04d}-Q{(d.month - 1) // 3 + 1}"
        if self.kind == "weekly":
            y, w, _ = d.isocalendar()
            return f"{y:04d}-W{w:02d}"
        return d.isoformat()

    @property
    def end(self) -> date:
        """The first day after the period (exclusive end)."""
        return self.next().start

    @property
    def start_utc(self) -> datetime:
        """The period's first instant, 00:00 UTC of :attr:`start`."""
        return datetime(self.start.year, self.start.month, self.start.day, tzinfo=timezone.utc)

    @property
    def end_utc(self) -> datetime:
        """The first instant after the period (00:00 UTC of :attr:`end`)."""
        e = self.end
        return datetime(e.year, e.month, e.day, tzinfo=timezone.utc)

    def next(self) -> "Period":
        """The following period."""
        return self.shift(1)

    def previous(self) -> "Period":
        """The period before this one."""
        return self.shift(-1)

    def shift(self, n: int) -> "Period":
        """The period ``n`` periods later (earlier for negative ``n``)."""
        d = self.start
        if self.kind in ("monthly", "quarterly"):
            months = d.year * 12 + d.month - 1 + n * (1 if self.kind == "monthly" else 3)
            return Period(self.kind, date(months // 12, months % 12 + 1, 1))
        return Period(self.kind, d + timedelta(days=n * (7 if self.kind == "weekly" else 1)))

    def __str__(self) -> str:
        return self.label


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise PeriodError(f"unknown period kind {kind!r}: give one of {', '.join(KINDS)}")


def parse_period(kind: str, text: object, what: str = "period") -> Period:
    """The period of ``kind`` named by ``text``.

    Parameters
    ----------
    kind : str
        The series' period kind.
    text : str or datetime.date
        The label (``2013-05`` for monthly, ...). A ``date`` (YAML reads an unquoted ``2013-05-01`` as one)
        is taken as its ISO text.
    what : str
        How the caller names the value in messages (``series.first``, ``--period``, ``period``).

    Raises
    ------
    PeriodError
        ``text`` is not a label of ``kind``; the message names ``what`` and the expected form.
    """
    _check_kind(kind)
    if isinstance(text, datetime):
        text = text.date()
    if isinstance(text, date):
        text = text.isoformat()
    shown = text if isinstance(text, str) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,40}", text) else "<not shown>"
    bad = PeriodError(f"{what} {shown!r} is not a {kind} period: write it as {LABEL_FORMS[kind]}")
    m = _PATTERNS[kind].fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise bad
    year = int(m.group(1))
    try:
        if kind == "monthly":
            return Period(kind, date(year, int(m.group(2)), 1))
        if kind == "quarterly":
            return Period(kind, date(year, 3 * (int(m.group(2)) - 1) + 1, 1))
        if kind == "weekly":
            start = date.fromisocalendar(year, int(m.group(2)), 1)
            return Period(kind, start)
        return Period(kind, date(year, int(m.group(2)), int(m.group(3))))
    except ValueError:  # month 13, ISO week 54, 31 February, year 0
        raise bad from None


def period_containing(kind: str, when: datetime) -> Period:
    """The period of ``kind`` that contains the instant ``when`` (converted to UTC; naive times refused)."""
    _check_kind(kind)
    if when.tzinfo is None or when.utcoffset() is None:
        raise PeriodError("a time without a time zone cannot place a period: give an aware time (the schedule is in "
                          "UTC)")
    d = when.astimezone(timezone.utc).date()
    if kind == "monthly":
        return Period(kind, date(d.year, d.month, 1))
    if kind == "quarterly":
        return Period(kind, date(d.year, 3 * ((d.month - 1) // 3) + 1, 1))
    if kind == "weekly":
        return Period(kind, d - timedelta(days=d.weekday()))
    return Period(kind, d)


def period_ended_before(kind: str, when: datetime) -> Period:
    """The last period of ``kind`` that ended at or before ``when`` (the one a run scheduled at ``when`` releases).

    A run scheduled for 2013-06-01 03:00 UTC releases 2013-05 (monthly); one scheduled for exactly
    2013-06-01 00:00 UTC releases 2013-05 too (that month has ended); 2013-06-30 23:59 UTC is still 2013-05.
    ``when`` is converted to UTC first: 2013-06-01 01:00 at UTC+02:00 is 2013-05-31 23:00 UTC, so it
    releases 2013-04.
    """
    return period_containing(kind, when).previous()


def periods_between(first: Period, last: Period) -> Iterator[Period]:
    """Every period from ``first`` to ``last``, both included, in order (nothing when ``last`` is earlier)."""
    if first.kind != last.kind:
        raise PeriodError(f"cannot list periods from a {first.kind} to a {last.kind} period")
    p = first
    while p <= last:
        yield p
        p = p.next()


def parse_label(text: str, what: str = "period") -> Period:
    """The period named by a label of any kind (the four label forms do not overlap: ``2013-05``, ``2013-W05``,
    ``2013-05-31``, ``2013-Q2``)."""
    for kind in KINDS:
        if isinstance(text, str) and _PATTERNS[kind].fullmatch(text):
            return parse_period(kind, text, what)
    raise PeriodError(f"{what} is not a period label: write it as one of " + "; ".join(LABEL_FORMS.values()))
