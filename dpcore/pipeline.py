"""The pipeline's stages as plain functions (the Prefect tasks wrap these).

Each stage takes the spec and the resolved :class:`~dpcore.settings.Settings`,
opens short-lived handles on the warehouse and ledger, and returns small,
non-private values (hashes, table names, counts meant for the data owner) or
the :class:`~dpcore.bundle.StepOutput` of a private step.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .budget import PrivacyCost
from .bundle import BundleResult, StepOutput, write_bundle
from .ingest import IngestResult, ingest, load_raw
from .ledger import ChargeRequest, PrivacyLedger
from .mechanisms.counts import PartitionCounts
from .noise import NoiseSource
from .settings import Settings
from .spec import ReleaseSpec
from .validation import enforce, store_outcome, validate
from .warehouse import Warehouse


@dataclass(frozen=True)
class Stores:
    """Warehouse and ledger handles for one settings object."""

    warehouse: Warehouse
    ledger: PrivacyLedger


def open_stores(settings: Settings) -> Stores:
    """Open (creating if needed) the warehouse file and its ledger tables."""
    wh = Warehouse(settings.warehouse)
    return Stores(wh, PrivacyLedger(wh))


def noise_source() -> NoiseSource:
    """The release noise source: OS CSPRNG, unless ``DPR_TEST_NOISE_SEED`` is set.

    A seeded source is for tests only: every charge made with it is recorded
    ``publishable = false`` and the bundle says NOT FOR PUBLICATION.
    """
    seed = os.environ.get("DPR_TEST_NOISE_SEED")
    return NoiseSource(seed=int(seed)) if seed else NoiseSource()


def ingest_stage(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Store the input in ``raw`` and register the dataset's budget in the ledger."""
    stores = open_stores(settings)
    result = ingest(spec, stores.warehouse, settings.data)
    stores.ledger.ensure_budget(spec.dataset.name, PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact))
    return result


def validate_stage(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> dict[str, Any]:
    """Validate the raw table against the spec; store validated/quarantine/results.

    Returns the validation summary (counts, rules, columns, row numbers only).

    Raises
    ------
    ValidationFailed
        A table-level rule failed or too many rows were rejected; the message
        carries no cell values.
    """
    stores = open_stores(settings)
    outcome = validate(load_raw(stores.warehouse, ingested), spec)
    store_outcome(stores.warehouse, ingested, spec, outcome)
    enforce(outcome, spec)
    return outcome.summary()


def validated_table(spec: ReleaseSpec, ingested: IngestResult) -> str:
    """Qualified name of the validated table of an ingested input."""
    return f'validated."{ingested.table}"'


def quarantine_table(spec: ReleaseSpec, ingested: IngestResult) -> str:
    """Qualified name of the quarantine table of an ingested input."""
    return f'quarantine."{ingested.table}"'


def record_counts_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Release noisy counts of accepted and quarantined rows (charged once per key).

    The true counts are read from the warehouse inside the mechanism call and
    never returned. Cost: ``steps.record_counts.epsilon`` (pure DP, add/remove),
    see :class:`~dpcore.mechanisms.counts.PartitionCounts`.
    """
    cfg = spec.steps.record_counts
    mech = PartitionCounts(cfg.epsilon)
    stores = open_stores(settings)
    noise = noise_source()
    req = ChargeRequest(
        dataset=spec.dataset.name,
        dataset_hash=ingested.content_hash,
        release_id=spec.release_id,
        step="record_counts",
        mechanism=mech.name,
        cost=mech.privacy_map(1),
        notion=mech.notion,
        params={"epsilon": cfg.epsilon, "spec": spec.content_hash()},
        neighbour=mech.neighbour,
        publishable=noise.publishable,
        flow_run_id=flow_run_id,
    )

    def compute() -> dict[str, Any]:
        wh = stores.warehouse
        (n_valid,) = wh.query(f"SELECT count(*) FROM {validated_table(spec, ingested)}")[0]
        (n_quar,) = wh.query(f"SELECT count(DISTINCT _row) FROM {quarantine_table(spec, ingested)}")[0]
        return mech.release({"accepted_rows": int(n_valid), "quarantined_rows": int(n_quar)}, noise)

    released = stores.ledger.release_once(req, compute)
    table = pd.DataFrame({"cell": list(released.payload), "noisy_count": list(released.payload.values())})
    md = (
        "## Record counts (differentially private)\n\n"
        f"Geometric mechanism, epsilon = {cfg.epsilon:g}, add/remove-one neighbours.\n\n"
        "| cell | noisy count |\n|---|---|\n"
        + "\n".join(f"| {k} | {v} |" for k, v in released.payload.items())
    )
    return StepOutput("record_counts", {"counts": table}, md)


def bundle_stage(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    validation_summary: dict[str, Any] | None,
    outputs: list[StepOutput],
) -> BundleResult:
    """Write the release bundle (see :mod:`dpcore.bundle`)."""
    stores = open_stores(settings)
    return write_bundle(settings.bundles, spec, stores.ledger, ingested.content_hash, validation_summary, outputs)
