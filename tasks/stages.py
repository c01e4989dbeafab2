"""Tasks for the pipeline's stages: ingest, validate, record counts, bundle."""
from __future__ import annotations

from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from dpcore import pipeline
from dpcore.bundle import BundleResult, StepOutput
from dpcore.ingest import IngestResult
from dpcore.settings import Settings
from dpcore.spec import ReleaseSpec
from dpcore.steps.aiq import aiq_step
from dpcore.steps.record_counts import record_counts_step

from .common import NOISE_RETRIES, artifact_key, flow_run_id, private_task


@private_task(name="ingest")
def ingest_task(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Store the input in the warehouse's ``raw`` schema and register the budget."""
    res = pipeline.ingest_stage(spec, settings)
    get_run_logger().info(  # no row count: the true number of records is private (DESIGN.md rule 6)
        "ingested %s: content hash %s… (%s)",
        res.dataset, res.content_hash[:12], "already present" if res.reused else "new",
    )
    return res


@private_task(name="validate")
def validate_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> dict[str, Any]:
    """Validate with great-expectations; publish a rules/columns/counts artifact."""
    from dpcore.validation import ValidationFailed

    try:
        summary = pipeline.validate_stage(spec, settings, ingested)
    except ValidationFailed as exc:
        _validation_artifacts(spec, exc.outcome.summary())
        raise
    _validation_artifacts(spec, summary)
    # exact accepted/quarantined counts are private (record_counts releases them with noise):
    # they stay in the warehouse and the bundle's owner/ folder, never in logs
    get_run_logger().info(
        "validation passed: %s (exact counts for the data owner only: owner/validation_summary.json)",
        "some rows broke a rule and were quarantined" if summary["n_rejected"] else "no row was quarantined",
    )
    return summary


def _validation_artifacts(spec: ReleaseSpec, summary: dict[str, Any]) -> None:
    # Rules and columns only. Per-rule counts would give the true number of quarantined rows
    # (which record_counts releases with noise) and row numbers say which records failed: both stay
    # in the warehouse and in the bundle's owner/validation_summary.json (data owner only).
    rows = [
        {"rule": r["rule"], "column": r["column"] or "", "broken_by": level}
        for level, key in (("the table", "table_failures"), ("some rows", "row_failures"))
        for r in summary.get(key, [])
    ]
    create_table_artifact(
        key=artifact_key("validation", spec.dataset.name),
        table=rows or [{"rule": "all rules passed", "column": "", "broken_by": ""}],
        description=(
            f"Validation of {spec.dataset.name}: rules and columns that were broken (no values, no counts; "
            "exact counts and row numbers for the data owner in owner/validation_summary.json)"
        ),
    )


@private_task(name="record-counts", **NOISE_RETRIES)
def record_counts_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Private step: noisy accepted/quarantined row counts (one ledger charge per key)."""
    return record_counts_step(spec, settings, ingested, flow_run_id())


@private_task(name="bundle")
def bundle_task(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    validation_summary: dict[str, Any] | None,
    outputs: list[StepOutput],
    subfolder: str | None = None,
) -> BundleResult:
    """Write the release bundle and attach its summary as artifacts."""
    res = pipeline.bundle_stage(spec, settings, ingested, validation_summary, outputs, subfolder)
    m = res.manifest
    b = m["budget"]
    create_markdown_artifact(
        key=artifact_key("release", spec.dataset.name),
        markdown=(res.path / "report.md").read_text(),
        description=f"Release {spec.release_id}: bundle at {res.path}",
    )
    create_table_artifact(
        key=artifact_key("budget", spec.dataset.name),
        table=[
            {"what": k.replace("_", " "), "epsilon": float(b[k]["epsilon"]), "delta": float(b[k]["delta"])}
            for k in ("cap", "spent_by_this_release", "spent_total", "remaining")
        ],
        description=f"Privacy budget (epsilon, delta) under {b['neighbour']} neighbours",
    )
    get_run_logger().info(
        "bundle %s: spent %.6g epsilon in this release, %.6g left of %.6g",
        res.path, b["spent_by_this_release"]["epsilon"], b["remaining"]["epsilon"], b["cap"]["epsilon"],
    )
    return res


@private_task(name="aiq", **NOISE_RETRIES)
def aiq_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Private step: (beta, r)-anomaly identification answers (one ledger charge per batch)."""
    return aiq_step(spec, settings, ingested, flow_run_id())
