"""Operator flow: unit-respecting rules that explain the detector's outliers (seed 004), for the data owner only."""
from __future__ import annotations

from typing import Annotated, Any, Optional

from prefect import flow
from pydantic import Field

from dpcore.release.spec import with_step
from tasks.rules import rules_task
from tasks.stages import bundle_task, ingest_task, validate_task

from .detect import run_detection
from .operator_request import operator_request
from .params import ReleaseId, SpecPath
from .runner import task_runner_from_env


@flow(name="explain_rules", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def explain_rules(
    template: Optional[str] = None,
    max_depth: Annotated[Optional[int], Field(strict=True, ge=1, le=3)] = None,
    max_rules: Annotated[Optional[int], Field(strict=True, ge=1, le=100)] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Find the rules that best explain the detector's outliers, written for the data owner only.

    Charges nothing and releases nothing: the rules (thresholds, precision, recall, support) are exact
    functions of the private data and of the non-private detector, so they go to the warehouse
    (internal.outlier_rules) and to an owner-only folder of the bundle (owner/outlier_rules.csv), never to
    Prefect's logs, artifacts or this flow's result.

    Args:
        template: Detector template whose outliers to explain (default: steps.rules.templates, else every
            template of steps.detect).
        max_depth: Depth of the operation trees: 1 = single attributes, 2 = one operation on two attributes.
            Empty = steps.rules.max_depth (default 2).
        max_rules: Rules kept per template, best F1 first. Empty = steps.rules.max_rules (default 10).
        spec_path: Path to the release spec YAML (units in schema.numeric.<name>.unit; required, a deployment
            sets it).
        release_id: Overrides the spec's release id.
    """
    spec, settings, v = operator_request("explain_rules", spec_path, release_id, {
        "template": template, "max_depth": max_depth, "max_rules": max_rules})
    section = spec.steps.rules.model_copy(update={
        "enabled": True, "templates": [template] if template else spec.steps.rules.templates,
        "max_depth": v["max_depth"], "max_rules": v["max_rules"],
    })
    spec = with_step(spec, "rules", section)
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_detection(spec, settings, ingested)
    done = rules_task(spec, settings, ingested)
    bundle = bundle_task(spec, settings, ingested, [], subfolder_prefix="rules", rules=done)
    return {"templates": list(done.templates), "owner_file": str(bundle.path / "owner" / "outlier_rules.csv")}
