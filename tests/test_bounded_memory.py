"""The whole release pipeline in bounded memory (issue 21): no stage reads the table whole, and the
chunk size does not change any release.

The table: the first 1,500 demo flights written 8 times (12,000 records, ids renumbered), so every
exact aggregate (distinct points, (cell, value) pairs, groups) has at most ~1,500 rows while the
table, and its record ids, have 12,000. One run has chunks of 500 rows, `DPR_MEMORY_LIMIT` = 64 MiB
(DuckDB gets 32 MiB and must spill beyond it) and the fetch guard (tests/fetch_guard.py): any
warehouse read returning more than 1,500 rows whole fails it (the size is not what is tested: the
proportions of table, chunks and guard are). The other run has the default chunk sizes and no guard.
With the same test noise seed the two bundles' tables are identical.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fetch_guard import fetch_guard

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROOT = Path(__file__).resolve().parents[1]
COPIES = 8
BASE_ROWS = 1500  # the first flights of the small table, written COPIES times
GUARD_ROWS = BASE_ROWS
CHUNK_ROWS = 500


@pytest.fixture
def replicated_spec(tmp_path, small_spec_path, small_flights_csv) -> Path:
    base = pd.read_csv(small_flights_csv, dtype=str, keep_default_na=False).head(BASE_ROWS)
    n = len(base)
    frames = []
    for c in range(COPIES):
        df = base.copy()
        df["flight_id"] = [f"F{c * n + i:06d}" for i in range(1, n + 1)]
        frames.append(df)
    csv = tmp_path / "flights_x8.csv"
    pd.concat(frames).to_csv(csv, index=False)
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(csv)}
    spec["dataset"].pop("roster", None)
    spec["dataset"]["roster"] = {"ids": ["F000001", "F000002", f"F{COPIES * BASE_ROWS:06d}"]}
    steps = spec["steps"]
    for name in ("coco", "outlier_counts", "pcor", "unattributed", "aiq"):
        steps[name]["enabled"] = True
    steps["aiq"]["record_ids"] = ["F000001", "F000002"]
    steps["detect"]["start_sample"] = 1000   # the robust start on a public-size sample; EM over all rows
    steps["rules"]["sample_rows"] = 1000     # the miner on a sample; its metrics recounted over all rows
    spec["budget"]["epsilon"] = 100.0
    path = tmp_path / "x8.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


#: Columns that differ between any two runs by design: random public references and clock times.
RUN_SPECIFIC = ("public_ref", "charged_at", "created_at", "ingest_id", "flow_run_id")


def _tables(bundle: Path) -> dict[str, pd.DataFrame]:
    out = {}
    for p in sorted((bundle / "tables").glob("*.csv")):
        df = pd.read_csv(p)
        out[p.name] = df.drop(columns=[c for c in df.columns if c in RUN_SPECIFIC or c.endswith("_at")])
    return out


@pytest.mark.timeout(900)
def test_pipeline_reads_no_table_whole_and_chunks_do_not_change_releases(tmp_path, replicated_spec, monkeypatch,
                                                                         register_dataset):
    from dpcore.runtime.chunks import MemoryBudget
    from flows.release_pipeline import release_pipeline

    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "11")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "default"))
    register_dataset(replicated_spec)
    default = release_pipeline(spec_path=str(replicated_spec))

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "bounded"))
    register_dataset(replicated_spec)
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "64MiB")
    # below the floor a run is refused (dpcore.storage.settings.MEMORY_FLOOR); here the point is the chunked reads of a tiny table
    monkeypatch.setattr("dpcore.storage.settings.MEMORY_FLOOR", 0)
    monkeypatch.setattr(MemoryBudget, "chunk_rows", lambda self, bytes_per_row, minimum=1: CHUNK_ROWS)
    with fetch_guard(monkeypatch, GUARD_ROWS) as seen:
        bounded = release_pipeline(spec_path=str(replicated_spec))
    assert any(how == "to_arrow_reader batch" for _, how, _ in seen)  # the guard saw the streamed reads

    a, b = _tables(Path(default["bundle"])), _tables(Path(bounded["bundle"]))
    assert sorted(a) == sorted(b) and len(a) >= 6, sorted(a)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)
