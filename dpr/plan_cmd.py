"""``dpr plan``: the cost preview of a release (charges nothing, draws no noise, reads no data)."""
from __future__ import annotations

import click

from .console import REFUSED, cost, eps, out, print_json, refusals, refuse, table


def open_ledger(create: bool = False):
    """The ledger of ``$DPR_HOME``'s warehouse, or None when there is no warehouse yet (and not ``create``)."""
    from dpcore.ledger import PrivacyLedger
    from dpcore.settings import Settings
    from dpcore.warehouse import Warehouse

    settings = Settings.from_env()
    if not settings.warehouse.exists() and not create:
        return None
    return PrivacyLedger(Warehouse(settings.warehouse))


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
    would stop on; then warnings on parameters that make an output uninformative (from public
    parameters only; ``warnings`` in the JSON). Charges nothing, draws no noise and reads no data.
    Exit code 0 when the release fits and has no problem, 2 otherwise (a warning alone never refuses).
    """
    from dpcore.cost_plan import plan_release
    from dpcore.plan_warnings import parameter_warnings
    from dpcore.spec import load_spec

    with refusals():
        loaded = load_spec(spec, release_id=release_id)
        p = plan_release(loaded, open_ledger())
        warnings: list[str] = parameter_warnings(loaded)  # public parameters only (dpcore/plan_warnings.py)
    if as_json:
        print_json({**p.as_dict(), "warnings": warnings})
        raise SystemExit(0 if not p.problems else REFUSED)
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
    out.print(f"budget               : cap {cost(p.cap)}, spent {cost(p.spent)}, left {cost(p.remaining)}{known}",
              markup=False)
    for w in warnings:
        out.print(f"warning: {w}", markup=False)
    if p.problems:
        refuse(f"the release would be refused before its first charge ({len(p.problems)} problem(s)):\n"
               + "\n".join(f"  - {x}" for x in p.problems))
    out.print(f"left after this run  : {cost(p.left_after)}", markup=False)
    out.print("fits: yes (nothing was charged by this preview)", markup=False)
