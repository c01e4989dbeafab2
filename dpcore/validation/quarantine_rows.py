"""The ``quarantine`` rows of validation by distinct values, one chunk at a time (issue 29).

:func:`quarantine_chunk` turns one chunk of failing raw rows (a private Parquet file of the raw
table's rows) and their failed (rule, column) pairs into the rows the chunk-by-chunk path writes:
``_row``, ``record_id`` (the id's text or None), ``rule``, ``column``, ``cells`` (the raw cells as
JSON, :func:`~dpcore.validation.cells._cells_json`), sorted by row, rule and column.
:class:`~dpcore.validation.store.LaterRows` lets :func:`~dpcore.validation.store._store` build these
on a thread while DuckDB writes the ``validated`` table (issue 29, goal 2): the work is pandas and
Arrow on private files with its own in-memory DuckDB, never the warehouse's connection.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..ingest import ROW
from ..private_files import private_open
from .cells import _as_text, _cells_json
from .worker import read_rows


def _lit(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


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

    raw = read_rows(raw_path)
    cond = f"_row >= {int(lo)}" + (f" AND _row < {int(hi)}" if hi is not None else "")
    local = duckdb.connect()
    try:
        hits = local.execute(f"SELECT _row, rule, \"column\" FROM read_parquet({_lit(hits_path)}) WHERE {cond}").df()
    finally:
        local.close()
    rows_k = pd.to_numeric(raw[ROW], errors="raise").astype("int64").to_numpy()
    cells = pd.Series(_cells_json(raw, np.arange(len(raw))), index=rows_k, dtype=object)
    ids = _as_text(raw[rid]).astype(object)
    ids = pd.Series(ids.where(ids.notna(), None).to_numpy(), index=rows_k, dtype=object)
    hrow = hits[ROW].astype("int64")
    quarantine = pd.DataFrame({
        ROW: hrow.to_numpy(),
        "record_id": ids.reindex(hrow).to_numpy(dtype=object),
        "rule": hits["rule"].astype(object).to_numpy(),
        "column": hits["column"].astype(object).to_numpy(),
        "cells": cells.reindex(hrow).to_numpy(dtype=object),
    }).sort_values([ROW, "rule", "column"], kind="stable", ignore_index=True)
    with private_open(out, "wb") as fh:
        quarantine.to_parquet(fh, index=False)
    return out, len(quarantine)
