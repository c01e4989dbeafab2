"""The pipeline's stages as plain functions (the Prefect tasks wrap these).

Each stage takes the spec and the resolved :class:`~dpcore.settings.Settings`,
opens short-lived handles on the warehouse and ledger, and returns opaque
public handles (random ingest ids, table names; never a count, a verdict or a
data-derived hash) or the :class:`~dpcore.bundle.StepOutput` of a private step. The private steps
live in :mod:`dpcore.steps`.
"""
from __future__ import annotations

from typing import Any

from .budget import PrivacyCost
from .bundle import BundleResult, StepOutput, write_bundle
from .ingest import IngestResult, ingest, load_raw
from .settings import Settings
from .spec import ReleaseSpec
from .steps.common import open_stores
from .validation import (
    ValidationDone, enforce, latest_passing_summary, owner_summary, store_outcome, validate, validated_table_name,
)


def preflight(spec: ReleaseSpec) -> None:
    """Every public check of every enabled step, before the release's first charge (DESIGN.md rule 8).

    Touches no data: parameters, roster and record-id form, the noise mode.
    A release that would fail on a public fact fails here, so bad input never
    leaves half a release (e.g. ``record_counts`` charged, then an AIQ request
    refused).

    Raises
    ------
    StepInputError
        A step's parameters or requests are invalid (the message names the key).
    SeededNoiseRefusedError
        ``DPR_TEST_NOISE_SEED`` is set outside a test.
    """
    from .steps.aiq import check_aiq
    from .steps.coco import check_coco
    from .steps.common import noise_test_seed
    from .steps.outlier_counts import check_outlier_counts
    from .steps.pcor import check_pcor

    noise_test_seed()
    if spec.steps.aiq.enabled:
        check_aiq(spec)
    if spec.steps.coco.enabled:
        check_coco(spec)
    if spec.steps.outlier_counts.enabled:
        check_outlier_counts(spec)
    if spec.steps.pcor.enabled:
        check_pcor(spec)


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


def validate_stage(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> ValidationDone:
    """Validate the raw table against the spec; store validated/quarantine/results.

    An input already validated under the same validation hash (dataset, schema,
    validation settings) with a passing result is not validated again.

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
    """
    stores = open_stores(settings)
    table = validated_table_name(ingested, spec)
    if latest_passing_summary(stores.warehouse, ingested, spec) is not None:
        return ValidationDone(spec.dataset.name, table)
    outcome = validate(load_raw(stores.warehouse, ingested), spec)
    store_outcome(stores.warehouse, ingested, spec, outcome)
    enforce(outcome, spec)
    return ValidationDone(spec.dataset.name, table)


def bundle_stage(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    outputs: list[StepOutput],
    subfolder_prefix: str | None = None,
    stopped: str | None = None,
) -> BundleResult:
    """Write the release bundle (see :mod:`dpcore.bundle`).

    Parameters
    ----------
    subfolder_prefix : str, optional
        Operator runs write ``<release_id>/<prefix>-<public ref of their first charge>``.
    stopped : str, optional
        The public reason a release stopped early (the rejected-fraction gate).
    """
    stores = open_stores(settings)
    summary = owner_summary(stores.warehouse, ingested, spec)
    return write_bundle(
        settings.bundles, spec, stores.ledger, ingested.ingest_id, summary, outputs, subfolder_prefix,
        owner_key=settings.owner_secret(), stopped=stopped,
    )
