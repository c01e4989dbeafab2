"""Task of the unattributed step: one charge and the released sorted group sizes (flow process)."""
from __future__ import annotations

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.unattributed import unattributed_step

from .common import NOISE_RETRIES, flow_run_id, private_task


@private_task(name="unattributed", **NOISE_RETRIES)
def unattributed_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Private step: the sorted group sizes (ledger and warehouse, flow process).

    Retried once: the ledger returns the stored release of a charge already made. The work does not split:
    one SQL aggregate, then one vector of G numbers (at G = 10^6 seconds for most methods, about 30 s for pfl; the chain is sequential),
    so nothing is mapped.
    """
    return unattributed_step(spec, settings, ingested, flow_run_id())
