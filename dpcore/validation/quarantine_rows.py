"""The ``quarantine`` rows of validation by distinct values, one chunk at a time (issue 29).

:func:`quarantine_chunk` turns one chunk of failing raw rows (a private Parquet file of the raw
table's rows) and their failed (rule, column) pairs into the rows the chunk-by-chunk path writes:
``_row``, ``record_id`` (the id's text or None), ``rule``, ``column``, ``cells`` (the raw cells as
JSON, :func:`~dpcore.validation.cells._cells_json`), sorted by row, rule and column (DuckDB sorts, Arrow
gathers: no Python object per row).
:class:`~dpcore.validation.store.LaterRows` lets :func:`~dpcore.validation.store._store` build these
on a thread while DuckDB writes the ``validated`` table (issue 29, goal 2): the work is pandas and
Arrow on private files with its own in-memory DuckDB, never the warehouse's connection.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpcore.ingest.raw import ROW
from dpcore.storage.private_files import private_open
from dpcore.storage.quoting import sql_text
from .cells import _as_text, _cells_json_array
from .worker import read_rows


_lit = sql_text  # a path as an SQL string literal


def quarantine_chunk(raw_path: Path | str, lo: int, hi: int | None, hits_path: Path | str, rid: str,
                     out: Path) -> tuple[Path, int]:
    """Write one chunk's quarantine rows to the private Parquet file ``out``.

    Parameters
    ----------
    raw_path : path
        The chunk's failing rows as stored in ``raw`` (every column, ``_row`` included).
    lo, hi : int, int or None
        The chunk's ``_row`` range ``[lo, hi)`` (``hi`` None: to the end).
    hits_path : path
        Every failing (``_row``, ``rule``, ``column``) of the table (private Parquet).
    rid : str
        The record-id column.
    out : Path
        Where to write the rows (created 0600).

    Returns
    -------
    out : Path
    n : int
        Rows written (one per failing row, rule and column).
    """
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = read_rows(raw_path)
    cond = f"_row >= {int(lo)}" + (f" AND _row < {int(hi)}" if hi is not None else "")
    local = duckdb.connect()
    try:  # sorted by row, rule and column here (text in code-point order, as Python sorts it)
        hits = local.sql(f"SELECT CAST(_row AS BIGINT) AS _row, CAST(rule AS VARCHAR) AS rule, "
                             f"CAST(\"column\" AS VARCHAR) AS \"column\" FROM read_parquet({_lit(hits_path)}) "
                             f"WHERE {cond} ORDER BY 1, 2, 3").to_arrow_table()
    finally:
        local.close()
    rows_k = pd.to_numeric(raw[ROW], errors="raise").astype("int64").to_numpy()
    order = np.argsort(rows_k, kind="stable")
    hrow = hits.column(ROW).to_numpy()
    at = order[np.searchsorted(rows_k, hrow, sorter=order)] if len(hrow) else np.array([], dtype=np.int64)
    if len(hrow) and not np.array_equal(rows_k[at], hrow):
        raise RuntimeError("a failing row is missing from its quarantine chunk (a programming error)")
    ids = pa.array(_as_text(raw[rid]), type=pa.string(), from_pandas=True)
    quarantine = pa.table({ROW: hits.column(ROW), "record_id": ids.take(at), "rule": hits.column("rule"),
                           "column": hits.column("column"), "cells": _cells_json_array(raw, np.arange(len(raw))).take(at)})
    with private_open(out, "wb") as fh:
        pq.write_table(quarantine, fh)
    return out, quarantine.num_rows
