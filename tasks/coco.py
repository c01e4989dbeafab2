"""Tasks of the coco step: measuring (charges) and finishing in the flow process; node estimates mapped."""
from __future__ import annotations

from dpcore.publish import background_plots
from dpcore.publish.bundle import StepOutput
from dpcore.runtime.chunks import MemoryBudget
from dpcore.ingest.raw import IngestResult
from dpcore.mechanisms.coco import CocoMechanism, NodeChunk, NodeEstimate
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.coco import CocoMeasured, finish_coco, measure_coco

from .common import NOISE_RETRIES, Progress, flow_run_id, private_task


def start_coco_pictures() -> None:
    """Start the process that draws the coco pictures now, so that its imports overlap the steps before coco,
    if a core is free for it and the memory cap is not small (not a task: it touches no data;
    :mod:`dpcore.publish.background_plots`, :attr:`dpcore.runtime.chunks.MemoryBudget.works_ahead`)."""
    if MemoryBudget.from_env().works_ahead and background_plots.core_free():
        background_plots.start()


@private_task(name="coco", **NOISE_RETRIES)
def coco_measure_task(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> CocoMeasured:
    """Private step, first half: one charge and one noisy measurement per level (ledger, flow process).

    Retried once: the ledger returns the stored measurement of a level already released.
    """
    progress = Progress(f"coco-levels-{spec.dataset.name}", "coco levels measured", 0)
    return measure_coco(spec, settings, ingested, flow_run_id(), progress=progress)


@private_task(name="coco-nodes", worker_safe=True)
def coco_nodes_task(mechanism: CocoMechanism, chunk: NodeChunk) -> list[NodeEstimate]:
    """Estimates of one chunk of nodes (isotonic regression per node) from noisy cells and public counts;
    pure post-processing, so it may run on any Dask worker and needs no retry."""
    return mechanism.estimate_chunk(chunk)


@private_task(name="coco-finish")
def coco_finish_task(
    spec: ReleaseSpec, settings: Settings, measured: CocoMeasured, estimates: dict[str, NodeEstimate] | None
) -> StepOutput:
    """Private step, second half: consistency assembly, internal error diagnostic (warehouse), the bootstrap's
    accuracy figures, table, plots: drawn by the child process of :func:`start_coco_pictures` while the next
    steps run (the bundle waits for them) when one was started, else here."""
    progress = Progress(f"coco-accuracy-{spec.dataset.name}", "coco accuracy replicates", 0)
    return finish_coco(spec, settings, measured, estimates, progress=progress,
                       background_plots=background_plots.waiting())
