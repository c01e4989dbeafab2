"""Operator flow: publish hierarchical count-of-counts histograms (seed 004 part 2)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from prefect import flow, unmapped
from prefect.futures import as_completed
from pydantic import Field

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, with_step
from dpcore.steps.coco import coco_payload_summary
from tasks.coco import coco_finish_task, coco_measure_task, coco_nodes_task
from tasks.common import Progress
from tasks.release_run import run_once
from tasks.stages import bundle_task, cost_preflight_task, ingest_task, validate_task

from .operator_request import operator_request
from .params import ReleaseId, SpecPath
from .runner import task_runner_from_env

Method = Literal["naive", "hg_l1", "hg_l2", "hc_l1", "hc_l2", "bottom_up_hg", "bottom_up_hc", "top_down_hg", "top_down_hc", "consistent_hc",
                 "consistent_hc_leaf"]

COCO_CHUNK_NODES = 256
"""At most this many nodes of one level per mapped estimate task (the demo: 3 tasks, one per level;
a 3,000-leaf hierarchy: 12 leaf chunks)."""


def run_coco(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Measure (one charge per level), map the per-node estimates in chunks, then assemble and store.

    Measuring and finishing run in the flow process (ledger, warehouse); only
    the node-estimate tasks are mapped, so only they reach the flow's task
    runner (a Dask cluster when configured, :mod:`flows.runner`), and they
    receive the public mechanism parameters and a chunk of noisy cells with
    the nodes' public group counts. A progress artifact counts the chunks done.
    """
    measured = coco_measure_task(spec, settings, ingested)
    chunks = measured.node_chunks(COCO_CHUNK_NODES)
    progress = Progress(f"coco-nodes-{spec.dataset.name}", "coco node chunks estimated", len(chunks))
    futures = coco_nodes_task.map(mechanism=unmapped(measured.mechanism), chunk=chunks)
    for _ in as_completed(list(futures)):
        progress()
    estimates = {}
    for chunk, fut in zip(chunks, futures):
        estimates.update(zip(chunk.nodes, fut.result()))  # re-raises a failed chunk
    return coco_finish_task(spec, settings, measured, estimates)


@flow(name="coco_publish", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def coco_publish(
    epsilon_per_level: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    max_group_size: Annotated[Optional[int], Field(strict=True, ge=1, le=1_000_000)] = None,
    method: Optional[Method] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Publish count-of-counts histograms for every node of the spec's hierarchy.

    The groups file, levels and group column come from the spec's steps.coco;
    this form sets the privacy and method parameters; each left empty takes the spec's
    steps.coco value. epsilon_per_level and max_group_size must be given or set there,
    else the run is refused before any charge; the values used are logged. One ledger
    charge per measured level; the same parameters and release id return the stored release.

    Args:
        epsilon_per_level: Epsilon of each level of the hierarchy (> 0). Empty = steps.coco.epsilon_per_level
            (with epsilon_total when it is auto).
        max_group_size: Public maximum group size K; larger groups are counted as K. Empty = steps.coco.max_group_size.
        method: top_down_* are consistent down the tree; bottom_up_* measure the leaves only; the others are per node.
            Empty = steps.coco.method (default top_down_hc).
        spec_path: Path to the release spec YAML (required; a deployment sets it).
        release_id: Overrides the spec's release id.
    """
    spec, settings, v = operator_request("coco_publish", spec_path, release_id, {
        "epsilon_per_level": epsilon_per_level, "max_group_size": max_group_size, "method": method})
    update = {"enabled": True, "epsilon_per_level": v["epsilon_per_level"], "max_group_size": v["max_group_size"],
              "method": v["method"]}
    if v.source("epsilon_per_level") == "request":  # one epsilon per level replaces the spec's auto split
        update["epsilon_total"] = None
    section = spec.steps.coco.model_copy(update=update)
    spec = with_step(spec, "coco", section)
    return run_once(spec, settings, "coco_publish", lambda: _publish(spec, settings), steps=["coco"])


def _publish(spec, settings) -> dict[str, Any]:
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings, ["coco"])  # whole plan reserved; a failing input charged nothing
    out = run_coco(spec, settings, ingested)
    bundle = bundle_task(spec, settings, ingested, [out], subfolder_prefix="coco", run_cost=run_cost)
    return {"bundle": str(bundle.path), **coco_payload_summary(out)}
