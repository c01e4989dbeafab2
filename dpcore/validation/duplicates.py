"""The ``unique`` rule over the whole table, decided once in DuckDB (issue 21).

The rule is not per chunk: :func:`_duplicated_rows_sql` finds the ``_row`` of
every row whose record id is shared with another row of the table, and each
chunk receives that verdict (as its set of duplicated ids). The same query
runs on the warehouse table (:func:`~dpcore.validation.validate_table`) and,
through an in-memory DuckDB, on a frame (:func:`_duplicate_flags`,
:func:`~dpcore.validation.validate`).
"""
from __future__ import annotations

import numpy as np

from dpcore.ingest.raw import ROW
from dpcore.storage.private_files import private_umask
from dpcore.storage.quoting import sql_text
from dpcore.runtime.lazy_modules import lazy_module
from .rules import DERIVED_PREFIX

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def _q(name: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + str(name).replace('"', '""') + '"'


def _id_key(expr: str, duck_type: str) -> str:
    """SQL for the identity of a record id as :func:`_as_text` reads it (null when the text is missing).

    ``_as_text`` is one-to-one on each DuckDB type's values as pandas receives them, so two ids
    have the same text iff they have the same key: text as is (``''`` is missing), floats with
    NaN missing (``-0.0`` and ``0.0`` are equal in both), decimals and huge integers as the
    float64 pandas gets, other types as they are.
    """
    t = duck_type.upper()
    if t.startswith("VARCHAR") or t in ("TEXT", "STRING"):
        return f"NULLIF({expr}, '')"
    if t.startswith("DECIMAL") or t in ("HUGEINT", "UHUGEINT"):
        expr, t = f"CAST({expr} AS DOUBLE)", "DOUBLE"
    if t in ("DOUBLE", "FLOAT", "REAL"):
        return f"CASE WHEN isnan({expr}) THEN NULL ELSE {expr} END"
    return expr


def _duplicated_rows_sql(source: str, columns: dict[str, str], rid: str) -> str:
    """SQL: the ``_row`` of every row of ``source`` whose record id is shared with another row.

    The ``unique`` rule over the whole table, pushed down into DuckDB: ``GROUP BY`` the id's
    identity (:func:`_id_key`) ``HAVING count(*) > 1``, joined back; a missing id is never
    duplicated. Used on the warehouse table (:func:`validate_table`) and on a frame in memory
    (:func:`validate`), so both paths decide the rule with the same query.

    Parameters
    ----------
    source : str
        A table or view, already quoted.
    columns : dict
        Its column names and DuckDB types.
    rid : str
        The record-id column (must be one of ``columns``).
    """
    key = _id_key(f"r.{_q(rid)}", columns[rid])
    return (
        f"SELECT r.{_q(ROW)} FROM {source} r JOIN (SELECT {key} AS k FROM {source} r WHERE {key} IS NOT NULL "
        f"GROUP BY 1 HAVING count(*) > 1) d ON {key} = d.k"
    )


def _duplicate_flags(raw: pd.DataFrame, rid: str) -> np.ndarray:
    """:func:`_duplicated_rows_sql` on a frame in memory (an in-memory DuckDB), as a flag per row of ``raw``."""
    import duckdb

    if rid not in raw.columns or not len(raw):
        return np.zeros(len(raw), dtype=bool)
    with private_umask():  # an in-memory DuckDB spills private rows to ./.tmp
        con = duckdb.connect()
        try:
            con.register("_raw", raw)
            columns = {str(d[0]): str(d[1]) for d in con.execute("DESCRIBE SELECT * FROM _raw").fetchall()}
            dup_rows = con.execute(_duplicated_rows_sql("_raw", columns, rid)).fetchnumpy()[ROW]
        finally:
            con.close()
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    return rows.isin(pd.to_numeric(pd.Series(dup_rows), errors="raise").astype("int64")).to_numpy(dtype=bool)


def _copy_flagged_ranges(con, source: str, select: str, flag: str, lo: int, hi: int, rows: int, folder,
                         prefix: str) -> list[str]:
    """Write ``source``'s rows ``_row`` in ``[lo, hi]`` as Parquet files of ``rows`` rows each, with the duplicate flag.

    File ``k`` (``<prefix>-<k>.parquet``, mode 0600) holds the rows with ``_row`` in ``[lo + k*rows,
    lo + (k+1)*rows)``, in ``_row`` order, as ``select`` (over alias ``r``) plus the boolean column ``flag``:
    whether the row is in the temporary table ``_dup_rows`` (:func:`_duplicated_rows_sql`, created by the
    caller on ``con``). DuckDB reads each range through the ``_row`` zone maps and writes the file itself.
    """
    import os
    from pathlib import Path

    row = _q(ROW)
    paths: list[str] = []
    for k, start in enumerate(range(int(lo), int(hi) + 1, rows)):
        stop = start + rows
        path = Path(folder) / f"{prefix}-{k:08d}.parquet"
        target = sql_text(path)
        con.execute(
            f"COPY (SELECT {select}, r.{row} IN (SELECT {row} FROM _dup_rows WHERE {row} >= {start} AND {row} < {stop}) "
            f"AS {_q(flag)} FROM {source} r WHERE r.{row} >= {start} AND r.{row} < {stop} ORDER BY r.{row}) "
            f"TO {target} (FORMAT parquet)"
        )
        os.chmod(path, 0o600)
        paths.append(str(path))
    return paths


def chunk_starts(con, rows_sql: str, rows: int) -> list[int]:
    """The first ``_row`` of every chunk of ``rows`` rows of ``rows_sql`` (a query of distinct ``_row``), in order."""
    return [int(r[0]) for r in con.execute(
        f"SELECT _row FROM (SELECT _row, row_number() OVER (ORDER BY _row) - 1 AS i FROM ({rows_sql})) "
        f"WHERE i % {int(rows)} = 0 ORDER BY _row").fetchall()]


def copy_duplicated_rows(con, source: str, select: str, flag: str, rows: int, folder, prefix: str) -> list[str]:
    """Write the rows of ``source`` listed in the temporary table ``_dup_rows`` as Parquet files of ``rows`` rows each.

    As :func:`_copy_flagged_ranges` (``select`` over alias ``r``, plus ``flag``, here always true), but only
    the duplicated rows: file ``k`` (``<prefix>-<k>.parquet``, mode 0600) holds the ``k``-th ``rows`` of them
    in ``_row`` order; none when no id is duplicated.
    """
    import os
    from pathlib import Path

    row = _q(ROW)
    starts = chunk_starts(con, f"SELECT {row} AS _row FROM _dup_rows", rows)
    paths: list[str] = []
    for k, lo in enumerate(starts):
        cond = f"r.{row} >= {lo}" + (f" AND r.{row} < {starts[k + 1]}" if k + 1 < len(starts) else "")
        path = Path(folder) / f"{prefix}-{k:08d}.parquet"
        target = sql_text(path)
        con.execute(
            f"COPY (SELECT {select}, true AS {_q(flag)} FROM {source} r SEMI JOIN _dup_rows d ON r.{row} = d.{row} "
            f"WHERE {cond} ORDER BY r.{row}) TO {target} (FORMAT parquet)"
        )
        os.chmod(path, 0o600)
        paths.append(str(path))
    return paths


def _flag_name(columns) -> str:
    """A column name for the duplicate flag that no input column uses."""
    name = f"{DERIVED_PREFIX}dup"
    while name in set(columns):
        name += "_"
    return name
