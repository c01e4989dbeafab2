"""Validate raw input against the release spec with great-expectations.

The spec's public schema is turned into a great-expectations 1.x
:class:`~great_expectations.ExpectationSuite` (:func:`build_suite`) and run
through an ephemeral, file-less Checkpoint with ``result_format="COMPLETE"``
and ``_row`` (the 1-based input row number) as the unexpected-index column.

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
    Record ids are unique. Every row sharing an id is rejected: keeping one of
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
great-expectations' per-row results contain the raw cell values. They are kept in :attr:`ValidationOutcome.full_result`, which
is written only to ``internal.validation_results``; quarantined rows (with
their cells) go only to the ``quarantine`` schema. :meth:`ValidationOutcome.summary`,
:meth:`ValidationOutcome.summary_text` (data owner only) carry rule names,
column names, counts and input row numbers; :class:`ValidationFailed` carries
rule and column names only.
"""
from __future__ import annotations

import json
import math
import os
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from .ingest import ROW, IngestResult
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
    """Everything :func:`validate` found.

    Attributes
    ----------
    validated : pandas.DataFrame
        Rows passing every row-level rule, typed: ``_row`` int64, record id
        str, categoricals int64 (``Int64`` if nullable) when every domain value
        is an int else str, numerics float64.
    quarantine : pandas.DataFrame
        One row per (rejected input row, broken rule, column): ``_row``,
        ``record_id`` (raw text or None), ``rule``, ``column``, ``cells`` (JSON
        text of the row's raw cells). Contains raw values: warehouse only.
    row_failures, table_failures : list of RuleSummary
        Failed rules with counts and example row numbers.
    ignored_columns : list of str
        Undeclared input columns kept in ``raw`` only (``extra_columns: ignore``).
    n_rows, n_valid, n_rejected : int
        ``n_valid + n_rejected == n_rows``.
    full_result : dict
        The great-expectations checkpoint result as a JSON-able dict. Contains
        raw values: it goes to ``internal.validation_results`` only.
    examples_per_rule : int
        How many example row numbers the summary shows per rule.
    """

    validated: pd.DataFrame
    quarantine: pd.DataFrame
    row_failures: list[RuleSummary]
    table_failures: list[RuleSummary]
    ignored_columns: list[str]
    n_rows: int
    n_valid: int
    n_rejected: int
    full_result: dict = field(repr=False)
    examples_per_rule: int = 5

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


def build_suite(spec: ReleaseSpec, present_columns: list[str] | None = None) -> gx.ExpectationSuite:
    """Generate the expectation suite for a spec.

    Parameters
    ----------
    spec : ReleaseSpec
    present_columns : list of str, optional
        Columns of the frame the suite will run on. Row-level expectations on
        columns missing from it are left out (the ``column_exists`` expectation
        reports them). None = assume every declared column is present.

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
        add(E.ExpectColumnValuesToBeUnique(column=rid), "unique", rid)
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


def validate(raw: pd.DataFrame, spec: ReleaseSpec) -> ValidationOutcome:
    """Check a raw table against the spec; split it into validated and quarantined rows.

    Parameters
    ----------
    raw : pandas.DataFrame
        The table as ingested (:func:`dpcore.ingest.load_raw`), with the 1-based
        ``_row`` input row number. CSV cells are text; Parquet cells may be typed.
    spec : ReleaseSpec

    Returns
    -------
    ValidationOutcome
        Nothing is dropped silently: ``n_valid`` plus the number of distinct
        quarantined rows equals ``n_rows``. Table-level failures do not raise
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
    raw = raw.reset_index(drop=True)
    rows = pd.to_numeric(raw[ROW], errors="raise").astype("int64")
    if rows.duplicated().any():
        raise ValueError(f"raw table's {ROW!r} column is not unique")
    raw[ROW] = rows
    n_rows = len(raw)
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    present = [c for c in declared if c in raw.columns]
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

    suite = build_suite(spec, present_columns=list(work.columns))
    result = _run_checkpoint(work, suite, name=spec.dataset.name.replace(".", "_"))
    full_result = _json_clean(result.describe_dict())

    # Collect failures from the expectation results (row numbers only).
    table_failures: list[RuleSummary] = []
    row_hits: list[tuple[str, str, np.ndarray]] = []
    for vr in result.run_results.values():
        for r in vr.results:
            meta = r.expectation_config.meta or {}
            rule, column = meta.get("rule"), meta.get("column")
            exc = r.exception_info or {}
            raised = exc.get("raised_exception") if isinstance(exc, dict) else False
            if raised:
                raise RuntimeError(
                    f"great-expectations could not evaluate rule {rule!r} on column {column!r}; "
                    "see the warehouse internal.validation_results for details"
                )
            if r.success:
                continue
            if rule in ("column_exists", "row_count"):
                table_failures.append(RuleSummary(rule, column, 1, []))
            elif rule == "extra_columns":
                unexpected = (r.result.get("details", {}).get("mismatched", {}) or {}).get("unexpected", [])
                for c in unexpected:
                    if not str(c).startswith(DERIVED_PREFIX):
                        table_failures.append(RuleSummary("extra_columns", str(c), 1, []))
            else:
                idx = r.result.get("unexpected_index_list") or []
                hit = np.fromiter((d[ROW] for d in idx), dtype="int64", count=len(idx))
                row_hits.append((rule, column, np.unique(hit)))
    for c in reserved:
        table_failures.append(RuleSummary("reserved_column", str(c), 1, []))

    k = spec.steps.validation.examples_per_rule
    row_failures = [RuleSummary(rule, col, int(len(h)), [int(x) for x in h[:k]]) for rule, col, h in row_hits if len(h)]

    # Quarantine: one row per (row, rule, column); cells JSON built for rejected rows only.
    if row_hits:
        q = pd.concat(
            [pd.DataFrame({ROW: h, "rule": rule, "column": col}) for rule, col, h in row_hits if len(h)]
            or [pd.DataFrame({ROW: np.array([], dtype="int64"), "rule": [], "column": []})],
            ignore_index=True,
        )
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

    n_valid = int(keep.sum())
    return ValidationOutcome(
        validated=validated,
        quarantine=quarantine,
        row_failures=row_failures,
        table_failures=table_failures,
        ignored_columns=[str(c) for c in extras] if spec.dataset.extra_columns == "ignore" else [],
        n_rows=n_rows,
        n_valid=n_valid,
        n_rejected=n_rows - n_valid,
        full_result=full_result,
        examples_per_rule=k,
    )


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


def store_outcome(wh: Warehouse, ingest_result: IngestResult, spec: ReleaseSpec, outcome: ValidationOutcome) -> dict:
    """Write the outcome to the warehouse (one transaction; ``raw`` is never touched).

    Writes ``validated."<dataset>__<hash16>"`` and ``quarantine."<dataset>__<hash16>"``
    (replaced: validation is re-derivable from ``raw``) and appends a row to
    ``internal.validation_results`` with the full great-expectations result.

    Parameters
    ----------
    wh : Warehouse
    ingest_result : IngestResult
    spec : ReleaseSpec
    outcome : ValidationOutcome

    Returns
    -------
    dict
        ``{"validated": ..., "quarantine": ..., "results": ...}`` qualified table names.
    """
    table = validated_table_name(ingest_result, spec)
    validated_t = f'validated."{table}"'
    quarantine_t = f'quarantine."{table}"'
    q = outcome.quarantine
    created = datetime.now(timezone.utc)

    def op(con):
        con.register("_validated", outcome.validated)
        con.execute(f"CREATE OR REPLACE TABLE {validated_t} AS SELECT * FROM _validated")
        con.unregister("_validated")
        con.execute(
            f'CREATE OR REPLACE TABLE {quarantine_t} (_row BIGINT, record_id VARCHAR, rule VARCHAR, '
            f'"column" VARCHAR, cells VARCHAR)'
        )
        if len(q):
            con.register("_quarantine", q)
            con.execute(
                f'INSERT INTO {quarantine_t} SELECT CAST(_row AS BIGINT), CAST(record_id AS VARCHAR), '
                f'CAST(rule AS VARCHAR), CAST("column" AS VARCHAR), CAST(cells AS VARCHAR) FROM _quarantine'
            )
            con.unregister("_quarantine")
        con.execute(_RESULTS_DDL)
        con.execute(
            "INSERT INTO internal.validation_results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                ingest_result.content_hash,
                spec.dataset.name,
                spec.validation_hash(),
                created,
                outcome.n_rows,
                outcome.n_valid,
                outcome.n_rejected,
                json.dumps(outcome.summary()),
                json.dumps(outcome.full_result),
            ],
        )

    wh.run(op, transaction=True)
    return {"validated": validated_t, "quarantine": quarantine_t, "results": "internal.validation_results"}
