"""Stage flow: non-private contextual outlier detection (seed 004 part 1), one mapped task per template."""
from __future__ import annotations

from prefect import flow, unmapped
from prefect.futures import as_completed

from dpcore.ingest import IngestResult
from dpcore.settings import Settings
from dpcore.spec import ReleaseSpec
from dpcore.steps.detect import DetectionDone, templates_of
from tasks.common import Progress, resolve
from tasks.detect import detection_frame_task, fit_template_task, store_detection_task
from tasks.stages import ingest_task, validate_task

from .params import DEMO_SPEC, ReleaseId, SpecPath
from .runner import task_runner_from_env


def run_detection(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> DetectionDone:
    """Load once, fit every template as a mapped task, store the results internally.

    Only the fits are mapped, so only they go to the flow's task runner (a Dask
    cluster when configured, see :mod:`flows.runner`); they receive the
    DataFrame of the needed columns and a template, nothing else. Loading and
    storing are called directly and stay in the flow process. A progress
    artifact counts the templates fitted.
    """
    df = detection_frame_task(spec, settings, ingested)
    templates = templates_of(spec)
    progress = Progress(f"detect-templates-{spec.dataset.name}", "detector templates fitted", len(templates))
    futures = fit_template_task.map(df=unmapped(df), template=templates, spec=unmapped(spec))
    for _ in as_completed(list(futures)):
        progress()
    fits = [f.result() for f in futures]  # re-raises a failed template instead of skipping it silently
    return store_detection_task(spec, settings, ingested, df, fits)


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
