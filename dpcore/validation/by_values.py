"""Validate a warehouse table by its distinct values (issue 29): great-expectations decides each cell value once.

Every row-level rule except the record id's reads one cell (``not_null``, ``in_domain``, ``number``,
``finite``, ``integer``, ``in_bounds`` are functions of the cell's text), so a rule's verdict on a row
is its verdict on that row's value. A column of 33.7 million rows holds a few thousand distinct
values (the demo's widest, ``tailnum``, 4,043), so:

1. DuckDB groups every attribute column into its distinct values with their row counts
   (one Parquet file per column, positions ``1..m``).
2. The spec's great-expectations suite runs, unchanged, on frames of distinct values: row ``p``
   holds the ``p``-th distinct value of every attribute, most frequent first and blank cells last (a
   shorter column repeats its most frequent non-blank value, weight 0, so padding rarely adds a failing
   row to great-expectations' lists: padding with a blank, a column's most frequent cell when many are
   missing, made each ``not_null`` list thousands of rows long and cost seconds of great-expectations'
   result building). The record id is grouped the same way by its *form* (:mod:`~dpcore.validation.id_forms`:
   each ASCII letter or digit replaced by a representative of the characters the id pattern cannot tell
   apart, so ``not_null`` and ``id_pattern`` give the same verdict on an id and on its form; the forms are
   counted from Arrow batches of the ids, streamed); ``unique`` (``not_in_set`` with the table's duplicated
   ids) runs on the rows whose id DuckDB found duplicated only, in chunks: every other row's id is outside
   that set by construction. When the pattern is outside the syntax the forms handle, or the id has more
   forms than ``max_values``, the id rules run on the whole id column in chunks, as before. All of these
   are :class:`~dpcore.validation.worker.ChunkTask` s, so the caller's mapper may spread them over processes.
3. DuckDB joins the failing values back to the rows (the ``quarantine`` rows, with the id chunks'
   failing rows), and writes the ``validated`` table one ``_row`` range at a time, each range sorted in
   DuckDB's memory (:func:`~dpcore.validation.validated_rows._validated_in_ranges`). A numeric cell's
   typed value is pandas' (the same code as before, :func:`~dpcore.validation.cells._typed_column`, run
   on the distinct values): written as DuckDB's cast of the cell when that cast gives pandas' value bit
   for bit on every distinct value passing the column's rules
   (:func:`~dpcore.validation.validated_rows._casts_agree`), else joined; a categorical cell's typed
   value is its text or that text as an integer (:func:`~dpcore.validation.validated_rows._typed_sql`).
   A failing id form is joined back through the rows holding it
   (streamed again, :func:`~dpcore.validation.id_forms.write_rows_of_forms`). The quarantine rows' cells are
   built (:mod:`~dpcore.validation.quarantine_rows`) while DuckDB writes the validated table
   (:class:`~dpcore.validation.store.LaterRows`). great-expectations runs on the frames while DuckDB finds the
   duplicated ids (not under a small cap, :attr:`~dpcore.runtime.chunks.MemoryBudget.works_ahead`).
4. great-expectations' result over the whole table is the distinct-value run's result with each
   row-level expectation's counts weighted by the rows holding each value (``unexpected_count`` from
   the quarantine rows, ``missing_count`` from the weights, checked against great-expectations' own
   unweighted count) and its partial lists taken from the first failing rows of the table (with each row's own
   id where a form stood for it); ``unique``'s counts over the table, its lists from the id chunks. It equals
   the row-by-row path's (tests/test_validation_by_values.py, tests/test_validation_id_forms.py).

The path applies when every declared column is present, the table is not empty, the attribute columns
have a type DuckDB groups exactly as pandas reads it (text, integers, booleans:
:data:`~dpcore.validation.distinct_values.VALUE_TYPES`) and the record id is text or an integer
(:data:`~dpcore.validation.distinct_values.ID_TYPES`) (:func:`applies`), and when no column has
more distinct values than a chunk of the cap holds rows (``max_values``); otherwise
:func:`~dpcore.validation.validate_table` validates chunk by chunk as before.

The verdict on every row is the row-by-row path's, so the neighbour relation validation gives the
steps (one raw row changes at most one validated row; ``unique`` rejects every copy) is unchanged.

Memory: a frame of distinct values has at most ``rows`` rows (the chunked path's public chunk size),
an id chunk :data:`~dpcore.validation.distinct_values.BYTES_PER_ID_ROW` per row within the cap's chunk
share, a quarantine chunk ``rows`` failing rows; the grouping, the joins and the ``validated`` table are
DuckDB's (under the warehouse's ``memory_limit``, spilling to its private temporary folder).

Why not great-expectations' SQL data source (ENVIRONMENT.md: over ``duckdb-engine`` its metric
queries return no row): ``SqlAlchemyExecutionEngine.execute_query`` returns the cursor result after
its ``with self.get_connection()`` block has handed the connection back, and with ``duckdb-engine``
0.17 on DuckDB 2.0 a result read after that is empty (SQLite's and psycopg's cursors keep their rows),
so ``count(*)`` reads ``[]``. Buffering the rows inside the block (``result.freeze()()``) makes an
``in_set`` expectation compute correctly (checked on a three-row table; ``pool_reset_on_return=None``
does not help). It was not adopted: each expectation would be its own scans of the whole table, and the
regex rules would run as DuckDB's full-match ``~`` on patterns written for Python's ``re.search``
(``\A``/``\Z``), so not the same verdicts.

Modules (issue 49): step 1 (the distinct values, the frames and the id chunks, by SQL) is
:mod:`dpcore.validation.distinct_values`, step 3's ``validated`` table (its SQL and the cells' types)
:mod:`dpcore.validation.validated_rows`; this module decides where the path applies, runs the steps
and combines great-expectations' results (steps 2 to 4).

Privacy: the distinct values and great-expectations' results carry raw values; they live in the
warehouse's private scratch folder (removed on exit) and in ``internal.validation_result_chunks``
only. Nothing is logged; errors name rules and columns only.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from dpcore.runtime.chunks import MemoryBudget
from dpcore.ingest.raw import ROW
from dpcore.storage.private_files import private_open
from dpcore.release.spec import ReleaseSpec
from dpcore.storage.warehouse import Warehouse
from .cells import _typed_column
from .check import ChunkVerdict, _work_frame
from .combine import PARTIAL_EXAMPLES, _combine
from .distinct_values import BYTES_PER_ID_ROW, ID_TYPES, VALUE_TYPES, _export, _export_ids, _lit, _values_of_file
from .duplicates import _flag_name, _q, chunk_starts
from .id_forms import form_map, id_text_sql, write_rows_of_forms
from .outcome import ValidationOutcome
from .rule_set import suite_entries
from .quarantine_rows import quarantine_chunk
from .store import LaterRows, _ChunkRows
from .validated_rows import _casts_agree, _inline_sql, _typed_sql, _validated_in_ranges, sorted_rows
from .worker import ChunkTask, _validate_chunk
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # on first use: after the great-expectations chunks (a child process may run them)

_ROW_RULES_OF_ID = ("not_null", "unique", "id_pattern")


def applies(columns: dict[str, str], spec: ReleaseSpec, n_rows: int) -> bool:
    """Whether :func:`validate_by_values` validates this table (else the chunk-by-chunk path does).

    Parameters
    ----------
    columns : dict
        The raw table's columns and DuckDB types (public: the header).
    spec : ReleaseSpec
    n_rows : int
        Whether the table is empty (the chunked path validates an empty table as one empty chunk).
    """
    rid = spec.dataset.record_id
    attrs = list(spec.public_schema.columns)
    if n_rows < 1 or not attrs or rid not in columns or any(c not in columns for c in attrs):
        return False
    if columns[rid].upper() not in ID_TYPES:
        return False
    return all(columns[c].upper() in VALUE_TYPES for c in attrs)


def _column_cols(e: dict) -> list[str]:
    """The working-frame columns an expectation reads."""
    kw = e["kwargs"]
    return [kw["column"]] if "column" in kw else [kw["column_A"], kw["column_B"]]


def _value_of(e: dict, entry: dict):
    """great-expectations' unexpected value of one index-list entry (a pair for the column-pair rule)."""
    cols = _column_cols(e)
    return entry[cols[0]] if len(cols) == 1 else [entry[c] for c in cols]


def validate_by_values(wh: Warehouse, ingest_result, spec: ReleaseSpec, columns: dict[str, str], *, rows: int,
                       memory: MemoryBudget, mapper: Callable, folder: Path,
                       max_values: int) -> tuple[ValidationOutcome, list] | None:
    """Validate the raw table by its distinct values; return the outcome and the chunks for :func:`_store`.

    Parameters
    ----------
    wh : Warehouse
    ingest_result : IngestResult
    spec : ReleaseSpec
    columns : dict
        The raw table's columns and DuckDB types (:func:`applies` is true for them).
    rows : int
        Rows per frame of distinct values and per quarantine chunk (the chunked path's public chunk size).
    memory : MemoryBudget
        Sizes the id chunks (public: from the cap).
    mapper : callable
        Runs the great-expectations chunks (:func:`~dpcore.validation.worker._validate_chunk`).
    folder : Path
        The private scratch folder (removed by the caller).
    max_values : int
        At most this many distinct values per column (public: the cap's chunk size), so that the
        per-value arrays held in memory stay within a chunk's share of the cap; more, and this returns
        None (the caller validates chunk by chunk).

    Returns
    -------
    None, or
    outcome : ValidationOutcome
        Without frames.
    chunks : list of _ChunkRows
        For :func:`~dpcore.validation.store._store`: the validated rows as one query, the quarantine
        chunks, every great-expectations run's complete result.
    """
    import duckdb

    source = ingest_result.qualified_table
    rid = spec.dataset.record_id
    flag = _flag_name(columns)
    id_rows = memory.chunk_rows(BYTES_PER_ID_ROW)
    pattern = next(e.kwargs["regex"] for e in suite_entries(spec) if e.rule == "id_pattern")
    ex = _export(wh, source, columns, spec, folder, rows, id_rows, flag, max_values, form_map(pattern))
    if ex is None:
        return None
    values, forms = ex["values"], ex["forms"]
    n_frames = len(ex["frames"])
    tasks = [ChunkTask(spec, p, i, flag, str(folder)) for i, p in enumerate(ex["frames"])]

    def add_id_tasks() -> None:
        ids = _export_ids(wh, source, columns, spec, folder, id_rows, flag, ex)
        tasks.extend(ChunkTask(spec, p, n_frames + i, flag, str(folder)) for i, p in enumerate(ids))

    verdicts: list[ChunkVerdict]
    if memory.works_ahead:  # great-expectations on the frames (Python) while DuckDB finds the duplicated ids
        # (leaving the block waits for the frames' run, also when finding the ids raised: its files are in the
        # folder the caller removes)
        with ThreadPoolExecutor(max_workers=1) as pool:
            running = pool.submit(lambda frames: list(mapper(_validate_chunk, frames)), list(tasks))
            add_id_tasks()
            verdicts = running.result()
        verdicts += list(mapper(_validate_chunk, tasks[n_frames:]))
    else:  # under a small cap one mapper call (one child process) for every chunk, one thing at a time
        add_id_tasks()
        verdicts = list(mapper(_validate_chunk, tasks))
    frame_v, id_v = verdicts[:n_frames], verdicts[n_frames:]
    first = frame_v[0]
    metas = [e["meta"] for e in first.expectations]

    local = duckdb.connect()
    try:
        # which distinct values fail which rule (positions), and how many rows are missing per rule
        bad_parts, missing, entries = [], {}, {}
        # per attribute typed by pandas (numbers), the typed value of each distinct value passing its rules
        typed_parts = {c: [] for c in values if c != rid and _typed_sql("x", columns[c], c, spec) is None}
        weights = {c: local.execute(f"SELECT n FROM read_parquet({_lit(p)}) ORDER BY pos").fetchnumpy()["n"]
                   for c, (p, _) in values.items()}
        for v, task in zip(frame_v, tasks[:n_frames]):
            if [e["meta"] for e in v.expectations] != metas:
                raise RuntimeError("the frames of distinct values ran different expectation suites")
            q = pd.read_parquet(v.files["quarantine"]) if v.n_quarantine else None
            if q is not None:
                q = q[q["column"].isin(list(values))]
                bad_parts.append(q[[ROW, "rule", "column"]].rename(columns={ROW: "pos"}))
            raw, _ = task.read()
            pos, _, work = _work_frame(raw.reset_index(drop=True), spec)
            for c, parts in typed_parts.items():  # the typed value of the frame's values passing c's rules
                fails = q.loc[q["column"] == c, ROW] if q is not None else pos.iloc[:0]
                sel = ((pos <= values[c][1]) & ~pos.isin(fails)).to_numpy()
                parts.append(pd.DataFrame({"pos": pos[sel].to_numpy(),
                                           "t": _typed_column(work.loc[sel], c, spec).reset_index(drop=True)}))
            result = json.loads(Path(v.files["result"]).read_text("utf-8"))
            described = result["validation_results"][0]["expectations"]
            for j, (e, meta) in enumerate(zip(v.expectations, metas)):
                col = meta["column"]
                if col not in values or "missing_count" not in e["result"]:
                    continue
                cols = _column_cols(e)
                mask = work[cols].isna().any(axis=1).to_numpy()
                if int(mask.sum()) != int(e["result"]["missing_count"]):
                    raise RuntimeError(
                        f"validation by distinct values disagrees with great-expectations on the missing cells of "
                        f"rule {meta['rule']!r}, column {col!r}; validate chunk by chunk (a programming error)"
                    )
                w = weights[col]
                p = pos.to_numpy()
                wp = np.where(p <= len(w), w[np.minimum(p, len(w)) - 1], 0)
                missing[j] = missing.get(j, 0) + int(wp[mask].sum())
            for j, (e, meta) in enumerate(zip(described, metas)):
                if meta["column"] in values:
                    for entry in (e.get("result") or {}).get("unexpected_index_list") or []:
                        entries[(j, int(entry[ROW]))] = entry
        bad = (pd.concat(bad_parts, ignore_index=True) if bad_parts
               else pd.DataFrame({"pos": np.array([], dtype="int64"), "rule": [], "column": []}))
        bad = bad.drop_duplicates(ignore_index=True)

        # the failing rows of the table: values joined back in DuckDB, the id chunks' rows as they are
        bad_path = folder / "bad-values.parquet"
        with private_open(bad_path, "wb") as fh:
            bad.astype({"pos": "int64", "rule": "str", "column": "str"}).to_parquet(fh, index=False)
        id_q = [v.files["quarantine"] for v in id_v if v.n_quarantine]
        id_rules = "('unique')" if forms is not None else "('not_null', 'unique', 'id_pattern')"
    finally:
        local.close()

    form_rows = None
    if forms is not None and (bad["column"] == rid).any():  # the rows of the id's failing forms
        form_pos = set(bad.loc[bad["column"] == rid, "pos"].tolist())
        vals = _values_of_file(values[rid][0])
        form_rows = folder / "id-form-rows.parquet"
        write_rows_of_forms(wh, source, rid, columns[rid], forms, id_rows,
                            {v: p for p, v in vals if p in form_pos}, form_rows)
    q_path, badrows_path = folder / "quarantine-rows.parquet", folder / "bad-rows.parquet"
    row = _q(ROW)

    def find_rows(con):
        parts = []
        for c in bad["column"].unique().tolist():
            path, _ = values[c]
            if c == rid and form_rows is not None:
                parts.append(
                    f"SELECT f._row, b.rule, b.\"column\", b.pos FROM read_parquet({_lit(form_rows)}) f JOIN "
                    f"read_parquet({_lit(bad_path)}) b ON b.pos = f.pos AND b.\"column\" = {_lit(c)}"
                )
                continue
            parts.append(
                f"SELECT r.{row} AS _row, x.rule, x.\"column\", x.pos FROM {source} r JOIN (SELECT d.v, b.pos, b.rule, "
                f"b.\"column\" FROM read_parquet({_lit(path)}) d JOIN read_parquet({_lit(bad_path)}) b ON b.pos = d.pos "
                f"AND b.\"column\" = {_lit(c)}) x ON r.{_q(c)} IS NOT DISTINCT FROM x.v"
            )
        if id_q:
            files = "[" + ", ".join(_lit(p) for p in id_q) + "]"
            parts.append(f"SELECT CAST({row} AS BIGINT) AS _row, CAST(rule AS VARCHAR) AS rule, "
                         f"CAST(\"column\" AS VARCHAR) AS \"column\", CAST(NULL AS BIGINT) AS pos FROM read_parquet({files}) "
                         f"WHERE rule IN {id_rules}")
        if not parts:
            parts.append("SELECT CAST(NULL AS BIGINT) AS _row, CAST(NULL AS VARCHAR) AS rule, "
                         "CAST(NULL AS VARCHAR) AS \"column\", CAST(NULL AS BIGINT) AS pos WHERE false")
        con.execute(f"COPY ({' UNION ALL '.join(parts)}) TO {_lit(q_path)} (FORMAT parquet)")
        con.execute(f"COPY (SELECT DISTINCT _row FROM read_parquet({_lit(q_path)}) ORDER BY _row) TO "
                    f"{_lit(badrows_path)} (FORMAT parquet)")
        for path in (q_path, badrows_path):
            os.chmod(path, 0o600)
        counts = con.execute(
            f"SELECT rule, \"column\", count(*) FROM read_parquet({_lit(q_path)}) GROUP BY ALL").fetchall()
        firsts = con.execute(
            f"SELECT rule, \"column\", _row, pos FROM (SELECT *, row_number() OVER (PARTITION BY rule, \"column\" "
            f"ORDER BY _row) AS k FROM read_parquet({_lit(q_path)})) WHERE k <= {max(PARTIAL_EXAMPLES, 1)} "
            "ORDER BY rule, \"column\", _row").fetchall()
        n_bad = con.execute(f"SELECT count(*) FROM read_parquet({_lit(badrows_path)})").fetchone()[0]
        # the ids of the first rows failing an id rule by form (great-expectations' lists show the ids)
        shown = sorted({int(rr) for _, c, rr, p in firsts if c == rid and p is not None})
        listed_ids = dict(con.execute(
            f"SELECT {row}, {id_text_sql(rid, columns[rid], 'r')} FROM {source} r "
            f"WHERE {row} IN ({', '.join(map(str, shown))})").fetchall()) if shown else {}
        # quarantine chunks: the failing rows' raw cells, ``rows`` failing rows per chunk
        starts = chunk_starts(con, f"SELECT _row FROM read_parquet({_lit(badrows_path)})", rows)
        files = []
        for k, lo in enumerate(starts):
            hi = starts[k + 1] if k + 1 < len(starts) else None
            cond = f"b._row >= {lo}" + (f" AND b._row < {hi}" if hi is not None else "")
            path = folder / f"qraw-{k:08d}.parquet"
            con.execute(
                f"COPY (SELECT r.* FROM {source} r SEMI JOIN (SELECT _row FROM read_parquet({_lit(badrows_path)}) b "
                f"WHERE {cond}) b ON r.{row} = b._row ORDER BY r.{row}) TO {_lit(path)} (FORMAT parquet)"
            )
            os.chmod(path, 0o600)
            files.append((str(path), lo, hi))
        return counts, firsts, int(n_bad), files, listed_ids

    counts, firsts, n_bad, qfiles, listed_ids = wh.run(find_rows)
    count_of = {(r, c): int(n) for r, c, n in counts}
    first_rows: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
    for r, c, rr, p in firsts:
        first_rows.setdefault((r, c), []).append((int(rr), None if p is None else int(p)))

    # the quarantine rows with their record id and cells, as the chunk-by-chunk path writes them: built by
    # _store on a thread while DuckDB writes the validated rows
    q_chunks = [_ChunkRows(None, LaterRows(partial(quarantine_chunk, path, lo, hi, q_path, rid,
                                                   folder / f"quarantine-all-{k:08d}.parquet")), None, 0, None, None)
                for k, (path, lo, hi) in enumerate(qfiles)]

    typed_of = {c: pd.concat(parts, ignore_index=True) for c, parts in typed_parts.items()}
    inline = {c: _inline_sql(f"r.{_q(c)}", columns[c]) for c in typed_of}
    if not all(x is not None and _casts_agree(values[c][0], typed_of[c], _inline_sql("v", columns[c]))
               for c, x in inline.items()):
        inline = None  # some passing value's cast is not pandas' value: join the typed values
    validated = _validated_in_ranges(source, spec, columns, values, typed_of, inline, badrows_path, folder,
                                     ex["first_row"], ex["last_row"], sorted_rows(memory))

    # great-expectations' result over the table: the distinct-value run's, counts weighted by rows
    k = spec.steps.validation.examples_per_rule
    n_rows = ex["n_rows"]
    expectations, hits = [], []
    for j, (e, meta) in enumerate(zip(first.expectations, metas)):
        rule, col = meta["rule"], meta["column"]
        res = dict(e["result"])
        if col == rid and rule in _ROW_RULES_OF_ID and (forms is None or rule == "unique"):
            parts = [next(p for p in v.expectations if p["meta"] == meta) for v in id_v]
            for key in ("element_count", "unexpected_count", "missing_count"):
                if key in res:
                    res[key] = int(sum(p["result"].get(key) or 0 for p in parts))
            if forms is not None:  # the id chunks held the duplicated rows only: the table's counts
                res["element_count"], res["unexpected_count"] = n_rows, count_of.get((rule, col), 0)
                if "missing_count" in res:
                    res["missing_count"] = missing.get(j, 0)
            for key in ("partial_unexpected_list", "partial_unexpected_index_list"):
                if key in res:
                    res[key] = [x for p in parts for x in (p["result"].get(key) or [])][:PARTIAL_EXAMPLES]
            success = all(p["success"] for p in parts)
        elif col in values and "unexpected_count" in res:
            u = count_of.get((rule, col), 0)
            res["element_count"], res["unexpected_count"] = n_rows, u
            if "missing_count" in res:
                res["missing_count"] = missing.get(j, 0)
            listed = [(r, entries[(j, p)]) for r, p in first_rows.get((rule, col), [])][:PARTIAL_EXAMPLES]
            if col == rid and rule != "not_null":  # a form stands for the ids: show each row's own id
                listed = [(r, {**ent, rid: listed_ids[r]}) for r, ent in listed]
            if "partial_unexpected_index_list" in res:
                res["partial_unexpected_index_list"] = [{**ent, ROW: r} for r, ent in listed]
            if "partial_unexpected_list" in res:
                res["partial_unexpected_list"] = [_value_of(e, ent) for _, ent in listed]
            success = u == 0
        else:
            expectations.append(e)
            continue
        expectations.append({**e, "result": res, "success": success})
        examples = [r for r, _ in first_rows.get((rule, col), [])][:k]
        hits.append((rule, col, count_of.get((rule, col), 0), examples))
    # hits in the order of the row-by-row verdict (great-expectations' result order)
    order = {(r, c): i for i, (r, c, _, _) in enumerate(first.hits)}
    hits.sort(key=lambda h: order[(h[0], h[1])])
    whole = ChunkVerdict(
        n_rows=n_rows, n_valid=n_rows - n_bad, first_row=ex["first_row"], last_row=ex["last_row"],
        table_failures=list(first.table_failures), ignored_columns=list(first.ignored_columns), hits=hits,
        expectations=expectations, header=first.header,
    )
    outcome = _combine([whole], spec)
    results = [
        _ChunkRows(None, None, Path(v.files["result"]), 0, v.first_row if i >= n_frames else None,
                   v.last_row if i >= n_frames else None)
        for i, v in enumerate(verdicts)
    ]
    chunks = [*(_ChunkRows(v, None, None, 0, None, None) for v in validated), *q_chunks, *results]
    return outcome, chunks
