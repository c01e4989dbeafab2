"""Validate a warehouse table without holding it in memory (issues 21 and 29; DESIGN.md "Scale"): :func:`validate_table`.

Where it applies (:func:`~dpcore.validation.by_values.applies`: every declared column present, text or
integer columns, a non-empty table) :func:`validate_table` validates by distinct values
(:mod:`dpcore.validation.by_values`, issue 29): great-expectations decides each distinct cell value once
and DuckDB joins the verdicts back to the rows. Otherwise, and with ``by_values=False``, it validates
chunk by chunk as described below; both store the same result (tests/test_validation_by_values.py).

:func:`validate_table` never holds the table in memory. It streams the raw table from
DuckDB in chunks of a public size (:func:`validation_chunk_rows`, from
``DPR_MEMORY_LIMIT`` and the columns), runs the same suite on every chunk
(:func:`~dpcore.validation.check._check`, mappable onto other processes:
:mod:`dpcore.validation.worker`), combines the chunks' verdicts
(:func:`~dpcore.validation.combine._combine`,
:func:`~dpcore.validation.combine._combine_results`) and writes the validated and
quarantined rows chunk by chunk inside one transaction
(:func:`~dpcore.validation.store._store`). great-expectations' SQL data source does not
work over DuckDB here (great-expectations 1.24 with duckdb-engine 0.17: its metric
queries return no row), hence the pandas batches.

The chunked path logs nothing; chunk files live in the warehouse's private
scratch folder and are removed on exit.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from dpcore.runtime.chunks import MemoryBudget, serial_map
from dpcore.ingest.raw import ROW, IngestResult
from dpcore.storage.lineage import new_nonce
from dpcore.storage.partitions import scratch_dir
from dpcore.release.spec import ReleaseSpec
from dpcore.storage.warehouse import Warehouse
from .by_values import applies, validate_by_values
from .combine import _combine
from .duplicates import _copy_flagged_ranges, _duplicated_rows_sql, _flag_name, _q
from .outcome import ValidationOutcome
from .store import _ChunkRows, _store
from .worker import ChunkTask, _validate_chunk


#: Bytes per row and raw column of a chunk (a short text cell as a Python/Arrow string, as
#: :meth:`dpcore.runtime.chunks.MemoryBudget.chunk_rows` counts it) and per derived float64 column.
#: great-expectations' working set on a chunk is about twice the columns' size (measured on the
#: demo: ~1.3 kB per row of 11 raw and 8 derived columns), well inside the cap's share for a chunk.
BYTES_PER_TEXT_CELL = 60
BYTES_PER_DERIVED_CELL = 8


def validation_chunk_rows(memory: MemoryBudget, spec: ReleaseSpec, n_columns: int) -> int:
    """Rows per chunk of :func:`validate_table`: a public function of the memory cap and the columns only.

    Parameters
    ----------
    memory : MemoryBudget
        The owner's cap (the warehouse's).
    spec : ReleaseSpec
        Its numeric attributes add derived columns (the parsed number, and its rounding when integer).
    n_columns : int
        Columns of the raw table (from its header: public).

    Returns
    -------
    int
    """
    derived = sum(1 + int(a.integer) for a in spec.public_schema.numeric.values())
    return memory.chunk_rows(BYTES_PER_TEXT_CELL * n_columns + BYTES_PER_DERIVED_CELL * derived)


def _export_chunks(wh: Warehouse, source: str, columns: dict[str, str], rid: str, rows: int,
                   folder: Path) -> tuple[list[str], str]:
    """Write the raw table to ``folder`` as one Parquet file per chunk of ``rows`` input rows, with the duplicate flag.

    The ``unique`` rule is decided once over the whole table (:func:`_duplicated_rows_sql`, into a
    temporary table of duplicated row numbers); then chunk ``k`` holds the rows with
    ``_row`` in ``[lo + k*rows, lo + (k+1)*rows)`` in ``_row`` order (``_row`` is ``1..n``, so
    every chunk but the last has ``rows`` rows). DuckDB reads each range through the
    ``_row`` zone maps and sorts only that chunk, and writes the file itself: no Python memory,
    and no sort of the whole table.

    Returns
    -------
    paths : list of str
        One file per chunk, in row order (none for an empty table).
    flag : str
        The flag column's name.
    """
    flag = _flag_name(columns)
    row = _q(ROW)

    def op(con):
        if rid in columns:
            con.execute(f"CREATE TEMP TABLE _dup_rows AS {_duplicated_rows_sql(source, columns, rid)}")
        else:
            con.execute(f"CREATE TEMP TABLE _dup_rows ({row} BIGINT)")
        lo, hi = con.execute(f"SELECT min({row}), max({row}) FROM {source}").fetchone()
        if lo is None:
            return []
        return _copy_flagged_ranges(con, source, "r.*", flag, lo, hi, rows, folder, "raw")

    return wh.run(op), flag


def validate_table(
    wh: Warehouse,
    ingest_result: IngestResult,
    spec: ReleaseSpec,
    *,
    rows: int | None = None,
    mapper: Callable = serial_map,
    by_values: bool = True,
) -> ValidationOutcome:
    """Validate a raw table and store the result; memory does not grow with the rows.

    By distinct values where that applies (:mod:`dpcore.validation.by_values`); else chunk by chunk:

    1. The ``unique`` rule is decided over the whole table in DuckDB, and the table is written
       to the warehouse's private scratch folder as one Parquet file per chunk of ``rows``
       rows, in ``_row`` order, with that verdict as a flag (:func:`_export_chunks`).
    2. ``mapper(_validate_chunk, tasks)`` runs the same great-expectations suite on every chunk
       (:func:`_check`); each chunk writes its validated and quarantined rows and its complete
       result next to its file and returns a small :class:`ChunkVerdict`.
    3. The verdicts are combined (:func:`_combine`) and everything is stored in one
       transaction (:func:`_store`). The result equals :func:`validate` on the whole table
       followed by :func:`store_outcome` (tests/test_validation_chunks.py). The scratch files
       are removed on exit, also on error.

    Parameters
    ----------
    wh : Warehouse
    ingest_result : IngestResult
    spec : ReleaseSpec
    rows : int, optional
        Rows per chunk; default :func:`validation_chunk_rows` (public: from the cap and the columns).
    mapper : callable
        ``mapper(fn, items) -> list`` in the order of ``items``; default
        :func:`dpcore.runtime.chunks.serial_map` (a Dask mapper may run the chunks on workers of this machine).

    by_values : bool
        True (default): validate by distinct values (:mod:`dpcore.validation.by_values`, issue 29) when it
        applies (:func:`~dpcore.validation.by_values.applies`); False: chunk by chunk whatever the table
        (the same result; the tests compare the two).

    Returns
    -------
    ValidationOutcome
        Without frames (they are in the warehouse); table-level failures do not raise here,
        :func:`enforce` decides.
    """
    described = wh.query(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'raw' "
        "AND table_name = ? ORDER BY ordinal_position",
        [ingest_result.table],
    )
    columns = {str(name): str(t) for name, t in described}
    if ROW not in columns:
        raise ValueError(f"raw table has no {ROW!r} column")
    if rows is None:
        rows = validation_chunk_rows(wh.memory, spec, len(columns))
    if int(rows) < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    folder = scratch_dir(wh) / new_nonce(8)
    folder.mkdir(mode=0o700)
    try:
        (n_rows,) = wh.query(f"SELECT count(*) FROM {ingest_result.qualified_table}")[0]
        done = None
        if by_values and applies(columns, spec, int(n_rows)):
            done = validate_by_values(wh, ingest_result, spec, columns, rows=int(rows), memory=wh.memory,
                                      mapper=mapper, folder=folder,
                                      max_values=validation_chunk_rows(wh.memory, spec, len(columns)))
        if done is not None:
            outcome, chunks = done
            _store(wh, ingest_result, spec, outcome, chunks)
            return outcome
        paths, flag = _export_chunks(
            wh, ingest_result.qualified_table, columns, spec.dataset.record_id, int(rows), folder
        )
        if paths:
            tasks = [ChunkTask(spec, p, i, flag, str(folder)) for i, p in enumerate(paths)]
        else:
            header = wh.query_df(f"SELECT * FROM {ingest_result.qualified_table} LIMIT 0")
            tasks = [ChunkTask(spec, None, 0, flag, str(folder), header=header)]
        verdicts = list(mapper(_validate_chunk, tasks))
        outcome = _combine(verdicts, spec)
        chunks = [
            _ChunkRows(Path(v.files["validated"]), Path(v.files["quarantine"]), Path(v.files["result"]),
                       v.n_quarantine, v.first_row, v.last_row)
            for v in verdicts
        ]
        _store(wh, ingest_result, spec, outcome, chunks)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome
