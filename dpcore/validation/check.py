"""One chunk's validation (:func:`_check`), the unit of work of both paths.

Validation runs chunk by chunk (issue 21): every chunk of rows goes through the same
great-expectations suite (:func:`_check`), and the chunks' verdicts are combined
(:func:`~dpcore.validation.combine._combine`). :func:`~dpcore.validation.validate` is the
one-chunk case on a frame in memory; :func:`~dpcore.validation.validate_table` streams a
warehouse table. The rules that are not per row are decided once: ``unique`` over the whole
table in SQL (:func:`~dpcore.validation.duplicates._duplicated_rows_sql`), fed to each chunk
as the set of its duplicated ids; the header rules (``column_exists``, ``extra_columns``,
``reserved_column``) are the same in every chunk (every chunk has the header), and
``row_count`` is decided by the first chunk (non-empty iff the table is; an empty table is
one empty chunk).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .cells import _as_text, _cells_json, _json_clean, _parse_numbers, _typed
from .outcome import RuleSummary
from .rules import DERIVED_PREFIX, _num_col, _whole_col
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


#: Result keys listing every failing row (or counting values over them): kept per chunk only
#: (``internal.validation_result_chunks``), never summed into the combined result.
_PER_ROW_KEYS = ("unexpected_list", "unexpected_index_list", "unexpected_index_query", "partial_unexpected_counts")


@dataclass
class ChunkVerdict:
    """What one chunk's validation returns to the combining process: small, no frame.

    Attributes
    ----------
    n_rows, n_valid : int
    first_row, last_row : int or None
        The chunk's first and last ``_row`` (None for an empty chunk).
    table_failures : list of RuleSummary
        Header and row-count failures as seen by this chunk (every chunk sees the same header).
    ignored_columns : list of str
    hits : list of (rule, column, count, example rows)
        Every row-level expectation in great-expectations' result order, with the number of this
        chunk's rows breaking it and the first ``examples_per_rule`` of them.
    expectations : list of dict
        great-expectations' result per expectation without the per-row lists (keys
        :data:`_PER_ROW_KEYS` removed; a chunk's set of duplicated ids removed from the kwargs).
    header : dict
        The result's other top-level fields (suite name, ...).
    n_quarantine : int
        Rows of this chunk's quarantine frame.
    files : dict
        Where :func:`_validate_chunk` wrote the chunk's validated rows, quarantine rows and
        complete result (paths in the export's private scratch folder); empty in memory.
    """

    n_rows: int
    n_valid: int
    first_row: int | None
    last_row: int | None
    table_failures: list[RuleSummary]
    ignored_columns: list[str]
    hits: list[tuple[str, str, int, list[int]]]
    expectations: list[dict] = field(repr=False)
    header: dict = field(repr=False)
    n_quarantine: int = 0
    files: dict = field(default_factory=dict, repr=False)


def _work_frame(raw: pd.DataFrame, spec: ReleaseSpec) -> tuple[pd.Series, dict, pd.DataFrame]:
    """great-expectations' working frame of a chunk: declared columns as text, the derived parsed numbers.

    Parameters
    ----------
    raw : pandas.DataFrame
        Rows as ingested, with ``_row`` (index reset).
    spec : ReleaseSpec

    Returns
    -------
    rows : pandas.Series
        ``_row`` as int64.
    frame : dict
        Column name -> Series (text for declared columns, as is for the others, then the derived columns).
    work : pandas.DataFrame
        ``frame`` as a frame.
    """
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    declared = [spec.dataset.record_id, *spec.public_schema.columns]
    frame: dict[str, pd.Series] = {ROW: rows}
    for c in raw.columns:
        if c == ROW:
            continue
        frame[c] = _as_text(raw[c]) if c in declared else raw[c]
    for col, attr in spec.public_schema.numeric.items():
        if col in raw.columns:
            num = _parse_numbers(frame[col])
            frame[_num_col(col)] = num
            if attr.integer:
                fin = np.isfinite(num)
                frame[_whole_col(col)] = np.round(num).where(fin, num)
    return rows, frame, pd.DataFrame(frame)


def _check(raw: pd.DataFrame, duplicated: np.ndarray, spec: ReleaseSpec):
    """Validate one chunk of rows; the unit of work of both paths.

    Parameters
    ----------
    raw : pandas.DataFrame
        The chunk as ingested, with the ``_row`` input row number.
    duplicated : numpy.ndarray of bool
        Per row: its record id is shared with another row of the whole table (:func:`_duplicated_rows_sql`).
    spec : ReleaseSpec

    Returns
    -------
    verdict : ChunkVerdict
    validated, quarantine : pandas.DataFrame
        As :class:`ValidationOutcome` describes them, for this chunk's rows.
    result : dict
        great-expectations' complete result on the chunk (raw values: warehouse only).
    """
    if ROW not in raw.columns:
        raise ValueError(f"raw table has no {ROW!r} column (load it with dpcore.ingest.raw.load_raw)")
    raw = raw.reset_index(drop=True)
    rows, frame, work = _work_frame(raw, spec)
    if rows.duplicated().any():
        raise ValueError(f"raw table's {ROW!r} column is not unique")
    raw[ROW] = rows
    n_rows = len(raw)
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    extras = [c for c in raw.columns if c != ROW and c not in declared]
    reserved = [c for c in extras if str(c).startswith(DERIVED_PREFIX)]

    dup_ids = None
    if rid in work.columns:
        dup_ids = sorted(work[rid][np.asarray(duplicated, dtype=bool)].dropna().unique().tolist())
    from .suite import _run_suite, build_suite  # great-expectations, here only: the caller's other code never loads it

    suite = build_suite(spec, present_columns=list(work.columns), duplicated_ids=dup_ids)
    result = _run_suite(work, suite, name=spec.dataset.name.replace(".", "_"))
    full_result = _json_clean(result.describe_dict())

    # Collect failures from the expectation results (row numbers only).
    k = spec.steps.validation.examples_per_rule
    table_failures: list[RuleSummary] = []
    row_hits: list[tuple[str, str, np.ndarray]] = []
    metas: list[dict] = []
    for vr in result.run_results.values():
        for r in vr.results:
            meta = r.expectation_config.meta or {}
            rule, column = meta.get("rule"), meta.get("column")
            metas.append({"rule": rule, "column": column})
            exc = r.exception_info or {}
            raised = exc.get("raised_exception") if isinstance(exc, dict) else False
            if raised:
                raise RuntimeError(
                    f"great-expectations could not evaluate rule {rule!r} on column {column!r}; "
                    "the data owner reads the stored results with `dpr validation show --spec SPEC`"
                )
            if rule in ("column_exists", "row_count", "extra_columns"):
                if r.success:
                    continue
                if rule in ("column_exists", "row_count"):
                    table_failures.append(RuleSummary(rule, column, 1, []))
                else:
                    unexpected = (r.result.get("details", {}).get("mismatched", {}) or {}).get("unexpected", [])
                    for c in unexpected:
                        if not str(c).startswith(DERIVED_PREFIX):
                            table_failures.append(RuleSummary("extra_columns", str(c), 1, []))
            else:
                idx = (r.result.get("unexpected_index_list") or []) if not r.success else []
                hit = np.fromiter((d[ROW] for d in idx), dtype="int64", count=len(idx))
                row_hits.append((rule, column, np.unique(hit)))
    for c in reserved:
        table_failures.append(RuleSummary("reserved_column", str(c), 1, []))

    # Quarantine: one row per (row, rule, column); cells JSON built for rejected rows only.
    hit_frames = [pd.DataFrame({ROW: h, "rule": rule, "column": col}) for rule, col, h in row_hits if len(h)]
    if hit_frames:
        q = pd.concat(hit_frames, ignore_index=True)
    else:
        q = pd.DataFrame({ROW: np.array([], dtype="int64"), "rule": [], "column": []})
    bad_rows = np.unique(q[ROW].to_numpy(dtype="int64"))
    pos_of = pd.Series(np.arange(n_rows), index=rows.to_numpy())
    bad_pos = pos_of.loc[bad_rows].to_numpy() if len(bad_rows) else np.array([], dtype="int64")
    cells = pd.Series(_cells_json(raw, bad_pos), index=bad_rows, dtype=object)
    if rid in raw.columns:
        ids = frame[rid].iloc[bad_pos].astype(object)
        ids = pd.Series(ids.where(ids.notna(), None).to_numpy(), index=bad_rows, dtype=object)
    else:
        ids = pd.Series([None] * len(bad_rows), index=bad_rows, dtype=object)
    quarantine = pd.DataFrame(
        {
            ROW: q[ROW].astype("int64").to_numpy(),
            "record_id": ids.reindex(q[ROW]).to_numpy(dtype=object),
            "rule": q["rule"].astype(object).to_numpy(),
            "column": q["column"].astype(object).to_numpy(),
            "cells": cells.reindex(q[ROW]).to_numpy(dtype=object),
        }
    ).sort_values([ROW, "rule", "column"], kind="stable", ignore_index=True)

    # Validated rows, typed (vectorised).
    keep = ~rows.isin(bad_rows).to_numpy()
    if table_failures and any(f.rule == "column_exists" for f in table_failures):
        keep[:] = False  # cannot type rows whose columns are missing; enforce() stops the run
    validated = _typed(work.loc[keep], spec)

    # The verdict: GE's result without its per-row lists, for the combination.
    (vres,) = full_result["validation_results"]
    described = vres["expectations"]
    if len(described) != len(metas):
        raise RuntimeError("great-expectations described a different number of results than it returned")
    expectations = []
    for e, meta in zip(described, metas):
        kwargs = {key: v for key, v in e.get("kwargs", {}).items() if key != "batch_id"}
        if meta["rule"] == "unique":
            kwargs.pop("value_set", None)  # this chunk's duplicated ids: per chunk only
        res = {key: v for key, v in (e.get("result") or {}).items() if key not in _PER_ROW_KEYS}
        expectations.append({**e, "kwargs": kwargs, "result": res, "meta": meta})
    header = {key: v for key, v in full_result.items() if key not in ("validation_results", "success", "statistics")}
    header["validation"] = {key: v for key, v in vres.items() if key not in ("expectations", "success", "statistics")}
    verdict = ChunkVerdict(
        n_rows=n_rows,
        n_valid=int(keep.sum()),
        first_row=int(rows.iloc[0]) if n_rows else None,
        last_row=int(rows.iloc[-1]) if n_rows else None,
        table_failures=table_failures,
        ignored_columns=[str(c) for c in extras] if spec.dataset.extra_columns == "ignore" else [],
        hits=[(rule, col, int(len(h)), [int(x) for x in h[:k]]) for rule, col, h in row_hits],
        expectations=expectations,
        header=header,
        n_quarantine=len(quarantine),
    )
    return verdict, validated, quarantine, full_result
