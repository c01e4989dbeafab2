"""``dpr budget``: each dataset's cap, spending and history of charges; ``dpr budget set-cap``: change a cap."""
from __future__ import annotations

import math
from fractions import Fraction

import click

from .console import cost, eps, out, print_json, refusals, refuse, table
from .plan_cmd import open_ledger


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


def _cap_changes(ledger, budget_name: str) -> list[dict]:
    return [{"time": str(c["time"]), "old_cap": {"epsilon": float(c["old_cap"].epsilon), "delta": float(c["old_cap"].delta)},
             "new_cap": {"epsilon": float(c["new_cap"].epsilon), "delta": float(c["new_cap"].delta)},
             "reason": c["reason"]}
            for c in ledger.cap_changes(budget_name)]


class _BudgetGroup(click.Group):
    """``dpr budget [DATASET]`` shows budgets; ``dpr budget set-cap ...`` changes one.

    A first positional word that is not a subcommand is the DATASET to show (click groups cannot take an
    optional argument before their subcommands otherwise).
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for i, a in enumerate(args):
            if a == "--":
                break
            if not a.startswith("-"):
                if a not in self.commands:
                    args = [*args[:i], "--dataset", a, *args[i + 1:]]
                break
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[DATASET] [--json] | set-cap DATASET EPSILON [DELTA] --reason TEXT")


@click.group("budget", cls=_BudgetGroup, invoke_without_command=True)
@click.option("--dataset", hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print budgets, cap changes and charges as JSON.")
@click.pass_context
def budget(ctx, dataset, as_json) -> None:
    """Show the privacy budget of DATASET (default: every dataset) and its history of charges.

    Per budget: the cap, what is spent and what is left, under the neighbour relation the cap is
    stated in; every change of the cap (time, old and new cap, the owner's reason); then every charge:
    time, release id, step, mechanism, notion, (ε, δ) as stated by the mechanism and as charged against
    the cap, and its status. A dataset whose records overlap another dataset's charges that dataset's
    budget (shown under its name). `dpr budget set-cap` changes a cap.
    """
    if ctx.invoked_subcommand is not None:
        return
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
                "cap_changes": _cap_changes(ledger, b.budget or b.dataset),
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
        if r["cap_changes"]:
            out.print(table("cap changes", ["time (UTC)", "old cap", "new cap", "reason"], [
                [c["time"][:19], f"ε={eps(c['old_cap']['epsilon'])} δ={c['old_cap']['delta']:.3g}",
                 f"ε={eps(c['new_cap']['epsilon'])} δ={c['new_cap']['delta']:.3g}", c["reason"]]
                for c in r["cap_changes"]]))
        rows = [[c["time"][:19], c["release_id"], c["step"], c["mechanism"], c["notion"],
                 f"ε={eps(c['stated_epsilon'])} δ={c['stated_delta']:.3g} ({c['stated_neighbour']})",
                 f"ε={eps(c['charged_epsilon'])} δ={c['charged_delta']:.3g}", c["status"]]
                for c in r["charges"]]
        out.print(table("charges", ["time (UTC)", "release", "step", "mechanism", "notion", "stated",
                                    "charged", "status"], rows))


def _amount(text: str, name: str, upper: Fraction | None = None) -> Fraction:
    """An exact ε or δ from its decimal text (as the spec's budget is read), or a refusal naming it."""
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        refuse(f"{name} must be a number, got {text!r}")
    if not math.isfinite(float(value)) or value < 0 or (name == "EPSILON" and value == 0) or (
            upper is not None and value >= upper):
        refuse(f"{name} must be {'> 0' if name == 'EPSILON' else 'in [0, 1)'}, got {text}")
    return value


@budget.command("set-cap")
@click.argument("dataset")
@click.argument("epsilon")
@click.argument("delta", required=False)
@click.option("--reason", required=True, help="Why the cap changes (recorded in the ledger, shown by `dpr budget`).")
def set_cap(dataset, epsilon, delta, reason) -> None:
    """Change the privacy cap of DATASET's budget to EPSILON (and DELTA; default: the current delta cap).

    The data owner's decision, recorded in the ledger with its time, the old and new caps and the reason
    (`dpr budget` shows it). The cap stays stated under the budget's neighbour relation. Lowering the cap
    below what is already spent is refused (spent budget is never given back). Then state the same
    budget (budget.epsilon, budget.delta) in the dataset's spec: a run whose spec states another cap is
    refused, never applied silently.
    """
    from dpcore.budget import PrivacyCost

    if not reason.strip():
        refuse("--reason must say why the cap changes (it is recorded in the ledger)")
    eps_new = _amount(epsilon, "EPSILON")
    ledger = open_ledger()
    if ledger is None:
        refuse(f"no ledger yet (no warehouse under $DPR_HOME): dataset {dataset!r} has no budget to change. Its "
               "budget is registered, with the spec's cap, by its first run (`dpr run SPEC`).")
    with refusals():
        before = ledger.status(dataset)
        delta_new = _amount(delta, "DELTA", Fraction(1)) if delta is not None else before.cap.delta
        after = ledger.set_cap(dataset, PrivacyCost(eps_new, delta_new), reason=reason.strip())
    out.print(f"cap of budget {after.budget or dataset!r} ({after.neighbour} neighbours): {cost(before.cap)} -> "
              f"{cost(after.cap)}; spent {cost(after.spent)}, left {cost(after.remaining)}. Recorded with the "
              f"reason. Now set budget: {{epsilon: {epsilon}, delta: {float(after.cap.delta):g}}} in the spec "
              "(a run whose spec states another cap is refused).", markup=False)
