"""Operator flow: ask whether records are (beta, r)-anomalies, privately (seed 001)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from prefect import flow
from pydantic import Field

from dpcore.release.spec import AiqSpec, with_step
from tasks.release_run import run_once
from tasks.stages import aiq_task, bundle_task, cost_preflight_task, ingest_task, preflight_task, validate_task

from .operator_request import operator_request
from .params import ReleaseId, SpecPath


@flow(name="aiq_query", log_prints=False, persist_result=False)
def aiq_query(
    record_ids: Annotated[list[str], Field(min_length=1, max_length=10_000)],
    epsilon: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    beta: Annotated[Optional[int], Field(strict=True, ge=1, le=1_000_000)] = None,
    r: Annotated[Optional[float], Field(strict=True, ge=0, le=10)] = None,
    k: Annotated[Optional[int], Field(strict=True, ge=1, le=1_000_000)] = None,
    mechanism: Optional[Literal["sp", "dp"]] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> list[dict[str, Any]]:
    """Answer "is record i a (beta, r)-anomaly?" for each id, with one ledger charge.

    Asking again with the same parameters and release id returns the stored
    answers and spends nothing. A parameter left empty takes the spec's steps.aiq value;
    epsilon, beta, r (and k for "sp") must be given or set in the spec, else the run is
    refused before any charge. The values used are logged.

    Args:
        record_ids: Record ids to query; each must be on the spec's public roster (dataset.roster). A roster id
            whose record is absent or quarantined is charged and answered too (from a data-independent input).
        epsilon: Epsilon per query (> 0); the batch costs len(record_ids) x epsilon. Empty = steps.aiq.epsilon.
        beta: A record is an anomaly when at most beta records lie within distance r of it. Empty = steps.aiq.beta.
        r: Radius over the numeric attributes scaled to [0, 1] by their public bounds. Empty = steps.aiq.r.
        k: Sensitive-privacy parameter (mechanism "sp"): records that become anomalies within k changes are not
            protected. Empty = steps.aiq.k.
        mechanism: "sp" = sensitively private (lambda_k, almost always right for real anomalies); "dp" = epsilon-DP
            (Delta_G). Empty = steps.aiq.mechanism (default sp).
        spec_path: Path to the release spec YAML (required; a deployment sets it).
        release_id: Overrides the spec's release id.
    """
    spec, settings, v = operator_request(
        "aiq_query", spec_path, release_id, {"epsilon": epsilon, "beta": beta, "r": r, "k": k, "mechanism": mechanism})
    base = spec.steps.aiq
    spec = with_step(
        spec, "aiq",
        AiqSpec(enabled=True, mechanism=v["mechanism"], epsilon=v["epsilon"], beta=v["beta"], r=v["r"], k=v["k"],
                attributes=base.attributes, record_ids=list(record_ids)),
    )
    preflight_task(spec, ["aiq"])  # public checks (roster, parameters) before the input is even read
    return run_once(spec, settings, "aiq_query", lambda: _answer(spec, settings), steps=["aiq"])


def _answer(spec, settings) -> list[dict[str, Any]]:
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings, ["aiq"])  # whole plan reserved; a failing input charged nothing
    out = aiq_task(spec, settings, ingested)
    bundle_task(spec, settings, ingested, [out], subfolder_prefix="aiq", run_cost=run_cost)
    return out.tables["answers"].to_dict("records")
