"""Release periods of a series: monthly, weekly (ISO weeks), daily, quarterly and yearly, in UTC (issues 30, 48).

A series spec (``series: {period: monthly, first: 2013-01}``) releases one
period per run. A period is named by a public label:

============  ==============  ===========================================
kind          label           covers (UTC, start inclusive, end exclusive)
============  ==============  ===========================================
``monthly``   ``2013-05``     2013-05-01 00:00 to 2013-06-01 00:00
``quarterly`` ``2013-Q2``     2013-04-01 00:00 to 2013-07-01 00:00
``weekly``    ``2013-W05``    the ISO week: Monday 00:00 to the next Monday
``daily``     ``2013-05-31``  2013-05-31 00:00 to 2013-06-01 00:00
``yearly``    ``2018``        2018-01-01 00:00 to 2019-01-01 00:00
============  ==============  ===========================================

A series need not release every period of its kind: :class:`Cadence` holds
the periods that exist (every period from ``series.first``, every n-th one
(``series.every: 2``), or a listed set (``series.periods: [2010, 2012]``)),
so a backfill, a plan's runway and a schedule's run take only those.

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

PeriodKind = Literal["monthly", "weekly", "daily", "quarterly", "yearly"]
#: The period kinds, in the order the spec documents them.
KINDS: tuple[str, ...] = ("monthly", "weekly", "daily", "quarterly", "yearly")

#: How each kind's label is written (shown in error messages).
LABEL_FORMS = {"monthly": "YYYY-MM (2013-05)", "weekly": "YYYY-Www, an ISO week (2013-W05)",
               "daily": "YYYY-MM-DD (2013-05-31)", "quarterly": "YYYY-Qn (2013-Q2)", "yearly": "YYYY (2018)"}

_PATTERNS = {
    "monthly": re.compile(r"(\d{4})-(\d{2})"),
    "weekly": re.compile(r"(\d{4})-W(\d{2})"),
    "daily": re.compile(r"(\d{4})-(\d{2})-(\d{2})"),
    "quarterly": re.compile(r"(\d{4})-Q([1-4])"),
    "yearly": re.compile(r"(\d{4})"),
}
#: Each kind's label as a regular expression (Python ``re`` and DuckDB RE2 alike), for matching release ids.
LABEL_RES = {"monthly": r"[0-9]{4}-[0-9]{2}", "weekly": r"[0-9]{4}-W[0-9]{2}",
             "daily": r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "quarterly": r"[0-9]{4}-Q[1-4]", "yearly": r"[0-9]{4}"}
#: The noun of one period of each kind (``every 2 years``).
UNIT_NAMES = {"monthly": "month", "weekly": "week", "daily": "day", "quarterly": "quarter", "yearly": "year"}


class PeriodError(ValueError):
    """A period label or time that cannot name a period of the series; the message says the expected form."""


@dataclass(frozen=True, order=True)
class Period:
    """One period of a series: its kind and its first day (UTC).

    Attributes
    ----------
    kind : str
        ``monthly``, ``weekly``, ``daily``, ``quarterly`` or ``yearly``.
    start : datetime.date
        The period's first day (a Monday for ISO weeks, the 1st of January, April, July or October for
        quarters, the 1st of January for years).
    """

    kind: str
    start: date

    @property
    def label(self) -> str:
        """The public label (``2013-05``, ``2013-W05``, ``2013-05-31``, ``2013-Q2``, ``2018``)."""
        d = self.start
        if self.kind == "yearly":
            return f"{d.year:04d}"
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
        if self.kind in ("monthly", "quarterly", "yearly"):
            months = d.year * 12 + d.month - 1 + n * {"monthly": 1, "quarterly": 3, "yearly": 12}[self.kind]
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
    text : str, int or datetime.date
        The label (``2013-05`` for monthly, ...). A ``date`` (YAML reads an unquoted ``2013-05-01`` as one)
        is taken as its ISO text, an ``int`` (YAML reads an unquoted ``2018`` as one) as its digits.
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
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    shown = text if isinstance(text, str) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,40}", text) else "<not shown>"
    bad = PeriodError(f"{what} {shown!r} is not a {kind} period: write it as {LABEL_FORMS[kind]}")
    m = _PATTERNS[kind].fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise bad
    year = int(m.group(1))
    try:
        if kind == "yearly":
            return Period(kind, date(year, 1, 1))
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
    if kind == "yearly":
        return Period(kind, date(d.year, 1, 1))
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
    """The period named by a label of any kind (the five label forms do not overlap: ``2013-05``, ``2013-W05``,
    ``2013-05-31``, ``2013-Q2``, ``2018``)."""
    for kind in KINDS:
        if isinstance(text, str) and _PATTERNS[kind].fullmatch(text):
            return parse_period(kind, text, what)
    raise PeriodError(f"{what} is not a period label: write it as one of " + "; ".join(LABEL_FORMS.values()))


def example_label(kind: str) -> str:
    """A label of ``kind`` for messages (``2013-05``, ``2013-W05``, ``2013-05-31``, ``2013-Q2``, ``2018``)."""
    _check_kind(kind)
    return LABEL_FORMS[kind].rsplit("(", 1)[1].rstrip(")")


@dataclass(frozen=True)
class Cadence:
    """The periods a series releases: which periods of its kind exist (issue 48).

    Attributes
    ----------
    kind : str
        The period kind.
    first : Period
        The series' first period (``series.first``; the first listed one for a listed series).
    last : Period or None
        Its last period (``series.last``; the last listed one for a listed series); None: open-ended.
    every : int
        Only every ``every``-th period from ``first`` exists (``series.every``; 1: every period).
    listed : tuple of Period or None
        The periods that exist, in order (``series.periods``); None: every ``every``-th period.

    All public: read from the spec only.
    """

    kind: str
    first: Period
    last: Period | None = None
    every: int = 1
    listed: tuple[Period, ...] | None = None

    def contains(self, p: Period) -> bool:
        """Whether ``p`` is a period of the series (within its bounds, on its rule or list)."""
        if p.kind != self.kind or p < self.first or (self.last is not None and p > self.last):
            return False
        if self.listed is not None:
            return p in self.listed
        return self.every == 1 or _steps_between(self.first, p) % self.every == 0

    def between(self, lo: Period, hi: Period) -> list[Period]:
        """The series' periods from ``lo`` to ``hi``, both included, in order."""
        if self.listed is not None:
            return [p for p in self.listed if lo <= p <= hi]
        return [p for p in periods_between(max(lo, self.first), hi if self.last is None else min(hi, self.last))
                if self.contains(p)]

    def following(self, start: Period, n: int) -> list[Period]:
        """Up to ``n`` periods of the series from ``start`` on (fewer when the series ends)."""
        out: list[Period] = []
        if self.listed is not None:
            return [p for p in self.listed if p >= start][:n]
        p = max(start, self.first)
        while len(out) < n and (self.last is None or p <= self.last):
            if self.contains(p):
                out.append(p)
            p = p.next()
        return out

    def latest_ended_before(self, when: datetime) -> Period | None:
        """The series' last period that ended at or before ``when`` (None: none has ended yet).

        A period after ``last`` is returned as is (a run of it is refused, naming ``series.last``); a period
        the series skips gives the last one before it that the series has.
        """
        p = period_ended_before(self.kind, when)
        if self.last is not None and p > self.last:
            return p  # after the series: the caller refuses it (series.last), as for a series without gaps
        while p >= self.first:
            if self.contains(p):
                return p
            if self.listed is not None:
                earlier = [q for q in self.listed if q < p]
                return earlier[-1] if earlier else None
            p = p.previous()
        return None

    def describe(self) -> str:
        """The cadence in words: ``yearly``, ``every 2 years``, ``yearly, 7 listed periods``."""
        if self.listed is not None:
            return f"{self.kind}, {len(self.listed)} listed period{'s' if len(self.listed) != 1 else ''}"
        if self.every > 1:
            return f"every {self.every} {UNIT_NAMES[self.kind]}s"
        return self.kind

    def refusal(self, p: Period, what: str = "period (--period)") -> str | None:
        """Why ``p`` is not a period of the series (None when it is): names ``what`` and the series' keys."""
        if self.contains(p):
            return None
        span = f"{self.first.label} to {self.last.label}" if self.last else f"from {self.first.label} on"
        if p < self.first or (self.last is not None and p > self.last):
            return f"{what} {p.label!r} is not a period of the series ({self.kind}, {span}: series.first / series.last)"
        if self.listed is not None:
            shown = ", ".join(q.label for q in self.listed[:12]) + (", ..." if len(self.listed) > 12 else "")
            return (f"{what} {p.label!r} is not a period of the series: series.periods lists only {shown}; give a "
                    "listed period or add it to series.periods")
        nxt = self.following(p, 1)
        hint = f" (the next one is {nxt[0].label})" if nxt else ""
        return (f"{what} {p.label!r} is not a period of the series: series.every is {self.every}, so only one "
                f"{UNIT_NAMES[self.kind]} in {self.every} exists, counted from {self.first.label}{hint}")


def _steps_between(a: Period, b: Period) -> int:
    """How many periods of their kind lie from ``a`` to ``b`` (``b`` later; 0 when equal)."""
    if a.kind in ("monthly", "quarterly", "yearly"):
        months = (b.start.year - a.start.year) * 12 + b.start.month - a.start.month
        return months // {"monthly": 1, "quarterly": 3, "yearly": 12}[a.kind]
    return (b.start - a.start).days // (7 if a.kind == "weekly" else 1)


def cadence(kind: str, first: object, last: object = None, every: object = None,
            periods: object = None) -> Cadence:
    """The :class:`Cadence` of a series section's values (as read from YAML: labels, dates or ints).

    Parameters
    ----------
    kind : str
        ``series.period``.
    first, last : str, int, date or None
        ``series.first`` and ``series.last`` (``first`` may be None for a listed series: the first listed).
    every : int or None
        ``series.every`` (>= 1).
    periods : list or None
        ``series.periods``: the labels of the periods that exist.

    Raises
    ------
    PeriodError
        A label that is not a period of ``kind``, a listed period outside first .. last, a repeated or
        unordered list, both ``every`` and ``periods``, ``every`` below 1, or ``last`` before ``first``;
        each message names the ``series.`` key and the fix.
    """
    _check_kind(kind)
    if every is not None and periods is not None:
        raise PeriodError("series.every and series.periods: give one (every: 2 for every other period, or the list "
                          "of periods that exist), not both")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise PeriodError("series.every must be a whole number >= 1 (2: every other period from series.first)")
    listed = None
    if periods is not None:
        if not isinstance(periods, (list, tuple)) or not periods:
            raise PeriodError(f"series.periods must be a non-empty list of {kind} periods, e.g. "
                              f"[{example_label(kind)}, ...]")
        listed = tuple(parse_period(kind, x, f"series.periods[{i}]") for i, x in enumerate(periods))
        for i in range(1, len(listed)):
            if listed[i] <= listed[i - 1]:
                raise PeriodError(f"series.periods[{i}] {listed[i].label!r} is not after {listed[i - 1].label!r}: "
                                  "list each period once, earliest first")
    if first is None and listed is None:
        raise PeriodError(f"series.first is missing: give the series' first period ({LABEL_FORMS[kind]})")
    p_first = parse_period(kind, first, "series.first") if first is not None else listed[0]
    p_last = parse_period(kind, last, "series.last") if last is not None else (listed[-1] if listed else None)
    if p_last is not None and p_last < p_first:
        raise PeriodError(f"series.last {p_last.label!r} is before series.first {p_first.label!r}")
    if listed is not None:
        out = [q.label for q in listed if q < p_first or q > p_last]
        if out:
            raise PeriodError(f"series.periods: {', '.join(out[:5])} lie(s) outside series.first .. series.last "
                              f"({p_first.label} to {p_last.label}); remove them or widen the bounds")
    return Cadence(kind, p_first, p_last, every or 1, listed)
