"""The pipeline's stages as plain functions (the Prefect tasks wrap these).

Each stage takes the spec and the resolved :class:`~dpcore.storage.settings.Settings`,
opens short-lived handles on the warehouse and ledger, and returns opaque
public handles (random ingest ids, table names; never a count, a verdict or a
data-derived hash) or the :class:`~dpcore.publish.bundle.StepOutput` of a private step. The private steps
live in :mod:`dpcore.steps`.
"""
from __future__ import annotations

from typing import Any, Callable

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.runtime.chunks import serial_map
from dpcore.publish.bundle import BundleResult, RunCost, StepOutput, write_bundle
from .cost_plan import CostPlan, plan_release
from dpcore.ingest.raw import IngestResult, ingest
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.common import StepInputError, noise_test_seed, open_stores
from dpcore.steps.record_counts import rejected_fraction_gate
from dpcore.steps.rules import RulesDone
from dpcore.validation import ValidationDone, enforce, latest_passing_summary, owner_summary, validated_table_name
from dpcore.ingest.disk_space import require_disk


class PreflightError(StepInputError):
    """A release has public problems; nothing was charged. ``problems`` lists every one."""

    def __init__(self, problems: list[str], charged: str = "nothing was charged or released"):
        self.problems = list(problems)
        super().__init__(
            f"the release cannot run ({len(problems)} problem{'s' if len(problems) != 1 else ''}; {charged}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )


def preflight(spec: ReleaseSpec, steps: list[str] | None = None) -> None:
    """Every public check of every enabled step, before the release's first charge (DESIGN.md rule 8).

    Touches no data: parameters, roster and record-id form, the noise mode,
    for ``steps`` (the sections the flow runs; default every enabled step).
    A release that would fail on a public fact fails here, so bad input never
    leaves half a release (e.g. ``record_counts`` charged, then an AIQ request
    refused). Whether the dataset name is registered is checked before ingest
    (:func:`require_registered`); the cost against the remaining budget
    after it (:func:`cost_preflight`).

    Raises
    ------
    PreflightError
        Listing every problem of every step (each names its spec key).
    SeededNoiseRefusedError
        ``DPR_TEST_NOISE_SEED`` is set outside a test.
    """
    from .cost_plan import plan_release

    noise_test_seed()
    problems = plan_release(spec, steps=steps).problems  # every enabled step's public checks, all problems at once
    problems = [p for p in problems if not p.startswith("budget:")]  # the budget is checked after ingest
    if problems:
        raise PreflightError(problems)


def cost_preflight(spec: ReleaseSpec, settings: Settings, steps: list[str] | None = None,
                   flow_run_id: str | None = None) -> CostPlan:
    """Reserve the run's whole planned cost in one ledger transaction before its first charge (rule 10).

    Plans the run (:func:`dpcore.run.cost_plan.plan_release`: the spec and the
    ledger only, no data), then reserves every planned line this release id
    does not hold yet (:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve_lines`),
    all at once or nothing. The run's steps then draw their charges from the
    reservation, so a run either charges exactly what its plan said, or
    nothing; it never stops half way for lack of budget, and concurrent runs
    cannot spend each other's reservations. Runs after validation (an
    input that fails validation charges nothing), for ``steps`` (the
    sections the flow runs; default every enabled step); the budget is the
    one the data owner registered the dataset name with.

    Returns
    -------
    CostPlan
        The plan as reserved: :attr:`CostPlan.new` is what this run spent.

    Raises
    ------
    BudgetExceededError
        The run's new lines do not fit the remaining budget (checked by the
        plan, then atomically by the reservation); nothing was charged.
    PreflightError
        Any other problem, with every problem listed; nothing was charged.
    """
    from .cost_plan import plan_release

    stores = open_stores(settings)
    plan = plan_release(spec, stores.ledger, steps)
    others = [p for p in plan.problems if not p.startswith("budget:")]
    if others:
        raise PreflightError(plan.problems)
    if plan.problems:
        held, held_steps = stores.ledger.release_holds(spec.dataset.name, spec.release_id)
        raise BudgetExceededError(
            spec.dataset.name, plan.new, plan.spent, plan.cap,
            release=(spec.release_id, held, held_steps), planned=True,
        )
    from dpcore.release.series import series_cap, series_release_pattern

    cap = series_cap(spec)  # a series' budget.series_cap, checked again inside the reservation (issue 30)
    stores.ledger.reserve_lines(spec.dataset.name, spec.release_id,
                                [ln.request() for ln in plan.lines], flow_run_id,
                                series=None if cap is None else (series_release_pattern(spec), cap))
    return plan


def refuse_blocked_release(spec: ReleaseSpec, settings: Settings) -> None:
    """Refuse a release that :func:`dpcore.run.cost_plan.release_blockers` blocks, before it reads any data.

    The release flow calls this before ingest, so a run started by a deployment's worker is refused for the
    same reasons, with the same message, as ``dpr run`` and ``dpr plan`` give (issue 48 §3/§6): one decision
    of what blocks a release for every way a release starts. Reads the spec, its public files and the
    ledger only.

    Raises
    ------
    ReleaseBlockedError
        Every reason, in the order a run meets them; nothing was read or charged.
    """
    from .cost_plan import ReleaseBlockedError, release_blockers

    reasons = release_blockers(spec, open_stores(settings).ledger).reasons
    if reasons:
        raise ReleaseBlockedError(reasons)


def require_registered(spec: ReleaseSpec, settings: Settings) -> None:
    """Refuse a run of a dataset name the data owner has not registered (the registration rule, DESIGN.md rule 12).

    Reads no data: the refusal (:class:`~dpcore.budget.ledger.DatasetNotRegisteredError`,
    "dataset NAME is not registered: the data owner registers it with
    `dpr dataset add NAME --spec SPEC`") depends on the name only, so a probe
    under a new name learns nothing about other datasets' records. A
    registered name's budget must have the spec's cap and relation
    (:meth:`~dpcore.budget.ledger.PrivacyLedger.ensure_budget`, also data-independent).
    Called by :func:`ingest_stage` before it reads the input, so every flow
    that ingests checks it first.

    Raises
    ------
    DatasetNotRegisteredError
        The name is not registered; nothing was read or charged.
    LedgerError
        The spec's cap or relation differs from the registered budget's.
    """
    stores = open_stores(settings)
    stores.ledger.require_registered(spec.dataset.name)
    stores.ledger.ensure_budget(
        spec.dataset.name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact), spec.budget.neighbour
    )


def ingest_stage(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Check the name is registered, then store the input in ``raw`` (:func:`require_registered` first).

    A run of an unregistered dataset name is refused before the input is
    read. The budget the name charges is the one the data owner registered
    (``dpr dataset add``); nothing is linked by record-id overlap at run time.
    The record ids of every raw row are fingerprinted (HMAC under the owner's
    key) into that budget, internally only
    (:meth:`~dpcore.budget.ledger.PrivacyLedger.register_records`), so that a later
    registration of a renamed copy of the data sees the overlap. Before the
    input is read (and so before the cost preflight's first charge), a disk
    too small for the raw copy, the validated table and DuckDB's spill stops
    the run (:func:`dpcore.ingest.disk_space.require_disk`, issue 51).
    """
    require_registered(spec, settings)
    require_disk(spec, settings, "the release")  # before the input is read and the first charge (issue 51)
    stores = open_stores(settings)
    result = ingest(spec, stores.warehouse, settings.data)
    rid = spec.dataset.record_id
    if stores.warehouse.query(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = 'raw' AND table_name = ? AND column_name = ?",
        [result.table, rid],
    ):  # a missing id column is reported by validation (a header-level rule)
        stores.ledger.register_records(spec.dataset.name, result.qualified_table, rid, settings.owner_secret())
    return result


def validate_stage(spec: ReleaseSpec, settings: Settings, ingested: IngestResult,
                   mapper: Callable = serial_map) -> ValidationDone:
    """Validate the raw table against the spec; store validated/quarantine/results.

    An input already validated under the same validation hash (dataset, schema,
    validation settings) with a passing result by a run of the same release id
    is not validated again: the raw table, and so the validated one, is the
    release's own (:func:`dpcore.ingest.raw.ingest`; another release id validates
    equal bytes again, issue 46.4). The
    chunks are validated through ``mapper`` (:func:`dpcore.validation.validate_table`;
    the flow layer passes a Dask mapper when a Dask runner is configured).

    Returns
    -------
    ValidationDone
        An opaque handle: no count, no verdict (the exact summary stays in
        ``internal.validation_results`` for the data owner).

    Raises
    ------
    ValidationFailed
        A header-level rule failed or the input has no row; the message names
        rules and columns only.
    StepInputError
        ``steps.unattributed`` is enabled and the validated group column is
        not of the type its public domain gives
        (:func:`dpcore.steps.unattributed.check_group_column`; issue 28,
        section 6): refused before the release's first charge.
    """
    stores = open_stores(settings)
    table = validated_table_name(ingested, spec)
    if latest_passing_summary(stores.warehouse, ingested, spec) is None:
        # great-expectations loads (seconds) only here: a run over an input validated before never imports it
        from dpcore.validation import validate_table

        outcome = validate_table(stores.warehouse, ingested, spec, mapper=mapper)  # chunk by chunk, one transaction
        enforce(outcome, spec)
    if spec.steps.unattributed.enabled:  # before the release's first charge: the column's type (public) only
        from dpcore.steps.unattributed import check_group_column

        check_group_column(spec, settings, ingested)
    return ValidationDone(spec.dataset.name, table)


def bundle_stage(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    outputs: list[StepOutput],
    subfolder_prefix: str | None = None,
    stopped: str | None = None,
    rules: "RulesDone | None" = None,
    run_cost: RunCost | None = None,
) -> BundleResult:
    """Write the release bundle (see :mod:`dpcore.publish.bundle`).

    Parameters
    ----------
    subfolder_prefix : str, optional
        Operator runs write ``<release_id>/<prefix>-<public ref of their first charge>``.
    stopped : str, optional
        The public reason a release stopped early (the rejected-fraction gate).
    rules : RulesDone, optional
        The owner-only rules step's handle: its rules go to ``owner/outlier_rules.csv``.
    run_cost : RunCost, optional
        The run's reserved total and what this run reserved (:func:`cost_preflight`), for the manifest.
    """
    from dpcore.steps.rules import owner_rules

    stores = open_stores(settings)
    summary = owner_summary(stores.warehouse, ingested, spec)
    owner = {"outlier_rules": owner_rules(settings, rules)} if rules is not None else None
    return write_bundle(
        settings.bundles, spec, stores.ledger, ingested.ingest_id, summary, outputs, subfolder_prefix,
        owner_key=settings.owner_secret(), stopped=stopped, owner_tables=owner, run_cost=run_cost,
    )


#: Why a gate-stopped release gives its undrawn reservation back (recorded in ``ledger.given_back``).
GATE_STOP_REASON = "stopped by the rejected-rows gate (steps.validation.max_rejected_fraction) on the noisy record counts"


def stop_at_gate(spec: ReleaseSpec, settings: Settings, counts: StepOutput,
                 flow_run_id: str | None = None) -> str | None:
    """The rejected-rows gate, and on a stop the give-back of what the release reserved and never drew.

    The gate's verdict (:func:`dpcore.steps.record_counts.rejected_fraction_gate`) is post-processing of
    the published noisy counts, so the stop is a public fact: in one ledger
    transaction the stop is recorded and the release's undrawn reservation
    is given back (:meth:`~dpcore.budget.ledger.PrivacyLedger.give_back_unused`).
    The message states the true cost from the ledger: what the release
    reserved, what its charges drew (the record counts, in the budget's
    neighbour relation) and what it gave back, and what the budget has left.

    Parameters
    ----------
    spec : ReleaseSpec
    settings : Settings
    counts : StepOutput
        The ``record_counts`` output (noisy, charged).
    flow_run_id : str, optional

    Returns
    -------
    str or None
        None to go on; else the public reason to stop, with the figures.
    """
    verdict = rejected_fraction_gate(spec, counts)
    if verdict is None:
        return None
    lines = [ln.key for ln in plan_release(spec).lines]  # the release pipeline's own lines (not an operator's)
    back = open_stores(settings).ledger.give_back_unused(spec.dataset.name, spec.release_id, GATE_STOP_REASON,
                                                         flow_run_id, line_keys=lines)
    st = back.status
    return (f"{verdict} Release {spec.release_id!r} {back.text()} to the budget of {st.budget or st.dataset!r} "
            f"(charged under its {st.neighbour} neighbours; left now epsilon={float(st.remaining.epsilon):.6g} "
            f"delta={float(st.remaining.delta):.3g} of the cap epsilon={float(st.cap.epsilon):.6g}).")
