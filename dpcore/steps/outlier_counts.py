"""Private step ``outlier_counts``: top-h outlier subspaces and their outlier counts.

Scenario 2 of seed 002 (Okada et al.): first discover the h subspaces holding
the most distance-based outliers (Algorithm 3, exponential mechanism), then
release the number of outliers in each (Gaussian mechanism with the smooth
upper bound of Sections 4.2–4.3, or with global sensitivity as the baseline).
No outlier is released: only which subspaces, and how many.

Ledger: one charge for the selection (``epsilon_select``, pure DP), then one
charge per selected subspace (``epsilon_count``, ``delta_count``), recorded
under the budget relation *replace one raw row* (DESIGN.md rule 5). The true
counts and the data-dependent noise scale (the smooth sensitivity is itself a
function of the data) stay in ``internal.outlier_count_diagnostics``.

Neighbours (issue 15, hole 7).  The mechanisms run on the *validated* table,
whose size N is private: a raw row replaced by one that fails validation is a
removal from it, a quarantined row replaced by a valid one an addition. The
mechanisms therefore use no quantity that depends on N (the public bound
``k K_d + 1`` replaces Theorem 4's ``min(N, k K_d + 1)``), and their guarantee
-- ``epsilon_select``-DP for the selection, ``(epsilon_count,
delta_count)``-DP per count -- holds for one validated record replaced, added
or removed (:mod:`dpcore.mechanisms.outlier_count`: the smooth bound is
beta-smooth and dominates the local sensitivity for all three). What it does
not cover is stated in :data:`StepOutput.not_protected` (:func:`not_protected`):
a raw replacement that creates or resolves a duplicate record id changes two
validated records (every row sharing an id is quarantined), and for such pairs
only group privacy over two steps holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import math

import numpy as np
import pandas as pd

from ..bundle import StepOutput
from ..ingest import IngestResult
from ..mechanisms.outlier_count import OutlierCountMechanism, subspace_view
from ..mechanisms.subspace import TopSubspaceSelection, candidate_subspaces
from ..neighbors import scale_by_bounds
from ..settings import Settings
from ..spec import ReleaseSpec
from .common import (
    StepInputError, charge_request, load_columns, noise_source, open_stores, require_public_completeness,
)


def _candidates(spec: ReleaseSpec, attrs: list[str]) -> list[tuple[int, ...]]:
    cfg = spec.steps.outlier_counts
    if cfg.candidates:
        out = []
        for n, sub in enumerate(cfg.candidates):
            missing = [a for a in sub if a not in attrs]
            if missing or not sub or len(set(sub)) != len(sub):
                raise StepInputError(
                    f"steps.outlier_counts.candidates[{n}] must list distinct attributes among {attrs}"
                )
            out.append(tuple(attrs.index(a) for a in sub))
        return out
    if cfg.subspace_dim > len(attrs):
        raise StepInputError(
            f"steps.outlier_counts.subspace_dim = {cfg.subspace_dim} exceeds the {len(attrs)} attributes {attrs}"
        )
    return candidate_subspaces(len(attrs), cfg.subspace_dim)


@dataclass(frozen=True)
class OutlierCountsPlan:
    """Validated parameters and the bound-scaled data of one outlier-counts step (nothing charged).

    ``X`` and ``select`` are all a worker needs to compute one candidate's
    utility (:func:`subspace_utility`); the charges stay with
    :func:`release_outlier_counts` in the flow process.
    """

    attrs: list[str]
    candidates: list[tuple[int, ...]]
    X: np.ndarray
    select: TopSubspaceSelection
    count: OutlierCountMechanism


def check_outlier_counts(spec: ReleaseSpec) -> None:
    """Every public check of ``steps.outlier_counts``; touches no data and no warehouse.

    The release pipeline calls it for every enabled step before its first
    charge (DESIGN.md rule 8), and :func:`outlier_counts_step` /
    :func:`plan_outlier_counts` call it first. It depends on the spec only, so
    whether it passes tells nothing about the data.

    Raises
    ------
    StepInputError
        Bad parameters, naming the spec key: attributes that are not numeric
        attributes of the public schema, repeated or nullable; candidate
        subspaces naming other attributes or repeating one; ``subspace_dim``
        larger than the number of attributes; ``h`` larger than the number of
        candidates; k < 1, r <= 0, epsilon_count outside (0, 1), delta_count
        outside (0, 1), an epsilon too small for the smooth method; a budget
        not stated under ``replace-one``. Nothing is charged.
    """
    _checked(spec)


def _checked(spec: ReleaseSpec) -> tuple[list[str], list[tuple[int, ...]], TopSubspaceSelection,
                                         OutlierCountMechanism]:
    """:func:`check_outlier_counts`, returning attributes, candidates and the two mechanisms."""
    cfg = spec.steps.outlier_counts
    numeric = spec.public_schema.numeric
    attrs = list(cfg.attributes if cfg.attributes is not None else numeric)
    if not attrs:
        raise StepInputError("steps.outlier_counts.attributes: no numeric attribute to count outliers over; "
                             "declare numeric attributes in the schema or list them here")
    not_numeric = [a for a in attrs if a not in numeric]
    if not_numeric:
        raise StepInputError(
            f"steps.outlier_counts.attributes {not_numeric} are not numeric attributes of the public schema "
            f"(numeric: {list(numeric)})"
        )
    if len(set(attrs)) != len(attrs):
        raise StepInputError("steps.outlier_counts.attributes lists an attribute twice; list each once")
    require_public_completeness(spec, "outlier_counts")
    relation = getattr(getattr(spec, "budget", None), "neighbour", None)
    if relation is not None and str(getattr(relation, "value", relation)) != "replace-one":
        raise StepInputError(
            "steps.outlier_counts needs budget.neighbour: replace-one (its mechanisms are charged under one "
            "record replaced, added or removed)"
        )
    cands = _candidates(spec, attrs)
    select = TopSubspaceSelection(k=cfg.k, r=cfg.r, epsilon=cfg.epsilon_select, h=cfg.h, candidates=cands)
    count = OutlierCountMechanism(
        k=cfg.k, r=cfg.r, epsilon=cfg.epsilon_count, delta=cfg.delta_count, method=cfg.method, size_limit=cfg.size_limit
    )
    for mech in (select, count):
        try:
            mech.validate()
        except ValueError as exc:
            raise StepInputError(f"steps.outlier_counts: {exc}") from None
    return attrs, cands, select, count


def plan_outlier_counts(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> OutlierCountsPlan:
    """Check ``steps.outlier_counts`` (:func:`check_outlier_counts`) and load the attributes scaled by their
    public bounds.

    Raises
    ------
    StepInputError
        Bad parameters; nothing charged.
    """
    attrs, cands, select, count = _checked(spec)
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
    wh = open_stores(settings).warehouse
    X = scale_by_bounds(load_columns(wh, spec, ingested, attrs)[attrs].to_numpy(dtype=float), lows, highs)
    return OutlierCountsPlan(attrs, cands, X, select, count)


def subspace_utility(plan: OutlierCountsPlan, subspace: tuple[int, ...]) -> float:
    """One candidate's selection utility ``q_count(S) / GS_up(|S|)`` (pure; worker-safe, internal)."""
    return plan.select.utility_of(plan.X, subspace)


def outlier_counts_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Select the top-h outlier subspaces and release a noisy outlier count for each.

    Parameters
    ----------
    spec : ReleaseSpec
        ``spec.steps.outlier_counts`` holds attributes, k, r, the candidate
        subspaces, h, the budget split and the count method.
    settings : Settings
    ingested : IngestResult
    flow_run_id : str, optional

    Returns
    -------
    StepOutput
        Table ``counts`` (rank, subspace, noisy_count) and a report section.

    Raises
    ------
    StepInputError, ValueError
        Bad parameters (k < 1, r <= 0, h larger than the candidate count,
        delta outside (0, 1), unknown attributes); raised before any charge.
    BudgetExceededError
        A charge does not fit the remaining budget.
    """
    check_outlier_counts(spec)  # every public check first: nothing charged, no data read on failure
    plan = plan_outlier_counts(spec, settings, ingested)
    return release_outlier_counts(spec, settings, ingested, plan, None, flow_run_id)


def selection_stored(spec: ReleaseSpec, settings: Settings, ingested: IngestResult, plan: OutlierCountsPlan) -> bool:
    """Whether the top-h selection of this plan was released before (then no utility is needed)."""
    req = _selection_request(spec, ingested, plan, noise_source(), None)
    return open_stores(settings).ledger.lookup(req.key) is not None


def _base(spec: ReleaseSpec, plan: OutlierCountsPlan) -> dict[str, Any]:
    cfg = spec.steps.outlier_counts
    return {"attributes": plan.attrs, "k": cfg.k, "r": cfg.r, "candidates": [list(c) for c in plan.candidates]}


def _selection_request(spec, ingested, plan, noise, flow_run_id):
    cfg = spec.steps.outlier_counts
    return charge_request(
        spec, ingested, "outlier_subspaces", plan.select, plan.select.privacy_map(),
        {**_base(spec, plan), "h": cfg.h, "epsilon": cfg.epsilon_select}, noise, flow_run_id,
    )


def release_outlier_counts(
    spec: ReleaseSpec,
    settings: Settings,
    ingested: IngestResult,
    plan: OutlierCountsPlan,
    utilities: list[float] | None = None,
    flow_run_id: str | None = None,
) -> StepOutput:
    """Charge and release the selection, then one noisy count per selected subspace.

    Parameters
    ----------
    plan : OutlierCountsPlan
    utilities : list of float, optional
        Every candidate's utility, in ``plan.candidates`` order (from mapped
        :func:`subspace_utility` tasks); computed here when None.

    Raises
    ------
    BudgetExceededError
        A charge does not fit the remaining budget.
    """
    cfg = spec.steps.outlier_counts
    attrs, X, select, count = plan.attrs, plan.X, plan.select, plan.count
    cands = plan.candidates
    stores = open_stores(settings)
    noise = noise_source()
    base = _base(spec, plan)
    names = lambda sub: [attrs[i] for i in sub]  # noqa: E731

    sel_req = _selection_request(spec, ingested, plan, noise, flow_run_id)
    chosen = stores.ledger.release_once(
        sel_req, lambda: {"subspaces": [names(s) for s in select.select(X, noise, utilities)]}
    )
    rows, keys, diag = [], [chosen.key], []
    for rank, sub_names in enumerate(chosen.payload["subspaces"], start=1):
        sub = tuple(attrs.index(a) for a in sub_names)
        req = charge_request(
            spec, ingested, "outlier_count", count, count.privacy_map(),
            {**base, "subspace": sub_names, "method": cfg.method, "epsilon": cfg.epsilon_count,
             "delta": cfg.delta_count, "size_limit": cfg.size_limit},
            noise, flow_run_id,
        )

        def compute(sub: tuple[int, ...] = sub) -> dict[str, Any]:
            noisy, true_count, sigma = count.release_with_diagnostics(subspace_view(X, sub), noise)
            diag.append({"subspace": " × ".join(names(sub)), "true_count": true_count, "sigma": sigma})
            # clamping at 0 and rounding are post-processing: no extra privacy cost
            return {"noisy_count": max(0.0, round(noisy, 2))}

        rel = stores.ledger.release_once(req, compute)
        keys.append(rel.key)
        rows.append({"rank": rank, "subspace": " × ".join(sub_names), "noisy_count": rel.payload["noisy_count"]})
    if diag:
        _store_diagnostics(stores.warehouse, chosen.key, pd.DataFrame(diag))
    table = pd.DataFrame(rows, columns=["rank", "subspace", "noisy_count"])
    md = (
        "## Outlier subspaces and counts (differentially private)\n\n"
        f"Distance-based outliers (fewer than k = {cfg.k} neighbours within r = {cfg.r:g} in dist_S over "
        f"attributes scaled by their public bounds). Top {cfg.h} of {len(cands)} candidate subspaces chosen by the "
        f"exponential mechanism (epsilon = {cfg.epsilon_select:g} in total), then each count released with the "
        f"Gaussian mechanism ({'smooth' if cfg.method == 'smooth' else 'global'} sensitivity, epsilon = "
        f"{cfg.epsilon_count:g}, delta = {cfg.delta_count:.2g} each). Neighbouring datasets: one validated record "
        "replaced, added or removed (a raw row replaced by one that fails validation is a removal); the number of "
        "validated records is not used. Noisy counts are clamped at 0.\n\n"
        "| rank | subspace | noisy outlier count |\n|---|---|---|\n"
        + "\n".join(f"| {r['rank']} | {r['subspace']} | {r['noisy_count']:.2f} |" for r in rows)
    )
    return StepOutput("outlier_counts", {"counts": table}, md, keys=keys, not_protected=not_protected(spec))


def not_protected(spec: ReleaseSpec) -> list[str]:
    """What the outlier-counts guarantee does not cover (DESIGN.md rule 9), from public parameters only.

    Returns
    -------
    list of str
        Plain sentences for the manifest and the report.
    """
    cfg = spec.steps.outlier_counts
    e_sel, e_cnt, d_cnt = float(cfg.epsilon_select), float(cfg.epsilon_count), float(cfg.delta_count)
    return [
        "Covered: one validated record replaced, added or removed (a raw row replaced by one that fails "
        "validation is a removal; a quarantined row replaced by a valid one is an addition). For each of these "
        f"the subspace selection is {e_sel:g}-DP and each count ({e_cnt:g}, {d_cnt:.2g})-DP; the number of "
        "validated records is not used by either mechanism.",
        "Not covered at the charged amounts: a raw replacement that creates or resolves a duplicate record id "
        "changes two validated records (every row sharing an id is quarantined, so e.g. the replaced row and "
        "the row whose id it now shares both leave the validated table). For such pairs only group privacy over "
        f"two steps holds: the selection {2 * e_sel:g}-DP and each count "
        f"({2 * e_cnt:g}, {(1 + math.exp(e_cnt)) * d_cnt:.2g})-DP.",
        "Which records are outliers is decided with the exact (non-private) distances inside the warehouse; "
        "only the chosen subspaces and the noisy counts are released, never the records.",
    ]


def _store_diagnostics(wh, key: str, diag: pd.DataFrame) -> None:
    """True counts and noise scales (data-dependent, non-private) into ``internal`` only."""
    diag = diag.assign(key=key)[["key", "subspace", "true_count", "sigma"]]

    def op(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS internal.outlier_count_diagnostics "
            "(key VARCHAR, subspace VARCHAR, true_count BIGINT, sigma DOUBLE)"
        )
        con.execute("DELETE FROM internal.outlier_count_diagnostics WHERE key = ?", [key])
        con.register("_diag", diag)
        con.execute("INSERT INTO internal.outlier_count_diagnostics SELECT * FROM _diag")

    wh.run(op, transaction=True)
