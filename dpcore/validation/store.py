"""Validation's warehouse tables: the validated and quarantined rows, the results, the stored summaries.

great-expectations' per-row results contain the raw cell values. The combined
result (:attr:`~dpcore.validation.ValidationOutcome.full_result`) is written only to
``internal.validation_results``, each chunk's complete result only to
``internal.validation_result_chunks``; quarantined rows (with their cells) go
only to the ``quarantine`` schema. Everything of one validation is written in
one transaction (:func:`_store`), ``raw`` is never touched.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from dpcore.ingest.raw import IngestResult
from dpcore.release.spec import ReleaseSpec
from dpcore.storage.quoting import sql_text
from dpcore.storage.warehouse import Warehouse
from .outcome import ValidationOutcome
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


_RESULTS_DDL = """CREATE TABLE IF NOT EXISTS internal.validation_results (
    content_hash VARCHAR, dataset VARCHAR, spec_hash VARCHAR, created_at TIMESTAMPTZ,
    n_rows BIGINT, n_valid BIGINT, n_rejected BIGINT, summary_json VARCHAR, result_json VARCHAR)"""


def validated_table_name(ingest_result: IngestResult, spec: ReleaseSpec) -> str:
    """Table name (in ``validated`` and ``quarantine``) for an input validated under a spec.

    Named by the raw table (one per distinct input: the same for every ingest of
    the same bytes, :func:`dpcore.ingest.raw.ingest`) and the spec's validation hash,
    so two specs with different schemas never overwrite each other's results.
    Private, like the raw table's name: a stored validation is reused under the
    hood (:func:`latest_passing_summary`, keyed on the content hash) and no public
    name or message says so.
    """
    return table_name(ingest_result.table, spec.validation_hash())


def table_name(raw_table: str, validation_hash: str) -> str:
    """:func:`validated_table_name` from the raw table's name and the spec's validation hash (both private)."""
    return f"{raw_table}__v{validation_hash[:8]}"


def latest_passing_summary(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec) -> dict | None:
    """The stored summary of an earlier validation of this input under this spec, if it passed.

    Returns None when there is none, when its tables are gone, or when it did
    not pass :func:`enforce` (then the caller validates again and fails loudly).
    """
    wh.run(lambda con: con.execute(_RESULTS_DDL))
    rows = wh.query(
        "SELECT summary_json FROM internal.validation_results WHERE content_hash = ? AND spec_hash = ? "
        "ORDER BY created_at DESC LIMIT 1",
        [ingest_result.content_hash, spec.validation_hash()],
    )
    if not rows or not wh.table_exists("validated", validated_table_name(ingest_result, spec)):
        return None
    summary = json.loads(rows[0][0])
    if summary.get("table_failures"):
        return None
    return summary


def owner_summary(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec) -> dict | None:
    """The latest stored validation summary of this input under this spec (data owner only), or None."""
    wh.run(lambda con: con.execute(_RESULTS_DDL))
    rows = wh.query(
        "SELECT summary_json FROM internal.validation_results WHERE content_hash = ? AND spec_hash = ? "
        "ORDER BY created_at DESC LIMIT 1",
        [ingest_result.content_hash, spec.validation_hash()],
    )
    return json.loads(rows[0][0]) if rows else None


_CHUNKS_DDL = """CREATE TABLE IF NOT EXISTS internal.validation_result_chunks (
    content_hash VARCHAR, dataset VARCHAR, spec_hash VARCHAR, created_at TIMESTAMPTZ,
    chunk BIGINT, first_row BIGINT, last_row BIGINT, result_json VARCHAR)"""


@dataclass(frozen=True)
class SqlRows:
    """Rows given as a DuckDB query run inside :func:`_store`'s transaction (may read the raw table and Parquet files)."""

    sql: str


@dataclass(frozen=True, eq=False)
class LaterRows:
    """Quarantine rows still to be written to a private Parquet file: ``build()`` returns the file and its row count.

    :func:`_store` runs every ``build`` on one thread, in order, while DuckDB writes the ``validated``
    table (the builds must not use the warehouse's connection), and waits for them before it returns or
    raises (the caller removes their folder afterwards).
    """

    build: Callable[[], tuple[Path, int]]


@dataclass(frozen=True)
class _ChunkRows:
    """One chunk's output for :func:`_store`: frames in memory, files written by :func:`_validate_chunk`, or a query.

    A part that is None adds nothing (no validated rows, no quarantine rows, no result row).
    """

    validated: pd.DataFrame | Path | SqlRows | None
    quarantine: pd.DataFrame | Path | LaterRows | None
    result: dict | Path | None
    n_quarantine: int
    first_row: int | None
    last_row: int | None


def _store(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec, outcome: ValidationOutcome,
           chunks: list[_ChunkRows]) -> dict:
    """Write the chunks' rows and results and the outcome in ONE transaction (``raw`` is never touched).

    ``validated`` and ``quarantine`` are replaced (validation is re-derivable from ``raw``):
    created from the first chunk and appended to chunk by chunk in row order, inside the
    transaction, so a crash leaves the previous tables (or none), never half a table. Quarantine rows
    given as :class:`LaterRows` are built on a thread meanwhile (issue 29, goal 2). Each
    chunk's complete great-expectations result is one row of
    ``internal.validation_result_chunks``; the combined outcome one row of
    ``internal.validation_results`` (same ``created_at``).
    """
    table = validated_table_name(ingest_result, spec)
    validated_t = f'validated."{table}"'
    quarantine_t = f'quarantine."{table}"'
    created = datetime.now(timezone.utc)
    key = [ingest_result.content_hash, spec.dataset.name, spec.validation_hash(), created]

    def source(con, obj, name: str) -> str:
        if isinstance(obj, pd.DataFrame):
            con.register(name, obj)
            return name
        return f"read_parquet({sql_text(obj)})"

    def quarantine_of(ch: _ChunkRows) -> tuple[object, int]:
        if isinstance(ch.quarantine, LaterRows):
            return later[id(ch.quarantine)].result()
        return ch.quarantine, ch.n_quarantine

    def op(con):
        con.execute(
            f'CREATE OR REPLACE TABLE {quarantine_t} (_row BIGINT, record_id VARCHAR, rule VARCHAR, '
            f'"column" VARCHAR, cells VARCHAR)'
        )
        con.execute(_RESULTS_DDL)
        con.execute(_CHUNKS_DDL)
        first_validated, n_results = True, 0
        for ch in chunks:
            if ch.validated is not None:
                verb = f"CREATE OR REPLACE TABLE {validated_t} AS" if first_validated else f"INSERT INTO {validated_t}"
                if isinstance(ch.validated, SqlRows):
                    con.execute(f"{verb} {ch.validated.sql}")
                else:
                    con.execute(f"{verb} SELECT * FROM {source(con, ch.validated, '_validated')}")
                first_validated = False
            q_rows, n_q = quarantine_of(ch)
            if n_q and q_rows is not None:
                q = source(con, q_rows, "_quarantine")
                con.execute(
                    f'INSERT INTO {quarantine_t} SELECT CAST(_row AS BIGINT), CAST(record_id AS VARCHAR), '
                    f'CAST(rule AS VARCHAR), CAST("column" AS VARCHAR), CAST(cells AS VARCHAR) FROM {q}'
                )
            for name in ("_validated", "_quarantine"):
                try:
                    con.unregister(name)
                except Exception:  # noqa: BLE001 (not registered: a file source)
                    pass
            if ch.result is None:
                continue
            text = json.dumps(ch.result) if isinstance(ch.result, dict) else Path(ch.result).read_text("utf-8")
            con.execute(
                "INSERT INTO internal.validation_result_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [*key, n_results, ch.first_row, ch.last_row, text],
            )
            n_results += 1
        if first_validated:
            raise ValueError("no chunk holds the validated rows (a programming error)")
        con.execute(
            "INSERT INTO internal.validation_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*key, outcome.n_rows, outcome.n_valid, outcome.n_rejected, json.dumps(outcome.summary()),
             json.dumps(outcome.full_result)],
        )

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        later = {id(ch.quarantine): pool.submit(ch.quarantine.build) for ch in chunks
                 if isinstance(ch.quarantine, LaterRows)}
        wh.run(op, transaction=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return {"validated": validated_t, "quarantine": quarantine_t, "results": "internal.validation_results"}


def store_outcome(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec, outcome: ValidationOutcome) -> dict:
    """Write an in-memory outcome (:func:`validate`) to the warehouse (one transaction; ``raw`` is never touched).

    Writes ``validated."<table>"`` and ``quarantine."<table>"`` (replaced:
    validation is re-derivable from ``raw``), appends the full great-expectations
    result to ``internal.validation_results`` and the chunk's complete result to
    ``internal.validation_result_chunks``. The same writer as :func:`validate_table`
    (:func:`_store`) with one chunk.

    Parameters
    ----------
    wh : Warehouse
    ingest_result : IngestResult
    spec : ReleaseSpec
    outcome : ValidationOutcome
        From :func:`validate` (holding its frames).

    Returns
    -------
    dict
        ``{"validated": ..., "quarantine": ..., "results": ...}`` qualified table names.

    Raises
    ------
    ValueError
        The outcome holds no frames (:func:`validate_table` stores its rows itself).
    """
    if outcome.validated is None or outcome.quarantine is None:
        raise ValueError("this outcome holds no rows: validate_table() already stored them")
    ch = _ChunkRows(
        outcome.validated, outcome.quarantine, (outcome.chunk_results or [{}])[0], len(outcome.quarantine),
        None, None,
    )
    return _store(wh, ingest_result, spec, outcome, [ch])
