"""Private step ``aiq``: (beta, r)-anomaly identification queries (seed 001).

For each queried record id or public point, release one bit — "is it a
(beta, r)-anomaly of the validated table?" — from
:class:`~dpcore.mechanisms.aiq.AnomalyIdentification` (sensitive privacy with
lambda_k, or epsilon-DP with Delta_G). The ball counts B_x(i, r) and
multiplicities x_i are computed inside the mechanism call and kept only in
``internal.aiq_diagnostics``; the release is the list of (query, answer) pairs.

Conventions
-----------
* Distance: Euclidean over the chosen numeric attributes, each scaled to
  [0, 1] by its public bounds (never by data statistics).
* Queries by record id (issue 15, holes 2-3): only ids on the spec's public
  roster (``dataset.roster``) may be asked about; an id off the roster, or
  any id without a roster, is refused before any charge (a public fact). A
  roster id is always charged and answered through the mechanism: present
  records with their own value as the query point, absent or quarantined ones
  with the data-independent input ``(b, xi) = (0, 0)``
  (:meth:`AnomalyIdentification.record_query_counts`), so presence and
  validity are never answered for free. The queried record's own value and
  presence are not protected (the query point is its value; rule 9, stated in
  the manifest and report); every other record keeps the charged guarantee.
* Cost (Section 3.1): record-id queries compose sequentially (Claim 3),
  ``n_ids * epsilon``; the positions of records are private, so the
  parallel-composition count of Claim 5 is not computed from them. Explicit
  public points may use Claim 5 (``m * epsilon``, m from their public
  positions). The batch's total is one ledger charge.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ..accuracy import Accuracy
from ..budget import PrivacyCost
from ..bundle import StepOutput
from ..ingest import IngestResult
from ..mechanisms.aiq import AnomalyIdentification
from ..neighbors import ball_counts, scale_by_bounds
from ..quoting import md_cell
from ..settings import Settings
from ..spec import AiqSpec, ReleaseSpec
from .detect import DETECTOR_CHOICE_NOT_PROTECTED, flagged_records
from .common import (
    PlannedCharge, StepInputError, charge_request, check_record_ids, load_columns, noise_source, open_stores,
    require_public_completeness,
)


def _check_queries(spec: ReleaseSpec, cfg: AiqSpec, attrs: list[str], record_ids: list[str]) -> None:
    if not cfg.record_ids and not cfg.points and not cfg.from_detector:
        raise StepInputError("steps.aiq: no queries; give record_ids, points or from_detector")
    check_record_ids(spec, record_ids, "steps.aiq.record_ids")
    require_public_completeness(spec, "aiq")
    for n, point in enumerate(cfg.points):
        if set(point) != set(attrs):
            raise StepInputError(
                f"steps.aiq.points[{n}] must give exactly the attributes {attrs}; got {sorted(point)}"
            )
        for a in attrs:
            b = spec.public_schema.numeric[a]
            if not (np.isfinite(point[a]) and b.min <= point[a] <= b.max):
                raise StepInputError(
                    f"steps.aiq.points[{n}].{a} = {point[a]!r} is outside the public bounds [{b.min:g}, {b.max:g}]"
                )


def check_aiq(spec: ReleaseSpec) -> AnomalyIdentification:
    """Every public check of ``steps.aiq``; touches no data (the release's preflight).

    Raises
    ------
    StepInputError, ValueError
        Bad parameters or requests (point outside the public bounds, repeated
        ids, ids off the public roster or no roster, no queries, nullable
        attributes); nothing is charged. Whether an id is present or valid is
        never checked (rule 8).
    """
    cfg = spec.steps.aiq
    mech = AnomalyIdentification(beta=cfg.beta, r=cfg.r, epsilon=cfg.epsilon, k=cfg.k, mechanism=cfg.mechanism)
    try:
        mech.validate()
    except ValueError as exc:
        raise StepInputError(f"steps.aiq: {exc}") from None
    _check_queries(spec, cfg, list(cfg.attributes or spec.public_schema.numeric), list(cfg.record_ids))
    return mech


def aiq_cost(spec: ReleaseSpec, mech: AnomalyIdentification) -> PrivacyCost:
    """The batch's charge, from the spec alone (Section 3.1).

    Record-id queries compose sequentially, ``(len(record_ids) + from_detector) * epsilon``: the number
    of detector-chosen ids is data-dependent, so the batch is charged for the public bound
    ``from_detector``; public points may use Claim 5 (``m * epsilon``, m from their public positions).
    """
    cfg = spec.steps.aiq
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    n_charged = len(cfg.record_ids) + cfg.from_detector
    cost = mech.batch_cost(n_charged, None) if n_charged else PrivacyCost(0)
    if cfg.points:
        lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
        highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
        points = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
        cost = cost + mech.batch_cost(
            len(points), AnomalyIdentification.batch_m(scale_by_bounds(points, lows, highs), cfg.r))
    return cost


def _public_params(spec: ReleaseSpec) -> dict[str, Any]:
    """The batch's idempotency parameters except the queried ids (which the detector may extend)."""
    cfg = spec.steps.aiq
    return {
        "mechanism": cfg.mechanism, "epsilon": cfg.epsilon, "beta": cfg.beta, "r": cfg.r, "k": cfg.k,
        "attributes": list(cfg.attributes or spec.public_schema.numeric), "from_detector": cfg.from_detector,
        "points": [dict(p) for p in cfg.points],
    }


def aiq_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The batch's one charge, from the spec alone (:mod:`dpcore.cost_plan`); checks the step first."""
    mech = check_aiq(spec)
    match = _public_params(spec)
    if not spec.steps.aiq.from_detector:
        match["record_ids"] = list(spec.steps.aiq.record_ids)
    return [PlannedCharge.of("aiq", mech, aiq_cost(spec, mech), match)]


def _store_diagnostics(wh, diag: pd.DataFrame) -> None:
    """Ball counts and multiplicities (non-private) go to ``internal`` only."""

    def op(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS internal.aiq_diagnostics "
            "(key VARCHAR, query VARCHAR, ball_count BIGINT, multiplicity BIGINT)"
        )
        con.register("_diag", diag)
        con.execute("INSERT INTO internal.aiq_diagnostics SELECT * FROM _diag")

    wh.run(op, transaction=True)


def aiq_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Answer the spec's AIQ batch (``steps.aiq``) with one ledger charge.

    Parameters
    ----------
    spec : ReleaseSpec
        ``spec.steps.aiq`` holds mechanism, epsilon, beta, r, k, attributes,
        record_ids and points.
    settings : Settings
    ingested : IngestResult
    flow_run_id : str, optional

    Returns
    -------
    StepOutput
        Table ``answers`` (query, anomaly) and a report section.

    Raises
    ------
    StepInputError, ValueError
        Bad parameters or queries (id off the public roster, point outside
        the public bounds, beta < 1, r < 0, k < 1, epsilon <= 0); nothing is
        charged. An absent or quarantined roster id is answered, not refused.
    BudgetExceededError
        The batch's cost does not fit the remaining budget.
    """
    cfg = spec.steps.aiq
    mech = check_aiq(spec)
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    stores = open_stores(settings)
    wh = stores.warehouse
    record_ids = list(cfg.record_ids)
    if cfg.from_detector:  # present by construction; their choice is stated as not protected
        record_ids += [i for i in flagged_records(wh, spec, ingested, cfg.from_detector) if i not in record_ids]
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])

    points = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
    cost = aiq_cost(spec, mech)
    noise = noise_source()
    params = {**_public_params(spec), "record_ids": record_ids}
    req = charge_request(spec, ingested, "aiq", mech, cost, params, noise, flow_run_id)
    labels = [f"record:{i}" for i in record_ids] + [f"point:{json.dumps(p, sort_keys=True)}" for p in cfg.points]

    def compute() -> dict[str, Any]:
        df = load_columns(wh, spec, ingested, attrs)
        data = scale_by_bounds(df[attrs].to_numpy(dtype=float), lows, highs)
        # record-id queries: absent/quarantined ids get the data-independent input (0, 0), never a refusal
        b_r, xi_r, present, cap, q_r = mech.record_query_counts(data, df[spec.dataset.record_id], record_ids)
        q_p = scale_by_bounds(points, lows, highs)
        if len(q_p):  # saturated at mech.saturation_cap(): exact answers, bounded work
            b_p, xi_p, _ = mech.counts(data, q_p)
        else:
            b_p = xi_p = np.zeros(0, dtype=np.int64)
        b, xi = np.concatenate([b_r, b_p]), np.concatenate([xi_r, xi_p])
        queries = np.vstack([q_r, q_p])
        live = np.concatenate([present, np.ones(len(q_p), dtype=bool)])
        answers = mech.answer(
            b, xi, noise, cap=cap,
            exact_count=lambda j: int(ball_counts(data, queries[j : j + 1], cfg.r)[0]) if live[j] else 0,
        )
        _store_diagnostics(wh, pd.DataFrame({"key": req.key, "query": labels, "ball_count": b, "multiplicity": xi}))
        return {"answers": [{"query": q, "anomaly": bool(a)} for q, a in zip(labels, answers)]}

    released = stores.ledger.release_once(req, compute)
    table = pd.DataFrame(released.payload["answers"])
    p_err = mech.max_error_probability()
    table["max_error_probability"] = p_err
    rate = "epsilon / 2" if cfg.mechanism == "compiler" else "epsilon"
    accuracy = Accuracy(
        p_err, 1.0, "error_probability",
        f"each answer is wrong with probability at most {p_err:.3g} = 1 / (1 + e^({rate})), attained only at the "
        f"anomaly boundary; a query lambda changes away from the other answer is wrong with probability "
        f"e^(-({rate}) (lambda - 1)) / (1 + e^({rate})) (seed 001, Section 4)",
    )
    notion = "sensitive privacy" if mech.notion == "sp" else "differential privacy"
    md = (
        f"## Anomaly identification queries ({notion})\n\n"
        f"(beta, r) = ({cfg.beta}, {cfg.r:g}) over {', '.join(attrs)} scaled by their public bounds; "
        f"mechanism {mech.name}, epsilon = {cfg.epsilon:g} per query"
        + (f", k = {cfg.k}" if cfg.mechanism == "sp" else "")
        + f"; batch charged epsilon = {float(cost.epsilon):g}.\n\n"
        + (
            f"The queried ids include the detector's top {cfg.from_detector} flagged records: that choice is made by "
            "the non-private detector, so the list of queried ids itself is not protected; only the answers are.\n\n"
            if cfg.from_detector else ""
        )
        + f"Accuracy: {accuracy.statement}.\n\n"
        + "| query | anomaly? | wrong with probability at most |\n|---|---|---|\n"
        + "\n".join(f"| {md_cell(r['query'])} | {'yes' if r['anomaly'] else 'no'} | {p_err:.3g} |"
                    for r in released.payload["answers"])
    )
    not_protected = []
    if cfg.record_ids or cfg.from_detector:
        not_protected.append(
            "The queried record's own value and presence: a record-id query uses that record's private values "
            "as the query point (a roster id that is absent or quarantined is answered from a data-independent "
            "input instead), so the guarantee covers every other record, not the queried one."
        )
    if cfg.from_detector:
        not_protected.append(DETECTOR_CHOICE_NOT_PROTECTED)
    return StepOutput("aiq", {"answers": table}, md, keys=[released.key], not_protected=not_protected,
                      accuracy={"answers": accuracy.as_dict()})
