"""``dpr budget``: each dataset's cap, spending and history of charges; ``dpr budget recover --from-bundles``."""
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


class _BudgetGroup(click.Group):
    """``dpr budget [DATASET]`` shows; a first word naming a subcommand (``recover``) runs it."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        return found if found is not None or cmd_name.startswith("-") else self.commands["show"]

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "show", self.commands["show"], args  # the word is the dataset: keep it
        return super().resolve_command(ctx, args)


@click.group("budget", cls=_BudgetGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print budgets and charges as JSON.")
@click.pass_context
def budget(ctx: click.Context, as_json: bool) -> None:
    """Show the privacy budget of DATASET (default: every dataset) and its history of charges.

    \b
    Usage: dpr budget [DATASET] [--json]
           dpr budget recover --from-bundles

    Per budget: the cap, what is spent and what is left, under the neighbour relation the cap is
    stated in; then every charge: time, release id, step, mechanism, notion, (ε, δ) as stated by the
    mechanism and as charged against the cap, and its status. A dataset whose records overlap another
    dataset's charges that dataset's budget (shown under its name). Spent totals rebuilt from the
    bundles (`dpr budget recover`) are listed as charges of status 'recovered'.
    """
    if ctx.invoked_subcommand is None:
        _show(None, as_json)


@budget.command("show", hidden=True)
@click.argument("dataset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print budgets and charges as JSON.")
@click.pass_context
def show(ctx: click.Context, dataset: str | None, as_json: bool) -> None:
    """Show the budget of DATASET (default: every dataset)."""
    _show(dataset, as_json or bool(ctx.parent and ctx.parent.params.get("as_json")))


def _show(dataset: str | None, as_json: bool) -> None:
    from dpcore.ledger import LedgerError
    from dpcore.ledger_home import ledger_id, recoveries

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
        recovered = recoveries(ledger.wh)
        report = []
        for b in budgets:
            name = b.budget or b.dataset
            shared = ledger.budget_identity(name)["datasets_sharing_it"]
            report.append({
                "budget": name, "datasets": shared, "neighbour": b.neighbour,
                "cap": {"epsilon": float(b.cap.epsilon), "delta": float(b.cap.delta)},
                "spent": {"epsilon": float(b.spent.epsilon), "delta": float(b.spent.delta)},
                "left": {"epsilon": float(b.remaining.epsilon), "delta": float(b.remaining.delta)},
                "releases": [{"release_id": t["release_id"], "held": _pair(t["held"]), "drawn": _pair(t["drawn"]),
                              "unused": _pair(t["unused"])} for t in ledger.release_totals(name)],
                "charges": _history(ledger, name),
                "recoveries": [
                    {"recovered_at": r["recovered_at"], "from_ledger": r["from_ledger"], "manifests": r["manifests"],
                     "added": {"epsilon": float(r["spent"].epsilon), "delta": float(r["spent"].delta)}}
                    for r in recovered if r["budget"] == name
                ],
                "_status": b,
            })
        lid = ledger_id(ledger.wh)
    if as_json:
        print_json([{k: v for k, v in r.items() if k != "_status"} for r in report])
        return
    if not report:
        out.print("no budget in the ledger yet", markup=False)
    for r in report:
        b = r["_status"]
        out.print(f"\nbudget {r['budget']} (datasets: {', '.join(r['datasets'])}; {r['neighbour']} neighbours): "
                  f"cap {cost(b.cap)}, spent {cost(b.spent)}, left {cost(b.remaining)}", markup=False)
        for rec in r["recoveries"]:
            out.print(f"  recovered from bundles {rec['recovered_at'][:19]} UTC: ledger {rec['from_ledger']}, "
                      f"{rec['manifests']} manifest(s), added ε={eps(rec['added']['epsilon'])} "
                      f"δ={rec['added']['delta']:.3g}", markup=False)
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
    out.print(f"\nledger {lid}", markup=False)


@budget.command("recover")
@click.option("--from-bundles", "from_bundles", is_flag=True,
              help="Rebuild the spent totals from the manifests of the bundles under $DPR_HOME (required).")
@click.option("--json", "as_json", is_flag=True, help="Print what was recovered as JSON.")
def recover(from_bundles: bool, as_json: bool) -> None:
    """Rebuild the spent totals of a lost or stale warehouse from the bundles' manifests.

    Use it when the warehouse was deleted, replaced or restored from an older backup and no newer
    backup exists (README, 'Back up'). Every budget gets at least the total spent its latest manifest
    states (never less), recorded as one charge of status 'recovered' per budget and earlier ledger,
    and listed by `dpr budget`. Charges that no bundle lists (a release that failed before its bundle)
    cannot be rebuilt; release ids made before are charged anew if run again. Running it again adds
    nothing.
    """
    from dpcore.ledger_home import recover_from_bundles
    from dpcore.settings import Settings

    if not from_bundles:
        refuse("say where to recover from: dpr budget recover --from-bundles")
    with refusals():
        lid, done = recover_from_bundles(Settings.from_env())
    if as_json:
        print_json({"ledger": lid, "recovered": [
            {"from_ledger": d.from_ledger, "budget": d.budget, "manifests": d.manifests,
             "added": {"epsilon": float(d.added.epsilon), "delta": float(d.added.delta)}} for d in done]})
        return
    if not done:
        out.print(f"nothing to recover: ledger {lid} already holds at least what every bundle says", markup=False)
        return
    out.print(table(f"recovered into ledger {lid}", ["from ledger", "budget", "manifests", "added"],
                    [[d.from_ledger, d.budget or "(no bundle)", d.manifests, cost(d.added)] for d in done]))
    out.print("the spent totals are at least what the bundles say; `dpr budget` lists the recovered charges",
              markup=False)
