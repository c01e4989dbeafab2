"""Tasks of the PCOR step: plan, reserve and store in the flow process; searches mapped to any worker."""
from __future__ import annotations

from typing import Any

from prefect import get_run_logger

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.pcor import PcorJob, PcorPlan, compute_explanation, plan_pcor, reserve_pcor, store_pcor

from .common import flow_run_id, private_task


@private_task(name="pcor-plan")
def pcor_plan_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> PcorPlan:
    """Validate parameters, build the per-cell index from warehouse aggregates, resolve the targets (no charge)."""
    plan = plan_pcor(spec, settings, ingested, flow_run_id())
    cfg = spec.steps.pcor  # public figures only: how many targets the detector chose is private
    get_run_logger().info("pcor: %d requested record(s) and up to %d chosen by the detector to explain",
                          len(dict.fromkeys(cfg.record_ids)), cfg.from_detector)
    return plan


@private_task(name="pcor-reserve")
def pcor_reserve_task(settings: Settings, plan: PcorPlan) -> PcorPlan:
    """Reuse stored explanations; reserve one charge per new one (ledger, flow process)."""
    plan = reserve_pcor(settings, plan)
    # no counts: how many answers were stored before depends on when an earlier run of the release stopped,
    # and their total on how many records the detector chose
    get_run_logger().info("pcor: charges drawn from the release's reservation; searching")
    return plan


@private_task(name="pcor-search", worker_safe=True)
def pcor_search_task(job: PcorJob, row: int) -> dict[str, Any]:
    """One PCOR search (sampler + exponential mechanism) on arrays only; no retries:
    its charge is already reserved, and a failed search is recorded as failed."""
    return compute_explanation(job, row)


@private_task(name="pcor-store")
def pcor_store_task(
    spec: ReleaseSpec, settings: Settings, plan: PcorPlan, results: dict[int, Any]
) -> StepOutput:
    """Store the releases (failed searches stay charged), internal diagnostics, bundle section."""
    return store_pcor(spec, settings, plan, results)
