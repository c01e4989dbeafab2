"""Run units: one live run per release id (or operator query), and a finished one answered from the ledger.

Thin wrappers over :mod:`dpcore.run.release_runs` (DESIGN.md rules 2 and 10).
:func:`run_once` is what a flow calls around its body: it takes the run's
lock, returns the stored outcome of a finished run without reading any data,
and stores the outcome when the body finishes. The lock is released when the
run ends, fails, or its process dies.
"""
from __future__ import annotations

from typing import Any, Callable

from prefect import get_run_logger

from dpcore.budget.charge_keys import PIPELINE, run_key
from dpcore.run.cost_plan import plan_release
from dpcore.run.release_runs import ReleaseInProgressError, RunHandle, close_run, finish_run, open_run
from dpcore.storage.warehouse import let_go
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec

from .common import flow_run_id, private_task

__all__ = ["PIPELINE", "run_once"]


@private_task(name="open-release-run")
def open_run_task(spec: ReleaseSpec, settings: Settings, unit: str, lines: list[str]) -> RunHandle:
    """Take the run's lock (refused if another live run holds it), or find the run finished before."""
    run = open_run(settings.warehouse, spec.dataset.name, spec.release_id, unit, lines, settings=settings)
    if run.stored is not None:
        get_run_logger().info(
            "release %s of dataset %s was finished before: this is its stored outcome; no data was read and "
            "nothing was charged (new data needs a new release id)", spec.release_id, spec.dataset.name)
    return run


@private_task(name="finish-release-run")
def finish_run_task(settings: Settings, run: RunHandle, outcome: dict[str, Any]) -> None:
    """Store the run's public outcome (a re-run returns it) and release its lock."""
    finish_run(settings.warehouse, run, outcome, flow_run_id())


def run_once(spec: ReleaseSpec, settings: Settings, unit: str, body: Callable[[], Any],
             steps: list[str] | None = None, replay: Callable[[Any], Any] | None = None) -> Any:
    """Run ``body()`` once per run unit; a finished unit returns its stored result without running it.

    Parameters
    ----------
    unit : str
        :data:`PIPELINE` for the whole release, else the operator flow's name.
    body : callable
        The flow's work; its return value must be JSON-serialisable (it is stored as the run's outcome).
    steps : list of str, optional
        The spec sections the run charges (an operator flow's one section).
    replay : callable, optional
        Turns a stored result into what a re-run returns (e.g. marks it as the stored release).
    """
    lines = [ln.key for ln in plan_release(spec, None, steps).lines]  # public: the spec's planned lines
    try:
        run = open_run_task(spec, settings, unit, lines)
    except ReleaseInProgressError:  # the lock is another run's
        raise
    except BaseException:  # a failure after the lock was taken must not keep it for this process's life
        close_run(RunHandle(run_key(spec.dataset.name, spec.release_id, unit, sorted(lines)), spec.dataset.name,
                            spec.release_id, unit))
        raise
    try:
        if run.stored is not None:
            result = run.stored["result"]
            return replay(result) if replay else result
        result = body()
        finish_run_task(settings, run, {"result": result})
        return result
    finally:
        close_run(run)  # idempotent: a finished run's unit holds no lock
        let_go(settings.warehouse)  # the run is over: the file is whole for a backup or another program
