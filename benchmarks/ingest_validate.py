"""Ingest + validate the full NYC flights 2013 table (336,776 rows).

Measures, in one process:

* **pipeline**: ``dpcore`` ingest (hash, store raw in a fresh DuckDB file) +
  great-expectations validation from the spec + storing validated/quarantine;
* **baseline**: plain pandas doing the same rules (read CSV as text, nulls,
  domains, numeric parsing and bounds, unique id, id pattern), no warehouse.

Run: ``.venv/bin/python -m benchmarks.ingest_validate`` (updates BENCHMARKS.md). With ``--sources``
(``--factors 1 10``): PostgreSQL and Parquet-dataset ingest against export-then-CSV-ingest instead
(:mod:`benchmarks.ingest_sources`, issue 31).
Goal from the foundation issue: pipeline under 30 s.
"""
from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._record import machine, record
from dpcore.ingest import ingest, load_raw, materialise_demo, raw_row_count
from dpcore.spec import load_spec
from dpcore.validation import enforce, store_outcome, validate
from dpcore.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]


def pandas_baseline(csv: Path, spec) -> int:
    """Same row rules in plain pandas; returns the number of rejected rows."""
    df = pd.read_csv(csv, dtype=str, keep_default_na=False)
    bad = np.zeros(len(df), dtype=bool)
    rid = df[spec.dataset.record_id]
    bad |= (rid == "") | rid.duplicated(keep=False) | ~rid.str.match(spec.dataset.record_id_pattern)
    for col, attr in spec.public_schema.categorical.items():
        bad |= ~df[col].isin(attr.domain_strings)
    for col, attr in spec.public_schema.numeric.items():
        x = pd.to_numeric(df[col].where(df[col] != ""), errors="coerce")
        bad |= x.isna() | ~np.isfinite(x) | (x < attr.min) | (x > attr.max)
        if attr.integer:
            bad |= x.notna() & (x != np.round(x))
    return int(bad.sum())


def main() -> None:
    spec = load_spec(ROOT / "specs" / "demo.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        csv = materialise_demo(spec.dataset.source, tmp / "data")
        t0 = time.perf_counter()
        wh = Warehouse(tmp / "bench.duckdb")
        res = ingest(spec, wh, tmp / "data")
        t1 = time.perf_counter()
        n_rows = raw_row_count(wh, res)
        outcome = validate(load_raw(wh, res), spec)
        store_outcome(wh, res, spec, outcome)
        enforce(outcome, spec)
        t2 = time.perf_counter()
        rejected_base = pandas_baseline(csv, spec)
        t3 = time.perf_counter()
    pipe, ing, base = t2 - t0, t1 - t0, t3 - t2
    assert rejected_base == outcome.n_rejected, (rejected_base, outcome.n_rejected)
    md = f"""## Ingest + validate: NYC flights 2013 ({n_rows:,} rows)

`{Path(__file__).relative_to(ROOT)}` — {machine()}.

| what | seconds | ratio to baseline |
|---|---|---|
| pipeline: ingest (hash + DuckDB raw) + great-expectations validation + store | {pipe:.2f} | {pipe / base:.2f}× |
| — of which ingest | {ing:.2f} | |
| baseline: pandas-only checks of the same rules (no warehouse, no GE) | {base:.2f} | 1.00× |

Rows rejected: {outcome.n_rejected:,} by both (cancelled flights with empty delays/air time).
Goal (issue 2): pipeline under 30 s — {"met" if pipe < 30 else "NOT met"}. No paper figure exists for this step.
"""
    print(md)
    record("ingest_validate", md)


if __name__ == "__main__":
    import sys

    if "--sources" in sys.argv[1:]:  # issue 31: typed sources against the owner's export-then-ingest
        from benchmarks.ingest_sources import cli

        cli([a for a in sys.argv[1:] if a != "--sources"])
    else:
        main()
