"""Parent flow: ingest → validate → private steps → release bundle."""
from __future__ import annotations

if __name__ == "__main__":  # the Prefect API starts while the imports below load (flows/prefect_api.py)
    from flows.prefect_api import start_temporary

    start_temporary()

import argparse
import os
import sys
from typing import Any

from prefect import flow

from tasks.common import given_spec, resolve
from tasks.release_run import PIPELINE, run_once
from tasks.rules import rules_task
from tasks.stages import (
    aiq_task,
    bundle_task,
    cost_preflight_task,
    gate_task,
    ingest_task,
    preflight_task,
    record_counts_task,
    release_blockers_task,
    stop_release,
    validate_task,
)

from tasks.coco import start_coco_pictures
from tasks.series import check_period_source_task, pick_period, series_page_task
from tasks.unattributed import unattributed_task

from .coco_publish import run_coco
from .detect import run_detection
from .outlier_counts import run_outlier_counts
from .params import DEMO_SPEC, Period, ReleaseId, SpecPath
from .pcor import run_pcor
from .preload import start_preload
from .prefect_api import ready
from .runner import task_runner_from_env


# mapped tasks (detector templates, PCOR searches, subspace utilities, coco node estimates) go to the
# runner chosen by DPR_TASK_RUNNER / DPR_DASK_ADDRESS;
# every warehouse/ledger task is called directly and runs in this flow's process (flows/runner.py)
@flow(name="release_pipeline", log_prints=False, persist_result=False, task_runner=task_runner_from_env())
def release_pipeline(spec_path: SpecPath = DEMO_SPEC, release_id: ReleaseId = None,
                     period: Period = None) -> dict[str, Any]:
    """Run a whole release: its planned cost is reserved before the first charge, all or nothing.

    A release id names one release: running a finished release id again
    returns its stored outcome without reading the data or charging anything.
    A series spec (``series:``) releases one period per run: ``period``, or on
    a deployment's run left empty, the period that ended before the run's
    scheduled start time (so a late or retried run releases the same period).

    Args:
        spec_path: Path to the release spec YAML.
        release_id: Overrides the spec's release id (a finished id returns its stored release; new data needs a new id).
        period: A series spec's period (2013-05, 2013-W05, 2013-05-31, 2013-Q2, 2018). Empty on a deployment's run: the period that ended before its scheduled start (UTC). A spec without series takes none.
    """
    # the spec, loaded once (issue 49); a series spec's period: given, or from the run's schedule
    spec, settings = resolve(spec_path, release_id, period=period, choose_period=pick_period)
    preflight_task(spec)  # every step's public checks before the first charge (no half release on bad input)
    out = run_once(spec, settings, PIPELINE, lambda: _release(spec, settings), replay=_stored)
    if spec.series is not None:  # the series page, rebuilt from the stored releases only (post-processing)
        series_page_task(spec, settings)
    return out


def _stored(result: dict[str, Any]) -> dict[str, Any]:
    """A finished release's stored outcome, as a re-run returns it (this run charged nothing)."""
    from dpcore.run.release_runs import as_stored

    return as_stored(result)


def _release(spec, settings) -> dict[str, Any]:
    # what blocks the release (registration, caps, budget, series cap), decided as `dpr plan` and `dpr run`
    # decide it, for a deployment's run too: refused here, before the data is read (issue 48)
    release_blockers_task(spec, settings)
    check_period_source_task(spec)  # a series period without its input: refused before ingest (names both)
    ingested = ingest_task(spec, settings)
    validate_task(spec, settings, ingested)
    run_cost = cost_preflight_task(spec, settings)  # whole plan reserved; a failing input charged nothing
    outputs = []
    if spec.steps.record_counts.enabled:
        outputs.append(record_counts_task(spec, settings, ingested))
        stop = gate_task(spec, outputs[-1], settings)  # the rejected-fraction gate, on the noisy counts only
        if stop:
            bundle_task(spec, settings, ingested, outputs, stopped=stop, run_cost=run_cost)
            stop_release(stop)
    rules = None
    if spec.steps.detect.enabled:
        run_detection(spec, settings, ingested)
        if spec.steps.rules.enabled:  # owner-only: internal.outlier_rules and the bundle's owner/ folder
            rules = rules_task(spec, settings, ingested)
    if spec.steps.aiq.enabled:
        outputs.append(aiq_task(spec, settings, ingested))
    if spec.steps.coco.enabled:  # its pictures' process loads matplotlib meanwhile (after the detector's peak)
        start_coco_pictures()
    if spec.steps.outlier_counts.enabled:
        outputs.append(run_outlier_counts(spec, settings, ingested))
    if spec.steps.coco.enabled:
        outputs.append(run_coco(spec, settings, ingested))
    if spec.steps.unattributed.enabled:
        outputs.append(unattributed_task(spec, settings, ingested))
    if spec.steps.pcor.enabled:
        outputs.append(run_pcor(spec, settings, ingested))
    bundle = bundle_task(spec, settings, ingested, outputs, rules=rules, run_cost=run_cost)
    b = bundle.manifest["budget"]
    return {
        "bundle": str(bundle.path),
        "warehouse": str(settings.warehouse),
        "stored_release": False,
        "spent_by_this_release": b["spent_by_this_release"],
        "charged_by_this_run": b["charged_by_this_run"],
        "spent_total": b["spent_total"],
        "remaining": b["remaining"],
        "cap": b["cap"],
        "neighbour": b["neighbour"],
        **({"period": spec.period} if spec.period else {}),
    }


def budget_line(out: dict[str, Any], spec) -> str:
    """The one line that says what this run charged, what the release holds and what is left, read from the
    ledger when printed (:func:`dpcore.budget.charge_summary.release_budget_line`; a stored re-run's stored totals are
    not today's)."""
    from dpcore.budget.amounts import PrivacyCost
    from dpcore.budget.charge_summary import release_budget_line
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse

    n = out["charged_by_this_run"]
    ledger = PrivacyLedger(Warehouse(out["warehouse"]))
    return release_budget_line(ledger, spec.dataset.name, spec.release_id,
                               PrivacyCost(n["epsilon"], n["delta"]))


def _outcome_lines(out: dict[str, Any], spec) -> list[str]:
    from dpcore.budget.charge_summary import release_outcome_lines
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse

    ledger = PrivacyLedger(Warehouse(out["warehouse"]))
    return release_outcome_lines(ledger, spec.dataset.name, spec.release_id, out)


def main(argv: list[str] | None = None, loaded=None) -> int:
    """Command line: run the pipeline once and print where everything is.

    ``loaded``: the spec ``dpr run`` loaded from ``--spec`` with ``--release-id`` and ``--period`` (not loaded
    again; the flow run takes it, :func:`tasks.common.given_spec`); None: loaded here.
    """
    parser = argparse.ArgumentParser(description="Run the release pipeline on a spec.")
    parser.add_argument("--spec", default=DEMO_SPEC, help="release spec YAML (default: the bundled demo)")
    parser.add_argument("--release-id", default=None, help="override the spec's release id")
    parser.add_argument("--period", default=None, help="a series spec's period to release (2013-05, 2013-Q2, 2018)")
    parser.add_argument("--from", dest="start", default=None, help="backfill a series from this period")
    parser.add_argument("--to", dest="end", default=None, help="backfill a series up to this period (included)")
    args = parser.parse_args(argv)
    from dpcore.run.errors import user_facing
    from dpcore.release.series import backfill_periods, check_run_flags
    from dpcore.release.spec import check_release_id_flag, load_spec

    from flows.console_logging import quiet_refusal_tracebacks

    quiet_refusal_tracebacks()  # a refusal (exit 2) prints its message, not Prefect's traceback
    with user_facing():
        check_release_id_flag(args.release_id)  # a bad flag is the flag's fault, not the spec file's
        check_run_flags(args.spec, args.period, args.start, args.end)  # names the flag at fault
        if args.start is not None or args.end is not None:
            return _backfill(args.spec, backfill_periods(args.spec, args.start, args.end))
        spec = loaded if loaded is not None else load_spec(  # fail fast, before Prefect
            args.spec, release_id=args.release_id, period=args.period)
        start_preload()  # great-expectations, pint, matplotlib (none under a small cap): on a thread, while the server boots and the run starts
        # the run takes this spec instead of loading the file again (tasks.common.given_spec)
        with ready(), given_spec(args.spec, args.release_id, args.period, args.spec, spec):
            out = release_pipeline(spec_path=args.spec, release_id=args.release_id, period=args.period)
    _print_outcome(out, spec)
    return 0


def _backfill(spec_path: str, periods: list[str]) -> int:
    """Release each period of ``periods`` in order, each its own all-or-nothing run; stop at the first failure.

    A period released before is answered from the ledger as ``dpr run`` answers a stored re-run
    (:func:`dpcore.run.cost_plan.stored_answer`: no flow run, no data read); only the others run the flow.
    """
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.release.series import backfill_done_line
    from dpcore.run.errors import expected_errors
    from dpcore.release.spec import load_spec
    from dpcore.run.cost_plan import stored_answer
    from dpcore.storage.settings import Settings
    from dpcore.storage.warehouse import Warehouse

    done: list[str] = []
    for p in periods:
        try:
            spec = load_spec(spec_path, period=p)  # the period's spec, loaded once: the run takes it (given_spec)
            settings = Settings.from_env()
            ledger = PrivacyLedger(Warehouse(settings.warehouse)) if settings.warehouse.exists() else None
            out = stored_answer(spec, ledger, settings.bundles)
            if out is None:
                with ready(), given_spec(spec_path, None, p, spec_path, spec):
                    out = release_pipeline(spec_path=spec_path, period=p)
        except BaseException as exc:
            before = ", ".join(done) if done else "none"
            rest = periods[periods.index(p) + 1:]
            print(f"\nbackfill stopped at period {p}: that period's release was refused or failed and charged "
                  f"nothing beyond its own all-or-nothing reservation (see the message below).\n"
                  f"released before it (kept): {before}\n"
                  f"not run: {', '.join(rest) if rest else 'none'}", file=sys.stderr)
            if isinstance(exc, expected_errors()):
                print(f"refused: {exc}", file=sys.stderr)
                return 2
            raise
        done.append(p)
        print(f"\nperiod    : {p}")
        _print_outcome(out, spec)
    print(backfill_done_line(periods))
    return 0


def _print_outcome(out: dict[str, Any], spec) -> None:
    print("\n".join(_outcome_lines(out, spec)))


def _exit_without_teardown(code: int) -> None:
    """Leave after a finished run without the interpreter's teardown of every module.

    The atexit handlers run first (Prefect's flush of logs and events, the warehouse lease's close, the
    temporary API server's stop, temporary folders), then the standard streams are flushed. What is skipped
    is the garbage collection and the libraries' finalisers of the loaded modules: about 2 s after a demo
    release (issue 29, goal 5), holding nothing of the run (its files are closed by then, the warehouse by its
    lease at run end). Used after :func:`main` returned or printed its error line (exit 1 or 2); an unexpected
    error (a traceback) exits normally.
    """
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as done:  # an error line was printed (exit 1 or 2): no teardown's leak reports under it
        if not isinstance(done.code, int) or done.code == 0:
            raise
        code = done.code
    _exit_without_teardown(code)
