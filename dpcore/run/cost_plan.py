"""The cost plan of a release: every charge it will make, from the spec alone (issue 20).

A release's charges are known before any data is read: each private step
states its charges as :class:`~dpcore.steps.common.PlannedCharge` values
(``<step>_planned_charges(spec)`` next to the step's own checks, built from
the same functions the step charges with). This module adds them up, converts
each to the budget's neighbour relation (:func:`dpcore.budget.amounts.charge_under`,
the ledger's own conversion), subtracts the lines the same release id has
already reserved (a re-run spends nothing again) and says whether the rest
fits. A planned line is named by :func:`dpcore.budget.charge_keys.line_key`, the
key the ledger reserves it under (:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve_lines`),
so the plan's new charges are by construction what the run reserves, and the
run charges nothing beyond its reservation.

Two users:

* the release preflight (:func:`dpcore.run.pipeline.cost_preflight`): a release
  whose total does not fit the remaining budget, or whose steps have any
  public problem, stops before its first charge, listing every problem
  (all-or-nothing; DESIGN.md rule 8);
* ``dpr plan``: the same plan printed for the data owner, charging nothing
  and drawing no noise.

Privacy: the plan is a function of the spec, the public groups file and the
ledger's public charge records only; it never reads the data. Where the
number of charges depends on the data (targets chosen by the detector), the
plan uses the public upper bound (``from_detector``) and says so, so a
release refused by the plan would also be refused on the neighbouring data.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable
from pathlib import Path

from dpcore.budget.amounts import NeighbourConversionError, PrivacyCost, charge_under, set_cap_hint, texts_apart
from dpcore.budget.charge_keys import line_key
from dpcore.budget.ledger import LedgerError, LineRequest, PrivacyLedger
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.common import PlannedCharge, StepInputError


def _planners() -> list[tuple[str, Callable[[ReleaseSpec], list[PlannedCharge]]]]:
    from dpcore.steps.aiq import aiq_planned_charges
    from dpcore.steps.coco import coco_planned_charges
    from dpcore.steps.outlier_counts import outlier_counts_planned_charges
    from dpcore.steps.pcor import pcor_planned_charges
    from dpcore.steps.record_counts import record_counts_planned_charges
    from dpcore.steps.unattributed import unattributed_planned_charges

    # release order (flows/release_pipeline.py)
    return [
        ("record_counts", record_counts_planned_charges),
        ("aiq", aiq_planned_charges),
        ("outlier_counts", outlier_counts_planned_charges),
        ("coco", coco_planned_charges),
        ("unattributed", unattributed_planned_charges),
        ("pcor", pcor_planned_charges),
    ]


@dataclass(frozen=True)
class PlanLine:
    """One planned charge kind of a step, with its cost under the budget and what is already charged.

    Attributes
    ----------
    section : str
        The spec section (``steps.aiq``).
    charge : PlannedCharge
    charged_each : PrivacyCost or None
        One charge converted to the budget's relation; None when it cannot be
        converted (the problem is in :attr:`CostPlan.problems`).
    already : int
        How many of :attr:`PlannedCharge.count` this release id has already
        reserved under the same line key (same step and parameters): not
        reserved again.
    key : str
        The line's :func:`dpcore.budget.charge_keys.line_key`.
    match : dict
        The parameters every charge of the line carries (the planned charge's
        ``match`` and the spec's validation hash): the line's identity.
    owner_only : str
        Where the line's outputs go (:func:`owner_only`): ``"all"`` when
        every output it buys reaches only the bundle's ``owner/`` folder,
        ``"part"`` when some do, ``""`` when all are public.
    """

    section: str
    charge: PlannedCharge
    charged_each: PrivacyCost | None
    already: int = 0
    key: str = ""
    match: dict[str, Any] = field(default_factory=dict)
    owner_only: str = ""

    def request(self) -> LineRequest:
        """The ledger's reservation of this line (:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve_lines`)."""
        c = self.charge
        return LineRequest(self.key, c.step, c.mechanism, c.notion, self.match, c.count,
                           self.charged_each or PrivacyCost(0))

    @property
    def stated_total(self) -> PrivacyCost:
        """The stated cost of all the line's charges (its own neighbour relation)."""
        return self.charge.cost * self.charge.count

    @property
    def charged_total(self) -> PrivacyCost | None:
        """All the line's charges under the budget's relation."""
        return None if self.charged_each is None else self.charged_each * self.charge.count

    @property
    def new_count(self) -> int:
        """Charges this run would reserve (0 when the line is reserved already: a line is reserved whole)."""
        return 0 if self.already else self.charge.count

    @property
    def new_cost(self) -> PrivacyCost:
        """What this run would add to the budget for the line."""
        return PrivacyCost(0) if self.charged_each is None else self.charged_each * self.new_count

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (exact values as decimal strings of the fractions' floats)."""
        c = self.charge
        return {
            "section": self.section, "step": c.step, "mechanism": c.mechanism, "notion": c.notion,
            "neighbour": c.neighbour, "count": c.count, "count_is_upper_bound": c.upper_bound,
            "stated_epsilon_each": float(c.cost.epsilon), "stated_delta_each": float(c.cost.delta),
            "charged_epsilon": None if self.charged_total is None else float(self.charged_total.epsilon),
            "charged_delta": None if self.charged_total is None else float(self.charged_total.delta),
            "already_reserved": self.already, "new_epsilon": float(self.new_cost.epsilon),
            "new_delta": float(self.new_cost.delta), "owner_only": self.owner_only or None,
        }


@dataclass(frozen=True)
class CostPlan:
    """Every charge a release would make, the budget it would be charged to, and whether it fits.

    Attributes
    ----------
    dataset, release_id : str
    neighbour : str
        The budget's neighbour relation (the ledger's, or the spec's for a new budget).
    cap, spent : PrivacyCost
        The budget's cap and what it has spent (for a budget not yet in the
        ledger: the spec's cap and nothing).
    budget_known : bool
        Whether the ledger already holds the budget.
    lines : list of PlanLine
    problems : list of str
        Every public problem found (a step's bad parameters, a cost that
        cannot be charged under the budget's relation, the total over the
        remaining budget, a finished release id asked for another release);
        empty when the release may run.
    finished : bool
        The release pipeline of this release id finished before: a run
        returns the stored release, reads no data and charges nothing.
    """

    dataset: str
    release_id: str
    neighbour: str
    cap: PrivacyCost
    spent: PrivacyCost
    budget_known: bool
    lines: list[PlanLine] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    finished: bool = False

    @property
    def total(self) -> PrivacyCost:
        """All planned charges under the budget's relation (including those already charged)."""
        return sum((ln.charged_total or PrivacyCost(0) for ln in self.lines), PrivacyCost(0))

    @property
    def new(self) -> PrivacyCost:
        """What this run would reserve, and so spend (the total minus the lines this release id holds)."""
        return sum((ln.new_cost for ln in self.lines), PrivacyCost(0))

    @property
    def remaining(self) -> PrivacyCost:
        """The budget left before this run."""
        return self.cap - self.spent

    @property
    def left_after(self) -> PrivacyCost:
        """The budget left after this run (if it fits)."""
        return self.remaining - self.new

    @property
    def fits(self) -> bool:
        """Whether this run's new charges fit the remaining budget."""
        return self.new.fits_within(self.remaining)

    @property
    def new_owner_only(self) -> PrivacyCost:
        """What this run would spend on lines whose every output is owner-only (no public file shows it)."""
        return sum((ln.new_cost for ln in self.lines if ln.owner_only == "all"), PrivacyCost(0))

    @property
    def upper_bound(self) -> bool:
        """Whether some count is a public upper bound (detector-chosen targets)."""
        return any(ln.charge.upper_bound for ln in self.lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form of the plan (``dpr plan --json``)."""
        def pair(c: PrivacyCost) -> dict[str, float]:
            return {"epsilon": float(c.epsilon), "delta": float(c.delta)}

        return {
            "dataset": self.dataset, "release_id": self.release_id, "neighbour": self.neighbour,
            "budget_known": self.budget_known, "cap": pair(self.cap), "spent": pair(self.spent),
            "remaining": pair(self.remaining), "total": pair(self.total), "new": pair(self.new),
            "left_after": pair(self.left_after), "fits": self.fits and not self.problems,
            "counts_are_upper_bounds": self.upper_bound, "new_owner_only": pair(self.new_owner_only),
            "lines": [ln.as_dict() for ln in self.lines],
            "problems": list(self.problems), "finished": self.finished,
        }


def owner_only(spec: ReleaseSpec, section: str, charge: PlannedCharge) -> str:
    """Whether a planned charge buys outputs that reach no public file (issue 46.5), from the spec alone.

    With ``from_detector`` and ``publish_detector_chosen_ids`` off (the default), the answers about
    detector-chosen records go to the bundle's ``owner/`` folder only (issue 28, section 4): PCOR's
    detector line (its slots) is then ``"all"`` owner-only; AIQ's one batch charge is ``"all"`` when it
    asks nothing else (no listed id, no public point), else ``"part"`` (its ``from_detector`` share).

    Returns
    -------
    str
        ``"all"``, ``"part"`` or ``""`` (every output of the line is public).
    """
    if section not in ("pcor", "aiq"):
        return ""
    cfg = getattr(spec.steps, section)
    if not cfg.from_detector or cfg.publish_detector_chosen_ids:
        return ""
    if section == "pcor":
        return "" if "record_id" in charge.match else "all"  # a listed record's line names its id
    return "part" if (cfg.record_ids or cfg.points) else "all"


def plan_release(spec: ReleaseSpec, ledger: PrivacyLedger | None = None,
                 steps: list[str] | None = None) -> CostPlan:
    """The cost plan of ``spec``'s enabled steps against the dataset's budget in ``ledger``.

    Parameters
    ----------
    spec : ReleaseSpec
    ledger : PrivacyLedger, optional
        Where the budget and earlier charges are; None (or a dataset the
        ledger does not know yet) plans against a new budget with the spec's
        cap. The budget is looked up by ``spec.dataset.name``; a renamed copy
        of a dataset is linked to its budget only at ingest (record-id
        fingerprints), so the release preflight, which runs after ingest,
        has the final word.
    steps : list of str, optional
        The step sections a flow runs (an operator flow runs one); default
        every enabled step of the spec.

    Returns
    -------
    CostPlan
        Never raises for a step's bad parameters: they are listed in
        :attr:`CostPlan.problems` with the other problems.
    """
    name = spec.dataset.name
    status = None
    if ledger is not None:
        try:
            status = ledger.status(name)
        except LedgerError:
            status = None
    if status is None:
        cap = PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact)
        neighbour, spent, known = spec.budget.neighbour, PrivacyCost(0), False
        existing: dict[str, int] = {}
    else:
        cap, neighbour, spent, known = status.cap, status.neighbour, status.spent, True
        existing = ledger.reserved_counts(name, spec.release_id)
    problems: list[str] = []
    lines: list[PlanLine] = []
    validation = spec.validation_hash()
    for section, planner in _planners():
        if not getattr(spec.steps, section).enabled or (steps is not None and section not in steps):
            continue
        try:
            planned = planner(spec)
        except (StepInputError, ValueError) as exc:
            problems.append(str(exc) if str(exc).startswith("steps.") else f"steps.{section}: {exc}")
            continue
        for charge in planned:
            try:
                each = charge_under(charge.cost, charge.neighbour, neighbour)
            except NeighbourConversionError as exc:
                problems.append(f"steps.{section} ({charge.step}, {charge.mechanism}): {exc}")
                each = None
            match = {**charge.match, "validation": validation}
            key = line_key(name, spec.release_id, charge.step, match)
            lines.append(PlanLine(f"steps.{section}", charge, each, existing.get(key, 0), key, match,
                                  owner_only(spec, section, charge)))
    finished = False
    if ledger is not None and steps is None:  # the whole release: a finished release id is the stored release
        from .release_runs import pipeline_finished

        done = pipeline_finished(ledger.wh.path, name, spec.release_id)
        if done is not None:
            finished = sorted(ln.key for ln in lines) == done
            if not finished:
                problems.append(
                    f"release_id: release {spec.release_id!r} was published with other parameters (its planned "
                    "charges differ from this spec's); a release id names one release: give this release a new "
                    "release id")
    plan = CostPlan(name, spec.release_id, neighbour, cap, spent, known, lines, [], finished)
    if spec.series is not None and spec.budget.series_cap is not None and not finished:
        from dpcore.release.series import series_cap_problem, series_spent

        over = series_cap_problem(spec, plan.new, series_spent(ledger, spec))  # before the period's first charge
        if over:
            problems.append(over)
    if not plan.fits:
        asked, left = texts_apart(plan.new, plan.remaining)
        problems.append(
            f"budget: this release would charge {asked} but dataset "
            f"{name!r} has {left} left (spent {spent} of cap {cap}, {neighbour} neighbours). Lower a "
            f"step's epsilon/delta, disable a step, or, if the data owner approves, raise the cap with "
            f"{set_cap_hint(name)}"
        )
    return replace(plan, problems=problems)


@dataclass(frozen=True)
class Blockers:
    """What blocks a release, decided in one place (:func:`release_blockers`) for ``dpr plan`` and ``dpr run``.

    Attributes
    ----------
    plan : CostPlan
        The release's cost plan (as :func:`plan_release` makes it).
    reasons : list of str
        Every reason the release would be refused before its first charge, in the order a run meets them:
        the spec's public problems, the registration, the cap the spec states against the registered
        budget's, the dataset's remaining budget, ``budget.series_cap``. Empty: the release may run.
    """

    plan: CostPlan
    reasons: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        """Whether nothing blocks the release."""
        return not self.reasons


class ReleaseBlockedError(StepInputError):
    """A release that :func:`release_blockers` blocks, refused before its first charge (nothing read or charged).

    ``dpr run`` (before Prefect starts) and the release flow (a deployment's run too, before ingest) refuse
    with this one message: the one reason as it stands, or every reason listed.
    """

    def __init__(self, reasons: list[str]):
        self.reasons = list(reasons)
        if len(self.reasons) == 1:
            text = self.reasons[0]
        else:
            text = (f"the release was refused before its first charge ({len(self.reasons)} problem(s); nothing was "
                    "read or charged):\n" + "\n".join(f"  - {x}" for x in self.reasons))
        super().__init__(text)


def _is_budget_problem(p: str) -> bool:
    return p.startswith("budget:") or p.startswith("budget.series_cap:")


def release_blockers(spec: ReleaseSpec, ledger: PrivacyLedger | None, *,
                     before: PrivacyCost = PrivacyCost(0), series_before: PrivacyCost = PrivacyCost(0),
                     plan: CostPlan | None = None) -> Blockers:
    """Every reason ``spec``'s release would be refused before its first charge (issue 48.3).

    The one decision of what blocks a release: ``dpr plan`` prints these
    reasons and its verdict from them, ``dpr run`` refuses with the same ones
    before Prefect starts (the flow's own checks, after ingest, then find
    nothing new), and ``dpr plan --series`` uses it per period. Reads no data:
    the spec, the public groups file, and the ledger's registrations, caps and
    reservations.

    Parameters
    ----------
    spec : ReleaseSpec
    ledger : PrivacyLedger or None
        None: no warehouse yet (the name is then not registered).
    before : PrivacyCost
        What earlier periods of a series plan would reserve before this one (``dpr plan --series``).
    series_before : PrivacyCost
        The same, against ``budget.series_cap``.
    plan : CostPlan, optional
        ``plan_release(spec, ledger)`` when the caller has it already.

    Returns
    -------
    Blockers
        A finished release id (its stored release is returned; no data read) is blocked by its spec's
        public problems only, as its run is.
    """
    from dpcore.budget.ledger import not_registered_message

    plan = plan_release(spec, ledger) if plan is None else plan
    reasons = [p for p in plan.problems if not _is_budget_problem(p)]
    if plan.finished:
        return Blockers(plan, reasons)
    from dpcore.runtime.chunks import MemoryLimitError
    from dpcore.storage.settings import check_memory_floor

    try:  # a DPR_MEMORY_LIMIT below the floor: `dpr run` and every flow refuse it (issue 47.5); so does the plan
        check_memory_floor()
    except MemoryLimitError as exc:
        reasons.append(str(exc))
    name = spec.dataset.name
    registered = ledger is not None and ledger.registration(name) is not None
    if not registered:
        reasons.append(not_registered_message(name))
    else:
        mismatch = ledger.cap_mismatch(name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact),
                                       spec.budget.neighbour)
        if mismatch:
            reasons.append(mismatch)
    left = plan.remaining - before
    if not plan.new.fits_within(left):
        asked, left_text = texts_apart(plan.new, left)
        reasons.append(
            f"budget: this release would charge {asked} but dataset {name!r} has {left_text} left"
            + (f" after the periods planned before it ({before})" if before != PrivacyCost(0) else "")
            + f" (spent {plan.spent} of cap {plan.cap}, {plan.neighbour} neighbours). Lower a step's epsilon/delta, "
            f"disable a step, or, if the data owner approves, raise the cap with {set_cap_hint(name)}")
    if spec.series is not None and spec.budget.series_cap is not None:
        from dpcore.release.series import series_cap_problem, series_spent

        over = series_cap_problem(spec, plan.new, series_spent(ledger, spec) + series_before)
        if over:
            reasons.append(over)
    return Blockers(plan, reasons)


def stored_answer(spec: Any, ledger: Any, bundles: Path, blockers: Any = None) -> dict[str, Any] | None:
    """The stored outcome ``dpr run`` may print for ``spec`` without Prefect or the data, or None (issue 48 §6).

    A release is answered from the ledger when nothing blocks it (:func:`dpcore.run.cost_plan.release_blockers`),
    its release id finished with this spec's planned lines (``CostPlan.finished``) and its outcome is stored.
    A series period is answered only when the series page is at least as new as the period's bundle;
    otherwise (a run that stopped between its release and the page) the flow's re-run rebuilds the page.
    Used for one release and for each period of a backfill (``dpr run --from/--to``).

    Parameters
    ----------
    spec : ReleaseSpec
        The loaded spec (a series spec with its period).
    ledger : PrivacyLedger or None
        None: no warehouse yet (nothing is stored).
    bundles : Path
        The bundles folder (``Settings.bundles``).
    blockers : Blockers, optional
        ``release_blockers(spec, ledger)`` when the caller has it already.

    Returns
    -------
    dict or None
        The public outcome marked as stored (:func:`as_stored`); None when the flow must run.
    """
    from .release_runs import stored_outcome

    if ledger is None:
        return None
    blockers = release_blockers(spec, ledger) if blockers is None else blockers
    if blockers.reasons or not blockers.plan.finished:
        return None
    outcome = stored_outcome(ledger.wh.path, spec.dataset.name, spec.release_id)
    if outcome is None:
        return None
    if spec.series is not None:
        page = Path(bundles) / spec.dataset.name / "series" / "index.md"
        try:
            if page.stat().st_mtime < (Path(outcome["bundle"]) / "manifest.json").stat().st_mtime:
                return None
        except OSError:
            return None
    return outcome
