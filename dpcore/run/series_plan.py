"""The plan of a whole series: each remaining period planned by the cost plan, up to the first refused one (issue 30).

``dpr plan --series`` prints it. It lives above the series' definition (:mod:`dpcore.release.series`: templates,
periods, the series cap) because it plans every period with :func:`dpcore.run.cost_plan.plan_release` and
:func:`dpcore.run.cost_plan.release_blockers`, which know the steps. Reads no data.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpcore.budget.amounts import PrivacyCost
from dpcore.budget.ledger import PrivacyLedger, not_registered_message
from dpcore.release.periods import parse_period
from dpcore.release.series import series_cap, series_spent
from dpcore.release.spec import SpecError, load_spec

from .cost_plan import CostPlan, plan_release, release_blockers

__all__ = ["SeriesPlanRow", "plan_series"]


@dataclass(frozen=True)
class SeriesPlanRow:
    """One period of the series plan.

    Attributes
    ----------
    period, release_id : str
    status : str
        ``released`` (finished before: returned as stored, charges nothing), ``fits`` or ``refused``.
    charge : PrivacyCost
        What the period would charge (nothing for a released one).
    left_budget, left_series : PrivacyCost or None
        The dataset's budget (and the series cap, when set) left after the period, if it fits.
    reason : str
        Why a refused period is refused.
    """

    period: str
    release_id: str
    status: str
    charge: "PrivacyCost"
    left_budget: "PrivacyCost"
    left_series: "PrivacyCost | None"
    reason: str = ""


def plan_series(spec_path: str | Path, ledger: "PrivacyLedger | None", start: str | None = None,
                max_periods: int = 24) -> list[SeriesPlanRow]:
    """Plan the series of ``spec_path`` period by period: what each charges, what is left, the first refused one.

    Reads no data (:func:`dpcore.run.cost_plan.plan_release` per period, the spec and the ledger only). Periods
    run from ``start`` (default: the series' first) to ``series.last``, or for ``max_periods`` periods for an
    open-ended series, and only the periods the series has (``series.every``, ``series.periods``): the runway
    counts no period the spec says does not exist. The list stops at the first refused period (the runway's
    end). Released periods are listed as such and charge nothing.

    Raises
    ------
    SpecError
        The spec is not a series spec (names the flag ``--series``).
    """
    base = load_spec(spec_path)
    if base.series is None:
        raise SpecError(f"--series: {spec_path} declares no series (series: {{period: monthly, first: ...}}); plan it "
                        "without --series")
    kind = base.series.period
    cad = base.series.cadence()
    p0 = parse_period(kind, start, "--from") if start is not None else cad.first
    rows: list[SeriesPlanRow] = []
    spent_series = series_spent(ledger, base)
    cap = series_cap(base)
    used = PrivacyCost(0)  # what the listed periods before this one would add
    # only the periods the series has (series.every / series.periods): a skipped period charges nothing
    for p in cad.following(max(p0, cad.first), max_periods if cad.last is None else 10**9):
        spec = load_spec(spec_path, period=p.label)
        plan: CostPlan = plan_release(spec, ledger)
        if plan.finished:
            rows.append(SeriesPlanRow(p.label, spec.release_id, "released", PrivacyCost(0),
                                      plan.remaining - used, None if cap is None else cap - spent_series - used))
            continue
        left = plan.remaining - used
        # the one decision of what blocks a release (dpr plan and dpr run use it too), every reason in the
        # order a run meets them: the dataset's cap before budget.series_cap (issue 48.3)
        reasons = [r for r in release_blockers(spec, ledger, before=used, series_before=used, plan=plan).reasons
                   if r != not_registered_message(spec.dataset.name)]  # the command refuses that once, for all
        if reasons:
            rows.append(SeriesPlanRow(p.label, spec.release_id, "refused", plan.new, left,
                                      None if cap is None else cap - spent_series - used, "; ".join(reasons)))
            break
        used = used + plan.new
        rows.append(SeriesPlanRow(p.label, spec.release_id, "fits", plan.new, plan.remaining - used,
                                  None if cap is None else cap - spent_series - used))
    return rows
