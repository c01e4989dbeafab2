"""``dpr plan``: the cost preview of a release (charges nothing, draws no noise, reads no data)."""
from __future__ import annotations

import click

from .console import REFUSED, cost, eps, out, print_json, refusals, refuse, table


def open_ledger(create: bool = False):
    """The ledger of ``$DPR_HOME``'s warehouse, or None when there is no warehouse yet (and not ``create``).

    Refuses (exit 2) a home whose marker or bundles name a ledger its warehouse does not hold
    (:func:`dpcore.ledger_home.open_home_warehouse`); a damaged warehouse file exits 1 in one line.
    """
    from dpcore.ledger import PrivacyLedger
    from dpcore.ledger_home import open_home_warehouse
    from dpcore.settings import Settings

    with refusals():
        wh = open_home_warehouse(Settings.from_env(), create=create)
    return None if wh is None else PrivacyLedger(wh)


@click.command("plan")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--release-id", help="Override the spec's release id (lines this id already reserved are not "
                                   "charged again).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(spec, release_id, as_json) -> None:
    """Preview what running SPEC would cost, and whether it fits the budget.

    Lists every charge of every enabled step: its (ε, δ) as the mechanism states it (under its own
    neighbour relation) and as the ledger would charge it (converted to the budget's relation), the
    total, what the dataset has spent, what would be left, and every problem the release preflight
    would stop on; then warnings: what the spec asks to publish that no guarantee covers
    (publish_detector_chosen_ids), and parameters that make an output uninformative (from public
    parameters only; ``warnings`` in the JSON). Charges nothing, draws no noise and reads no data.
    Exit code 0 when the release fits and has no problem, 2 otherwise (a warning alone never refuses).
    A dataset name the data owner has not registered (`dpr dataset add`) is planned against the
    spec's cap, marked as not registered, and refused.
    """
    from dpcore.cost_plan import plan_release
    from dpcore.ledger import not_registered_message
    from dpcore.plan_warnings import parameter_warnings, plan_warnings
    from dpcore.spec import check_release_id_flag, load_spec

    with refusals():
        check_release_id_flag(release_id)
        loaded = load_spec(spec, release_id=release_id)
        ledger = open_ledger()
        p = plan_release(loaded, ledger)
        registered = ledger is not None and ledger.registration(loaded.dataset.name) is not None
    unregistered = [] if registered else [not_registered_message(loaded.dataset.name)]
    # what the spec asks to publish unprotected, then uninformative parameters (public facts only; never a refusal)
    warnings = plan_warnings(loaded) + parameter_warnings(loaded)
    if as_json:
        print_json({**p.as_dict(), "registered": registered, "warnings": warnings,
                    "problems": unregistered + list(p.problems)})
        raise SystemExit(0 if not (p.problems or unregistered) else REFUSED)
    rows = []
    for ln in p.lines:
        c = ln.charge
        n = f"≤ {c.count}" if c.upper_bound else str(c.count)
        rows.append([
            ln.section, c.step, c.mechanism, c.notion, n, f"{cost(c.cost)} ({c.neighbour})",
            cost(ln.charged_total) if ln.charged_total is not None else "cannot be charged",
            ln.already, eps(ln.new_cost.epsilon),
        ])
    out.print(table(
        f"Cost plan: dataset {p.dataset}, release {p.release_id} (budget under {p.neighbour} neighbours)",
        ["section", "ledger step", "mechanism", "notion", "charges", "stated, each", "charged, all",
         "already reserved", "new ε"], rows))
    bound = (" (exactly: lines whose count is a public upper bound are reserved whole, whatever the data holds)"
             if p.upper_bound and p.new != p.new.__class__(0) else "")
    out.print(f"total of the release : {cost(p.total)}", markup=False)
    out.print(f"this run would charge: {cost(p.new)}{bound}", markup=False)
    if p.finished:
        out.print(f"release {p.release_id!r} is finished: running it again returns the stored release (no data "
                  "read, nothing charged); new data needs a new release id", markup=False)
    known = "" if p.budget_known else " (a new budget: nothing in the ledger yet)"
    if not registered:
        known = " (the spec's cap: the dataset is not registered)"
    out.print(f"budget               : cap {cost(p.cap)}, spent {cost(p.spent)}, left {cost(p.remaining)}{known}",
              markup=False)
    for w in warnings:
        out.print(f"warning: {w}", markup=False)
    problems = unregistered + list(p.problems)
    if problems:
        refuse(f"the release would be refused before its first charge ({len(problems)} problem(s)):\n"
               + "\n".join(f"  - {x}" for x in problems))
    out.print(f"left after this run  : {cost(p.left_after)}", markup=False)
    out.print("fits: yes (nothing was charged by this preview)", markup=False)
