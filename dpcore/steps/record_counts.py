"""Private step ``record_counts``: noisy numbers of accepted and quarantined rows."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..bundle import StepOutput
from ..ingest import IngestResult
from ..mechanisms.counts import PartitionCounts
from ..settings import Settings
from ..spec import ReleaseSpec
from .common import charge_request, noise_source, open_stores, quarantine_table, validated_table


def record_counts_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Release noisy counts of accepted and quarantined rows (charged once per key).

    The true counts are read inside the mechanism call and never returned.
    Cost: ``steps.record_counts.epsilon`` (pure DP, add/remove), see
    :class:`~dpcore.mechanisms.counts.PartitionCounts`.
    """
    cfg = spec.steps.record_counts
    mech = PartitionCounts(cfg.epsilon)
    stores = open_stores(settings)
    noise = noise_source()
    req = charge_request(
        spec, ingested, "record_counts", mech, mech.privacy_map(1), {"epsilon": cfg.epsilon}, noise, flow_run_id
    )

    def compute() -> dict[str, Any]:
        wh = stores.warehouse
        (n_valid,) = wh.query(f"SELECT count(*) FROM {validated_table(spec, ingested)}")[0]
        (n_quar,) = wh.query(f"SELECT count(DISTINCT _row) FROM {quarantine_table(spec, ingested)}")[0]
        return mech.release({"accepted_rows": int(n_valid), "quarantined_rows": int(n_quar)}, noise)

    released = stores.ledger.release_once(req, compute)
    table = pd.DataFrame({"cell": list(released.payload), "noisy_count": list(released.payload.values())})
    md = (
        "## Record counts (differentially private)\n\n"
        f"Geometric mechanism, epsilon = {cfg.epsilon:g}, add/remove-one neighbours.\n\n"
        "| cell | noisy count |\n|---|---|\n"
        + "\n".join(f"| {k} | {v} |" for k, v in released.payload.items())
    )
    return StepOutput("record_counts", {"counts": table}, md, keys=[released.key])
