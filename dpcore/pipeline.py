"""The pipeline's stages as plain functions (the Prefect tasks wrap these).

Each stage takes the spec and the resolved :class:`~dpcore.settings.Settings`,
opens short-lived handles on the warehouse and ledger, and returns opaque
public handles (random ingest ids, table names; never a count, a verdict or a
data-derived hash) or the :class:`~dpcore.bundle.StepOutput` of a private step. The private steps
live in :mod:`dpcore.steps`.
"""
from __future__ import annotations

from typing import Any, Callable

from .budget import BudgetExceededError, PrivacyCost
from .chunks import serial_map
from .bundle import BundleResult, StepOutput, write_bundle
from .cost_plan import CostPlan
from .ingest import IngestResult, ingest
from .settings import Settings
from .spec import ReleaseSpec
from .steps.common import StepInputError, noise_test_seed, open_stores
from .steps.rules import RulesDone
from .validation import (
    ValidationDone, enforce, latest_passing_summary, owner_summary, validate_table, validated_table_name,
)


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
    refused). The cost against the remaining budget is checked after ingest
    (:func:`cost_preflight`: ingest links the input to its budget).

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


def cost_preflight(spec: ReleaseSpec, settings: Settings, steps: list[str] | None = None) -> CostPlan:
    """The release's whole cost against the remaining budget, before its first charge (issue 20).

    Runs after ingest (which links the input to its budget). Charges nothing,
    reads no data: :func:`dpcore.cost_plan.plan_release` on the ledger, for
    ``steps`` (the sections the flow runs; default every enabled step).

    Returns
    -------
    CostPlan
        The plan (every step's charges, what this release id already charged).

    Raises
    ------
    BudgetExceededError
        The release's new charges do not fit the remaining budget (the only
        problem); nothing was charged by this run.
    PreflightError
        Any other problem, with every problem listed.
    """
    from .cost_plan import plan_release

    stores = open_stores(settings)
    plan = plan_release(spec, stores.ledger, steps)
    others = [p for p in plan.problems if not p.startswith("budget:")]
    if others:
        raise PreflightError(plan.problems)
    if plan.problems:
        done = [ln for ln in plan.lines if ln.already]
        so_far = sum((ln.charged_each * ln.already for ln in done if ln.charged_each), PrivacyCost(0))
        raise BudgetExceededError(
            spec.dataset.name, plan.new, plan.spent, plan.cap,
            release=(spec.release_id, so_far, list(dict.fromkeys(ln.charge.step for ln in done))),
            planned=True,
        )
    return plan


def ingest_stage(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Store the input in ``raw``, link it to the budget its records belong to, register that budget.

    The record ids of every raw row are fingerprinted (HMAC under the owner's
    key) in the ledger, so a renamed copy of the data charges the same budget
    (:meth:`~dpcore.ledger.PrivacyLedger.register_records`).
    """
    stores = open_stores(settings)
    result = ingest(spec, stores.warehouse, settings.data)
    rid = spec.dataset.record_id
    if stores.warehouse.query(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = 'raw' AND table_name = ? AND column_name = ?",
        [result.table, rid],
    ):  # a missing id column is reported by validation (a header-level rule)
        stores.ledger.register_records(
            spec.dataset.name, result.qualified_table, rid, settings.owner_secret(), spec.budget.separate_from
        )
    stores.ledger.ensure_budget(
        spec.dataset.name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact), spec.budget.neighbour
    )
    return result


def validate_stage(spec: ReleaseSpec, settings: Settings, ingested: IngestResult,
                   mapper: Callable = serial_map) -> ValidationDone:
    """Validate the raw table against the spec; store validated/quarantine/results.

    An input already validated under the same validation hash (dataset, schema,
    validation settings) with a passing result is not validated again. The
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
        outcome = validate_table(stores.warehouse, ingested, spec, mapper=mapper)  # chunk by chunk, one transaction
        enforce(outcome, spec)
    if spec.steps.unattributed.enabled:  # before the release's first charge: the column's type (public) only
        from .steps.unattributed import check_group_column

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
) -> BundleResult:
    """Write the release bundle (see :mod:`dpcore.bundle`).

    Parameters
    ----------
    subfolder_prefix : str, optional
        Operator runs write ``<release_id>/<prefix>-<public ref of their first charge>``.
    stopped : str, optional
        The public reason a release stopped early (the rejected-fraction gate).
    rules : RulesDone, optional
        The owner-only rules step's handle: its rules go to ``owner/outlier_rules.csv``.
    """
    from .steps.rules import owner_rules

    stores = open_stores(settings)
    summary = owner_summary(stores.warehouse, ingested, spec)
    owner = {"outlier_rules": owner_rules(settings, rules)} if rules is not None else None
    return write_bundle(
        settings.bundles, spec, stores.ledger, ingested.ingest_id, summary, outputs, subfolder_prefix,
        owner_key=settings.owner_secret(), stopped=stopped, owner_tables=owner,
    )
