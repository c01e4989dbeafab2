"""The stop: :func:`enforce` ends a run on table-level failures only.

Privacy (DESIGN.md rules 6 and 8): what validation shows publicly depends only
on the public rule set (the spec): the rules checked, never which were broken
or how often. Row-level failures never stop a run (rows are quarantined);
only header-level rules and an empty input do, and the message names rules
and columns only.
"""
from __future__ import annotations

from dpcore.release.spec import ReleaseSpec
from .outcome import ValidationFailed, ValidationOutcome
from .rules import _RULE_TEXT


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
    if (spec.series is not None and spec.series.empty_periods == "release"
            and {f.rule for f in outcome.table_failures} == {"row_count"}):
        return  # the owner chose to release an empty period like any other (series.empty_periods: release)
    failed = sorted({(f.rule, f.column or "") for f in outcome.table_failures})
    lines = [f"  - {rule}{f' column {col!r}' if col else ''}: {_RULE_TEXT.get(rule, rule)}" for rule, col in failed]
    raise ValidationFailed(
        f"validation of dataset {spec.dataset.name!r} failed: table-level rule(s) failed:\n" + "\n".join(lines)
        + "\nThe data owner reads the full result with `dpr validation show --spec SPEC`.",
        outcome,
    )
