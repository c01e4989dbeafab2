"""``dpr plan``: the cost preview of a release (charges nothing, draws no noise, reads no data)."""
from __future__ import annotations

import click

from .console import REFUSED, cost, eps, out, print_json, refusals, refuse, table


def open_ledger(create: bool = False):
    """The ledger of ``$DPR_HOME``'s warehouse, or None when there is no warehouse yet (and not ``create``).

    Refuses (exit 2) a home whose marker or bundles name a ledger its warehouse does not hold
    (:func:`dpcore.budget.ledger_home.open_home_warehouse`); a damaged warehouse file exits 1 in one line.
    """
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.budget.ledger_home import open_home_warehouse
    from dpcore.storage.settings import Settings

    with refusals():
        wh = open_home_warehouse(Settings.from_env(), create=create)
    return None if wh is None else PrivacyLedger(wh)


#: The ``output`` column: where a line's outputs go (:func:`dpcore.run.cost_plan.owner_only`).
_OUTPUT = {"": "public", "all": "owner only", "part": "part owner only"}


@click.command("plan")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--release-id", help="Override the spec's release id (lines this id already reserved are not "
                                   "charged again).")
@click.option("--period", help="A series spec's period to plan (default: the series' first period).")
@click.option("--series", "whole_series", is_flag=True,
              help="A series spec: plan every remaining period (what each charges, what is left, the first refused "
                   "period).")
@click.option("--periods", "max_periods", type=click.IntRange(1, 1000), default=24, show_default=True,
              help="With --series and no series.last: how many periods to plan.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(spec, release_id, period, whole_series, max_periods, as_json) -> None:
    """Preview what running SPEC would cost, and whether it fits the budget.

    Lists every charge of every enabled step: its (ε, δ) as the mechanism states it (under its own
    neighbour relation) and as the ledger would charge it (converted to the budget's relation), the
    total, what the dataset has spent, what would be left, and every problem the release preflight
    would stop on; each line's ``output`` says whether what it buys is public or reaches only the
    bundle's owner/ folder (detector-chosen records kept owner-only), with the ε spent on the latter;
    then warnings: what the spec asks to publish that no guarantee covers
    (publish_detector_chosen_ids), and parameters that make an output uninformative (from public
    parameters only; ``warnings`` in the JSON). Charges nothing, draws no noise and reads no data.
    Exit code 0 when the release fits and has no problem, 2 otherwise (a warning alone never refuses).
    A dataset name the data owner has not registered (`dpr dataset add`) is planned against the
    spec's cap, marked as not registered, and refused.
    """
    from dpcore.run.cost_plan import release_blockers
    from dpcore.run.plan_warnings import parameter_warnings, plan_warnings
    from dpcore.release.spec import check_release_id_flag, load_spec

    if whole_series:
        if release_id or period:
            with refusals():
                from dpcore.release.spec import SpecError

                raise SpecError("--series plans every period with its own release id: leave out --release-id and "
                                "--period")
        _plan_series(spec, max_periods, as_json)
        return
    with refusals():
        check_release_id_flag(release_id)
        loaded = load_spec(spec, release_id=release_id, period=period)
        ledger = open_ledger()
        blockers = release_blockers(loaded, ledger)  # the one decision `dpr run` refuses on (issue 48.3)
        p = blockers.plan
        registered = ledger is not None and ledger.registration(loaded.dataset.name) is not None
    problems = list(blockers.reasons)
    # what the spec asks to publish unprotected, then uninformative parameters (public facts only; never a refusal)
    warnings = plan_warnings(loaded) + parameter_warnings(loaded)
    if as_json:
        print_json({**p.as_dict(), "registered": registered, "warnings": warnings, "problems": problems,
                    "refused": bool(problems)})
        raise SystemExit(0 if not problems else REFUSED)
    rows = []
    for ln in p.lines:
        c = ln.charge
        n = f"≤ {c.count}" if c.upper_bound else str(c.count)
        rows.append([
            ln.section, c.step, c.mechanism, c.notion, n, f"{cost(c.cost)} ({c.neighbour})",
            cost(ln.charged_total) if ln.charged_total is not None else "cannot be charged",
            ln.already, eps(ln.new_cost.epsilon), _OUTPUT[ln.owner_only],
        ])
    out.print(table(
        f"Cost plan: dataset {p.dataset}, release {p.release_id} (budget under {p.neighbour} neighbours)",
        ["section", "ledger step", "mechanism", "notion", "charges", "stated, each", "charged, all",
         "already reserved", "new ε", "output"], rows))
    bound = (" (exactly: lines whose count is a public upper bound are reserved whole, whatever the data holds)"
             if p.upper_bound and p.new != p.new.__class__(0) else "")
    out.print(f"total of the release : {cost(p.total)}", markup=False)
    out.print(f"this run would charge: {cost(p.new)}{bound}", markup=False)
    if p.new_owner_only != p.new_owner_only.__class__(0):
        out.print(f"of which owner-only  : {cost(p.new_owner_only)} buys outputs that reach no public file (the "
                  "detector-chosen records' answers, kept in the bundle's owner/ folder); to not spend it, set "
                  "from_detector: 0 in those steps (or publish_detector_chosen_ids: true, which makes the choice "
                  "public and unprotected)", markup=False)
    if p.finished:
        out.print(f"release {p.release_id!r} is finished: running it again returns the stored release (no data "
                  "read, nothing charged); new data needs a new release id", markup=False)
    known = "" if p.budget_known else " (a new budget: nothing in the ledger yet)"
    if not registered:
        known = " (the spec's cap: the dataset is not registered)"
    if registered:  # read from the ledger as it is printed (issue 48.3)
        st = ledger.status(loaded.dataset.name)
        out.print(f"budget               : cap {cost(st.cap)}, spent {cost(st.spent)}, left {cost(st.remaining)}"
                  f"{known}", markup=False)
    else:
        out.print(f"budget               : cap {cost(p.cap)}, spent {cost(p.spent)}, left {cost(p.remaining)}"
                  f"{known}", markup=False)
    for w in warnings:
        out.print(f"warning: {w}", markup=False)
    if problems:
        refuse(f"the release would be refused before its first charge ({len(problems)} problem(s)):\n"
               + "\n".join(f"  - {x}" for x in problems))
    out.print(f"left after this run  : {cost(p.left_after)}", markup=False)
    out.print("fits: yes (nothing was charged by this preview)", markup=False)


def _plan_series(spec: str, max_periods: int, as_json: bool) -> None:
    """``dpr plan --series``: per remaining period, its charge and what is left; the first refused period."""
    from dpcore.budget.ledger import not_registered_message
    from dpcore.release.series import empty_period_note
    from dpcore.run.series_plan import plan_series
    from dpcore.release.spec import load_spec

    with refusals():
        ledger = open_ledger()
        rows = plan_series(spec, ledger, max_periods=max_periods)
        name = load_spec(spec).dataset.name
        empty_note = empty_period_note(load_spec(spec))
        registered = ledger is not None and ledger.registration(name) is not None
    problems = [] if registered else [not_registered_message(name)]

    def pair(c):
        return None if c is None else {"epsilon": float(c.epsilon), "delta": float(c.delta)}

    refused = next((r for r in rows if r.status == "refused"), None)
    fits = [r.period for r in rows if r.status == "fits"]
    if as_json:
        print_json({"periods": [{"period": r.period, "release_id": r.release_id, "status": r.status,
                                 "charge": pair(r.charge), "left_budget": pair(r.left_budget),
                                 "left_series_cap": pair(r.left_series), "reason": r.reason} for r in rows],
                    "first_refused": refused.period if refused else None, "periods_that_fit": fits,
                    "registered": registered, "problems": problems, "empty_periods": empty_note})
        raise SystemExit(REFUSED if problems else 0)
    out.print(table("Series plan (charges nothing, reads no data)",
                    ["period", "release", "status", "charges", "budget left after", "series cap left after",
                     "why refused"],
                    [[r.period, r.release_id, r.status, cost(r.charge) if r.status != "released" else "stored",
                      cost(r.left_budget) if r.status != "refused" else "-",
                      "-" if r.left_series is None or r.status == "refused" else cost(r.left_series), r.reason]
                     for r in rows]))
    runway = f"{len(fits)} more period(s) fit" + (f" ({fits[0]} to {fits[-1]})" if fits else "")
    if refused:
        out.print(f"runway: {runway}; the first refused period is {refused.period}", markup=False)
    else:
        out.print(f"runway: {runway}; none of the {len(rows)} planned period(s) is refused", markup=False)
    out.print(empty_note, markup=False)
    if problems:
        refuse("every period would be refused before its first charge:\n" + "\n".join(f"  - {x}" for x in problems))
