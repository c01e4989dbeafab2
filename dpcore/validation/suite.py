"""The great-expectations suite of a spec, and the checkpoint that runs it on a frame.

The spec's public schema is turned into a great-expectations 1.x
:class:`~great_expectations.ExpectationSuite` (:func:`build_suite`) and run
through an ephemeral, file-less Checkpoint with ``result_format="COMPLETE"``
and ``_row`` (the 1-based input row number) as the unexpected-index column
(:func:`_run_checkpoint`). The expectations themselves come from
:func:`dpcore.validation.rule_set.suite_entries` (no great-expectations import), whose
:func:`~dpcore.validation.rule_set.public_rule_set` is the suite's public face.
"""
from __future__ import annotations

import os
import uuid

import pandas as pd

from ..ingest import ROW
from ..spec import ReleaseSpec
from .rule_set import public_rule_set, suite_entries  # noqa: F401  (public_rule_set: imported from here before)

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
    expectations = []
    for entry in suite_entries(spec, present_columns, duplicated_ids):
        exp = getattr(E, entry.expectation)(**entry.kwargs)
        exp.meta = {"rule": entry.rule, "column": entry.column}
        expectations.append(exp)
    # Built in one go: adding expectations one by one needs an active data context.
    return gx.ExpectationSuite(name=f"{spec.dataset.name}__validation", expectations=expectations)


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
