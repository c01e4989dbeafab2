"""Private step ``record_counts``: noisy numbers of input, accepted and quarantined rows.

The published counts are consistent (``0 <= accepted <= input``, quarantined =
input - accepted): :func:`dpcore.mechanisms.row_counts.consistent_counts`
pools the two draws when the noisy accepted count exceeds the noisy input
count (their mean, rounded down) and clamps at 0, and
:func:`record_counts_accuracy` states intervals that hold for what is shown.

Also the release's rejected-fraction gate (``steps.validation.max_rejected_fraction``):
a stop decided on exact counts would publish them (a failed run is public), so
the gate is post-processing of these noisy, charged counts
(:func:`rejected_fraction_gate`). A release the gate stops gives back the part of
its reservation no step drew (:func:`dpcore.run.pipeline.stop_at_gate`; DESIGN.md rule 15).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpcore.mechanisms.accuracy import (
    Accuracy, check_alpha, discrete_laplace_difference_tail, discrete_laplace_half_width, exact_alpha, interval_text,
    level_text,
)
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from ..mechanisms.row_counts import InputRowCounts, consistent_counts
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from .common import PlannedCharge, charge_request, noise_source, open_stores, validated_table
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def record_counts_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Release noisy counts of accepted and input rows (charged once per key); quarantined = their difference.

    The true counts are read inside the mechanism call and never returned.
    Cost: ``steps.record_counts.epsilon`` (pure DP, add/remove one *raw* row),
    see :class:`~dpcore.mechanisms.row_counts.InputRowCounts`.
    """
    cfg = spec.steps.record_counts
    mech = InputRowCounts(cfg.epsilon)
    stores = open_stores(settings)
    noise = noise_source()
    req = charge_request(spec, "record_counts", mech, mech.privacy_map(1), _params(spec), noise, flow_run_id)

    def compute() -> dict[str, Any]:
        wh = stores.warehouse
        (n_valid,) = wh.query(f"SELECT count(*) FROM {validated_table(spec, ingested)}")[0]
        (n_input,) = wh.query(f"SELECT count(*) FROM {ingested.qualified_table}")[0]
        return mech.release(int(n_valid), int(n_input), noise)

    released = stores.ledger.release_once(req, compute)
    # idempotent on a consistent payload; makes a payload stored by an older version consistent too
    p = consistent_counts(released.payload["accepted_rows"], released.payload["input_rows"])
    acc = record_counts_accuracy(mech, spec.accuracy_alpha)
    table = pd.DataFrame({
        "cell": list(p), "noisy_count": list(p.values()),
        "ci_level": [acc[c].level for c in p], "ci_half_width": [acc[c].bound for c in p],
    })
    md = (
        "## Record counts (differentially private)\n\n"
        f"Geometric mechanism, epsilon = {cfg.epsilon:g}, add/remove one raw input row: the pair (accepted rows, "
        "input rows) moves by at most 2 in L1 (a row sharing an accepted row's id rejects both), so each cell has "
        f"noise of scale 2/epsilon. {CONSISTENCY_TEXT} "
        f"Each count is given with its {level_text(spec.accuracy_alpha)} interval, from the exact noise distribution "
        "and valid for the consistent counts shown (accepted and input rows: one draw's half-width at half the "
        "error probability, so both intervals hold at once; quarantined rows: the difference of two draws, plus the "
        "small chance that clamping a negative accepted count at 0 moved it further), clipped at 0.\n\n"
        "| cell | noisy count |\n|---|---|\n"
        + "\n".join(f"| {k} | {interval_text(v, acc[k].bound, spec.accuracy_alpha)} |" for k, v in p.items())
    )
    return StepOutput("record_counts", {"counts": table}, md, keys=[released.key],
                      accuracy={f"counts.{c}": a.as_dict() for c, a in acc.items()})


#: How the released counts are made consistent (report and manifest).
CONSISTENCY_TEXT = (
    "The counts are made consistent by post-processing (no privacy cost): when the noisy accepted count exceeds "
    "the noisy input count, both are replaced by their mean (rounded down); then each is clamped at 0, and "
    "quarantined rows = input rows - accepted rows (never negative)."
)


def _params(spec: ReleaseSpec) -> dict[str, Any]:
    return {"epsilon": spec.steps.record_counts.epsilon, "cells": "accepted+input"}


def record_counts_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The step's one charge, from the spec alone (:mod:`dpcore.run.cost_plan`)."""
    mech = InputRowCounts(spec.steps.record_counts.epsilon)
    return [PlannedCharge.of("record_counts", mech, mech.privacy_map(1), _params(spec))]


def record_counts_accuracy(mech: InputRowCounts, alpha: float) -> dict[str, Accuracy]:
    """Public accuracy of each released (consistent) cell: from the noise scale ``2/epsilon`` and alpha only.

    Parameters
    ----------
    mech : InputRowCounts
    alpha : float
        Significance of each statement.

    Returns
    -------
    dict
        Cell -> :class:`~dpcore.mechanisms.accuracy.Accuracy`. After
        :func:`~dpcore.mechanisms.row_counts.consistent_counts` the shown
        accepted and input counts are each within ``max(|Z_1|, |Z_2|)`` of the
        truth, so their half-width is one draw's at ``alpha / 2`` (both
        intervals hold at once with probability ``>= 1 - alpha``); the shown
        quarantined count misses its truth by more than ``T`` only if
        ``|Z_2 - Z_1| > T`` or (``Z_1 < 0`` and ``Z_2 < -T``), so its half-width
        is :func:`quarantined_half_width`. Checked exactly over the joint noise
        distribution in ``tests/test_record_counts_consistent.py``.
    """
    s = mech.noise_scale()
    half = exact_alpha(alpha) / 2
    one = discrete_laplace_half_width(s, half)
    two = quarantined_half_width(s, alpha)
    lv = 1 - alpha
    joint = (f"± {one}: discrete Laplace noise of scale {s:g}, exact, at error probability alpha/2 per draw, valid "
             "after the consistency post-processing (accepted and input rows hold at once)")
    return {
        "accepted_rows": Accuracy(one, lv, "interval", joint),
        "input_rows": Accuracy(one, lv, "interval", joint),
        "quarantined_rows": Accuracy(two, lv, "interval",
                                     f"± {two}: difference of two discrete Laplace draws of scale {s:g}, exact, "
                                     "plus the chance that clamping the accepted count at 0 lowers the shown "
                                     "quarantined count by more (valid after the consistency post-processing)"),
    }


def quarantined_half_width(scale: float, alpha: float) -> int:
    """Smallest ``T`` with ``P(|Z_2 - Z_1| > T) + P(Z_1 < 0) P(Z_2 < -T) <= alpha`` (public: scale and alpha only).

    Why this covers the shown quarantined count ``q''`` (truth ``q = n - a``,
    :func:`~dpcore.mechanisms.row_counts.consistent_counts`): before clamping
    it is ``q'`` or, when pooled (``q' < 0``), 0, both within ``|Z_2 - Z_1|``
    of ``q``; clamping only lowers it, and does so only when the accepted
    value is negative. Pooled and negative means both become 0 and a miss
    needs ``q > T`` with ``q' < 0``, so ``Z_2 - Z_1 < -T`` (in the first
    event). Not pooled with ``a' < 0`` (so ``Z_1 < 0``): ``q'' = max(n', 0)``,
    so ``q - q'' <= n - n' = -Z_2`` (and ``q'' <= q'``). The two draws are
    independent, ``P(Z_1 < 0) = e^{-1/s} / (1 + e^{-1/s})`` and
    ``P(Z_2 < -T) = e^{-(T+1)/s} / (1 + e^{-1/s})``.
    """
    a = check_alpha(alpha)
    diff = discrete_laplace_difference_tail(scale)
    q = math.exp(-1.0 / float(scale))
    t = np.arange(len(diff))
    extra = (q / (1 + q)) * np.exp(-(t + 1) / float(scale)) / (1 + q)
    ok = np.flatnonzero((diff + extra) * (1 + 1e-12) <= a)
    if not len(ok):
        raise ValueError("alpha too small for the numerical convolution")
    return int(ok[0])


def rejected_fraction_gate(spec: ReleaseSpec, counts: StepOutput) -> str | None:
    """The gate's verdict from the noisy counts only: None to go on, else the public reason to stop.

    Parameters
    ----------
    spec : ReleaseSpec
        ``steps.validation.max_rejected_fraction`` is the limit.
    counts : StepOutput
        The ``record_counts`` output (noisy, charged); the gate reads its
        consistent counts (:func:`~dpcore.mechanisms.row_counts.consistent_counts`,
        applied again here: quarantined = input - accepted, never negative).

    Returns
    -------
    str or None
        A message quoting the noisy numbers (already released) when the noisy
        rejected fraction is above the limit. What the stop cost is stated by
        :func:`dpcore.run.pipeline.stop_at_gate`, from the ledger.
    """
    limit = spec.steps.validation.max_rejected_fraction
    cells = dict(zip(counts.tables["counts"]["cell"], counts.tables["counts"]["noisy_count"]))
    shown = consistent_counts(int(cells["accepted_rows"]), int(cells["input_rows"]))
    total, quarantined = shown["input_rows"], shown["quarantined_rows"]
    fraction = quarantined / total if total else 0.0
    if fraction <= limit:
        return None
    return (
        f"the noisy record counts (already released) put the rejected fraction "
        f"at {quarantined} of {total} rows ({100 * fraction:.2f}%), above steps.validation.max_rejected_fraction = "
        f"{limit}: the release stops after the record counts. The data owner reads the exact validation result with "
        "`dpr validation show --spec SPEC`."
    )


def gate_outlook(spec: ReleaseSpec, n_rows: int, n_rejected: int) -> str:
    """The data owner's view of the rejected-rows gate for an input: exact fraction against the limit.

    Owner-only (``dpr spec check --data``, on the owner's terminal): it quotes
    exact counts. A release's gate reads the *noisy* record counts
    (:func:`rejected_fraction_gate`), so an exact fraction near the limit may
    go either way; the line says so with the noise scale.

    Parameters
    ----------
    spec : ReleaseSpec
    n_rows, n_rejected : int
        The input's exact row count and rows that validation rejects.

    Returns
    -------
    str
        One line: both numbers (rejected fraction and ``steps.validation.max_rejected_fraction``) and whether a
        release of this input would stop at the gate.
    """
    limit = spec.steps.validation.max_rejected_fraction
    fraction = n_rejected / n_rows if n_rows else 0.0
    head = (f"rejected-rows gate: {n_rejected} of {n_rows} rows rejected ({100 * fraction:.2f}%) against "
            f"steps.validation.max_rejected_fraction = {limit:g} ({100 * limit:.2f}%)")
    if not spec.steps.record_counts.enabled:
        return f"{head}: steps.record_counts is disabled, so no release of this spec applies the gate"
    scale = InputRowCounts(spec.steps.record_counts.epsilon).noise_scale()
    near = (f"; the gate reads the noisy record counts (noise of scale {scale:g} rows on each count), so an input "
            "this close to the limit may go either way")
    if fraction > limit:
        return (f"{head}: a release of this input would stop at the gate after the record counts (it then gives "
                "back what it reserved for the later steps); fix the rejected rows (`dpr validation show`) or "
                f"raise steps.validation.max_rejected_fraction" + (near if fraction - limit < 0.01 else ""))
    return f"{head}: below the limit, a release of this input passes the gate" + (near if limit - fraction < 0.01 else "")
