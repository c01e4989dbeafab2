"""Validate raw input against the release spec with great-expectations.

The spec's public schema becomes a great-expectations suite, run on pandas
chunks of the raw table; rows breaking a row-level rule go to ``quarantine``,
the others to ``validated``, and only header-level rules and an empty input
stop a run.

* :mod:`.rules` -- the rule names (table and row level) and what each checks;
  the validator's derived columns.
* :mod:`.suite` -- :func:`build_suite` and :func:`public_rule_set` from the
  spec; :func:`_run_suite`, a suite run on a frame (ephemeral, file-less).
* :mod:`.cells` -- cells as text and as parsed numbers, the validated rows'
  types, raw cells as JSON.
* :mod:`.duplicates` -- the ``unique`` rule, decided over the whole table in
  DuckDB.
* :mod:`.check` -- one chunk's validation and its :class:`ChunkVerdict`.
* :mod:`.combine` -- the outcome and great-expectations' result over the whole
  table from the chunks'.
* :mod:`.in_memory` -- :func:`validate`, the one-chunk case for a frame in
  memory (tests, ``dpr spec check --data``).
* :mod:`.chunked` -- :func:`validate_table`, a warehouse table streamed chunk
  by chunk (issue 21), with :func:`validation_chunk_rows`.
* :mod:`.by_values` -- what :func:`validate_table` does where it applies (issue 29): the
  suite run once per distinct attribute value and on the id column alone, the verdicts joined
  back to the rows in DuckDB; the same stored result as chunk by chunk. Its SQL steps (issue 49):
  :mod:`.distinct_values` (the distinct values, their frames, the id chunks) and
  :mod:`.validated_rows` (the ``validated`` table, typed as pandas types it).
* :mod:`.id_forms` -- record ids by their form under the id pattern (issue 29): the id rules decided once
  per form.
* :mod:`.quarantine_rows` -- the quarantine rows of validation by values, one chunk at a time.
* :mod:`.worker` -- :class:`ChunkTask` and the chunk work a mapper runs on
  other processes.
* :mod:`.outcome` -- :class:`ValidationOutcome`, :class:`RuleSummary`,
  :class:`ValidationFailed`, :class:`ValidationDone`.
* :mod:`.enforce` -- :func:`enforce`, the stop on table-level failures.
* :mod:`.store` -- the warehouse tables: :func:`store_outcome`, the
  one-transaction writer, the stored summaries.
* :mod:`.results` -- the data owner's reading of the stored results
  (:func:`latest_validations`, ``dpr validation show``).

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
column names, counts, data row numbers (1 = the first row after the header)
and the public bounds of ``in_bounds`` rules; :class:`ValidationFailed` carries
rule and column names only. :mod:`.results` reads the stored results back for
the data owner (``dpr validation show``).

Who may import it: :mod:`dpcore.steps`, :mod:`dpcore.run` and ``tasks/``/``flows/``/``dpr/``. It imports
:mod:`dpcore.ingest`, :mod:`dpcore.release`, :mod:`dpcore.storage` and :mod:`dpcore.runtime` only (nothing
of its layer's siblings :mod:`dpcore.publish`, :mod:`dpcore.detect`, :mod:`dpcore.mechanisms`).
"""
from dpcore.runtime.lazy_exports import lazy_getattr

#: Each public name -> the submodule that defines it. Loaded on first use (PEP 562): importing
#: :mod:`dpcore.validation` (e.g. for :func:`validated_table_name`) does not import great-expectations,
#: which only the validating modules (:mod:`.suite` and those that run it) need; ``dpr spec check`` and
#: ``dpr plan`` stay fast.
_EXPORTS: dict[str, str] = {
    "_as_text": "cells",
    "_cells_json": "cells",
    "_json_clean": "cells",
    "_parse_numbers": "cells",
    "_typed": "cells",
    "ChunkVerdict": "check",
    "BYTES_PER_DERIVED_CELL": "chunked",
    "BYTES_PER_TEXT_CELL": "chunked",
    "validate_table": "chunked",
    "validation_chunk_rows": "chunked",
    "PARTIAL_EXAMPLES": "combine",
    "enforce": "enforce",
    "validate": "in_memory",
    "RuleSummary": "outcome",
    "ValidationDone": "outcome",
    "ValidationFailed": "outcome",
    "ValidationOutcome": "outcome",
    "DERIVED_PREFIX": "rules",
    "NUMBER_PATTERN": "rules",
    "ROW_RULES": "rules",
    "TABLE_RULES": "rules",
    "_num_col": "rules",
    "_whole_col": "rules",
    "_ChunkRows": "store",
    "_store": "store",
    "latest_passing_summary": "store",
    "owner_summary": "store",
    "store_outcome": "store",
    "validated_table_name": "store",
    "StoredValidation": "results",
    "latest_validations": "results",
    "_run_suite": "suite",
    "build_suite": "suite",
    "public_rule_set": "rule_set",
    "ChunkTask": "worker",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


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
