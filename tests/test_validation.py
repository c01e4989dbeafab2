"""Unit tests for dpcore.validation on small in-test DataFrames."""
from __future__ import annotations

import json
import re
import logging
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpcore.ingest.raw import ingest, load_raw, raw_digest
from dpcore.release.spec import parse_spec
from dpcore.validation import (
    NUMBER_PATTERN,
    RuleSummary,
    ValidationFailed,
    build_suite,
    enforce,
    store_outcome,
    validate,
    validated_table_name,
)
from dpcore.storage.warehouse import Warehouse

SECRET = "SECRET123"


def make_spec(**over) -> object:
    data = {
        "release_id": "unit-r1",
        "dataset": {"name": "unit", "source": {"kind": "csv", "path": "/nonexistent.csv"}, "record_id": "id"},
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
        "steps": {"validation": {"max_rejected_fraction": 0.25, "examples_per_rule": 2}},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            data[section] = {**data[section], name: value}
        else:
            data[section] = value
    return parse_spec(data)


GOOD = {"id": "r1", "carrier": "AA", "month": "1", "code": "x", "distance": "100", "delay": "-3.5"}


def frame(*rows: dict, n_good: int = 0) -> pd.DataFrame:
    """Text frame like load_raw gives: ``_row`` then the cells; good rows (ids g0..) first, then ``rows`` (ids b0..)."""
    recs = [{**GOOD, "id": f"g{i}"} for i in range(n_good)]
    recs += [{**GOOD, "id": f"b{j}", **r} for j, r in enumerate(rows)]
    df = pd.DataFrame(recs, columns=list(GOOD)).astype("str")
    df.insert(0, "_row", np.arange(1, len(df) + 1, dtype="int64"))
    return df


def rules_of(outcome) -> set[tuple[int, str, str]]:
    qt = outcome.quarantine
    return set(zip(qt["_row"].tolist(), qt["rule"], qt["column"]))


# --------------------------------------------------------------------------- each rule


@pytest.mark.parametrize(
    "cells, expected",
    [
        ({"carrier": ""}, {("not_null", "carrier")}),
        ({"carrier": "ZZ"}, {("in_domain", "carrier")}),
        ({"carrier": "aa"}, {("in_domain", "carrier")}),
        ({"month": "4"}, {("in_domain", "month")}),
        ({"month": "01"}, {("in_domain", "month")}),  # text forms: str(1) == "1" only
        ({"month": "1.0"}, {("in_domain", "month")}),
        ({"code": "2"}, {("in_domain", "code")}),
        ({"id": ""}, {("not_null", "id")}),
        ({"id": '=HYPERLINK("http://x","y")'}, {("id_pattern", "id")}),
        ({"id": "a b"}, {("id_pattern", "id")}),
        ({"distance": ""}, {("not_null", "distance")}),
        ({"distance": "abc"}, {("number", "distance")}),
        ({"distance": "nan"}, {("number", "distance")}),
        ({"distance": "inf"}, {("number", "distance")}),
        ({"distance": "-Infinity"}, {("number", "distance")}),
        ({"distance": " 5"}, {("number", "distance")}),
        ({"distance": "1,000"}, {("number", "distance")}),
        ({"distance": "0x10"}, {("number", "distance")}),
        ({"distance": "1e400"}, {("finite", "distance"), ("in_bounds", "distance")}),
        ({"delay": "-1e400"}, {("finite", "delay"), ("in_bounds", "delay")}),
        ({"distance": "99999999999999999999"}, {("in_bounds", "distance")}),
        ({"distance": "5000.5"}, {("integer", "distance"), ("in_bounds", "distance")}),
        ({"distance": "12.5"}, {("integer", "distance")}),
        ({"distance": "-1"}, {("in_bounds", "distance")}),
        ({"delay": "100.0001"}, {("in_bounds", "delay")}),
    ],
)
def test_each_rule_triggers(cells, expected):
    spec = make_spec()
    out = validate(frame(cells, n_good=3), spec)
    assert rules_of(out) == {(4, r, c) for r, c in expected}
    assert out.n_rows == 4 and out.n_valid == 3 and out.n_rejected == 1
    assert 4 not in out.validated["_row"].tolist()
    assert {(f.rule, f.column) for f in out.row_failures} == expected
    assert all(f.example_rows == [4] and f.count == 1 for f in out.row_failures)
    assert out.table_failures == []


@pytest.mark.parametrize(
    "cells",
    [
        {"distance": "5000"},
        {"distance": "0"},
        {"distance": "1.2e3"},
        {"distance": "+7"},
        {"distance": "12.0"},  # whole number written with a decimal point
        {"delay": ""},  # nullable
        {"delay": "-100"},
        {"delay": ".5"},
        {"code": ""},  # nullable categorical
        {"code": "1"},
        {"id": "A-1_b.c:d"},
    ],
)
def test_valid_edge_values_pass(cells):
    out = validate(frame(cells, n_good=2), make_spec())
    assert out.ok, out.summary_text()
    assert out.n_valid == 3 and len(out.quarantine) == 0


def test_number_pattern_is_anchored():
    import re

    assert re.search(NUMBER_PATTERN, "12")
    assert not re.search(NUMBER_PATTERN, "12\n")
    assert not re.search(NUMBER_PATTERN, "x12")


def test_duplicate_ids_reject_every_copy():
    out = validate(frame({"id": "dup"}, {"id": "dup"}, {"id": "other"}, n_good=1), make_spec())
    assert rules_of(out) == {(2, "unique", "id"), (3, "unique", "id")}
    assert out.quarantine.set_index("_row").loc[2, "record_id"] == "dup"
    assert out.validated["id"].tolist() == ["g0", "other"]


def test_multi_rule_row_appears_once_per_rule_and_nothing_is_lost():
    bad = {"id": "", "carrier": SECRET, "month": "9", "distance": "abc", "delay": "1e400"}
    out = validate(frame(bad, {"distance": "-5"}, n_good=4), make_spec())
    assert rules_of(out) == {
        (5, "not_null", "id"),
        (5, "in_domain", "carrier"),
        (5, "in_domain", "month"),
        (5, "number", "distance"),
        (5, "finite", "delay"),
        (5, "in_bounds", "delay"),
        (6, "in_bounds", "distance"),
    }
    qt = out.quarantine
    assert list(qt.columns) == ["_row", "record_id", "rule", "column", "cells"]
    assert qt[qt["_row"] == 5]["record_id"].isna().all()  # empty id -> None
    cells = json.loads(qt[qt["_row"] == 5]["cells"].iloc[0])
    assert cells == {**GOOD, **bad}  # the row's raw cells, exactly as input
    assert out.n_valid + qt["_row"].nunique() == out.n_rows == 6
    assert set(out.validated["_row"]) == {1, 2, 3, 4}
    counts = {(f.rule, f.column): f.count for f in out.row_failures}
    assert counts[("in_bounds", "distance")] == 1 and counts[("number", "distance")] == 1


def test_example_rows_are_capped_and_sorted():
    out = validate(frame(*[{"carrier": "ZZ"}] * 5, n_good=1), make_spec())
    (f,) = out.row_failures
    assert f == RuleSummary("in_domain", "carrier", 5, [2, 3])  # examples_per_rule = 2


# --------------------------------------------------------------------------- typing


def test_typed_output():
    out = validate(frame({"code": ""}, {"code": "1", "delay": ""}, n_good=2), make_spec())
    v = out.validated
    assert list(v.columns) == ["_row", "id", "carrier", "month", "code", "distance", "delay"]
    assert v["_row"].dtype == np.int64
    assert pd.api.types.is_string_dtype(v["id"]) and pd.api.types.is_string_dtype(v["carrier"])
    assert v["month"].dtype == np.int64 and v["month"].tolist() == [1, 1, 1, 1]
    assert pd.api.types.is_string_dtype(v["code"])  # mixed int/str domain -> str
    assert v["code"].iloc[3] == "1" and pd.isna(v["code"].iloc[2])
    assert v["distance"].dtype == np.float64 and v["distance"].tolist() == [100.0] * 4
    assert v["delay"].dtype == np.float64 and np.isnan(v["delay"].iloc[3])
    assert v["delay"].iloc[0] == -3.5


def test_nullable_int_categorical_is_Int64():
    spec = make_spec(schema={"categorical": {"month": {"domain": [1, 2], "nullable": True}}, "numeric": {}})
    raw = pd.DataFrame({"_row": [1, 2], "id": ["a", "b"], "month": ["2", ""]})
    out = validate(raw, spec)
    assert out.ok
    assert str(out.validated["month"].dtype) == "Int64"
    assert out.validated["month"].iloc[0] == 2 and pd.isna(out.validated["month"].iloc[1])


def test_typed_input_like_parquet():
    """Parquet keeps its types: cells are compared as text (1.0 -> "1")."""
    raw = pd.DataFrame(
        {
            "_row": np.arange(1, 6),
            "id": ["a", "b", "c", "d", "e"],
            "carrier": ["AA", "UA", "B6", None, "AA"],
            "month": [1.0, 2.0, 3.0, 1.0, 2.5],
            "code": pd.array([1, None, 1, 1, 1], dtype="Int64"),
            "distance": np.array([10, 20, 30, 40, 50], dtype="int64"),
            "delay": [0.5, np.nan, np.inf, 1.0, 2.0],
        }
    )
    out = validate(raw, make_spec())
    assert rules_of(out) == {(3, "number", "delay"), (4, "not_null", "carrier"), (5, "in_domain", "month")}
    assert out.validated["month"].tolist() == [1, 2]
    assert out.validated["distance"].tolist() == [10.0, 20.0]
    assert out.validated["code"].tolist()[0] == "1"


# --------------------------------------------------------------------------- table level


def test_missing_column_is_a_table_failure():
    raw = frame(n_good=3).drop(columns=["delay"])
    out = validate(raw, make_spec())
    assert [(f.rule, f.column) for f in out.table_failures] == [("column_exists", "delay")]
    assert out.n_valid == 0  # nothing can be typed without the column; enforce stops the run
    with pytest.raises(ValidationFailed, match=r"column_exists[\s\S]*'delay'"):
        enforce(out, make_spec())


def test_empty_table():
    out = validate(frame(n_good=0), make_spec())
    assert [(f.rule, f.column) for f in out.table_failures] == [("row_count", None)]
    assert out.n_rows == 0 and len(out.validated) == 0 and len(out.quarantine) == 0
    with pytest.raises(ValidationFailed, match="row_count"):
        enforce(out, make_spec())


def test_extra_columns_error_and_ignore():
    raw = frame(n_good=2).assign(notes=SECRET, other="x")
    out = validate(raw, make_spec())
    assert sorted((f.rule, f.column) for f in out.table_failures) == [("extra_columns", "notes"), ("extra_columns", "other")]
    with pytest.raises(ValidationFailed, match="extra_columns") as ei:
        enforce(out, make_spec())
    assert SECRET not in str(ei.value)

    spec = make_spec(dataset__extra_columns="ignore")
    out = validate(raw, spec)
    assert out.table_failures == [] and out.ignored_columns == ["notes", "other"]
    assert "notes" not in out.validated.columns and out.n_valid == 2
    assert "ignored extra columns" in out.summary_text() and "'notes'" in out.summary_text()
    assert out.summary()["ignored_columns"] == ["notes", "other"]
    enforce(out, spec)


def test_reserved_column_name():
    raw = frame(n_good=1).assign(__dpv_num__distance="1")
    out = validate(raw, make_spec(dataset__extra_columns="ignore"))
    assert ("reserved_column", "__dpv_num__distance") in [(f.rule, f.column) for f in out.table_failures]


def test_raw_without_row_column_is_a_programming_error():
    with pytest.raises(ValueError, match="_row"):
        validate(frame(n_good=1).drop(columns=["_row"]), make_spec())


# --------------------------------------------------------------------------- build_suite


def test_build_suite_generated_from_spec():
    suite = build_suite(make_spec())
    metas = [(e.expectation_type, e.meta["rule"], e.meta["column"]) for e in suite.expectations]
    assert ("expect_column_to_exist", "column_exists", "delay") in metas
    assert ("expect_table_row_count_to_be_between", "row_count", None) in metas
    assert ("expect_table_columns_to_match_set", "extra_columns", None) in metas
    assert ("expect_column_values_to_be_unique", "unique", "id") in metas
    assert ("expect_column_values_to_match_regex", "id_pattern", "id") in metas
    assert ("expect_column_values_to_be_in_set", "in_domain", "month") in metas
    assert ("expect_column_pair_values_to_be_equal", "integer", "distance") in metas
    assert not any(r == "integer" and c == "delay" for _, r, c in metas)  # not integer: true
    assert not any(r == "not_null" and c in ("delay", "code") for _, r, c in metas)  # nullable
    in_set = next(e for e in suite.expectations if e.meta == {"rule": "in_domain", "column": "month"})
    assert in_set.value_set == ["1", "2", "3"]
    bounds = next(e for e in suite.expectations if e.meta == {"rule": "in_bounds", "column": "distance"})
    assert (bounds.min_value, bounds.max_value) == (0, 5000)
    # no extra_columns expectation when extras are ignored; no row rules for absent columns
    suite2 = build_suite(make_spec(dataset__extra_columns="ignore"), present_columns=["_row", "id", "carrier"])
    metas2 = {(e.meta["rule"], e.meta["column"]) for e in suite2.expectations}
    assert ("extra_columns", None) not in metas2
    assert ("column_exists", "delay") in metas2 and ("number", "delay") not in metas2


def test_nothing_written_to_disk(tmp_path, monkeypatch):
    work, tmp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    validate(frame({"carrier": "ZZ"}, n_good=2), make_spec())
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []


# --------------------------------------------------------------------------- privacy


def test_summary_and_exception_carry_no_cell_values():
    rows = [{"carrier": SECRET}, {"distance": SECRET}, {"id": SECRET + "!"}, {"month": SECRET}]
    out = validate(frame(*rows, n_good=2), make_spec())
    text, summary = out.summary_text(), json.dumps(out.summary())
    assert SECRET not in text and SECRET not in summary
    assert "in_domain" in text and "'carrier'" in text and "number" in text and "data row 3" in text
    enforce(out, make_spec())  # row-level failures never stop a run publicly (the noisy gate decides)
    out.table_failures.append(RuleSummary("column_exists", "delay", 1, []))
    with pytest.raises(ValidationFailed) as ei:
        enforce(out, make_spec())
    msg = str(ei.value)
    assert SECRET not in msg and SECRET not in repr(ei.value)
    # rule and column names only: no count, no row number, no row-level rule (issue 15, hole 8)
    assert "column_exists" in msg and "'delay'" in msg
    assert not re.search(r"\d", msg.replace("validation of dataset", "")), msg
    assert "id_pattern" not in msg and "in_domain" not in msg
    # the values are kept, but only where they belong (warehouse quarantine / internal)
    assert SECRET in json.dumps(out.full_result)
    assert out.quarantine["cells"].str.contains(SECRET).all()
    # a pickled exception (Prefect stores failed runs' exceptions) drops the outcome
    clone = pickle.loads(pickle.dumps(ei.value))
    assert isinstance(clone, ValidationFailed) and clone.outcome is None and str(clone) == msg
    assert SECRET.encode() not in pickle.dumps(ei.value)
    assert ei.value.outcome is out


def test_logs_carry_no_cell_values(caplog):
    caplog.set_level(logging.DEBUG)  # great-expectations logs a lot at DEBUG: none of it may hold values
    out = validate(frame({"carrier": SECRET}, {"distance": SECRET}, n_good=2), make_spec())
    assert out.n_rejected == 2
    assert caplog.records and SECRET not in caplog.text


# --------------------------------------------------------------------------- enforce


def test_enforce_never_stops_on_exact_rejected_fraction():
    """Hole 8 (issue 15): a stop decided on exact counts publishes them; the gate runs on the noisy
    record counts instead (tests/test_flows.py::test_rejected_fraction_gate_uses_the_noisy_counts_and_keeps_the_charged_counts), so enforce() ignores the rejected fraction."""
    spec = make_spec()  # max_rejected_fraction 0.25
    above = validate(frame({"carrier": "ZZ"}, {"month": "7"}, n_good=4), spec)  # 2/6 exactly
    assert above.rejected_fraction > 0.25
    enforce(above, spec)
    enforce(above, make_spec(steps={"validation": {"max_rejected_fraction": 0.0}}))


# --------------------------------------------------------------------------- store_outcome


def test_store_outcome_writes_three_tables_and_leaves_raw_alone(tmp_path: Path):
    csv = tmp_path / "in.csv"
    csv.write_text(
        "id,carrier,month,code,distance,delay\n"
        "a,AA,1,x,100,1\n"
        "b,ZZ,2,,200,\n"
        f"c,{SECRET},3,1,abc,2\n"
        "d,UA,3,1,300,-2.5\n"
    )
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(csv)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    before = raw_digest(wh, res.table)
    out = validate(load_raw(wh, res), spec)
    names = store_outcome(wh, res, spec, out)
    assert raw_digest(wh, res.table) == before
    assert names == {
        "validated": f'validated."{validated_table_name(res, spec)}"',
        "quarantine": f'quarantine."{validated_table_name(res, spec)}"',
        "results": "internal.validation_results",
    }
    v = wh.query_df(f"SELECT * FROM {names['validated']} ORDER BY _row")
    assert v["_row"].tolist() == [1, 4] and v["month"].tolist() == [1, 3] and v["delay"].tolist() == [1.0, -2.5]
    qt = wh.query_df(f"SELECT * FROM {names['quarantine']} ORDER BY _row, rule")
    assert list(zip(qt["_row"], qt["rule"], qt["column"])) == [
        (2, "in_domain", "carrier"), (3, "in_domain", "carrier"), (3, "number", "distance")
    ]
    assert json.loads(qt["cells"].iloc[1])["carrier"] == SECRET and qt["record_id"].tolist() == ["b", "c", "c"]
    r = wh.query("SELECT content_hash, spec_hash, created_at, result_json, summary_json FROM internal.validation_results")
    assert len(r) == 1
    assert r[0][0] == res.content_hash and r[0][1] == spec.validation_hash() and r[0][2] is not None
    assert json.loads(r[0][3])["success"] is False
    assert SECRET not in r[0][4]
    # re-deriving replaces validated/quarantine (no duplicates); results are appended
    store_outcome(wh, res, spec, out)
    assert wh.query(f"SELECT count(*) FROM {names['quarantine']}")[0][0] == 3
    assert wh.query("SELECT count(*) FROM internal.validation_results")[0][0] == 2
    assert raw_digest(wh, res.table) == before
    assert wh.query("SELECT count(*) FROM raw.ingests")[0][0] == 1


def test_store_outcome_with_empty_quarantine(tmp_path: Path):
    csv = tmp_path / "in.csv"
    csv.write_text("id,carrier,month,code,distance,delay\na,AA,1,x,100,1\n")
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(csv)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    out = validate(load_raw(wh, res), spec)
    names = store_outcome(wh, res, spec, out)
    assert wh.query(f"SELECT count(*) FROM {names['quarantine']}")[0][0] == 0
    assert wh.query(f"SELECT count(*) FROM {names['validated']}")[0][0] == 1


def test_id_pattern_is_anchored_at_the_very_end():
    """Python's ``$`` also matches before a trailing newline; the id rule must not."""
    out = validate(frame({"id": "abc\n"}, n_good=3), make_spec())
    assert (4, "id_pattern", "id") in rules_of(out)


# --------------------------------------------------------------------------- any category text (issue 20, item 3)

AWKWARD = ["Unemployed, Laid Off", " Washington, D.C.", "trail space ", "a=b", "{brace}", 'quote"d', "pipe|bar",
           "Zürich ∧ ∈", "line\nbreak", "=SUM(A1)", "any", "∅", "\u00a0nbsp"]
# variants that are NOT in the domain: each must be quarantined as it is, never fixed
NEAR_MISSES = ["Washington, D.C.", " Washington, D.C. ", "trail space", "Unemployed,Laid Off", "Zu\u0308rich ∧ ∈",
               "quote'd", "pipe | bar", "nbsp", " any"]


def _awkward_spec(path: Path, kind: str) -> object:
    return make_spec(
        dataset={"name": "unit", "source": {"kind": kind, "path": str(path)}, "record_id": "id"},
        schema={"categorical": {"status": {"domain": ["Employed", *AWKWARD]}}, "numeric": {}},
    )


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_awkward_category_text_is_validated_exactly_and_never_modified(tmp_path: Path, kind: str):
    values = [*AWKWARD, *NEAR_MISSES]
    df = pd.DataFrame({"id": [f"r{i}" for i in range(len(values))], "status": values})
    path = tmp_path / f"in.{kind}"
    if kind == "csv":
        df.to_csv(path, index=False)  # pandas quotes the cells with commas, quotes and line breaks
        text = path.read_text(encoding="utf-8")
        assert '"Unemployed, Laid Off"' in text and '" Washington, D.C."' in text and '"quote""d"' in text
    else:
        df.to_parquet(path, index=False)
    spec = _awkward_spec(path, kind)
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    raw = load_raw(wh, res)
    assert raw["status"].tolist() == values  # ingest keeps every cell's exact text
    before = raw_digest(wh, res.table)
    out = validate(raw, spec)
    # every domain value passes, with its spaces, quotes and unicode as they are
    assert out.validated["status"].tolist() == AWKWARD
    # every near miss breaks the in-domain rule: nothing was stripped, normalised or otherwise fixed
    n = len(AWKWARD)
    assert rules_of(out) == {(n + 1 + j, "in_domain", "status") for j in range(len(NEAR_MISSES))}
    cells = [json.loads(c)["status"] for c in out.quarantine.sort_values("_row")["cells"]]
    assert cells == NEAR_MISSES
    store_outcome(wh, res, spec, out)
    v = wh.query_df(f'SELECT status FROM validated."{validated_table_name(res, spec)}" ORDER BY _row')
    assert v["status"].tolist() == AWKWARD
    assert raw_digest(wh, res.table) == before
    assert load_raw(wh, res)["status"].tolist() == values
    # the outcome's public summary names the rule and the column, never a value
    summary = json.dumps(out.summary())
    assert "in_domain" in summary and not any(v.strip() and v.strip() in summary for v in NEAR_MISSES)


def test_quoted_csv_cell_with_a_leading_space_is_read_as_written(tmp_path: Path):
    """A CSV written by hand: a quoted cell with a leading space, a doubled quote, a line break in quotes."""
    path = tmp_path / "in.csv"
    path.write_text('id,status\nr1," Washington, D.C."\nr2,"quote""d"\nr3,"line\nbreak"\nr4, Washington, D.C.\n',
                    encoding="utf-8")
    spec = _awkward_spec(path, "csv")
    wh = Warehouse(tmp_path / "w.duckdb")
    # r4: an unquoted comma makes a third field: an unreadable row (issue 46.3), its cells empty, its line kept
    first = ingest(spec, wh, tmp_path)
    assert load_raw(wh, first)["status"].tolist()[:3] == [" Washington, D.C.", 'quote"d', "line\nbreak"]
    assert load_raw(wh, first).iloc[3][["id", "status"]].isna().all()
    assert wh.query(f'SELECT _row, line, reason FROM raw."{first.table}__unreadable"') == [
        (4, 5, "more fields than the header")]
    path.write_text('id,status\nr1," Washington, D.C."\nr2,"quote""d"\nr3,"line\nbreak"\nr4, Washington\n',
                    encoding="utf-8")
    res = ingest(spec, wh, tmp_path)
    raw = load_raw(wh, res)
    assert raw["status"].tolist() == [" Washington, D.C.", 'quote"d', "line\nbreak", " Washington"]
    out = validate(raw, spec)
    assert out.validated["status"].tolist() == [" Washington, D.C.", 'quote"d', "line\nbreak"]
    assert rules_of(out) == {(4, "in_domain", "status")}
