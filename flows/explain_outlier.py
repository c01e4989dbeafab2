"""Operator flow: explain one record by a private context (PCOR, seed 003)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from prefect import flow
from pydantic import Field

from dpcore.release.spec import with_step
from dpcore.steps.pcor import NoValidContextError, pcor_cost_statement
from tasks.release_run import run_once
from tasks.stages import bundle_task, cost_preflight_task, ingest_task, preflight_task, validate_task

from .operator_request import operator_request
from .params import RecordId, ReleaseId, SpecPath, record_id_text
from .pcor import run_pcor


@flow(name="explain_outlier", log_prints=False, persist_result=False)
def explain_outlier(
    record_id: RecordId,
    epsilon: Annotated[Optional[float], Field(strict=True, gt=0, le=10)] = None,
    sampler: Optional[Literal["bfs", "dfs", "random_walk", "uniform", "direct"]] = None,
    n_samples: Annotated[Optional[int], Field(strict=True, ge=1, le=10_000)] = None,
    verifier: Optional[Literal["grubbs", "lof", "histogram"]] = None,
    utility: Optional[Literal["population", "overlap"]] = None,
    start: Optional[Literal["auto", "cell", "full", "climb"]] = None,
    final_share: Annotated[Optional[float], Field(strict=True, ge=0, lt=1)] = None,
    metric: Optional[str] = None,
    attributes: Optional[list[str]] = None,
    spec_path: Optional[SpecPath] = None,
    release_id: ReleaseId = None,
) -> dict[str, Any]:
    """Release one context in which the record is an outlier, under output-constrained DP.

    Costs epsilon (OCDP) once per record and parameter set; re-running with the same
    release id returns the stored context. Verifier settings (Grubbs alpha, LOF k and
    threshold, histogram share) come from the spec's steps.pcor section, and so does every
    parameter left empty: epsilon must be given or set there (steps.pcor.epsilon), else the
    run is refused before any charge. The values used are logged.

    Args:
        record_id: Id of the record to explain (text, or a whole number for a numeric id column: its text); must be
            on the public roster (dataset.roster). An absent
            or quarantined roster id is charged and gets the same no-valid-context outcome as a record without one.
        epsilon: Total OCDP epsilon of this explanation (add/remove neighbours; against a replace-one cap the
            ledger counts it twice); the per-step epsilons are derived from it. Empty = steps.pcor.epsilon.
        sampler: bfs/dfs make n search selections + 1 final selection (split by final_share);
            random_walk, uniform and direct make one selection. Each costs exactly epsilon in total.
            Empty = steps.pcor.sampler (default bfs).
        n_samples: Number of sampled contexts n (not used by direct). Empty = steps.pcor.n_samples.
        verifier: Outlier test on the metric: grubbs, lof or histogram. Empty = steps.pcor.verifier.
        utility: population = context size |D_C|; overlap = overlap with the starting context.
            Empty = steps.pcor.utility.
        start: Starting context of the search: cell = the record's own cell (or the nearest valid
            context above it), full = the whole dataset (or the nearest valid context below it),
            climb = cell, then add values while the record stays an outlier; auto = cell for
            grubbs/histogram (and the overlap utility), full for lof. Costs no extra privacy.
            Empty = steps.pcor.start.
        final_share: bfs/dfs only: share of epsilon spent on the final choice among the visited
            contexts (the n search steps share the rest); 0 = the paper's equal split; empty =
            steps.pcor.final_share. Same total cost.
        metric: Numeric metric attribute (default: the spec's steps.pcor.metric).
        attributes: Categorical context attributes (default: the spec's steps.pcor.attributes).
        spec_path: Path to the release spec YAML (required; a deployment sets it).
        release_id: Overrides the spec's release id.
    """
    record_id = record_id_text(record_id)  # a numeric id column's id, sent as a number, is the roster's text
    spec, settings, v = operator_request("explain_outlier", spec_path, release_id, {
        "epsilon": epsilon, "sampler": sampler, "n_samples": n_samples, "verifier": verifier, "utility": utility,
        "start": start, "final_share": final_share, "metric": metric, "attributes": attributes or None,
    })
    section = spec.steps.pcor.model_copy(update={
        "enabled": True, "record_ids": [record_id], "from_detector": 0, "epsilon": v["epsilon"],
        "sampler": v["sampler"], "n_samples": v["n_samples"], "verifier": v["verifier"], "utility": v["utility"],
        "start": v["start"], "final_share": v["final_share"] or None,  # 0 = the paper's equal split (null)
        "metric": v["metric"], "attributes": v["attributes"],
    })
    spec = with_step(spec, "pcor", section)
    preflight_task(spec, ["pcor"])  # public checks (roster, parameters) before the input is even read
    row = run_once(spec, settings, "explain_outlier", lambda: _explain(spec, settings), steps=["pcor"])
    if row["status"] != "released":
        raise NoValidContextError(
            f"record {record_id!r}: no context was found in which it is an outlier under the {v['verifier']} "
            f"verifier. The search ran on the private data, so it is charged ({pcor_cost_statement(spec)}) and "
            "this outcome is stored "
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
