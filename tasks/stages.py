"""Tasks for the pipeline's stages: ingest, validate, record counts and their gate, bundle.

Every task here returns an opaque public handle or a released output, never a
count, a verdict or a data-derived hash (Prefect inspects task results and may
store them; DESIGN.md rules 6-7), and logs only public facts.
"""
from __future__ import annotations

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from dpcore.run import pipeline
from dpcore.publish.bundle import BundleResult, RunCost, StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.aiq import aiq_step
from dpcore.steps.rules import RulesDone
from dpcore.run.pipeline import stop_at_gate
from dpcore.steps.record_counts import record_counts_step
from dpcore.validation import ValidationDone, ValidationFailed, public_rule_set

from .common import NOISE_RETRIES, artifact_key, chunk_mapper, flow_run_id, private_task, validation_mapper


@private_task(name="preflight")
def preflight_task(spec: ReleaseSpec, steps: list[str] | None = None) -> None:
    """Public checks of the flow's steps (default: every enabled step) before the first charge (no data touched)."""
    pipeline.preflight(spec, steps)


@private_task(name="ingest")
def ingest_task(spec: ReleaseSpec, settings: Settings) -> IngestResult:
    """Store the input in the warehouse's ``raw`` schema and link it to its budget."""
    res = pipeline.ingest_stage(spec, settings)
    # no row count, no content hash, not even whether the input was seen before (rules 6-7): the id is a fresh
    # random nonce on every ingest (dpcore.ingest.raw.ingest), the raw table it resolved to is not named
    get_run_logger().info("ingested %s as input %s (a random ingest id)", res.dataset, res.ingest_id)
    return res


@private_task(name="release-blockers")
def release_blockers_task(spec: ReleaseSpec, settings: Settings) -> None:
    """Refuse, before ingest, a release that ``dpr plan`` would block (the same reasons and message as ``dpr run``).

    A run started by a deployment's worker does not pass through ``dpr run``; this is where every release
    meets :func:`dpcore.run.cost_plan.release_blockers` (issue 48). Nothing is read or charged.
    """
    pipeline.refuse_blocked_release(spec, settings)


@private_task(name="cost-preflight")
def cost_preflight_task(spec: ReleaseSpec, settings: Settings, steps: list[str] | None = None) -> RunCost:
    """Reserve the run's whole planned cost before its first charge, or refuse having charged nothing."""
    plan = pipeline.cost_preflight(spec, settings, steps, flow_run_id())
    get_run_logger().info(
        "budget reserved: this run charges %s of the %s that was left on dataset %s (%s neighbours); "
        "release %s holds %s in all",
        plan.new, plan.remaining, plan.dataset, plan.neighbour, plan.release_id, plan.total,
    )
    return RunCost(plan.total, plan.new)


@private_task(name="validate")
def validate_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> ValidationDone:
    """Validate with great-expectations; publish the public rule set as an artifact (not which rules broke)."""
    create_table_artifact(
        key=artifact_key("validation-rules", spec.dataset.name),
        table=public_rule_set(spec),
        description=(
            f"Rules every row of {spec.dataset.name} is checked against (from the spec, public). Which rules some "
            "rows broke, and how often, is private: the noisy record counts release the number of quarantined "
            "rows; the exact result is the data owner's (`dpr validation show --spec SPEC`, bundle owner/)."
        ),
    )
    done = pipeline.validate_stage(spec, settings, ingested, mapper=validation_mapper())
    get_run_logger().info("validation finished; rows breaking a rule are quarantined (exact result: data owner only)")
    return done


@private_task(name="record-counts", **NOISE_RETRIES)
def record_counts_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Private step: noisy input/accepted/quarantined row counts (one ledger charge per key)."""
    return record_counts_step(spec, settings, ingested, flow_run_id())


@private_task(name="rejected-fraction-gate")
def gate_task(spec: ReleaseSpec, counts: StepOutput, settings: Settings) -> str | None:
    """The rejected-fraction gate on the noisy counts (post-processing): None, or the public reason to stop.

    A stop gives back what the release reserved and never drew, in the transaction that records it.
    """
    return stop_at_gate(spec, settings, counts, flow_run_id())


def stop_release(reason: str) -> None:
    """Fail the run with the gate's public reason (noisy numbers only)."""
    raise ValidationFailed(reason)


@private_task(name="bundle")
def bundle_task(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    outputs: list[StepOutput],
    subfolder_prefix: str | None = None,
    stopped: str | None = None,
    rules: RulesDone | None = None,
    run_cost: RunCost | None = None,
) -> BundleResult:
    """Write the release bundle and attach its summary as artifacts (owner-only rules: files only)."""
    res = pipeline.bundle_stage(spec, settings, ingested, outputs, subfolder_prefix, stopped, rules, run_cost)
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
            for k in ("cap", "spent_by_this_release", "charged_by_this_run", "spent_total", "remaining")
        ],
        description=f"Privacy budget (epsilon, delta) under {b['neighbour']} neighbours",
    )
    get_run_logger().info(
        "bundle %s: this run charged %.6g epsilon, the release holds %.6g, %.6g left of %.6g",
        res.path, b["charged_by_this_run"]["epsilon"], b["spent_by_this_release"]["epsilon"],
        b["remaining"]["epsilon"], b["cap"]["epsilon"],
    )
    return res


@private_task(name="aiq", **NOISE_RETRIES)
def aiq_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Private step: (beta, r)-anomaly identification answers (one ledger charge per batch)."""
    return aiq_step(spec, settings, ingested, flow_run_id(), mapper=chunk_mapper())
