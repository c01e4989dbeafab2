"""Validate raw input against the release spec with great-expectations.

The spec's public schema is turned into a great-expectations 1.x
:class:`~great_expectations.ExpectationSuite` (:func:`build_suite`) and run
through an ephemeral, file-less Checkpoint with ``result_format="COMPLETE"``
and ``_row`` (the 1-based input row number) as the unexpected-index column.

Chunk by chunk (issue 21; DESIGN.md "Scale"): :func:`validate_table` never
holds the table in memory. It streams the raw table from DuckDB in chunks of
a public size (:func:`validation_chunk_rows`, from ``DPR_MEMORY_LIMIT`` and the
columns), runs the same suite on every chunk (:func:`_check`, mappable onto
other processes), combines the chunks' verdicts (:func:`_combine`,
:func:`_combine_results`) and writes the validated and quarantined rows chunk
by chunk inside one transaction (:func:`_store`). great-expectations' SQL
data source does not work over DuckDB here (great-expectations 1.24 with duckdb-engine 0.17: its metric queries return no row), hence the
pandas batches. :func:`validate` is the one-chunk case for frames in memory
(tests, ``dpr spec check --data``): the same code, the same results, for any
chunk size (tests/test_validation_chunks.py).

Rules
-----
Table level (any failure stops the run in :func:`enforce`):

``column_exists``
    The record-id column and every declared attribute are present.
``row_count``
    The table has at least one row.
``extra_columns``
    With ``dataset.extra_columns: error``, no undeclared columns. With
    ``ignore`` the extras stay in ``raw`` and are listed in
    :attr:`ValidationOutcome.ignored_columns`.
``reserved_column``
    An input column uses a name reserved for the validator's derived columns.

Row level (a failing row is quarantined once per broken rule and column):

``not_null``
    Cell is neither null nor the empty string (unless ``nullable``).
``unique``
    Record ids are unique over the whole table (decided in DuckDB before the
    chunks are checked, :func:`_duplicated_rows_sql`). Every row sharing an id is rejected: keeping one of
    them would let one added raw row *replace* a validated record (two
    add/remove steps for every step reading ``validated``); rejecting all
    keeps the validated table within one record of its neighbour's, and the
    record counts are charged for their true sensitivity on raw rows
    (:mod:`dpcore.steps.record_counts`).
``id_pattern``
    Record id matches ``dataset.record_id_pattern``.
``in_domain``
    Categorical cell text equals the text of a domain value (``str(v)``).
``number``
    Numeric cell text is a decimal number (``nan``, ``inf``, ``abc`` fail).
``finite``
    The number is finite as a float64 (``1e400`` overflows and fails).
``integer``
    For ``integer: true`` attributes, the number is whole.
``in_bounds``
    The number lies in the public bounds ``[min, max]``.

Privacy (DESIGN.md rules 6 and 8): what validation shows publicly depends only
on the public rule set (the spec): the rules checked, never which were broken
or how often. Row-level failures never stop a run (rows are quarantined);
only header-level rules and an empty input do (:func:`enforce`).
great-expectations' per-row results contain the raw cell values. The combined
result (:attr:`ValidationOutcome.full_result`) is written only to
``internal.validation_results``, each chunk's complete result only to
``internal.validation_result_chunks``; quarantined rows (with their cells) go
only to the ``quarantine`` schema. The chunked path logs nothing; chunk files
live in the warehouse's private scratch folder and are removed on exit. :meth:`ValidationOutcome.summary`,
:meth:`ValidationOutcome.summary_text` (data owner only) carry rule names,
column names, counts and input row numbers; :class:`ValidationFailed` carries
rule and column names only.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from .chunks import MemoryBudget, serial_map
from .ingest import ROW, IngestResult
from .lineage import new_nonce
from .partitions import scratch_dir
from .spec import ReleaseSpec
from .warehouse import Warehouse

# No usage statistics from great-expectations (the pipeline runs offline).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import great_expectations as gx  # noqa: E402  (after the analytics switch)
from great_expectations.data_context.types.base import (  # noqa: E402
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)

__all__ = [
    "RuleSummary",
    "ValidationOutcome",
    "ValidationFailed",
    "ValidationDone",
    "build_suite",
    "validate",
    "enforce",
    "public_rule_set",
    "owner_summary",
    "store_outcome",
    "validate_table",
    "validation_chunk_rows",
    "ChunkVerdict",
    "ChunkTask",
    "NUMBER_PATTERN",
]

#: A decimal number written in plain or scientific notation, nothing else
#: (no surrounding spaces, no ``nan``/``inf``, no thousands separators).
#: ``\A``/``\Z`` anchor the whole cell: great-expectations uses ``re.search``.
_NUMBER_BODY = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
NUMBER_PATTERN = rf"\A{_NUMBER_BODY}\Z"

#: Prefix of the derived (parsed) columns the validator adds to its working frame.
DERIVED_PREFIX = "__dpv_"

TABLE_RULES = ("column_exists", "row_count", "extra_columns", "reserved_column")
ROW_RULES = ("not_null", "unique", "id_pattern", "in_domain", "number", "finite", "integer", "in_bounds")

_RULE_TEXT = {
    "column_exists": "required column is missing",
    "row_count": "the table has no data rows",
    "extra_columns": "column is not declared in the spec (dataset.extra_columns: error)",
    "reserved_column": "column name is reserved for the validator",
    "not_null": "empty or null cell in a non-nullable column",
    "unique": "record id is not unique",
    "id_pattern": "record id does not match dataset.record_id_pattern",
    "in_domain": "value is not in the categorical domain",
    "number": "cell is not a decimal number",
    "finite": "number is not finite (overflows float64)",
    "integer": "number is not a whole number (integer: true)",
    "in_bounds": "number is outside the public bounds [min, max]",
}



def _num_col(col: str) -> str:
    return f"{DERIVED_PREFIX}num__{col}"


def _whole_col(col: str) -> str:
    return f"{DERIVED_PREFIX}whole__{col}"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RuleSummary:
    """One failed rule on one column, without any cell value.

    Attributes
    ----------
    rule : str
        Rule name (see the module docstring).
    column : str or None
        Column the rule applies to; None for table-wide rules (``row_count``).
    count : int
        Number of distinct input rows breaking the rule (1 for a table rule).
    example_rows : list of int
        The first few input row numbers (``_row``) breaking it; never values.
    """

    rule: str
    column: str | None
    count: int
    example_rows: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        """Plain-JSON form (used by :meth:`ValidationOutcome.summary`)."""
        return {"rule": self.rule, "column": self.column, "count": int(self.count),
                "example_rows": [int(r) for r in self.example_rows]}


@dataclass
class ValidationOutcome:
    """Everything validation found.

    The chunked path (:func:`validate_table`) writes the validated and
    quarantined rows straight to the warehouse, chunk by chunk, and returns an
    outcome *without* frames (its size does not grow with the rows); the
    in-memory :func:`validate` (one chunk) also returns the frames.

    Attributes
    ----------
    row_failures, table_failures : list of RuleSummary
        Failed rules with counts and example row numbers.
    ignored_columns : list of str
        Undeclared input columns kept in ``raw`` only (``extra_columns: ignore``).
    n_rows, n_valid, n_rejected : int
        ``n_valid + n_rejected == n_rows``.
    full_result : dict
        The great-expectations result combined over the chunks
        (:func:`_combine_results`): per expectation, success and summed
        counts, and GE's first examples. Contains raw values: it goes to
        ``internal.validation_results`` only. Every failing row's detail is in
        the ``quarantine`` table and in the per-chunk GE results
        (``internal.validation_result_chunks``).
    examples_per_rule : int
        How many example row numbers the summary shows per rule.
    validated : pandas.DataFrame or None
        In memory only (:func:`validate`): rows passing every row-level rule,
        typed: ``_row`` int64, record id str, categoricals int64 (``Int64`` if
        nullable) when every domain value is an int else str, numerics float64.
        None when the rows went straight to the warehouse.
    quarantine : pandas.DataFrame or None
        In memory only: one row per (rejected input row, broken rule,
        column): ``_row``, ``record_id`` (raw text or None), ``rule``,
        ``column``, ``cells`` (JSON text of the row's raw cells). Contains raw
        values: warehouse only.
    chunk_results : list of dict or None
        In memory only: great-expectations' complete result of each chunk
        (with every failing row's index and value); stored by
        :func:`store_outcome` in ``internal.validation_result_chunks``.
    """

    row_failures: list[RuleSummary]
    table_failures: list[RuleSummary]
    ignored_columns: list[str]
    n_rows: int
    n_valid: int
    n_rejected: int
    full_result: dict = field(repr=False)
    examples_per_rule: int = 5
    validated: pd.DataFrame | None = field(default=None, repr=False)
    quarantine: pd.DataFrame | None = field(default=None, repr=False)
    chunk_results: list[dict] | None = field(default=None, repr=False)

    @property
    def rejected_fraction(self) -> float:
        """``n_rejected / n_rows`` (0 for an empty table)."""
        return self.n_rejected / self.n_rows if self.n_rows else 0.0

    @property
    def ok(self) -> bool:
        """True when nothing failed at all."""
        return not self.table_failures and not self.row_failures

    def summary(self) -> dict:
        """Counts, rule names, column names and example row numbers only.

        Safe for logs, Prefect artifacts and the release bundle: no cell value
        appears in it.

        Returns
        -------
        dict
            Plain JSON types only.
        """
        return {
            "n_rows": int(self.n_rows),
            "n_valid": int(self.n_valid),
            "n_rejected": int(self.n_rejected),
            "rejected_fraction": float(self.rejected_fraction),
            "table_failures": [f.as_dict() for f in self.table_failures],
            "row_failures": [f.as_dict() for f in self.row_failures],
            "ignored_columns": list(self.ignored_columns),
        }

    def summary_text(self) -> str:
        """Readable multi-line rendering of :meth:`summary` (no cell values).

        Returns
        -------
        str
        """
        s = self.summary()
        lines = [
            f"validation: {s['n_rows']} rows, {s['n_valid']} valid, {s['n_rejected']} rejected "
            f"({100 * s['rejected_fraction']:.2f}%)"
        ]
        if s["table_failures"]:
            lines.append("table rules failed:")
            for f in s["table_failures"]:
                where = f" column {f['column']!r}" if f["column"] is not None else ""
                lines.append(f"  - {f['rule']}{where}: {_RULE_TEXT.get(f['rule'], f['rule'])}")
        if s["row_failures"]:
            lines.append("row rules failed (rule, column: rows; example input rows):")
            for f in s["row_failures"]:
                ex = ", ".join(str(r) for r in f["example_rows"])
                more = ", ..." if f["count"] > len(f["example_rows"]) and ex else ""
                lines.append(
                    f"  - {f['rule']}, column {f['column']!r}: {f['count']} rows; rows {ex}{more} "
                    f"({_RULE_TEXT.get(f['rule'], f['rule'])})"
                )
        if s["ignored_columns"]:
            lines.append("ignored extra columns (kept in raw only): " + ", ".join(repr(c) for c in s["ignored_columns"]))
        if not s["table_failures"] and not s["row_failures"]:
            lines.append("all rules passed")
        return "\n".join(lines)


class ValidationFailed(RuntimeError):
    """Validation stopped the run.

    The message names the failed table-level rules and columns only: no
    count, no row number, never a cell value.

    Attributes
    ----------
    outcome : ValidationOutcome or None
        The full outcome (with raw values) for in-process callers. It is *not*
        pickled: a pickled exception (Prefect stores failed runs' exceptions)
        carries the message only.
    """

    def __init__(self, message: str, outcome: ValidationOutcome | None = None):
        super().__init__(message)
        self.outcome = outcome

    def __reduce__(self):
        # Drop the outcome (raw values) and any chained context when pickled.
        return (ValidationFailed, (str(self),))


# --------------------------------------------------------------------------- suite


def _int_domain(values: list) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def build_suite(
    spec: ReleaseSpec, present_columns: list[str] | None = None, duplicated_ids: list[str] | None = None
) -> gx.ExpectationSuite:
    """Generate the expectation suite for a spec.

    Parameters
    ----------
    spec : ReleaseSpec
    present_columns : list of str, optional
        Columns of the frame the suite will run on. Row-level expectations on
        columns missing from it are left out (the ``column_exists`` expectation
        reports them). None = assume every declared column is present.
    duplicated_ids : list of str, optional
        How the ``unique`` rule is checked. None: great-expectations'
        ``expect_column_values_to_be_unique`` on the frame itself (the rule as
        published by :func:`public_rule_set`). A list: the record-id texts of
        the frame's rows that share their id with another row *of the whole
        table*, found in SQL (:func:`_duplicate_flags`); the rule becomes
        ``expect_column_values_to_not_be_in_set`` with that set, so a chunk
        flags exactly its rows whose id is duplicated anywhere in the table
        (the same rows, in the same place of the result, as the uniqueness
        expectation over the whole table). The set holds raw ids: the suite
        is never logged or published.

    Returns
    -------
    great_expectations.ExpectationSuite
        Every expectation carries ``meta = {"rule": ..., "column": ...}``.
    """
    E = gx.expectations
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    present = set(declared) if present_columns is None else set(present_columns)
    expectations: list = []

    def add(exp, rule: str, column: str | None):
        exp.meta = {"rule": rule, "column": column}
        expectations.append(exp)

    # table level
    for col in declared:
        add(E.ExpectColumnToExist(column=col), "column_exists", col)
    add(E.ExpectTableRowCountToBeBetween(min_value=1, max_value=None), "row_count", None)
    if spec.dataset.extra_columns == "error":
        allowed = [ROW, *declared]
        allowed += [_num_col(c) for c in schema.numeric if c in present]
        allowed += [_whole_col(c) for c, a in schema.numeric.items() if a.integer and c in present]
        add(E.ExpectTableColumnsToMatchSet(column_set=allowed, exact_match=True), "extra_columns", None)

    # record id
    if rid in present:
        add(E.ExpectColumnValuesToNotBeNull(column=rid), "not_null", rid)
        if duplicated_ids is None:
            add(E.ExpectColumnValuesToBeUnique(column=rid), "unique", rid)
        else:
            add(E.ExpectColumnValuesToNotBeInSet(column=rid, value_set=list(duplicated_ids)), "unique", rid)
        add(E.ExpectColumnValuesToMatchRegex(column=rid, regex=f"(?:{spec.dataset.record_id_pattern})\\Z"), "id_pattern", rid)

    for col, attr in schema.categorical.items():
        if col not in present:
            continue
        if not attr.nullable:
            add(E.ExpectColumnValuesToNotBeNull(column=col), "not_null", col)
        add(E.ExpectColumnValuesToBeInSet(column=col, value_set=attr.domain_strings), "in_domain", col)

    big = sys.float_info.max
    for col, attr in schema.numeric.items():
        if col not in present:
            continue
        num = _num_col(col)
        if not attr.nullable:
            add(E.ExpectColumnValuesToNotBeNull(column=col), "not_null", col)
        add(E.ExpectColumnValuesToMatchRegex(column=col, regex=NUMBER_PATTERN), "number", col)
        add(E.ExpectColumnValuesToBeBetween(column=num, min_value=-big, max_value=big), "finite", col)
        if attr.integer:
            add(
                E.ExpectColumnPairValuesToBeEqual(
                    column_A=num, column_B=_whole_col(col), ignore_row_if="either_value_is_missing"
                ),
                "integer",
                col,
            )
        add(E.ExpectColumnValuesToBeBetween(column=num, min_value=attr.min, max_value=attr.max), "in_bounds", col)
    # Built in one go: adding expectations one by one needs an active data context.
    return gx.ExpectationSuite(name=f"{spec.dataset.name}__validation", expectations=expectations)


_RULE_CHECK = {
    "column_exists": "the column is present",
    "row_count": "the table has at least one row",
    "extra_columns": "no column outside the spec",
    "reserved_column": "no column uses a reserved name",
    "not_null": "the cell is not empty",
    "unique": "the record id is unique (every row sharing an id is rejected)",
    "id_pattern": "the record id matches dataset.record_id_pattern",
    "in_domain": "the value is in the public domain",
    "number": "the cell is a decimal number",
    "finite": "the number is finite",
    "integer": "the number is whole",
    "in_bounds": "the number lies in the public bounds [min, max]",
}


def public_rule_set(spec: ReleaseSpec) -> list[dict[str, str]]:
    """The rules the spec makes validation check, one row per (rule, column): public, from the spec only.

    This is what validation may show publicly (DESIGN.md rule 8): the rule set,
    never which rules were broken or how often.
    """
    rows = [
        {"rule": e.meta["rule"], "column": e.meta["column"] or "", "checks": _RULE_CHECK[e.meta["rule"]]}
        for e in build_suite(spec).expectations
    ]
    return list({(r["rule"], r["column"]): r for r in rows}.values())


# --------------------------------------------------------------------------- typing helpers


def _as_text(s: pd.Series) -> pd.Series:
    """Cells as text (pandas ``str`` dtype); null and ``""`` become missing.

    Parquet inputs may be typed: whole floats are written without ``.0`` (so a
    float month 1.0 reads "1"), other numbers with ``repr``.
    """
    if pd.api.types.is_bool_dtype(s.dtype):
        out = s.astype(object).where(s.notna(), None).map(lambda v: None if v is None else str(bool(v)))
        out = out.astype("str")
    elif pd.api.types.is_integer_dtype(s.dtype):
        out = s.astype("Int64").astype("str")
    elif pd.api.types.is_float_dtype(s.dtype):
        v = s.astype("float64")
        whole = np.isfinite(v) & (v == np.round(v)) & (v.abs() < 2.0**53)
        out = v.astype("str")
        out = out.where(~whole, v.where(whole, 0).astype("int64").astype("str"))
        out = out.where(v.notna())
    else:
        out = s.astype("str")
    out = out.where(out.notna() & (out != ""))
    return out.astype("str")


def _parse_numbers(text: pd.Series) -> pd.Series:
    """float64 of cells matching :data:`NUMBER_PATTERN` (overflow gives ±inf), else NaN."""
    ok = text.str.fullmatch(_NUMBER_BODY).fillna(False).astype(bool)
    return pd.to_numeric(text.where(ok), errors="coerce").astype("float64")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (pd.Timestamp, datetime)):
        return obj.isoformat()
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def _json_clean(obj: Any) -> Any:
    """Round-trip through JSON so the result holds plain types (NaN/inf as strings)."""

    def fix(o):
        if isinstance(o, float) and not math.isfinite(o):
            return str(o)
        if isinstance(o, dict):
            return {str(k): fix(v) for k, v in o.items()}
        if isinstance(o, list):
            return [fix(v) for v in o]
        return o

    return fix(json.loads(json.dumps(obj, default=_jsonable)))


# --------------------------------------------------------------------------- validate


def _run_checkpoint(frame: pd.DataFrame, suite: gx.ExpectationSuite, name: str):
    # In-memory stores, no data-docs site (nothing on disk), no progress bars, no analytics.
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False),
        analytics_enabled=False,
    )
    ctx = gx.get_context(project_config=config, mode="ephemeral")
    tag = uuid.uuid4().hex[:8]
    batch_def = (
        ctx.data_sources.add_pandas(f"{name}_{tag}")
        .add_dataframe_asset(f"{name}_rows")
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = ctx.suites.add(suite)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{name}_{tag}", data=batch_def, suite=suite))
    cp = ctx.checkpoints.add(
        gx.Checkpoint(
            name=f"{name}_{tag}",
            validation_definitions=[vd],
            result_format={"result_format": "COMPLETE", "unexpected_index_column_names": [ROW]},
        )
    )
    return cp.run(batch_parameters={"dataframe": frame})


def _cells_json(raw: pd.DataFrame, positions: np.ndarray) -> list[str]:
    """JSON text of the raw cells of the given row positions (quarantined rows only)."""
    sub = raw.iloc[positions].drop(columns=[ROW])
    sub = sub.astype(object).where(sub.notna(), None)
    return [json.dumps(rec, default=_jsonable, ensure_ascii=False) for rec in sub.to_dict("records")]


# --------------------------------------------------------------------------- one chunk
#
# Validation runs chunk by chunk (issue 21): every chunk of rows goes through the same
# great-expectations suite (:func:`_check`), and the chunks' verdicts are combined
# (:func:`_combine`). :func:`validate` is the one-chunk case on a frame in memory;
# :func:`validate_table` streams a warehouse table. The rules that are not per row are decided
# once: ``unique`` over the whole table in SQL (:func:`_duplicated_rows_sql`), fed to each chunk as the
# set of its duplicated ids; the header rules (``column_exists``, ``extra_columns``,
# ``reserved_column``) are the same in every chunk (every chunk has the header), and ``row_count``
# is decided by the first chunk (non-empty iff the table is; an empty table is one empty chunk).

#: Entries great-expectations keeps in its "partial" example lists (SUMMARY format); the combined
#: result keeps as many, taken from the chunks in row order.
PARTIAL_EXAMPLES = 20
#: Result keys listing every failing row (or counting values over them): kept per chunk only
#: (``internal.validation_result_chunks``), never summed into the combined result.
_PER_ROW_KEYS = ("unexpected_list", "unexpected_index_list", "unexpected_index_query", "partial_unexpected_counts")
_SUMMED_KEYS = ("element_count", "unexpected_count", "missing_count")


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
        raise ValueError(f"raw table has no {ROW!r} column (load it with dpcore.ingest.load_raw)")
    raw = raw.reset_index(drop=True)
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    if rows.duplicated().any():
        raise ValueError(f"raw table's {ROW!r} column is not unique")
    raw[ROW] = rows
    n_rows = len(raw)
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    extras = [c for c in raw.columns if c != ROW and c not in declared]
    reserved = [c for c in extras if str(c).startswith(DERIVED_PREFIX)]

    # Working frame for great-expectations: declared columns as text, derived parsed numbers.
    frame: dict[str, pd.Series] = {ROW: rows}
    for c in raw.columns:
        if c == ROW:
            continue
        frame[c] = _as_text(raw[c]) if c in declared else raw[c]
    for col, attr in schema.numeric.items():
        if col in raw.columns:
            num = _parse_numbers(frame[col])
            frame[_num_col(col)] = num
            if attr.integer:
                fin = np.isfinite(num)
                frame[_whole_col(col)] = np.round(num).where(fin, num)
    work = pd.DataFrame(frame)

    dup_ids = None
    if rid in work.columns:
        dup_ids = sorted(work[rid][np.asarray(duplicated, dtype=bool)].dropna().unique().tolist())
    suite = build_suite(spec, present_columns=list(work.columns), duplicated_ids=dup_ids)
    result = _run_checkpoint(work, suite, name=spec.dataset.name.replace(".", "_"))
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
                    "see the warehouse internal.validation_results for details"
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


def _combine_results(verdicts: list[ChunkVerdict]) -> dict:
    """great-expectations' result over the whole table from the chunks' results.

    The combination (every chunk ran the same suite, so the expectations line up):

    - an expectation succeeds iff it succeeds on every chunk (``row_count``: on some chunk);
      the table succeeds iff all do;
    - ``element_count``, ``unexpected_count`` and ``missing_count`` are summed, and the
      percentages recomputed from the sums (``unexpected_percent`` over the non-missing
      elements when GE counts missing ones, else over all);
    - ``partial_unexpected_list`` / ``partial_unexpected_index_list``: the chunks' lists
      concatenated in row order, cut at :data:`PARTIAL_EXAMPLES` (GE's own examples);
    - ``row_count``'s ``observed_value`` is the sum of the chunks' row counts; the other header
      rules' results are the first chunk's (every chunk has the same header);
    - the per-row lists (``unexpected_index_list``, ``unexpected_list``,
      ``unexpected_index_query``, ``partial_unexpected_counts``) are not combined: each chunk's
      complete result is stored as one row of ``internal.validation_result_chunks``, and every
      failing row is in the ``quarantine`` table with its rule, column and cells;
    - ``unique`` runs as ``expect_column_values_to_not_be_in_set`` with each chunk's duplicated
      ids (found over the whole table, :func:`build_suite`); that set is left out of the
      combined kwargs.
    """
    first = verdicts[0]
    expectations = []
    for j, e0 in enumerate(first.expectations):
        parts = [v.expectations[j] for v in verdicts]
        if any((p["meta"], p["expectation_type"]) != (e0["meta"], e0["expectation_type"]) for p in parts):
            raise RuntimeError("chunks ran different expectation suites")
        res = dict(e0["result"])
        for key in _SUMMED_KEYS:
            if key in res:
                res[key] = int(sum(p["result"].get(key) or 0 for p in parts))
        if "unexpected_count" in res and "element_count" in res:
            n, u, m = res["element_count"], res["unexpected_count"], res.get("missing_count", 0)
            total = 100 * u / n if n else None
            if "missing_count" in res:
                nonmissing = 100 * u / (n - m) if n - m else None
                res["unexpected_percent"] = nonmissing
                for key, value in (("unexpected_percent_total", total), ("unexpected_percent_nonmissing", nonmissing),
                                   ("missing_percent", 100 * m / n if n else None)):
                    if key in res:
                        res[key] = value
            else:
                res["unexpected_percent"] = total
        for key in ("partial_unexpected_list", "partial_unexpected_index_list"):
            if key in res:
                res[key] = [x for p in parts for x in (p["result"].get(key) or [])][:PARTIAL_EXAMPLES]
        if e0["meta"]["rule"] == "row_count" and "observed_value" in res:
            res["observed_value"] = int(sum(v.n_rows for v in verdicts))
        out = {key: v for key, v in e0.items() if key != "meta"}
        # at least one row in the table = in some chunk; every other rule must hold in every chunk
        ok = any if e0["meta"]["rule"] == "row_count" else all
        expectations.append({**out, "success": ok(p["success"] for p in parts), "result": res})
    n_ok = sum(1 for e in expectations if e["success"])
    success = n_ok == len(expectations)
    stats = {
        "evaluated_expectations": len(expectations),
        "successful_expectations": n_ok,
        "unsuccessful_expectations": len(expectations) - n_ok,
        "success_percent": 100 * n_ok / len(expectations) if expectations else None,
    }
    header = dict(first.header)
    validation = header.pop("validation", {})
    return {
        **header,
        "success": success,
        "statistics": {
            "evaluated_validations": 1,
            "success_percent": 100.0 if success else 0.0,
            "successful_validations": int(success),
            "unsuccessful_validations": int(not success),
        },
        "validation_results": [{**validation, "success": success, "statistics": stats, "expectations": expectations}],
        "combined_from_chunks": len(verdicts),
        "per_row_detail": "quarantine table; internal.validation_result_chunks (each chunk's complete result)",
    }


def _combine(verdicts: list[ChunkVerdict], spec: ReleaseSpec) -> ValidationOutcome:
    """The outcome over the whole table from the chunks' verdicts (in row order).

    Counts are summed; a rule's example rows are the first ``examples_per_rule`` over the
    chunks in row order (so the same as over the whole table); table-level failures and ignored
    columns are the first chunk's (the same header in every chunk).

    Raises
    ------
    ValueError
        The chunks' ``_row`` numbers are not increasing from chunk to chunk (a row number repeats).
    """
    if not verdicts:
        raise ValueError("no chunk to combine (an empty table is validated as one empty chunk)")
    spans = [(v.first_row, v.last_row) for v in verdicts if v.n_rows]
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        raise ValueError(f"raw table's {ROW!r} column is not unique (or the chunks are not in {ROW!r} order)")
    # the header rules are the same in every chunk; a chunk without rows (a gap in ``_row``) fails row_count alone
    first = next((v for v in verdicts if v.n_rows), verdicts[0])
    k = spec.steps.validation.examples_per_rule
    row_failures = []
    for j, (rule, col, _, _) in enumerate(first.hits):
        count = sum(v.hits[j][2] for v in verdicts)
        if count:
            examples = [x for v in verdicts for x in v.hits[j][3]][:k]
            row_failures.append(RuleSummary(rule, col, int(count), examples))
    n_rows = int(sum(v.n_rows for v in verdicts))
    n_valid = int(sum(v.n_valid for v in verdicts))
    return ValidationOutcome(
        row_failures=row_failures,
        table_failures=list(first.table_failures),
        ignored_columns=list(first.ignored_columns),
        n_rows=n_rows,
        n_valid=n_valid,
        n_rejected=n_rows - n_valid,
        full_result=_combine_results(verdicts),
        examples_per_rule=k,
    )


def _duplicate_flags(raw: pd.DataFrame, rid: str) -> np.ndarray:
    """:func:`_duplicated_rows_sql` on a frame in memory (an in-memory DuckDB), as a flag per row of ``raw``."""
    import duckdb

    if rid not in raw.columns or not len(raw):
        return np.zeros(len(raw), dtype=bool)
    con = duckdb.connect()
    try:
        con.register("_raw", raw)
        columns = {str(d[0]): str(d[1]) for d in con.execute("DESCRIBE SELECT * FROM _raw").fetchall()}
        dup_rows = con.execute(_duplicated_rows_sql("_raw", columns, rid)).fetchnumpy()[ROW]
    finally:
        con.close()
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    return rows.isin(pd.to_numeric(pd.Series(dup_rows), errors="raise").astype("int64")).to_numpy(dtype=bool)


def validate(raw: pd.DataFrame, spec: ReleaseSpec) -> ValidationOutcome:
    """Check a raw table held in memory against the spec; split it into validated and quarantined rows.

    The one-chunk case of :func:`validate_table` (same checks, same combination); for tables
    that fit in memory (tests, ``dpr spec check --data``).

    Parameters
    ----------
    raw : pandas.DataFrame
        The table as ingested (:func:`dpcore.ingest.load_raw`), with the 1-based
        ``_row`` input row number. CSV cells are text; Parquet cells may be typed.
    spec : ReleaseSpec

    Returns
    -------
    ValidationOutcome
        With the ``validated`` and ``quarantine`` frames and the chunk's complete
        great-expectations result. Nothing is dropped silently: ``n_valid`` plus the number
        of distinct quarantined rows equals ``n_rows``. Table-level failures do not raise
        here; :func:`enforce` decides.

    Raises
    ------
    ValueError
        ``raw`` has no unique ``_row`` column (a programming error, not bad data).
    RuntimeError
        great-expectations could not evaluate a rule (names rule and column only).
    """
    if ROW not in raw.columns:
        raise ValueError(f"raw table has no {ROW!r} column (load it with dpcore.ingest.load_raw)")
    if pd.to_numeric(raw[ROW], errors="raise").duplicated().any():
        raise ValueError(f"raw table's {ROW!r} column is not unique")
    verdict, validated, quarantine, result = _check(raw, _duplicate_flags(raw, spec.dataset.record_id), spec)
    outcome = _combine([verdict], spec)
    outcome.validated, outcome.quarantine, outcome.chunk_results = validated, quarantine, [result]
    return outcome


def _typed(work: pd.DataFrame, spec: ReleaseSpec) -> pd.DataFrame:
    rid = spec.dataset.record_id
    schema = spec.public_schema
    out: dict[str, pd.Series] = {ROW: work[ROW].astype("int64")}
    out[rid] = (work[rid] if rid in work.columns else pd.Series([], dtype="str")).astype("str")
    for col, attr in schema.categorical.items():
        text = work[col] if col in work.columns else pd.Series([], dtype="str")
        if _int_domain(attr.domain):
            out[col] = pd.to_numeric(text, errors="raise").astype("Int64" if attr.nullable else "int64")
        else:
            out[col] = text.astype("str")
    for col in schema.numeric:
        num = work[_num_col(col)] if _num_col(col) in work.columns else pd.Series([], dtype="float64")
        out[col] = num.astype("float64")
    return pd.DataFrame(out).reset_index(drop=True)


# --------------------------------------------------------------------------- enforce / store


@dataclass(frozen=True)
class ValidationDone:
    """Opaque, public handle of a stored validation: no counts, no verdicts (DESIGN.md rules 6, 8).

    Whether any row broke a rule, and how many, are private facts; the noisy
    ``record_counts`` step releases them. The exact summary stays in
    ``internal.validation_results`` and the bundle's owner-only folder.
    """

    dataset: str
    table: str


def enforce(outcome: ValidationOutcome, spec: ReleaseSpec) -> None:
    """Stop the run when the input's *shape* is not fit for release.

    Only table-level rules stop a run here: missing, extra or reserved columns
    (facts about the header, not about any record) and an input without any
    row. Row-level failures never stop it: the rows are quarantined, and the
    rejected-fraction gate (``steps.validation.max_rejected_fraction``) is
    applied to the *noisy, charged* record counts by
    :func:`dpcore.steps.record_counts.rejected_fraction_gate`, because a stop
    decided on exact counts would publish them (DESIGN.md rule 6).

    Parameters
    ----------
    outcome : ValidationOutcome
    spec : ReleaseSpec

    Raises
    ------
    ValidationFailed
        Naming the failed rules and columns only (no count, no row number,
        no value); the full summary is in ``internal.validation_results``.
    """
    if not outcome.table_failures:
        return
    failed = sorted({(f.rule, f.column or "") for f in outcome.table_failures})
    lines = [f"  - {rule}{f' column {col!r}' if col else ''}: {_RULE_TEXT.get(rule, rule)}" for rule, col in failed]
    raise ValidationFailed(
        f"validation of dataset {spec.dataset.name!r} failed: table-level rule(s) failed:\n" + "\n".join(lines)
        + "\nThe data owner finds the full result in the warehouse (internal.validation_results).",
        outcome,
    )


_RESULTS_DDL = """CREATE TABLE IF NOT EXISTS internal.validation_results (
    content_hash VARCHAR, dataset VARCHAR, spec_hash VARCHAR, created_at TIMESTAMPTZ,
    n_rows BIGINT, n_valid BIGINT, n_rejected BIGINT, summary_json VARCHAR, result_json VARCHAR)"""


def validated_table_name(ingest_result: IngestResult, spec: ReleaseSpec) -> str:
    """Table name (in ``validated`` and ``quarantine``) for an input validated under a spec.

    Named by the input's content hash and the spec's validation hash, so two
    specs with different schemas never overwrite each other's results.
    """
    return f"{ingest_result.table}__v{spec.validation_hash()[:8]}"


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
class _ChunkRows:
    """One chunk's output for :func:`_store`: frames in memory, or files written by :func:`_validate_chunk`."""

    validated: pd.DataFrame | Path
    quarantine: pd.DataFrame | Path
    result: dict | Path
    n_quarantine: int
    first_row: int | None
    last_row: int | None


def _store(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec, outcome: ValidationOutcome,
           chunks: list[_ChunkRows]) -> dict:
    """Write the chunks' rows and results and the outcome in ONE transaction (``raw`` is never touched).

    ``validated`` and ``quarantine`` are replaced (validation is re-derivable from ``raw``):
    created from the first chunk and appended to chunk by chunk in row order, inside the
    transaction, so a crash leaves the previous tables (or none), never half a table. Each
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
        return "read_parquet('" + str(obj).replace("'", "''") + "')"

    def op(con):
        con.execute(
            f'CREATE OR REPLACE TABLE {quarantine_t} (_row BIGINT, record_id VARCHAR, rule VARCHAR, '
            f'"column" VARCHAR, cells VARCHAR)'
        )
        con.execute(_RESULTS_DDL)
        con.execute(_CHUNKS_DDL)
        for i, ch in enumerate(chunks):
            v = source(con, ch.validated, "_validated")
            verb = f"CREATE OR REPLACE TABLE {validated_t} AS" if i == 0 else f"INSERT INTO {validated_t}"
            con.execute(f"{verb} SELECT * FROM {v}")
            if ch.n_quarantine:
                q = source(con, ch.quarantine, "_quarantine")
                con.execute(
                    f'INSERT INTO {quarantine_t} SELECT CAST(_row AS BIGINT), CAST(record_id AS VARCHAR), '
                    f'CAST(rule AS VARCHAR), CAST("column" AS VARCHAR), CAST(cells AS VARCHAR) FROM {q}'
                )
            for name in ("_validated", "_quarantine"):
                try:
                    con.unregister(name)
                except Exception:  # noqa: BLE001 (not registered: a file source)
                    pass
            text = json.dumps(ch.result) if isinstance(ch.result, dict) else Path(ch.result).read_text("utf-8")
            con.execute(
                "INSERT INTO internal.validation_result_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [*key, i, ch.first_row, ch.last_row, text],
            )
        con.execute(
            "INSERT INTO internal.validation_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*key, outcome.n_rows, outcome.n_valid, outcome.n_rejected, json.dumps(outcome.summary()),
             json.dumps(outcome.full_result)],
        )

    wh.run(op, transaction=True)
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


# --------------------------------------------------------------------------- the chunked path


#: Bytes per row and raw column of a chunk (a short text cell as a Python/Arrow string, as
#: :meth:`dpcore.chunks.MemoryBudget.chunk_rows` counts it) and per derived float64 column.
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


def _flag_name(columns) -> str:
    """A column name for the duplicate flag that no input column uses."""
    name = f"{DERIVED_PREFIX}dup"
    while name in set(columns):
        name += "_"
    return name


@dataclass(frozen=True)
class ChunkTask:
    """A picklable unit of work of :func:`validate_table`: one chunk exported to a private Parquet file.

    Attributes
    ----------
    spec : ReleaseSpec
    path : str or None
        The chunk's rows (the raw columns and ``flag``); None: validate ``header`` (an empty table).
    index : int
    flag : str
        The duplicate-flag column (the row's record id is shared with another row of the table).
    out_dir : str
        Private scratch folder for the chunk's outputs.
    header : pandas.DataFrame, optional
        Zero rows with the raw table's columns (only when the table is empty).
    """

    spec: ReleaseSpec
    path: str | None
    index: int
    flag: str
    out_dir: str
    header: pd.DataFrame | None = None

    def read(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The chunk as ``load_raw`` types it (DuckDB's pandas conversion) and its duplicate flags."""
        import duckdb
        import pyarrow.parquet as pq

        if self.path is None:
            return self.header, np.zeros(len(self.header), dtype=bool)
        con = duckdb.connect()
        try:
            df = con.from_arrow(pq.read_table(self.path)).df()
        finally:
            con.close()
        return df.drop(columns=[self.flag]), df[self.flag].to_numpy(dtype=bool)


def _validate_chunk(task: ChunkTask) -> ChunkVerdict:
    """Validate one chunk and write its rows and complete result to the scratch folder (module level: any mapper).

    Returns the small verdict; the rows (validated, quarantine) and great-expectations'
    complete result go to Parquet/JSON files next to the chunk (private, removed with the folder).
    """
    raw, dup = task.read()
    verdict, validated, quarantine, result = _check(raw, dup, task.spec)
    out = Path(task.out_dir)
    files = {
        "validated": out / f"validated-{task.index:08d}.parquet",
        "quarantine": out / f"quarantine-{task.index:08d}.parquet",
        "result": out / f"result-{task.index:08d}.json",
    }
    validated.to_parquet(files["validated"], index=False)
    if len(quarantine):
        quarantine.to_parquet(files["quarantine"], index=False)
    files["result"].write_text(json.dumps(result), encoding="utf-8")
    for path in files.values():
        if path.exists():
            os.chmod(path, 0o600)
    verdict.files = {key: str(path) for key, path in files.items()}
    return verdict


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
        paths: list[str] = []
        if lo is None:
            return paths
        for k, start in enumerate(range(int(lo), int(hi) + 1, rows)):
            stop = start + rows
            path = folder / f"raw-{k:08d}.parquet"
            target = str(path).replace("'", "''")
            con.execute(
                f"COPY (SELECT r.*, r.{row} IN (SELECT {row} FROM _dup_rows WHERE {row} >= {start} AND {row} < {stop}) "
                f"AS {_q(flag)} FROM {source} r WHERE r.{row} >= {start} AND r.{row} < {stop} ORDER BY r.{row}) "
                f"TO '{target}' (FORMAT parquet)"
            )
            os.chmod(path, 0o600)
            paths.append(str(path))
        return paths

    return wh.run(op), flag


def validate_table(
    wh: Warehouse,
    ingest_result: IngestResult,
    spec: ReleaseSpec,
    *,
    rows: int | None = None,
    mapper: Callable = serial_map,
) -> ValidationOutcome:
    """Validate a raw table chunk by chunk and store the result; memory does not grow with the rows.

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
        :func:`dpcore.chunks.serial_map` (a Dask mapper may run the chunks on workers of this machine).

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
