"""``dpr dataset add/list/show``: the data owner registers dataset names (the registration rule).

``add`` is the data owner's command: it reads the data and prints, on the
owner's terminal only, which budgets' records the input's ids overlap and how
many. Nothing it prints about overlaps is logged, stored or published; a run
(``dpr run``, the operator flows, Prefect deployments) of an unregistered name
is refused before ingest for a reason that depends on the name only.
"""
from __future__ import annotations

import click

from .console import cost, out, print_json, refusals, refuse, table
from .plan_cmd import open_ledger


def _describe(reg) -> str:
    what = {"own": "its own budget", "share": f"the budget of {reg.budget!r} (shared by the owner's choice)",
            "separate": "its own budget, kept separate on purpose"}[reg.choice]
    seps = "".join(f"\n  separate from {o!r}: {why}" for o, why in sorted(reg.separate_from.items()))
    reason = f"\n  reason: {reg.reason}" if reg.reason else ""
    return (f"dataset {reg.dataset}: charges {what}; cap {cost(reg.cap)} ({reg.neighbour} neighbours); "
            f"registered {reg.registered_at.isoformat()}{reason}{seps}")


def _print_overlaps(overlaps: dict[str, int], ids: int) -> None:
    """The owner's view of the overlap (exact counts of the owner's data: for this terminal only)."""
    if not overlaps:
        out.print(f"overlap: none of the input's {ids} record ids is among any budget's records", markup=False)
        return
    out.print(table("overlap with existing budgets (the data owner's eyes only: do not publish)",
                    ["budget", "record ids of this input already in its records", "of"],
                    [[b, n, ids] for b, n in sorted(overlaps.items())]))


@click.group("dataset")
def dataset_group() -> None:
    """Register dataset names (the data owner) and list the registrations.

    A run of a dataset name is refused until the data owner registers it with `dpr dataset add`.
    """


@dataset_group.command("add")
@click.argument("name")
@click.option("--spec", "spec_path", required=True, type=click.Path(dir_okay=False),
              help="The release spec of the dataset (its input, record id column and budget).")
@click.option("--share", metavar="BUDGET", help="Charge this existing budget (e.g. a renamed copy of the same people).")
@click.option("--separate-from", "separate_from", metavar="BUDGET", multiple=True,
              help="Keep a budget separate from BUDGET although the records overlap (repeatable; needs --reason).")
@click.option("--reason", help="The owner's reason for the choice (required with --separate-from); recorded and "
                               "printed in every later report of both datasets.")
def add(name, spec_path, share, separate_from, reason) -> None:
    """Register dataset NAME (the data owner's command: it reads the data).

    Fingerprints the record ids of SPEC's input (HMAC under the owner's key), prints which existing
    budgets' records they overlap and how many (for the owner only), and records the owner's choice:
    without overlap NAME gets its own budget with SPEC's cap; with overlap, --share BUDGET (NAME charges
    that budget) or --separate-from BUDGET --reason TEXT is required for every overlapping budget.
    Registering a registered name again is accepted only if identical (nothing is read then).
    """
    from dpcore.budget.ledger import LedgerError
    from dpcore.run.registration import register
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    with refusals():
        spec = load_spec(spec_path)
        if spec.dataset.name != name:
            refuse(f"NAME {name!r} is not the spec's dataset.name {spec.dataset.name!r}: register the name the "
                   "runs will use (set dataset.name in the spec, or pass that name)")
        try:
            done = register(spec, Settings.from_env(), share=share, separate_from=list(separate_from), reason=reason)
        except LedgerError as exc:  # a refused registration still shows the owner what overlaps (this terminal only)
            if hasattr(exc, "overlaps_seen"):
                _print_overlaps(*exc.overlaps_seen)
            raise
    if done.already:
        out.print(f"already registered, identically (nothing read or recorded):\n{_describe(done.registration)}",
                  markup=False)
        return
    _print_overlaps(done.overlaps, done.ids)
    out.print(f"registered:\n{_describe(done.registration)}", markup=False)


@dataset_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the registrations as JSON.")
def list_(as_json) -> None:
    """Every registered dataset name: the budget it charges, the owner's choice and reason, the cap, when."""
    ledger = open_ledger()
    regs = ledger.registrations() if ledger is not None else []
    if as_json:
        print_json([r.as_dict() for r in regs])
        return
    if not regs:
        out.print("no dataset is registered yet: the data owner registers one with "
                  "`dpr dataset add NAME --spec SPEC`", markup=False)
        return
    out.print(table("registered datasets", ["dataset", "budget", "choice", "cap", "neighbour", "registered (UTC)",
                                            "reason", "separate from"],
                    [[r.dataset, r.budget, r.choice, cost(r.cap), r.neighbour, r.registered_at.isoformat()[:19],
                      r.reason or "", ", ".join(sorted(r.separate_from))] for r in regs]))


@dataset_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the registration as JSON.")
def show(name, as_json) -> None:
    """The registration of dataset NAME (exit code 2 if it is not registered)."""
    from dpcore.budget.ledger import not_registered_message

    ledger = open_ledger()
    reg = ledger.registration(name) if ledger is not None else None
    if reg is None:
        refuse(not_registered_message(name))
    if as_json:
        print_json(reg.as_dict())
        return
    out.print(_describe(reg), markup=False)
