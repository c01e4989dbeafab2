"""Operator flow: publish hierarchical count-of-counts histograms (seed 004 part 2)."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from prefect import flow
from pydantic import Field

from dpcore.steps.coco import coco_payload_summary
from dpcore.spec import with_step
from tasks.common import resolve
from tasks.stages import bundle_task, coco_task, ingest_task, validate_task

from .params import DEMO_SPEC, ReleaseId, SpecPath

Method = Literal["naive", "hg_l1", "hg_l2", "hc_l1", "hc_l2", "bottom_up_hg", "bottom_up_hc", "top_down_hg", "top_down_hc"]


@flow(name="coco_publish", log_prints=False)
def coco_publish(
    epsilon_per_level: Annotated[float, Field(gt=0, le=10)] = 0.5,
    max_group_size: Annotated[int, Field(ge=1, le=1_000_000)] = 730,
    method: Method = "top_down_hc",
    spec_path: SpecPath = DEMO_SPEC,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Publish count-of-counts histograms for every node of the spec's hierarchy.

    The groups file, levels and group column come from the spec's steps.coco;
    this form sets the privacy and method parameters. One ledger charge per
    measured level; the same parameters and release id return the stored release.

    Args:
        epsilon_per_level: Epsilon of each level of the hierarchy (> 0).
        max_group_size: Public maximum group size K; larger groups are counted as K.
        method: top_down_* are consistent down the tree; bottom_up_* measure the leaves only; the others are per node.
        spec_path: Path to the release spec YAML.
        release_id: Overrides the spec's release id.
    """
    spec, settings = resolve(spec_path, release_id)
    section = spec.steps.coco.model_copy(
        update={"enabled": True, "epsilon_per_level": epsilon_per_level, "max_group_size": max_group_size, "method": method}
    )
    spec = with_step(spec, "coco", section)
    ingested = ingest_task(spec, settings)
    summary = validate_task(spec, settings, ingested)
    out = coco_task(spec, settings, ingested)
    bundle = bundle_task(spec, settings, ingested, summary, [out], subfolder=f"coco-{out.keys[0][:12]}")
    return {"bundle": str(bundle.path), **coco_payload_summary(out)}
