"""The validation rules a spec makes, without great-expectations (the suite's contents and its public face).

:func:`suite_entries` lists, from the spec alone, every expectation the suite holds: the
great-expectations class name, its arguments, and the rule and column it checks.
:func:`dpcore.validation.suite.build_suite` turns the entries into the suite;
:func:`public_rule_set` is the published rule set. Neither needs great-expectations,
which takes seconds to import: an operator query whose input was validated before
publishes the rule set without loading it (issue 32, section 2).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .rules import _RULE_CHECK, NUMBER_PATTERN, _num_col, _whole_col

__all__ = ["SuiteEntry", "public_rule_set", "suite_entries"]


@dataclass(frozen=True)
class SuiteEntry:
    """One expectation of the suite: ``great_expectations.expectations.<expectation>(**kwargs)``."""

    expectation: str
    kwargs: dict[str, Any] = field(compare=False)
    rule: str
    column: str | None


def suite_entries(
    spec: ReleaseSpec, present_columns: list[str] | None = None, duplicated_ids: list[str] | None = None
) -> list[SuiteEntry]:
    """Every expectation of the spec's suite, in order (see :func:`dpcore.validation.suite.build_suite`).

    Parameters
    ----------
    spec : ReleaseSpec
    present_columns : list of str, optional
        Columns of the frame the suite will run on; row-level rules of missing columns are left out.
        None = every declared column.
    duplicated_ids : list of str, optional
        None: the ``unique`` rule as ``ExpectColumnValuesToBeUnique``; a list: as
        ``ExpectColumnValuesToNotBeInSet`` with these (private) id texts.

    Returns
    -------
    list of SuiteEntry
    """
    rid = spec.dataset.record_id
    schema = spec.public_schema
    declared = [rid, *schema.columns]
    present = set(declared) if present_columns is None else set(present_columns)
    entries: list[SuiteEntry] = []

    def add(expectation: str, rule: str, on: str | None, /, **kwargs: Any) -> None:
        entries.append(SuiteEntry(expectation, kwargs, rule, on))

    # table level
    for col in declared:
        add("ExpectColumnToExist", "column_exists", col, column=col)
    add("ExpectTableRowCountToBeBetween", "row_count", None, min_value=1, max_value=None)
    if spec.dataset.extra_columns == "error":
        allowed = [ROW, *declared]
        allowed += [_num_col(c) for c in schema.numeric if c in present]
        allowed += [_whole_col(c) for c, a in schema.numeric.items() if a.integer and c in present]
        add("ExpectTableColumnsToMatchSet", "extra_columns", None, column_set=allowed, exact_match=True)

    # record id
    if rid in present:
        add("ExpectColumnValuesToNotBeNull", "not_null", rid, column=rid)
        if duplicated_ids is None:
            add("ExpectColumnValuesToBeUnique", "unique", rid, column=rid)
        else:
            add("ExpectColumnValuesToNotBeInSet", "unique", rid, column=rid, value_set=list(duplicated_ids))
        add("ExpectColumnValuesToMatchRegex", "id_pattern", rid, column=rid,
            regex=f"(?:{spec.dataset.record_id_pattern})\\Z")

    for col, attr in schema.categorical.items():
        if col not in present:
            continue
        if not attr.nullable:
            add("ExpectColumnValuesToNotBeNull", "not_null", col, column=col)
        add("ExpectColumnValuesToBeInSet", "in_domain", col, column=col, value_set=attr.domain_strings)

    big = sys.float_info.max
    for col, attr in schema.numeric.items():
        if col not in present:
            continue
        num = _num_col(col)
        if not attr.nullable:
            add("ExpectColumnValuesToNotBeNull", "not_null", col, column=col)
        add("ExpectColumnValuesToMatchRegex", "number", col, column=col, regex=NUMBER_PATTERN)
        add("ExpectColumnValuesToBeBetween", "finite", col, column=num, min_value=-big, max_value=big)
        if attr.integer:
            add("ExpectColumnPairValuesToBeEqual", "integer", col, column_A=num, column_B=_whole_col(col),
                ignore_row_if="either_value_is_missing")
        add("ExpectColumnValuesToBeBetween", "in_bounds", col, column=num, min_value=attr.min, max_value=attr.max)
    return entries


def public_rule_set(spec: ReleaseSpec) -> list[dict[str, str]]:
    """The rules the spec makes validation check, one row per (rule, column): public, from the spec only.

    This is what validation may show publicly (DESIGN.md rule 8): the rule set,
    never which rules were broken or how often.
    """
    rows = [
        {"rule": e.rule, "column": e.column or "", "checks": _RULE_CHECK[e.rule]}
        for e in suite_entries(spec)
    ]
    return list({(r["rule"], r["column"]): r for r in rows}.values())
