"""Operator flow: explain one record by a private context (PCOR, seed 003)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from prefect import flow
from pydantic import Field

from dpcore.spec import with_step
from dpcore.steps.pcor import NoValidContextError
from tasks.common import resolve
from tasks.release_run import run_once
from tasks.stages import bundle_task, cost_preflight_task, ingest_task, preflight_task, validate_task

from .params import DEMO_SPEC, ReleaseId, SpecPath
from .pcor import run_pcor


@flow(name="explain_outlier", log_prints=False, persist_result=False)
def explain_outlier(
    record_id: Annotated[str, Field(min_length=1, max_length=200)],
    epsilon: Annotated[float, Field(strict=True, gt=0, le=10)] = 0.2,
    sampler: Literal["bfs", "dfs", "random_walk", "uniform", "direct"] = "bfs",
    n_samples: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 50,
    verifier: Literal["grubbs", "lof", "histogram"] = "grubbs",
    utility: Literal["population", "overlap"] = "population",
    start: Literal["auto", "cell", "full", "climb"] = "auto",
    final_share: Optional[Annotated[float, Field(strict=True, gt=0, lt=1)]] = 0.25,
    metric: Optional[str] = None,
    attributes: Optional[list[str]] = None,
    spec_path: SpecPath = DEMO_SPEC,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Release one context in which the record is an outlier, under output-constrained DP.

    Costs epsilon (OCDP) once per record and parameter set; re-running with the same
    release id returns the stored context. Verifier settings (Grubbs alpha, LOF k and
    threshold, histogram share) come from the spec's steps.pcor section.

    Args:
        record_id: Id of the record to explain; must be on the spec's public roster (dataset.roster). An absent
            or quarantined roster id is charged and gets the same no-valid-context outcome as a record without one.
        epsilon: Total OCDP epsilon of this explanation; the per-step epsilons are derived from it.
        sampler: bfs/dfs make n search selections + 1 final selection (split by final_share);
            random_walk, uniform and direct make one selection. Each costs exactly epsilon in total.
        n_samples: Number of sampled contexts n (not used by direct).
        verifier: Outlier test on the metric: grubbs, lof or histogram.
        utility: population = context size |D_C|; overlap = overlap with the starting context.
        start: Starting context of the search: cell = the record's own cell (or the nearest valid
            context above it), full = the whole dataset (or the nearest valid context below it),
            climb = cell, then add values while the record stays an outlier; auto = cell for
            grubbs/histogram (and the overlap utility), full for lof. Costs no extra privacy.
        final_share: bfs/dfs only: share of epsilon spent on the final choice among the visited
            contexts (the n search steps share the rest); empty = the paper's equal split. Same total cost.
        metric: Numeric metric attribute (default: the spec's steps.pcor.metric).
        attributes: Categorical context attributes (default: the spec's steps.pcor.attributes).
        spec_path: Path to the release spec YAML.
        release_id: Overrides the spec's release id.
    """
    spec, settings = resolve(spec_path, release_id)
    cfg = spec.steps.pcor
    section = cfg.model_copy(update={
        "enabled": True, "record_ids": [record_id], "from_detector": 0, "epsilon": epsilon, "sampler": sampler,
        "n_samples": n_samples, "verifier": verifier, "utility": utility, "start": start, "final_share": final_share,
        "metric": metric or cfg.metric, "attributes": attributes or cfg.attributes,
    })
    spec = with_step(spec, "pcor", section)
    preflight_task(spec, ["pcor"])  # public checks (roster, parameters) before the input is even read
    row = run_once(spec, settings, "explain_outlier", lambda: _explain(spec, settings), steps=["pcor"])
    if row["status"] != "released":
        raise NoValidContextError(
            f"record {record_id!r}: no context was found in which it is an outlier under the {verifier} verifier. "
            f"The search ran on the private data, so epsilon = {epsilon:g} is charged and this outcome is stored "
            "(re-running with the same release id returns it without a new charge)."
        )
    return {"record_id": record_id, "context": row["context"], "bits": row["bits"]}


def _explain(spec, settings) -> dict[str, Any]:
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings, ["pcor"])  # whole plan reserved; a failing input charged nothing
    out = run_pcor(spec, settings, ingested)
    bundle_task(spec, settings, ingested, [out], subfolder_prefix="explain", run_cost=run_cost)
    row = out.tables["explanations"].iloc[0]
    return {"status": row["status"], "context": row["context"], "bits": row["bits"]}
