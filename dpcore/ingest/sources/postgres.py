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
   (:func:`~dpcore.ingest.sources.columns.check_types`) before any row is read.
4. ``COPY (SELECT <every column>::text ...) TO STDOUT (FORMAT csv)`` streams the rows into a private spool
   file (0600) in the warehouse's private scratch folder (0700), and DuckDB's parallel CSV reader, with the
   options of a CSV ingest, writes the warehouse table from it; the spool is removed as soon as the read
   ends, whatever its outcome (a process killed in between leaves it in the scratch folder, which holds the
   same rows as the warehouse file beside it under the same owner-only modes). Memory is flat in rows (a
   1 MB write buffer; DuckDB under its ``memory_limit``). Why a spool and not a stream: DuckDB's CSV reader
   needs a file to read in parallel, and streaming the rows through pyarrow's single-threaded reader and
   DuckDB's appender in 4 MB blocks was 1.10-1.29x slower than the owner's workaround (``COPY ... TO`` a CSV,
   then a CSV ingest) with a peak RSS growing 499 to 829 MB from 1x to 10x (BENCHMARKS "Ingest from
   typed sources", ``benchmarks/ingest_sources.py``).

Cells are PostgreSQL's text of each value (``::text``: ``true``/``false`` for booleans, ISO dates), NULL as the
empty cell. ``_row`` numbers the rows in the order the server sends them: a table in its storage order, a
query in its own (add ``ORDER BY`` for a numbering that never changes).

A series spec's query may use ``{period}``, ``{period_start}`` and ``{period_end}``: each is bound as a
query parameter (the period's label, its first day and the day after its last), never pasted into the text.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dpcore.storage.lineage import new_nonce
from dpcore.storage.private_files import private_open
from .columns import BOOLEAN, DECIMAL, FLOAT, INTEGER, NESTED, OTHER, ROW, TEXT, Column, check_names, check_types
from .errors import SourceError
from .table import _ident

if TYPE_CHECKING:
    from dpcore.release.spec import PostgresSource, ReleaseSpec

#: PostgreSQL type OIDs by family (pg_type): the catalogue's types, public metadata of the source.
_OIDS = {16: (BOOLEAN, "boolean"), 20: (INTEGER, "bigint"), 21: (INTEGER, "smallint"), 23: (INTEGER, "integer"),
         26: (INTEGER, "oid"), 700: (FLOAT, "real"), 701: (FLOAT, "double precision"), 1700: (DECIMAL, "numeric"),
         25: (TEXT, "text"), 1043: (TEXT, "character varying"), 1042: (TEXT, "character"), 19: (TEXT, "name"),
         18: (TEXT, "\"char\""), 1082: (OTHER, "date"), 1114: (OTHER, "timestamp"), 1184: (OTHER, "timestamptz"),
         2950: (OTHER, "uuid"), 114: (OTHER, "json"), 3802: (OTHER, "jsonb")}
#: Seconds to wait for the server to answer a connection.
CONNECT_TIMEOUT = 10
#: Bytes buffered before each write of a spool part.
SPOOL_BUFFER = 1 << 20
#: Most bytes of rows per spool part (DuckDB reads a part while the next is written); at most a quarter of
#: DuckDB's ``memory_limit`` too (:func:`_part_bytes`): DuckDB's CSV reader may hold a small file whole, and a
#: 64 MB part failed under ``DPR_MEMORY_LIMIT=256MB`` (a 61 MiB ``memory_limit``).
PART_BYTES = 16 << 20


def _part_bytes() -> int:
    """:data:`PART_BYTES`, or a quarter of DuckDB's share of ``DPR_MEMORY_LIMIT`` when that is smaller (>= 1 MB)."""
    from dpcore.runtime.chunks import DUCKDB_SHARE, MemoryBudget

    return min(PART_BYTES, max(1 << 20, int(MemoryBudget.from_env().effective_limit * DUCKDB_SHARE) // 4))
#: Names a series spec's query may use (bound as parameters; dpcore.release.series.PERIOD_PARAMETERS).
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
    from dpcore.release.periods import parse_period

    p = parse_period(spec.series.period, source.period)
    values = {"period": p.label, "period_start": p.start, "period_end": p.end}
    text = query.replace("%", "%%")  # psycopg's placeholders: a literal % is doubled once parameters are bound
    for n in used:
        text = text.replace("{" + n + "}", f"%({n})s")
    return f"({text})", {n: values[n] for n in used}


def _columns(cur, source: "PostgresSource") -> list[Column]:
    """The columns of the query's result with their families; arrays and records are nested (issue 47.4)."""
    import psycopg

    out = []
    for d in cur.description:
        family, name = _OIDS.get(d.type_code, (OTHER, f"type oid {d.type_code}"))
        info = psycopg.adapters.types.get(d.type_code)
        if info is not None and (info.array_oid == d.type_code or info.name == "record"):
            family, name = NESTED, (f"{info.name}[]" if info.array_oid == d.type_code else info.name)
        if family == DECIMAL and d.scale == 0:
            family = INTEGER
        out.append(Column(d.name, name, family))
    return out


class _PartLoader:
    """Loads the spool's closed parts into ``target`` in order, in one background thread, while the next is written.

    Each part is a CSV file with a header of ``names``; its rows get ``_row`` numbers continuing the previous
    part's (``row_number() OVER ()`` over DuckDB's parallel scan numbers rows in file order, as for a CSV ingest).
    A part is removed once loaded (or when the load stops). The first error is kept and raised by :meth:`close`;
    later parts are then removed unread.
    """

    def __init__(self, con, target: str, columns: list[Column], names: list[str], csv_options: str):
        import queue
        import threading

        types = ", ".join(f"'{n}': 'VARCHAR'" for n in names)
        out = ", ".join(f"coalesce({n}, '') AS {_ident(c.name)}" for n, c in zip(names, columns))
        self._sql = (f"INSERT INTO {target} SELECT row_number() OVER () + ? AS {ROW}, {out} FROM read_csv(?, "
                     f"columns = {{{types}}}, {csv_options}, delim = ',', null_padding = false, parallel = true)")
        self._con, self._rows, self.error = con, 0, None
        con.execute(f"CREATE TABLE {target} ({ROW} BIGINT, "
                    + ", ".join(f"{_ident(c.name)} VARCHAR" for c in columns) + ")")
        self._parts: "queue.Queue[Path | None]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="dpr-postgres-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (part := self._parts.get()) is not None:
            try:
                if self.error is None:
                    self._rows += self._con.execute(self._sql, [self._rows, str(part)]).fetchone()[0]
            except BaseException as exc:  # noqa: BLE001 - kept and raised by close() in the caller's thread
                self.error = exc
            finally:
                part.unlink(missing_ok=True)

    def put(self, part: Path) -> None:
        """Queue a closed part (raises the load's error at once, so the writer stops early)."""
        self._parts.put(part)
        if self.error is not None:
            raise self.error

    def close(self) -> int:
        """Wait for the queued parts; the rows loaded. Raises the first load error."""
        self._parts.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self._rows


def _copy_in_parts(conn, sql: str, params: dict | None, names: list[str], folder: Path,
                   loader: _PartLoader) -> None:
    """Write the ``COPY ... TO STDOUT`` stream to private part files (0600) of about :func:`_part_bytes` each.

    The server sends one message per row (PostgreSQL's protocol, CopyData), so a part ends at a row's end. Each
    closed part goes to ``loader`` while the next is written: the server's formatting and DuckDB's parsing
    overlap, and at most two parts of the table are on disk at a time. An error of the server or the driver is
    raised as is (the caller replaces it by its refusal); a write error (a full disk) is raised as the
    ``OSError`` it is, naming the scratch folder.
    """
    header = (",".join(names) + "\n").encode("ascii")
    part_bytes = _part_bytes()
    fh, path, size = None, None, 0
    try:
        with conn.cursor() as cur, cur.copy(sql, params) as copy:
            for block in copy:
                if fh is None:
                    path = folder / f"postgres-{new_nonce(8)}.csv"
                    fh = private_open(path, "xb", buffering=SPOOL_BUFFER)
                    fh.write(header)
                    size = 0
                try:
                    fh.write(block)
                except OSError as exc:
                    raise OSError(exc.errno, f"writing the postgres source's private spool in {folder}: "
                                             f"{exc.strerror}") from None
                size += len(block)
                if size >= part_bytes:
                    fh.close()
                    fh, done, path = None, path, None
                    loader.put(done)
        if fh is not None:
            fh.close()
            fh, done, path = None, path, None
            loader.put(done)
    finally:
        if fh is not None:
            fh.close()
        if path is not None:
            path.unlink(missing_ok=True)


def _load_failure(source: "PostgresSource", exc: BaseException) -> Exception:
    """DuckDB failed on the spooled rows (its text may quote a row): the type and where, never the text."""
    import duckdb

    if isinstance(exc, duckdb.OutOfMemoryException):
        return MemoryError(f"{where(source)}: DuckDB ran out of memory while loading the rows; raise "
                           "DPR_MEMORY_LIMIT (nothing was stored or charged)")
    return RuntimeError(f"{where(source)}: DuckDB could not load the spooled rows ({type(exc).__name__}); "
                        "nothing was stored or charged")


def create(con, target: str, source: "PostgresSource", spec: "ReleaseSpec | None",
           scratch: Path | None = None, *, csv_options: str) -> list[Column]:
    """Copy the table or query into ``target`` (a table of ``con``) as text cells, ``_row`` first.

    The rows are spooled to private part files in ``scratch`` (the warehouse's scratch folder; None: a new
    private temporary folder), each read by DuckDB's parallel CSV reader with the options of a CSV ingest
    (``csv_options``: :func:`dpcore.ingest.raw.csv_read_options`, passed in by the caller) while
    the next is written (:func:`_copy_in_parts`); every part is removed once read, whatever the outcome.

    Raises
    ------
    SourceError
        The connection string missing, the server unreachable, a wrong password, no such table, a failing
        or writing query, a permission error, a refused column type or name: each names the source kind,
        the table or spec key and the fix; never the DSN, the password, the server's text or a value.
    """
    relation, params = _statement(source, spec)
    conn = _connect(source)
    own = scratch is None
    folder = Path(tempfile.mkdtemp(prefix="dpr-postgres-")) if own else scratch
    loader = None
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
        loader = _PartLoader(con, target, cols, names, csv_options)
        err = None
        try:
            _copy_in_parts(conn, sql, params, names, folder, loader)
            loader, pending = None, loader
            pending.close()
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - the server's, the driver's or DuckDB's text may quote a value
            err = _load_failure(source, exc) if loader is None or exc is loader.error else \
                _refusal(source, exc, connecting=False)
        if err is not None:
            raise err from None
        return cols
    finally:
        if loader is not None:  # stopped early: let the loader finish what it holds (and remove it) first
            loader.error = loader.error or RuntimeError("stopped")
            try:
                loader.close()
            except BaseException:  # noqa: BLE001 - the error being raised already says what failed
                pass
        conn.close()
        if own:
            shutil.rmtree(folder, ignore_errors=True)
