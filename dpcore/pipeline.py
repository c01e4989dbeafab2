"""The pipeline's stages as plain functions (the Prefect tasks wrap these).

Each stage takes the spec and the resolved :class:`~dpcore.settings.Settings`,
opens short-lived handles on the warehouse and ledger, and returns small,
non-private values (hashes, table names, counts meant for the data owner) or
the :class:`~dpcore.bundle.StepOutput` of a private step. The private steps
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
from .validation import enforce, latest_passing_summary, store_outcome, validate


def ingest_stage(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Store the input in ``raw`` and register the dataset's budget in the ledger."""
    stores = open_stores(settings)
    result = ingest(spec, stores.warehouse, settings.data)
    stores.ledger.ensure_budget(
        spec.dataset.name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact), spec.budget.neighbour
    )
    return result


def validate_stage(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> dict[str, Any]:
    """Validate the raw table against the spec; store validated/quarantine/results.

    An input already validated under the same validation hash (dataset, schema,
    validation settings) with a passing result is not validated again.
    Returns the validation summary (counts, rules, columns, row numbers only).

    Raises
    ------
    ValidationFailed
        A table-level rule failed or too many rows were rejected; the message
        carries no cell values.
    """
    stores = open_stores(settings)
    cached = latest_passing_summary(stores.warehouse, ingested, spec)
    if cached is not None:
        return cached
    outcome = validate(load_raw(stores.warehouse, ingested), spec)
    store_outcome(stores.warehouse, ingested, spec, outcome)
    enforce(outcome, spec)
    return outcome.summary()


def bundle_stage(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    validation_summary: dict[str, Any] | None,
    outputs: list[StepOutput],
    subfolder: str | None = None,
) -> BundleResult:
    """Write the release bundle (see :mod:`dpcore.bundle`)."""
    stores = open_stores(settings)
    return write_bundle(
        settings.bundles, spec, stores.ledger, ingested.content_hash, validation_summary, outputs, subfolder
    )
