"""Streaming ingest (issue 21, item 1): the DuckDB reader stores exactly what the old pandas reader stored.

The oracle is the pandas reader ingest used before (whole file in memory,
``pd.read_csv(dtype=str, keep_default_na=False, na_filter=False, skip_blank_lines=True)``,
``_row`` = 1-based position), kept here only. Every case compares the stored
raw table with the oracle's frame stored the same way: column names and order,
DuckDB types, every cell (``''`` never NULL) and ``_row``. Where the old reader
was wrong (it silently dropped a column, or glued text after a closing quote),
the new one refuses, and the tests say so case by case.
"""
from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from dpcore.ingest import raw as ingest_mod
from dpcore.runtime.chunks import MemoryBudget
from dpcore.ingest.raw import IngestError, ingest, load_raw, raw_digest, read_csv_text, read_input
from dpcore.release.spec import DemoSource, parse_spec
from dpcore.storage.warehouse import Warehouse


CORPUS = Path(__file__).parent / "bad_inputs"


def make_spec(dataset: dict):
    """A minimal spec reading ``dataset`` (ingest reads only its source)."""
    return parse_spec({
        "release_id": "unit-r1",
        "dataset": dataset,
        "schema": {"categorical": {"b": {"domain": ["1"]}}, "numeric": {}},
        "budget": {"epsilon": 1.0},
    })


# --------------------------------------------------------------------------- the oracle: the old pandas reader


def pandas_oracle(path: Path, kind: str = "csv") -> pd.DataFrame:
    """The frame the pandas ingest stored (errors as its exception type; messages are compared elsewhere)."""
    if kind == "parquet":
        df = pd.read_parquet(path)
    else:
        data = path.read_bytes()
        if not data:
            raise IngestError("empty")
        data.decode("utf-8")
        df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8",
                         skip_blank_lines=True)
        if [c for c in df.columns if "." in c and c.rsplit(".", 1)[0] in df.columns]:
            raise IngestError("dup")
    if "_row" in df.columns:
        raise IngestError("reserved")
    df.insert(0, "_row", range(1, len(df) + 1))
    return df


def stored(con: duckdb.DuckDBPyConnection, table: str) -> tuple[list, list]:
    """(column names and types, every row) of a stored table, in ``_row`` order."""
    types = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {table})").fetchall()
    return types, con.execute(f"SELECT * FROM {table} ORDER BY _row").fetchall()


def oracle_table(path: Path, kind: str = "csv") -> tuple[list, list]:
    df = pandas_oracle(path, kind)
    con = duckdb.connect()
    con.register("_incoming", df)
    con.execute("CREATE TABLE t AS SELECT * FROM _incoming")
    return stored(con, "t")


def ingested_table(path: Path, tmp_path: Path, kind: str = "csv") -> tuple[list, list]:
    spec = make_spec(dataset={"name": "unit", "source": {"kind": kind, "path": str(path)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    out = wh.run(lambda con: stored(con, res.qualified_table))
    # read_input (dpr spec check --data) is the same reader
    frame = read_input(spec, tmp_path)
    assert frame.equals(load_raw(wh, res))
    if kind == "csv":  # and so is the draft's reader
        assert read_csv_text(path).equals(frame.drop(columns="_row").dropna(how="all").reset_index(drop=True))
    return out


def assert_same(path: Path, tmp_path: Path, kind: str = "csv") -> None:
    want = oracle_table(path, kind)
    got = ingested_table(path, tmp_path, kind)
    assert got[0] == want[0]
    assert got[1] == want[1]


# --------------------------------------------------------------------------- the demo and the corpus


def test_demo_table_is_stored_exactly_as_the_pandas_reader_stored_it(tmp_path: Path):
    path = ingest_mod.materialise_demo(DemoSource(kind="demo"), tmp_path / "data")
    assert_same(path, tmp_path)


CORPUS_CSVS = sorted(p.name for p in CORPUS.glob("*.csv"))


@pytest.mark.parametrize("name", CORPUS_CSVS)
def test_every_corpus_file_reads_as_before(name: str, tmp_path: Path):
    path = CORPUS / name
    try:
        want = oracle_table(path)
    except (IngestError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        try:
            ingested_table(path, tmp_path)
        except IngestError:
            return  # no header, an empty file, a reserved name: refused
        (tmp_path / "again").mkdir()
        _, side = read_with_rejects(path.read_bytes(), tmp_path / "again")  # else a row is unreadable
        assert side
        return
    assert ingested_table(path, tmp_path) == want


def test_corpus_covers_both_outcomes():
    ok = bad = 0
    for name in CORPUS_CSVS:
        try:
            pandas_oracle(CORPUS / name)
            ok += 1
        except (IngestError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
            bad += 1
    assert ok >= 10 and bad >= 4


# --------------------------------------------------------------------------- awkward CSVs

AWKWARD_FILES: dict[str, bytes] = {
    "empty unquoted cells": b"id,b,c\n1,,x\n,2,\n,,\n",
    "quoted empty cells": b'id,b\n"",x\n1,""\n',
    "spaces kept": b"id,b\n 1 , 2 \n\t1,2\t\n",
    "quoted commas and quotes": b'id,b\n"a,b","say ""hi"""\n2,"x,,y"\n',
    "quoted line breaks": b'id,b\n"x\ny",2\n"p\r\nq","r\n\ns"\n3,4\n',
    "CRLF line ends, LF in quoted cells (spreadsheet exports)": b'id,b\r\n"x\ny",2\r\n"p\n\nq",""\r\n',
    "blank lines before the header, CR line ends": b"\r\r  \rid,b\r1,2\r",
    "a long row": b"id,b\n1," + b"x" * 3_000_000 + b"\n2,3\n",
    "quote inside an unquoted cell": b'id,b\nab"c,5\'10"\n',
    "rows shorter than the header": b"id,b,c\n1,2\n3\n4,5,6\n",
    "blank lines everywhere": b"\n\nid,b\n1,2\n\n\n3,4\n\n",
    "lines of only blanks": b"id,b\n1,2\n   \n \t \n3,4\n\t\n",
    "lines of only blanks, one column": b"id\n1\n   \n2\n\n3\n",
    "quoted empty line, one column": b'id\n1\n""\n2\n',
    "CRLF line ends": b"id,b\r\n1,2\r\n3,\r\n",
    "CR line ends": b"id,b\r1,2\r3,4\r",
    "byte-order mark": b"\xef\xbb\xbfid,b\n1,2\n",
    "byte-order mark, quoted header": b'\xef\xbb\xbf"id","b"\n1,2\n',
    "unicode": "id,b\nZürich ∧ ∈,\u00a0nbsp\n東京,😀\n".encode(),
    "no final line break": b"id,b\n1,2",
    "header only": b"id,b\n",
    "header only, blank lines": b"id,b\n\n\n",
    "words that look null": b"id,b\nNULL,NA\nnan,None\n#N/A,null\n",
    "comment-like and formula cells": b"id,b\n#x,=SUM(A1)\n",
    "empty header names": b"id,,c,\n1,2,3,4\n",
    "header names with spaces and quotes": b'id, b ,"c,d","e""f"\n1,2,3,4\n',
    "NUL byte in a cell": b"id,b\nx\x00y,2\n",
    "one column": b"id\na\nb\n",
}


@pytest.mark.parametrize("name", sorted(AWKWARD_FILES))
def test_awkward_csv_reads_as_before(name: str, tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_bytes(AWKWARD_FILES[name])
    assert_same(path, tmp_path)


def _random_csv(rng: random.Random, n_rows: int, line_end: str) -> str:
    alphabet = ["a", "Z", " ", ",", '"', "\n", "é", "∧", "1", "-", ".", "\t", "😀", "''"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=line_end)
    w.writerow(["id", "x", "y", "z"])
    for i in range(n_rows):
        cells = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(3)]
        w.writerow([f"r{i}", *cells])
    return buf.getvalue()


@pytest.mark.parametrize("seed", range(6))
def test_random_csvs_read_as_before(seed: int, tmp_path: Path):
    rng = random.Random(seed)
    path = tmp_path / "in.csv"
    path.write_text(_random_csv(rng, rng.randint(1, 400), rng.choice(["\n", "\r\n"])), encoding="utf-8", newline="")
    assert_same(path, tmp_path)


# --------------------------------------------------------------------------- file order under the parallel scanner


@pytest.mark.parametrize("quoted_line_breaks", [False, True])
def test_row_numbers_follow_the_file_when_duckdb_reads_it_with_several_threads(
    tmp_path: Path, monkeypatch, quoted_line_breaks: bool
):
    """Small buffers make DuckDB split the file among threads; ``_row`` must still be the file position."""
    monkeypatch.setattr(ingest_mod, "CSV_BUFFER_BYTES", 65536)
    monkeypatch.setattr(ingest_mod, "MAX_ROW_BYTES", 65536)
    n = 200_003
    ids = np.arange(1, n + 1)
    df = pd.DataFrame({"id": [f"r{i}" for i in ids], "v": (ids * 7919 % 1000).astype(str)})
    if quoted_line_breaks:
        df.loc[df.index % 1000 == 3, "v"] = "two\nlines"
    path = tmp_path / "many.csv"
    df.to_csv(path, index=False)
    wh = Warehouse(tmp_path / "w.duckdb")
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(path)}, "record_id": "id"})
    res = ingest(spec, wh, tmp_path)
    bad = wh.query(
        f"SELECT count(*), count(*) FILTER (WHERE id <> 'r' || _row) FROM {res.qualified_table}"
    )[0]
    assert bad == (n, 0)
    got = wh.query_df(f"SELECT v FROM {res.qualified_table} ORDER BY _row")["v"]
    assert got.tolist() == df["v"].tolist()
    # even where DuckDB may reorder rows (without insertion order a plain CREATE TABLE AS scrambles them here)
    con = duckdb.connect()
    con.execute("SET threads = 4; SET preserve_insertion_order = false")
    ingest_mod._create(con, "t", path, "csv", 1 if quoted_line_breaks else 0)
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE id <> 'r' || _row) FROM t").fetchone() == (n, 0)


# --------------------------------------------------------------------------- refusals


def read_with_rejects(data: bytes, tmp_path: Path) -> tuple[list, list]:
    """Ingest ``data``: (every stored row in ``_row`` order, every unreadable row as (_row, line, reason))."""
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(path)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    rows = wh.query(f"SELECT * FROM {res.qualified_table} ORDER BY _row")
    side = wh.query(f'SELECT _row, line, reason FROM raw."{res.table}__unreadable" ORDER BY line')
    assert read_input(spec, tmp_path).equals(load_raw(wh, res))  # dpr spec check --data reads the same
    assert path.read_bytes() == data  # the input is never modified
    return rows, side


QUOTE = "a quote where a field should end, or a quoted cell never closed"
MORE = "more fields than the header"
UTF8 = "not UTF-8 text (some bytes are not valid UTF-8)"


@pytest.mark.parametrize(
    "data, rows, side",
    [
        # an unclosed quote runs to the end of the file: the rest of the file is that one unreadable row
        (b'id,b\n"1,2\n3,4\n', [(1, None, None)], [(1, 2, QUOTE)]),
        (b'id,b\n1,2\n3,"4\n5,6', [(1, "1", "2"), (2, None, None)], [(2, 3, QUOTE)]),
        (b'id,b\n",2\n', [(1, None, None)], [(1, 2, QUOTE)]),
        # more fields than the header: the row is unreadable, never a field dropped (the old reader took a
        # first row one field longer than the header as an index and dropped the first column of every row)
        (b"id,b\n1,2\n1,2,3\n", [(1, "1", "2"), (2, None, None)], [(2, 3, MORE)]),
        (b'id,b\n"x\ny",2\n1,2,3\n', [(1, "x\ny", "2"), (2, None, None)], [(2, 3, MORE)]),
        (b"id,b\n1,2,3\n4,5,6\n", [(1, None, None), (2, None, None)], [(1, 2, MORE), (2, 3, MORE)]),
        # text after a closing quote (the old reader glued it to the cell), a backslash "escape"
        (b'id,b\n"ab"c,d\n', [(1, None, None)], [(1, 2, QUOTE)]),
        (b'id,b\n"x\\"y",2\n', [(1, None, None)], [(1, 2, QUOTE)]),
        # a line ending otherwise than the header line (DuckDB's strict reader stops on it: pre-scanned)
        (b"id,b\r\n1,2\n3,4\r\n", [(1, None, None), (2, "3", "4")],
         [(1, 2, "its line end (LF) differs from the header line's")]),
        (b"id,b\n1,2\r\n3,4\n", [(1, None, None), (2, "3", "4")],
         [(1, 2, "its line end (CRLF) differs from the header line's")]),
        (b"id,b\n1,2\r3,4\n5,6\n", [(1, None, None), (2, "3", "4"), (3, "5", "6")],
         [(1, 2, "its line end (CR) differs from the header line's")]),
        # a quote inside an unquoted cell is a literal (DuckDB reads a"b), so the line-end scan stays outside quotes
        (b'id,b\n1,a"b\n2,3\r\n4,5\n', [(1, "1", 'a"b'), (2, None, None), (3, "4", "5")],
         [(2, 3, "its line end (CRLF) differs from the header line's")]),
        (b'id,b\n1,"a"b"\n2,3\r\n4,5\n', [(1, None, None), (2, None, None), (3, "4", "5")],
         [(1, 2, QUOTE), (2, 3, "its line end (CRLF) differs from the header line's")]),
        # numbered in place: blank lines (before the header too) and a quoted line break do not count
        (b'\nid,b\n1,2\n\n  \n3,4,5\n"x\ny",1\n7,\xff\n', [(1, "1", "2"), (2, None, None), (3, "x\ny", "1"),
                                                             (4, None, None)], [(2, 6, MORE), (4, 8, UTF8)]),
        # both kinds: the reader's line numbers (in the copy without the odd lines) are the file's
        (b"id,b\n1,2\r\n\r\n3,4,5\n6,7\n8,9\r\n0,\xff\n", [(1, None, None), (2, None, None), (3, "6", "7"),
                                                             (4, None, None), (5, None, None)],
         [(1, 2, "its line end (CRLF) differs from the header line's"), (2, 4, MORE),
          (4, 6, "its line end (CRLF) differs from the header line's"), (5, 7, UTF8)]),
        # a short row where the file has quoted line breaks (cannot be padded there)
        (b'id,b,c\n"x\ny",2,3\n4,5\n', [(1, "x\ny", "2", "3"), (2, None, None, None)],
         [(2, 3, "fewer fields than the header (in a file with line breaks inside quoted cells)")]),
        (b"id,b\n\xff\xfe,2\n", [(1, None, None)], [(1, 2, UTF8)]),
        (b"id,b\n1,\xc3", [(1, None, None)], [(1, 2, UTF8)]),  # a character cut by the end of the file
    ],
)
def test_a_row_the_reader_cannot_parse_is_an_unreadable_row_not_a_refusal(data, rows, side, tmp_path: Path):
    """Issue 46.3: the row is stored in its place with every cell NULL (validation quarantines it: its record id
    is null), listed with its line (as DuckDB counts lines: blank ones counted, quoted line breaks not) and the
    reason."""
    assert read_with_rejects(data, tmp_path) == (rows, side)


def test_a_row_over_the_reader_limit_is_an_unreadable_row(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ingest_mod, "MAX_ROW_BYTES", 4096)
    rows, side = read_with_rejects(b"id,b\n1," + b"y" * 5000 + b"\n2,3\n", tmp_path)
    assert rows == [(1, None, None), (2, "2", "3")]
    assert side == [(1, 2, "longer than the reader's row limit (dpcore.ingest.raw.MAX_ROW_BYTES)")]


def test_a_lone_quoted_blank_cell_is_skipped_like_a_blank_line(tmp_path: Path):
    """Pinned difference: a line holding only a quoted run of spaces (every other field missing) cannot be told
    from a line of spaces once DuckDB has read it; pandas kept it as a row, the reader skips it as pandas skips a
    line of spaces. An exporter writes every field of a row, so such a line is hand-made."""
    path = tmp_path / "in.csv"
    path.write_bytes(b'id,b\n1,2\n"  "\n3,4\n')
    assert pandas_oracle(path).drop(columns="_row").values.tolist() == [["1", "2"], ["  ", ""], ["3", "4"]]
    assert ingested_table(path, tmp_path)[1] == [(1, "1", "2"), (2, "3", "4")]


def test_a_name_that_extends_another_with_a_dot_is_not_a_repeat(tmp_path: Path):
    """The old reader took ``price.usd`` beside ``price`` for pandas' mangled repeat (``price.1``) and refused the
    file; only a real repeat is refused now."""
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,price,price.usd\n1,2,3\n")
    with pytest.raises(IngestError, match="dup"):
        pandas_oracle(path)
    assert ingested_table(path, tmp_path) == (
        [("_row", "BIGINT"), ("id", "VARCHAR"), ("price", "VARCHAR"), ("price.usd", "VARCHAR")], [(1, "1", "2", "3")]
    )


def test_blanks_around_a_quoted_cell_are_read_as_duckdb_reads_them(tmp_path: Path):
    """The one accepted input read differently: pandas kept ``1, "x"`` as the cell `` "x"`` (quotes and all);
    DuckDB reads the quoted cell ``x``, as the writer meant it. Pinned so a change is seen."""
    path = tmp_path / "in.csv"
    path.write_bytes(b'id,b\n1, "x"\n"y" ,2\n')
    assert pandas_oracle(path).drop(columns="_row").values.tolist() == [["1", ' "x"'], ["y ", "2"]]
    assert ingested_table(path, tmp_path)[1] == [(1, "1", "x"), (2, "y", "2")]


@pytest.mark.parametrize(
    "data, says",
    [
        (b"", "is empty (0 bytes)"),
        (b"\n\n\n", "has no header row"),
        (b"  \n\t\n", "has no header row"),
        (b"id,b,id\n1,2,3\n", "repeats column names: ['id']"),
        (b"id,_row\n1,2\n", "reserved for row numbers"),
        (b'id,"b\nc"\r\n1,2\r\n', "column name holding a line break"),  # pandas read it; DuckDB cannot skip it
        (b"id,\xff\n1,2\n", "has a header (column names) that is not UTF-8 text"),
        (b"id,b\xc3\n1,2\n", "has a header (column names) that is not UTF-8 text"),
        (b"id," + b",".join(b"c%d" % i for i in range(2001)) + b"\n1\n", "has 2002 columns, more than the reader's "
         "limit of"),
    ],
)
def test_unreadable_csv_messages(data: bytes, says: str, tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    with pytest.raises(IngestError) as err:
        ingested_table(path, tmp_path)
    assert says in str(err.value) and str(path) in str(err.value)


def test_utf8_is_checked_across_read_blocks(tmp_path: Path, monkeypatch):
    """A multi-byte character split by a block boundary is valid; a bad byte in a later block is not."""
    monkeypatch.setattr(ingest_mod, "READ_BLOCK", 7)
    path = tmp_path / "in.csv"
    path.write_text("id,b\nZürich,∧∧∧∧\n東京,😀\n", encoding="utf-8")
    assert_same(path, tmp_path)
    (tmp_path / "second").mkdir()
    rows, side = read_with_rejects("id,b\nZürich,∧∧∧∧\n".encode() + b"\xe2\x88x\n", tmp_path / "second")
    assert rows == [(1, "Zürich", "∧∧∧∧"), (2, None, None)] and side == [(2, 3, UTF8)]


def test_content_hash_is_the_sha256_of_the_file(tmp_path: Path, monkeypatch):
    import hashlib

    monkeypatch.setattr(ingest_mod, "READ_BLOCK", 5)
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,b\n1,2\n3,4\n")
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(path)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    res = ingest(spec, wh, tmp_path)
    # the SHA-256, then the release id: only runs of the same release reuse the table (issue 46.4)
    assert res.content_hash == f"{hashlib.sha256(path.read_bytes()).hexdigest()};release={spec.release_id}"
    assert wh.query("SELECT n_rows, n_bytes FROM raw.ingests")[0] == (2, path.stat().st_size)
    again = ingest(spec, wh, tmp_path)  # the same content: nothing new stored, but a fresh public id (issue 28)
    assert again.table == res.table and again.ingest_id != res.ingest_id
    assert wh.query("SELECT count(*) FROM raw.ingests")[0][0] == 1


def test_a_file_changed_while_read_is_refused_and_nothing_is_stored(tmp_path: Path, monkeypatch):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,b\n1,2\n")
    real = ingest_mod._create

    def create_then_append(con, target, p, kind, mode, *delimiter):
        real(con, target, p, kind, mode, *delimiter)
        with p.open("ab") as fh:
            fh.write(b"3,4\n")

    monkeypatch.setattr(ingest_mod, "_create", create_then_append)
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(path)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    with pytest.raises(IngestError, match="changed while it was being read"):
        ingest(spec, wh, tmp_path)
    tables = {r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'raw'")}
    assert tables <= {"ingests", "ingest_log"}  # the catalogues only, no raw table
    assert wh.query("SELECT count(*) FROM raw.ingests")[0][0] == 0
    assert wh.query("SELECT count(*) FROM raw.ingest_log")[0][0] == 0


# --------------------------------------------------------------------------- Parquet


def test_parquet_is_stored_as_the_pandas_reader_stored_it(tmp_path: Path):
    df = pd.DataFrame({
        "id": ["a", "b", None, "d"],
        "n": [1, 2, 3, 4],
        "x": [0.5, np.nan, -1.0, 2.0],
        "flag": [True, False, True, False],
        "day": pd.to_datetime(["2013-01-01", "2013-02-01", "2013-03-01", "2013-04-01"]),
    })
    path = tmp_path / "in.parquet"
    df.to_parquet(path, index=False)
    assert_same(path, tmp_path, kind="parquet")


def test_parquet_row_numbers_follow_the_file_across_row_groups(tmp_path: Path):
    n = 100_003
    df = pd.DataFrame({"id": [f"r{i}" for i in range(1, n + 1)], "v": np.arange(n) % 17})
    path = tmp_path / "in.parquet"
    df.to_parquet(path, index=False, row_group_size=1000)
    con = duckdb.connect()
    con.execute("SET threads = 4; SET preserve_insertion_order = false")
    ingest_mod._create(con, "t", path, "parquet", 0)
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE id <> 'r' || _row) FROM t").fetchone() == (n, 0)
    assert_same(path, tmp_path, kind="parquet")


def test_a_memory_cap_error_is_not_reported_as_bad_input(tmp_path: Path):
    """Only errors about the input become IngestError; DuckDB running out of its memory cap propagates as is."""
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,b\n" + b"".join(f"r{i},{'x' * 200}{i}\n".encode() for i in range(20_000)))
    con = duckdb.connect()
    con.execute("SET memory_limit = '1MB'; SET threads = 1")
    with pytest.raises(duckdb.OutOfMemoryException):
        ingest_mod._create(con, "t", path, "csv", 0)


def test_parquet_refusals(tmp_path: Path):
    path = tmp_path / "in.parquet"
    pd.DataFrame({"id": ["a"], "_row": [1]}).to_parquet(path, index=False)
    with pytest.raises(IngestError, match="reserved for row numbers"):
        ingested_table(path, tmp_path, kind="parquet")
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(IngestError, match="is not a readable Parquet file"):
        ingested_table(path, tmp_path / "second", kind="parquet")


# --------------------------------------------------------------------------- raw_digest


def _digest_fixture(tmp_path: Path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,b,c\n" + b"".join(f"r{i},{i % 7},{'' if i % 3 else 'x'}\n".encode() for i in range(1000)))
    spec = make_spec(dataset={"name": "unit", "source": {"kind": "csv", "path": str(path)}, "record_id": "id"})
    wh = Warehouse(tmp_path / "w.duckdb")
    return wh, ingest(spec, wh, tmp_path)


def test_raw_digest_is_stable_and_bounded(tmp_path: Path):
    """The same content gives the same digest, under any memory cap (one aggregate query; nothing chunked)."""
    wh, res = _digest_fixture(tmp_path)
    before = raw_digest(wh, res.table)
    for limit in ("64MiB", "1GiB"):
        other = Warehouse(wh.path, memory=MemoryBudget.from_env({"DPR_MEMORY_LIMIT": limit}))
        assert raw_digest(other, res.table) == before
    # a copy with the rows stored in another physical order has the same content
    wh.run(lambda con: con.execute(
        f'CREATE TABLE raw.shuffled AS SELECT * FROM {res.qualified_table} ORDER BY hash(_row)'
    ))
    assert raw_digest(wh, "shuffled") == before
    assert raw_digest(wh, res.table) == before


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE {t} SET c = NULL WHERE _row = 500 AND c = ''",  # '' and NULL differ
        "UPDATE {t} SET b = b || ' ' WHERE _row = 1000",
        "UPDATE {t} SET b = c, c = b WHERE _row = 2",  # cells swapped between columns
        "UPDATE {t} SET b = CASE _row WHEN 3 THEN '4' ELSE '3' END WHERE _row IN (3, 4)",  # swapped between rows
        "UPDATE {t} SET _row = CASE _row WHEN 10 THEN 11 ELSE 10 END WHERE _row IN (10, 11)",
        "DELETE FROM {t} WHERE _row = 1000",
        "INSERT INTO {t} VALUES (1001, 'r1000', '0', '')",
        "ALTER TABLE {t} RENAME COLUMN c TO d",
        "ALTER TABLE {t} ADD COLUMN e VARCHAR",
    ],
)
def test_raw_digest_sees_any_change(tmp_path: Path, change: str):
    wh, res = _digest_fixture(tmp_path)
    before = raw_digest(wh, res.table)
    wh.run(lambda con: con.execute(change.format(t=res.qualified_table)))
    assert raw_digest(wh, res.table) != before


def test_raw_digest_of_a_missing_table_is_refused(tmp_path: Path):
    wh = Warehouse(tmp_path / "w.duckdb")
    with pytest.raises(ValueError, match="does not exist"):
        raw_digest(wh, "nope")


@pytest.mark.parametrize("extra", [None, "filename"])
def test_a_parquet_datasets_row_numbers_are_the_windows_without_the_window(tmp_path: Path, extra):
    """Issue 51: ``_row`` of a hive-partitioned dataset (several files, several row groups each) is the number
    ``row_number() OVER ()`` gives (file after file in path order, rows in file order), computed from the footers'
    row counts, not by DuckDB's one-thread streaming window; and the plan has no window unless a column is named like one
    the reader adds (``filename``), when the window is kept and the numbers are the same."""
    import duckdb

    from dpcore.ingest.sources import parquet_dataset as pds
    from dpcore.ingest.sources.columns import text_cells
    from dpcore.release.spec import ParquetSource

    rng = np.random.default_rng(5)
    df = pd.DataFrame({"id": [f"r{i}" for i in range(5000)], "v": rng.integers(0, 99, 5000),
                       "m": rng.integers(1, 4, 5000)})
    if extra:
        df[extra] = "x"
    for m, part in df.groupby("m"):
        (tmp_path / "d" / f"m={m}").mkdir(parents=True)
        for k, half in enumerate((part.iloc[: len(part) // 2], part.iloc[len(part) // 2:])):
            half.drop(columns="m").to_parquet(tmp_path / "d" / f"m={m}" / f"f{k}.parquet", index=False,
                                              row_group_size=300)
    source = ParquetSource(kind="parquet", path=str(tmp_path / "d"), partitioning="hive")
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    pds.create(con, "t", source, None)
    paths, _, cols = pds._checked_columns(con, source, None)
    window = con.execute(f"SELECT row_number() OVER () AS _row, {text_cells(cols)} FROM {pds._scan(source)}",
                         [[str(p) for p in paths]]).df()
    stored = con.execute("SELECT * FROM t ORDER BY _row").df()
    assert len(stored) == 5000 and list(stored["_row"]) == list(range(1, 5001))
    pd.testing.assert_frame_equal(stored, window.sort_values("_row").reset_index(drop=True), check_dtype=False)
    plan = str(con.execute(f"EXPLAIN {pds._select(con, cols, paths, source)}").fetchall())
    assert ("window" in plan.lower()) == bool(extra)
