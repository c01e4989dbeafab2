"""Per-node estimators, optimal matching, merging and top-down consistency.

Everything in this module is **post-processing** of noisy measurements and
public group counts: it never sees private data and costs no privacy.

Slides (Kuo et al., PVLDB 2018):

* "Naive Strategy" steps 2-3 -> :func:`naive_estimate`
* "Unattributed Histogram H_g" steps 3-4 -> :func:`hg_estimate`
* "Cumulative Sum Histograms H_c" steps 3-4 -> :func:`hc_estimate`
* "Initial Variance Estimation" -> :func:`hg_variances`, :func:`hc_variances`
  (H_c: the slides' rule plus a positional term, see there)
* "Optimal Matching Algorithm" -> :func:`match_level`
* "Merge Estimates", eqs. (1)-(2) -> :func:`merge_estimates`
* "Top-down Consistency" -> :func:`top_down`
* "Bottom-up Aggregation" -> :func:`aggregate_up`
"""
from __future__ import annotations

import numpy as np

from .hierarchy import Hierarchy
from .isotonic import blocks_to_sizes, isotonic

__all__ = [
    "project_simplex", "largest_remainder_round", "naive_estimate", "hg_estimate", "hc_estimate",
    "hg_variances", "hc_variances", "HC_VARIANCE_RULES", "match_level", "merge_estimates", "top_down", "aggregate_up",
    "round_half_up", "discrete_laplace_variance", "gls_tree", "isotonic_rows", "distribute_to_children",
    "consistent_hc", "gls_tree_variances", "CONSISTENT_ANCHORS",
]


def round_half_up(x) -> np.ndarray:
    """Round to the nearest integer, halves up (``floor(x + 0.5)``); monotone,
    so a non-decreasing vector stays non-decreasing."""
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


# --------------------------------------------------------------------- naive
def project_simplex(y, G: float) -> np.ndarray:
    """Euclidean projection of ``y`` onto ``{x >= 0, sum(x) = G}``.

    Slide "Naive Strategy", step 2: ``argmin ||H̃ - Ĥ||_2^2`` s.t.
    ``Ĥ[i] >= 0`` and ``sum Ĥ[i] = G`` (solved exactly by the sort-based
    water-filling rule ``x = max(y - θ, 0)`` instead of a QP solver).
    """
    y = np.asarray(y, dtype=np.float64)
    if G < 0:
        raise ValueError(f"G must be >= 0, got {G}")
    if G == 0 or y.size == 0:
        return np.zeros_like(y)
    u = np.sort(y)[::-1]
    css = np.cumsum(u) - G
    ind = np.arange(1, y.size + 1)
    rho = np.flatnonzero(u - css / ind > 0)[-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(y - theta, 0.0)


def largest_remainder_round(x, G: int) -> np.ndarray:
    """Integers ``>= 0`` summing to ``G``: round down, then round up the ``r``
    cells with the largest fractional parts, ``r = G - sum(floor(x))``
    (slide "Naive Strategy", step 3).  Ties broken by lower index."""
    x = np.asarray(x, dtype=np.float64)
    fl = np.floor(x)
    out = fl.astype(np.int64)
    r = int(G - out.sum())
    r = max(0, min(r, x.size))
    if r:
        frac = x - fl
        up = np.argsort(-frac, kind="stable")[:r]
        out[up] += 1
    # guard against floating error in the projection: fix the total exactly
    diff = int(G - out.sum())
    if diff > 0:
        out[np.argmax(x)] += diff
    elif diff < 0:
        for i in np.argsort(x - fl, kind="stable"):
            take = min(out[i], -diff)
            out[i] -= take
            diff += take
            if diff == 0:
                break
    return out


def naive_estimate(H_noisy, G: int) -> np.ndarray:
    """Naive method post-processing: least-squares projection onto
    ``{>= 0, sum = G}`` then largest-remainder rounding.

    Returns
    -------
    numpy.ndarray
        int64 H of length ``len(H_noisy)``, non-negative, summing to ``G``.
    """
    return largest_remainder_round(project_simplex(H_noisy, G), int(G))


# ------------------------------------------------------------------- H_g/H_c
def hg_estimate(Hg_noisy, K: int, loss: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """H_g method post-processing (slide "Unattributed Histogram H_g").

    Isotonic regression ``argmin ||H̃_g - Ĥ_g||_p^p`` s.t.
    ``0 <= Ĥ_g[i] <= Ĥ_g[i+1]`` (and ``<= K``, the public clamp), then round
    each entry to the nearest integer and convert back to H.

    Parameters
    ----------
    Hg_noisy : array_like of int
        Noisy sorted sizes, length G.
    K : int
        Public maximum group size.
    loss : {"l1", "l2"}
        ``p`` of the isotonic regression.

    Returns
    -------
    H : numpy.ndarray
        int64 length ``K + 1``, sums to G.
    Hg : numpy.ndarray
        int64 non-decreasing sizes in [0, K] (length G).
    block_sizes : numpy.ndarray
        ``|S_i|``: size of the PAV block of every position (for the
        variance estimate ``2 / (|S_i| ε²)``).
    """
    x, blocks = isotonic(np.asarray(Hg_noisy, dtype=np.float64), loss, lo=0.0, hi=float(K))
    Hg = round_half_up(x)
    H = np.bincount(Hg, minlength=K + 1).astype(np.int64)
    return H, Hg, blocks_to_sizes(blocks)


def hc_estimate(Hc_noisy, G: int, loss: str) -> np.ndarray:
    """H_c method post-processing (slide "Cumulative Sum Histograms H_c").

    Isotonic regression ``argmin ||Ĥ_c - H̃_c||_p^p`` s.t.
    ``0 <= Ĥ_c[i] <= Ĥ_c[i+1]`` and ``Ĥ_c[K] = G``; the last (public) cell
    is fixed, so the fit is the isotonic regression of cells ``0..K-1``
    clipped to ``[0, G]``.  Rounded to the nearest integer and converted
    back to H by differencing.

    Returns
    -------
    numpy.ndarray
        int64 H of length ``K + 1`` (non-negative, sum G).
    """
    y = np.asarray(Hc_noisy, dtype=np.float64)
    K = y.size - 1
    x, _ = isotonic(y[:K], loss, lo=0.0, hi=float(G))
    Hc = np.append(round_half_up(x), int(G))
    return np.diff(Hc, prepend=0).astype(np.int64)


def hg_variances(block_sizes, epsilon: float) -> np.ndarray:
    """Slide "Initial Variance Estimation", H_g method:
    ``τ.V_g[i] = 2 / (|S_i| ε²)`` (variance of the mean of ``|S_i|``
    double-geometric noises of scale ``1/ε``, each of variance ~ ``2/ε²``)."""
    return 2.0 / (np.asarray(block_sizes, dtype=np.float64) * float(epsilon) ** 2)


HC_VARIANCE_RULES = ("positional", "slides")


def hc_variances(H_hat, epsilon: float, rule: str = "positional") -> np.ndarray:
    """Variance estimate of every group of an H_c-method estimate.

    One entry per group of ``to_hg(H_hat)`` (ascending sizes).  Let ``s`` be
    the group's estimated size, ``n_s = Ĥ[s] >= 1`` the number of estimated
    groups of that size, and ``a < s < b`` the neighbouring *occupied* sizes
    of ``Ĥ`` (``a = -1`` below the smallest, ``b = K + 1`` above the largest
    occupied size: the stretch runs to the end of the size range).

    * ``rule="slides"`` — slide "Initial Variance Estimation", H_c method,
      literally: ``τ.V_g[i] = 4 / (ε² × n_s)`` (the count error of the
      size-``s`` cell, variance ``2·2/ε²`` for the two noisy cumulative cells
      it is the difference of, shared by the ``n_s`` groups of that size).
    * ``rule="positional"`` (default) — the slides' term plus the
      *positional* uncertainty of the step of ``Ĥ_c`` at ``s``::

          V = 4 / (ε² n_s)  +  (b - a)² / 12 × min(1, 4 / (ε² n_s²))

      Between two occupied sizes ``Ĥ_c`` is flat: the isotonic regression
      pooled those cells because the noisy cumulative counts gave no
      evidence of a group there, so a group on a step of height ``n_s`` is
      located only to within the flat stretch ``(a, b)`` (variance of a
      uniform position: ``(b - a)² / 12``) unless the step stands out of the
      count noise: the factor ``min(1, Var(count) / n_s²)`` with the slides'
      ``Var(count) = 4/ε²`` switches the term off for tall steps.  For
      dense sizes (``b - a = 2``, large ``n_s``) this is the slides' rule;
      it differs for isolated groups in long flat stretches, which is where
      the H_c estimate of a sparse node is wrong by hundreds (spurious large
      sizes produced by the isotonic fit of a flat, noisy ``H̃_c`` clipped at
      ``G``).  The literal rule gives those groups variance ``4/ε²`` and so
      over-trusts sparse children in the top-down merge: measured on the
      benchmark data, their actual squared error exceeded ``4/ε²`` by
      100-300x, and the merged root was 1.1-15x *worse* than the root's own
      estimate (see BENCHMARKS.md, coco section).

    Parameters
    ----------
    H_hat : array_like of int
        The node's estimated count-of-counts histogram (length ``K + 1``).
    epsilon : float
        ε of the node's level.
    rule : {"positional", "slides"}

    Returns
    -------
    numpy.ndarray
        float64 variances, length ``sum(H_hat)``.
    """
    if rule not in HC_VARIANCE_RULES:
        raise ValueError(f"rule must be one of {HC_VARIANCE_RULES}, got {rule!r}")
    H_hat = np.asarray(H_hat, dtype=np.int64)
    e2 = float(epsilon) ** 2
    occ = np.flatnonzero(H_hat)
    if occ.size == 0:
        return np.zeros(0, dtype=np.float64)
    n = H_hat[occ].astype(np.float64)
    v = 4.0 / (e2 * n)
    if rule == "positional":
        K = H_hat.size - 1
        a = np.concatenate([[-1], occ[:-1]])
        b = np.concatenate([occ[1:], [K + 1]])
        v = v + (b - a).astype(np.float64) ** 2 / 12.0 * np.minimum(1.0, 4.0 / (e2 * n * n))
    return np.repeat(v, H_hat[occ])


# ------------------------------------------------------------------- matching
def match_level(parent_vals, parent_node, child_vals, child_parent) -> tuple[np.ndarray, np.ndarray]:
    """Optimal matching between the groups of every parent and those of its children.

    Slide "Optimal Matching Algorithm": for each node τ a bipartite graph
    between ``(τ, i)`` and ``(c, j)`` with weight
    ``|τ.Ĥ_g[i] - c.Ĥ_g[j]|``; the least-cost perfect matching is obtained
    by matching the smallest unmatched group of τ with the smallest unmatched
    group among any of its children.  Done for all parents of a level at once:
    sort parent entries by (parent, value) and child entries by (parent of
    child, value); since every parent has as many groups as its children
    together (public G), the two sorted lists align entry by entry.  (Sorted
    matching is optimal for ``|x - y|`` costs by the standard exchange
    argument: two crossing pairs never cost less when uncrossed.)

    Parameters
    ----------
    parent_vals, parent_node : numpy.ndarray
        Current estimate of every group of the parent level and the index of
        its node.
    child_vals, child_parent : numpy.ndarray
        Initial estimate of every group of the child level and the index of
        the *parent* of its node.

    Returns
    -------
    p_idx, c_idx : numpy.ndarray
        Parent entry ``p_idx[k]`` is matched with child entry ``c_idx[k]``.

    Raises
    ------
    ValueError
        If a parent's group count differs from the sum of its children's.
    """
    parent_vals = np.asarray(parent_vals, dtype=np.float64)
    child_vals = np.asarray(child_vals, dtype=np.float64)
    parent_node = np.asarray(parent_node, dtype=np.int64)
    child_parent = np.asarray(child_parent, dtype=np.int64)
    if parent_vals.size != child_vals.size:
        raise ValueError(f"a level has {parent_vals.size} groups but its children have {child_vals.size}")
    p_idx = np.lexsort((parent_vals, parent_node))
    c_idx = np.lexsort((np.arange(child_vals.size), child_vals, child_parent))
    if not np.array_equal(parent_node[p_idx], child_parent[c_idx]):
        raise ValueError("a node's number of groups differs from the sum over its children")
    return p_idx, c_idx


def merge_estimates(x1, v1, x2, v2) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance weighted average (slide "Merge Estimates", [HRMS10]).

    Eq. (1): ``(x1/v1 + x2/v2) / (1/v1 + 1/v2)``;
    eq. (2): variance ``(1/v1 + 1/v2)^-1``.
    """
    w1 = 1.0 / np.asarray(v1, dtype=np.float64)
    w2 = 1.0 / np.asarray(v2, dtype=np.float64)
    w = w1 + w2
    return (np.asarray(x1) * w1 + np.asarray(x2) * w2) / w, 1.0 / w


# -------------------------------------------------------------- hierarchies
def aggregate_up(leaf_H: np.ndarray, hierarchy: Hierarchy) -> dict[str, np.ndarray]:
    """Every node's H as the sum of its leaves' H (slide "Bottom-up Aggregation").

    Parameters
    ----------
    leaf_H : numpy.ndarray
        ``(n_leaves, K + 1)`` int64, rows in ``hierarchy.leaves`` order.

    Returns
    -------
    dict[str, numpy.ndarray]
        Node id -> int64 H; parents equal the sum of their children exactly.
    """
    out: dict[str, np.ndarray] = {}
    M = np.asarray(leaf_H, dtype=np.int64)
    out.update(zip(hierarchy.nodes_at(hierarchy.levels - 1), M))
    for level in range(hierarchy.levels - 2, -1, -1):
        P = np.zeros((len(hierarchy.nodes_at(level)), M.shape[1]), dtype=np.int64)
        np.add.at(P, hierarchy.parent_index(level + 1), M)
        out.update(zip(hierarchy.nodes_at(level), P))
        M = P
    return out


def top_down(init_vals: list[np.ndarray], init_vars: list[np.ndarray], init_node: list[np.ndarray],
             hierarchy: Hierarchy, K: int) -> dict[str, np.ndarray]:
    """Top-down consistency (slides "Consistency Solution", "Top-down Consistency").

    1. Consistency matching at the top level: match the root's groups with
       its children's (:func:`match_level`) and merge each matched pair
       (:func:`merge_estimates`); the merged values and variances become the
       children's new estimates.
    2. Use the new estimates for the next level's matching, down to the leaves.
    3. Back substitution: round the merged leaf estimates to integers in
       ``[0, K]``; the unattributed histogram of every node is the union of its
       leaves' (slide: ``Ĥ_g^root = [1,1,1,1,2,3,3,6,9]`` from leaves
       ``a = [1,1,1,2,9]``, ``b = [1,3,3,6]``).
    4. Convert to count-of-counts histograms H.

    Parameters
    ----------
    init_vals, init_vars, init_node : list of numpy.ndarray
        Per level, the initial estimate Ĥ_g of every group, its variance
        estimate V_g, and the index of its node in ``nodes_at(level)``.
    hierarchy : Hierarchy
    K : int

    Returns
    -------
    dict[str, numpy.ndarray]
        Node id -> int64 H, non-negative, sum G_τ, parent = sum of children.
    """
    cur_vals = np.asarray(init_vals[0], dtype=np.float64)
    cur_vars = np.asarray(init_vars[0], dtype=np.float64)
    cur_node = np.asarray(init_node[0], dtype=np.int64)
    for level in range(1, hierarchy.levels):
        c_vals = np.asarray(init_vals[level], dtype=np.float64)
        c_vars = np.asarray(init_vars[level], dtype=np.float64)
        c_node = np.asarray(init_node[level], dtype=np.int64)
        c_parent = hierarchy.parent_index(level)[c_node]
        p_idx, c_idx = match_level(cur_vals, cur_node, c_vals, c_parent)
        merged, mvar = merge_estimates(cur_vals[p_idx], cur_vars[p_idx], c_vals[c_idx], c_vars[c_idx])
        new_vals = np.empty_like(c_vals)
        new_vars = np.empty_like(c_vars)
        new_vals[c_idx] = merged
        new_vars[c_idx] = mvar
        cur_vals, cur_vars, cur_node = new_vals, new_vars, c_node
    sizes = np.clip(round_half_up(cur_vals), 0, K)
    n_leaves = len(hierarchy.leaves)
    leaf_H = np.bincount(cur_node * (K + 1) + sizes, minlength=n_leaves * (K + 1)).reshape(n_leaves, K + 1)
    return aggregate_up(leaf_H.astype(np.int64), hierarchy)


# ------------------------------------------------- tree-wide least squares (H_c)
def discrete_laplace_variance(scale: float) -> float:
    """Variance of the discrete Laplace noise ``P(Z = z) ∝ exp(-|z| / scale)``.

    ``2 q / (1 - q)^2`` with ``q = exp(-1/scale)`` (``≈ 2 scale² - 1/6`` for a
    large scale; the slides' "double-geometric with scale Δ/ε").
    """
    q = float(np.exp(-1.0 / float(scale)))
    return 2.0 * q / (1.0 - q) ** 2


def _child_starts(pidx: np.ndarray, n_parents: int) -> np.ndarray:
    """Start of every parent's (contiguous) block of children in ``pidx`` order."""
    return np.searchsorted(pidx, np.arange(n_parents), side="left")


def _sum_children(values: np.ndarray, pidx: np.ndarray, n_parents: int) -> np.ndarray:
    """Per parent, the sum of its children's rows (children contiguous, every parent has >= 1)."""
    if values.shape[0] == 0:
        return np.zeros((n_parents,) + values.shape[1:], dtype=values.dtype)
    return np.add.reduceat(values, _child_starts(pidx, n_parents), axis=0)


def gls_tree(Y: list[np.ndarray], level_variance, G: list[np.ndarray], hierarchy: Hierarchy,
             return_root_variance: bool = False):
    """Generalised least-squares estimate of every node under parent = sum of children (two passes).

    Hay, Rastogi, Miklau & Suciu, "Boosting the Accuracy of Differentially
    Private Histograms Through Consistency", PVLDB 2010, Section 4 (the
    two-pass "hierarchical consistency" estimator), with one noise variance
    per level (as in their weighted variant / the Census TopDown L2 step):

    * **bottom-up**: a leaf keeps ``z_v = y_v``, ``V_v = σ²_level``; an
      internal node combines its own measurement with the sum of its
      children's estimates, ``z_v = (y_v/σ²_v + S_v/V_S)/(1/σ²_v + 1/V_S)``
      with ``S_v = Σ_c z_c``, ``V_S = Σ_c V_c``, and ``V_v = (1/σ²_v + 1/V_S)^-1``;
    * **top-down**: the root keeps ``x_root = z_root``; every parent's
      residual ``x_v - Σ_c z_c`` is given to its children in proportion to
      their variances, ``x_c = z_c + V_c / V_S (x_v - S_v)``.

    This is the exact minimiser of ``Σ_v ||y_v - x_v||² / σ²_v`` subject to
    ``x_v = Σ_c x_c`` (checked against a dense solve in
    ``tests/test_coco_consistent.py``).  The noise is independent across
    bins and all bins of a node share its variance, so the bins decouple and
    each pass is one vectorised operation per level over a ``(nodes, bins)``
    matrix: time and memory linear in the tree.  A node whose public group
    count is 0 is known to be 0 exactly (variance 0): it takes no share of
    its parent's residual and adds nothing to its parent's sum.

    Parameters
    ----------
    Y : list of numpy.ndarray
        Per level (root first), ``(n_level, B)`` noisy measurements, rows in
        ``hierarchy.nodes_at(level)`` order.
    level_variance : sequence of float
        Noise variance of every cell of each level (> 0).
    G : list of numpy.ndarray
        Per level, the public group count of each node.
    hierarchy : Hierarchy

    return_root_variance : bool
        Also return the variance of the root's estimate per cell (``V_root``
        of the bottom-up pass; a function of the public parameters only).

    Returns
    -------
    list of numpy.ndarray
        Per level, ``(n_level, B)`` float64 estimates; every parent row equals
        the sum of its children's rows (up to floating point).  With
        ``return_root_variance``: ``(estimates, V_root)``.
    """
    L = hierarchy.levels
    Y = [np.asarray(y, dtype=np.float64) for y in Y]
    empty = [np.asarray(g) == 0 for g in G]
    Z: list[np.ndarray] = [None] * L  # type: ignore[list-item]
    V: list[np.ndarray] = [None] * L  # type: ignore[list-item]
    s = float(level_variance[L - 1])
    Z[L - 1] = np.where(empty[L - 1][:, None], 0.0, Y[L - 1])
    V[L - 1] = np.where(empty[L - 1], 0.0, s)
    for lv in range(L - 2, -1, -1):
        n = Y[lv].shape[0]
        pidx = hierarchy.parent_index(lv + 1)
        S = _sum_children(Z[lv + 1], pidx, n)
        VS = _sum_children(V[lv + 1], pidx, n)
        s = float(level_variance[lv])
        ok = ~empty[lv] & (VS > 0)
        VSs = np.where(ok, VS, 1.0)
        w_own, w_kids = 1.0 / s, 1.0 / VSs
        z = (Y[lv] * w_own + S * w_kids[:, None]) / (w_own + w_kids)[:, None]
        Z[lv] = np.where(ok[:, None], z, 0.0)
        V[lv] = np.where(ok, 1.0 / (w_own + w_kids), 0.0)
    X = [Z[0]]
    for lv in range(1, L):
        n = Z[lv - 1].shape[0]
        pidx = hierarchy.parent_index(lv)
        S = _sum_children(Z[lv], pidx, n)
        VS = _sum_children(V[lv], pidx, n)
        share = np.divide(V[lv], VS[pidx], out=np.zeros_like(V[lv]), where=VS[pidx] > 0)
        X.append(Z[lv] + share[:, None] * (X[lv - 1] - S)[pidx])
    return (X, float(V[0][0])) if return_root_variance else X


def gls_tree_variances(level_variance, G: list[np.ndarray], hierarchy: Hierarchy) -> list[np.ndarray]:
    """Error variance of :func:`gls_tree`'s estimate of every node (per cell), from public parameters only.

    The estimate is linear in the measurements, so its error variance depends
    only on the per-level noise variances, the tree and which nodes are empty
    (public ``G``) — never on the data.  Same two passes as :func:`gls_tree`:
    bottom-up ``V_v = (1/σ²_v + 1/Σ_c V_c)^-1`` (``V_leaf = σ²_leaf``), then
    top-down (the Rauch-Tung-Striebel smoother form of the residual split
    ``x_c = z_c + V_c/V_S (x_v - S_v)``)::

        P_root = V_root,   P_c = V_c - V_c²/V_S + (V_c/V_S)² P_v.

    Checked against the diagonal of the dense ``(AᵀWA)^-1`` in
    ``tests/test_coco_consistent.py``.

    Returns
    -------
    list of numpy.ndarray
        Per level, the posterior variance of every node (0 for empty nodes).
    """
    L = hierarchy.levels
    empty = [np.asarray(g) == 0 for g in G]
    V: list[np.ndarray] = [None] * L  # type: ignore[list-item]
    V[L - 1] = np.where(empty[L - 1], 0.0, float(level_variance[L - 1]))
    for lv in range(L - 2, -1, -1):
        n = len(empty[lv])
        VS = _sum_children(V[lv + 1], hierarchy.parent_index(lv + 1), n)
        s = float(level_variance[lv])
        ok = ~empty[lv]
        inv = 1.0 / s + np.divide(1.0, VS, out=np.zeros_like(VS), where=VS > 0)
        V[lv] = np.where(ok, 1.0 / inv, 0.0)
    P = [V[0]]
    for lv in range(1, L):
        pidx = hierarchy.parent_index(lv)
        VS = _sum_children(V[lv], pidx, len(P[lv - 1]))[pidx]
        k = np.divide(V[lv], VS, out=np.zeros_like(V[lv]), where=VS > 0)
        P.append(np.maximum(V[lv] - k * V[lv] + k * k * P[lv - 1][pidx], 0.0))
    return P


def isotonic_rows(X: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Row-wise L2 isotonic (non-decreasing) fit clipped to ``[0, hi_row]``, one PAV call for all rows.

    The rows are concatenated with increasing offsets, so every value of a
    row lies below every value of the next one: PAV then never pools across
    rows and the joint fit is the row-wise fit (slide "Cumulative Sum
    Histograms H_c", step 3, for all nodes of a level at once).  Clipping the
    unconstrained fit is the box-constrained fit (:mod:`.isotonic`).
    """
    X = np.asarray(X, dtype=np.float64)
    n, B = X.shape
    if n == 0 or B == 0:
        return X.copy()
    lo_r, hi_r = X.min(axis=1), X.max(axis=1)
    gap = np.concatenate([[0.0], hi_r[:-1] - lo_r[1:] + 1.0])
    off = np.cumsum(np.maximum(gap, 0.0))
    flat = (X + off[:, None]).ravel()
    from scipy.optimize import isotonic_regression as _iso
    fit = _iso(flat, increasing=True).x.reshape(n, B) - off[:, None]
    return np.clip(fit, 0.0, np.asarray(hi, dtype=np.float64)[:, None])


def distribute_to_children(P: np.ndarray, R: np.ndarray, pidx: np.ndarray) -> np.ndarray:
    """Integer children H_c that sum exactly to their integer parents, by sorted matching.

    The integer step of :func:`consistent_hc`.  Every parent ``p`` has the
    integer, non-decreasing ``P[p]`` (its ``P[p, -1] = G_p`` groups with the
    sizes ``to_hg(diff(P[p]))``); every child ``c`` has a rounded estimate
    ``R[c]`` (integer, non-decreasing, ``R[c, -1] = G_c``).  The parent's
    groups, smallest first, are handed out to its children's estimated groups
    taken in ascending estimated size (ties: child order): the least-cost
    matching of the slides' "Optimal Matching Algorithm" (cost ``|parent size
    - child's estimated size|``), so the children's total earthmover's
    distance to their own rounded estimates is the minimum that the parent
    allows, and a child keeps ``R[c]`` exactly wherever the parent agrees with
    the sum of its children.  Each child receives exactly ``G_c`` groups
    whose sizes the parent has, so the output is integral, non-decreasing,
    ``>= 0``, ends at ``G_c``, and the children sum to the parent in every bin.

    Works on runs (a size with a count) rather than groups: time and memory
    ``O(nodes × (K + 1))`` for the dense matrices plus a sort of the
    non-zero cells, independent of the number of groups.

    Parameters
    ----------
    P : numpy.ndarray
        ``(n_parents, K + 1)`` int64 parents' cumulative histograms.
    R : numpy.ndarray
        ``(n_children, K + 1)`` int64 children's rounded estimates.
    pidx : numpy.ndarray
        Parent index of every child (children of a parent contiguous).

    Returns
    -------
    numpy.ndarray
        ``(n_children, K + 1)`` int64 H (not cumulative) of every child.
    """
    n_c, B = R.shape
    Hp = np.diff(P, axis=1, prepend=0)
    Hc = np.diff(R, axis=1, prepend=0)
    if (Hp < 0).any() or (Hc < 0).any():
        raise ValueError("parent and child cumulative histograms must be non-decreasing")
    # parent runs, ordered by (parent, size): row-major order of the matrix
    pr, ps = np.nonzero(Hp)
    p_end = np.cumsum(Hp[pr, ps])
    # child runs, ordered by (parent, size, child)
    cr, cs = np.nonzero(Hc)
    order = np.lexsort((cr, cs, pidx[cr]))
    cr, cs = cr[order], cs[order]
    c_end = np.cumsum(Hc[cr, cs])
    if p_end.size != 0 or c_end.size != 0:
        if p_end.size == 0 or c_end.size == 0 or p_end[-1] != c_end[-1]:
            raise ValueError("a parent's number of groups differs from the sum over its children")
    if p_end.size == 0:
        return np.zeros((n_c, B), dtype=np.int64)
    bounds = np.union1d(p_end, c_end)
    starts = np.concatenate([[0], bounds[:-1]])
    length = bounds - starts
    pi = np.searchsorted(p_end, starts, side="right")
    ci = np.searchsorted(c_end, starts, side="right")
    out = np.bincount(cr[ci] * B + ps[pi], weights=length, minlength=n_c * B)
    return np.rint(out).astype(np.int64).reshape(n_c, B)


#: Where :func:`consistent_hc`'s integer step starts: ``"root"`` (top-down
#: distribution from the root) or ``"leaves"`` (integer leaves, parents = sums).
CONSISTENT_ANCHORS = ("root", "leaves")


def consistent_hc(Y: list[np.ndarray], level_variance, G: list[np.ndarray],
                  hierarchy: Hierarchy, anchor="root") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Tree-wide least squares on the noisy H_c of every node, then a consistent integer projection.

    1. **Least squares** (:func:`gls_tree`) on cells ``0..K-1`` of the noisy
       cumulative histograms of every node of every level (the unbiased raw
       measurements, weighted by their exact noise variance); cell ``K`` is
       the public ``G_τ``.  The result satisfies parent = sum of children in
       the reals.
    2. **Integer, monotone, non-negative projection, top-down** (in the
       spirit of the Census TopDown algorithm, which solves the L2 problem and
       then a rounding problem that keeps every parent equal to the sum of its
       children, level by level; Abowd et al. 2022, Sections 5-6):

       * root: L2 isotonic fit clipped to ``[0, G]`` (slide "Cumulative Sum
         Histograms H_c", step 3), rounded half up (monotone rounding keeps
         it non-decreasing), last cell ``G``;
       * every lower level, all nodes at once: each node's least-squares
         estimate is projected the same way (:func:`isotonic_rows`) and
         rounded; its parent's already-integer groups are then distributed
         to the children by sorted matching (:func:`distribute_to_children`),
         which makes the children sum to the parent exactly.

    With ``anchor="leaves"`` (method ``consistent_hc_leaf``) the integer
    step starts at the leaves instead: every leaf's least-squares estimate is
    projected and rounded on its own (isotonic, clipped to ``[0, G]``, rounded
    half up, last cell ``G``), and every parent is the exact sum of its
    children's integer histograms (as bottom-up aggregation, but from the
    tree-wide least-squares leaves).  Precise leaves then keep the gain of
    rounding (an integer truth is recovered exactly when the error is below
    1/2) instead of absorbing a noisy parent's rounding; the upper levels
    carry the sum of the leaves' rounding errors.  An integer ``anchor`` =
    level ``a`` does both: level ``a`` is rounded on its own, the levels above
    are sums, the levels below are distributed top-down from it (``"root"``
    is ``0``, ``"leaves"`` is ``levels - 1``).

    Parameters
    ----------
    Y : list of numpy.ndarray
        Per level, ``(n_level, K + 1)`` noisy H_c (the last cell is ignored).
    level_variance : sequence of float
        Noise variance of a cell of each level.
    G : list of numpy.ndarray
        Per level, public group counts.
    hierarchy : Hierarchy
    anchor : {"root", "leaves"} or int
        Level whose rounded estimate every other level is made consistent with.

    Returns
    -------
    H : list of numpy.ndarray
        Per level, ``(n_level, K + 1)`` int64 count-of-counts histograms:
        non-negative, row sums ``G``, parent = sum of children exactly.
    X : list of numpy.ndarray
        Per level, the real-valued least-squares H_c before rounding (cells
        ``0..K``, the last = G).
    """
    L = hierarchy.levels
    G = [np.asarray(g, dtype=np.int64) for g in G]
    Kp1 = np.asarray(Y[0]).shape[1]
    X = gls_tree([np.asarray(y, dtype=np.float64)[:, :Kp1 - 1] for y in Y], level_variance, G, hierarchy)
    X = [np.concatenate([x, g[:, None].astype(np.float64)], axis=1) for x, g in zip(X, G)]
    if anchor == "root":
        a = 0
    elif anchor == "leaves":
        a = L - 1
    elif isinstance(anchor, (int, np.integer)) and not isinstance(anchor, bool) and 0 <= int(anchor) < L:
        a = int(anchor)
    else:
        raise ValueError(f"anchor must be one of {CONSISTENT_ANCHORS} or a level in [0, {L - 1}], got {anchor!r}")

    def rounded(lv: int) -> np.ndarray:
        fit = isotonic_rows(X[lv][:, :-1], G[lv])
        return np.concatenate([round_half_up(fit), G[lv][:, None]], axis=1)

    H: list[np.ndarray] = [None] * L  # type: ignore[list-item]
    H[a] = np.diff(rounded(a), axis=1, prepend=0)
    for lv in range(a - 1, -1, -1):  # above the anchor: parent = sum of children
        H[lv] = _sum_children(H[lv + 1], hierarchy.parent_index(lv + 1), len(G[lv]))
    P = np.cumsum(H[a], axis=1)
    for lv in range(a + 1, L):  # below the anchor: distribute the parent's groups
        H[lv] = distribute_to_children(P, rounded(lv), hierarchy.parent_index(lv))
        P = np.cumsum(H[lv], axis=1)
    return H, X
