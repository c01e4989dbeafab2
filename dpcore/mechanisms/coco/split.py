"""Budget split across the levels of a coco hierarchy from public parameters only (issue 19, item 3).

:func:`choose_split` returns one exact ε per level (``Fraction``s summing
exactly to the total), computed from the **public** shape of the hierarchy —
the tree, every node's public number of groups ``G_τ`` (from the groups
file), ``K`` — the total ε and the method.  It never reads measurements or
private data, so choosing the split costs no privacy and the same public
parameters always give the same split (tested on two data sets).

Model and objective
-------------------
For ``consistent_hc`` the released estimate before the integer step is the
tree-wide least-squares estimate (:func:`~.consistency.gls_tree`).  It is
linear in the measurements, so its error variance at every node is a closed
form of the per-level noise variances and the tree
(:func:`~.consistency.gls_tree_variances`; empty nodes are exact).  Every cell
of a node has the same variance, so the expected earthmover's distance of a
node is proportional to ``K`` times the error's standard deviation (Gaussian
approximation, ``E|e| = sqrt(2 P / π)``) and ``K`` does not move the optimum.
The per-level error of a split ``s`` is

    ``err_ℓ(s) = mean over the non-empty nodes of level ℓ of sqrt(P_node(s))``

and the chosen split minimises

    ``max_ℓ  err_ℓ(s) / err*_ℓ``,   ``err*_ℓ = min_s err_ℓ(s)``

over the grid of splits with shares ``k / grid`` (every level at least
``1 / grid``): the worst level's error relative to the best that level could
get from *any* split under the same total (ties: the smaller sum of log
ratios, then the first in grid order).  This is the "no level pays much more
than it has to" compromise; a split with ratio 1 at every level exists only
when one split is best for every level at once (it is not, in general: the
root wants the budget on itself, the leaves on themselves).

For ``consistent_hc_leaf`` (leaves rounded first, parents = sums of
children) the upper levels are sums of the leaves' rounding errors.  Under
the same Gaussian model with independent, zero-mean leaf errors every
level's error grows with the leaves' least-squares variance alone, so the
leaves' best split is best for every level: the leaves get all but the
grid's minimum share ``1 / grid`` of every level above.  The model ignores
the bias of the per-leaf isotonic fit and clipping, which sums over the
leaves (see BENCHMARKS.md: it dominates the root on the housing data).

The other methods that measure every level (per-node ``naive``, ``hg_*``,
``hc_*`` and ``top_down_*``) get the equal split (the slides'); bottom-up
methods measure only the leaves and take the total there directly
(``epsilon_per_level = total``), so :func:`choose_split` refuses them.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np

from dpcore.budget.amounts import exact
from .consistency import discrete_laplace_variance, gls_tree_variances
from .hierarchy import Hierarchy

__all__ = ["choose_split", "split_errors", "SPLIT_GRID", "SPLIT_OBJECTIVE"]

#: Default resolution of the split: shares are multiples of 1/24 of the total.
SPLIT_GRID = 24
#: One-line statement of the objective, for manifests and reports.
SPLIT_OBJECTIVE = ("minimise over splits (shares k/{grid} of the total) the largest ratio, over levels, of the "
                   "level's expected least-squares error (mean sqrt of the GLS posterior variance of its nodes) "
                   "to the smallest that level reaches under any split")


def _level_G(hierarchy: Hierarchy, group_counts) -> list[np.ndarray]:
    if isinstance(group_counts, Mapping):
        return [np.array([int(group_counts[n]) for n in hierarchy.nodes_at(lv)], dtype=np.int64)
                for lv in range(hierarchy.levels)]
    G = [np.asarray(g, dtype=np.int64) for g in group_counts]
    if len(G) != hierarchy.levels or any(len(g) != len(hierarchy.nodes_at(lv)) for lv, g in enumerate(G)):
        raise ValueError("group_counts must give one count per node of every level")
    return G


def _compositions(grid: int, parts: int):
    """Every tuple of ``parts`` integers >= 1 summing to ``grid`` (lexicographic order)."""
    for cut in itertools.combinations(range(1, grid), parts - 1):
        b = (0, *cut, grid)
        yield tuple(b[i + 1] - b[i] for i in range(parts))


def split_errors(hierarchy: Hierarchy, group_counts, shares: Sequence[float], epsilon_total: float) -> np.ndarray:
    """Per level, the model error ``err_ℓ`` (mean sqrt GLS posterior variance per cell) of one split.

    ``shares`` are the fractions of ``epsilon_total`` per level (root first).
    Public parameters only.
    """
    G = _level_G(hierarchy, group_counts)
    var = [discrete_laplace_variance(1.0 / (float(epsilon_total) * float(s))) for s in shares]
    P = gls_tree_variances(var, G, hierarchy)
    out = []
    for lv in range(hierarchy.levels):
        ok = G[lv] > 0
        out.append(float(np.sqrt(P[lv][ok]).mean()) if ok.any() else 0.0)
    return np.asarray(out)


def choose_split(hierarchy: Hierarchy, group_counts, K: int, epsilon_total, method: str = "consistent_hc",
                 *, grid: int = SPLIT_GRID) -> list[Fraction]:
    """ε per level (root first) from public parameters only; exact fractions summing to ``epsilon_total``.

    Parameters
    ----------
    hierarchy : Hierarchy
        The public hierarchy (depth, fan-out of every node).
    group_counts : mapping or list of arrays
        Public ``G_τ`` of every node (node id -> count, or per level an array
        in ``hierarchy.nodes_at(level)`` order).
    K : int
        Public maximum group size (every cell of a node has the same noise,
        so ``K`` scales every level's error alike and does not move the
        optimum; accepted so the split is a function of all public parameters).
    epsilon_total : number
        Total ε (``> 0``); the returned fractions sum to ``exact(epsilon_total)``.
    method : str
        A :attr:`CocoMechanism.METHODS` name (see the module docstring).
    grid : int
        Resolution: shares are multiples of ``1/grid`` (>= number of levels).

    Returns
    -------
    list of Fraction

    Raises
    ------
    ValueError
        A bottom-up method, a non-positive total, a grid too coarse for the depth.
    """
    total = exact(epsilon_total)
    if not total > 0:
        raise ValueError(f"epsilon_total must be > 0, got {epsilon_total!r}")
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    L = hierarchy.levels
    if method.startswith("bottom_up"):
        raise ValueError(f"method {method!r} measures the leaves only: give the total as epsilon_per_level "
                         "(it is all spent on the leaves); an automatic split is for methods measuring every level")
    if L == 1 or not method.startswith("consistent_hc"):
        base = [total / L] * L
        return base
    if int(grid) < L:
        raise ValueError(f"grid must be >= the number of levels ({L}), got {grid}")
    grid = int(grid)
    if method == "consistent_hc_leaf":
        shares = [1] * (L - 1) + [grid - (L - 1)]
        return [total * Fraction(k, grid) for k in shares]
    G = _level_G(hierarchy, group_counts)
    cands = list(_compositions(grid, L))
    errs = np.array([split_errors(hierarchy, G, [k / grid for k in c], float(total)) for c in cands])
    best = errs.min(axis=0)
    ratio = np.divide(errs, best, out=np.ones_like(errs), where=best > 0)
    worst = ratio.max(axis=1)
    tie = np.log(ratio).sum(axis=1)
    i = min(range(len(cands)), key=lambda j: (round(float(worst[j]), 12), round(float(tie[j]), 12), j))
    return [total * Fraction(k, grid) for k in cands[i]]
