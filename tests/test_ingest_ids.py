"""Issue 28, hole 1: the public ingest id is fresh on every ingest, whatever the warehouse has seen.

Before, :func:`dpcore.ingest.raw.ingest` handed back the stored id when the same bytes had been ingested before,
and that id is public (the ingest log line, the manifest's ``input_id``, the report, the release artifact):
ingesting D1, D1, D1 + x, D1 gave ids a, a, b, a, so two snapshots (D1, D1) and (D1, D1 + x), which differ in
one record, were told apart with certainty. Content-hash deduplication stays, inside the warehouse only.
"""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from owner_registration import register_spec
from tiny_ids import D1, D1_PLUS, ids_spec

from child_runs import read_runs
from dpcore.run import pipeline
from dpcore.ingest.raw import ingest
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.storage.warehouse import Warehouse
from masking import Masker

_spec = ids_spec


def test_every_ingest_gets_a_fresh_id_while_identical_bytes_are_stored_and_validated_once(tmp_path, monkeypatch):
    """D1, D1, D1 + x, D1: four distinct random ids; inside the warehouse D1 is one raw table (the three D1
    ingests resolve to it), validated once (the stored validation is reused, keyed on the content hash); no
    public handle's repr names a table; ``raw.ingest_log`` traces each public id to its table for the owner."""
    monkeypatch.setenv("DPR_HOME", str(tmp_path / "home"))
    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    settings = Settings.from_env()
    spec_path = _spec(tmp_path / "in")
    results, done = [], []
    for i, data in enumerate((D1, D1, D1_PLUS, D1)):
        (tmp_path / "in" / "input.csv").write_text(data)
        if i == 0:
            register_spec(spec_path)  # the data owner, once, before the first run
        spec = load_spec(spec_path)
        res = pipeline.ingest_stage(spec, settings)
        results.append(res)
        done.append(pipeline.validate_stage(spec, settings, res))
    ids = [r.ingest_id for r in results]
    assert len(set(ids)) == 4, ids
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    tables = [r.table for r in results]
    assert tables[0] == tables[1] == tables[3] != tables[2]  # deduplicated, internally
    assert not any(i in t for i in ids for t in tables)  # the storage name is not any public id
    for r, d in zip(results, done):
        assert r.table not in repr(r) and r.content_hash not in repr(r) and d.table not in repr(d)
        assert repr(r) == f"IngestResult(dataset='ids', ingest_id='{r.ingest_id}')"

    wh = Warehouse(settings.warehouse)
    assert wh.query("SELECT count(*) FROM raw.ingests")[0][0] == 2
    log = dict(wh.query("SELECT ingest_id, table_name FROM raw.ingest_log"))
    registration = set(log) - set(ids)  # registering the name ingested D1 too (its record ids link budgets)
    assert len(registration) == 1 and log[registration.pop()] == tables[0]
    assert {i: log[i] for i in ids} == dict(zip(ids, tables))
    # validation ran once per distinct input: the second and fourth D1 reused the stored result
    assert wh.query("SELECT count(*) FROM internal.validation_results")[0][0] == 2
    assert done[0].table == done[1].table == done[3].table != done[2].table

    # the same bytes ingested at the dpcore level directly: again a fresh id, the same table
    (tmp_path / "in" / "input.csv").write_text(D1)
    again = ingest(load_spec(spec_path), wh, settings.data)
    assert again.ingest_id not in ids and again.table == tables[0]


# ----------------------------------------------------------------------------- public surfaces under Prefect
def _public_texts(run_id: str, result: dict, folder: Path, mask: Masker) -> list[str]:
    """Every public text of one in-process flow run (flow result, logs, artifacts, flow- and task-run names,
    states and parameters), masked; the flow result first, so the numbering of the random tokens follows the
    order of the runs, not their values."""
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    logs, arts, runs, tasks = asyncio.run(read_runs([run_id]))
    for _ in range(20):  # the API log handler sends in batches
        if any("ingested" in log.message for log in logs) and any("validation finished" in log.message for log in logs):
            break
        asyncio.run(asyncio.sleep(0.5))
        logs, arts, runs, tasks = asyncio.run(read_runs([run_id]))
    mask.flow_run_names = sorted({*mask.flow_run_names, *(r.name for r in runs)}, key=len, reverse=True)

    def m(text: str) -> str:
        return mask(text.replace(str(folder), "<folder>"))

    out = [m(json.dumps(result, sort_keys=True))]
    out += sorted(m(f"log {log.level} {log.name}: {log.message}") for log in logs)
    out += sorted(m(f"artifact {a.key} {a.type} {json.dumps(a.data, default=str)} {a.description}") for a in arts)
    out += sorted(m(f"flow run {r.name} {r.state.name} {r.state.message} {json.dumps(r.parameters)}") for r in runs)
    out += sorted(m(f"task run {t.name} {t.state.name} {t.state.message}") for t in tasks)
    return out


@pytest.mark.usefixtures("prefect_harness")
def test_a_repeated_input_and_a_changed_input_leave_the_same_public_traces(tmp_path, monkeypatch):
    """(D1, D1) and (D1, D1 + x), each sequence in its own home, through the ``validate`` flow (ingest, then
    validation, which is reused for the repeated input): after masking the random tokens (each distinct token
    numbered, so equal ids stay equal), the flow results, log lines, artifacts and run/task states of the two
    sequences are identical. With the old ingest the repeated input showed its first id again."""
    from flows.validate import validate_flow

    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    traces, ids = {}, {}
    for name, sequence in (("A", (D1, D1)), ("B", (D1, D1_PLUS))):
        folder = tmp_path / name
        monkeypatch.setenv("DPR_HOME", str(folder / "home"))
        spec_path = _spec(folder)
        mask = Masker()
        traces[name], ids[name] = [], []
        for i, data in enumerate(sequence):
            (folder / "input.csv").write_text(data)
            if i == 0:
                register_spec(spec_path)  # the data owner, once, before the first run
            state = validate_flow(spec_path=str(spec_path), return_state=True)
            result = state.result()
            ids[name].append(result["ingest_id"])
            traces[name] += _public_texts(str(state.state_details.flow_run_id), result, folder, mask)
    assert any(t.startswith("artifact validation-rules-ids") for t in traces["A"])
    assert any("ingested ids as input <nonce-1>" in t for t in traces["A"]), traces["A"]
    assert traces["A"] == traces["B"]
    assert len(set(ids["A"])) == 2 and len(set(ids["B"])) == 2
