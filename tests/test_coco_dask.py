"""The coco node estimates on a local Dask cluster: mapped chunk tasks run on worker processes,
the charges stay in the flow process, and the release equals the default runner's."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from child_runs import child_env, finish, spawn
from test_operations import LOCK_CRASH, _assert_ledger_consistent, _ledger

pytestmark = pytest.mark.usefixtures("prefect_harness")

METHODS = ("top_down_hc", "naive")  # consistency assembly from Hg/V; per-node H only (Hg, V = None)


@pytest.mark.timeout(600)
def test_dask_local_cluster_gives_the_same_coco_release_as_the_default_runner(tmp_path, small_spec_path,
                                                                              register_dataset):
    """The coco_publish flow (two methods) with ``DPR_TASK_RUNNER=dask-local`` (2 worker processes)
    and with the default runner, as two processes on two warehouses, test noise seed: every
    node-chunk task of the Dask run ran on a worker process, those of the default run in the flow
    process; the released histograms and the internal per-node errors are identical; one charge
    per level in each ledger. Chunks of at most 8 nodes: the small fleet's 1 + 16 + 32 nodes map
    to 1 + 2 + 4 tasks per run."""
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["coco"]["enabled"] = True
    spec_path = tmp_path / "coco.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    code = """
        import os, re
        import flows.coco_publish
        from tasks.common import private_task

        @private_task(name="coco-nodes-probe", worker_safe=True)
        def probe_nodes(mechanism, chunk):
            name = re.sub(r"[^A-Za-z0-9=*-]", "_", chunk.nodes[0])
            Path({pids!r}, f"{{os.environ['DPR_TASK_RUNNER']}}-{{mechanism.method}}-{{chunk.level}}-{{name}}").write_text(
                str(os.getpid()))
            return mechanism.estimate_chunk(chunk)

        flows.coco_publish.coco_nodes_task = probe_nodes   # the same work; records which process ran it
        flows.coco_publish.COCO_CHUNK_NODES = 8
        Path({pids!r}, os.environ["DPR_TASK_RUNNER"] + "-flow").write_text(str(os.getpid()))
        print("OPS-RUNNER", type(flows.coco_publish.coco_publish.task_runner).__name__, flush=True)
        for method in {methods!r}:
            report(method, lambda **kw: flows.coco_publish.coco_publish(spec_path={spec!r}, method=method, **kw))
    """.format(pids=str(pids), spec=str(spec_path), methods=METHODS)
    single = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", DPR_TEST_NOISE_SEED="7", DPR_ALLOW_TEST_NOISE="1")
    runners = ("dask-local", "default")
    for name in runners:
        register_dataset(spec_path, home=tmp_path / f"dpr_{name}")  # the data owner, in each run's fresh home
    procs = {name: spawn(code, child_env(tmp_path, tmp_path / f"dpr_{name}", DPR_TASK_RUNNER=name, **single))
             for name in runners}
    finished = {name: finish(p) for name, p in procs.items()}
    for name, (results, output) in finished.items():
        assert [r["ok"] for r in results] == [True, True], output[-3000:]
        assert [r["out"]["nodes"] for r in results] == [49, 49], results
        assert not LOCK_CRASH.search(output)
    assert "OPS-RUNNER LocalDaskTaskRunner" in finished["dask-local"][1]
    assert "OPS-RUNNER ThreadPoolTaskRunner" in finished["default"][1]

    pid = {p.name: p.read_text() for p in pids.iterdir()}
    for name in runners:
        for method in METHODS:
            prefix = f"{name}-{method}-"
            levels = sorted(k.removeprefix(prefix).split("-")[0] for k in pid if k.startswith(prefix))
            assert levels == ["0", "1", "1", "2", "2", "2", "2"], sorted(pid)
    default_chunks = {v for k, v in pid.items() if k.startswith("default-") and k != "default-flow"}
    assert default_chunks == {pid["default-flow"]}  # threads in the flow process
    dask_chunks = {v for k, v in pid.items() if k.startswith("dask-local-") and k != "dask-local-flow"}
    assert dask_chunks and pid["dask-local-flow"] not in dask_chunks  # worker processes

    for i, method in enumerate(METHODS):
        tables = {
            name: pd.read_csv(Path(results[i]["out"]["bundle"]) / "tables" / "coco__histograms.csv")
            for name, (results, _) in finished.items()
        }
        assert tables["default"]["node"].nunique() == 49, method
        pd.testing.assert_frame_equal(tables["dask-local"], tables["default"], check_exact=True)
    for name in runners:
        led = _ledger(tmp_path / f"dpr_{name}")
        _assert_ledger_consistent(led, "nycflights13")
        ch = led.charges("nycflights13")
        assert sorted(ch["step"]) == sorted(f"coco_level{lv}" for lv in range(3) for _ in METHODS)
    emd = {name: sorted(_ledger(tmp_path / f"dpr_{name}").wh.query("SELECT node, level, emd FROM internal.coco_emd"))
           for name in runners}
    assert len(emd["default"]) == 2 * 49 and emd["dask-local"] == emd["default"]
