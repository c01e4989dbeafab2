"""Dask workers that share no file system with the flow: chunks and results through an S3 store (issue 50).

A real S3 API (moto's ``ThreadedMotoServer`` on 127.0.0.1), a Dask scheduler in the test process and two
worker *processes* started in their own mount namespace, with another working directory and a tmpfs over the
test's temporary folder: the warehouse and its scratch folder do not exist for them (checked). Validation's
chunks and the streamed detection's chunk passes run on them through the store; the stored tables equal the
single-process run's, bit for bit, and the bucket is empty afterwards, also after a failing chunk.
"""
from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "dpr-scratch-test"
CREDS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-value-xyz",
         "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {**CREDS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir(BUCKET)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture(scope="module")
def hidden_cluster(s3, tmp_path_factory):
    """A scheduler here and 2 worker processes that cannot see ``hidden`` (a tmpfs over it in their namespace)."""
    distributed = pytest.importorskip("distributed")
    if not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs unshare -m (root) to hide the warehouse from the workers")
    hidden = tmp_path_factory.mktemp("hidden")
    elsewhere = tmp_path_factory.mktemp("worker_cwd")
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1")
    client = distributed.Client(cluster)
    env = {**os.environ, **s3, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    procs = [subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount -t tmpfs none "{hidden}" && cd "{elsewhere}" && exec "{sys.executable}" -m distributed.cli.dask_worker '
         f'{cluster.scheduler_address} --nthreads 1 --no-nanny --no-dashboard --host 127.0.0.1'],
        env=env, stdout=subprocess.DEVNULL, stderr=open(elsewhere / f"worker-{i}.log", "w")) for i in range(2)]
    try:
        client.wait_for_workers(2, timeout=120)
        yield client, hidden
    finally:
        _stop(client, cluster, procs)


def _stop(client, cluster, procs) -> None:
    """Close the client and the scheduler, then stop the worker processes (terminate, then kill)."""
    client.close()
    cluster.close()
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _store():
    from dpcore.scratch_store import ScratchStore

    return ScratchStore(f"s3://{BUCKET}/scratch")


def _run(home: Path, spec_path: Path, mapper, monkeypatch) -> dict:
    from dpcore.pipeline import ingest_stage, validate_stage
    from dpcore.settings import Settings
    from dpcore.spec import load_spec
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import run_detection_streamed
    from dpcore.validation import validated_table_name
    from owner_registration import register_spec

    monkeypatch.setenv("DPR_HOME", str(home))
    settings = Settings.from_env()
    register_spec(spec_path, settings)
    spec = load_spec(spec_path)
    ing = ingest_stage(spec, settings)
    validate_stage(spec, settings, ing, mapper=mapper)
    run_detection_streamed(spec, settings, ing, rows=700, mapper=mapper)
    wh = open_stores(settings).warehouse
    t = validated_table_name(ing, spec)
    return {
        "validated": wh.query_df(f'SELECT * FROM validated."{t}" ORDER BY _row'),
        "quarantine": wh.query_df(f'SELECT * FROM quarantine."{t}" ORDER BY _row, rule, "column"'),
        "scores": wh.query_df(f'SELECT * FROM internal."detect_scores__{t}" ORDER BY template, _row'),
        "flags": wh.query_df(f'SELECT * FROM internal."detect_flags__{t}" ORDER BY _row'),
    }


def _store_mapper(client, home: Path, used: list):
    """What :func:`tasks.common.chunk_mapper` gives a flow run with a Dask runner and ``DPR_SCRATCH_URL``."""
    from dpcore.scratch_store.shipping import register_flow_run
    from tasks.common import _dask_map

    store = _store()
    prefix = store.open_run("test-r1")
    root = home / "warehouse.duckdb.scratch"
    register_flow_run(prefix, root)

    def mapper(fn, items):
        items = list(items)
        used.append((getattr(fn, "__name__", ""), len(items)))
        return _dask_map(client, fn, items, (store, prefix, str(root), "flow"))

    return mapper


@pytest.mark.timeout(600)
def test_chunks_through_s3_on_workers_that_cannot_see_the_warehouse(tmp_path, small_spec_path, monkeypatch,
                                                                    hidden_cluster):
    import yaml

    from dpcore.chunks import serial_map
    from dpcore.scratch_store import shipping

    client, hidden = hidden_cluster
    home = hidden / "dask"
    # the workers' view: no warehouse folder, another working directory
    home.mkdir()
    assert not any(client.run(os.path.exists, str(home)).values())
    assert all(c != os.getcwd() for c in client.run(os.getcwd).values())
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["detect"]["start_sample"] = 1000
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setattr("dpcore.validation.chunked.validation_chunk_rows", lambda *a, **k: 701)
    one = _run(tmp_path / "serial", path, serial_map, monkeypatch)
    used: list = []
    before = dict(shipping.MOVED)
    two = _run(home, path, _store_mapper(client, home, used), monkeypatch)
    assert {"_validate_chunk", "chunk_pass"} <= {n for n, k in used if k > 1}, used
    assert shipping.MOVED["up"] > before["up"] and shipping.MOVED["down"] > before["down"]  # it went via S3
    for name in one:
        pd.testing.assert_frame_equal(one[name], two[name], check_exact=True, obj=name)
    assert len(one["validated"]) > 0 and len(one["scores"]) > 0
    assert _store().listing() == []  # every shipment's objects removed
    assert not any(client.run(lambda: os.listdir(shipping.mirror_base())).values())  # and the workers' mirrors


def _fail_chunk(item):
    raise RuntimeError("injected chunk failure")


def test_a_failing_chunk_leaves_no_object(tmp_path, hidden_cluster):
    """Files shipped with a chunk that fails on the worker are removed from the store and the workers."""
    from dpcore.scratch_store.shipping import mirror_base, register_flow_run
    from tasks.common import _dask_map

    client, hidden = hidden_cluster
    root = hidden / "fail.scratch"
    root.mkdir()
    (root / "part.bin").write_bytes(b"private rows")
    store = _store()
    prefix = store.open_run("test-fail")
    register_flow_run(prefix, root)
    with pytest.raises(RuntimeError, match="injected chunk failure"):
        _dask_map(client, _fail_chunk, [str(root / "part.bin")] * 3, (store, prefix, str(root), "flow"))
    assert store.listing() == []
    assert not any(client.run(lambda: os.listdir(mirror_base())).values())


def test_a_crashed_runs_leftovers_go_with_the_next_run_of_the_release(s3):
    store = _store()
    old = store.open_run("release-x")
    with store.fs.open(f"{old}/abc/leftover", "wb") as fh:
        fh.write(b"x")
    other = store.open_run("release-y")
    with store.fs.open(f"{other}/abc/kept", "wb") as fh:
        fh.write(b"y")
    store.open_run("release-x")
    assert store.listing() == [f"{other}/abc/kept"]
    store.rm(other)
    assert "release-x" not in old and "release-y" not in other  # no name from the spec in the store


def test_an_unreachable_store_or_credentials_in_the_url_are_refused_in_one_line(s3, monkeypatch):
    from dpcore.scratch_store import ScratchStore, ScratchStoreError, store_from_env

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with pytest.raises(ScratchStoreError) as err:
            store_from_env({"DPR_SCRATCH_URL": f"s3://{BUCKET}/x"}).check()
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    msg = str(err.value)
    assert "\n" not in msg and "DPR_SCRATCH_URL" in msg and CREDS["AWS_SECRET_ACCESS_KEY"] not in msg
    assert CREDS["AWS_ACCESS_KEY_ID"] not in msg
    with pytest.raises(ScratchStoreError) as err:
        ScratchStore("s3://AKIAKEY:topsecret@bucket/x")
    assert "topsecret" not in str(err.value) and "AKIAKEY" not in str(err.value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["AWS_ENDPOINT_URL"])
    with pytest.raises(ScratchStoreError, match="cannot be written"):
        ScratchStore("s3://no-such-bucket-here/x").check()


@pytest.mark.timeout(600)
def test_detect_flow_on_a_dask_runner_through_s3_equals_the_default_runner(tmp_path, small_spec_path, monkeypatch,
                                                                        s3, prefect_harness):
    """The detect flow (ingest, validate, per-template fits as Prefect tasks on the workers, store) with
    ``DPR_DASK_ADDRESS`` and ``DPR_SCRATCH_URL``, on workers that cannot see the warehouse: the same internal
    scores and flags as the default runner's; no object left in the bucket."""
    distributed = pytest.importorskip("distributed")
    if not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs unshare -m (root)")
    from prefect.settings import PREFECT_API_URL

    import flows.detect
    from dpcore.settings import Settings
    from dpcore.steps.common import open_stores
    from flows.runner import task_runner_from_env
    from owner_registration import register_spec

    hidden = tmp_path / "hidden"
    elsewhere = tmp_path / "elsewhere"
    hidden.mkdir()
    elsewhere.mkdir()
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1")
    env = {**os.environ, **s3, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "PREFECT_API_URL": str(PREFECT_API_URL.value()), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    procs = [subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'mount -t tmpfs none "{hidden}" && cd "{elsewhere}" && exec "{sys.executable}" -m distributed.cli.dask_worker '
         f'{cluster.scheduler_address} --nthreads 1 --no-nanny --no-dashboard --host 127.0.0.1'],
        env=env, stdout=subprocess.DEVNULL, stderr=open(elsewhere / f"worker-{i}.log", "w")) for i in range(2)]
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(2, timeout=120)
        assert not any(client.run(os.path.exists, str(hidden / "x")).values())
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
        from dpcore.scratch_store import shipping

        up = shipping.MOVED["up"]
        out = {}
        for name, runner, url in (("default", task_runner_from_env({}), None),
                                  ("dask", task_runner_from_env({"DPR_DASK_ADDRESS": cluster.scheduler_address}),
                                   f"s3://{BUCKET}/scratch")):
            home = (hidden if url else tmp_path) / name
            monkeypatch.setenv("DPR_HOME", str(home))
            if url:
                monkeypatch.setenv("DPR_SCRATCH_URL", url)
            register_spec(small_spec_path, Settings.from_env())
            flows.detect.detect_flow.with_options(task_runner=runner)(spec_path=str(small_spec_path))
            wh = open_stores(Settings.from_env()).warehouse
            t = wh.query_df("SELECT table_name FROM information_schema.tables WHERE table_schema = 'internal' "
                            "AND table_name LIKE 'detect_scores__%'")["table_name"].iloc[0]
            out[name] = wh.query_df(f'SELECT * FROM internal."{t}" ORDER BY template, _row')
        pd.testing.assert_frame_equal(out["default"], out["dask"], check_exact=True)
        assert len(out["dask"]) > 0
        assert shipping.MOVED["up"] > up  # the export went up to the workers through the store
        assert _store().listing() == []
    finally:
        _stop(client, cluster, procs)
