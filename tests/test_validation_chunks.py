"""Validation chunk by chunk (issue 21, item 2) equals the whole-table validation it replaced.

The reference is the whole-table implementation as it was before chunking (kept below, verbatim
but for names, as the test oracle): one great-expectations suite run over the whole frame, with
GE's own ``expect_column_values_to_be_unique``. The chunked path (:func:`validate_table`) must
give the same validated and quarantine tables (rows, order, DuckDB types), the same summaries,
counts and example rows, and the same per-row GE detail, for any chunk size.
"""
from __future__ import annotations

import json
import logging
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore import validation as V
from dpcore.ingest.raw import ingest, load_raw, raw_digest
from dpcore.release.spec import load_spec, parse_spec
from dpcore.validation import (
    RuleSummary, enforce, latest_passing_summary, owner_summary, store_outcome, validate, validate_table,
    validated_table_name,
)
from dpcore.storage.warehouse import Warehouse

ROW = "_row"
SECRET = "SECRET123"


# --------------------------------------------------------------------------- the reference (before chunking)


def reference_validate(raw: pd.DataFrame, spec) -> dict:
    """Whole-table validation as it was before chunking (the oracle)."""
    raw = raw.reset_index(drop=True)
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    raw[ROW] = rows
    n_rows = len(raw)
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    extras = [c for c in raw.columns if c != ROW and c not in declared]
    reserved = [c for c in extras if str(c).startswith(V.DERIVED_PREFIX)]
    frame = {ROW: rows}
    for c in raw.columns:
        if c != ROW:
            frame[c] = V._as_text(raw[c]) if c in declared else raw[c]
    for col, attr in schema.numeric.items():
        if col in raw.columns:
            num = V._parse_numbers(frame[col])
            frame[V._num_col(col)] = num
            if attr.integer:
                frame[V._whole_col(col)] = np.round(num).where(np.isfinite(num), num)
    work = pd.DataFrame(frame)
    suite = V.build_suite(spec, present_columns=list(work.columns))  # GE's own uniqueness expectation
    assert any(e.expectation_type == "expect_column_values_to_be_unique" for e in suite.expectations) or rid not in work
    result = V._run_suite(work, suite, name=spec.dataset.name.replace(".", "_"))
    full_result = V._json_clean(result.describe_dict())
    table_failures, row_hits = [], []
    for vr in result.run_results.values():
        for r in vr.results:
            rule, column = r.expectation_config.meta["rule"], r.expectation_config.meta["column"]
            assert not (r.exception_info or {}).get("raised_exception")
            if r.success:
                continue
            if rule in ("column_exists", "row_count"):
                table_failures.append(RuleSummary(rule, column, 1, []))
            elif rule == "extra_columns":
                for c in (r.result.get("details", {}).get("mismatched", {}) or {}).get("unexpected", []):
                    if not str(c).startswith(V.DERIVED_PREFIX):
                        table_failures.append(RuleSummary("extra_columns", str(c), 1, []))
            else:
                idx = r.result.get("unexpected_index_list") or []
                row_hits.append((rule, column, np.unique(np.fromiter((d[ROW] for d in idx), dtype="int64",
                                                                      count=len(idx)))))
    for c in reserved:
        table_failures.append(RuleSummary("reserved_column", str(c), 1, []))
    k = spec.steps.validation.examples_per_rule
    num = spec.public_schema.numeric  # in_bounds summaries carry the column's public bounds (spec values)
    row_failures = [RuleSummary(rule, col, int(len(h)), [int(x) for x in h[:k]],
                                (num[col].min, num[col].max) if rule == "in_bounds" else None)
                    for rule, col, h in row_hits if len(h)]
    parts = [pd.DataFrame({ROW: h, "rule": rule, "column": col}) for rule, col, h in row_hits if len(h)]
    q = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {ROW: np.array([], dtype="int64"), "rule": [], "column": []})
    bad_rows = np.unique(q[ROW].to_numpy(dtype="int64"))
    pos_of = pd.Series(np.arange(n_rows), index=rows.to_numpy())
    bad_pos = pos_of.loc[bad_rows].to_numpy() if len(bad_rows) else np.array([], dtype="int64")
    cells = pd.Series(V._cells_json(raw, bad_pos), index=bad_rows, dtype=object)
    if rid in raw.columns:
        ids = frame[rid].iloc[bad_pos].astype(object)
        ids = pd.Series(ids.where(ids.notna(), None).to_numpy(), index=bad_rows, dtype=object)
    else:
        ids = pd.Series([None] * len(bad_rows), index=bad_rows, dtype=object)
    quarantine = pd.DataFrame({
        ROW: q[ROW].astype("int64").to_numpy(),
        "record_id": ids.reindex(q[ROW]).to_numpy(dtype=object),
        "rule": q["rule"].astype(object).to_numpy(),
        "column": q["column"].astype(object).to_numpy(),
        "cells": cells.reindex(q[ROW]).to_numpy(dtype=object),
    }).sort_values([ROW, "rule", "column"], kind="stable", ignore_index=True)
    keep = ~rows.isin(bad_rows).to_numpy()
    if any(f.rule == "column_exists" for f in table_failures):
        keep[:] = False
    n_valid = int(keep.sum())
    return {
        "validated": V._typed(work.loc[keep], spec), "quarantine": quarantine, "row_failures": row_failures,
        "table_failures": table_failures,
        "ignored_columns": [str(c) for c in extras] if spec.dataset.extra_columns == "ignore" else [],
        "n_rows": n_rows, "n_valid": n_valid, "n_rejected": n_rows - n_valid, "full_result": full_result,
    }


def reference_tables(tmp_path: Path, ref: dict) -> tuple[pd.DataFrame, list, pd.DataFrame, list]:
    """The reference frames stored as the old store_outcome stored them: (validated, its types, quarantine, its types)."""
    wh = Warehouse(tmp_path / f"ref-{np.random.default_rng().integers(1 << 30)}.duckdb")

    def op(con):
        con.register("_validated", ref["validated"])
        con.execute("CREATE TABLE validated.t AS SELECT * FROM _validated")
        con.execute('CREATE TABLE quarantine.t (_row BIGINT, record_id VARCHAR, rule VARCHAR, "column" VARCHAR, '
                    "cells VARCHAR)")
        if len(ref["quarantine"]):
            con.register("_quarantine", ref["quarantine"])
            con.execute('INSERT INTO quarantine.t SELECT CAST(_row AS BIGINT), CAST(record_id AS VARCHAR), '
                        'CAST(rule AS VARCHAR), CAST("column" AS VARCHAR), CAST(cells AS VARCHAR) FROM _quarantine')

    wh.run(op, transaction=True)
    return table_and_types(wh, "validated.t") + table_and_types(wh, "quarantine.t")


def table_and_types(wh: Warehouse, name: str) -> tuple[pd.DataFrame, list]:
    """A table's rows in storage order (no ORDER BY: the order written is compared) and its column types."""
    types = [(r[0], r[1]) for r in wh.query(f"DESCRIBE {name}")]
    return wh.query_df(f"SELECT * FROM {name}"), types


def expectations_by_rule(full_result: dict) -> dict:
    """(expectation position among the same rule and column) -> GE result, for the reference's column-keyed results."""
    return full_result["validation_results"][0]["expectations"]


def assert_same(tmp_path: Path, wh: Warehouse, res, spec, out, ref: dict, n_chunks: int,
                by_values_allowed: bool = True) -> None:
    """The chunked outcome and stored tables equal the reference's."""
    assert out.validated is None and out.quarantine is None  # rows went straight to the warehouse
    assert out.row_failures == ref["row_failures"]
    assert out.table_failures == ref["table_failures"]
    assert out.ignored_columns == ref["ignored_columns"]
    assert (out.n_rows, out.n_valid, out.n_rejected) == (ref["n_rows"], ref["n_valid"], ref["n_rejected"])
    name = validated_table_name(res, spec)
    got_v, got_vt = table_and_types(wh, f'validated."{name}"')
    got_q, got_qt = table_and_types(wh, f'quarantine."{name}"')
    ref_v, ref_vt, ref_q, ref_qt = reference_tables(tmp_path, ref)
    assert got_vt == ref_vt and got_qt == ref_qt
    pd.testing.assert_frame_equal(got_v, ref_v)
    pd.testing.assert_frame_equal(got_q, ref_q)
    # the stored summary and counts
    (stored,) = wh.query(
        "SELECT n_rows, n_valid, n_rejected, summary_json, result_json, created_at FROM internal.validation_results "
        "WHERE content_hash = ? ORDER BY created_at DESC LIMIT 1", [res.content_hash])
    assert stored[:3] == (ref["n_rows"], ref["n_valid"], ref["n_rejected"])
    assert json.loads(stored[3]) == out.summary()
    # the combined GE result: same expectations in the same order, same verdicts and counts
    combined, whole = json.loads(stored[4]), ref["full_result"]
    assert combined["success"] == whole["success"]
    ce, we = expectations_by_rule(combined), expectations_by_rule(whole)
    assert len(ce) == len(we)
    chunk_rows = wh.query(
        "SELECT chunk, first_row, last_row, result_json FROM internal.validation_result_chunks "
        "WHERE content_hash = ? AND created_at = ? ORDER BY chunk", [res.content_hash, stored[5]])
    columns = {str(d[0]): str(d[1]) for d in wh.query(f"DESCRIBE {res.qualified_table}")}
    by_values = V.by_values.applies(columns, spec, ref["n_rows"]) and by_values_allowed
    if not by_values:
        assert [r[0] for r in chunk_rows] == list(range(n_chunks))
    chunk_exps = [expectations_by_rule(json.loads(r[3])) for r in chunk_rows]
    for j, (c, w) in enumerate(zip(ce, we)):
        unique = w["expectation_type"] == "expect_column_values_to_be_unique"
        assert c["expectation_type"] == ("expect_column_values_to_not_be_in_set" if unique else w["expectation_type"])
        assert c["success"] == w["success"], (j, w["expectation_type"])
        for key in ("element_count", "unexpected_count", "missing_count", "observed_value"):
            assert c["result"].get(key) == w["result"].get(key), (j, key)
        for key in ("unexpected_percent", "unexpected_percent_total", "unexpected_percent_nonmissing",
                    "missing_percent"):
            assert c["result"].get(key) == pytest.approx(w["result"].get(key)), (j, key)
        for key in ("partial_unexpected_list", "partial_unexpected_index_list"):
            assert c["result"].get(key) == w["result"].get(key), (j, key)
        if by_values:  # great-expectations ran on distinct values: each row's detail is its quarantine row
            continue
        # every failing row's detail (index and value) is in the per-chunk results, in row order
        detail = [x for e in chunk_exps for x in (e[j]["result"].get("unexpected_index_list") or [])]
        assert detail == (w["result"].get("unexpected_index_list") or []), (j, w["expectation_type"])
        values = [x for e in chunk_exps for x in (e[j]["result"].get("unexpected_list") or [])]
        whole = w["result"].get("unexpected_list") or []
        if len(whole) == w["result"].get("unexpected_count", 0):
            assert values == whole, (j, w["expectation_type"])
        else:  # GE shortens the value list of some expectations over a long table (the index list is complete)
            assert values[: len(whole)] == whole, (j, w["expectation_type"])


# --------------------------------------------------------------------------- random tables


def make_spec(path: Path, **dataset) -> object:
    return parse_spec({
        "release_id": "chunks-r1",
        "dataset": {"name": "chunks", "source": {"kind": path.suffix.lstrip("."), "path": str(path)},
                    "record_id": "id", **dataset},
        "schema": {
            "categorical": {
                "carrier": {"domain": ["AA", "UA", "B6"]},
                "month": {"domain": [1, 2, 3]},
                "code": {"domain": [1, "x"], "nullable": True},
            },
            "numeric": {
                "distance": {"min": 0, "max": 5000, "integer": True},
                "delay": {"min": -100, "max": 100, "nullable": True},
            },
        },
        "budget": {"epsilon": 1.0},
        "steps": {"validation": {"examples_per_rule": 3}},
    })


#: A bad value per column and rule: every row rule fails somewhere.
BAD = {
    "id": ["", "a b", '=HYPERLINK("x")'],
    "carrier": ["", "ZZ", "aa", SECRET],
    "month": ["", "4", "01", "1.0"],
    "code": ["2", "y"],
    "distance": ["", "abc", "nan", "1e400", "12.5", "-1", "5000.5", " 5"],
    "delay": ["-1e400", "100.5", "inf", "x"],
}
GOOD = {"carrier": ["AA", "UA", "B6"], "month": ["1", "2", "3"], "code": ["1", "x", ""],
        "distance": ["0", "100", "5000", "1.2e3", "12.0"], "delay": ["", "-3.5", "100", ".5"]}


def random_table(rng: np.random.Generator, n: int, p_bad: float = 0.15, p_dup: float = 0.1) -> pd.DataFrame:
    """``n`` rows of text cells: good values, each cell bad with probability ``p_bad``, some ids repeated
    anywhere in the table (so duplicates straddle chunk boundaries)."""
    cols = {}
    ids = np.array([f"r{i}" for i in range(n)], dtype=object)
    dup = rng.random(n) < p_dup
    ids[dup] = ids[rng.integers(0, n, dup.sum())]  # copies of ids from anywhere in the table
    bad_id = rng.random(n) < p_bad / 3
    ids[bad_id] = rng.choice(BAD["id"], bad_id.sum())
    cols["id"] = ids
    for col, good in GOOD.items():
        vals = rng.choice(good, n).astype(object)
        bad = rng.random(n) < p_bad
        vals[bad] = rng.choice(BAD[col], bad.sum())
        cols[col] = vals
    for col, bad in BAD.items():  # every bad value somewhere, whatever the draw
        where = rng.choice(n, len(bad), replace=False)
        cols[col][where] = bad
    cols["id"][[1, n - 2]] = "twice"  # and one id repeated far apart, whatever the draw
    return pd.DataFrame(cols)


def ingested(tmp_path: Path, df: pd.DataFrame, kind: str = "csv", **dataset):
    path = tmp_path / f"in.{kind}"
    if kind == "csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    spec = make_spec(path, **dataset)
    wh = Warehouse(tmp_path / "w.duckdb")
    return spec, wh, ingest(spec, wh, tmp_path)


@pytest.mark.parametrize("seed, n", [(0, 41), (1, 12), (2, 23)])
def test_random_tables_every_chunk_size_equals_the_whole_table(tmp_path, seed, n):
    rng = np.random.default_rng(seed)
    df = random_table(rng, n)
    spec, wh, res = ingested(tmp_path, df)
    raw = load_raw(wh, res)
    ref = reference_validate(raw, spec)
    # the table is awkward enough: duplicates, and every row rule fails somewhere
    assert {f.rule for f in ref["row_failures"]} == set(V.ROW_RULES)
    dup_rows = [f for f in ref["row_failures"] if f.rule == "unique"][0]
    assert dup_rows.count >= 2
    before = raw_digest(wh, res.table)
    for rows in ((1, 5, n) if n < 20 else (7, n - 1, n + 13)):  # size 1, primes, one chunk, one short chunk
        for by_values in (True, False):  # by distinct values (issue 29), and chunk by chunk
            out = validate_table(wh, res, spec, rows=rows, by_values=by_values)
            assert_same(tmp_path, wh, res, spec, out, ref, n_chunks=-(-n // rows), by_values_allowed=by_values)
    assert raw_digest(wh, res.table) == before
    # the in-memory path is the one-chunk case: same frames as the reference
    mem = validate(raw, spec)
    pd.testing.assert_frame_equal(mem.validated, ref["validated"])
    pd.testing.assert_frame_equal(mem.quarantine, ref["quarantine"])
    assert mem.row_failures == ref["row_failures"] and mem.n_valid == ref["n_valid"]


def test_duplicates_straddling_every_boundary(tmp_path):
    """Ids repeated at both ends of the table and across each chunk boundary: every copy is rejected."""
    ids = ["a", "b", "c", "a", "d", "e", "b", "f", "g", "h", "d", "i", "c", "", "", "j", "a"]
    df = pd.DataFrame({"id": ids, "carrier": "AA", "month": "1", "code": "x", "distance": "5", "delay": "1"})
    spec, wh, res = ingested(tmp_path, df)
    ref = reference_validate(load_raw(wh, res), spec)
    assert [f for f in ref["row_failures"] if f.rule == "unique"] == [RuleSummary("unique", "id", 9, [1, 2, 3])]
    for rows in (1, 4, 17):
        out = validate_table(wh, res, spec, rows=rows)
        assert_same(tmp_path, wh, res, spec, out, ref, n_chunks=-(-len(ids) // rows))


def test_typed_parquet_input(tmp_path):
    """Parquet keeps its types (integer ids with repeats, floats with NaN and inf, nullable ints): each chunk
    is read with DuckDB's own pandas conversion, as load_raw reads the whole table."""
    n = 29
    rng = np.random.default_rng(5)
    df = pd.DataFrame({
        "id": pd.array(rng.integers(0, 20, n), dtype="Int64"),
        "carrier": rng.choice(["AA", "UA", "ZZ", None], n),
        "month": rng.choice([1.0, 2.0, 2.5, np.nan], n),
        "code": pd.array(rng.choice([1, 2, None], n), dtype="Int64"),
        "distance": rng.integers(-5, 6000, n),
        "delay": rng.choice([0.5, np.nan, np.inf, -1.0, 150.0], n),
    })
    df.loc[3, "id"] = pd.NA
    spec, wh, res = ingested(tmp_path, df, kind="parquet")
    ref = reference_validate(load_raw(wh, res), spec)
    assert any(f.rule == "unique" for f in ref["row_failures"])
    for rows in (3, n):
        assert_same(tmp_path, wh, res, spec, validate_table(wh, res, spec, rows=rows), ref, -(-n // rows))


def test_float_ids_nan_and_signed_zero(tmp_path):
    """Float record ids: NaN is a missing id (never a duplicate), -0.0 and 0.0 read as the same id "0"."""
    df = pd.DataFrame({"id": [0.0, -0.0, np.nan, np.nan, 1.5, 2.0, 1.5], "carrier": "AA", "month": "1",
                       "code": "x", "distance": "5", "delay": "1"})
    spec, wh, res = ingested(tmp_path, df, kind="parquet", record_id_pattern=r"[0-9.\-]+")
    ref = reference_validate(load_raw(wh, res), spec)
    for rows in (1, 3, 7):
        assert_same(tmp_path, wh, res, spec, validate_table(wh, res, spec, rows=rows), ref, -(-7 // rows))


@pytest.mark.parametrize("case", ["empty", "missing_column", "extra_error", "extra_ignore", "reserved"])
def test_table_rules_are_decided_once(tmp_path, case):
    df = random_table(np.random.default_rng(3), 9, p_bad=0.1, p_dup=0.0)
    over = {}
    if case == "empty":
        df = df.iloc[:0]
    elif case == "missing_column":
        df = df.drop(columns=["delay"])
    elif case == "extra_error":
        df = df.assign(notes=SECRET)
    elif case == "extra_ignore":
        df, over = df.assign(notes=SECRET, other="1"), {"extra_columns": "ignore"}
    else:
        df, over = df.assign(__dpv_num__distance="1"), {"extra_columns": "ignore"}
    spec, wh, res = ingested(tmp_path, df, **over)
    ref = reference_validate(load_raw(wh, res), spec)
    assert ref["table_failures"] or ref["ignored_columns"]
    for rows in (4, 50):
        out = validate_table(wh, res, spec, rows=rows)
        assert_same(tmp_path, wh, res, spec, out, ref, n_chunks=max(1, -(-len(df) // rows)))
        if ref["table_failures"]:
            with pytest.raises(V.ValidationFailed):
                enforce(out, spec)


# --------------------------------------------------------------------------- the demo


def test_demo_sample_equals_the_whole_table(tmp_path, small_spec_path):
    """The first 3,000 NYC flights under the demo spec (cancelled flights quarantined)."""
    spec = load_spec(small_spec_path)
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    ref = reference_validate(load_raw(wh, res), spec)
    assert ref["n_rejected"] > 0
    for rows in (997, 3000):
        assert_same(tmp_path, wh, res, spec, validate_table(wh, res, spec, rows=rows), ref, -(-3000 // rows))
    assert latest_passing_summary(wh, res, spec) == owner_summary(wh, res, spec)


@pytest.mark.skipif(not os.environ.get("DPR_SCALE_TESTS"), reason="minutes on a shared machine: set DPR_SCALE_TESTS=1")
def test_full_demo_equals_the_whole_table(tmp_path):
    """The whole bundled demo (336,776 flights) in chunks of a prime size."""
    root = Path(__file__).resolve().parents[1]
    spec = load_spec(root / "specs" / "demo.yaml")
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    ref = reference_validate(load_raw(wh, res), spec)
    rows = 65_521
    assert_same(tmp_path, wh, res, spec, validate_table(wh, res, spec, rows=rows), ref, -(-ref["n_rows"] // rows))


# --------------------------------------------------------------------------- storing


def test_a_failed_store_leaves_the_previous_tables(tmp_path, monkeypatch):
    """Rows are appended chunk by chunk inside one transaction: a failure half way rolls everything back."""
    df = random_table(np.random.default_rng(7), 30)
    spec, wh, res = ingested(tmp_path, df)
    validate_table(wh, res, spec, rows=30)
    name = validated_table_name(res, spec)
    before = [table_and_types(wh, f'{s}."{name}"') for s in ("validated", "quarantine")]
    n_results = wh.query("SELECT count(*) FROM internal.validation_results")[0][0]
    n_chunk_rows = wh.query("SELECT count(*) FROM internal.validation_result_chunks")[0][0]

    real = V._store

    def store_then_fail(wh_, ing, spec_, outcome, chunks):
        broken = list(chunks)
        broken[-1] = V._ChunkRows(broken[-1].validated, broken[-1].quarantine, tmp_path / "gone.json",
                                  broken[-1].n_quarantine, broken[-1].first_row, broken[-1].last_row)
        return real(wh_, ing, spec_, outcome, broken)

    monkeypatch.setattr("dpcore.validation.chunked._store", store_then_fail)  # where validate_table looks it up
    with pytest.raises(FileNotFoundError):
        validate_table(wh, res, spec, rows=7)  # chunks 0-3 written, the last one fails
    after = [table_and_types(wh, f'{s}."{name}"') for s in ("validated", "quarantine")]
    for (a, at), (b, bt) in zip(before, after):
        pd.testing.assert_frame_equal(a, b)
        assert at == bt
    assert wh.query("SELECT count(*) FROM internal.validation_results")[0][0] == n_results
    assert wh.query("SELECT count(*) FROM internal.validation_result_chunks")[0][0] == n_chunk_rows
    assert not list((wh.path.parent / f"{wh.path.name}.scratch").glob("*/*"))  # the scratch files are gone


def test_store_outcome_of_the_in_memory_path_matches(tmp_path):
    df = random_table(np.random.default_rng(11), 25)
    spec, wh, res = ingested(tmp_path, df)
    raw = load_raw(wh, res)
    ref = reference_validate(raw, spec)
    out = validate(raw, spec)
    store_outcome(wh, res, spec, out)
    name = validated_table_name(res, spec)
    ref_v, ref_vt, ref_q, ref_qt = reference_tables(tmp_path, ref)
    got_v, got_vt = table_and_types(wh, f'validated."{name}"')
    got_q, got_qt = table_and_types(wh, f'quarantine."{name}"')
    assert (got_vt, got_qt) == (ref_vt, ref_qt)
    pd.testing.assert_frame_equal(got_v, ref_v)
    pd.testing.assert_frame_equal(got_q, ref_q)
    with pytest.raises(ValueError, match="holds no rows"):
        store_outcome(wh, res, spec, validate_table(wh, res, spec, rows=5))


def _process_pool_mapper(fn, items):
    with ProcessPoolExecutor(max_workers=2) as pool:
        return list(pool.map(fn, items))


def test_chunks_run_in_other_processes(tmp_path):
    """The chunk work pickles (a Dask mapper runs it on workers): a process pool gives the same result."""
    df = random_table(np.random.default_rng(13), 20)
    spec, wh, res = ingested(tmp_path, df)
    ref = reference_validate(load_raw(wh, res), spec)
    out = validate_table(wh, res, spec, rows=6, mapper=_process_pool_mapper)
    assert_same(tmp_path, wh, res, spec, out, ref, n_chunks=4)


@pytest.mark.parametrize("by_values", [True, False])
def test_chunks_run_in_a_child_process(tmp_path, by_values):
    """Under a small cap the great-expectations chunks run in one child process (dpcore.runtime.child_map): the same
    tables, summaries and details as the whole-table reference, by distinct values and chunk by chunk."""
    from dpcore.runtime.child_map import child_map

    df = random_table(np.random.default_rng(17), 23)
    spec, wh, res = ingested(tmp_path, df)
    ref = reference_validate(load_raw(wh, res), spec)
    out = validate_table(wh, res, spec, rows=6, mapper=child_map, by_values=by_values)
    assert_same(tmp_path, wh, res, spec, out, ref, n_chunks=4, by_values_allowed=by_values)


def test_chunk_rows_are_public(monkeypatch):
    """Rows per chunk depend on the memory cap and the columns only."""
    from dpcore.runtime.chunks import MemoryBudget

    spec = make_spec(Path("/nonexistent.csv"))
    small = V.validation_chunk_rows(MemoryBudget(256 * 1024**2), spec, 7)
    big = V.validation_chunk_rows(MemoryBudget(4 * 1024**3), spec, 7)
    assert 4096 <= small < big
    assert V.validation_chunk_rows(MemoryBudget(4 * 1024**3), spec, 20) < big


# --------------------------------------------------------------------------- privacy


def test_chunked_path_logs_no_value_and_no_count(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    df = random_table(np.random.default_rng(17), 30)
    spec, wh, res = ingested(tmp_path, df)
    out = validate_table(wh, res, spec, rows=4)
    assert out.n_rejected > 0
    assert SECRET not in caplog.text
    for n in {out.n_rows, out.n_valid, out.n_rejected}:
        assert not re.search(rf"\b{n}\b", " ".join(r.getMessage() for r in caplog.records
                                                      if r.name.startswith("dpcore")))
    # the summary carries no cell value; the values stay in the warehouse
    assert SECRET not in json.dumps(out.summary())
