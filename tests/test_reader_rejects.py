"""A row the CSV reader cannot parse is a rejected row, not a refused input (issue 46.3); inputs at the
reader's limits (issue 47.4).

Neighbouring inputs that differ in one line (a Latin-1 byte in a cell, a row with an extra field, a CRLF line
among LF lines, a row over the reader's length limit) both ingest, validate and pass the run's stop rules
(:func:`dpcore.validation.enforce`) the same way: the same number of input rows, the same stored tables, the
unreadable row quarantined with its line and reason for the owner. One real flow run on an input holding
three kinds of unreadable rows completes, charges and publishes, and ``dpr validation show`` lists the rows
with their lines and reasons. What may still refuse an input is its header and an input that is not of the
declared kind (docs/sources.md, "Accepted CSV files").
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import dpcore.ingest.raw as ingest_mod
from dpcore.ingest.raw import IngestError, ingest, raw_digest
from dpcore.release.spec import load_spec
from dpcore.steps.common import quarantine_table, validated_table
from dpcore.validation import enforce
from dpcore.validation.chunked import validate_table
from dpcore.storage.warehouse import Warehouse

CORPUS = Path(__file__).parent / "bad_inputs"
GOOD = (CORPUS / "good.csv").read_bytes()
DPR = str(Path(sys.executable).parent / "dpr")

#: (one line of good.csv changed -> its unreadable reason), the neighbours of issue 46.3.
CHANGES = {
    "latin1_byte": (lambda ln: ln.replace(b",UA,", b",U\xc9,", 1), "not UTF-8 text"),
    "extra_field": (lambda ln: ln + b",EXTRA", "more fields than the header"),
    "crlf_line": (lambda ln: ln + b"\r", "its line end (CRLF) differs from the header line's"),
    "over_length_limit": (lambda ln: ln.replace(b",UA,", b",UA" + b" " * 300 + b",", 1),
                          "longer than the reader's row limit"),
}
CHANGED_LINE = 3  # the file's third line: the second data row (F000002)


def _neighbour(change) -> bytes:
    lines = GOOD.split(b"\n")
    lines[CHANGED_LINE - 1] = change(lines[CHANGED_LINE - 1])
    return b"\n".join(lines)


def _run_stages(data: bytes, folder: Path):
    """ingest -> validate (the run's chunked path) -> store -> enforce, on ``data`` under the corpus's spec."""
    folder.mkdir()
    path = folder / "in.csv"
    path.write_bytes(data)
    base = yaml.safe_load((CORPUS / "base_spec.yaml").read_text())
    spec = load_spec(CORPUS / "base_spec.yaml", dataset={**base["dataset"], "source": {"kind": "csv", "path": str(path)}})
    wh = Warehouse(folder / "w.duckdb")
    res = ingest(spec, wh, folder)
    before = raw_digest(wh, res.table)
    outcome = validate_table(wh, res, spec)  # stores the validated and quarantine tables itself
    tables = {"validated": validated_table(spec, res), "quarantine": quarantine_table(spec, res)}
    enforce(outcome, spec)  # the run's stop: raises on a header-level failure only
    assert raw_digest(wh, res.table) == before and path.read_bytes() == data  # nothing modified
    return wh, res, outcome, tables


def _kinds_of_tables(wh: Warehouse) -> list[tuple[str, str]]:
    """(schema, table name with the random storage nonce and the spec hash masked) of every table made."""
    return sorted((s, re.sub(r"__v[0-9a-f]+$", "__v<spec>", re.sub(r"__[0-9a-f]{16}", "__<nonce>", t))) for s, t in wh.query(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary"))


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_neighbours_differing_in_one_unreadable_line_both_go_through(name, tmp_path, monkeypatch):
    change, reason = CHANGES[name]
    monkeypatch.setattr(ingest_mod, "MAX_ROW_BYTES", 256)  # the over-length row has 300 bytes; the others < 64
    wh_a, _, a, _ = _run_stages(GOOD, tmp_path / "a")
    wh_b, res_b, b, tables_b = _run_stages(_neighbour(change), tmp_path / "b")
    # the same number of input rows (what the noisy record counts measure), one row less accepted
    assert (b.n_rows, b.n_valid) == (a.n_rows, a.n_valid - 1) == (10, 9)
    assert _kinds_of_tables(wh_a) == _kinds_of_tables(wh_b)
    # the owner's view: the row is quarantined, with its line and the reason
    (unread,) = wh_b.query(f'SELECT _row, line, reason FROM raw."{res_b.table}__unreadable"')
    assert unread[0] == CHANGED_LINE - 1 and unread[1] == CHANGED_LINE and reason in unread[2]
    q = wh_b.query_df(f'SELECT _row, rule, "column", record_id FROM {tables_b["quarantine"]}')
    assert set(q["_row"]) == {CHANGED_LINE - 1} and ("not_null", "flight_id") in set(zip(q["rule"], q["column"]))
    assert q["record_id"].isna().all()


def test_an_unreadable_row_never_loses_or_shifts_a_cell_of_another_row(tmp_path):
    data = _neighbour(CHANGES["extra_field"][0])
    wh, res, _, _ = _run_stages(data, tmp_path / "x")
    stored = wh.query_df(f'SELECT * EXCLUDE (_row) FROM {res.qualified_table} ORDER BY _row')
    want = pd.read_csv(CORPUS / "good.csv", dtype=str, keep_default_na=False).drop(index=CHANGED_LINE - 2)
    assert stored.drop(index=CHANGED_LINE - 2).values.tolist() == want.values.tolist()
    assert stored.iloc[CHANGED_LINE - 2].isna().all()  # the unreadable row, in its place: every cell empty
    (text,) = wh.query(f'SELECT text FROM raw."{res.table}__unreadable"')[0]
    assert text.endswith(",EXTRA")


@pytest.mark.usefixtures("prefect_harness")
def test_a_release_on_an_input_with_unreadable_rows_completes_charges_and_shows_them(
        dpr_home, small_spec_path, small_flights_csv, tmp_path):
    """One real flow run: a Latin-1 byte, an extra field and a CRLF line in the 3,000-row input."""
    from flows.release_pipeline import release_pipeline

    lines = small_flights_csv.read_bytes().split(b"\n")
    lines[10] = lines[10] + b"\xe9"  # file line 11
    lines[20] = lines[20] + b",EXTRA"  # file line 21
    lines[30] = lines[30] + b"\r"  # file line 31
    data = tmp_path / "flights_bad.csv"
    data.write_bytes(b"\n".join(lines))
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["source"]["path"] = str(data)
    small_spec_path.write_text(yaml.safe_dump(spec))

    out = release_pipeline(spec_path=str(small_spec_path))
    manifest = json.loads((Path(out["bundle"]) / "manifest.json").read_text())
    assert manifest["budget"]["spent_by_this_release"]["epsilon"] == pytest.approx(0.2)
    assert [r["step"] for r in manifest["releases"]] == ["record_counts"]

    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}
    env.update(DPR_HOME=str(dpr_home), COLUMNS="200")
    shown = subprocess.run([DPR, "validation", "show", "--json"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr
    (v,) = json.loads(shown.stdout)
    assert v["n_rows"] == 3000
    got = [(u["row"], u["line"], u["reason"]) for u in v["unreadable_rows"]]
    assert [(r, ln) for r, ln, _ in got] == [(10, 11), (20, 21), (30, 31)]
    assert "not UTF-8" in got[0][2] and "more fields" in got[1][2] and "CRLF" in got[2][2]
    text = subprocess.run([DPR, "validation", "show"], env=env, capture_output=True, text=True, timeout=300)
    assert "rows the CSV reader could not parse" in text.stdout and "EXTRA" not in text.stdout


# ----------------------------------------------------------------------------- issue 47.4


def _spec_for(path: Path, kind: str = "csv"):
    return load_spec(CORPUS / "base_spec.yaml", dataset={
        "name": "flights_small", "source": {"kind": kind, "path": str(path)}, "record_id": "flight_id"})


def test_too_many_columns_are_refused_before_reading_naming_the_count_and_the_limit(tmp_path, monkeypatch):
    """10,000 columns of 50 rows ran DuckDB out of 512 MiB (an OutOfMemoryException and tracebacks)."""
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "512MiB")
    path = tmp_path / "wide.csv"
    with path.open("w") as fh:
        fh.write("flight_id," + ",".join(f"c{i}" for i in range(9999)) + "\n")
        for r in range(50):
            fh.write(f"F{r:06d}," + ",".join("1" for _ in range(9999)) + "\n")
    limit = ingest_mod.max_columns()
    assert 100 <= limit < 10000
    with pytest.raises(IngestError, match=f"has 10000 columns, more than the reader's limit of {limit} under "
                                          r"DPR_MEMORY_LIMIT \(512MiB\)"):
        ingest(_spec_for(path), Warehouse(tmp_path / "w.duckdb"), tmp_path)
    # at the limit the file is read within DuckDB's share of the cap
    with path.open("w") as fh:
        fh.write("flight_id," + ",".join(f"c{i}" for i in range(limit - 1)) + "\n")
        for r in range(50):
            fh.write(f"F{r:06d}," + ",".join("1" for _ in range(limit - 1)) + "\n")
    assert ingest_mod.read_csv_text(path).shape == (50, limit)


@pytest.mark.parametrize("column, values, type_word", [
    ("distance", [[1, 2], [3]], "[]"),  # a list column declared numeric
    ("carrier", [{"a": "AA"}, {"a": "UA"}], "STRUCT"),  # a struct column declared categorical
])
def test_nested_parquet_columns_are_refused_before_any_row_is_read(column, values, type_word, tmp_path):
    frame = pd.read_csv(CORPUS / "good.csv", dtype=str).head(2)
    frame[column] = values
    path = tmp_path / "in.parquet"
    frame.to_parquet(path, index=False)
    wh = Warehouse(tmp_path / "w.duckdb")
    with pytest.raises(IngestError, match=f"column '{column}' is .*{re.escape(type_word)}.*nested type"):
        ingest(_spec_for(path, "parquet"), wh, tmp_path)
    assert not wh.query("SELECT 1 FROM duckdb_tables() WHERE schema_name = 'raw' AND table_name LIKE 'flights%'")
    # a Parquet dataset (a folder) is checked by dpcore.ingest.sources the same way
    folder = tmp_path / "ds"
    folder.mkdir()
    frame.to_parquet(folder / "part-0.parquet", index=False)
    from dpcore.ingest.sources import SourceError

    with pytest.raises(SourceError, match=f"column '{column}' is .*nested type"):
        ingest(_spec_for(folder, "parquet"), Warehouse(tmp_path / "w2.duckdb"), tmp_path)


def test_bom_cr_only_line_ends_and_a_nul_in_a_number_cell(tmp_path):
    """A leading BOM is the encoding's marker (dropped, the header reads as without it); CR-only line ends are
    accepted (every line the same); a NUL inside a number cell is not a number: the row is quarantined."""
    # BOM
    _, res, bom, _ = _run_stages(b"\xef\xbb\xbf" + GOOD, tmp_path / "bom")
    assert (bom.n_rows, bom.n_valid) == (10, 10)
    # CR-only
    _, _, cr, _ = _run_stages(GOOD.replace(b"\n", b"\r"), tmp_path / "cr")
    assert (cr.n_rows, cr.n_valid) == (10, 10)
    # NUL inside, before and after a number
    for i, cell in enumerate([b"14\x0016", b"\x001416", b"1416\x00"]):
        data = GOOD.replace(b",1416,", b"," + cell + b",", 1)
        wh, res, nul, tables = _run_stages(data, tmp_path / f"nul{i}")
        assert (nul.n_rows, nul.n_valid) == (10, 9)
        q = wh.query(f'SELECT _row, rule, "column" FROM {tables["quarantine"]}')
        assert q == [(2, "number", "distance")]
        assert not wh.query(f'SELECT 1 FROM {tables["validated"]} WHERE _row = 2')
