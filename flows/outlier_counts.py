"""Operator flow: top-h outlier subspaces and their noisy outlier counts (seed 002)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from prefect import flow, unmapped
from prefect.futures import as_completed
from pydantic import Field

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, outlier_counts_section, with_step
from tasks.common import Progress
from tasks.release_run import run_once
from tasks.outlier_counts import (
    outlier_counts_plan_task,
    outlier_counts_release_task,
    outlier_counts_stored_task,
    subspace_utility_task,
)
from tasks.stages import bundle_task, cost_preflight_task, ingest_task, validate_task

from .operator_request import operator_request
from .params import ReleaseId, SpecPath
from .runner import task_runner_from_env


def run_outlier_counts(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Plan, map the candidates' utilities (one task per subspace), then charge and release.

    Only the utility tasks are mapped, so only they reach the flow's task runner
    (a Dask cluster when configured); they receive the plan (each candidate
    subspace's distinct bound-scaled points with their multiplicities), the
    selection parameters and one subspace. A re-run whose selection
    is stored maps nothing. A progress artifact counts the subspaces done.
    """
    plan = outlier_counts_plan_task(spec, settings, ingested)
    utilities = None
    if not outlier_counts_stored_task(spec, settings, ingested, plan):
        progress = Progress(f"outlier-subspaces-{spec.dataset.name}", "candidate subspaces counted",
                            len(plan.candidates))
        futures = subspace_utility_task.map(plan=unmapped(plan), subspace=plan.candidates)
        for _ in as_completed(list(futures)):
            progress()
        utilities = [f.result() for f in futures]  # re-raises a failed candidate instead of skipping it
    return outlier_counts_release_task(spec, settings, ingested, plan, utilities)


@flow(name="outlier_counts", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def outlier_counts(
    k: Annotated[Optional[int], Field(strict=True, ge=1, le=10_000)] = None,
    r: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    h: Annotated[Optional[int], Field(strict=True, ge=1, le=100)] = None,
    subspace_dim: Annotated[Optional[int], Field(strict=True, ge=1, le=10)] = None,
    epsilon_select: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    epsilon_count: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    delta_count: Annotated[Optional[float], Field(strict=True, gt=0, lt=1)] = None,
    method: Optional[Literal["smooth", "global", "global_laplace", "smooth_student_t", "smooth_lln", "smooth_arsinh", "auto"]] = None,
    epsilon_total: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    attributes: Optional[list[str]] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> list[dict[str, Any]]:
    """Which h subspaces hold the most distance-based outliers, and how many each holds.

    Every parameter left empty takes the spec's ``steps.outlier_counts`` value. k, r, h, the budget
    (epsilon_total, or epsilon_select and epsilon_count) and delta_count (unless the method spends no
    delta) must be given or set there, else the run is refused before any charge; the values used are
    logged. Costs epsilon_select once plus (epsilon_count, delta_count) per selected subspace
    (delta 0 for global_laplace and smooth_student_t), or epsilon_total in all when that is the budget form.
    Neighbouring datasets differ in one replaced record (the source paper's convention).

    Args:
        k: A record is an outlier when it has fewer than k neighbours within r.
        r: Radius in dist_S units (attributes scaled to [0, 1] by their public bounds, divided by sqrt(|S|)).
        h: Number of subspaces to select (at most the number of candidates).
        subspace_dim: Candidates are all subspaces of this many attributes.
        epsilon_select: Epsilon of the whole top-h selection (exponential mechanism); give it with epsilon_count.
        epsilon_count: Epsilon of each released count; below 1 for the Gaussian methods smooth/global
            (Theorems 1-2 need it).
        delta_count: Delta of each released count, in (0, 1); global_laplace and smooth_student_t spend none.
        method: smooth = smooth-sensitivity Gaussian; global = global-sensitivity Gaussian; global_laplace =
            discrete Laplace with the public global sensitivity (pure epsilon-DP); smooth_student_t = smooth
            sensitivity with Student's T noise (Bun & Steinke 2019; pure epsilon-DP); smooth_lln / smooth_arsinh =
            smooth sensitivity with Bun & Steinke's concentrated-DP noise (charged epsilon_count and delta_count
            through the zCDP conversion); auto = the smallest published
            95% interval for these public parameters.
        epsilon_total: One epsilon for the whole step, split between the selection and the counts by the step's
            public rule; excludes epsilon_select and epsilon_count.
        attributes: Numeric attributes to use (default: the spec's).
        spec_path: Path to the release spec YAML (required; a deployment sets it).
        release_id: Overrides the spec's release id.
    """
    spec, settings, v = operator_request("outlier_counts", spec_path, release_id, {
        "k": k, "r": r, "h": h, "subspace_dim": subspace_dim, "delta_count": delta_count, "method": method,
        "attributes": attributes or None, "epsilon_total": epsilon_total, "epsilon_select": epsilon_select,
        "epsilon_count": epsilon_count,
    })
    spec = with_step(spec, "outlier_counts", outlier_counts_section(spec, {u.name: u.value for u in v.used}))
    return run_once(spec, settings, "outlier_counts", lambda: _count(spec, settings), steps=["outlier_counts"])


def _count(spec, settings) -> list[dict[str, Any]]:
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings, ["outlier_counts"])  # whole plan reserved
    out = run_outlier_counts(spec, settings, ingested)
    bundle_task(spec, settings, ingested, [out], subfolder_prefix="outlier-counts", run_cost=run_cost)
    return out.tables["counts"].to_dict("records")
