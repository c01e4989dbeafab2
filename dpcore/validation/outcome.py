"""What validation returns and raises: the outcome, its rule summaries, the stop and the public handle.

:meth:`ValidationOutcome.summary` and :meth:`ValidationOutcome.summary_text`
(data owner only) carry rule names, column names, counts and input row
numbers; :class:`ValidationFailed` carries rule and column names only;
:class:`ValidationDone`, the public handle of a stored validation, carries
no count and no verdict (DESIGN.md rules 6 and 8).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .rules import _RULE_TEXT
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


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
        The first few data row numbers (``_row``: 1 is the first row after the header, blank lines not
        counted) breaking it; never values.
    bounds : tuple of float, optional
        ``in_bounds`` only: the column's public bounds ``(min, max)`` from the spec (public values).
    """

    rule: str
    column: str | None
    count: int
    example_rows: list[int] = field(default_factory=list)
    bounds: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        """Plain-JSON form (used by :meth:`ValidationOutcome.summary`); ``bounds`` only when set."""
        out = {"rule": self.rule, "column": self.column, "count": int(self.count),
               "example_rows": [int(r) for r in self.example_rows]}
        if self.bounds is not None:
            out["bounds"] = [float(self.bounds[0]), float(self.bounds[1])]
        return out


#: How the owner's texts name row numbers (``_row``): not lines of the file.
DATA_ROWS = "data rows: 1 = the first row after the header, blank lines not counted"

#: What a data row number counts, per source kind (``_row``: 1-based, in the order the source gave the rows).
ROW_NUMBERS = {
    "csv": "1 = the first row after the header, blank lines not counted (not line numbers of the file)",
    "demo": "1 = the first row after the header of the demo's CSV, blank lines not counted",
    "postgres": "1 = the first row the server sent for the source's table or query (in the query's ORDER BY, "
                "else the server's order)",
    "duckdb": "1 = the first row DuckDB returned for the source's table or query, in that order",
    "parquet": "1 = the first row of the first Parquet file (files in sorted path order, rows file after file)",
}


def row_numbers_text(kind: str | None) -> str:
    """How ``dpr validation show`` explains a data row number for an input of ``kind`` (None: not known)."""
    return "data rows: " + ROW_NUMBERS.get(kind or "", "1 = the first data row the source gave, in its order")


def plural(n: int, word: str) -> str:
    """``1 row``, ``2 rows`` (``word`` takes an ``s``)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def rule_text(rule: str, bounds: list | tuple | None = None) -> str:
    """What a broken rule means, with the column's public bounds for ``in_bounds`` when known.

    Parameters
    ----------
    rule : str
    bounds : pair of float, optional
        The public ``[min, max]`` of the column (spec values, never data).
    """
    text = _RULE_TEXT.get(rule, rule)
    if rule == "in_bounds" and bounds is not None:
        text = text.replace("[min, max]", f"[{_bound(bounds[0])}, {_bound(bounds[1])}]")
    return text


def summary_lines(s: dict, rows_text: str = DATA_ROWS) -> list[str]:
    """The owner's text of a stored summary (:meth:`ValidationOutcome.summary`): rules, columns, counts, rows.

    Row numbers are data rows (:data:`DATA_ROWS`); no cell value is in ``s`` or here.
    """
    lines = [
        f"validation: {plural(s['n_rows'], 'row')}, {s['n_valid']} valid, {s['n_rejected']} rejected "
        f"({100 * s['rejected_fraction']:.2f}%)"
    ]
    if s["table_failures"]:
        lines.append("table rules failed:")
        for f in s["table_failures"]:
            where = f" column {f['column']!r}" if f["column"] is not None else ""
            lines.append(f"  - {f['rule']}{where}: {rule_text(f['rule'])}")
    if s["row_failures"]:
        lines.append(f"row rules failed (rule, column: number of rows breaking it; example {rows_text}):")
        for f in s["row_failures"]:
            ex = ", ".join(str(r) for r in f["example_rows"])
            more = ", ..." if f["count"] > len(f["example_rows"]) and ex else ""
            rows = f"; data {'row' if len(f['example_rows']) == 1 and not more else 'rows'} {ex}{more}" if ex else ""
            lines.append(
                f"  - {f['rule']}, column {f['column']!r}: {plural(f['count'], 'row')}{rows} "
                f"({rule_text(f['rule'], f.get('bounds'))})"
            )
    if s["ignored_columns"]:
        lines.append("ignored extra columns (kept in raw only): " + ", ".join(repr(c) for c in s["ignored_columns"]))
    if not s["table_failures"] and not s["row_failures"]:
        lines.append("all rules passed")
    return lines


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

    def summary_text(self, source_kind: str | None = "csv") -> str:
        """Readable multi-line rendering of :meth:`summary` (:func:`summary_lines`; no cell values).

        Row numbers are data rows, explained for the input's ``source_kind`` (:func:`row_numbers_text`: for a
        CSV 1 = the first row after the header), each ``in_bounds`` rule shows the column's public bounds,
        counts take their singular or plural.

        Returns
        -------
        str
        """
        return "\n".join(summary_lines(self.summary(), row_numbers_text(source_kind)))


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


@dataclass(frozen=True)
class ValidationDone:
    """Opaque, public handle of a stored validation: no counts, no verdicts (DESIGN.md rules 6, 8).

    Whether any row broke a rule, and how many, are private facts; the noisy
    ``record_counts`` step releases them. The exact summary stays in
    ``internal.validation_results`` and the bundle's owner-only folder. ``table`` (the
    validated/quarantine table name, derived from the raw table's) is private: left
    out of ``repr``.
    """

    dataset: str
    table: str = field(repr=False)  # private: the same for every ingest of the same bytes (dpcore.ingest.raw)
