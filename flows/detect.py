"""Stage flow: non-private contextual outlier detection (seed 004 part 1), one mapped task per template."""
from __future__ import annotations

from prefect import flow, unmapped
from prefect.futures import as_completed

from dpcore.runtime.chunks import MemoryBudget
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.detect import DetectionDone, templates_of
from tasks.common import Progress, resolve
from tasks.detect import close_detection_partitions, detection_export_task, fit_streamed_task, store_streamed_task
from tasks.stages import ingest_task, validate_task

from .params import DEMO_SPEC, ReleaseId, SpecPath
from .runner import task_runner_from_env


def run_detection(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> DetectionDone:
    """Export once, fit every template as a mapped task over the chunks, store the results internally.

    Memory does not grow with the rows (issue 21): the templates' columns are
    exported once to private Parquet chunks (flow process), each mapped fit
    passes over them and writes its scores next to them (so the fits may run
    in the thread pool or on Dask workers of the same machine), and the store
    ranks, labels and combines the scores in SQL (flow process). The export
    is removed when the step ends, also on error. A progress artifact counts
    the templates fitted. Under a small memory cap the templates are fitted
    one at a time (:attr:`dpcore.runtime.chunks.MemoryBudget.concurrent_fits`).
    """
    templates = templates_of(spec)
    parts = detection_export_task(spec, settings, ingested)
    try:
        progress = Progress(f"detect-templates-{spec.dataset.name}", "detector templates fitted", len(templates))
        if MemoryBudget.from_env().concurrent_fits == 1:
            futures = []
            for template in templates:
                futures.append(fit_streamed_task.submit(parts=parts, template=template, spec=spec))
                futures[-1].wait()
                progress()
        else:
            futures = fit_streamed_task.map(parts=unmapped(parts), template=templates, spec=unmapped(spec))
            for _ in as_completed(list(futures)):
                progress()
        fits = [f.result() for f in futures]  # re-raises a failed template instead of skipping it silently
        return store_streamed_task(spec, settings, ingested, fits)
    finally:
        close_detection_partitions(parts)


@flow(name="detect", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def detect_flow(spec_path: SpecPath = DEMO_SPEC, release_id: ReleaseId = None) -> list[str]:
    """Fit the spec's correlation templates; scores and labels go to the internal schema only.

    Args:
        spec_path: Path to the release spec YAML (steps.detect holds the templates).
        release_id: Overrides the spec's release id.
    """
    spec, settings = resolve(spec_path, release_id)
    if not spec.steps.detect.templates:
        raise ValueError("steps.detect.templates is empty: add correlation templates to the spec")
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    return list(run_detection(spec, settings, ingested).templates)
