"""Validation by distinct values, step 1 (issue 29): a table's distinct values and their frames, written by DuckDB.

What :func:`~dpcore.validation.by_values.validate_by_values` runs great-expectations on
(the module docstring of :mod:`dpcore.validation.by_values`, step 1; the rules and their
verdicts are the spec's public rule set, DESIGN.md "Privacy rules" 6 and 8):

* :func:`_export`: DuckDB groups every attribute column into its distinct values with their
  row counts (one Parquet file per column, positions ``1..m``, most frequent first and blank
  cells last; with the id pattern's forms, :mod:`~dpcore.validation.id_forms`, the record id
  grouped the same way by its form), then writes the *frames*: row ``p`` holds the ``p``-th
  distinct value of every attribute (a shorter column repeats its most frequent value, weight
  0). ``None`` when a column has more distinct values than a chunk of the cap holds rows.
* :func:`_export_ids`: the id chunks, the rows the frames leave to the id rules (the rows
  whose id is duplicated, for ``unique``; every row when the ids are not grouped by form).

A value is grouped by DuckDB exactly as pandas reads it only for the types of
:data:`VALUE_TYPES` (:data:`ID_TYPES` for the record id); :func:`~dpcore.validation.by_values.applies`
checks that before this runs. Split out of :mod:`dpcore.validation.by_values` (issue 49).

Privacy: the files hold raw values; they are written (mode 0600) to the warehouse's private
scratch folder, which the caller removes. Nothing is logged.
"""
from __future__ import annotations

import os
from pathlib import Path

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from dpcore.storage.quoting import sql_text
from dpcore.storage.warehouse import Warehouse
from .duplicates import _copy_flagged_ranges, _duplicated_rows_sql, _q, copy_duplicated_rows
from .id_forms import write_form_counts

#: DuckDB types whose GROUP BY and IS NOT DISTINCT FROM join match pandas' reading of the values exactly
#: (no NaN, no signed zero, no decimal rounding): text, integers that fit int64, booleans.
VALUE_TYPES = ("VARCHAR", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UINTEGER", "USMALLINT", "UTINYINT", "BOOLEAN")
#: Record-id types whose text (:func:`~dpcore.validation.cells._as_text`) DuckDB writes the same way.
ID_TYPES = ("VARCHAR", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UINTEGER", "USMALLINT", "UTINYINT")
#: Bytes per row of an id chunk: ``_row``, the id as text and the duplicate flag.
BYTES_PER_ID_ROW = 8 + 60 + 1


def _values_of_file(path: Path) -> list[tuple[int, str | None]]:
    """A column's distinct values file as ``(pos, v)`` pairs."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["pos", "v"])
    return list(zip(t.column("pos").to_pylist(), t.column("v").to_pylist()))


_lit = sql_text  # a path as an SQL string literal (the name the validation modules import)


def _export(wh: Warehouse, source: str, columns: dict[str, str], spec: ReleaseSpec, folder: Path,
            rows: int, id_rows: int, flag: str, max_values: int, forms: tuple[str, str] | None) -> dict | None:
    """Step 1: the distinct values of every attribute and the frames of distinct values, to Parquet.

    With ``forms`` (:func:`~dpcore.validation.id_forms.form_map`) the record id is grouped like an
    attribute, by its form, and the id chunks hold only the rows whose id is duplicated (the ``unique``
    rule); if the id has more than ``max_values`` forms (counting stops there), or without ``forms``, the
    id chunks hold every row.

    Returns
    -------
    dict or None
        None when an attribute has more than ``max_values`` distinct values. Else
        ``values``: per attribute (raw column order; the record id first when grouped by form) its file of
        ``(pos, v, n)`` and its count ``m``; ``frames``: files of distinct-value frames (ChunkTask inputs);
        ``forms``: the forms used (None: the ids row by row, :func:`_export_ids`);
        ``n_rows``, ``first_row``, ``last_row``.
    """
    rid = spec.dataset.record_id
    attrs = [c for c in columns if c in set(spec.public_schema.columns)]
    counted = {}
    if forms is not None and write_form_counts(wh, source, rid, columns[rid], forms, id_rows, max_values,
                                               folder / "id-forms.parquet"):
        attrs = [rid, *attrs]  # the ids' forms counted from Arrow batches, read back as a column's values
        counted[rid] = folder / "id-forms.parquet"
    row = _q(ROW)

    def op(con):
        n, lo, hi = con.execute(f"SELECT count(*), min({row}), max({row}) FROM {source}").fetchone()
        values = {}
        for i, c in enumerate(attrs):
            path = folder / f"values-{i:04d}.parquet"
            counts = (f"SELECT v, n FROM read_parquet({_lit(counted[c])})" if c in counted
                      else f"SELECT {_q(c)} AS v, count(*) AS n FROM {source} GROUP BY 1")
            con.execute(
                f"COPY (SELECT CAST(row_number() OVER (ORDER BY nullif(trim(CAST(v AS VARCHAR)), '') IS NULL, n DESC, v NULLS LAST) "
                f"AS BIGINT) AS pos, v, n FROM ({counts})) TO {_lit(path)} (FORMAT parquet)"
            )
            os.chmod(path, 0o600)
            m = con.execute(f"SELECT count(*) FROM read_parquet({_lit(path)})").fetchone()[0]
            values[c] = (path, int(m))
        by_form = rid in values
        m_all = max(m for _, m in values.values())
        if m_all > max_values:  # a column with that many values: row by row (memory stays within the cap)
            return None
        frames = []
        for k, start in enumerate(range(1, m_all + 1, rows)):
            stop = min(m_all + 1, start + rows)
            sel, joins = [], []
            for c, t in columns.items():
                if c == ROW:
                    sel.append(f"p.pos AS {row}")
                elif c in values:
                    path, m = values[c]
                    a = f"d{len(joins)}"
                    joins.append(f"JOIN read_parquet({_lit(path)}) {a} ON {a}.pos = CASE WHEN p.pos <= {m} "
                                 f"THEN p.pos ELSE 1 END")
                    sel.append(f"{a}.v AS {_q(c)}")
                elif c == rid:  # the ids of the first rows (their rules are read from the id chunks)
                    sel.append(f"i.{_q(c)} AS {_q(c)}")
                else:  # undeclared columns: not validated, no value needed
                    sel.append(f"CAST(NULL AS {t}) AS {_q(c)}")
            path = folder / f"frame-{k:08d}.parquet"
            con.execute(
                f"COPY (SELECT {', '.join(sel)}, false AS {_q(flag)} FROM range({start}, {stop}) p(pos) "
                f"{' '.join(joins)} {'' if by_form else f'LEFT JOIN {source} i ON i.{row} = p.pos '}ORDER BY p.pos) "
                f"TO {_lit(path)} "
                "(FORMAT parquet)"
            )
            os.chmod(path, 0o600)
            frames.append(str(path))
        return {"values": values, "frames": frames, "forms": forms if by_form else None,
                "n_rows": int(n), "first_row": int(lo), "last_row": int(hi)}

    return wh.run(op)


def _export_ids(wh: Warehouse, source: str, columns: dict[str, str], spec: ReleaseSpec, folder: Path, id_rows: int,
                flag: str, ex: dict) -> list[str]:
    """Step 1, the ids: files of id chunks (ChunkTask inputs) for the rows :func:`_export` left to them.

    Grouped by form (``ex["forms"]``), the chunks hold only the rows whose id is duplicated (the ``unique``
    rule); else every row.
    """
    rid, row = spec.dataset.record_id, _q(ROW)

    def op(con):
        con.execute(f"CREATE OR REPLACE TEMP TABLE _dup_rows AS {_duplicated_rows_sql(source, columns, rid)}")
        try:
            if ex["forms"] is not None:  # the ids' own rules are read from the frames: the duplicated ids only
                return copy_duplicated_rows(con, source, f"r.{row}, r.{_q(rid)}", flag, id_rows, folder, "ids")
            return _copy_flagged_ranges(con, source, f"r.{row}, r.{_q(rid)}", flag, ex["first_row"], ex["last_row"],
                                        id_rows, folder, "ids")
        finally:
            con.execute("DROP TABLE IF EXISTS _dup_rows")

    return wh.run(op)
