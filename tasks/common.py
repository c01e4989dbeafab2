"""Shared task settings and small runtime helpers.

Every task that touches private data or draws noise is declared with
:func:`private_task`: result persistence off (persisted results would write
private values under ``PREFECT_HOME``) and no input-based caching. Retries are
safe only because the ledger's idempotency key returns the stored release
instead of drawing fresh noise (DESIGN.md rule 2); the tasks that draw noise
use :data:`NOISE_RETRIES` (one retry, only for errors a retry can cure).

The same decorator keeps warehouse and ledger work in the flow process: unless
declared ``worker_safe=True`` (pure computations on arrays / DataFrames, such
as a detector fit), a private task refuses to run on a Dask worker, so a
scale-out runner (:mod:`flows.runner`) can never make a second process write
the DuckDB file or the ledger.

It also keeps Python warnings raised by a private task's own code (in its
thread) away from every log handler and the console (:func:`_private_warnings`):
a warning's text and whether it fires at all can depend on the data (e.g. the
detector's ``ConvergenceWarning`` quotes its relative log-likelihood change),
DESIGN.md rule 6. A step that needs its warnings records them itself, inside
the warehouse (the detect step keeps them in ``internal.detect_models``).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable

from prefect import Task
from prefect.cache_policies import NO_CACHE

from dpcore.runtime.fault_injection import fault_point
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, SeriesSpec, SpecFile
from dpcore.release.spec_dirs import allowed_spec_file


class FlowProcessOnlyError(RuntimeError):
    """A task that touches the warehouse or the ledger was sent to a Dask worker."""


def on_dask_worker() -> bool:
    """True while executing a task on a Dask worker."""
    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def _flow_process_only(fn: Callable, name: str) -> Callable:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any):
        if on_dask_worker():
            raise FlowProcessOnlyError(
                f"task {name!r} reads or writes the warehouse/ledger and must run in the flow process: "
                "call it directly from the flow instead of .submit()/.map() (see flows/runner.py)"
            )
        return fn(*args, **kwargs)

    return guarded


_IN_PRIVATE_TASK = threading.local()


def _in_private_task() -> bool:
    return getattr(_IN_PRIVATE_TASK, "depth", 0) > 0


class _DropPrivateWarnings(logging.Filter):
    """Drops ``py.warnings`` records raised in a thread that is running a private task."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _in_private_task()


def _install_warning_guard() -> None:
    """Close both routes a warning takes to a handler (when this module is imported; idempotent).

    * ``logging.captureWarnings(True)`` (great-expectations turns it on when
      imported) sends warnings to the ``py.warnings`` logger, whose records
      reach Prefect's console (and any API) handler: a filter on that logger
      drops those raised inside a private task.
    * Otherwise ``warnings.showwarning`` prints to stderr: it is wrapped to
      drop the same warnings (``logging.captureWarnings`` keeps the wrapper as
      its fallback). ``warnings.catch_warnings`` is process-global,
      not per thread, so a step's own ``catch_warnings(record=True)`` cannot
      be relied on while other tasks run in threads: when one thread leaves
      its block it restores the handler another thread's warning then goes to.
    """
    logger = logging.getLogger("py.warnings")
    if not any(isinstance(f, _DropPrivateWarnings) for f in logger.filters):
        logger.addFilter(_DropPrivateWarnings())
    shown = warnings.showwarning
    if not getattr(shown, "_drops_private_warnings", False):

        @functools.wraps(shown)
        def showwarning(*args: Any, **kwargs: Any) -> None:
            if not _in_private_task():
                shown(*args, **kwargs)

        showwarning._drops_private_warnings = True  # type: ignore[attr-defined]
        warnings.showwarning = showwarning


def _private_warnings(fn: Callable) -> Callable:
    """Run ``fn`` with this thread marked as running a private task (see :func:`_install_warning_guard`)."""

    @functools.wraps(fn)
    def marked(*args: Any, **kwargs: Any):
        # module-level helpers only: a task sent to a Dask worker is pickled with this closure
        _enter_private_task()
        try:
            return fn(*args, **kwargs)
        finally:
            _leave_private_task()

    return marked


def _enter_private_task() -> None:
    _IN_PRIVATE_TASK.depth = getattr(_IN_PRIVATE_TASK, "depth", 0) + 1


def _leave_private_task() -> None:
    _IN_PRIVATE_TASK.depth -= 1


_install_warning_guard()


def _no_retry_for_user_errors(task_, task_run, state) -> bool:
    """Retry condition: retrying cannot cure bad input, an exhausted budget, a ledger refusal, a full disk or a
    test fault."""
    from dpcore.budget.amounts import BudgetExceededError
    from dpcore.runtime.fault_injection import InjectedFault
    from dpcore.budget.ledger import LedgerError
    from dpcore.runtime.faults import is_environment_fault
    from dpcore.steps.common import SeededNoiseRefusedError, StepInputError

    if isinstance(state.data, BaseException) and is_environment_fault(state.data):
        return False  # a full disk or a read-only home is not cured in a second; the first cause is reported
    return not isinstance(
        state.data, (StepInputError, BudgetExceededError, LedgerError, FlowProcessOnlyError, SeededNoiseRefusedError,
                     InjectedFault)
    )


NOISE_RETRIES: dict[str, Any] = dict(retries=1, retry_delay_seconds=1, retry_condition_fn=_no_retry_for_user_errors)
"""Retry settings of the tasks that draw noise: safe only because ``PrivacyLedger.release_once``
returns the stored release for a key already released (no second charge, no second draw)."""


def private_task(fn: Callable | None = None, *, worker_safe: bool = False, **kwargs: Any):
    """``@task`` with persistence and caching off (for private data and noise).

    The body runs marked as private (:func:`_private_warnings`): a Python
    warning it raises reaches no log handler and no console.

    Parameters
    ----------
    worker_safe : bool
        False (default): the task touches the warehouse or the ledger and
        raises :class:`FlowProcessOnlyError` if a runner ever sends it to a
        Dask worker. True: a pure computation that may run on any worker.
    **kwargs
        Other ``@task`` options (``name``, ``retries``, ...); persistence and
        caching stay off unless explicitly overridden.
    """
    opts = dict(persist_result=False, cache_policy=NO_CACHE, log_prints=False)
    opts.update(kwargs)

    def make(f: Callable):
        name = opts.get("name") or f.__name__
        body = _returns_through_store(f) if worker_safe else _flow_process_only(_fault_points(f, name), name)
        return SealedArgsTask(fn=_unsealed(_private_warnings(body)), **opts)

    return make if fn is None else make(fn)


class _Sealed:
    """A ``dpcore`` object carried past Prefect's parameter walk (see :class:`SealedArgsTask`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _seal(value: Any) -> Any:
    if isinstance(value, type) or not type(value).__module__.startswith("dpcore."):
        return value
    return _Sealed(value)


def _unsealed(fn: Callable) -> Callable:
    """``fn`` called with every :class:`_Sealed` argument replaced by the object it carries."""

    @functools.wraps(fn)
    def unsealed(*args: Any, **kwargs: Any):
        args = tuple(a.value if isinstance(a, _Sealed) else a for a in args)
        kwargs = {k: v.value if isinstance(v, _Sealed) else v for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return unsealed


class SealedArgsTask(Task):
    """A Prefect task whose ``dpcore`` objects (spec, settings, plans) pass Prefect's parameter walk as one item.

    On every task run Prefect walks each parameter element by element, several times, looking for upstream
    futures (``visit_collection``, which also rebuilds pydantic models): the demo spec's public schema alone
    holds 4,230 elements (the tailnum domain), and the walks took about a third of a release of the crash
    test's spec. A ``dpcore`` object never holds a Prefect future or state (``dpcore`` never imports Prefect),
    so on a direct call each is passed inside a plain carrier that the walk sees as one item, and the task's
    function receives the object itself. ``.submit``/``.map`` (the worker-safe fan-outs) are Prefect's own.
    (Prefect's ``quote``/``opaque`` annotations do the same walk-skipping, but with a Dask task runner they
    sent flow-process tasks to the workers: ``tests/test_coco_dask.py``.)
    """

    def __call__(self, *args: Any, **kwargs: Any):
        return super().__call__(*map(_seal, args), **{k: _seal(v) for k, v in kwargs.items()})


def _fault_points(fn: Callable, name: str) -> Callable:
    """``fn`` between the fault-injection points ``before:<name>`` and ``after:<name>`` (:mod:`dpcore.runtime.fault_injection`)."""

    @functools.wraps(fn)
    def pointed(*args: Any, **kwargs: Any):
        fault_point(f"before:{name}")
        result = fn(*args, **kwargs)
        fault_point(f"after:{name}")
        return result

    return pointed


def _call_quietly(fn: Callable, item: Any) -> Any:
    """``fn(item)`` with every Python warning silenced (a warning's text can quote data: DESIGN.md rule 6)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(item)


def _returns_through_store(fn: Callable) -> Callable:
    """``fn`` whose result, on a Dask worker that received its arguments through the scratch store, goes back
    through it too (:func:`dpcore.storage.scratch_store.shipping.return_from_worker`)."""

    @functools.wraps(fn)
    def returning(*args: Any, **kwargs: Any):
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            if "dpcore.storage.scratch_store.shipping" in sys.modules and on_dask_worker():
                from dpcore.storage.scratch_store.shipping import drop_argument_mirrors

                drop_argument_mirrors(args, kwargs)  # the files it received go with the failure too
            raise
        if "dpcore.storage.scratch_store.shipping" in sys.modules and on_dask_worker():
            from dpcore.storage.scratch_store.shipping import return_from_worker

            return return_from_worker(args, kwargs, result)
        return result

    return returning


#: Flow run id -> (store, run prefix, the warehouse's scratch folder) of the runs that ship through a store.
_RUN_STORES: dict[str, tuple[Any, str, str]] = {}


def open_scratch_transport(spec: ReleaseSpec, settings: Settings) -> None:
    """With ``DPR_SCRATCH_URL`` set: check the store (refuse it in one line before any charge), remove the
    release's leftovers of a crashed run and open this flow run's random prefix (:mod:`dpcore.storage.scratch_store`)."""
    from dpcore.storage.scratch_store import store_from_env
    from dpcore.storage.scratch_store.shipping import flow_runs, register_flow_run

    store = store_from_env()
    run_id = flow_run_id()
    if store is None or run_id is None:
        return
    store.check()
    prefix = store.open_run(spec.release_id, keep=flow_runs())
    root = settings.warehouse.parent / f"{settings.warehouse.name}.scratch"
    register_flow_run(prefix, root)
    _RUN_STORES[run_id] = (store, prefix, str(root))
    client = _cluster_client()
    if client is not None:  # what a killed run of this release left on the workers (mirrors, cached objects)
        from dpcore.storage.scratch_store.shipping import drop_stale_runs

        client.run(drop_stale_runs, prefix.rsplit("/", 1)[0], flow_runs())


def _cluster_client() -> Any:
    """The Dask client of this flow run's runner when it works with an existing cluster (``DPR_DASK_ADDRESS``)
    or has already connected; None otherwise (a thread pool, or a local cluster not started yet: fresh workers)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None) if ctx is not None else None
    if runner is None or "prefect_dask" not in sys.modules:
        return None
    from prefect_dask import DaskTaskRunner

    if not isinstance(runner, DaskTaskRunner) or not (getattr(runner, "_client", None) or runner.address):
        return None
    return runner.client


def close_scratch_transport(run_id: str | None = None, client: Any = None) -> None:
    """Remove this flow run's prefix from the store (all its objects) and forget it (the runner's exit); with
    ``client`` (the runner's Dask client), every worker then removes its files of the run (mirrors, cached
    objects: :func:`dpcore.storage.scratch_store.shipping.drop_run`)."""
    from dpcore.storage.scratch_store.shipping import drop_run, forget_run, unregister_flow_run

    got = _RUN_STORES.pop(run_id or flow_run_id() or "", None)
    if got is not None:
        store, prefix, _ = got
        try:
            store.rm(prefix)
            if client is not None:
                client.run(drop_run, prefix)
        finally:
            unregister_flow_run(prefix)
            forget_run(prefix)


def scratch_transport() -> tuple[Any, str, str, str] | None:
    """(store, run prefix, local root, who receives results) for chunks sent from here, or None (no store)."""
    if on_dask_worker():
        if "dpcore.storage.scratch_store.shipping" not in sys.modules:
            return None
        from dpcore.storage.scratch_store import ScratchStore
        from dpcore.storage.scratch_store.shipping import mirror_base, worker_transport

        got = worker_transport()
        return None if got is None else (ScratchStore(got[0]), got[1], str(mirror_base()), "worker")
    run_id = flow_run_id()
    got = _RUN_STORES.get(run_id) if run_id else None
    return None if got is None else (*got, "flow")


def required_scratch_transport() -> tuple[Any, str, str, str] | None:
    """:func:`scratch_transport` for work the flow process sends to Dask: with ``DPR_SCRATCH_URL`` set, a flow run
    that did not open the store (its flow skipped :func:`resolve`, which probes the store before any charge) is
    refused instead of sending the workers paths of a folder they may not share.

    Raises
    ------
    dpcore.storage.scratch_store.ScratchStoreError
        ``DPR_SCRATCH_URL`` is set and this flow run has no store open.
    """
    transport = scratch_transport()
    if transport is None and not on_dask_worker() and (os.environ.get("DPR_SCRATCH_URL") or "").strip():
        from dpcore.storage.scratch_store import ScratchStoreError

        raise ScratchStoreError(
            "DPR_SCRATCH_URL is set but this flow run did not open the scratch store before sending work to Dask: "
            "start the flow with tasks.common.resolve (it checks the store before any charge)"
        )
    return transport


def _dask_map(client: Any, fn: Callable, items: Any, transport: tuple | None = None) -> list:
    if transport is None:
        futures = client.map(functools.partial(_call_quietly, fn), list(items), pure=False)
        return client.gather(futures)
    return _dask_map_shipped(client, fn, list(items), transport)


def _dask_map_shipped(client: Any, fn: Callable, items: list, transport: tuple) -> list:
    """:func:`_dask_map` through the scratch store: the items' scratch files go up, each result's come back;
    the shipment's objects and every worker's mirror of it are removed when the map ends, also on error."""
    from dpcore.storage.lineage import new_nonce
    from dpcore.storage.scratch_store import shipping

    store, prefix, root, back = transport
    shipment = new_nonce(8)
    try:
        shipped = [shipping.ship(item, store, prefix, shipment, root, "out", back) for item in items]
        fault_point("scratch:shipped")  # crash tests: the chunks' objects are in the store, no chunk has run
        call = functools.partial(shipping.run_shipped, functools.partial(_call_quietly, fn), store.url, prefix,
                                 shipment, back)
        return client.gather(client.map(call, shipped, pure=False))
    finally:
        shipping.end_shipment(store, prefix, shipment, client)  # and every worker's mirror and cached copies


def _worker_map(fn: Callable, items: Any) -> list:
    """:func:`_dask_map` from inside a task running on a Dask worker (``distributed.worker_client``).

    The calling task leaves the worker's thread pool while it waits
    (``secede``), so the chunks can run on this worker too, and rejoins after.
    """
    from distributed import worker_client

    transport = scratch_transport()
    with worker_client() as client:
        return _dask_map(client, fn, items, transport)


def chunk_mapper(pooled: bool = False) -> Callable[[Callable, Any], list]:
    """The mapper for dpcore's chunked stages (:func:`dpcore.runtime.chunks.serial_map` or Dask).

    ``pooled``: without Dask, :func:`dpcore.runtime.pooled_map.pooled_map` instead of
    ``serial_map`` (the detector's concurrent fits: their chunks share one
    pool of a thread per core, so the last fit running uses every core).

    When the current flow run uses a Dask task runner (``DPR_TASK_RUNNER=dask-local``
    or ``DPR_DASK_ADDRESS``, :mod:`flows.runner`), chunk functions run on
    its workers through the runner's client: plain Dask tasks (not Prefect
    task runs: a chunk is a pure computation on an exported Parquet chunk,
    :mod:`dpcore.storage.partitions`), with Python warnings silenced, results
    gathered in item order; the flow process combines them and keeps the
    warehouse, the ledger and the noise. Called inside a worker-safe task
    that itself runs on a Dask worker (a detector template's fit), the
    chunks go to the cluster through that worker's client
    (:func:`_worker_map`), so one template's EM passes spread over every
    worker. Without ``DPR_SCRATCH_URL`` workers must be able to read the warehouse's
    scratch folder (same machine, or a shared file system); with it, the chunks'
    files and the results' files go through that store (:mod:`dpcore.storage.scratch_store`,
    :func:`_dask_map_shipped`) and workers need no access to the folder. Otherwise (thread-pool runner,
    no flow run): :func:`~dpcore.runtime.chunks.serial_map`.
    """
    from prefect.context import FlowRunContext

    from dpcore.runtime.chunks import serial_map
    from dpcore.runtime.pooled_map import pooled_map

    local = pooled_map if pooled else serial_map
    if on_dask_worker():
        return _worker_map
    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None) if ctx is not None else None
    if runner is None or "prefect_dask" not in sys.modules:
        return local  # prefect_dask is imported by flows.runner whenever a Dask runner is chosen
    from prefect_dask import DaskTaskRunner

    if not isinstance(runner, DaskTaskRunner):
        return local
    return functools.partial(_dask_map, runner.client, transport=required_scratch_transport())


def validation_mapper() -> Callable[[Callable, Any], list]:
    """The mapper for validation's great-expectations chunks: :func:`chunk_mapper`, or, when that runs them in
    this process and the memory cap is small, :func:`dpcore.runtime.child_map.child_map` (one child process for the
    step: :attr:`dpcore.runtime.chunks.MemoryBudget.validates_in_child`)."""
    from dpcore.runtime.chunks import MemoryBudget, serial_map

    mapper = chunk_mapper()
    if mapper is serial_map and MemoryBudget.from_env().validates_in_child:
        from dpcore.runtime.child_map import child_map

        return child_map
    return mapper


def flow_run_id() -> str | None:
    """The current Prefect flow-run id (recorded with each ledger charge)."""
    from prefect.runtime import flow_run

    rid = flow_run.id
    return str(rid) if rid else None


def artifact_key(*parts: str) -> str:
    """A valid artifact key (lowercase letters, digits, dashes)."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")[:100]


class Progress:
    """A Prefect progress artifact for a loop of ``total`` steps (a plain ``callback(done, total)``).

    Created at 0 % when the loop starts and updated after each step; also logs
    "<what>: done/total" lines (counts of *steps*, never of data). Create it
    inside a flow or task run; pass it to ``dpcore`` as a plain callback
    (``progress(done, total)``, or ``progress()`` for one more step done).
    """

    def __init__(self, key: str, what: str, total: int):
        from prefect import get_run_logger
        from prefect.artifacts import create_progress_artifact

        self.what, self.total, self.done = what, max(int(total), 0), 0
        self._log = get_run_logger()
        self._id = create_progress_artifact(
            progress=0.0, key=artifact_key("progress", key), description=f"{what}: 0 of {self.total} done"
        )

    def __call__(self, done: int | None = None, total: int | None = None) -> None:
        from prefect.artifacts import update_progress_artifact

        self.done = self.done + 1 if done is None else int(done)
        if total is not None:
            self.total = int(total)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        update_progress_artifact(self._id, progress=pct, description=f"{self.what}: {self.done} of {self.total} done")
        self._log.info("%s: %d/%d done", self.what, self.done, self.total)


class DeploymentRunRefusedError(RuntimeError):
    """A run of a deployment carries a test-only switch or job variables the data owner did not allow."""


def deployment_of_this_run() -> str | None:
    """The id of the deployment the current flow run (or, for a subflow, its parent) belongs to; None outside one.

    Read from Prefect's flow-run context and API (``prefect.runtime``), never from the environment.
    """
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None
    if ctx.flow_run.deployment_id is not None:
        return str(ctx.flow_run.deployment_id)
    if ctx.flow_run.parent_task_run_id is None:
        return None
    from prefect.runtime import flow_run as runtime_flow_run

    return runtime_flow_run.parent_deployment_id


def refuse_test_switches_in_deployment_runs() -> None:
    """Refuse a run of a deployment that carries test-only switches or job variables, before any charge.

    Seeded noise (``DPR_TEST_NOISE_SEED``, ``DPR_ALLOW_TEST_NOISE``) and the fault hooks (``DPR_FAULT_*``)
    belong to the test suite: in a run of a deployment they are refused whatever the environment says, and the
    fault hooks and the seeded noise source are switched off for the rest of the process
    (:func:`dpcore.runtime.fault_injection.make_inert`, :func:`dpcore.steps.common.forbid_test_noise`), so seeded noise
    cannot make a published release's noise subtractable (DESIGN.md rules 3 and 13). The project's work pool
    has no job variables (``deployments/process_pool_template.json``); a run or deployment that carries some
    anyway (set through a route the server does not check) is refused too. Outside a deployment (the test
    harness, ``dpr run``) this does nothing.

    Raises
    ------
    DeploymentRunRefusedError
        One line naming the switches or job variables set and how to remove them (values are not shown).
    """
    import os

    deployment_id = deployment_of_this_run()
    if deployment_id is None:
        return
    from dpcore.runtime.fault_injection import FAULT_SWITCHES, make_inert
    from dpcore.steps.common import TEST_NOISE_SWITCHES, forbid_test_noise

    make_inert()
    forbid_test_noise()
    switches = [name for name in (*TEST_NOISE_SWITCHES, *FAULT_SWITCHES) if os.environ.get(name)]
    if switches:
        raise DeploymentRunRefusedError(
            f"{', '.join(switches)} set in a run of a deployment: seeded noise and fault hooks are for the test "
            "suite only; unset them in the environment the worker is started with"
        )
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run_vars = sorted((ctx.flow_run.job_variables or {}) if ctx and ctx.flow_run else {})
    with get_client(sync_client=True) as client:
        dep_vars = sorted(client.read_deployment(deployment_id).job_variables or {})
    if run_vars or dep_vars:
        where = "; ".join(f"{what}: {', '.join(names)}" for what, names in
                          (("the flow run", run_vars), ("the deployment", dep_vars)) if names)
        raise DeploymentRunRefusedError(
            f"job variables set ({where}): the data owner's work pool allows none (the command, environment and "
            "working directory are the owner's); start the run without job variables and redeploy with "
            "deployments/deploy.sh"
        )


#: A spec the command line has loaded for the flow run it starts in this process (:func:`given_spec`), with the
#: flow's ``(spec_path, release_id, period)`` it was loaded for; None outside such a block.
_GIVEN_SPEC: contextvars.ContextVar[tuple[str, str | None, str | None, Path, ReleaseSpec] | None] = (
    contextvars.ContextVar("dpr_given_spec", default=None))


@contextlib.contextmanager
def given_spec(spec_path: str, release_id: str | None, period: str | None, loaded_from: str | Path,
               spec: ReleaseSpec):
    """Hand a spec the caller has loaded to the flow run started inside the block (the spec is loaded once per run).

    The command line (``python -m flows.release_pipeline``, ``dpr run``) loads the spec before Prefect starts,
    to refuse a bad spec at once; a flow run it starts in this process with the same ``spec_path``,
    ``release_id`` and ``period`` then takes that spec in :func:`resolve` instead of reading the file again,
    when loading the allowed path would give the same spec (see :func:`_given`). Every check of
    :func:`resolve` still runs.

    Parameters
    ----------
    spec_path, release_id, period : str or None
        The flow's parameters the spec was loaded for.
    loaded_from : str or Path
        The path ``spec`` was loaded from (``load_spec(loaded_from, release_id=..., period=...)``).
    spec : ReleaseSpec
    """
    token = _GIVEN_SPEC.set((str(spec_path), release_id, period, Path(loaded_from), spec))
    try:
        yield
    finally:
        _GIVEN_SPEC.reset(token)


def _given(spec_path: str, release_id: str | None, period: str | None, path: Path) -> ReleaseSpec | None:
    """The spec handed over by :func:`given_spec` for these parameters, or None (then :func:`resolve` loads it).

    Taken only when loading ``path`` (the allowed, link-free path of ``spec_path``) would give the same spec:
    the spec was loaded from a path naming the same file, whose folder is that file's own folder (relative
    file paths in a spec are resolved against the folder of the path it is loaded from, so a spec file that is
    itself a link is loaded again).
    """
    given = _GIVEN_SPEC.get()
    if given is None or given[:3] != (str(spec_path), release_id, period):
        return None
    loaded_from = given[3]
    try:
        same = loaded_from.resolve() == path and loaded_from.absolute().parent.resolve() == path.parent
    except OSError:
        return None
    return given[4] if same else None


def _dataset_name(source: SpecFile) -> str:
    """The dataset name a spec file states (for the period's log line), before the spec is validated."""
    data = source.raw
    dataset = data.get("dataset") if isinstance(data, dict) else None
    name = dataset.get("name") if isinstance(dataset, dict) else None
    return str(name) if name is not None else "?"


def resolve(spec_path: str, release_id: str | None, period: str | None = None,
            choose_period: Callable[[SeriesSpec | None, str, str | None], str | None] | None = None,
            ) -> tuple[ReleaseSpec, Settings]:
    """Load the spec (with an optional release-id override) and the settings; refuse unusable paths.

    ``spec_path`` comes from the flow's parameters (an operator's UI form), so it
    must lie inside a folder of ``DPR_SPECS_DIR`` (:func:`dpcore.release.spec_dirs.allowed_spec_file`,
    links resolved); any other path is refused before the file is opened. Every flow starts here,
    so a home that is not writable, a bundle path that is a file or an input that is a folder is
    refused before any charge (:func:`dpcore.release.path_checks.check_paths`), and so is a run of a deployment
    that carries a test-only switch or job variables (:func:`refuse_test_switches_in_deployment_runs`).

    The spec is loaded once per run (issue 49): here, or not at all when the command line that started the run
    handed its loaded spec over (:func:`given_spec`). A deployment's run of a series spec without a period reads
    the file once, chooses the period from its validated ``series`` section alone
    (:meth:`dpcore.release.spec.SpecFile.series`), and validates the whole spec once, for that period.

    Parameters
    ----------
    spec_path : str
    release_id, period : str or None
        The flow's parameters (``period``: a series spec's, issue 30).
    choose_period : callable, optional
        ``choose_period(series, dataset_name, period)``: the period the run releases, given the spec's ``series``
        section (None without one) and dataset name (:func:`tasks.series.pick_period`, the release pipeline's);
        None: ``period`` as given.
    """
    from dpcore.release.path_checks import check_paths
    from dpcore.storage.settings import check_memory_floor

    refuse_test_switches_in_deployment_runs()
    check_memory_floor()  # a DPR_MEMORY_LIMIT below what a run needs: refused before any charge (issue 47 item 5)
    settings = Settings.from_env()
    path = allowed_spec_file(spec_path, settings.specs_dirs)
    spec = _given(spec_path, release_id, period, path)
    if spec is None:
        source = SpecFile(path)  # read once; validated once below, for the period the run releases
        if choose_period is not None:  # a deployment's run of a series spec: the period its schedule gives
            period = choose_period(source.series(), _dataset_name(source), period)
        spec = source.load(release_id=release_id, period=period)  # period: a series spec's (issue 30)
    elif choose_period is not None:  # the spec the command line handed over, for the period it was given
        chosen = choose_period(spec.series, spec.dataset.name, period)
        if chosen != period:
            period = chosen
            spec = SpecFile(path).load(release_id=release_id, period=period)
    if spec.series is not None and period is None:  # never a silent first period
        from dpcore.release.series import series_without_period

        series_without_period(spec_path)
    check_paths(spec, settings)
    open_scratch_transport(spec, settings)  # DPR_SCRATCH_URL: refused here, before any charge
    return spec, settings
