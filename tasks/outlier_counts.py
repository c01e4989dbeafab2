"""Tasks of the outlier-counts step: plan and release in the flow process; per-subspace utilities mapped."""
from __future__ import annotations

from prefect import get_run_logger

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.outlier_counts import (
    OutlierCountsPlan,
    plan_outlier_counts,
    release_outlier_counts,
    selection_stored,
    subspace_utility,
)

from .common import NOISE_RETRIES, flow_run_id, private_task


@private_task(name="outlier-counts-plan")
def outlier_counts_plan_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> OutlierCountsPlan:
    """Validate parameters and aggregate each candidate subspace into distinct points in the warehouse (no charge)."""
    plan = plan_outlier_counts(spec, settings, ingested)
    get_run_logger().info("outlier counts: %d candidate subspaces", len(plan.candidates))
    return plan


@private_task(name="outlier-counts-stored")
def outlier_counts_stored_task(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, plan: OutlierCountsPlan
) -> bool:
    """Whether the selection was already released (a re-run needs no utilities)."""
    return selection_stored(spec, settings, ingested, plan)


@private_task(name="subspace-utility", worker_safe=True)
def subspace_utility_task(plan: OutlierCountsPlan, subspace: tuple[int, ...]) -> float:
    """One candidate's outlier count over GS_up from its distinct points (exact, internal); runs on a Dask worker
    when configured."""
    return subspace_utility(plan, subspace)


@private_task(name="outlier-counts", **NOISE_RETRIES)
def outlier_counts_release_task(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, plan: OutlierCountsPlan,
    utilities: list[float] | None,
) -> StepOutput:
    """Private step: the top-h selection, then a noisy outlier count in each selected subspace."""
    return release_outlier_counts(spec, settings, ingested, plan, utilities, flow_run_id())
