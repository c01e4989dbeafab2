"""Private step ``record_counts``: noisy numbers of input, accepted and quarantined rows.

Also the release's rejected-fraction gate (``steps.validation.max_rejected_fraction``):
a stop decided on exact counts would publish them (a failed run is public), so
the gate is post-processing of these noisy, charged counts
(:func:`rejected_fraction_gate`).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..accuracy import (Accuracy, discrete_laplace_difference_half_width, discrete_laplace_half_width,
                        interval_text, level_text)
from ..bundle import StepOutput
from ..ingest import IngestResult
from ..mechanisms.row_counts import InputRowCounts
from ..settings import Settings
from ..spec import ReleaseSpec
from .common import PlannedCharge, charge_request, noise_source, open_stores, validated_table


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
    p = released.payload
    acc = record_counts_accuracy(mech, spec.accuracy_alpha)
    table = pd.DataFrame({
        "cell": list(p), "noisy_count": list(p.values()),
        "ci_level": [acc[c].level for c in p], "ci_half_width": [acc[c].bound for c in p],
    })
    md = (
        "## Record counts (differentially private)\n\n"
        f"Geometric mechanism, epsilon = {cfg.epsilon:g}, add/remove one raw input row: the pair (accepted rows, "
        "input rows) moves by at most 2 in L1 (a row sharing an accepted row's id rejects both), so each cell has "
        f"noise of scale 2/epsilon; quarantined rows = noisy input rows - noisy accepted rows (post-processing). "
        f"Each count is given with the half-width of its {level_text(spec.accuracy_alpha)} interval, from the exact "
        "noise distribution (the difference of two draws for quarantined rows).\n\n"
        "| cell | noisy count |\n|---|---|\n"
        + "\n".join(f"| {k} | {interval_text(v, acc[k].bound, spec.accuracy_alpha)} |" for k, v in p.items())
    )
    return StepOutput("record_counts", {"counts": table}, md, keys=[released.key],
                      accuracy={f"counts.{c}": a.as_dict() for c, a in acc.items()})


def _params(spec: ReleaseSpec) -> dict[str, Any]:
    return {"epsilon": spec.steps.record_counts.epsilon, "cells": "accepted+input"}


def record_counts_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The step's one charge, from the spec alone (:mod:`dpcore.cost_plan`)."""
    mech = InputRowCounts(spec.steps.record_counts.epsilon)
    return [PlannedCharge.of("record_counts", mech, mech.privacy_map(1), _params(spec))]


def record_counts_accuracy(mech: InputRowCounts, alpha: float) -> dict[str, Accuracy]:
    """Public accuracy of each released cell (issue 16): from the noise scale ``2/epsilon`` only.

    ``accepted_rows`` and ``input_rows`` each carry one discrete Laplace draw
    (exact half-width); ``quarantined_rows`` is their difference (two
    independent draws: exact half-width of the difference). Clamping at 0
    keeps every statement valid.
    """
    s = mech.noise_scale()
    one = discrete_laplace_half_width(s, alpha)
    two = discrete_laplace_difference_half_width(s, alpha)
    lv = 1 - alpha
    return {
        "accepted_rows": Accuracy(one, lv, "interval", f"± {one}: discrete Laplace noise of scale {s:g}, exact"),
        "input_rows": Accuracy(one, lv, "interval", f"± {one}: discrete Laplace noise of scale {s:g}, exact"),
        "quarantined_rows": Accuracy(two, lv, "interval",
                                     f"± {two}: difference of two discrete Laplace draws of scale {s:g}, exact"),
    }


def rejected_fraction_gate(spec: ReleaseSpec, counts: StepOutput) -> str | None:
    """The gate's verdict from the noisy counts only: None to go on, else the public reason to stop.

    Parameters
    ----------
    spec : ReleaseSpec
        ``steps.validation.max_rejected_fraction`` is the limit.
    counts : StepOutput
        The ``record_counts`` output (noisy, charged).

    Returns
    -------
    str or None
        A message quoting the noisy numbers (already released) when the noisy
        rejected fraction is above the limit.
    """
    limit = spec.steps.validation.max_rejected_fraction
    cells = dict(zip(counts.tables["counts"]["cell"], counts.tables["counts"]["noisy_count"]))
    total, quarantined = int(cells["input_rows"]), int(cells["quarantined_rows"])
    fraction = quarantined / total if total else 0.0
    if fraction <= limit:
        return None
    return (
        f"the noisy record counts (released, epsilon = {spec.steps.record_counts.epsilon:g}) put the rejected fraction "
        f"at {quarantined} of {total} rows ({100 * fraction:.2f}%), above steps.validation.max_rejected_fraction = "
        f"{limit}: the release stops after the record counts. The data owner finds the exact validation result in "
        "the warehouse (internal.validation_results)."
    )
