"""Private step ``outlier_counts``: top-h outlier subspaces and their outlier counts.

Scenario 2 of seed 002 (Okada et al.): first discover the h subspaces holding
the most distance-based outliers (Algorithm 3, exponential mechanism), then
release the number of outliers in each: with the global discrete Laplace
(pure epsilon-DP, issue 16), the Gaussian mechanism with the smooth upper
bound of Sections 4.2-4.3, the same bound with Student's T noise (Bun &
Steinke 2019, pure epsilon-DP), or the global-sensitivity Gaussian (Theorem 1);
``method: auto`` picks one from public parameters only
(:func:`dpcore.mechanisms.outlier_count.choose_method`, per subspace
dimension). No outlier is released: only which subspaces, how many, and a
95% interval half-width that depends on the spec alone.

Budget: either explicit (``epsilon_select`` for the selection, then
``epsilon_count`` -- and ``delta_count`` for the Gaussian methods -- per
count) or one ``epsilon_total`` split by :func:`budget_split`, a rule on
public parameters only (h, the number of candidates, the method).

Ledger: one charge for the selection (pure DP), then one charge per selected
subspace (the count mechanism's ``privacy_map``: ``(epsilon_count, 0)`` for
``global_laplace`` and ``smooth_student_t``, ``(epsilon_count, delta_count)`` for the Gaussian
methods), recorded under the budget relation *replace one raw row* (DESIGN.md
rule 5). The true counts and the noise scale (the smooth sensitivity is
itself a function of the data) stay in ``internal.outlier_count_diagnostics``.

Neighbours (issue 15, hole 7).  The mechanisms run on the *validated* table,
whose size N is private: a raw row replaced by one that fails validation is a
removal from it, a quarantined row replaced by a valid one an addition. The
mechanisms therefore use no quantity that depends on N (the public bound
``k K_d + 1`` replaces Theorem 4's ``min(N, k K_d + 1)``), and their guarantee
holds for one validated record replaced, added or removed
(:mod:`dpcore.mechanisms.outlier_count`). What it does not cover is stated in
:data:`StepOutput.not_protected` (:func:`not_protected`): a raw replacement
that creates or resolves a duplicate record id changes two validated records
(every row sharing an id is quarantined), and for such pairs only group
privacy over two steps holds.

Memory (issue 21).  The rows are never loaded: for each candidate subspace the
warehouse aggregates its attributes (``SELECT cols, count(*) ... GROUP BY
cols``), the distinct values are scaled by the public bounds in numpy exactly
as :func:`~dpcore.mechanisms.neighbors.scale_by_bounds` and
:func:`~dpcore.mechanisms.outlier_count.subspace_view` scale each row (the
same float64 coordinates, so the same distances), and every count runs on
those distinct points weighted by their multiplicities
(:class:`~dpcore.mechanisms.neighbors.PointMultiset`).  Memory grows with the number of
distinct points of the candidate subspaces, not with the number of rows; the
released numbers are those of the row-by-row computation (tested).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import math

import numpy as np

from dpcore.budget.amounts import exact
from dpcore.mechanisms.accuracy import interval_text
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from ..mechanisms.outlier_count import (
    CI_LEVEL,
    CDP_METHODS,
    GAUSSIAN_METHODS,
    OutlierCountMechanism,
    public_global_sensitivity,
    subspace_view,
)
from ..mechanisms.kissing import kissing_lower, kissing_upper
from ..mechanisms.subspace import TopSubspaceSelection, candidate_subspaces
from dpcore.mechanisms.neighbors import PointMultiset, scale_by_bounds
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from .common import (
    PlannedCharge, StepInputError, charge_request, noise_source, open_stores, require_public_completeness,
    validated_table,
)
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


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


#: Resolution of the split rule's selection share (a multiple of 1/100, exact).
SHARE_GRID = 100


@dataclass(frozen=True)
class BudgetSplit:
    """The step's epsilons: the selection's total and each count's, exact fractions.

    ``rule`` is ``None`` for the explicit form (``epsilon_select`` /
    ``epsilon_count``), else a one-line statement of :func:`budget_split`'s rule.
    """

    epsilon_select: Fraction
    epsilon_count: Fraction
    rule: str | None = None
    share: Fraction | None = None


def budget_split(epsilon_total, h: int, n_candidates: int, method: str, level: float = CI_LEVEL) -> BudgetSplit:
    """Split one epsilon for the step between the selection and the h counts (public parameters only).

    Rule
    ----
    With ``m = n_candidates`` and ``beta = 1 - level`` (0.05: the level of the
    published intervals),

        share = a / (a + h ln(1/beta)),   a = ln C(m, h),

    rounded to the nearest multiple of 1/100 and kept in [1/100, 99/100]
    (so 1/100 when ``h = m``);
    ``epsilon_select = share * epsilon_total`` and
    ``epsilon_count = (epsilon_total - epsilon_select) / h``, exact fractions
    summing to ``epsilon_total``.  For the Gaussian methods (``smooth``,
    ``global``: Theorems 1-2 need ``epsilon < 1``) a count epsilon that would
    reach 1 is set to 99/100 and the rest goes to the selection; that cap is
    the only way the method enters.  ``auto`` is resolved after the split, at
    the count epsilon it gives.

    Reasoning
    ---------
    The two parts' accuracy guarantees grow with the logarithm of what each
    must rule out.  The selection must name a set of ``h`` of the ``m``
    candidates -- only the set: the released counts order it -- and the
    exponential mechanism's error bound grows with ``ln |outcomes|``
    (McSherry & Talwar 2007: utility gap ``<= 2 Delta (ln|R| + t) / epsilon``
    with probability ``1 - e^{-t}``), i.e. ``ln C(m, h)``; with ``h = m`` there
    is no set to choose and the selection keeps the minimum share 1/100 (the
    mechanism needs ``epsilon > 0``).  Each count must be pinned to its published ``1 - beta``
    interval, whose half-width is ``s ln(1/beta)`` up to rounding for Laplace
    noise of scale ``s = G / epsilon_count`` (and ``~ sigma sqrt(2 ln(1/beta))``
    for the Gaussian ones), i.e. ``ln(1/beta)`` per count.  Spending epsilon in
    proportion to these terms gives each "nat" the same budget.  It uses h, m
    and the method only, never the data.  Measured effect on the demo
    (BENCHMARKS.md, "Outlier counts with less noise"): with m = 4, h = 2 the
    selection gets 23% (ln 6 against 2 ln 20), against one third in the
    old explicit demo split (0.5 + 2 x 0.5).

    Parameters
    ----------
    epsilon_total : float or Fraction
        ``> 0``; read through its decimal text (:func:`dpcore.budget.amounts.exact`).
    h : int
        Number of subspaces selected (``1 <= h <= n_candidates``).
    n_candidates : int
        Number of candidate subspaces ``m``.
    method : str
        The spec's count method (``smooth``, ``global``, ``global_laplace``, ``smooth_student_t``, ``smooth_lln``, ``smooth_arsinh`` or ``auto``).
    level : float
        Level of the published intervals (0.95).

    Returns
    -------
    BudgetSplit

    Raises
    ------
    ValueError
        On out-of-range arguments, or a Gaussian method whose counts cannot
        get ``epsilon < 1`` while the selection keeps ``epsilon > 0``.
    """
    for name, v in (("h", h), ("n_candidates", n_candidates)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {v!r})")
    if h > n_candidates:
        raise ValueError(f"h={h} is larger than the number of candidate subspaces ({n_candidates})")
    if not 0 < float(level) < 1:
        raise ValueError(f"level must be in (0, 1) (got {level!r})")
    E = exact(epsilon_total)
    if E <= 0:
        raise ValueError(f"epsilon_total must be > 0 (got {epsilon_total!r})")
    a = math.log(math.comb(n_candidates, h))
    b = h * math.log(1.0 / (1.0 - float(level)))
    share = Fraction(min(max(round(SHARE_GRID * a / (a + b)), 1), SHARE_GRID - 1), SHARE_GRID)
    e_sel = E * share
    e_cnt = (E - e_sel) / h
    note = ""
    if method in GAUSSIAN_METHODS and e_cnt >= 1:
        e_cnt = Fraction(99, 100)
        e_sel = E - h * e_cnt
        note = "; count epsilon capped at 0.99 for the Gaussian method, the rest to the selection"
        if e_sel <= 0:
            raise ValueError("cannot split: the Gaussian method needs epsilon_count < 1 and the selection epsilon > 0")
    rule = (f"selection share = ln C({n_candidates}, {h}) : {h} ln(1/{1 - float(level):.2g}) "
            f"-> {float(share):.2f} of epsilon_total{note}")
    return BudgetSplit(e_sel, e_cnt, rule, share)


def _split(spec: ReleaseSpec, n_candidates: int) -> BudgetSplit:
    cfg = spec.steps.outlier_counts
    if cfg.epsilon_total is None:
        return BudgetSplit(exact(cfg.epsilon_select), exact(cfg.epsilon_count))
    try:
        return budget_split(cfg.epsilon_total, cfg.h, n_candidates, cfg.method)
    except ValueError as exc:
        raise StepInputError(f"steps.outlier_counts.epsilon_total: {exc}") from None


@dataclass(frozen=True)
class OutlierCountsPlan:
    """Validated parameters and the bound-scaled data of one outlier-counts step (nothing charged).

    ``points`` (per candidate subspace, its distinct points in subspace
    coordinates with their multiplicities: :func:`subspace_points`) and
    ``select`` are all a worker needs to compute one candidate's utility
    (:func:`subspace_utility`); the charges stay with
    :func:`release_outlier_counts` in the flow process. ``counts`` holds the
    count mechanism of every candidate dimension (``auto`` resolved per
    dimension from public parameters); ``split`` the step's epsilons.
    Internal: exact statistics of the data (never logged or persisted).
    """

    attrs: list[str]
    candidates: list[tuple[int, ...]]
    points: dict[tuple[int, ...], PointMultiset]
    select: TopSubspaceSelection
    counts: dict[int, OutlierCountMechanism]
    split: BudgetSplit

    def count_for(self, subspace: tuple[int, ...]) -> OutlierCountMechanism:
        """The count mechanism of a selected subspace (by its dimension)."""
        return self.counts[len(subspace)]


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
        candidates; k < 1, r <= 0; for the Gaussian methods an epsilon per
        count outside (0, 1) or an epsilon too small for the smooth method
        (``global_laplace`` takes any epsilon > 0); an ``epsilon_total`` that
        cannot be split; a budget not stated under ``replace-one``. Nothing is
        charged.
    """
    _checked(spec)


def _checked(spec: ReleaseSpec) -> tuple[list[str], list[tuple[int, ...]], TopSubspaceSelection,
                                         dict[int, OutlierCountMechanism], BudgetSplit]:
    """:func:`check_outlier_counts`, returning attributes, candidates, the mechanisms and the budget split."""
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
    if cfg.h > len(cands):  # the selection's own check, before the split needs h <= m
        raise StepInputError(
            f"steps.outlier_counts: h={cfg.h} is larger than the number of candidate subspaces ({len(cands)}); "
            f"choose h <= {len(cands)} or add candidates"
        )
    split = _split(spec, len(cands))
    select = TopSubspaceSelection(k=cfg.k, r=cfg.r, epsilon=split.epsilon_select, h=cfg.h, candidates=cands)
    try:
        select.validate()
    except ValueError as exc:
        raise StepInputError(f"steps.outlier_counts: {exc}") from None
    counts: dict[int, OutlierCountMechanism] = {}
    for d in sorted({len(c) for c in cands}):
        try:
            count = OutlierCountMechanism.for_dimension(
                d, cfg.k, cfg.r, split.epsilon_count, cfg.delta_count, method=cfg.method, size_limit=cfg.size_limit
            )
            count.validate()
        except ValueError as exc:
            source = "epsilon_total's split" if cfg.epsilon_total is not None else "epsilon_count"
            raise StepInputError(
                f"steps.outlier_counts (count mechanism, method {cfg.method}, epsilon per count "
                f"{float(split.epsilon_count):g} from {source}, delta_count {cfg.delta_count:g}): {exc}"
            ) from None
        counts[d] = count
    return attrs, cands, select, counts, split


def subspace_points(wh, table: str, columns: list[str], lows, highs) -> PointMultiset:
    """The records of a subspace as distinct points with multiplicities, aggregated in the warehouse.

    ``SELECT columns, count(*) FROM table GROUP BY columns`` (DuckDB, which
    spills to disk beyond its memory limit), then each distinct row is scaled
    in numpy by the public bounds and by ``1 / sqrt(|S|)``: the elementwise
    operations :func:`~dpcore.mechanisms.neighbors.scale_by_bounds` and
    :func:`~dpcore.mechanisms.outlier_count.subspace_view` apply to every
    record, so each record's coordinates are bit for bit those of the
    in-memory path.  Rows that become equal only after scaling are merged.

    Parameters
    ----------
    wh : Warehouse
    table : str
        Qualified validated table.
    columns : list of str
        The subspace's attributes (public schema names).
    lows, highs : array_like
        Their public bounds.

    Returns
    -------
    PointMultiset
        Memory: the subspace's distinct points (never the rows). Internal only.
    """
    cols = ", ".join(f'"{c}"' for c in columns)
    df = wh.query_df(f"SELECT {cols}, count(*) AS _dpr_multiplicity FROM {table} GROUP BY {cols}")
    raw = df[columns].to_numpy(dtype=float).reshape(-1, len(columns))
    coords = subspace_view(scale_by_bounds(raw, lows, highs), range(len(columns)))
    return PointMultiset.aggregate(coords, df["_dpr_multiplicity"].to_numpy(dtype=np.int64))


def plan_outlier_counts(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> OutlierCountsPlan:
    """Check ``steps.outlier_counts`` (:func:`check_outlier_counts`) and aggregate each candidate subspace's
    records into distinct points scaled by the public bounds (:func:`subspace_points`).

    Raises
    ------
    StepInputError
        Bad parameters; nothing charged.
    """
    attrs, cands, select, counts, split = _checked(spec)
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
    wh = open_stores(settings).warehouse
    table = validated_table(spec, ingested)
    points = {
        tuple(sub): subspace_points(wh, table, [attrs[i] for i in sub], lows[list(sub)], highs[list(sub)])
        for sub in cands
    }
    return OutlierCountsPlan(attrs, cands, points, select, counts, split)


def subspace_utility(plan: OutlierCountsPlan, subspace: tuple[int, ...]) -> float:
    """One candidate's selection utility ``q_count(S) / GS_up(|S|)`` (pure; worker-safe, internal)."""
    return plan.select.utility_of(plan.points, subspace)


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
        Table ``counts`` (rank, subspace, noisy_count, ci_level, ci_half_width) and a report section.

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
    return open_stores(settings).ledger.lookup(req.key) is not None  # charged but never stored: selected again


def _base(spec: ReleaseSpec, attrs: list[str], cands: list[tuple[int, ...]]) -> dict[str, Any]:
    cfg = spec.steps.outlier_counts
    return {"attributes": attrs, "k": cfg.k, "r": cfg.r, "candidates": [list(c) for c in cands]}


def _selection_params(spec: ReleaseSpec, attrs: list[str], cands: list[tuple[int, ...]],
                      split: BudgetSplit) -> dict[str, Any]:
    cfg = spec.steps.outlier_counts
    if cfg.epsilon_total is None:  # the explicit form: the same key as before issue 16
        return {**_base(spec, attrs, cands), "h": cfg.h, "epsilon": cfg.epsilon_select}
    return {**_base(spec, attrs, cands), "h": cfg.h, "epsilon": str(split.epsilon_select),
            "epsilon_total": cfg.epsilon_total, "split": split.rule}


def _selection_request(spec, ingested, plan, noise, flow_run_id):
    params = _selection_params(spec, plan.attrs, plan.candidates, plan.split)
    return charge_request(spec, "outlier_subspaces", plan.select, plan.select.privacy_map(), params,
                          noise, flow_run_id)


def _count_params(spec: ReleaseSpec, attrs: list[str], cands: list[tuple[int, ...]], split: BudgetSplit,
                  count: OutlierCountMechanism, sub_names: list[str] | None) -> dict[str, Any]:
    """The count's idempotency parameters; unchanged (same keys) for the explicit smooth/global forms.

    ``sub_names=None`` leaves the subspace out (the cost plan's match: the selection decides it).
    """
    cfg = spec.steps.outlier_counts
    params = {**_base(spec, attrs, cands), "subspace": sub_names, "method": cfg.method, "epsilon": cfg.epsilon_count,
              "delta": cfg.delta_count, "size_limit": cfg.size_limit}
    if sub_names is None:
        del params["subspace"]
    if cfg.epsilon_total is not None:
        params.update(epsilon=str(split.epsilon_count), epsilon_total=cfg.epsilon_total, split=split.rule)
    if cfg.method not in GAUSSIAN_METHODS:
        params.update(resolved_method=count.method, delta=float(count.delta))
    return params


def outlier_counts_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The selection's charge and ``h`` count charges, from the spec alone (:mod:`dpcore.run.cost_plan`).

    Each count is planned at the largest cost among the candidate dimensions' mechanisms (``auto`` may
    resolve differently per dimension; the selection decides which are used).
    """
    attrs, cands, select, counts, split = _checked(spec)
    mechs = sorted(counts.values(), key=lambda c: (c.privacy_map().epsilon, c.privacy_map().delta))
    top = mechs[-1]
    match = _count_params(spec, attrs, cands, split, top, None)
    if len({(c.method, c.privacy_map()) for c in mechs}) > 1:
        match.pop("resolved_method", None)
        match.pop("delta", None)
    return [
        PlannedCharge.of("outlier_subspaces", select, select.privacy_map(),
                         _selection_params(spec, attrs, cands, split)),
        PlannedCharge.of("outlier_count", top, top.privacy_map(), match, count=spec.steps.outlier_counts.h),
    ]


def _sensitivity_text(d: int, k: int) -> str:
    """``G = k K_d + 1 = ...`` with ``K_d`` defined where it is used (public: ``d = |S|`` and ``k`` only)."""
    lo, up = kissing_lower(d), kissing_upper(d)
    what = "the kissing number" if lo == up else f"a published upper bound on the kissing number (at least {lo})"
    return (f"the public global sensitivity G = {public_global_sensitivity(d, k)} (= k K_{d} + 1 = {k} × {up} + 1, "
            f"where K_{d} = {up} is {what} in {d} dimension{'s' if d != 1 else ''}, the most unit balls that can "
            f"touch one unit ball without overlapping; adding, removing or replacing one record changes the "
            f"number of outliers in a {d}-dimensional subspace by at most G, seed 002 Theorem 1)")


def _describe_count(count: OutlierCountMechanism, d: int) -> str:
    """One public sentence on a count mechanism (no data-dependent quantity); defines ``K_d`` where used."""
    e = float(count.epsilon)
    k = int(count.k)
    G = public_global_sensitivity(d, k)
    gs = _sensitivity_text(d, k)
    if count.method == "global_laplace":
        return (f"discrete Laplace mechanism with {gs} "
                f"(scale G / epsilon = {count.laplace_scale(d):.4g}; epsilon = {e:g} each, pure epsilon-DP: delta = 0; "
                "integer counts)")
    if count.method == "global":
        return (f"Gaussian mechanism with {gs} (epsilon = {e:g}, delta = {float(count.delta):.2g} each)")
    if count.method == "smooth_student_t":
        return (f"smooth-sensitivity Student's T mechanism (Bun & Steinke 2019, Section 3, 2 degrees of freedom; "
                f"epsilon = {e:g} each, pure epsilon-DP: delta = 0; integer counts); its stated half-width is a "
                f"public upper bound (the smooth sensitivity, which depends on the data, replaced by its maximum, "
                f"{gs}): the actual noise may be smaller and its scale is not published")
    if count.method in CDP_METHODS:
        p = count.cdp
        name = "Laplace log-normal" if p.family == "lln" else "arsinh-normal"
        return (f"smooth-sensitivity {name} mechanism (Bun & Steinke 2019, Section 3; concentrated DP at "
                f"rho = {p.rho:.4g}, converted to epsilon = {e:g}, delta = {float(count.delta):.2g} each; integer "
                f"counts); its stated half-width is a public upper bound (the smooth sensitivity, which depends on "
                f"the data, replaced by its maximum, {gs}): the actual noise may be smaller and its scale is not "
                f"published")
    return (f"Gaussian mechanism with smooth sensitivity (Theorem 2; epsilon = {e:g}, delta = {float(count.delta):.2g} "
            f"each); its stated half-width is a public upper bound (the smooth sensitivity, which depends on the data, "
            f"replaced by its maximum, {gs}): the actual noise may be smaller and its scale is not published")


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

    Returns
    -------
    StepOutput
        Table ``counts``: ``rank``, ``subspace``, ``noisy_count`` (an integer
        for ``global_laplace``, clamped at 0), ``ci_level`` (0.95) and
        ``ci_half_width`` (:meth:`OutlierCountMechanism.ci_half_width`: public
        parameters only, identical on neighbouring datasets).

    Raises
    ------
    BudgetExceededError
        A charge does not fit the remaining budget.
    """
    ci_level = 1 - spec.accuracy_alpha  # the spec's accuracy_alpha (0.05: 95% intervals)
    cfg = spec.steps.outlier_counts
    attrs, points, select = plan.attrs, plan.points, plan.select
    cands = plan.candidates
    stores = open_stores(settings)
    noise = noise_source()
    names = lambda sub: [attrs[i] for i in sub]  # noqa: E731

    sel_req = _selection_request(spec, ingested, plan, noise, flow_run_id)
    chosen = stores.ledger.release_once(
        sel_req, lambda: {"subspaces": [names(s) for s in select.select(points, noise, utilities)]}
    )
    rows, keys, diag, used = [], [chosen.key], [], {}
    for rank, sub_names in enumerate(chosen.payload["subspaces"], start=1):
        sub = tuple(attrs.index(a) for a in sub_names)
        count = plan.count_for(sub)
        used[len(sub)] = count
        req = charge_request(spec, "outlier_count", count, count.privacy_map(),
                             _count_params(spec, plan.attrs, plan.candidates, plan.split, count, sub_names), noise, flow_run_id)

        def compute(sub: tuple[int, ...] = sub, count: OutlierCountMechanism = count) -> dict[str, Any]:
            noisy, true_count, sigma = count.release_with_diagnostics(points[sub], noise)
            diag.append({"subspace": " × ".join(names(sub)), "true_count": true_count, "sigma": sigma})
            # clamping at 0 and rounding are post-processing: no extra privacy cost
            if count.integer_output:
                return {"noisy_count": max(0, int(noisy))}
            return {"noisy_count": max(0.0, round(noisy, 2))}

        rel = stores.ledger.release_once(req, compute)
        keys.append(rel.key)
        value = rel.payload["noisy_count"]
        rows.append({"rank": rank, "subspace": " × ".join(sub_names),
                     "noisy_count": int(value) if count.integer_output else float(value),
                     "ci_level": ci_level, "ci_half_width": count.ci_half_width(len(sub), ci_level)})
    if diag:
        _store_diagnostics(stores.warehouse, chosen.key, pd.DataFrame(diag))
    table = pd.DataFrame(rows, columns=["rank", "subspace", "noisy_count", "ci_level", "ci_half_width"])
    split = plan.split
    if split.rule is None:
        budget = (f"epsilon = {float(split.epsilon_select):g} in total for the selection, epsilon = "
                  f"{float(split.epsilon_count):g} for each count")
    else:
        budget = (f"one epsilon_total = {cfg.epsilon_total:g} for the step, split by a public rule ({split.rule}): "
                  f"epsilon = {float(split.epsilon_select):g} for the selection, {float(split.epsilon_count):g} for "
                  "each count")
    how = "; ".join(
        (f"|S| = {d}: " if len(used) > 1 else "") + _describe_count(m, d) for d, m in sorted(used.items())
    ) or "no count released"
    auto = (" Count method `auto`: chosen from public parameters only (epsilon, delta, k, |S|) as the one with the "
            "smallest publishable 95% interval." if cfg.method == "auto" else "")
    level = f"{ci_level:.0%}"
    md = (
        "## Outlier subspaces and counts (differentially private)\n\n"
        f"Distance-based outliers (fewer than k = {cfg.k} neighbours within r = {cfg.r:g} in dist_S over "
        f"attributes scaled by their public bounds). Top {cfg.h} of {len(cands)} candidate subspaces chosen by the "
        f"exponential mechanism, then each count released with the {how}. Budget: {budget}.{auto} Neighbouring "
        "datasets: one validated record replaced, added or removed (a raw row replaced by one that fails validation "
        "is a removal); the number of validated records is not used. Noisy counts are clamped at 0.\n\n"
        f"count ({level}: low to high): for every dataset the noise is within ± t with probability at least "
        f"{ci_level:g}, so the interval count - t to count + t covers the true count with that probability; t depends "
        "on the public parameters only (the same on every dataset). The interval is clipped at 0 (a count is never "
        "negative).\n\n"
        f"| rank | subspace | noisy outlier count ({level} interval) |\n|---|---|---|\n"
        + "\n".join(f"| {r['rank']} | {r['subspace']} | "
                     f"{interval_text(r['noisy_count'], r['ci_half_width'], 1 - ci_level)} |" for r in rows)
    )
    accuracy = {
        f"counts.rank{r['rank']}": {
            "bound": r["ci_half_width"], "level": ci_level, "kind": "interval",
            "statement": f"± {r['ci_half_width']}: exact {level} half-width of the count's noise, from public "
                         "parameters only (method, epsilon, delta, k, subspace dimension)",
        }
        for r in rows
    }
    return StepOutput("outlier_counts", {"counts": table}, md, keys=keys, not_protected=not_protected(spec),
                      accuracy=accuracy)


def not_protected(spec: ReleaseSpec) -> list[str]:
    """What the outlier-counts guarantee does not cover (DESIGN.md rule 9), from public parameters only.

    Returns
    -------
    list of str
        Plain sentences for the manifest and the report.
    """
    _, _, select, counts, _ = _checked(spec)
    e_sel = float(select.epsilon)
    e_cnt = max(float(m.epsilon) for m in counts.values())
    d_cnt = max(float(m.delta) for m in counts.values())
    each = f"({e_cnt:g}, {d_cnt:.2g})-DP" if d_cnt > 0 else f"{e_cnt:g}-DP (pure, delta = 0)"
    pair = (f"({2 * e_cnt:g}, {(1 + math.exp(e_cnt)) * d_cnt:.2g})-DP" if d_cnt > 0
            else f"{2 * e_cnt:g}-DP (delta = 0)")
    return [
        "Covered: one validated record replaced, added or removed (a raw row replaced by one that fails "
        "validation is a removal; a quarantined row replaced by a valid one is an addition). For each of these "
        f"the subspace selection is {e_sel:g}-DP and each count {each}; the number of "
        "validated records is not used by either mechanism.",
        "Not covered at the charged amounts: a raw replacement that creates or resolves a duplicate record id "
        "changes two validated records (every row sharing an id is quarantined, so e.g. the replaced row and "
        "the row whose id it now shares both leave the validated table). For such pairs only group privacy over "
        f"two steps holds: the selection {2 * e_sel:g}-DP and each count {pair}.",
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
