"""Stage flow: ingest (if needed) and validate against the spec with great-expectations."""
from __future__ import annotations

from prefect import flow

from tasks.common import resolve
from tasks.stages import ingest_task, validate_task

from .params import DEMO_SPEC, ReleaseId, SpecPath


@flow(name="validate", log_prints=False, persist_result=False)
def validate_flow(spec_path: SpecPath = DEMO_SPEC, release_id: ReleaseId = None) -> dict[str, str]:
    """Validate the input; rejected rows go to quarantine, the public rule set to the artifacts.

    Returns public ids only: no count and no verdict (the data owner reads the
    exact result in the warehouse, ``internal.validation_results``).

    Args:
        spec_path: Path to the release spec YAML.
        release_id: Overrides the spec's release id.
    """
    spec, settings = resolve(spec_path, release_id)
    ingested = ingest_task(spec, settings)
    done = validate_task(spec, settings, ingested)
    return {"dataset": done.dataset, "ingest_id": ingested.ingest_id}
