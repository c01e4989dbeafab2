"""The chunk work of validation, detection, rules and AIQ on a 2-worker Dask LocalCluster (issue 21 item 5):
the same results as the single-process run.

Each stage is run twice on its own warehouse, once with :func:`dpcore.runtime.chunks.serial_map` and once with a
mapper that runs the chunks on the cluster's worker processes (what :func:`tasks.common.chunk_mapper` gives
a flow with a Dask runner), with small chunks so there are several; the stored tables and the released
answers (test noise seed) are identical.
"""
from __future__ import annotations

import os

import pandas as pd
import pytest

from dpcore.runtime.chunks import serial_map
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec


@pytest.fixture(scope="module")
def dask_map():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    pids = set(client.run(os.getpid).values())
    used: list = []

    def mapper(fn, items):
        items = list(items)
        used.append((fn.__name__, len(items)))
        return client.gather(client.map(fn, items, pure=False))

    mapper.pids = pids
    mapper.used = used
    yield mapper
    client.close()
    cluster.close()


def _run(tmp_path, name, spec_path, monkeypatch, mapper):
    """ingest -> validate -> detect -> rules -> aiq on a fresh home, with ``mapper`` for the chunk work."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.steps.aiq import aiq_step
    from dpcore.steps.detect import run_detection_streamed
    from dpcore.steps.rules import mine_rules
    from dpcore.validation import validated_table_name

    monkeypatch.setenv("DPR_HOME", str(tmp_path / name))
    settings = Settings.from_env()
    from owner_registration import register_spec

    register_spec(spec_path, settings)  # the data owner registers the name in this fresh home
    spec = load_spec(spec_path)
    ing = ingest_stage(spec, settings)
    validate_stage(spec, settings, ing, mapper=mapper)
    run_detection_streamed(spec, settings, ing, rows=700, mapper=mapper)
    mine_rules(spec, settings, ing, sample_rows=1000, chunk_rows=700, mapper=mapper)
    out = aiq_step(spec, settings, ing, mapper=mapper)
    from dpcore.steps.common import open_stores

    wh = open_stores(settings).warehouse
    t = validated_table_name(ing, spec)
    tables = {
        "validated": wh.query_df(f'SELECT * FROM validated."{t}" ORDER BY _row'),
        "quarantine": wh.query_df(f'SELECT * FROM quarantine."{t}" ORDER BY _row, rule, "column"'),
        "scores": wh.query_df(f'SELECT * FROM internal."detect_scores__{t}" ORDER BY template, _row'),
        "flags": wh.query_df(f'SELECT * FROM internal."detect_flags__{t}" ORDER BY _row'),
        "rules": wh.query_df("SELECT template, rank, rule, precision, recall, f1, support, n_flagged, note "
                             "FROM internal.outlier_rules ORDER BY template, rank"),
        "aiq": out.tables["answers"],
    }
    return tables


@pytest.mark.timeout(600)
def test_chunk_work_on_a_local_cluster_equals_the_single_process_run(tmp_path, small_spec_path, monkeypatch, dask_map):
    import yaml

    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "5")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"]["enabled"] = True
    spec["steps"]["aiq"]["record_ids"] = ["F000001", "F000002"]
    spec["steps"]["detect"]["start_sample"] = 1000  # 3,000 rows: the EM runs over chunks after a sampled start
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))

    monkeypatch.setattr("dpcore.validation.chunked.validation_chunk_rows", lambda *a, **k: 701)
    one = _run(tmp_path, "serial", path, monkeypatch, serial_map)
    two = _run(tmp_path, "dask", path, monkeypatch, dask_map)
    assert os.getpid() not in dask_map.pids  # worker processes
    called = {name for name, n in dask_map.used if n > 1}  # several chunks each went through the cluster
    assert {"_validate_chunk", "chunk_pass", "_chunk_counts"} <= called, dask_map.used  # validation, EM, rules
    for name in one:
        pd.testing.assert_frame_equal(one[name], two[name], check_exact=True, obj=name)
    # the 2 listed ids and the public point; the detector's 3 answers are owner-only (publish_detector_chosen_ids off)
    assert len(one["validated"]) > 0 and len(one["scores"]) > 0 and len(one["aiq"]) == 3
