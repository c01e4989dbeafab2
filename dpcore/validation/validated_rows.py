"""Validation by distinct values, step 3 (issue 29): the ``validated`` table written by DuckDB, typed as pandas types.

The module docstring of :mod:`dpcore.validation.by_values`, step 3: the rows that pass every
rule are written by DuckDB one ``_row`` range at a time (:func:`_validated_in_ranges`, each
range sorted within DuckDB's memory share, :func:`sorted_rows`), with each cell typed exactly
as the chunk-by-chunk path types it (pandas, :func:`~dpcore.validation.cells._typed_column`):

* a categorical cell's typed value is its text, or that text as an integer
  (:func:`_typed_sql`);
* a numeric column is typed by DuckDB's cast (:func:`_inline_sql`) when that cast gives
  pandas' value bit for bit on every distinct value passing the column's rules
  (:func:`_casts_agree`), else each cell is joined to its pandas-typed value.

So a validated row holds the same values either way (tests/test_validation_by_values.py).
Split out of :mod:`dpcore.validation.by_values` (issue 49). The typed values and the rows are
private: they go to the warehouse's ``validated`` table and the private scratch folder only;
nothing is logged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dpcore.runtime.chunks import MemoryBudget
from dpcore.ingest.raw import ROW
from dpcore.storage.private_files import private_open
from dpcore.release.spec import ReleaseSpec
from .cells import _int_domain
from .distinct_values import ID_TYPES, _lit
from .duplicates import _q
from .store import SqlRows
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # on first use

def _typed_sql(expr: str, duck_type: str, col: str, spec: ReleaseSpec) -> str | None:
    """SQL for a categorical cell's typed value where it is exact (valid cells only), else None (joined instead).

    A valid categorical cell's text is a domain value's text: as text it is the cell itself (text
    input, ``''`` missing) or the integer written in decimal (as :func:`_as_text` writes integers); an
    integer domain's value is that text read as an integer. Numbers and other types are typed by
    pandas (:func:`_typed_column`) and joined.
    """
    attr = spec.public_schema.categorical.get(col)
    t = duck_type.upper()
    if attr is None or t not in ID_TYPES:
        return None
    text = f"NULLIF({expr}, '')" if t == "VARCHAR" else f"CAST({expr} AS VARCHAR)"
    return f"CAST({text} AS BIGINT)" if _int_domain(attr.domain) else text


def _inline_sql(expr: str, duck_type: str) -> str | None:
    """SQL typing a numeric cell as DuckDB would, or None where DuckDB has no such cast here (the values are joined).

    Text is read by ``TRY_CAST(... AS DOUBLE)`` (``''`` missing), integers are converted. Used for a column
    only when :func:`_casts_agree` found it gives pandas' value bit for bit on every distinct value passing the
    column's rules (:func:`~dpcore.validation.cells._typed_column`), so a validated row holds the same double
    either way.
    """
    t = duck_type.upper()
    if t == "VARCHAR":
        return f"TRY_CAST(NULLIF({expr}, '') AS DOUBLE)"
    if t in ID_TYPES:
        return f"CAST({expr} AS DOUBLE)"
    return None


def _casts_agree(values_path: Path, typed: "pd.DataFrame", cast_sql: str) -> bool:
    """Whether ``cast_sql`` (over column ``v``) gives, for every position of ``typed``, its ``t`` bit for bit.

    ``values_path`` is a column's distinct values (``pos``, ``v``); ``typed`` the pandas-typed value ``t`` of the
    positions passing the column's rules. A missing value (NaN in pandas) must be NULL in DuckDB; any other
    value the same 64 bits (so ``-0.0`` is not ``0.0``).
    """
    import duckdb

    con = duckdb.connect()
    try:
        got = con.execute(f"SELECT pos, {cast_sql} AS x FROM read_parquet({_lit(values_path)}) ORDER BY pos").df()
    finally:
        con.close()
    a = got.set_index("pos")["x"].reindex(typed["pos"].to_numpy()).to_numpy(dtype="float64", na_value=np.nan)
    b = typed["t"].to_numpy(dtype="float64", na_value=np.nan)
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na].view(np.int64), b[~nb].view(np.int64)))


#: Rows of a DuckDB row group (its storage's unit of writing).
DUCKDB_ROW_GROUP_ROWS = 122_880
#: Bytes of DuckDB memory per row of a range of the ``validated`` table sorted in memory (the demo's rows take
#: about 100 bytes as sort payload; a wider table spills to DuckDB's temporary folder, correct and slower).
SORT_BYTES_PER_ROW = 256


def sorted_rows(memory: MemoryBudget) -> int:
    """Rows per statement writing the ``validated`` table (:func:`_validated_in_ranges`): DuckDB's share / 256 bytes.

    At least one DuckDB row group (122,880 rows). 2,097,152 rows at the default 2 GiB cap (DuckDB's 512 MiB).
    """
    return int(max(DUCKDB_ROW_GROUP_ROWS, memory.duckdb_bytes // SORT_BYTES_PER_ROW))


def _validated_select(spec: ReleaseSpec, columns: dict[str, str], typed: dict[str, str]) -> list[str]:
    """The ``validated`` table's columns as SQL over the raw row ``r``: ``_row``, the id as text, then each attribute.

    ``typed`` gives the SQL of the attributes :func:`_typed_sql` does not type (a joined value or an inline cast).
    """
    rid = spec.dataset.record_id
    row = _q(ROW)
    sel = [f"CAST(r.{row} AS BIGINT) AS {row}"]
    sel.append((f"r.{_q(rid)}" if columns[rid].upper() == "VARCHAR" else f"CAST(r.{_q(rid)} AS VARCHAR)") + f" AS {_q(rid)}")
    for c in [*spec.public_schema.categorical, *spec.public_schema.numeric]:
        direct = _typed_sql(f"r.{_q(c)}", columns[c], c, spec)
        sel.append(f"{direct if direct is not None else typed[c]} AS {_q(c)}")
    return sel


def _validated_in_ranges(source: str, spec: ReleaseSpec, columns: dict[str, str], values: dict, typed_of: dict,
                         inline: dict[str, str] | None, badrows_path: Path, folder: Path, first_row: int,
                         last_row: int, per: int) -> list[SqlRows]:
    """The ``validated`` rows as one statement per ``_row`` range of ``per`` rows, each sorted by ``_row``.

    Each statement reads the range of the raw table, drops the failing rows (an ANTI JOIN with the range's
    rows of ``badrows_path``) and types the numeric attributes: by ``inline`` (DuckDB's cast, checked against
    pandas by :func:`_casts_agree`) or, when ``inline`` is None, by joining each cell to its pandas-typed value
    (``typed_of``, written next to the values). DuckDB's joins do not keep the scan's order, so each range is
    sorted by ``_row``; the ranges are appended in order, so the table is in ``_row`` order. A range fits DuckDB's
    memory share (:func:`sorted_rows`), so its sort does not spill: one sort of the 100x demo's 33.7 million
    rows spilled and took most of validation's time (issue 29, goal 2). Measured on the 10x demo while choosing
    (2 cores, the statements alone): 1.36-1.42 s sorted by ranges, 1.6-1.9 s for an order-keeping filtered scan
    without a join or a sort (a row bitmap or the failing values in the filter), 1.2-1.3 s for the same
    statement without dropping any row; at 100x 13.7-15.2 s, 14.4-16.5 s (17.7-18.8 s with the bitmap) and
    11.7-13.7 s.

    Returns
    -------
    list of SqlRows
        One statement per range, in ``_row`` order.
    """
    typed, joins = dict(inline or {}), []
    if inline is None:
        for c, frame in typed_of.items():
            out = folder / f"typed-{list(values).index(c):04d}.parquet"
            with private_open(out, "wb") as fh:
                frame.to_parquet(fh, index=False)
            a = f"x{len(joins)}"
            joins.append(
                f"JOIN (SELECT d.v, t.t FROM read_parquet({_lit(values[c][0])}) d JOIN read_parquet({_lit(out)}) t "
                f"ON t.pos = d.pos) {a} ON r.{_q(c)} IS NOT DISTINCT FROM {a}.v"
            )
            typed[c] = f"{a}.t"
    sel = ", ".join(_validated_select(spec, columns, typed))
    row = _q(ROW)
    out = []
    for lo in range(first_row, last_row + 1, per):
        hi = min(last_row + 1, lo + per)
        out.append(SqlRows(
            f"SELECT {sel} FROM {source} r {' '.join(joins)} ANTI JOIN (SELECT _row FROM read_parquet("
            f"{_lit(badrows_path)}) WHERE _row >= {lo} AND _row < {hi}) b ON r.{row} = b._row "
            f"WHERE r.{row} >= {lo} AND r.{row} < {hi} ORDER BY r.{row}"
        ))
    return out
