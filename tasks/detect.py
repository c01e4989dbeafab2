"""Tasks of the non-private detect step (everything stays in ``internal``)."""
from __future__ import annotations

from prefect import get_run_logger

from dpcore.detect.combine import Template
from dpcore.detect.streaming import StreamedFit
from dpcore.ingest.raw import IngestResult
from dpcore.storage.partitions import Partitions
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.detect import (
    DetectionDone, close_detection_partitions, fit_streamed, open_detection_partitions, store_streamed_detection,
)

from .common import chunk_mapper, private_task

__all__ = ["close_detection_partitions", "detection_export_task", "fit_streamed_task", "store_streamed_task"]


@private_task(name="detection-frame")
def detection_export_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> Partitions:
    """The templates' attributes exported once in chunks to the warehouse's private scratch folder.

    Remove it with :func:`close_detection_partitions` when the fits are stored.
    """
    return open_detection_partitions(spec, settings, ingested)


@private_task(name="fit-template", worker_safe=True)
def fit_streamed_task(parts: Partitions, template: Template, spec: ReleaseSpec) -> StreamedFit:
    """Fit one correlation template over the exported chunks; its scores go to a private file next to them.

    Reads and writes only the warehouse's private scratch folder, never the
    warehouse: runs in the flow's thread pool or on a Dask worker of the same
    machine; on a Dask worker the EM's chunk passes go to every worker of the
    cluster (:func:`~tasks.common.chunk_mapper`), otherwise to the process's
    shared pool of a thread per core (:mod:`dpcore.runtime.pooled_map`).
    """
    fit = fit_streamed(parts, template, spec, mapper=chunk_mapper(pooled=True))
    get_run_logger().info("template %s fitted (diagnostics in internal.detect_models)", template.name)
    return fit


@private_task(name="store-detection")
def store_streamed_task(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, fits: list[StreamedFit]
) -> DetectionDone:
    """Rank, label and combine the streamed fits' scores in SQL; write scores, flags and models to ``internal``."""
    done = store_streamed_detection(spec, settings, ingested, list(fits))
    get_run_logger().info("detection stored for templates %s (internal only)", ", ".join(done.templates))
    return done
