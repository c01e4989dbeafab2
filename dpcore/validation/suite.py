"""The great-expectations suite of a spec, and the checkpoint that runs it on a frame.

The spec's public schema is turned into a great-expectations 1.x
:class:`~great_expectations.ExpectationSuite` (:func:`build_suite`) and run
through an ephemeral, file-less Checkpoint with ``result_format="COMPLETE"``
and ``_row`` (the 1-based input row number) as the unexpected-index column
(:func:`_run_checkpoint`). :func:`public_rule_set` is the suite's public face:
the rules checked, one row per (rule, column).
"""
from __future__ import annotations

import os
import sys
import uuid

import pandas as pd

from ..ingest import ROW
from ..spec import ReleaseSpec
from .rules import _RULE_CHECK, NUMBER_PATTERN, _num_col, _whole_col

# No usage statistics from great-expectations (the pipeline runs offline).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import great_expectations as gx  # noqa: E402  (after the analytics switch)
from great_expectations.data_context.types.base import (  # noqa: E402
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)


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
