"""Tasks of the non-private detect step (everything stays in ``internal``)."""
from __future__ import annotations

import pandas as pd
from prefect import get_run_logger

from dpcore.detect.combine import Template, TemplateFit
from dpcore.ingest import IngestResult
from dpcore.settings import Settings
from dpcore.spec import ReleaseSpec
from dpcore.steps.detect import DetectionDone, detection_frame, fit_one, store_detection

from .common import private_task


@private_task(name="detection-frame")
def detection_frame_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> pd.DataFrame:
    """Record ids and the templates' attributes from the validated table."""
    return detection_frame(spec, settings, ingested)


@private_task(name="fit-template", worker_safe=True)
def fit_template_task(df: pd.DataFrame, template: Template, spec: ReleaseSpec) -> TemplateFit:
    """Fit one correlation template (one filter); runs on a Dask worker when configured."""
    fit = fit_one(df, template, spec)
    get_run_logger().info("template %s fitted (diagnostics in internal.detect_models)", template.name)
    return fit


@private_task(name="store-detection")
def store_detection_task(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, df: pd.DataFrame, fits: list[TemplateFit]
) -> DetectionDone:
    """Write scores, flags and models to the warehouse's ``internal`` schema."""
    done = store_detection(spec, settings, ingested, df[spec.dataset.record_id].to_numpy(), list(fits))
    get_run_logger().info("detection stored for templates %s (internal only)", ", ".join(done.templates))
    return done
