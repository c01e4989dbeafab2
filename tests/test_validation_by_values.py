"""Validation by distinct values (issue 29) gives what chunk-by-chunk validation gives.

great-expectations runs on the distinct values of each attribute and on the ids' forms (the ids
themselves in chunks when the pattern gives no forms; tests/test_validation_id_forms.py), ``unique`` on
the duplicated ids; the verdicts are joined back to the rows in DuckDB. The result must be the old path's, row for row: the
same validated and quarantine tables (rows, order, types), the same summaries, and the same combined
great-expectations result (expectations, verdicts, counts, percentages, partial lists), on tables where
every row rule fails somewhere, for any chunk size (several frames of distinct values, padded), on
other processes, and on typed Parquet input. Where the path does not apply, the old one runs.
"""
from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import pytest

from dpcore import validation as V
from dpcore.ingest.raw import load_raw
from dpcore.validation import by_values as BV
from dpcore.validation import validated_rows as VR
from dpcore.validation import validate_table, validated_table_name
from test_validation_chunks import SECRET, assert_same, ingested, random_table, reference_validate, table_and_types


def stored(wh, res, spec) -> dict:
    """Everything a validation stored: tables with types, the summary, the combined result, the result rows."""
    name = validated_table_name(res, spec)
    v, vt = table_and_types(wh, f'validated."{name}"')
    q, qt = table_and_types(wh, f'quarantine."{name}"')
    (row,) = wh.query("SELECT n_rows, n_valid, n_rejected, summary_json, result_json, created_at "
                      "FROM internal.validation_results ORDER BY created_at DESC LIMIT 1")
    n_results = wh.query("SELECT count(*) FROM internal.validation_result_chunks WHERE created_at = ?", [row[5]])[0][0]
    return {"v": v, "vt": vt, "q": q, "qt": qt, "counts": row[:3], "summary": json.loads(row[3]),
            "result": json.loads(row[4]), "n_results": n_results}


def assert_equal_results(a: dict, b: dict) -> None:
    """Two stored validations are the same (the per-chunk result rows aside)."""
    assert (a["vt"], a["qt"]) == (b["vt"], b["qt"])
    pd.testing.assert_frame_equal(a["v"], b["v"])
    pd.testing.assert_frame_equal(a["q"], b["q"])
    assert a["counts"] == b["counts"] and a["summary"] == b["summary"]
    ra, rb = a["result"], b["result"]
    assert ra["success"] == rb["success"] and ra["statistics"] == rb["statistics"]
    ea, eb = ra["validation_results"][0]["expectations"], rb["validation_results"][0]["expectations"]
    assert [(e["expectation_type"], e["kwargs"], e["success"]) for e in ea] == \
        [(e["expectation_type"], e["kwargs"], e["success"]) for e in eb]
    for x, y in zip(ea, eb):
        assert x["result"].keys() == y["result"].keys(), x["expectation_type"]
        for key in x["result"]:
            if isinstance(x["result"][key], float):
                assert x["result"][key] == pytest.approx(y["result"][key]), (x["expectation_type"], key)
            else:
                assert x["result"][key] == y["result"][key], (x["expectation_type"], key)


@pytest.mark.parametrize("seed, n, rows", [(0, 60, 3), (1, 35, 1000), (4, 50, 7)])
def test_by_values_equals_chunk_by_chunk_on_every_kind_of_failure(tmp_path, seed, n, rows):
    df = random_table(np.random.default_rng(seed), n)
    spec, wh, res = ingested(tmp_path, df)
    columns = {str(d[0]): str(d[1]) for d in wh.query(f"DESCRIBE {res.qualified_table}")}
    assert BV.applies(columns, spec, n)
    old = validate_table(wh, res, spec, rows=rows, by_values=False)
    assert {f.rule for f in old.row_failures} == set(V.ROW_RULES)  # every row rule fails somewhere
    before = stored(wh, res, spec)
    new = validate_table(wh, res, spec, rows=rows)
    after = stored(wh, res, spec)
    assert_equal_results(after, before)
    assert new.row_failures == old.row_failures and new.table_failures == old.table_failures
    # great-expectations ran on the distinct values and id forms (frames of ``rows`` positions) and on the
    # duplicated ids in one chunk, not once per ``rows`` input rows
    most = max(wh.query(f'SELECT count(*) FROM (SELECT DISTINCT "{c}" FROM {res.qualified_table})')[0][0]
               for c in df.columns if c != "id")
    assert after["n_results"] == -(-most // rows) + 1
    # and it equals the whole-table great-expectations run that chunking replaced (tests/test_validation_chunks.py)
    assert_same(tmp_path, wh, res, spec, new, reference_validate(load_raw(wh, res), spec), n_chunks=0)


def test_by_values_with_extra_and_reserved_columns(tmp_path):
    df = random_table(np.random.default_rng(8), 30).assign(notes=SECRET, other="1")
    spec, wh, res = ingested(tmp_path, df, extra_columns="ignore")
    old = validate_table(wh, res, spec, rows=4, by_values=False)
    a = stored(wh, res, spec)
    new = validate_table(wh, res, spec, rows=4)
    assert_equal_results(stored(wh, res, spec), a)
    assert new.ignored_columns == old.ignored_columns == ["notes", "other"]
    df = df.assign(__dpv_num__distance="1")
    (tmp_path / "r").mkdir()
    spec, wh, res = ingested(tmp_path / "r", df, extra_columns="ignore")
    old = validate_table(wh, res, spec, rows=4, by_values=False)
    a = stored(wh, res, spec)
    new = validate_table(wh, res, spec, rows=4)
    assert_equal_results(stored(wh, res, spec), a)
    assert [f.rule for f in new.table_failures] == [f.rule for f in old.table_failures] == ["reserved_column"]


def _process_pool_mapper(fn, items):
    with ProcessPoolExecutor(max_workers=2) as pool:
        return list(pool.map(fn, items))


def test_by_values_on_other_processes(tmp_path):
    df = random_table(np.random.default_rng(13), 40)
    spec, wh, res = ingested(tmp_path, df)
    validate_table(wh, res, spec, rows=5, by_values=False)
    a = stored(wh, res, spec)
    validate_table(wh, res, spec, rows=5, mapper=_process_pool_mapper)
    assert_equal_results(stored(wh, res, spec), a)


def test_typed_parquet_with_integer_ids_and_columns(tmp_path):
    """Integer ids (repeated, missing) and integer / text columns with nulls: grouped by DuckDB as pandas reads them."""
    n = 45
    rng = np.random.default_rng(21)
    df = pd.DataFrame({
        "id": pd.array(rng.integers(0, 35, n), dtype="Int64"),
        "carrier": rng.choice(["AA", "UA", "ZZ", None, ""], n),
        "month": pd.array(rng.choice([1, 2, 3, 4, None], n), dtype="Int64"),
        "code": pd.array(rng.choice([1, 2, None], n), dtype="Int64"),
        "distance": rng.integers(-5, 6000, n),
        "delay": pd.array(rng.choice([0, -150, 99, None], n), dtype="Int64"),
    })
    df.loc[3, "id"] = pd.NA
    spec, wh, res = ingested(tmp_path, df, kind="parquet", record_id_pattern=r"[0-9]+")
    columns = {str(d[0]): str(d[1]) for d in wh.query(f"DESCRIBE {res.qualified_table}")}
    assert BV.applies(columns, spec, n)
    for rows in (2, n):
        old = validate_table(wh, res, spec, rows=rows, by_values=False)
        assert {"unique", "in_domain", "in_bounds", "not_null"} <= {f.rule for f in old.row_failures}
        a = stored(wh, res, spec)
        validate_table(wh, res, spec, rows=rows)
        assert_equal_results(stored(wh, res, spec), a)


@pytest.mark.parametrize("case", ["float_column", "float_ids", "missing_column", "empty"])
def test_the_chunked_path_runs_where_values_do_not_group_exactly(tmp_path, case):
    """Floats (NaN, -0.0), a missing column and an empty table: chunk by chunk, as before (same stored rows)."""
    df = random_table(np.random.default_rng(3), 12, p_dup=0.0)
    kind = "csv"
    if case == "float_column":
        df, kind = df.assign(delay=np.where(np.arange(12) % 2, -0.0, np.nan), distance="5"), "parquet"
    elif case == "float_ids":
        df, kind = df.assign(id=np.arange(12) + 0.5), "parquet"
    elif case == "missing_column":
        df = df.drop(columns=["delay"])
    else:
        df = df.iloc[:0]
    spec, wh, res = ingested(tmp_path, df, kind=kind, **({"record_id_pattern": r"[0-9.]+"} if case == "float_ids" else {}))
    columns = {str(d[0]): str(d[1]) for d in wh.query(f"DESCRIBE {res.qualified_table}")}
    assert not BV.applies(columns, spec, len(df))
    validate_table(wh, res, spec, rows=5, by_values=False)
    a = stored(wh, res, spec)
    validate_table(wh, res, spec, rows=5)
    b = stored(wh, res, spec)
    assert_equal_results(b, a)
    assert b["n_results"] == a["n_results"] == max(1, -(-len(df) // 5))


def test_a_column_with_more_values_than_a_chunk_holds_is_validated_chunk_by_chunk(tmp_path, monkeypatch):
    """The per-value arrays stay within a chunk's share of the cap: past it, the chunked path runs (same result)."""
    df = random_table(np.random.default_rng(5), 30)
    spec, wh, res = ingested(tmp_path, df)
    validate_table(wh, res, spec, rows=4, by_values=False)
    a = stored(wh, res, spec)
    validate_table(wh, res, spec, rows=4)
    assert stored(wh, res, spec)["n_results"] < a["n_results"]  # by values: fewer great-expectations runs
    monkeypatch.setattr("dpcore.validation.chunked.validation_chunk_rows", lambda *args: 3)
    validate_table(wh, res, spec, rows=4)
    b = stored(wh, res, spec)
    assert_equal_results(b, a)
    assert b["n_results"] == a["n_results"] == -(-30 // 4)


def _spy(monkeypatch, name: str) -> list:
    """Record the calls of ``by_values.<name>`` (still calling it)."""
    calls, real = [], getattr(BV, name)

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out)
        return out

    monkeypatch.setattr(BV, name, spy)
    return calls


@pytest.mark.parametrize("per", [7, 1 << 20])
def test_validated_rows_are_written_range_by_range_with_numbers_cast_by_duckdb(tmp_path, monkeypatch, per):
    """Numbers typed by DuckDB's cast (checked against pandas, value by value), one statement per ``_row`` range
    of ``per`` rows: the same validated table (rows, order, types) as before."""
    df = random_table(np.random.default_rng(31), 60)
    spec, wh, res = ingested(tmp_path, df)
    validate_table(wh, res, spec, rows=4, by_values=False)
    a = stored(wh, res, spec)
    monkeypatch.setattr(BV, "sorted_rows", lambda memory: per)
    ranges = _spy(monkeypatch, "_validated_in_ranges")
    validate_table(wh, res, spec, rows=4)
    assert_equal_results(stored(wh, res, spec), a)
    (statements,) = ranges
    assert len(statements) == -(-60 // per)
    assert all("TRY_CAST(NULLIF(r.\"distance\", '') AS DOUBLE)" in s.sql and "typed-" not in s.sql for s in statements)


def test_ranges_are_sized_by_duckdbs_memory_share():
    from dpcore.runtime.chunks import MemoryBudget

    assert VR.sorted_rows(MemoryBudget(2 << 30)) == (512 << 20) // VR.SORT_BYTES_PER_ROW == 2_097_152
    assert VR.sorted_rows(MemoryBudget(64 << 20)) == 122_880  # at least one row group


def test_a_cast_that_differs_from_pandas_types_by_joins(tmp_path, monkeypatch):
    """Where DuckDB's cast of a passing value is not pandas' value bit for bit, the values are joined (as before)."""
    df = random_table(np.random.default_rng(32), 40)
    spec, wh, res = ingested(tmp_path, df)
    validate_table(wh, res, spec, rows=5, by_values=False)
    a = stored(wh, res, spec)
    monkeypatch.setattr(BV, "_casts_agree", lambda *args: False)
    monkeypatch.setattr(BV, "sorted_rows", lambda memory: 9)
    ranges = _spy(monkeypatch, "_validated_in_ranges")
    validate_table(wh, res, spec, rows=5)
    assert_equal_results(stored(wh, res, spec), a)
    (statements,) = ranges
    assert len(statements) == 5 and all("typed-" in s.sql and "TRY_CAST" not in s.sql for s in statements)


def test_casts_agree_compares_bits_and_missing_values(tmp_path):
    path = tmp_path / "values.parquet"
    pd.DataFrame({"pos": [1, 2, 3, 4], "v": ["0.1", "-0", "", "1e3"]}).to_parquet(path, index=False)
    cast = VR._inline_sql("v", "VARCHAR")
    typed = pd.DataFrame({"pos": [1, 2, 3, 4], "t": [0.1, -0.0, np.nan, 1000.0]})
    assert VR._casts_agree(path, typed, cast)
    assert VR._casts_agree(path, typed.iloc[[0, 3]], cast)  # only the positions given are compared
    assert not VR._casts_agree(path, typed.assign(t=[0.1, 0.0, np.nan, 1000.0]), cast)  # the sign of zero
    assert not VR._casts_agree(path, typed.assign(t=[np.nextafter(0.1, 1), -0.0, np.nan, 1000.0]), cast)  # 1 ulp
    assert not VR._casts_agree(path, typed.assign(t=[0.1, -0.0, 0.0, 1000.0]), cast)  # missing against a value
    assert VR._inline_sql("v", "BIGINT") == "CAST(v AS DOUBLE)" and VR._inline_sql("v", "BOOLEAN") is None
