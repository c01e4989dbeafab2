"""A 40-record table and its one-record neighbour, with a one-step spec: the inputs of the ingest-id and
no-content-reuse tests (tests/test_ingest_ids.py, tests/test_no_content_reuse.py)."""
from __future__ import annotations

from pathlib import Path

import yaml

ROWS = [(f"r{i:03d}", str(i % 10)) for i in range(40)]
D1 = "id,x\n" + "".join(f"{i},{x}\n" for i, x in ROWS)
D1_PLUS = D1 + "r999,7\n"  # one more (valid) record


def ids_spec(folder: Path) -> Path:
    """A spec in ``folder`` whose input is ``folder/input.csv`` (written by the caller before each ingest)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "release_id": "ids-r1",
        "dataset": {"name": "ids", "source": {"kind": "csv", "path": "input.csv"}, "record_id": "id"},
        "schema": {"numeric": {"x": {"min": 0, "max": 10}}},
        "budget": {"epsilon": 1.0},
        "steps": {"record_counts": {"epsilon": 0.1}},
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
