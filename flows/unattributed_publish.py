"""Operator flow: publish the sorted group sizes (an unattributed histogram; seed 004, last part)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, get_args

from prefect import flow
from pydantic import Field

from dpcore.release.spec import UnattributedMethod, with_step
from dpcore.steps.unattributed import unattributed_payload_summary
from tasks.release_run import run_once
from tasks.stages import bundle_task, cost_preflight_task, ingest_task, validate_task
from tasks.unattributed import unattributed_task

from .operator_request import operator_request
from .params import ReleaseId, SpecPath
from .runner import task_runner_from_env

Method = Literal[get_args(UnattributedMethod)]  # type: ignore[valid-type]


@flow(name="unattributed_publish", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def unattributed_publish(
    epsilon: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    method: Optional[Method] = None,
    metric: Optional[Literal["l1", "l2"]] = None,
    max_group_size: Annotated[Optional[int], Field(strict=True, ge=1, le=10_000_000)] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Publish how large the groups of the spec's group column are, largest first, labels dropped.

    The group column comes from the spec's steps.unattributed (its public domain is the list of groups);
    this form sets the privacy and method parameters; each left empty takes the spec's steps.unattributed
    value. epsilon and max_group_size must be given or set there, else the run is refused before any
    charge; the values used are logged. One ledger charge of epsilon; the same parameters and release id
    return the stored release.

    Args:
        epsilon: Epsilon of the release (pure epsilon-DP, add or remove one row). Empty = steps.unattributed.epsilon.
        method: auto = chosen from epsilon, the number of groups, the size bound and the metric only; or one
            of the study's methods (naive, hg_l2, hg_l1, hc_l2, hc_l1, pfl, hmm_forward_backward, hmm_viterbi,
            dawa_*, ahp_*, hbtree_* on H, H_g or H_c). Empty = steps.unattributed.method (default auto).
        metric: The error metric auto minimises (l1 or l2). Empty = steps.unattributed.metric (default l2).
        max_group_size: Public maximum group size K; larger groups are counted as K.
            Empty = steps.unattributed.max_group_size.
        spec_path: Path to the release spec YAML (required; a deployment sets it).
        release_id: Overrides the spec's release id.
    """
    spec, settings, v = operator_request("unattributed_publish", spec_path, release_id, {
        "epsilon": epsilon, "method": method, "metric": metric, "max_group_size": max_group_size})
    section = spec.steps.unattributed.model_copy(
        update={"enabled": True, "epsilon": v["epsilon"], "method": v["method"], "metric": v["metric"],
                "max_group_size": v["max_group_size"]}
    )
    spec = with_step(spec, "unattributed", section)
    return run_once(spec, settings, "unattributed_publish", lambda: _publish(spec, settings), steps=["unattributed"])


def _publish(spec, settings) -> dict[str, Any]:
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings, ["unattributed"])  # whole plan reserved
    out = unattributed_task(spec, settings, ingested)
    bundle = bundle_task(spec, settings, ingested, [out], subfolder_prefix="unattributed", run_cost=run_cost)
    return {"bundle": str(bundle.path), **unattributed_payload_summary(out)}
