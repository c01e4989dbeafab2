"""A PostgreSQL table or read-only query, streamed into the warehouse as text cells (issue 31).

``source: {kind: postgres, dsn_env: DPR_PG_DSN, table: public.wages}`` (or ``query:``; or ``dsn_file:``
instead of ``dsn_env``). How it reads:

1. The connection string comes from the environment variable ``dsn_env`` or the owner-only file
   ``dsn_file`` (refused when group or others may read it), at the moment of connecting. It is never
   logged, stored, put in a message or kept after the connection is made; every error of the driver or
   the server is replaced by a message of this module naming the source kind, the table or spec key,
   the SQLSTATE class and the fix (the driver's own text may quote the host, the user, or a value).
2. The connection is read-only (``default_transaction_read_only``: the server refuses any write of a query).
3. The column types of the table or query are read with ``LIMIT 0`` (no row) and checked against the spec
   (:func:`~dpcore.sources.columns.check_types`) before any row is read.
4. ``COPY (SELECT <every column>::text ...) TO STDOUT (FORMAT csv)`` streams the rows; pyarrow's streaming
   CSV reader parses the stream in blocks of :data:`~dpcore.sources.table.BLOCK_BYTES` (C++, no per-row
   Python) and each block is appended to the warehouse table. Memory is flat in rows; measured against the
   owner's workaround (``COPY ... TO`` a CSV, then CSV ingest) in ``benchmarks/ingest_validate.py``.

Cells are PostgreSQL's text of each value (``::text``: ``true``/``false`` for booleans, ISO dates), NULL as the
empty cell. ``_row`` numbers the rows in the order the server sends them: a table in its storage order, a
query in its own (add ``ORDER BY`` for a numbering that never changes).

A series spec's query may use ``{period}``, ``{period_start}`` and ``{period_end}``: each is bound as a
query parameter (the period's label, its first day and the day after its last), never pasted into the text.
"""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from .columns import BOOLEAN, DECIMAL, FLOAT, INTEGER, OTHER, TEXT, Column, check_names, check_types
from .errors import SourceError
from .table import BLOCK_BYTES, guarded, write_batches

if TYPE_CHECKING:
    from ..spec import PostgresSource, ReleaseSpec

#: PostgreSQL type OIDs by family (pg_type): the catalogue's types, public metadata of the source.
_OIDS = {16: (BOOLEAN, "boolean"), 20: (INTEGER, "bigint"), 21: (INTEGER, "smallint"), 23: (INTEGER, "integer"),
         26: (INTEGER, "oid"), 700: (FLOAT, "real"), 701: (FLOAT, "double precision"), 1700: (DECIMAL, "numeric"),
         25: (TEXT, "text"), 1043: (TEXT, "character varying"), 1042: (TEXT, "character"), 19: (TEXT, "name"),
         18: (TEXT, "\"char\""), 1082: (OTHER, "date"), 1114: (OTHER, "timestamp"), 1184: (OTHER, "timestamptz"),
         2950: (OTHER, "uuid"), 114: (OTHER, "json"), 3802: (OTHER, "jsonb")}
#: Seconds to wait for the server to answer a connection.
CONNECT_TIMEOUT = 10
#: Names a series spec's query may use (bound as parameters; dpcore.series.PERIOD_PARAMETERS).
PERIOD_PARAMETERS = ("period", "period_start", "period_end")


def where(source: "PostgresSource") -> str:
    """How messages name the source: the table, or the query key (never the query's text, the DSN or data)."""
    return f"postgres source ({'table ' + source.table if source.table else 'dataset.source.query'})"


def _dsn_origin(source: "PostgresSource") -> str:
    return f"environment variable {source.dsn_env} (dataset.source.dsn_env)" if source.dsn_env else \
        f"file {source.dsn_file} (dataset.source.dsn_file)"


def _dsn(source: "PostgresSource") -> str:
    """The connection string, read now from its variable or file; refused (never quoted) when missing."""
    if source.dsn_env:
        value = os.environ.get(source.dsn_env, "")
        if not value.strip():
            raise SourceError(f"{where(source)}: the {_dsn_origin(source)} is not set or empty; export the libpq "
                              f"connection string in it before the run (e.g. postgresql://user@host/db, the "
                              "password in ~/.pgpass or in the variable)")
        return value.strip()
    path = Path(source.dsn_file)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SourceError(f"{where(source)}: the {_dsn_origin(source)} does not exist; write the connection "
                          "string in it (chmod 600)") from None
    except PermissionError:
        raise SourceError(f"{where(source)}: the {_dsn_origin(source)} cannot be read by this user; give the "
                          "owner read access (chmod 600)") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SourceError(f"{where(source)}: the {_dsn_origin(source)} may be read by group or others; make it "
                          f"the owner's only: chmod 600 {source.dsn_file}")
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise SourceError(f"{where(source)}: the {_dsn_origin(source)} cannot be read as UTF-8 text; write the "
                          "connection string in it") from None
    if not value:
        raise SourceError(f"{where(source)}: the {_dsn_origin(source)} is empty; write the connection string in it")
    return value


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise SourceError("postgres source: the PostgreSQL driver is not installed; install psycopg "
                          "(pip install 'psycopg[binary]==3.3.9', or this project's dev extra)") from None
    return psycopg


#: SQLSTATE -> what it means and how to fix it (the class only; the server's text is never shown).
_STATES = {
    "28P01": "authentication failed (wrong password or user in the connection string, or ~/.pgpass); fix the "
             "credentials in the {origin}",
    "28000": "the server refused this login (no such role, pg_hba.conf, or the role cannot log in); fix the user "
             "in the {origin}, or ask the database's administrator",
    "3D000": "the database does not exist; fix the database name in the {origin}",
    "42P01": "the table does not exist or is not visible to this user; check dataset.source.table (schema.name) "
             "or the query's FROM",
    "3F000": "the schema does not exist; check dataset.source.table (schema.name)",
    "42501": "permission denied; grant SELECT on the table to the connecting role (GRANT SELECT ON ... TO ...)",
    "42601": "the query has a syntax error; fix dataset.source.query (a read-only SELECT)",
    "42703": "the query names a column that does not exist; fix dataset.source.query",
    "25006": "the query tries to write, and the source is read in a read-only transaction; give a read-only "
             "SELECT in dataset.source.query",
    "57014": "the server cancelled the query (a statement timeout); raise the role's statement_timeout",
    "53300": "the server has too many connections; retry later",
}


def _login_state(exc: BaseException) -> str | None:
    """The SQLSTATE of a failed login, which libpq reports in its text only (read here, never shown)."""
    text = str(exc)
    if "password authentication failed" in text or "no password supplied" in text:
        return "28P01"
    if "pg_hba.conf" in text or ('role "' in text and "does not exist" in text):
        return "28000"
    if 'database "' in text and "does not exist" in text:
        return "3D000"
    return None


def _refusal(source: "PostgresSource", exc: BaseException, connecting: bool) -> SourceError:
    """A safe message for a driver or server error: its SQLSTATE class and the fix, never its own text."""
    state = getattr(exc, "sqlstate", None) or (_login_state(exc) if connecting else None)
    origin = _dsn_origin(source)
    if state in _STATES:
        why = _STATES[state].format(origin=origin)
    elif connecting:
        psycopg = _psycopg()
        if isinstance(exc, psycopg.ProgrammingError):
            why = f"the {origin} does not hold a valid libpq connection string; fix it"
        else:
            why = ("the server could not be reached or refused the connection (host, port, socket folder or "
                   f"database in the {origin}; is the server running?)")
    elif state:
        why = (f"the server refused the {'query' if source.query else 'read'} (SQLSTATE {state}); check "
               f"dataset.source.{'query' if source.query else 'table'}")
    else:
        why = f"the read failed ({type(exc).__name__}); check the source and retry"
    return SourceError(f"{where(source)}: {why} (nothing was read or charged)")


def _connect(source: "PostgresSource"):
    psycopg = _psycopg()
    dsn = _dsn(source)
    try:
        conn = psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT, application_name="dpr-ingest",
                               options="-c default_transaction_read_only=on", client_encoding="UTF8")
    except Exception as exc:  # noqa: BLE001 - the driver's text may hold the host, the user or the DSN
        err = _refusal(source, exc, connecting=True)
    else:
        conn.read_only = True
        return conn
    del dsn
    raise err from None


def _statement(source: "PostgresSource", spec: "ReleaseSpec | None") -> tuple[str, dict | None]:
    """The relation to read (``FROM`` text) and its bound parameters (a series' period), if any."""
    if source.table:
        return source.table, None
    query = source.query
    used = [n for n in PERIOD_PARAMETERS if "{" + n + "}" in query]
    if not used:
        return f"({query})", None
    if spec is None or spec.series is None or source.period is None:
        raise SourceError(f"{where(source)}: the query uses {{{used[0]}}}, which only a series spec fills (its "
                          "period); add a series section to the spec or remove the placeholder")
    from ..periods import parse_period

    p = parse_period(spec.series.period, source.period)
    values = {"period": p.label, "period_start": p.start, "period_end": p.end}
    text = query.replace("%", "%%")  # psycopg's placeholders: a literal % is doubled once parameters are bound
    for n in used:
        text = text.replace("{" + n + "}", f"%({n})s")
    return f"({text})", {n: values[n] for n in used}


def _columns(cur, source: "PostgresSource") -> list[Column]:
    out = []
    for d in cur.description:
        family, name = _OIDS.get(d.type_code, (OTHER, f"type oid {d.type_code}"))
        if family == DECIMAL and d.scale == 0:
            family = INTEGER
        out.append(Column(d.name, name, family))
    return out


class _CopyStream(io.RawIOBase):
    """The bytes of a ``COPY ... TO STDOUT`` as a readable file (for pyarrow's streaming CSV reader)."""

    def __init__(self, copy):
        self._copy = copy
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        """Fill ``b`` with as many of the server's messages as fit (one per row): pyarrow's reader is called once
        per block, not once per row."""
        view = memoryview(b).cast("B")
        want, n = len(view), 0
        if self._buf:
            n = min(want, len(self._buf))
            view[:n] = self._buf[:n]
            self._buf = self._buf[n:]
        while n < want:
            chunk = self._copy.read()
            if not chunk:
                break
            k = min(want - n, len(chunk))
            view[n:n + k] = chunk[:k]
            if k < len(chunk):
                self._buf = bytes(chunk[k:])
            n += k
        return n


def create(con, target: str, source: "PostgresSource", spec: "ReleaseSpec | None") -> list[Column]:
    """Stream the table or query into ``target`` (a table of ``con``) as text cells, ``_row`` first.

    Raises
    ------
    SourceError
        The connection string missing, the server unreachable, a wrong password, no such table, a failing
        or writing query, a permission error, a refused column type or name: each names the source kind,
        the table or spec key and the fix; never the DSN, the password, the server's text or a value.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    relation, params = _statement(source, spec)
    conn = _connect(source)
    try:
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM {relation} AS dpr_q LIMIT 0", params)
                cols = _columns(cur, source)
        except Exception as exc:  # noqa: BLE001
            err = _refusal(source, exc, connecting=False)
        else:
            err = None
        if err is not None:
            raise err from None
        check_names(where(source), cols)
        if spec is not None:
            check_types(where(source), cols, spec)
        cells = ", ".join(f"coalesce(dpr_q.\"{c.name.replace(chr(34), chr(34) * 2)}\"::text, '')" for c in cols)
        sql = f"COPY (SELECT {cells} FROM {relation} AS dpr_q) TO STDOUT WITH (FORMAT csv)"
        names = [f"c{i}" for i in range(len(cols))]
        read = pacsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES, use_threads=False)
        parse = pacsv.ParseOptions(newlines_in_values=True)
        convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                       quoted_strings_can_be_null=False)

        def batches():
            with conn.cursor() as cur:
                with cur.copy(sql, params) as copy:
                    stream = io.BufferedReader(_CopyStream(copy), BLOCK_BYTES)
                    if not stream.peek(1):  # no row (pyarrow refuses an empty CSV): an empty table
                        return
                    yield from pacsv.open_csv(stream, read_options=read, parse_options=parse,
                                              convert_options=convert)

        write_batches(con, target, cols, guarded(batches(), lambda exc: _refusal(source, exc, connecting=False)))
        return cols
    finally:
        conn.close()
