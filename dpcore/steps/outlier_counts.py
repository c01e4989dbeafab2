"""Private step ``outlier_counts``: top-h outlier subspaces and their outlier counts.

Scenario 2 of seed 002 (Okada et al.): first discover the h subspaces holding
the most distance-based outliers (Algorithm 3, exponential mechanism), then
release the number of outliers in each (Gaussian mechanism with the smooth
upper bound of Sections 4.2–4.3, or with global sensitivity as the baseline).
No outlier is released: only which subspaces, and how many.

Ledger: one charge for the selection (``epsilon_select``, pure DP), then one
charge per selected subspace (``epsilon_count``, ``delta_count``). All charges
are recorded with the paper's neighbour relation, *replace one record* with N
fixed (DESIGN.md rule 5). The true counts and the data-dependent noise scale
(the smooth sensitivity is itself a function of the data) stay in
``internal.outlier_count_diagnostics``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..bundle import StepOutput
from ..ingest import IngestResult
from ..mechanisms.outlier_count import OutlierCountMechanism, subspace_view
from ..mechanisms.subspace import TopSubspaceSelection, candidate_subspaces
from ..neighbors import scale_by_bounds
from ..settings import Settings
from ..spec import ReleaseSpec
from .common import StepInputError, charge_request, load_columns, noise_source, open_stores, require_complete


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


def check_outlier_counts(spec: ReleaseSpec) -> tuple[list[str], list[tuple[int, ...]], TopSubspaceSelection,
                                                      OutlierCountMechanism]:
    """Every public check of ``steps.outlier_counts``; touches no data (the release's preflight).

    Returns
    -------
    tuple
        Attributes, candidate subspaces, the selection and the count mechanisms.

    Raises
    ------
    StepInputError
        Bad parameters (k < 1, r <= 0, h larger than the candidate count,
        delta outside (0, 1), unknown or nullable attributes); nothing charged.
    """
    cfg = spec.steps.outlier_counts
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    require_complete(spec, attrs, "steps.outlier_counts attributes", "outlier counting needs complete rows")
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
    attrs, cands, select, count = check_outlier_counts(spec)
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
        f"{cfg.epsilon_count:g}, delta = {cfg.delta_count:.2g} each). Neighbouring datasets: one record replaced "
        "(N fixed), as in the source paper. Noisy counts are clamped at 0.\n\n"
        "| rank | subspace | noisy outlier count |\n|---|---|---|\n"
        + "\n".join(f"| {r['rank']} | {r['subspace']} | {r['noisy_count']:.2f} |" for r in rows)
    )
    return StepOutput("outlier_counts", {"counts": table}, md, keys=keys)


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
