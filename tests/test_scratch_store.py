"""Dask workers that share no file system with the flow: chunks and results through an S3 store (issue 50).

A real S3 API (moto's ``ThreadedMotoServer`` on 127.0.0.1), a Dask scheduler in the test process and two
worker *processes* started in their own mount namespace, with another working directory and a tmpfs over the
test's temporary folder: the warehouse and its scratch folder do not exist for them (checked). Validation's
chunks and the streamed detection's chunk passes run on them through the store; the stored tables equal the
single-process run's, bit for bit, and the bucket is empty afterwards, also after a failing chunk.
"""
from __future__ import annotations

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
def hidden_cluster(s3, tmp_path_factory, prefect_harness):
    """A scheduler here and 2 worker processes that cannot see ``hidden`` (a tmpfs over it in their namespace);
    they know the harness's Prefect API (Prefect tasks run on them)."""
    distributed = pytest.importorskip("distributed")
    from child_runs import api_url

    if not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip("needs unshare -m (root) to hide the warehouse from the workers")
    hidden = tmp_path_factory.mktemp("hidden")
    elsewhere = tmp_path_factory.mktemp("worker_cwd")
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None, host="127.0.0.1")
    client = distributed.Client(cluster)
    env = {**os.environ, **s3, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "PREFECT_API_URL": api_url(), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
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
    from dpcore.storage.scratch_store import ScratchStore

    return ScratchStore(f"s3://{BUCKET}/scratch")


def _run(home: Path, spec_path: Path, mapper, monkeypatch) -> dict:
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
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
    from dpcore.storage.scratch_store.shipping import register_flow_run
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

    from dpcore.runtime.chunks import serial_map
    from dpcore.storage.scratch_store import shipping

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
    from dpcore.storage.scratch_store.shipping import mirror_base, register_flow_run
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
    from dpcore.storage.scratch_store import ScratchStore, ScratchStoreError, store_from_env

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
                                                                        s3, hidden_cluster):
    """The detect flow (ingest, validate, per-template fits as Prefect tasks on the workers, store) with
    ``DPR_DASK_ADDRESS`` and ``DPR_SCRATCH_URL``, on workers that cannot see the warehouse: the same internal
    scores and flags as the default runner's; the export goes up once for both templates' fits; no object left
    in the bucket."""
    import flows.detect
    from dpcore.storage.settings import Settings
    from dpcore.steps.common import open_stores
    from owner_registration import register_spec

    client, hidden = hidden_cluster
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    from dpcore.storage.scratch_store import shipping

    up, reused = shipping.MOVED["up"], shipping.MOVED["reused"]
    out = {}
    for name, runner in _each_runner(client, hidden, tmp_path, "detect", monkeypatch):
        register_spec(small_spec_path, Settings.from_env())
        flows.detect.detect_flow.with_options(task_runner=runner)(spec_path=str(small_spec_path))
        wh = open_stores(Settings.from_env()).warehouse
        t = wh.query_df("SELECT table_name FROM information_schema.tables WHERE table_schema = 'internal' "
                        "AND table_name LIKE 'detect_scores__%'")["table_name"].iloc[0]
        out[name] = wh.query_df(f'SELECT * FROM internal."{t}" ORDER BY template, _row')
    pd.testing.assert_frame_equal(out["default"], out["dask"], check_exact=True)
    assert len(out["dask"]) > 0
    assert shipping.MOVED["up"] > up  # the export went up to the workers through the store
    # the second template's fit was sent the keys of the export the first one's had uploaded
    assert shipping.MOVED["reused"] > reused
    assert _store().listing() == []


def _each_runner(client, hidden: Path, tmp_path: Path, prefix: str, monkeypatch):
    """The default runner in a home of ``tmp_path``, then the Dask runner through the S3 store in a home the
    workers cannot see (``hidden``): yields (name, runner) with ``DPR_HOME`` (and ``DPR_SCRATCH_URL``) set."""
    from flows.runner import task_runner_from_env

    for name, runner, url in (("default", task_runner_from_env({}), None),
                              ("dask", task_runner_from_env({"DPR_DASK_ADDRESS": client.scheduler.address}),
                               f"s3://{BUCKET}/scratch")):
        monkeypatch.setenv("DPR_HOME", str((hidden if url else tmp_path) / f"{prefix}-{name}"))
        if url:
            monkeypatch.setenv("DPR_SCRATCH_URL", url)
        yield name, runner


#: Public files of a bundle that differ between any two runs by design (a run's time, its random ingest id
#: and charge refs): compared with those values masked, every other public file byte for byte.
RUN_SPECIFIC = {"manifest.json", "report.md", "tables/ledger_charges.csv", "tables/ledger_charges.parquet"}


def _public_files(bundle: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bundle)): p.read_bytes() for p in sorted(bundle.rglob("*"))
            if p.is_file() and "owner" not in p.relative_to(bundle).parts}


@pytest.mark.timeout(900)
def test_a_seeded_demo_release_through_s3_on_hidden_workers_equals_the_default_runners(tmp_path, monkeypatch,
                                                                                       hidden_cluster):
    """A full release of the demo spec (``specs/demo.yaml``, the bundled 336,776 flights, every step the demo
    runs) with ``DPR_DASK_ADDRESS`` and ``DPR_SCRATCH_URL`` on workers that cannot see the warehouse, against
    the default thread pool, test noise seed: every public file of the bundle is the same, byte for byte
    (run-specific values masked in the manifest, the report and the charges table); the chunks went through
    S3, each worker downloaded each object once (the EM passes used its cached copies); no object is left in
    the bucket and no file in the workers' folders."""
    import flows.release_pipeline
    from dpcore.storage.scratch_store import shipping
    from dpcore.storage.settings import Settings
    from owner_registration import register_spec

    client, hidden = hidden_cluster
    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "11")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    spec_path = ROOT / "specs" / "demo.yaml"
    moved = dict(shipping.MOVED)
    workers_before = client.run(_worker_moved)
    out = {}
    client.run(_count_downloads)
    try:
        for name, runner in _each_runner(client, hidden, tmp_path, "release", monkeypatch):
            register_spec(spec_path, Settings.from_env())
            res = flows.release_pipeline.release_pipeline.with_options(task_runner=runner)(spec_path=str(spec_path))
            out[name] = _public_files(Path(res["bundle"]))
        counts = client.run(_count_downloads)
    finally:
        client.run(_count_downloads, False)
    assert not any(client.run(os.path.exists, str(hidden / "release-dask")).values())
    assert shipping.MOVED["up"] > moved["up"] and shipping.MOVED["down"] > moved["down"]  # through S3
    assert _store().listing() == []
    assert not any(client.run(lambda: os.listdir(shipping.mirror_base())).values())  # nor the workers' copies
    # a fit's EM passes, sent on by the worker that runs it, re-send the chunks' keys (no chunk is uploaded
    # again) and each worker downloads a key once: its copy serves the later passes
    workers = {k: sum(v[k] - workers_before[w][k] for w, v in client.run(_worker_moved).items()) for k in moved}
    assert workers["reused"] > workers["up"], workers
    assert any(counts.values()) and all(set(c.values()) <= {1} for c in counts.values()), counts
    assert sorted(out["default"]) == sorted(out["dask"])
    assert any(k.startswith("tables/coco") for k in out["default"]) and "budget.png" in out["default"]
    assert any(k.startswith("tables/pcor") for k in out["default"])
    same = [k for k in out["default"] if k not in RUN_SPECIFIC]
    assert [k for k in same if out["default"][k] != out["dask"][k]] == []
    assert RUN_SPECIFIC <= set(out["default"])
    for k in ("manifest.json", "report.md"):
        assert _masked(out["default"][k]) == _masked(out["dask"][k]), k
    for k in ("tables/ledger_charges.csv", "tables/ledger_charges.parquet"):  # but their random refs and times
        one, two = (_charges(out[name][k], k) for name in ("default", "dask"))
        pd.testing.assert_frame_equal(one, two, check_exact=True)
        assert len(one) > 5


def _charges(data: bytes, name: str) -> pd.DataFrame:
    import io

    df = pd.read_parquet(io.BytesIO(data)) if name.endswith(".parquet") else pd.read_csv(io.BytesIO(data))
    return df.drop(columns=["public_ref", "reserved_at"])


def _worker_moved() -> dict:
    from dpcore.storage.scratch_store import shipping

    return dict(shipping.MOVED)


def _masked(data: bytes) -> str:
    """A run-specific public file with its times, random ids and refs replaced by placeholders."""
    import re

    text = data.decode()
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:?\d\d|Z)?", "<time>", text)
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>", text)
    text = re.sub(r"\b[0-9a-f]{12,}\b", "<hex>", text)  # also the spec's fingerprint, keyed by each home's key
    return text


def _detect_in_process(spec_path: Path, home: Path, client, monkeypatch, release_id: str | None = None):
    """The detect flow on the hidden cluster through the store, in this process; its final state."""
    import flows.detect
    from dpcore.storage.settings import Settings
    from flows.runner import task_runner_from_env
    from owner_registration import register_spec

    monkeypatch.setenv("DPR_HOME", str(home))
    monkeypatch.setenv("DPR_SCRATCH_URL", f"s3://{BUCKET}/scratch")
    if not (home / "warehouse.duckdb").exists():
        register_spec(spec_path, Settings.from_env())
    runner = task_runner_from_env({"DPR_DASK_ADDRESS": client.scheduler.address})
    return flows.detect.detect_flow.with_options(task_runner=runner)(spec_path=str(spec_path), release_id=release_id,
                                                                     return_state=True)


def _failing_fit_body(parts, template, spec):
    raise RuntimeError("injected fit failure")


@pytest.mark.timeout(600)
def test_a_failed_step_leaves_no_object_in_the_bucket(tmp_path, small_spec_path, monkeypatch, hidden_cluster):
    """Two failures of a detect flow on the hidden workers through S3: the flow process stops right after a
    step's chunks went up (fault point ``scratch:shipped``, raised), and a detector fit fails on a worker after
    its chunks arrived. Each time the bucket and the workers' mirrors are empty afterwards."""
    import flows.detect
    from dpcore.storage.scratch_store import shipping
    from tasks.common import private_task

    client, hidden = hidden_cluster
    home = hidden / "failed-step"
    monkeypatch.setenv("DPR_FAULT_AT", "scratch:shipped")
    monkeypatch.setenv("DPR_FAULT_MODE", "raise")
    up = shipping.MOVED["up"]
    state = _detect_in_process(small_spec_path, home, client, monkeypatch)
    assert state.is_failed() and "scratch:shipped" in state.message
    assert shipping.MOVED["up"] > up  # the chunks were in the store when it failed
    assert _store().listing() == []
    monkeypatch.delenv("DPR_FAULT_AT")
    failing = private_task(_failing_fit_body, name="fit-fails", worker_safe=True)
    monkeypatch.setattr(flows.detect, "fit_streamed_task", failing)
    up = shipping.MOVED["up"]
    state = _detect_in_process(small_spec_path, home, client, monkeypatch)
    assert state.is_failed() and "injected fit failure" in state.message
    assert shipping.MOVED["up"] > up
    assert _store().listing() == []
    assert not any(client.run(lambda: os.listdir(shipping.mirror_base())).values())


@pytest.mark.timeout(600)
def test_a_killed_runs_objects_go_with_the_rerun_of_its_release_id(tmp_path, small_spec_path, monkeypatch,
                                                                   hidden_cluster, s3):
    """A detect flow in a child process killed (SIGKILL) by its first template's fit, on a worker, once the fit's
    EM passes have run: the store keeps the run's objects and the workers their cached copies of them; the
    next run of the same release id removes both before it starts, and leaves nothing itself."""
    import yaml

    from child_runs import child_env, finish, spawn
    from dpcore.storage.scratch_store import release_key, shipping
    from dpcore.storage.settings import Settings
    from owner_registration import register_spec

    client, hidden = hidden_cluster
    home = tmp_path / "killed"
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["detect"]["start_sample"] = 1000  # the EM's passes go over the chunks, on the workers
    spec_path = tmp_path / "killed.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    monkeypatch.setenv("DPR_HOME", str(home))
    register_spec(spec_path, Settings.from_env())
    code = f"""
        import os
        import flows.detect
        from tasks.common import chunk_mapper, private_task
        from tasks.detect import fit_streamed
        FLOW = os.getpid()
        def fit_then_kill(parts, template, spec):
            fit = fit_streamed(parts, template, spec, mapper=chunk_mapper(pooled=True))
            os.kill(FLOW, 9)  # on the worker: the flow dies while the workers hold their copies
            return fit
        flows.detect.fit_streamed_task = private_task(fit_then_kill, name="fit-then-kill", worker_safe=True)
        report("detect", lambda **kw: flows.detect.detect_flow(spec_path={str(spec_path)!r}, **kw))
    """
    env = child_env(tmp_path, home, **s3, DPR_DASK_ADDRESS=client.scheduler.address,
                    DPR_SCRATCH_URL=f"s3://{BUCKET}/scratch")
    proc = spawn(code, env)
    results, output = finish(proc, timeout=300)
    assert proc.returncode == -9 and results == [], output[-3000:]
    for _ in range(240):  # the other template's fit runs on to its end
        if not any(client.processing().values()):
            break
        time.sleep(0.5)
    left = _store().listing()
    assert left and all(f"/{release_key('test-r1')}/" in k for k in left), left  # the killed run's objects
    cached = client.run(lambda: sorted(shipping._CACHE))
    assert any(cached.values()) and all(f"/{release_key('test-r1')}/" in k for c in cached.values() for k in c)
    state = _detect_in_process(spec_path, home, client, monkeypatch)  # the same release id, test-r1
    assert state.is_completed(), state.message
    assert _store().listing() == []
    assert not any(client.run(lambda: os.listdir(shipping.mirror_base())).values())  # the copies went too


WRONG = {"AWS_ACCESS_KEY_ID": "AKIAWRONGKEYID000123", "AWS_SECRET_ACCESS_KEY": "wrong-secret-value-9f8e7d6c"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", ["wrong credentials", "unreachable"])
def test_a_store_that_refuses_the_credentials_or_cannot_be_reached_stops_the_release_before_any_charge(
        fault, tmp_path, small_spec_path, monkeypatch, hidden_cluster, capfd):
    """The release pipeline on the hidden cluster with a store that rejects the key (moto with authentication
    on: the key pair is unknown) or that nothing listens for: refused in one line naming DPR_SCRATCH_URL, before
    anything is read or charged (the ledger as registered, no bundle), and the key id and the secret appear on
    no surface: the message, the console, the run's logs, flow and task runs in Prefect's database, any file
    of the home or of PREFECT_HOME."""
    import asyncio

    import moto.settings
    import s3fs
    from moto.core.authorization import ActionAuthenticatorMixin

    import flows.release_pipeline
    from child_runs import read_runs
    from dpcore.storage.settings import Settings
    from flows.runner import task_runner_from_env
    from owner_registration import register_spec
    from test_operations import _ledger

    client, hidden = hidden_cluster
    home = tmp_path / "home"
    monkeypatch.setenv("DPR_HOME", str(home))
    monkeypatch.setenv("DPR_SCRATCH_URL", f"s3://{BUCKET}/scratch")
    register_spec(small_spec_path, Settings.from_env())
    before = _ledger(home).wh.query("SELECT * FROM ledger.charges")
    for k, v in WRONG.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    if fault == "unreachable":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    else:  # moto checks signatures against its IAM users from now on: the key pair is unknown
        monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        monkeypatch.setattr(ActionAuthenticatorMixin, "request_count", 0)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        runner = task_runner_from_env({"DPR_DASK_ADDRESS": client.scheduler.address})
        state = flows.release_pipeline.release_pipeline.with_options(task_runner=runner)(
            spec_path=str(small_spec_path), return_state=True)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert state.is_failed()
    msg = str(state.message)
    line = msg.split(": ", 1)[-1] if "ScratchStoreError" in msg else msg
    assert "DPR_SCRATCH_URL" in msg and "cannot be written" in msg and "\n" not in msg, msg
    assert (_ledger(home).wh.query("SELECT * FROM ledger.charges")) == before
    assert not (home / "bundles").exists() or not any((home / "bundles").rglob("*.json"))
    for _ in range(40):  # the run's logs reach the API a moment after its end
        logs, arts, runs, task_runs = asyncio.run(read_runs([str(state.state_details.flow_run_id)]))
        if any("cannot be written" in log.message for log in logs):
            break
        time.sleep(0.5)
    surfaces = [msg, line, *capfd.readouterr()]
    surfaces += [log.message for log in logs] + [repr(a) for a in arts] + [repr(r) for r in runs + task_runs]
    for folder in (home, Path(os.environ["PREFECT_HOME"])):
        surfaces += [p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()]
    for secret in (*WRONG.values(), CREDS["AWS_SECRET_ACCESS_KEY"]):
        assert not [s for s in surfaces if secret in s], secret
    assert any("cannot be written" in log.message for log in logs)  # the logs were read


def test_every_flow_opens_the_store_before_it_maps_work_and_a_flow_that_did_not_is_refused(
        tmp_path, monkeypatch, hidden_cluster):
    """Every flow of ``flows/`` starts with :func:`tasks.common.resolve` (directly or through
    ``operator_request``), which probes the store before any charge; and a flow run on a Dask runner that did
    not open the store while ``DPR_SCRATCH_URL`` is set is refused when it maps chunks or submits a task,
    instead of sending the workers paths of a folder they cannot read."""
    import importlib
    import inspect
    import pkgutil

    from prefect import Flow, flow

    import flows
    from flows.runner import task_runner_from_env
    from tasks.common import chunk_mapper, private_task

    found = []
    for mod in pkgutil.iter_modules(flows.__path__):
        module = importlib.import_module(f"flows.{mod.name}")
        for obj in vars(module).values():
            if isinstance(obj, Flow) and obj.fn.__module__ == module.__name__:
                src = inspect.getsource(obj.fn)
                found.append(obj.name)
                assert "resolve(" in src or "operator_request(" in src, obj.name
    assert {"release_pipeline", "detect", "coco_publish", "pcor", "outlier_counts"} & set(found)

    client, _ = hidden_cluster
    monkeypatch.setenv("DPR_SCRATCH_URL", f"s3://{BUCKET}/scratch")

    @private_task(name="noop", worker_safe=True)
    def noop(x):
        return x

    @flow(name="skips-resolve")
    def skips_resolve(kind: str):
        if kind == "map":
            return chunk_mapper()(len, [[1], [2]])
        return noop.submit(1).result()

    runner = task_runner_from_env({"DPR_DASK_ADDRESS": client.scheduler.address})
    for kind in ("map", "submit"):
        state = skips_resolve.with_options(task_runner=runner)(kind, return_state=True)
        assert state.is_failed() and "did not open the scratch store" in state.message, (kind, state.message)


def _read_one(item):
    paths, i = item
    return Path(paths[i]).read_bytes()


def test_a_file_every_item_of_a_map_references_goes_up_once(tmp_path, hidden_cluster):
    """A chunk source's items each hold every chunk's path (the rules' recount, the EM passes): one map uploads
    each file once, not once per item; each worker answers from its own downloaded copy."""
    from dpcore.storage.scratch_store import shipping
    from dpcore.storage.scratch_store.shipping import register_flow_run
    from tasks.common import _dask_map

    client, hidden = hidden_cluster
    root = hidden / "once.scratch"
    root.mkdir()
    paths = []
    for i in range(4):
        (root / f"chunk-{i}.bin").write_bytes(bytes([i]) * 1000)
        paths.append(str(root / f"chunk-{i}.bin"))
    store = _store()
    prefix = store.open_run("test-once")
    register_flow_run(prefix, root)
    up = shipping.MOVED["up"]
    got = _dask_map(client, _read_one, [(paths, i) for i in range(4)], (store, prefix, str(root), "flow"))
    assert got == [bytes([i]) * 1000 for i in range(4)]
    assert shipping.MOVED["up"] - up == 4 * 1000  # not 16 * 1000
    assert store.listing() == []


def _count_downloads(on: bool = True) -> dict:
    """On a worker: start (``on``) or stop counting :meth:`ScratchStore.get_file` calls per object key; the
    counts so far."""
    from dpcore.storage.scratch_store.store import ScratchStore

    counting = getattr(ScratchStore.get_file, "counts", None)
    if counting is None and on:
        plain = ScratchStore.get_file
        counts: dict = {}

        def get_file(self, key, local):
            counts[key] = counts.get(key, 0) + 1
            return plain(self, key, local)

        get_file.counts, get_file.plain = counts, plain
        ScratchStore.get_file = get_file
        return {}
    if counting is not None and not on:
        ScratchStore.get_file = ScratchStore.get_file.plain
    return dict(counting or {})


def _read_marking(item):
    """A chunk's bytes, and whether this is the first time it is read in this folder (a mark written beside it,
    as the detector keeps a chunk's decoded arrays beside the export for later passes)."""
    paths, i = item
    mark = Path(paths[i] + ".seen")
    first = not mark.exists()
    mark.touch()
    return Path(paths[i]).read_bytes(), first


def _passes(item):
    """On a worker, like a template's fit: several passes over chunks it received, each a map on the cluster."""
    from tasks.common import _worker_map

    paths, n = item
    return [_worker_map(_read_marking, [(paths, i) for i in range(len(paths))]) for _ in range(n)]


def test_a_worker_downloads_each_object_once_for_every_pass_of_a_fit(tmp_path, hidden_cluster):
    """A task that received chunks through the store maps three passes over them to the cluster (the EM passes of
    a detector's fit): each worker downloads each object once (its cached copy serves the later passes), a
    file a pass writes beside a chunk is there for the later passes on that worker (the detector's decoded
    chunks), and the copies go when the shipment ends (nothing left in the workers' folders or the bucket)."""
    from dpcore.storage.scratch_store import shipping
    from dpcore.storage.scratch_store.shipping import mirror_base, register_flow_run
    from tasks.common import _dask_map

    client, hidden = hidden_cluster
    root = hidden / "passes.scratch"
    root.mkdir()
    paths = []
    for i in range(4):
        (root / f"chunk-{i}.bin").write_bytes(bytes([i]) * 1000)
        paths.append(str(root / f"chunk-{i}.bin"))
    store = _store()
    prefix = store.open_run("test-passes")
    register_flow_run(prefix, root)
    client.run(_count_downloads)
    try:
        got = _dask_map(client, _passes, [(paths, 3)], (store, prefix, str(root), "flow"))
        counts = client.run(_count_downloads)
    finally:
        client.run(_count_downloads, False)
    assert [[data for data, _ in one] for one in got[0]] == [[bytes([i]) * 1000 for i in range(4)]] * 3
    firsts = sum(first for one in got[0] for _, first in one)
    assert 4 <= firsts <= 2 * 4, firsts  # each chunk read afresh at most once per worker, not once per pass (12)
    per_worker = [c for c in counts.values() if c]
    assert per_worker and all(set(c.values()) == {1} for c in per_worker), counts  # once per object per worker
    assert all(k.startswith(prefix + "/") for c in per_worker for k in c)
    assert store.listing() == []
    assert not any(client.run(lambda: os.listdir(mirror_base())).values())
    assert not any(client.run(lambda: shipping._CACHE).values())
