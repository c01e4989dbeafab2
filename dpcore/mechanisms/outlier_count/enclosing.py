"""Algorithm 1: the largest subset of a point set enclosable in a ball of radius ``r`` (seed 002, Section 4.3).

``E(P) = max_x |P ∩ B(x, r)|`` (eqs. 45-46) is the quantity the smooth upper
bound of :mod:`dpcore.mechanisms.outlier_count.smooth_bound` needs.
:func:`algorithm1` is the paper's include/exclude search, verbatim;
:func:`max_enclosable` the same search space with exact pruning; and
:func:`relaxed_enclosable_bound` the relaxation ``max(E(P), |P| - L)`` above the
size limit (Proposition 1; its validity is argued in
:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`, "The relaxation above the
size limit").

Numerical notes: the enclosing-ball test accepts a set
when its smallest enclosing ball has radius ``<= r (1 + 1e-7)`` (and accepts
on a numerical failure of the miniball routine), i.e. it can only *over*-count
``E`` -- the safe direction.
"""
from __future__ import annotations

import numpy as np

from dpcore.mechanisms.neighbors import ball_counts
from .query import _as_points, _check_r
from dpcore.runtime.lazy_modules import lazy_module

# imported on first use (dpr spec check / plan never load scipy)
_sparse = lazy_module("scipy.sparse")
_csgraph = lazy_module("scipy.sparse.csgraph")
_spatial = lazy_module("scipy.spatial")

__all__ = [
    "enclosable",
    "algorithm1",
    "max_enclosable",
    "relaxed_enclosable_bound",
    "ExactSearchLimitError",
    "DEFAULT_NODE_LIMIT",
]

#: Relative slack of the enclosing-ball test (over-accepts: safe direction).
_SEB_TOL = 1e-7
#: Default node budget of the exact branch-and-bound (Algorithm 1).
DEFAULT_NODE_LIMIT = 2_000_000


class ExactSearchLimitError(RuntimeError):
    """The exact search of Algorithm 1 exceeded its node budget.

    Raised instead of returning a bound that might not be a valid smooth upper
    bound; nothing is released. The message carries public settings only
    (never the size of the data-dependent point set: issue 15).  Lower ``size_limit`` (raises the floor
    ``|P| - size_limit`` and prunes more) or use ``method="global"``.
    """


def _two_r_eff(r: float) -> float:
    """Diameter bound of sets accepted by the (tolerant) enclosing-ball test."""
    return 2.0 * r * (1 + _SEB_TOL) * (1 + 1e-9)


def _seb(points: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Smallest enclosing ball (centre, squared radius) or None on failure."""
    import miniball

    u = np.unique(points, axis=0)
    if u.shape[0] == 1:
        return u[0].copy(), 0.0
    if u.shape[0] == 2:
        c = (u[0] + u[1]) / 2.0
        return c, float(np.sum((u[0] - c) ** 2))
    try:
        res = miniball.get_bounding_ball(u)
    except Exception:  # singular circumsphere systems on degenerate inputs
        return None
    if res is None:
        return None
    c, r2 = res
    c = np.asarray(c, dtype=np.float64)
    # report the radius actually needed around the returned centre
    r2 = max(float(r2), float(np.max(np.sum((u - c) ** 2, axis=1))))
    return c, r2


def enclosable(points, r) -> bool:
    """Whether ``points`` fit in a closed ball of radius ``r`` (``seb(C) <= r``).

    Parameters
    ----------
    points : array_like, shape (m, d)
    r : float

    Returns
    -------
    bool
        ``True`` when the smallest enclosing ball (Fischer-Gaertner-Kutz /
        Welzl, ``miniball``) has radius ``<= r (1 + 1e-7)``, or when the
        routine fails numerically (over-accepting only enlarges ``E``: the safe
        direction for an upper bound).
    """
    P = _as_points(points, "points")
    if P.shape[0] <= 1:
        return True
    lim = (r * (1 + _SEB_TOL)) ** 2
    res = _seb(P)
    if res is None:
        return True
    return res[1] <= lim


def algorithm1(P, r) -> int:
    """Algorithm 1 of the paper, verbatim (no pruning beyond ``seb``).

    Recursive include/exclude search for the largest subset ``C ⊆ P`` with
    ``seb(C) <= r`` -- the value of eq. (45)/(46).  ``O(2^|P|)`` calls of
    ``seb``; for tests and tiny ``P`` only (use :func:`max_enclosable`).

    Parameters
    ----------
    P : array_like, shape (m, d)
    r : float

    Returns
    -------
    int
        ``max_x |P ∩ B(x, r)|`` (0 for empty ``P``).
    """
    P = _as_points(P, "P") if len(P) else np.zeros((0, 1))
    m = P.shape[0]

    def E(C: list[int], i: int) -> int:
        if C and not enclosable(P[C], r):
            return 0
        best = len(C)
        if i < m:
            best = max(best, E(C + [i], i + 1), E(C, i + 1))
        return best

    return E([], 0)


def max_enclosable(P, r, floor: int = 0, node_limit: int = DEFAULT_NODE_LIMIT) -> int:
    """``max(E(P), floor)`` exactly, by Algorithm 1 with pruning.

    Parameters
    ----------
    P : array_like, shape (m, d)
        Points (duplicates allowed; they count separately).
    r : float
        Ball radius ``> 0``.
    floor : int, default 0
        Only subsets larger than ``floor`` are searched for.
    node_limit : int
        Budget of search nodes; exceeding it raises.

    Returns
    -------
    int
        ``max(E(P), floor)`` with ``E(P) = max_x |P ∩ B(x, r)|``.

    Raises
    ------
    ExactSearchLimitError
        If the search needs more than ``node_limit`` nodes.

    Notes
    -----
    Same search space as Algorithm 1 (subsets with ``seb <= r``, which is
    hereditary), with exact pruning: (a) a set enclosable in radius ``r`` has
    diameter ``<= 2r``, so the search runs per connected component of the
    ``2r``-graph and only extends a set by points within ``2r`` of all its
    members; (b) branch-and-bound on ``|C| + |candidates| <= best``; (c) the
    lower bound ``max_y |P ∩ B(y, r)|`` (balls centred at points) seeds
    ``best``; (d) a point within ``r`` of a known enclosing centre of ``C`` is
    accepted without a new ``seb`` call.
    """
    P = _as_points(P, "P") if len(P) else np.zeros((0, 1))
    r = _check_r(r)
    m = P.shape[0]
    best = max(int(floor), 0)
    if m <= best:
        return best
    best = max(best, int(ball_counts(P, P, r).max()))
    if m <= best:
        return best
    tree = _spatial.cKDTree(P)
    two_r = _two_r_eff(r)
    pairs = tree.query_pairs(two_r, output_type="ndarray")
    if pairs.size == 0:
        return max(best, 1)
    adj = _sparse.coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(m, m))
    ncomp, labels = _csgraph.connected_components(adj, directed=False)
    sizes = np.bincount(labels, minlength=ncomp)
    nodes = 0
    lim2 = (r * (1 + _SEB_TOL)) ** 2
    for comp in np.argsort(-sizes):
        if sizes[comp] <= best:
            break
        idx = np.flatnonzero(labels == comp)
        Q = P[idx]
        D2 = np.sum((Q[:, None, :] - Q[None, :, :]) ** 2, axis=2)
        A = D2 <= two_r**2
        deg = A.sum(axis=1)  # includes self
        if deg.max() <= best:
            continue
        order = np.argsort(-deg, kind="stable")
        order = order[deg[order] > best]

        def expand(cur: list[int], centre: np.ndarray, cand: np.ndarray) -> None:
            nonlocal best, nodes
            for pos in range(cand.size):
                if len(cur) + cand.size - pos <= best:
                    return
                p = int(cand[pos])
                nodes += 1
                if nodes > node_limit:
                    raise ExactSearchLimitError(
                        f"exact Algorithm 1 exceeded its node budget ({node_limit} search nodes, a public setting); "
                        "lower size_limit or use method='global'"
                    )
                new = cur + [p]
                if np.sum((Q[p] - centre) ** 2) <= r * r:
                    c_new = centre
                else:
                    res = _seb(Q[new])
                    if res is not None and res[1] > lim2:
                        continue
                    # numerical failure (res None): accept -- over-counting is safe
                    c_new = res[0] if res is not None else Q[p]
                if len(new) > best:
                    best = len(new)
                rest = cand[pos + 1 :]
                rest = rest[A[p, rest]]
                expand(new, c_new, rest)

        for pos in range(order.size):
            p = int(order[pos])
            rest = order[pos + 1 :]
            rest = rest[A[p, rest]]
            if 1 + rest.size <= best:
                continue
            expand([p], Q[p].copy(), rest)
    return best


def relaxed_enclosable_bound(P, r, size_limit: int, node_limit: int = DEFAULT_NODE_LIMIT) -> int:
    """``g_L(P) = max(E(P), |P| - L)``: exact below the size limit, valid above.

    Parameters
    ----------
    P : array_like, shape (m, d)
    r : float
    size_limit : int
        ``L >= 1``.  For ``|P| <= L`` the result is ``E(P)`` exactly.
    node_limit : int
        Budget of the exact search.

    Returns
    -------
    int
        ``max(E(P), |P| - L)``.

    Notes
    -----
    ``g_L >= E``, is monotone under inclusion and drops by at most one when a
    point is deleted, which is what the smoothness proof (:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`)
    needs.  For ``|P| > L`` the exact search is skipped when the largest
    ``2r``-ball centred at a point of ``P`` holds at most ``|P| - L`` points
    (every set in a ball of radius ``r`` lies in such a ball).
    """
    if len(P) == 0:
        return 0
    P = _as_points(P, "P")
    L = int(size_limit)
    m = P.shape[0]
    thr = m - L
    if thr >= 1:
        h = int(ball_counts(P, P, _two_r_eff(r), cap=thr + 1).max())
        if h <= thr:
            return thr
    return max_enclosable(P, r, floor=max(thr, 0), node_limit=node_limit)
