"""Validation of a frame held in memory: :func:`validate`, the one-chunk case.

For tables that fit in memory (tests, ``dpr spec check --data``): the same
code as :func:`~dpcore.validation.validate_table`, the same results, for any
chunk size (tests/test_validation_chunks.py); the frames stay on the outcome
until :func:`~dpcore.validation.store_outcome` writes them.
"""
from __future__ import annotations

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .check import _check
from .combine import _combine
from .duplicates import _duplicate_flags
from .outcome import ValidationOutcome
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def validate(raw: pd.DataFrame, spec: ReleaseSpec) -> ValidationOutcome:
    """Check a raw table held in memory against the spec; split it into validated and quarantined rows.

    The one-chunk case of :func:`validate_table` (same checks, same combination); for tables
    that fit in memory (tests, ``dpr spec check --data``).

    Parameters
    ----------
    raw : pandas.DataFrame
        The table as ingested (:func:`dpcore.ingest.raw.load_raw`), with the 1-based
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
        raise ValueError(f"raw table has no {ROW!r} column (load it with dpcore.ingest.raw.load_raw)")
    if pd.to_numeric(raw[ROW], errors="raise").duplicated().any():
        raise ValueError(f"raw table's {ROW!r} column is not unique")
    verdict, validated, quarantine, result = _check(raw, _duplicate_flags(raw, spec.dataset.record_id), spec)
    outcome = _combine([verdict], spec)
    outcome.validated, outcome.quarantine, outcome.chunk_results = validated, quarantine, [result]
    return outcome
