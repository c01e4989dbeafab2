"""Scale-out setting: which Prefect task runner runs the *mapped* tasks.

Environment (read when the flow modules are imported):

``DPR_DASK_ADDRESS=tcp://host:port``
    Use an existing Dask cluster (``DaskTaskRunner(address=...)``). Wins over
    ``DPR_TASK_RUNNER``.
``DPR_TASK_RUNNER=default`` (default)
    Prefect's thread pool in the flow process.
``DPR_TASK_RUNNER=dask-local``
    A temporary local Dask cluster of two worker processes, started with the
    flow run and stopped after it (no dashboard).

Only what is submitted or mapped goes to the runner: the detector's
per-template fits (``fit_streamed_task.map``), which receive the exported chunks of
the needed columns and a template and return the fit (on a Dask worker a fit
sends its EM's chunk passes back to the cluster, :func:`tasks.common.chunk_mapper`); likewise the
outlier-count utilities, the PCOR searches and the coco node estimates
(``coco_nodes_task.map``: public mechanism parameters and a chunk of stored
noisy cells with the nodes' public group counts). Every task that reads
or writes the warehouse or the ledger (ingest, validate, detection frame and
store, the private steps, bundle) is *called* directly by the flow, which
Prefect runs inline in the flow's own thread, so the warehouse and the ledger
stay single-writer in the flow process whatever the runner. Those tasks also
refuse to run on a Dask worker (:func:`tasks.common.private_task`).

``DPR_SCRATCH_URL=s3://bucket/prefix`` (any fsspec URL; issue 50)
    Workers share no file system with the flow: a mapped task's arguments
    that name files of the warehouse's scratch folder (an export's chunks),
    and its result's files (a fit's scores), travel through that store
    (:mod:`dpcore.storage.scratch_store`), as do the chunk passes
    (:func:`tasks.common.chunk_mapper`). Credentials come from the
    environment of the flow and of the workers only. A submitted task's
    objects are deleted when it ends (also when it fails), the run's prefix
    when the runner stops.
"""
from __future__ import annotations

import os

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

RUNNERS = ("default", "dask-local")


class RunnerSettingError(ValueError):
    """``DPR_TASK_RUNNER`` or ``DPR_DASK_ADDRESS`` has a value we cannot use."""


def task_runner_from_env(env: dict[str, str] | None = None) -> TaskRunner:
    """The task runner chosen by ``DPR_DASK_ADDRESS`` / ``DPR_TASK_RUNNER``.

    Raises
    ------
    RunnerSettingError
        Unknown runner name, or an address that is not ``tcp://host:port``
        (or another Dask scheme such as ``tls://``).
    """
    env = os.environ if env is None else env
    address = (env.get("DPR_DASK_ADDRESS") or "").strip()
    name = (env.get("DPR_TASK_RUNNER") or "default").strip().lower()
    if address:
        scheme, sep, rest = address.partition("://")
        if not sep or scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss") or ":" not in rest:
            raise RunnerSettingError(
                f"DPR_DASK_ADDRESS={address!r} is not a Dask scheduler address like tcp://host:8786"
            )
        return _store_aware(_dask_runner_class())(address=address)
    if name == "default":
        return ThreadPoolTaskRunner()
    if name == "dask-local":
        return _local_dask_runner()
    raise RunnerSettingError(f"DPR_TASK_RUNNER={name!r}: use one of {', '.join(RUNNERS)} (or set DPR_DASK_ADDRESS)")


def _current_api_url() -> str | None:
    """The Prefect API this flow run talks to (also the ephemeral server's, which has no setting)."""
    from prefect.context import FlowRunContext
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return str(url)
    ctx = FlowRunContext.get()
    client = getattr(ctx, "client", None) if ctx else None
    return str(client.api_url) if client is not None and getattr(client, "api_url", None) else None


def _local_dask_runner() -> TaskRunner:
    """``DaskTaskRunner`` on a temporary 2-process local cluster that knows the flow's API.

    Without ``PREFECT_API_URL`` (the demo: Prefect's ephemeral server inside the
    flow process) each worker process would start its own ephemeral server and
    time out; so when the cluster is created (first submitted task, inside the
    flow run) the workers get the flow's API address in their environment.
    """
    class LocalDaskTaskRunner(_store_aware(_dask_runner_class())):
        @property
        def client(self):
            if not self._client and not self.address and self._cluster is None:
                url = _current_api_url()
                if url:
                    env = {**self.cluster_kwargs.get("env", {}), "PREFECT_API_URL": url}
                    self.cluster_kwargs = {**self.cluster_kwargs, "env": env}
            return super().client

    return LocalDaskTaskRunner(cluster_kwargs={"n_workers": 2, "processes": True, "dashboard_address": None})


def _dask_runner_class():
    from prefect_dask import DaskTaskRunner

    return DaskTaskRunner


def _store_aware(base: type) -> type:
    """``base`` (a ``DaskTaskRunner``) whose submitted tasks' scratch files go through ``DPR_SCRATCH_URL``'s store.

    Each parameter that names a file or folder of the warehouse's scratch folder is shipped
    (:func:`dpcore.storage.scratch_store.shipping.ship`: its files uploaded under a random prefix of the run, the worker
    receives the same object with paths in its own private mirror); the task's result comes back the same way
    (:func:`tasks.common.private_task`, worker-safe tasks). The shipment's objects, and every worker's copies of
    them, are removed when the task ends, succeeded or failed; the run's whole prefix, and every worker's files
    of the run, when the runner exits. Without a store: ``base`` unchanged.
    """

    class StoreAwareDaskTaskRunner(base):
        def submit(self, task, parameters, wait_for=None, dependencies=None):
            from tasks.common import required_scratch_transport

            transport = required_scratch_transport()
            if transport is None:
                return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)
            from dpcore.storage.lineage import new_nonce
            from dpcore.storage.scratch_store import shipping

            store, prefix, root, _ = transport
            shipment = new_nonce(8)
            try:
                shipped = {k: shipping.ship(v, store, prefix, shipment, root, "out") for k, v in parameters.items()}
                future = super().submit(task, shipped, wait_for=wait_for, dependencies=dependencies)
            except BaseException:
                shipping.end_shipment(store, prefix, shipment, self._client)
                raise
            client = self._client

            def ended(_future) -> None:  # in Dask's callback thread; the runner's exit drops the run anyway
                try:
                    shipping.end_shipment(store, prefix, shipment, client)
                except Exception:
                    shipping.end_shipment(store, prefix, shipment)

            future.wrapped_future.add_done_callback(ended)
            return future

        def __exit__(self, *args):
            from tasks.common import close_scratch_transport

            try:  # the store's objects of the run, then the workers' files of it, while the client is open
                close_scratch_transport(client=self._client)
            finally:
                super().__exit__(*args)

    StoreAwareDaskTaskRunner.__name__ = StoreAwareDaskTaskRunner.__qualname__ = f"StoreAware{base.__name__}"
    return StoreAwareDaskTaskRunner
