"""The great-expectations suite of a spec, and its run on a frame.

The spec's public schema is turned into a great-expectations 1.x
:class:`~great_expectations.ExpectationSuite` (:func:`build_suite`) and run
through ``Batch.validate`` of an ephemeral, file-less context with
``result_format="COMPLETE"`` and ``_row`` (the 1-based input row number) as the
unexpected-index column (:func:`_run_suite`). The expectations themselves come from
:func:`dpcore.validation.rule_set.suite_entries` (no great-expectations import), whose
:func:`~dpcore.validation.rule_set.public_rule_set` is the suite's public face.
"""
from __future__ import annotations

import os
import uuid

import pandas as pd

from dpcore.runtime.deferred_imports import defer
from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .rule_set import public_rule_set, suite_entries  # noqa: F401  (public_rule_set: imported from here before)

# No usage statistics from great-expectations (the pipeline runs offline).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
# great-expectations imports scipy.stats and altair at its import and uses them only in expectations no suite
# here builds (KS tests, KL divergence): loaded on their first use instead, 77 MiB and 0.7 s less
# (dpcore.runtime.deferred_imports; issue 29, goals 4-5)
defer("scipy.stats", "altair")

import great_expectations as gx  # noqa: E402  (after the analytics switch)
from great_expectations.data_context.types.base import (  # noqa: E402
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)
from great_expectations.execution_engine import pandas_execution_engine as _pandas_engine  # noqa: E402

from .config_memo import memoised_configurations  # noqa: E402  (imports great-expectations)

# great-expectations fingerprints every pandas batch smaller than this many bytes (an md5 over
# ``pandas.util.hash_pandas_object`` of the whole frame, twice per validation) only to put it in the
# batch's markers, which no stored result carries (``describe_dict`` leaves them out). For the id
# chunks of a 3.4-million-row table that was seconds of hashing raw ids (issue 29, goal 2); 0 turns it
# off, the way great-expectations itself skips frames of 1 GB or more. The verdicts do not use it.
_pandas_engine.HASH_THRESHOLD = 0


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


class SuiteRun:
    """great-expectations' result of one suite run on one frame, shaped as a one-validation CheckpointResult.

    ``run_results`` maps one key to the :class:`~great_expectations.core.ExpectationSuiteValidationResult`;
    :meth:`describe_dict` is ``CheckpointResult.describe_dict()``'s form (the stored result keeps its shape).
    """

    def __init__(self, name: str, result) -> None:
        self.run_results = {name: result}

    def describe_dict(self) -> dict:
        results = [r.describe_dict() for r in self.run_results.values()]
        ok = sum(1 for r in self.run_results.values() if r.success)
        return {
            "success": ok == len(results),
            "statistics": {"evaluated_validations": len(results), "success_percent": ok / len(results) * 100,
                           "successful_validations": ok, "unsuccessful_validations": len(results) - ok},
            "validation_results": results,
        }


def _run_suite(frame: pd.DataFrame, suite: gx.ExpectationSuite, name: str) -> SuiteRun:
    """Run ``suite`` on ``frame`` (``result_format="COMPLETE"``, ``_row`` as the unexpected-index column).

    Through ``Batch.validate`` of an ephemeral, file-less context: no Checkpoint, whose in-memory result
    store serialised every result once more (about 1.4 s of 2.8 s for the demo's frame of distinct values,
    issue 29); the result is the same validation result.
    """
    # In-memory stores, no data-docs site (nothing on disk), no progress bars, no analytics.
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        progress_bars=ProgressBarsConfig(globally=False),
        analytics_enabled=False,
    )
    ctx = gx.get_context(project_config=config, mode="ephemeral")
    tag = uuid.uuid4().hex[:8]
    batch = (
        ctx.data_sources.add_pandas(f"{name}_{tag}")
        .add_dataframe_asset(f"{name}_rows")
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": frame})
    )
    with memoised_configurations():  # each expectation's configuration built once (config_memo, issue 29)
        result = batch.validate(suite, result_format={"result_format": "COMPLETE",
                                                      "unexpected_index_column_names": [ROW]})
    return SuiteRun(f"{name}_{tag}", result)
