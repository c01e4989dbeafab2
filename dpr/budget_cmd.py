"""``dpr budget``: each dataset's cap, spending and history of charges."""
from __future__ import annotations

import click

from .console import cost, eps, out, print_json, refusals, refuse, table
from .plan_cmd import open_ledger


def _pair(c) -> dict:
    return {"epsilon": float(c.epsilon), "delta": float(c.delta)}


def _text(p: dict) -> str:
    return f"ε={eps(p['epsilon'])} δ={p['delta']:.3g}"


def _history(ledger, dataset: str) -> list[dict]:
    df = ledger.charges(dataset)
    return [
        {
            "time": str(r.reserved_at), "release_id": r.release_id, "step": r.step, "mechanism": r.mechanism,
            "notion": r.notion, "stated_neighbour": r.neighbour, "stated_epsilon": r.stated_epsilon,
            "stated_delta": r.stated_delta, "charged_epsilon": r.epsilon, "charged_delta": r.delta,
            "status": r.status, "publishable": bool(r.publishable), "ref": r.public_ref,
        }
        for r in df.itertuples()
    ]


@click.command("budget")
@click.argument("dataset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print budgets and charges as JSON.")
def budget(dataset, as_json) -> None:
    """Show the privacy budget of DATASET (default: every dataset) and its history of charges.

    Per budget: the cap, what is spent and what is left, under the neighbour relation the cap is
    stated in; then every charge: time, release id, step, mechanism, notion, (ε, δ) as stated by the
    mechanism and as charged against the cap, and its status. A dataset whose records overlap another
    dataset's charges that dataset's budget (shown under its name).
    """
    from dpcore.ledger import LedgerError

    ledger = open_ledger()
    if ledger is None:
        if dataset:
            refuse(f"no ledger yet (no warehouse under $DPR_HOME): dataset {dataset!r} has never been charged")
        (print_json([]) if as_json else out.print("no ledger yet: nothing has been charged", markup=False))
        return
    with refusals():
        if dataset:
            try:
                budgets = [ledger.status(dataset)]
            except LedgerError as exc:
                refuse(str(exc))
        else:
            budgets = ledger.budgets()
        report = []
        for b in budgets:
            shared = ledger.budget_identity(b.budget or b.dataset)["datasets_sharing_it"]
            report.append({
                "budget": b.budget or b.dataset, "datasets": shared, "neighbour": b.neighbour,
                "cap": {"epsilon": float(b.cap.epsilon), "delta": float(b.cap.delta)},
                "spent": {"epsilon": float(b.spent.epsilon), "delta": float(b.spent.delta)},
                "left": {"epsilon": float(b.remaining.epsilon), "delta": float(b.remaining.delta)},
                "releases": [{"release_id": t["release_id"], "held": _pair(t["held"]), "drawn": _pair(t["drawn"]),
                              "unused": _pair(t["unused"])} for t in ledger.release_totals(b.budget or b.dataset)],
                "charges": _history(ledger, b.budget or b.dataset),
                "_status": b,
            })
    if as_json:
        print_json([{k: v for k, v in r.items() if k != "_status"} for r in report])
        return
    if not report:
        out.print("no budget in the ledger yet", markup=False)
    for r in report:
        b = r["_status"]
        out.print(f"\nbudget {r['budget']} (datasets: {', '.join(r['datasets'])}; {r['neighbour']} neighbours): "
                  f"cap {cost(b.cap)}, spent {cost(b.spent)}, left {cost(b.remaining)}", markup=False)
        rows = [[c["time"][:19], c["release_id"], c["step"], c["mechanism"], c["notion"],
                 f"ε={eps(c['stated_epsilon'])} δ={c['stated_delta']:.3g} ({c['stated_neighbour']})",
                 f"ε={eps(c['charged_epsilon'])} δ={c['charged_delta']:.3g}", c["status"]]
                for c in r["charges"]]
        out.print(table("releases (each reserves its whole plan before its first charge; what it holds is spent)",
                        ["release", "holds", "drawn by its charges", "reserved, not drawn"],
                        [[t["release_id"], _text(t["held"]), _text(t["drawn"]), _text(t["unused"])]
                         for t in r["releases"]]))
        out.print(table("charges", ["time (UTC)", "release", "step", "mechanism", "notion", "stated",
                                    "charged", "status"], rows))
