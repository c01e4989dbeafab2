"""tasks.common.chunk_mapper: chunk functions of dpcore stages on Dask workers (issue 21 item 5)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from prefect import flow

from dpcore.runtime.chunks import serial_map
from dpcore.storage.partitions import exported
from dpcore.storage.warehouse import Warehouse
from tasks.common import chunk_mapper, private_task

pytestmark = pytest.mark.usefixtures("prefect_harness")


def chunk_sum(item):
    """A module-level chunk function: (pid, sum of x over chunk i)."""
    parts, i = item
    return os.getpid(), float(parts.read(i)["x"].sum())


@private_task(name="mapped-sums")
def mapped_sums(path: str) -> tuple[str, list]:
    wh = Warehouse(path)
    mapper = chunk_mapper()
    with exported(wh, "SELECT x FROM internal.t ORDER BY x", rows=1000) as parts:
        return mapper.func.__name__ if hasattr(mapper, "func") else mapper.__name__, mapper(
            chunk_sum, [(parts, i) for i in range(len(parts))])


def test_no_flow_run_means_serial():
    assert chunk_mapper() is serial_map


@pytest.mark.timeout(300)
def test_dask_runner_maps_chunks_onto_worker_processes(tmp_path):
    from flows.runner import task_runner_from_env

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("internal", "t", pd.DataFrame({"x": np.arange(10_000, dtype=float)}))

    @flow(task_runner=task_runner_from_env({"DPR_TASK_RUNNER": "dask-local"}))
    def on_dask():
        return mapped_sums(str(wh.path))

    @flow
    def on_threads():
        return mapped_sums(str(wh.path))

    name_d, dask_out = on_dask()
    name_t, thread_out = on_threads()
    assert name_d == "_dask_map" and name_t == "serial_map"
    assert [s for _, s in dask_out] == [s for _, s in thread_out] == [
        float(np.arange(i * 1000, (i + 1) * 1000).sum()) for i in range(10)]
    assert {p for p, _ in thread_out} == {os.getpid()}
    assert os.getpid() not in {p for p, _ in dask_out}  # worker processes



def sums_where_it_runs(parts) -> tuple[int, str, list]:
    """What a worker-safe task does (a detector template's fit): map its chunks with chunk_mapper() where it runs."""
    mapper = chunk_mapper()
    return os.getpid(), getattr(mapper, "__name__", ""), mapper(chunk_sum, [(parts, i) for i in range(len(parts))])


@pytest.mark.timeout(300)
def test_a_task_on_a_dask_worker_maps_its_chunks_onto_the_cluster(tmp_path):
    """Issue 21 item 5: a template's fit runs on a Dask worker, and its EM's chunk passes go back to the
    cluster through the worker's client (not serially on that worker), with the same results; the worker
    with a single thread is free to run chunks while the task waits (it secedes)."""
    import distributed

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("internal", "t", pd.DataFrame({"x": np.arange(10_000, dtype=float)}))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        with exported(wh, "SELECT x FROM internal.t ORDER BY x", rows=500) as parts:
            task_pid, name, out = client.submit(sums_where_it_runs, parts, pure=False).result(timeout=120)
        workers = set(client.run(os.getpid).values())
    assert name == "_worker_map" and task_pid in workers
    assert [s for _, s in out] == [float(np.arange(i * 500, (i + 1) * 500).sum()) for i in range(20)]
    assert {p for p, _ in out} <= workers and os.getpid() not in {p for p, _ in out}
