"""Thin wrappers for a series spec's runs (issue 30): the run's period and its input's existence.

The period arithmetic and the refusals live in :mod:`dpcore.release.periods` and
:mod:`dpcore.release.series`; this module only reads the flow run's Prefect context
(its deployment and scheduled start time) and logs the public choice.
"""
from __future__ import annotations

from prefect import get_run_logger
from prefect.context import FlowRunContext

from dpcore.release.series import check_period_source, run_period
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, SeriesSpec


def scheduled_start():
    """The flow run's scheduled start time and whether it was created from a deployment (None, False outside a run).

    Prefect's ``expected_start_time`` of the flow run (what ``prefect.runtime.flow_run.scheduled_start_time``
    returns), not the wall clock: a late or retried run of a schedule slot keeps the slot's time.
    """
    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None:
        return None, False
    return run.expected_start_time, run.deployment_id is not None


def pick_period(series: SeriesSpec | None, dataset_name: str, period: str | None) -> str | None:
    """The period this run releases: ``period`` if given, else (a deployment's run of a series spec) the period
    that ended before the run's scheduled start time.

    Parameters
    ----------
    series : SeriesSpec or None
        The run's spec's validated ``series`` section (:meth:`dpcore.release.spec.SpecFile.series`), None for
        a spec without one.
    dataset_name : str
        The spec's dataset name, for the log line.
    period : str or None
        The flow's ``period`` parameter.

    Raises
    ------
    SpecError
        A series spec run outside a deployment without ``period`` (names the parameter).
    """
    when, from_deployment = scheduled_start()
    cad = series.cadence() if series is not None else None
    chosen = run_period(series is not None, period, when, from_deployment, cad)
    if series is not None:
        how = ("given" if period is not None else
               f"the last period of the series ({cad.describe()}) that ended before the scheduled start {when}")
        get_run_logger().info("series %s: releasing period %s (%s)", dataset_name, chosen, how)
    return chosen


def series_page_task(spec: ReleaseSpec, settings: Settings) -> None:
    """Rebuild the series page from the stored releases' public tables and attach it as a markdown artifact."""
    from prefect.artifacts import create_markdown_artifact

    from dpcore.publish.series_page import build_series_page

    from .common import artifact_key

    page = build_series_page(spec, settings.bundles)
    if page is None:
        return
    create_markdown_artifact(key=artifact_key("series", spec.dataset.name), markdown=page.markdown,
                             description=f"Series of {spec.dataset.name}: page at {page.folder / 'index.md'}")
    get_run_logger().info("series page of %s rebuilt from the stored releases: %s", spec.dataset.name,
                          page.folder / "index.md")


def check_period_source_task(spec: ReleaseSpec) -> None:
    """Refuse a series period whose input does not exist, before ingest (names the period and the path)."""
    check_period_source(spec)
