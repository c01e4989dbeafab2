"""A table or read-only query of a DuckDB database file, read as text cells (issue 31).

``source: {kind: duckdb, path: owner.duckdb, table: flights}`` (or ``query:``). The file is opened
read-only in a connection of its own (never attached to the warehouse, so nothing can write to it and its
tables never mix with the warehouse's); the column types of the table or query are checked against the
spec before any row is read, then the rows are cast to text in that connection and copied into the
warehouse in Arrow batches of :data:`~dpcore.ingest.sources.table.BATCH_ROWS` rows (memory flat in rows).
A DuckDB file held open for writing by another process cannot be opened, even read-only: refused, naming
the fix.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .columns import Column, check_names, check_types, duckdb_family
from .errors import SourceError
from .parquet_dataset import stamps
from .table import BATCH_ROWS, guarded, write_batches

if TYPE_CHECKING:
    from dpcore.release.spec import DuckdbSource, ReleaseSpec


def where(source: "DuckdbSource") -> str:
    """How messages name the source: the file and the table, or the query key (never its text or data)."""
    what = f"table {source.table}" if source.table else "dataset.source.query"
    return f"duckdb source {source.path} ({what})"


def _relation(source: "DuckdbSource") -> str:
    return source.table if source.table else f"({source.query})"


def _open(source: "DuckdbSource", memory_setting: str | None) -> duckdb.DuckDBPyConnection:
    path = Path(source.path)
    if not path.is_file():
        raise SourceError(f"{where(source)}: no such file (dataset.source.path); give the path of the DuckDB "
                          "database file")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise SourceError(f"{where(source)}: the file is open for writing in another process (DuckDB allows "
                              "no reader then); close that process, or give a copy of the file") from None
        raise SourceError(f"{where(source)}: the file cannot be opened as a DuckDB database ({type(exc).__name__}); "
                          "check dataset.source.path names a DuckDB file of this DuckDB version") from None
    if memory_setting:
        con.execute(f"SET memory_limit = '{memory_setting}'")
    return con


def _refusal(source: "DuckdbSource", exc: duckdb.Error) -> SourceError:
    text = str(exc)
    if isinstance(exc, duckdb.CatalogException) and source.table:
        return SourceError(f"{where(source)}: no such table in the file; check dataset.source.table (schema.name)")
    if isinstance(exc, duckdb.ParserException):
        return SourceError(f"{where(source)}: the query has a syntax error; fix dataset.source.query (a SELECT)")
    if "read-only" in text.lower() or "read only" in text.lower():
        return SourceError(f"{where(source)}: the query tries to write, and the file is opened read-only; "
                           "give a read-only SELECT in dataset.source.query")
    return SourceError(f"{where(source)}: the {'query' if source.query else 'table'} cannot be read "
                       f"({type(exc).__name__}); check dataset.source.{'query' if source.query else 'table'}")


def create(con, target: str, source: "DuckdbSource", spec: "ReleaseSpec | None",
           memory_setting: str | None = None) -> list[Column]:
    """Write the table or query into ``target`` (a table of ``con``) as text cells, ``_row`` first.

    Raises
    ------
    SourceError
        Missing or locked file, no such table, a failing or writing query, a refused column type or name,
        or a file changed during the read. DuckDB's own message (which may quote a value) is never shown.
    """
    src = _open(source, memory_setting)
    try:
        before = stamps([Path(source.path)])
        try:
            rows = src.execute(f"DESCRIBE SELECT * FROM {_relation(source)} AS dpr_q").fetchall()
        except duckdb.Error as exc:
            raise _refusal(source, exc) from None
        cols = [Column(r[0], r[1], duckdb_family(r[1])) for r in rows]
        check_names(where(source), cols)
        if spec is not None:
            check_types(where(source), cols, spec)
        cells = ", ".join(f'CAST(dpr_q."{c.name.replace(chr(34), chr(34) * 2)}" AS VARCHAR)' for c in cols)
        try:
            reader = src.sql(f"SELECT {cells} FROM {_relation(source)} AS dpr_q").to_arrow_reader(BATCH_ROWS)
        except duckdb.Error as exc:
            raise _refusal(source, exc) from None
        # errors of the source (a query failing mid-way) are refused by name; the warehouse's own propagate
        write_batches(con, target, cols, guarded(reader, lambda exc: _refusal(source, exc)))
        if stamps([Path(source.path)]) != before:
            raise SourceError(f"{where(source)}: the file changed while it was being read; ingest again")
        return cols
    finally:
        src.close()
