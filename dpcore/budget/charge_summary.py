"""One plain line about what a flow run charged (issue 32 §3): for ``dpr`` operator commands.

The figure is the ledger's own: the lines the run reserved
(:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve_lines`, recorded with the run's
flow-run id), in the budget's neighbour relation, summed exactly. Beside it, the
mechanisms' stated costs and the relation they are stated under when the
ledger converted them, and what is left of the cap. Nothing here depends on the
data: the charges are functions of the spec and the request.
"""
from __future__ import annotations

from .amounts import PrivacyCost
from .ledger import PrivacyLedger

__all__ = ["release_budget_line", "release_outcome_lines", "run_charge_line"]


def _cost(c: PrivacyCost) -> str:
    return f"epsilon={float(c.epsilon):.6g} delta={float(c.delta):.3g}"


def run_charge_line(ledger: PrivacyLedger, dataset: str, flow_run_id: str) -> str:
    """``charged: …; left …`` for the flow run ``flow_run_id`` on ``dataset``'s budget.

    Parameters
    ----------
    ledger : PrivacyLedger
    dataset : str
        The dataset name the run charged (its budget may be shared, as registered).
    flow_run_id : str
        The Prefect flow-run id the run's reservation and charges carry.

    Returns
    -------
    str
        E.g. ``"charged: epsilon=0.4 delta=0 (stated epsilon=0.2 delta=0 under add-remove neighbours, counted
        as epsilon=0.4 delta=0 against your replace-one cap); left epsilon=19.2 delta=1e-05 of the cap epsilon=20
        delta=1e-05"``, or ``"charged: nothing …"`` for a run that reserved nothing new.
    """
    rows = ledger.wh.query(
        "SELECT n_reserved, eps_each, delta_each FROM ledger.reservations WHERE flow_run_id = ?", [flow_run_id])
    charged = PrivacyCost.from_units(sum(int(n) * int(e) for n, e, _ in rows), sum(int(n) * int(d) for n, _, d in rows))
    status = ledger.status(dataset)
    left = f"left {_cost(status.remaining)} of the cap {_cost(status.cap)}"
    if charged == PrivacyCost(0):
        return (f"charged: nothing (this request was answered before under this release id, or charges nothing); "
                f"{left}")
    stated = ledger.wh.query(
        "SELECT neighbour, sum(coalesce(stated_eps_units, eps_units)), sum(coalesce(stated_delta_units, delta_units)) "
        "FROM ledger.charges WHERE flow_run_id = ? GROUP BY neighbour ORDER BY neighbour", [flow_run_id])
    converted = [f"stated {_cost(PrivacyCost.from_units(int(e), int(d)))} under {nb} neighbours"
                 for nb, e, d in stated if nb != status.neighbour]
    how = (f" ({'; '.join(converted)}, counted as {_cost(charged)} against your {status.neighbour} cap)"
           if converted else f" (under the cap's {status.neighbour} neighbours)")
    return f"charged: {_cost(charged)}{how}; {left}"


def release_budget_line(ledger: PrivacyLedger, dataset: str, release_id: str, charged_by_this_run: PrivacyCost) -> str:
    """The ``budget    :`` line of ``dpr run``, every figure but the run's own charge read from the ledger now.

    Issue 48.3: a stored re-run printed the totals stored with the release ("total spent epsilon=20 of 40")
    while the ledger held 36.4; the line must say what the ledger holds when it is printed.

    Parameters
    ----------
    ledger : PrivacyLedger
    dataset, release_id : str
    charged_by_this_run : PrivacyCost
        What this run reserved (zero for a stored re-run).

    Returns
    -------
    str
        ``budget    : this run charged …; this release holds …; total spent … of …; left … (… neighbours)``.
    """
    st = ledger.status(dataset)
    held = ledger.release_holds(dataset, release_id)[0]
    n = charged_by_this_run
    return (f"budget    : this run charged epsilon={float(n.epsilon):.6g} delta={float(n.delta):.3g}; this release "
            f"holds epsilon={float(held.epsilon):.6g} delta={float(held.delta):.3g}; total spent "
            f"epsilon={float(st.spent.epsilon):.6g} of {float(st.cap.epsilon):g}; left "
            f"epsilon={float(st.remaining.epsilon):.6g} delta={float(st.remaining.delta):.3g} "
            f"({st.neighbour} neighbours)")


def release_outcome_lines(ledger: PrivacyLedger, dataset: str, release_id: str, outcome: dict) -> list[str]:
    """What ``dpr run`` prints after a release: where the warehouse, bundle and report are, and the budget line.

    One text for a fresh release and a stored re-run, whether the re-run went through the flow or was
    answered by ``dpr run`` from the ledger before Prefect started (issue 48 §6).

    Parameters
    ----------
    ledger : PrivacyLedger
    dataset, release_id : str
    outcome : dict
        The release pipeline's public outcome (``warehouse``, ``bundle``, ``charged_by_this_run``, and
        ``stored_release`` for a stored re-run).

    Returns
    -------
    list of str
        The lines, the budget's read from the ledger now (:func:`release_budget_line`).
    """
    lines = [""]
    if outcome.get("stored_release"):
        lines.append("stored    : this release id was finished before; this is its stored release (no data read, "
                     "nothing charged; new data needs a new release id)")
    lines += [f"warehouse : {outcome['warehouse']}", f"bundle    : {outcome['bundle']}",
              f"report    : {outcome['bundle']}/report.md"]
    n = outcome["charged_by_this_run"]
    lines.append(release_budget_line(ledger, dataset, release_id, PrivacyCost(n["epsilon"], n["delta"])))
    return lines
