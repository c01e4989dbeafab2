"""``dpr budget``: each dataset's cap, spending and history of charges; ``dpr budget set-cap``: change a cap;
``dpr budget recover --from-bundles``."""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

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


def _cap_changes(ledger, budget_name: str) -> list[dict]:
    return [{"time": str(c["time"]), "old_cap": {"epsilon": float(c["old_cap"].epsilon), "delta": float(c["old_cap"].delta)},
             "new_cap": {"epsilon": float(c["new_cap"].epsilon), "delta": float(c["new_cap"].delta)},
             "reason": c["reason"]}
            for c in ledger.cap_changes(budget_name)]


class _BudgetGroup(click.Group):
    """``dpr budget [DATASET]`` shows; a first word naming a subcommand (``set-cap``, ``recover``) runs it."""

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
           dpr budget set-cap DATASET EPSILON [DELTA] --reason TEXT
           dpr budget recover --from-bundles

    Per budget: the cap, what is spent and what is left, under the neighbour relation the cap is
    stated in; each release id's reservation (what it reserved, holds, and its charges drew, and what it
    gave back when it stopped on a public fact); every change of
    the cap (time, old and new cap, the owner's reason); then every charge: time, release id, step,
    mechanism, notion, (ε, δ) as stated by the
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


def _writable(settings) -> bool:
    """Whether this user may write the warehouse's folder, its lock file and the file itself (a read-only mount:
    no)."""
    folder = settings.warehouse.parent
    lock = settings.warehouse.with_name(settings.warehouse.name + ".lock")
    return (os.access(folder, os.W_OK | os.X_OK) and os.access(settings.warehouse, os.W_OK)
            and (not lock.exists() or os.access(lock, os.W_OK)))


@contextmanager
def _read_only_ledger(settings):
    """The ledger of a home this user cannot write (a read-only mount, a backup): read, never written.

    DuckDB attaches the warehouse read-only (no lock file, no write-ahead log written) and copies every table's
    definition and the ``ledger`` schema's rows into a private temporary warehouse (a 0700 folder, removed
    afterwards), on which the home's usual checks run (:func:`dpcore.budget.ledger_home.verify`: marker and bundles;
    messages name the home's file). The copy holds budgets and charges, never a data row.
    """
    import shutil
    import tempfile

    import duckdb

    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.budget.ledger_home import verify
    from dpcore.storage.warehouse import Warehouse, WarehouseCorruptError, _is_corrupt

    folder = Path(tempfile.mkdtemp(prefix="dpr-budget-"))
    try:
        copy = folder / "snapshot.duckdb"
        con = duckdb.connect(str(copy))
        try:
            try:
                con.execute("ATTACH ? AS home (READ_ONLY)", [str(settings.warehouse)])
            except duckdb.Error as exc:
                if _is_corrupt(exc):
                    raise WarehouseCorruptError(settings.warehouse) from None
                raise
            con.execute("COPY FROM DATABASE home TO snapshot (SCHEMA)")  # every table's definition, no row
            for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'home' AND "
                                       "schema_name = 'ledger' ORDER BY table_name").fetchall():
                quoted = '"' + name.replace('"', '""') + '"'
                con.execute(f"INSERT INTO snapshot.ledger.{quoted} SELECT * FROM home.ledger.{quoted}")
            con.execute("DETACH home")
        finally:
            con.close()
        wh = Warehouse(copy)
        verify(settings, wh)
        yield PrivacyLedger(wh)
    finally:
        from dpcore.storage.warehouse import let_go

        let_go(folder / "snapshot.duckdb")
        shutil.rmtree(folder, ignore_errors=True)


def _show(dataset: str | None, as_json: bool) -> None:
    """Print (or ``--json``) the budgets; a home this user cannot write is read without writing (issue 47 item 5)."""
    from dpcore.storage.settings import Settings

    settings = Settings.from_env()
    if settings.warehouse.is_file() and not _writable(settings):
        with refusals(), _read_only_ledger(settings) as ledger:
            _show_ledger(ledger, dataset, as_json)
        if not as_json:
            out.print(f"(read from {settings.warehouse} without writing: this user cannot write the home)",
                      markup=False)
        return
    _show_ledger(open_ledger(), dataset, as_json)


def _show_ledger(ledger, dataset: str | None, as_json: bool) -> None:
    from dpcore.budget.ledger import LedgerError
    from dpcore.budget.ledger_home import ledger_id, recoveries

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
                              "unused": _pair(t["unused"]), "given_back": _pair(t["given_back"]),
                              "reserved": _pair(t["reserved"])} for t in ledger.release_totals(name)],
                "cap_changes": _cap_changes(ledger, name),
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
        if r["cap_changes"]:
            out.print(table("cap changes", ["time (UTC)", "old cap", "new cap", "reason"], [
                [c["time"][:19], f"ε={eps(c['old_cap']['epsilon'])} δ={c['old_cap']['delta']:.3g}",
                 f"ε={eps(c['new_cap']['epsilon'])} δ={c['new_cap']['delta']:.3g}", c["reason"]]
                for c in r["cap_changes"]]))
        for rec in r["recoveries"]:
            out.print(f"  recovered from bundles {rec['recovered_at'][:19]} UTC: ledger {rec['from_ledger']}, "
                      f"{rec['manifests']} manifest(s), added ε={eps(rec['added']['epsilon'])} "
                      f"δ={rec['added']['delta']:.3g}", markup=False)
        rows = [[c["time"][:19], c["release_id"], c["step"], c["mechanism"], c["notion"],
                 f"ε={eps(c['stated_epsilon'])} δ={c['stated_delta']:.3g} ({c['stated_neighbour']})",
                 f"ε={eps(c['charged_epsilon'])} δ={c['charged_delta']:.3g}", c["status"]]
                for c in r["charges"]]
        out.print(table("releases (each reserves its whole plan before its first charge; what it holds is spent; "
                        "one stopped on a public fact gives back what it never drew)",
                        ["release", "reserved", "holds", "drawn by its charges", "reserved, not drawn",
                         "given back"],
                        [[t["release_id"], _text(t["reserved"]), _text(t["held"]), _text(t["drawn"]),
                          _text(t["unused"]), _text(t["given_back"])] for t in r["releases"]]))
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
    backup exists (docs/backups.md, 'What, when and how'). Every budget gets at least the total spent its latest manifest
    states (never less), recorded as one charge of status 'recovered' per budget and earlier ledger,
    and listed by `dpr budget`. Charges that no bundle lists (a release that failed before its bundle)
    cannot be rebuilt; release ids made before are charged anew if run again. Running it again adds
    nothing.
    """
    from dpcore.budget.ledger_home import recover_from_bundles
    from dpcore.storage.settings import Settings

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
    from dpcore.budget.amounts import PrivacyCost

    if not reason.strip():
        refuse("--reason must say why the cap changes (it is recorded in the ledger)")
    eps_new = _amount(epsilon, "EPSILON")
    ledger = open_ledger()
    if ledger is None:
        refuse(f"no ledger yet (no warehouse under $DPR_HOME): dataset {dataset!r} has no budget to change. The "
               f"data owner registers it, with the spec's cap, by `dpr dataset add {dataset} --spec SPEC`.")
    with refusals():
        before = ledger.status(dataset)
        delta_new = _amount(delta, "DELTA", Fraction(1)) if delta is not None else before.cap.delta
        after = ledger.set_cap(dataset, PrivacyCost(eps_new, delta_new), reason=reason.strip())
    out.print(f"cap of budget {after.budget or dataset!r} ({after.neighbour} neighbours): {cost(before.cap)} -> "
              f"{cost(after.cap)}; spent {cost(after.spent)}, left {cost(after.remaining)}. Recorded with the "
              f"reason. Now set budget: {{epsilon: {epsilon}, delta: {float(after.cap.delta):g}}} in the spec "
              "(a run whose spec states another cap is refused).", markup=False)
