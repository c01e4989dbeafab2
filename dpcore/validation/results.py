"""The data owner's reading of stored validation results (``dpr validation show``; issue 32, section 5).

Every validation a run stores writes one row to ``internal.validation_results``
(the combined summary: rules, columns, counts, example row numbers) and its
rejected rows to ``quarantine."<table>"`` (:mod:`.store`). This module reads
them back for the owner, without SQL: per dataset the latest result, and for
each failed rule every data row that broke it.

What it returns is the owner's (exact counts and row numbers of private data,
DESIGN.md rule 6): for the owner's terminal only, never logged, stored
elsewhere or published. It carries rule names, column names, counts, data row
numbers, the input's path, the public bounds of ``in_bounds`` rules and, for
rows the CSV reader could not parse, their file line and the reason; no
cell value and no record id (the quarantine table's ``cells`` and
``record_id`` are not read).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from dpcore.storage.warehouse import Warehouse
from .outcome import ROW_NUMBERS, row_numbers_text  # noqa: F401 - the owner's texts of row numbers, per kind
from .store import table_name


@dataclass(frozen=True)
class StoredValidation:
    """The latest stored validation of one dataset.

    Attributes
    ----------
    dataset : str
    created_at : datetime
        When it was stored (UTC).
    spec_hash : str
        The validation hash of the spec it ran under (:meth:`~dpcore.release.spec.ReleaseSpec.validation_hash`).
    source_path : str or None
        The input file it read (the owner's path), when the catalogue has it.
    summary : dict
        :meth:`~dpcore.validation.ValidationOutcome.summary` as stored.
    source_kind : str or None
        The input's kind (``csv``, ``parquet``, ``duckdb``, ``postgres``, ``demo``), when the catalogue has it:
        what a row number counts (:func:`row_numbers_text`).
    failing_rows : dict
        ``(rule, column) -> every data row number breaking it``, from the quarantine table; empty when that
        table is gone (then only the summary's example rows are known).
    """

    dataset: str
    created_at: datetime
    spec_hash: str = field(repr=False)
    source_path: str | None
    summary: dict
    failing_rows: dict[tuple[str, str], list[int]] = field(default_factory=dict, repr=False)
    source_kind: str | None = None
    #: The rows the CSV reader could not parse (issue 46.3): ``(data row, file line, reason)``, by line; their
    #: cells are all empty in ``raw`` and they are quarantined (``not_null`` of the record id). The line is
    #: counted as the reader counts it: 1 is the file's first line, a quoted cell's line breaks do not count.
    unreadable: list[tuple[int, int, str]] = field(default_factory=list, repr=False)

    def rows_of(self, rule: str, column: str | None) -> list[int]:
        """Every data row breaking ``rule`` on ``column`` (the summary's examples when the rows are gone)."""
        if (rule, column) in self.failing_rows:
            return self.failing_rows[(rule, column)]
        for f in self.summary.get("row_failures", []):
            if f["rule"] == rule and f["column"] == column:
                return list(f["example_rows"])
        return []

    def complete_rows(self) -> bool:
        """True when :meth:`rows_of` gives every failing row (the quarantine table is there)."""
        return bool(self.failing_rows) or not self.summary.get("row_failures")


def latest_validations(wh: Warehouse, dataset: str | None = None) -> list[StoredValidation]:
    """The latest stored validation of each dataset (of ``dataset`` only, when given), by dataset name.

    Parameters
    ----------
    wh : Warehouse
    dataset : str, optional

    Returns
    -------
    list of StoredValidation
        Empty when nothing was validated (or stored) yet.
    """
    if not wh.table_exists("internal", "validation_results"):
        return []
    where, params = ("WHERE dataset = ?", [dataset]) if dataset is not None else ("", [])
    rows = wh.query(
        "SELECT dataset, content_hash, spec_hash, created_at, summary_json FROM internal.validation_results "
        f"{where} QUALIFY row_number() OVER (PARTITION BY dataset ORDER BY created_at DESC) = 1 ORDER BY dataset",
        params,
    )
    catalogued = wh.table_exists("raw", "ingests")
    out = []
    for name, content_hash, spec_hash, created_at, summary_json in rows:
        table = source = kind = None
        if catalogued:
            found = wh.query("SELECT table_name, source_path, source_kind FROM raw.ingests WHERE content_hash = ? "
                             "AND dataset = ?", [content_hash, name])
            if found:
                table, source, kind = found[0]
        failing: dict[tuple[str, str], list[int]] = {}
        quarantine = table_name(table, spec_hash) if table else None
        if quarantine and wh.table_exists("quarantine", quarantine):
            for rule, column, numbers in wh.query(
                f'SELECT rule, "column", list(DISTINCT _row ORDER BY _row) FROM quarantine."{quarantine}" '
                'GROUP BY rule, "column" ORDER BY rule, "column"'
            ):
                failing[(rule, column)] = [int(n) for n in numbers]
        unreadable: list[tuple[int, int, str]] = []
        if table and wh.table_exists("raw", f"{table}__unreadable"):
            unreadable = [(int(r), int(ln), str(why)) for r, ln, why in wh.query(
                f'SELECT _row, line, reason FROM raw."{table}__unreadable" ORDER BY line')]
        out.append(StoredValidation(name, created_at, spec_hash, source, json.loads(summary_json), failing,
                                    source_kind=kind, unreadable=unreadable))
    return out


def hash_matches(stored: StoredValidation, spec_path, wh: Warehouse) -> bool:
    """Whether ``stored`` was made under the current rules of the spec at ``spec_path``.

    A series spec read without a period is filled for its first period, and its validation hash covers the
    period's own input (the source path, or the period bound to a PostgreSQL query): compared with the
    result of another period it would always differ although no rule changed (issue 48). So for a series
    spec the hash is compared with the spec filled for each period the series has released (its release ids
    in the ledger) and for the period whose input path is the stored result's; the rules are the same when
    any of them matches.
    """
    import re

    from dpcore.release.periods import PeriodError, parse_label
    from dpcore.release.series import series_release_pattern
    from dpcore.release.spec import SpecError, load_spec

    spec = load_spec(spec_path)
    if stored.spec_hash == spec.validation_hash():
        return True
    pattern = series_release_pattern(spec)
    if pattern is None:
        return False
    labels: set[str] = set()
    if wh.table_exists("ledger", "charges"):
        for (rid,) in wh.query("SELECT DISTINCT release_id FROM ledger.charges WHERE dataset = ?", [spec.dataset.name]):
            if re.fullmatch(pattern, rid):
                labels |= set(re.findall(r"[0-9]{4}(?:-W[0-9]{2}|-Q[1-4]|-[0-9]{2}-[0-9]{2}|-[0-9]{2})?", rid))
    path = getattr(spec.dataset.source, "path", None)
    if stored.source_path and isinstance(path, str) and spec.period and spec.period in path:
        rx = re.escape(path).replace(re.escape(spec.period), "(.+)")
        m = re.fullmatch(rx, stored.source_path)
        if m:
            labels.add(m.group(1))
    for label in sorted(labels):
        try:
            if parse_label(label).kind != spec.series.period:
                continue
            if load_spec(spec_path, period=label).validation_hash() == stored.spec_hash:
                return True
        except (PeriodError, SpecError):
            continue
    return False


def row_ranges(rows: list[int], limit: int = 0) -> str:
    """Sorted row numbers as ranges (``3, 7-9, 12``); at most ``limit`` numbers shown (0: all).

    Returns
    -------
    str
        With ``, ... (N more)`` when ``limit`` cut the list.
    """
    shown = rows if limit <= 0 else rows[:limit]
    parts: list[str] = []
    i = 0
    while i < len(shown):
        j = i
        while j + 1 < len(shown) and shown[j + 1] == shown[j] + 1:
            j += 1
        parts.append(str(shown[i]) if j == i else f"{shown[i]}-{shown[j]}")
        i = j + 1
    text = ", ".join(parts)
    if len(rows) > len(shown):
        text += f", ... ({len(rows) - len(shown)} more)"
    return text
