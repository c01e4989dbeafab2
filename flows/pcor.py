"""PCOR wiring shared by the parent flow and the ``explain_outlier`` operator flow."""
from __future__ import annotations

from typing import Any

from prefect import unmapped
from prefect.futures import as_completed

from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from tasks.common import Progress
from tasks.pcor import pcor_plan_task, pcor_reserve_task, pcor_search_task, pcor_store_task


def run_pcor(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> StepOutput:
    """Explain the spec's PCOR targets: one mapped search task per newly charged record.

    Planning, reservations and storing run in the flow process (warehouse and
    ledger); only the searches are mapped, so only they reach the flow's task
    runner (a Dask cluster when configured, :mod:`flows.runner`), and they
    receive the public context space, the per-cell index arrays and one row
    number. A progress artifact counts the searches finished.
    """
    plan = pcor_plan_task(spec, settings, ingested)
    plan = pcor_reserve_task(settings, plan)
    rows = [plan.targets[i].row for i in plan.to_compute]
    results: dict[int, Any] = {}
    if rows:
        progress = Progress(f"pcor-searches-{spec.dataset.name}", "PCOR searches finished", len(rows))
        futures = pcor_search_task.map(job=unmapped(plan.job), row=rows)
        position = {id(f): i for f, i in zip(futures, plan.to_compute)}
        for fut in as_completed(list(futures)):
            try:
                results[position[id(fut)]] = fut.result()
            except Exception as exc:  # recorded as a failed charge by the store task, then re-raised
                results[position[id(fut)]] = exc
            progress()
    return pcor_store_task(spec, settings, plan, results)
