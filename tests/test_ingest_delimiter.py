"""``dataset.source.delimiter`` (issue 32, section 5): ingest reads a CSV with the spec's delimiter.

Every cell stays text, quoting is RFC 4180's whatever the delimiter, and the same bytes split
with another delimiter are another raw table (a first ingest with the wrong delimiter is not
reused once the spec names the right one). A comma source dumps without the key, so the
spec's hashes, and the charge keys built on them, are what they were before the key existed.
"""
from __future__ import annotations

import pytest

from dpcore.ingest.raw import header_fields, ingest, load_raw, read_csv_text, read_input
from dpcore.release.spec import SpecError, parse_spec
from dpcore.storage.warehouse import Warehouse

#: A semicolon file whose quoted cells hold a semicolon, a comma and a doubled quote.
SEMI = 'id;name;x\nr1;"a;b";1,5\nr2;"say ""hi""";2\nr3;plain;3\n'


def spec_for(path, delimiter=None):
    source = {"kind": "csv", "path": str(path)}
    if delimiter is not None:
        source["delimiter"] = delimiter
    return parse_spec({
        "release_id": "d-r1",
        "dataset": {"name": "d", "source": source, "record_id": "id", "extra_columns": "ignore"},
        "schema": {"categorical": {"name": {"domain": ["a;b", 'say "hi"', "plain"]}}},
        "budget": {"epsilon": 1.0},
    })


def test_ingest_and_read_input_honour_the_spec_delimiter(tmp_path):
    csv = tmp_path / "semi.csv"
    csv.write_text(SEMI)
    spec = spec_for(csv, ";")
    wh = Warehouse(tmp_path / "wh.duckdb")
    raw = load_raw(wh, ingest(spec, wh, tmp_path / "data"))
    assert list(raw.columns) == ["_row", "id", "name", "x"]
    assert raw["name"].tolist() == ["a;b", 'say "hi"', "plain"]
    assert raw["x"].tolist() == ["1,5", "2", "3"]  # text, as written
    assert read_input(spec, tmp_path / "data").drop(columns="_row").equals(raw.drop(columns="_row"))
    assert read_csv_text(csv, ";").equals(raw.drop(columns="_row").reset_index(drop=True))


def test_the_same_bytes_with_another_delimiter_are_another_table(tmp_path):
    csv = tmp_path / "semi.csv"
    csv.write_text("id;name;x\nr1;plain;1\nr2;plain;2\n")
    wh = Warehouse(tmp_path / "wh.duckdb")
    wrong = ingest(spec_for(csv), wh, tmp_path / "data")  # the owner forgot the delimiter: one column
    assert list(load_raw(wh, wrong).columns) == ["_row", "id;name;x"]
    right = ingest(spec_for(csv, ";"), wh, tmp_path / "data")
    assert right.table != wrong.table
    assert load_raw(wh, right)[["id", "name", "x"]].values.tolist() == [["r1", "plain", "1"], ["r2", "plain", "2"]]
    again = ingest(spec_for(csv, ";"), wh, tmp_path / "data")
    assert again.table == right.table  # identical bytes and delimiter: stored once


def test_a_comma_source_dumps_and_hashes_as_before_the_key_existed(tmp_path):
    plain, explicit = spec_for(tmp_path / "x.csv"), spec_for(tmp_path / "x.csv", ",")
    assert "delimiter" not in plain.model_dump(mode="json")["dataset"]["source"]
    assert plain.validation_hash() == explicit.validation_hash() and plain.content_hash() == explicit.content_hash()
    assert spec_for(tmp_path / "x.csv", ";").validation_hash() != plain.validation_hash()
    with pytest.raises(SpecError, match="dataset.source"):
        spec_for(tmp_path / "x.csv", ":")


def test_header_fields_split_the_header_by_each_delimiter(tmp_path):
    csv = tmp_path / "semi.csv"
    csv.write_text("\n" + SEMI)
    fields = header_fields(csv)
    assert fields[";"] == ["id", "name", "x"] and fields[","] == ["id;name;x"] and fields["|"] == ["id;name;x"]
