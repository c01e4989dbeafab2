"""Sources read as text cells: PostgreSQL, DuckDB database files and Parquet datasets (issue 31).

One module per kind (:mod:`.postgres`, :mod:`.duckdb_file`, :mod:`.parquet_dataset`); each writes the
same table a CSV gives (``_row`` then every column as text), so validation and every release treat the
table alike whatever holds it. :mod:`dpcore.ingest` stays the one place that stores a raw table: it calls
:func:`create_text_table` inside its write transaction. Everything here happens before any charge, and
every refusal is a :class:`SourceError` naming the kind, the table or column and the fix, never data or
the connection string.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import SourceError

if TYPE_CHECKING:
    from dpcore.release.spec import ReleaseSpec

__all__ = ["SourceError", "create_text_table", "is_text_source", "describe"]


def is_text_source(source) -> bool:
    """Whether ``source`` is read by this package (a database, or a Parquet *folder*; a Parquet file is not)."""
    if source.kind in ("postgres", "duckdb"):
        return True
    return source.kind == "parquet" and Path(source.path).is_dir()


def describe(source) -> str:
    """The source as the private catalogue records it: kind and table or path, never a connection string."""
    if source.kind == "postgres":
        from .postgres import where
    elif source.kind == "duckdb":
        from .duckdb_file import where
    else:
        from .parquet_dataset import where
    return where(source)


def create_text_table(con, target: str, source, spec: "ReleaseSpec | None" = None,
                      memory_setting: str | None = None, scratch: "Path | None" = None, *,
                      csv_options: str) -> list:
    """Write ``source`` into the new table ``target`` of ``con``: ``_row`` then every column as text.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The warehouse's (or an in-memory) connection, inside the caller's transaction.
    target : str
        Qualified, quoted name of the table to create.
    source : PostgresSource, DuckdbSource or ParquetSource (a folder)
    spec : ReleaseSpec, optional
        When given, the source's column types are checked against its public schema first
        (:func:`~dpcore.ingest.sources.columns.check_types`); ``dpr spec draft`` has no spec yet.
    memory_setting : str, optional
        DuckDB ``memory_limit`` for a DuckDB file's own connection.
    scratch : Path, optional
        A private folder (0700) for a PostgreSQL source's spool file, the warehouse's scratch folder
        (:func:`dpcore.storage.partitions.scratch_dir`); None: a new private temporary folder.
    csv_options : str
        DuckDB ``read_csv`` options of a CSV ingest (:func:`dpcore.ingest.raw.csv_read_options`): a PostgreSQL
        source's spooled parts are read with them, as ingest reads a CSV.

    Returns
    -------
    list of Column
        The source's columns with their types (public: the catalogue's), in order.

    Raises
    ------
    SourceError
        Before any charge (ingest runs before a release's reservation).
    """
    if source.kind == "postgres":
        from . import postgres

        return postgres.create(con, target, source, spec, scratch, csv_options=csv_options)
    elif source.kind == "duckdb":
        from . import duckdb_file

        return duckdb_file.create(con, target, source, spec, memory_setting)
    elif source.kind == "parquet":
        from . import parquet_dataset

        return parquet_dataset.create(con, target, source, spec)
    else:
        raise ValueError(f"dataset.source.kind {source.kind!r} is not read by dpcore.ingest.sources")
