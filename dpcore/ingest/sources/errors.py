"""The refusal of a source that cannot be read (issue 31)."""
from __future__ import annotations


class SourceError(ValueError):
    """A PostgreSQL, DuckDB-file or Parquet-dataset source cannot be read as the spec says; nothing was charged.

    The message names the source kind, the table, query key or column and the fix. It never holds a value of
    the data, a server's own error text (which may quote a row) or the connection string (issue 31).
    """
