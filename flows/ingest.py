"""Stage flow: ingest the spec's input into the warehouse's ``raw`` schema."""
from __future__ import annotations

from prefect import flow

from tasks.common import resolve
from tasks.stages import ingest_task

from .params import DEMO_SPEC, ReleaseId, SpecPath


@flow(name="ingest", log_prints=False, persist_result=False)
def ingest_flow(spec_path: SpecPath = DEMO_SPEC, release_id: ReleaseId = None) -> dict[str, str]:
    """Store the release's input in ``raw`` (once per distinct content); returns its public ids only.

    The ingest id is fresh on every run, also for an input stored before (issue 28).

    Args:
        spec_path: Path to the release spec YAML.
        release_id: Overrides the spec's release id.
    """
    spec, settings = resolve(spec_path, release_id)
    res = ingest_task(spec, settings)
    return {"dataset": res.dataset, "ingest_id": res.ingest_id}
