"""Task of the owner-only ``rules`` step: everything it finds stays in ``internal`` and the bundle's ``owner/``."""
from __future__ import annotations

from prefect import get_run_logger

from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.rules import RulesDone, mine_rules

from .common import chunk_mapper, private_task


@private_task(name="outlier-rules")
def rules_task(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, templates: list[str] | None = None,
    max_depth: int | None = None, max_rules: int | None = None,
) -> RulesDone:
    """Mine unit-respecting rules for the detector's outliers; returns template names only (no rule, no count)."""
    done = mine_rules(spec, settings, ingested, templates, max_depth, max_rules, mapper=chunk_mapper())
    get_run_logger().info("outlier rules mined for templates %s (data owner only: internal.outlier_rules)",
                          ", ".join(done.templates))
    return done
