"""Vectorised radius-neighbour primitives over numeric records.

Used by private anomaly identification (AIQ, seed 001, Asif et al. CCS'19,
Definition 2.2: ``B_x(i, r)`` and ``x_i``) and reusable by distance-based
outlier counting (seed 002).  Nothing here is private: these functions compute
*exact* statistics of the data, which must stay inside the warehouse
(DESIGN.md rule 6); a mechanism turns them into a private answer.

Distance semantics
------------------
Euclidean distance on float64 coordinates, **closed** ball: a row ``x`` is
within ``r`` of ``q`` when the squared distance, as evaluated by
:class:`scipy.spatial.cKDTree`, is ``<= r**2``.  Counts include the query
point itself when it is a row of the data, and every duplicate.  All counting
paths below share this evaluation so their answers are consistent; on
coordinates where the arithmetic is exact (integers, dyadic grids) this is the
mathematical closed ball.

Scaling uses public bounds only (:func:`scale_by_bounds`): deriving a scale
from the data (standard deviation, min/max) would leak it (DESIGN.md, "The
release spec").

Bounded memory (issue 21)
-------------------------
Two forms let the callers count without holding every row:

* :class:`PointMultiset`: the distinct points of a table with their
  multiplicities (e.g. ``SELECT cols, count(*) ... GROUP BY cols`` in the
  warehouse, scaled in numpy afterwards).  :func:`ball_counts` with
  ``weights`` counts every copy of a point, so the count of a ball is the same
  number as over the expanded rows; memory grows with the number of
  *distinct* points, not with rows (real tables repeat values: the demo's
  integer columns have a few hundred distinct values per column).
* A *chunk source* (:class:`ArrayChunks`, or a warehouse export with the same
  ``n_chunks`` / ``chunk(i)`` interface): :func:`chunked_ball_counts` adds
  per-chunk counts of a few query points, one chunk in memory at a time.
  Sums of exact counts are exact, and sums of counts saturated at ``cap``,
  saturated again, equal the saturated total.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

from dpcore.runtime.chunks import serial_map
from dpcore.runtime.lazy_modules import lazy_module

_spatial = lazy_module("scipy.spatial")  # imported on first use (dpr spec check / plan never load scipy)

__all__ = [
    "scale_by_bounds",
    "ball_counts",
    "multiplicities",
    "pairwise_ball_max",
    "PointMultiset",
    "ArrayChunks",
    "chunked_ball_counts",
    "few_query_counts",
]

#: Relative safety margin for the saturation shortcut of :func:`ball_counts`:
#: a query is declared saturated by a *bound* only when the bound is below
#: ``r * (1 - _MARGIN)``, so float rounding in the bound cannot make the
#: shortcut disagree with the exact closed-ball count.
_MARGIN = 1e-9
#: ``method="auto"`` of :func:`ball_counts` counts by blocked matrix products
#: from this dimension on (KD-tree below): on 5 x 10^4 Gaussian points the KD-tree
#: was faster up to d = 6 and 2.3x slower (saturating counts) at d = 8.
_BLOCKED_MIN_DIM = 8


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------


def _as_matrix(a, name: str, ncols: int | None = None, min_cols: int = 0) -> np.ndarray:
    """Return ``a`` as a finite C-contiguous float64 2-D array.

    The one argument check for numeric record arrays, shared by this module
    and :mod:`dpcore.mechanisms.outlier_count` (seed 002).

    Parameters
    ----------
    a : array_like
        Rows are records/points; a 1-D input is read as one column.
    name : str
        Argument name for error messages.
    ncols : int or None
        Required number of columns.
    min_cols : int, default 0
        Smallest allowed number of columns (the outlier count needs ``d >= 1``).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, d)``, float64.

    Raises
    ------
    ValueError
        On wrong shape, non-numeric values, NaN or infinities.
    """
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n, d): {exc}") from None
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[1] < min_cols:
        need = f", d >= {min_cols}" if min_cols else ""
        raise ValueError(f"{name} must be 2-D (n rows, d columns{need}), got shape {arr.shape}")
    if ncols is not None and arr.shape[1] != ncols:
        raise ValueError(
            f"{name} has {arr.shape[1]} columns but the data has {ncols}; "
            "queries must use the same numeric attributes as the data"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values; clean or quarantine them first")
    # +0.0 turns -0.0 into 0.0 so byte-level equality equals value equality.
    return np.ascontiguousarray(arr + 0.0)


def _check_radius(r) -> float:
    if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(float(r)) or float(r) < 0:
        raise ValueError(f"r must be a finite real number >= 0, got {r!r}")
    return float(r)


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------


def scale_by_bounds(X, lows, highs) -> np.ndarray:
    """Scale numeric attributes to the unit box given *public* bounds.

    Parameters
    ----------
    X : array_like, shape (n, d)
        Records (or query points); a 1-D input is one column.
    lows, highs : array_like, shape (d,)
        Public lower/upper bounds per attribute from the release spec, with
        ``highs > lows``.  Never pass data statistics here: a bound derived
        from the private data leaks it.

    Returns
    -------
    numpy.ndarray
        ``(X - lows) / (highs - lows)`` as float64, shape (n, d).  Values are
        not clipped: a point outside the public bounds maps outside [0, 1]
        (callers that must refuse such points check it themselves).

    Raises
    ------
    ValueError
        If shapes disagree, a bound is not finite, or ``highs <= lows``.
    """
    Xa = _as_matrix(X, "X")
    lo = np.asarray(lows, dtype=np.float64).reshape(-1)
    hi = np.asarray(highs, dtype=np.float64).reshape(-1)
    d = Xa.shape[1]
    if lo.shape != (d,) or hi.shape != (d,):
        raise ValueError(f"lows and highs must have one entry per column ({d}), got {lo.shape} and {hi.shape}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError("public bounds must be finite numbers")
    bad = np.flatnonzero(~(hi > lo))
    if bad.size:
        raise ValueError(
            f"public bounds need highs > lows; column(s) {bad.tolist()} violate it. "
            "Fix the numeric bounds in the release spec"
        )
    return (Xa - lo) / (hi - lo)


def ball_counts(data, queries, r, *, block_rows: int = 65536, cap: int | None = None, workers: int = -1,
                method: str = "auto", weights=None) -> np.ndarray:
    """Number of data rows within Euclidean distance ``r`` of each query.

    This is ``B_x(i, r)`` of seed 001 (Asif et al., Section 2, before
    Definition 2.2): the closed ball, counting duplicates and the query itself
    when it is a row of ``data``.

    Parameters
    ----------
    data : array_like, shape (n, d)
        The records (already scaled by public bounds if the caller wants
        scaled distances).
    queries : array_like, shape (q, d)
        Query points (records of ``data`` or arbitrary points).
    r : float
        Radius, finite and ``>= 0``.
    block_rows : int, default 65536
        Queries are processed in blocks of this many rows (bounds peak memory
        and keeps each C call short).
    cap : int or None, default None
        ``None``: exact counts.  An int ``>= 1``: *saturating* counts
        ``min(B, cap)``, still exact (a returned value ``< cap`` is the exact
        count; ``== cap`` means ``B >= cap``).  Much faster when most balls are
        huge, e.g. in dense data where ``B`` is close to ``n``.
    workers : int, default -1
        Threads for the KD-tree queries or the blocked products (``-1``: all
        cores).
    method : {"auto", "kdtree", "blocked"}, default "auto"
        How to count; every method returns the same numbers (Notes).
        ``"auto"``: ``"blocked"`` when ``d >= 8`` (KD-trees lose their
        pruning power in high dimension: N = 10^5 records in 10-D took
        minutes), else ``"kdtree"``.
    weights : array_like of int, shape (n,), optional
        Multiplicity of each data row (``>= 1``): the rows of ``data`` are
        then distinct points standing for ``weights[i]`` copies each
        (:class:`PointMultiset`), and the result is the number of *copies*
        within ``r`` -- the same number as over the expanded rows.  Memory
        and time grow with the distinct points, not with the copies.

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(q,)``.

    Raises
    ------
    ValueError
        On malformed arrays, ``r < 0`` or non-finite, ``cap < 1``, weights
        that are not one integer ``>= 1`` per data row.

    Notes
    -----
    Exact counts use ``cKDTree.query_ball_point(..., return_length=True)``
    (C loops, no per-record Python).  Saturating counts avoid visiting huge
    balls, using only sound bounds:

    1. *Pivots* (when there are more queries than pivots).  For up to 2048
       evenly strided data rows ``p`` the distance
       ``rho_p`` to the ``cap``-th nearest data row is found (KD-tree k-NN,
       cost ``O(cap log n)`` each).  For a query ``q`` the ``cap`` rows nearest
       to ``p`` all lie within ``d(q, p) + rho_p`` of ``q`` (triangle
       inequality), so if ``d(q, p) + rho_p <= r (1 - 1e-9)`` for one of the
       8 pivots nearest to ``q`` then ``B >= cap``.
    2. Remaining queries: the ``cap``-th nearest-neighbour distance decides
       ``B >= cap`` (again with the safety margin), and queries not decided
       get the exact closed-ball count (which is then small or near ``cap``).

    The pivots are deterministic (no randomness) and only affect speed; the
    result always equals ``min(exact_count, cap)`` up to the ``1e-9`` relative
    margin, which can only send a query to the exact path, never change its
    count.

    With ``weights`` (KD-tree method) every pair is decided by its
    point-to-point squared distance in cKDTree's own summation order
    (:func:`_sqdist_ckdtree`) against ``r * r``, as cKDTree decides the pairs
    it checks; candidates come from k-NN queries (saturating counts: the
    ``min(cap, m)`` nearest distinct points, whose copies reach ``cap`` as
    soon as those within ``r`` weigh ``cap``) or from a sparse distance
    matrix at a radius ``1e-9`` above ``r`` (exact counts, in blocks of
    bounded pair count), so rounding in the tree's pruning cannot lose a
    pair (:func:`_weighted_kdtree_counts`).  The blocked method adds the
    weights of the pairs it finds instead of counting them.

    ``method="blocked"`` (high dimension) computes squared distances for
    blocks of 256 queries x 1024 data rows with one matrix product of
    augmented rows, ``[q, 1, |q|^2] . [-2x, |x|^2, 1]``:

    * *Order.*  Data and queries are put in KD-tree leaf order (spatially
      coherent blocks).  For each query block the data blocks are scanned in
      order of a lower bound on their distance (``|q - c| - rho``, centroid
      ``c``, radius ``rho``, triangle inequality; the bound is lowered by a
      rounding-error bound before use), a block is skipped for a query only
      when that bound exceeds ``r (1 + 1e-6)``, and a query leaves the scan as
      soon as its count reaches ``cap`` -- so most queries stop after a few
      blocks and only queries with fewer than ``cap`` rows within ``r`` see
      (nearly) all the data.
    * *Exactness.*  With ``tol = 8 (d + 4) eps_mach (|q|^2 + max |x|^2 + r^2)``
      (a generous bound on the rounding error of the product and of
      cKDTree's own sum), a pair with product value ``<= r^2 - tol`` is
      inside and ``> r^2 + tol`` outside for cKDTree as well; the (rare)
      pairs in between are re-evaluated with cKDTree's own summation order
      (:func:`_sqdist_ckdtree`) and compared with ``r * r`` as cKDTree does.
      The counts therefore equal the KD-tree's on every pair it decides by its
      point-to-point distance (tests compare both on random and on tie-heavy
      integer data).  BLAS is limited to one thread inside the call
      (``threadpoolctl``) and query blocks run on ``workers`` threads:
      multi-threaded BLAS on these thin products was ~10x slower on a
      loaded 2-core machine.
    """
    D = _as_matrix(data, "data")
    Q = _as_matrix(queries, "queries", ncols=D.shape[1])
    r = _check_radius(r)
    if isinstance(block_rows, bool) or not isinstance(block_rows, numbers.Integral) or block_rows < 1:
        raise ValueError(f"block_rows must be an int >= 1, got {block_rows!r}")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1):
        raise ValueError(f"cap must be None or an int >= 1, got {cap!r}")
    if method not in ("auto", "kdtree", "blocked"):
        raise ValueError(f"method must be 'auto', 'kdtree' or 'blocked', got {method!r}")
    w = None if weights is None else _check_weights(weights, D.shape[0])
    nq = Q.shape[0]
    out = np.zeros(nq, dtype=np.int64)
    if nq == 0 or D.shape[0] == 0:
        return out
    total = D.shape[0] if w is None else int(w.sum())
    exact_cap = None if cap is None or cap > total else int(cap)
    if method == "blocked" or (method == "auto" and D.shape[1] >= _BLOCKED_MIN_DIM):
        return _blocked_counts(D, Q, r, exact_cap, workers, weights=w)
    if w is not None:
        return _weighted_kdtree_counts(D, w, Q, r, exact_cap, block_rows, workers)
    tree = _spatial.cKDTree(D, balanced_tree=False)
    if cap is None or cap > D.shape[0]:
        return _exact_counts(tree, Q, r, block_rows, workers)
    cap = int(cap)
    undecided = np.ones(nq, dtype=bool)
    safe_r = r * (1.0 - _MARGIN)

    # 1. pivot bounds (only when there are more queries than pivots: each pivot costs one k-NN query)
    n = D.shape[0]
    n_piv = min(n, 2048)
    if nq > n_piv:
        piv_idx = np.unique(np.linspace(0, n - 1, n_piv).round().astype(np.int64))
        rho = _kth_nn_distance(tree, D[piv_idx], cap, r, workers)
        good = np.isfinite(rho) & (rho <= safe_r)
    else:
        good = np.zeros(0, dtype=bool)
    if np.any(good):
        pivots = D[piv_idx[good]]
        rho_g = rho[good]
        ptree = _spatial.cKDTree(pivots, balanced_tree=False)
        kp = min(8, pivots.shape[0])
        for s in range(0, nq, block_rows):
            dist, idx = ptree.query(Q[s : s + block_rows], k=kp, workers=workers)
            dist = dist.reshape(dist.shape[0], -1)
            idx = idx.reshape(idx.shape[0], -1)
            bound = np.min(dist + rho_g[idx], axis=1)
            undecided[s : s + block_rows] = ~(bound <= safe_r)
    # 2. k-NN distance for the rest, then exact counts below cap
    rest = np.flatnonzero(undecided)
    if rest.size:
        kth = _kth_nn_distance(tree, Q[rest], cap, r, workers)
        sat = np.isfinite(kth) & (kth <= safe_r)
        undecided[rest[sat]] = False
    out[~undecided] = cap
    rest = np.flatnonzero(undecided)
    if rest.size:
        out[rest] = np.minimum(_exact_counts(tree, Q[rest], r, block_rows, workers), cap)
    return out


def _exact_counts(tree: _spatial.cKDTree, Q: np.ndarray, r: float, block_rows: int, workers: int) -> np.ndarray:
    """Exact closed-ball counts for every row of ``Q`` (blocked KD-tree calls)."""
    out = np.empty(Q.shape[0], dtype=np.int64)
    for s in range(0, Q.shape[0], block_rows):
        out[s : s + block_rows] = tree.query_ball_point(
            Q[s : s + block_rows], r, p=2.0, return_length=True, workers=workers
        )
    return out


def _kth_nn_distance(tree: _spatial.cKDTree, Q: np.ndarray, k: int, r: float, workers: int, block_rows: int = 4096) -> np.ndarray:
    """Distance from each row of ``Q`` to its ``k``-th nearest data row (inf if > r)."""
    out = np.empty(Q.shape[0], dtype=np.float64)
    ub = np.nextafter(r, np.inf) * (1 + 1e-9) if r > 0 else np.nextafter(0.0, 1.0)
    for s in range(0, Q.shape[0], block_rows):
        dist, _ = tree.query(Q[s : s + block_rows], k=[k], distance_upper_bound=ub, workers=workers)
        out[s : s + block_rows] = dist[:, 0]
    return out


# ---------------------------------------------------------------------------
# weighted counting (distinct points with multiplicities)
# ---------------------------------------------------------------------------

#: Relative widening of ``r`` for candidate pairs of the weighted path: every pair within ``r`` as cKDTree
#: evaluates it lies within this radius whatever the rounding of the tree's pruning, and every candidate is then
#: decided exactly (:func:`_sqdist_ckdtree` against ``r * r``).
_WIDEN = 1e-9
#: Pairs held at once by the exact weighted path (each: two indices and a distance, 24 bytes; bounds its memory).
_PAIR_BLOCK = 1 << 20


def _widened(r: float) -> float:
    """The candidate radius ``r (1 + 1e-9)``, at least ``1e-150`` (its square must not underflow to 0)."""
    return max(r * (1.0 + _WIDEN), 1e-150)


def _check_weights(weights, n: int) -> np.ndarray:
    """Multiplicities as int64, one integer ``>= 1`` per data row."""
    w = np.asarray(weights)
    if w.shape != (n,) or not (np.issubdtype(w.dtype, np.integer) or w.dtype == bool) or (n and int(w.min()) < 1):
        raise ValueError("weights must be one integer >= 1 per data row")  # no size: it is data-derived
    return np.ascontiguousarray(w, dtype=np.int64)


def _int_bincount(idx: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """``out[i] = sum(w[idx == i])`` in exact int64 arithmetic."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, idx, w)
    return out


def _inside(D: np.ndarray, Q: np.ndarray, qi: np.ndarray, dj: np.ndarray, r2: float) -> np.ndarray:
    """Whether data row ``dj`` is within ``r`` of query ``qi``, pair by pair, as cKDTree decides it."""
    return _sqdist_ckdtree(Q[qi], D[dj]) <= r2


def _weighted_exact(tree: _spatial.cKDTree, D: np.ndarray, w: np.ndarray, Q: np.ndarray, r: float, workers: int) -> np.ndarray:
    """Exact weighted closed-ball counts: candidate pairs at radius ``r (1 + 1e-9)``, each decided exactly.

    Queries go in blocks whose candidate pairs number at most :data:`_PAIR_BLOCK`
    (a single query with more candidates is its own block), so memory is bounded
    by the block, not by the data.
    """
    out = np.zeros(Q.shape[0], dtype=np.int64)
    if Q.shape[0] == 0:
        return out
    r2 = r * r
    r_hi = _widened(r)
    cand = np.asarray(tree.query_ball_point(Q, r_hi, return_length=True, workers=workers), dtype=np.int64)
    ends = np.cumsum(cand)
    start = 0
    while start < Q.shape[0]:
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + _PAIR_BLOCK, side="right")))
        Qb = Q[start:stop]
        pairs = _spatial.cKDTree(Qb, balanced_tree=False).sparse_distance_matrix(tree, r_hi, output_type="ndarray")
        if pairs.size:
            qi = pairs["i"].astype(np.int64)
            dj = pairs["j"].astype(np.int64)
            keep = _inside(D, Qb, qi, dj, r2)
            out[start:stop] = _int_bincount(qi[keep], w[dj[keep]], stop - start)
        start = stop
    return out


def _weighted_kdtree_counts(D: np.ndarray, w: np.ndarray, Q: np.ndarray, r: float, cap: int | None,
                            block_rows: int, workers: int) -> np.ndarray:
    """Weighted (saturating) closed-ball counts over distinct points ``D`` with multiplicities ``w``.

    ``cap`` given: the ``kk = min(cap, m)`` nearest distinct points of each
    query (k-NN, bounded at ``r (1 + 1e-9)``) are decided exactly; if those
    inside weigh ``>= cap`` the query saturates; if the ``kk``-th lies beyond
    the widened radius (or fewer than ``kk`` were found) every point within
    ``r`` was among them and their weight is the exact count; otherwise (a
    point in the thin band just outside ``r`` among the ``kk``) the query is
    counted exactly (:func:`_weighted_exact`).  Memory: the tree over the
    distinct points plus ``block_rows x kk`` neighbours.
    """
    tree = _spatial.cKDTree(D, balanced_tree=False)
    if cap is None:
        return _weighted_exact(tree, D, w, Q, r, workers)
    nq = Q.shape[0]
    out = np.zeros(nq, dtype=np.int64)
    undecided = np.zeros(nq, dtype=bool)
    r2 = r * r
    r_hi = _widened(r)
    kk = int(min(cap, D.shape[0]))
    rows = max(1, min(int(block_rows), (1 << 22) // kk))
    for s in range(0, nq, rows):
        Qb = Q[s : s + rows]
        dist, idx = tree.query(Qb, k=list(range(1, kk + 1)), distance_upper_bound=np.nextafter(r_hi, np.inf),
                               workers=workers)
        cand = np.isfinite(dist) & (dist <= r_hi)
        qi, pos = np.nonzero(cand)
        dj = idx[qi, pos]
        keep = _inside(D, Qb, qi, dj, r2)
        got = _int_bincount(qi[keep], w[dj[keep]], Qb.shape[0])
        complete = ~cand[:, -1]  # the kk-th nearest is beyond the widened radius, or absent
        sat = got >= cap
        out[s : s + rows] = np.where(sat, cap, got)
        undecided[s : s + rows] = ~(sat | complete)
    rest = np.flatnonzero(undecided)
    if rest.size:
        out[rest] = np.minimum(_weighted_exact(tree, D, w, Q[rest], r, workers), cap)
    return out


# ---------------------------------------------------------------------------
# bounded-memory forms: distinct points with multiplicities, chunk sources
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PointMultiset:
    """A table as its distinct points and their multiplicities (a multiset of points).

    Attributes
    ----------
    points : numpy.ndarray, shape (m, d)
        Distinct float64 rows (``-0.0`` stored as ``0.0``), in an order fixed
        by their bytes.
    weights : numpy.ndarray, shape (m,)
        int64 multiplicities ``>= 1``: how many records have that point.

    Notes
    -----
    Build with :meth:`of_rows` (from records) or :meth:`aggregate` (from
    already aggregated rows, e.g. ``SELECT cols, count(*) ... GROUP BY cols``
    scaled afterwards: rows that become equal after scaling are merged).
    Every record of a point has the same neighbours, so per-record statistics
    are per-point statistics weighted by the multiplicity; memory grows with
    the number of distinct points, not with the number of records.  Exact
    statistics of the data: internal only (DESIGN.md rule 6).
    """

    points: np.ndarray
    weights: np.ndarray

    @classmethod
    def of_rows(cls, X, name: str = "X", return_inverse: bool = False):
        """The multiset of the rows of ``X`` (optionally with each row's point index)."""
        A = _as_matrix(X, name)
        return cls.aggregate(A, np.ones(A.shape[0], dtype=np.int64), name, return_inverse)

    @classmethod
    def aggregate(cls, points, weights, name: str = "points", return_inverse: bool = False):
        """Merge equal rows of ``points`` (float64 value equality), adding their ``weights``.

        Parameters
        ----------
        points : array_like, shape (n, d)
        weights : array_like of int, shape (n,)
            ``>= 1`` each.
        name : str
            Argument name for error messages.
        return_inverse : bool
            Also return, for each input row, the index of its distinct point.

        Returns
        -------
        PointMultiset, or (PointMultiset, numpy.ndarray)
        """
        A = _as_matrix(points, name)
        w = _check_weights(weights, A.shape[0])
        if A.shape[0] == 0:
            out = cls(np.zeros((0, A.shape[1])), np.zeros(0, dtype=np.int64))
            return (out, np.zeros(0, dtype=np.int64)) if return_inverse else out
        keys = A.view(np.dtype((np.void, A.dtype.itemsize * A.shape[1]))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        out = cls(np.ascontiguousarray(A[first]), _int_bincount(inverse, w, first.size))
        return (out, inverse) if return_inverse else out

    @property
    def n(self) -> int:
        """int: number of records (sum of the multiplicities)."""
        return int(self.weights.sum())

    @property
    def d(self) -> int:
        """int: number of coordinates."""
        return int(self.points.shape[1])

    def expand(self, idx=None) -> np.ndarray:
        """The records of the points ``idx`` (all by default), each repeated by its multiplicity."""
        if idx is None:
            return np.repeat(self.points, self.weights, axis=0)
        idx = np.asarray(idx, dtype=np.int64)
        return np.repeat(self.points[idx], self.weights[idx], axis=0)


@dataclass(frozen=True, eq=False)
class ArrayChunks:
    """An in-memory table as a chunk source for :func:`chunked_ball_counts` (one chunk by default).

    A chunk source has ``n_chunks`` and ``chunk(i)`` (float64 ``(n_i, d)``,
    already scaled); a warehouse export implements the same two members
    (:class:`dpcore.steps.aiq.ScaledPartitions`), so the in-memory table is
    the one-chunk case of the chunked path.
    """

    data: np.ndarray
    rows: int

    @classmethod
    def of(cls, data, rows: int | None = None) -> "ArrayChunks":
        """``data`` cut into chunks of ``rows`` rows (``None``: one chunk)."""
        D = _as_matrix(data, "data")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, numbers.Integral) or rows < 1):
            raise ValueError(f"rows must be None or an int >= 1, got {rows!r}")
        return cls(D, max(1, D.shape[0]) if rows is None else int(rows))

    @property
    def n_chunks(self) -> int:
        """int: number of chunks."""
        return len(range(0, self.data.shape[0], self.rows))

    def chunk(self, i: int) -> np.ndarray:
        """Rows of chunk ``i``."""
        return self.data[i * self.rows : (i + 1) * self.rows]


def few_query_counts(data, queries, r) -> tuple[np.ndarray, np.ndarray]:
    """Exact ball counts and multiplicities of a few queries by one brute-force pass per query.

    Seed 001 (Asif et al.), Section 2: ``B_x(i, r)`` (closed ball, duplicates
    and the query itself counted) and ``x_i`` (exact equality) without a
    KD-tree: for ``q`` queries over ``n`` rows the work is ``O(n q d)``
    vectorised numpy, against ``O(n log n)`` to build a tree that answers only
    ``q`` queries.

    Parameters
    ----------
    data : array_like, shape (n, d)
    queries : array_like, shape (q, d)
        A few query points (one pass over ``data`` each).
    r : float
        Radius ``>= 0``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        int64 exact ``b`` and ``xi``, shape ``(q,)``: the numbers of
        :func:`ball_counts` (any method) and :func:`multiplicities`.

    Notes
    -----
    Every pair is decided by its squared distance summed in cKDTree's own
    order (:func:`_sqdist_ckdtree`: four partial sums over ``j = k, k + 4,
    ...``, then the remaining coordinates), compared with ``r * r`` as
    cKDTree compares it, so the counts equal the KD-tree's on every pair it
    decides by its point-to-point distance (the standard of the ``"blocked"``
    method, :func:`ball_counts`, Notes; tested on random and on tie-heavy
    integer data against the KD-tree). The multiplicity counts the rows
    equal to the query among those at squared distance ``0`` (a superset:
    equal rows have difference exactly 0; a squared difference that
    underflows to 0 is rejected by the equality test).
    """
    D = _as_matrix(data, "data")
    Q = _as_matrix(queries, "queries", ncols=D.shape[1])
    r = _check_radius(r)
    r2 = r * r  # cKDTree compares d^2 <= r * r (p = 2)
    nq, d = Q.shape[0], D.shape[1]
    b = np.zeros(nq, dtype=np.int64)
    xi = np.zeros(nq, dtype=np.int64)
    if nq == 0 or D.shape[0] == 0:
        return b, xi
    cols = np.ascontiguousarray(D.T)  # one contiguous column per coordinate
    full = 4 * (d // 4)
    for i in range(nq):  # a few queries; every row of a query is handled by whole-column operations
        sq = [np.square(cols[j] - Q[i, j]) for j in range(d)]
        if full:
            acc = [sq[k] for k in range(4)]  # scipy's accumulators start at +0.0: adding a square to it is exact
            for j in range(4, full):
                acc[j % 4] = acc[j % 4] + sq[j]
            s = ((acc[0] + acc[1]) + acc[2]) + acc[3]
        else:
            s = sq[0]
        for j in range(max(full, 1), d):
            s = s + sq[j]
        b[i] = np.count_nonzero(s <= r2)
        zero = np.flatnonzero(s == 0.0)
        if zero.size:
            xi[i] = np.count_nonzero(np.all(D[zero] == Q[i], axis=1))
    return b, xi


def _chunk_ball_counts(item) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's (saturated) ball counts and multiplicities of the queries (a mapper's unit of work).

    Up to :data:`_FEW_QUERIES` queries by :func:`few_query_counts` (no KD-tree), more by
    :func:`ball_counts` and :func:`multiplicities`; the same numbers either way.
    """
    source, i, Q, r, cap = item
    X = _as_matrix(source.chunk(i), "chunk")
    if X.shape[0] == 0:
        return np.zeros(Q.shape[0], dtype=np.int64), np.zeros(Q.shape[0], dtype=np.int64)
    if Q.shape[0] <= _FEW_QUERIES:
        b, xi = few_query_counts(X, Q, r)
        return (b if cap is None else np.minimum(b, cap)), xi
    return ball_counts(X, Q, r, cap=cap), multiplicities(X, Q)


def chunked_ball_counts(source, queries, r, *, cap: int | None = None, mapper=serial_map) -> tuple[np.ndarray, np.ndarray]:
    """Ball counts ``B_x(i, r)`` and multiplicities ``x_i`` of query points over a table read chunk by chunk.

    Seed 001 (Asif et al.), Section 2: ``B_x(i, r)`` (closed ball, duplicates
    and the query itself counted) and ``x_i`` (exact equality), summed over
    the chunks of ``source``; the same numbers as :func:`ball_counts` and
    :func:`multiplicities` over the whole table.

    Parameters
    ----------
    source : ArrayChunks or a chunk source
        ``n_chunks`` and ``chunk(i)`` (float64 rows scaled like the queries).
    queries : array_like, shape (q, d)
        A few query points (every chunk is compared with all of them).
    r : float
        Radius ``>= 0``.
    cap : int or None
        Saturation: ``min(B, cap)`` (each chunk is counted saturated at
        ``cap``; the sum saturated again is ``min(B, cap)`` because a chunk
        reaching ``cap`` means ``B >= cap``).
    mapper : callable
        ``mapper(fn, items)`` (:func:`dpcore.runtime.chunks.serial_map`; a Dask mapper
        runs the chunks on workers); results are combined here.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        int64 ``b`` and ``xi``, shape ``(q,)``.  Memory: one chunk (and its
        KD-tree when there are more than :data:`_FEW_QUERIES` queries; a few
        queries are counted by :func:`few_query_counts`, no tree) at a time
        (per worker), plus ``O(q)``; never the whole table.
    """
    Q = _as_matrix(queries, "queries")
    r = _check_radius(r)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1):
        raise ValueError(f"cap must be None or an int >= 1, got {cap!r}")
    b = np.zeros(Q.shape[0], dtype=np.int64)
    xi = np.zeros(Q.shape[0], dtype=np.int64)
    if Q.shape[0] == 0:
        return b, xi
    for bi, xii in mapper(_chunk_ball_counts, [(source, i, Q, r, cap) for i in range(source.n_chunks)]):
        b += bi
        xi += xii
    return (b if cap is None else np.minimum(b, cap)), xi


# ---------------------------------------------------------------------------
# blocked exact counting (high dimension)
# ---------------------------------------------------------------------------


def _sqdist_ckdtree(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise squared distances ``|A[i] - B[i]|^2`` in cKDTree's summation order.

    Replicates scipy's ``sqeuclidean_distance_double`` (the point-to-point
    distance of ``cKDTree`` for ``p = 2``): four partial sums over the
    coordinates ``j = 0, 4, 8, ...``, ``1, 5, 9, ...`` (and so on) for the
    first ``4 floor(d / 4)`` coordinates, added left to right, then the
    remaining coordinates one by one.  Used only on the few pairs whose
    distance is within rounding of ``r`` so that the blocked path decides
    them exactly as the KD-tree does.
    """
    diff = A - B
    sq = diff * diff
    d = sq.shape[1]
    full = 4 * (d // 4)
    if full:
        acc = np.zeros((sq.shape[0], 4))
        for i in range(0, full, 4):
            acc += sq[:, i : i + 4]
        s = ((acc[:, 0] + acc[:, 1]) + acc[:, 2]) + acc[:, 3]
    else:
        s = np.zeros(sq.shape[0])
    for i in range(full, d):
        s = s + sq[:, i]
    return s


def _tree_order(A: np.ndarray) -> np.ndarray:
    """A spatially coherent permutation of the rows of ``A`` (KD-tree leaf order)."""
    if A.shape[0] <= 1:
        return np.arange(A.shape[0])
    return _spatial.cKDTree(A, leafsize=64, balanced_tree=True, compact_nodes=False).indices.astype(np.int64)


def _blocked_counts(D: np.ndarray, Q: np.ndarray, r: float, cap: int | None, workers: int = -1,
                    q_block: int = 256, d_block: int = 1024, weights: np.ndarray | None = None) -> np.ndarray:
    """Exact (saturating) closed-ball counts by blocked matrix products.

    Same answers as :func:`_exact_counts` (``min(count, cap)``); see
    :func:`ball_counts`, Notes, for the method and the exactness argument.
    With ``weights`` (int64, one per row of ``D``) each pair adds its data
    row's weight instead of 1.
    """
    from concurrent.futures import ThreadPoolExecutor

    from dpcore.runtime.blas_threads import one_blas_thread

    n, d = D.shape
    nq = Q.shape[0]
    limit = (n if weights is None else int(weights.sum())) + 1 if cap is None else int(cap)
    r2 = r * r  # cKDTree compares d^2 <= r * r (p = 2)
    eps = float(np.finfo(np.float64).eps)
    gam = 8.0 * (d + 4) * eps  # generous bound factor for the rounding error of a length-(d+2) dot product
    dord = _tree_order(D)
    Ds = D[dord]
    ws = None if weights is None else weights[dord]
    dn = np.einsum("ij,ij->i", Ds, Ds)
    # augmented rows: [q, 1, |q|^2] . [-2 x, |x|^2, 1] = |q - x|^2 in one matrix product
    Da = np.hstack([-2.0 * Ds, dn[:, None], np.ones((n, 1))])
    starts = np.arange(0, n, d_block)
    nb = starts.size
    cent = np.empty((nb, d))
    rad = np.empty(nb)
    dn_max = np.empty(nb)
    for b, s in enumerate(starts):
        blk = Ds[s : s + d_block]
        c = blk.mean(axis=0)
        cent[b] = c
        rad[b] = math.sqrt(float(np.max(np.sum((blk - c) ** 2, axis=1))))
        dn_max[b] = float(dn[s : s + d_block].max())
    cn = np.einsum("ij,ij->i", cent, cent)
    qord = _tree_order(Q)
    out = np.zeros(nq, dtype=np.int64)
    # a block is skipped for a query only when a lower bound on the distance exceeds r with a margin
    prune_r = r * (1 + 1e-6) + 1e-12

    def run(qs: int) -> None:
        qi = qord[qs : qs + q_block]
        Qb = Q[qi]
        qn = np.einsum("ij,ij->i", Qb, Qb)
        Qa = np.hstack([Qb, np.ones((qi.size, 1)), qn[:, None]])
        # |q - c| - rad <= |q - x| for every x of the block (triangle inequality); the
        # rounding error of the squared centroid distance is subtracted before the root
        cd2 = cn[None, :] + qn[:, None] - 2.0 * (Qb @ cent.T) - gam * (cn[None, :] + qn[:, None])
        lb = np.sqrt(np.maximum(cd2, 0.0)) * (1 - 1e-9) - rad[None, :] * (1 + 1e-9)
        order = np.argsort(lb.mean(axis=0), kind="stable")
        cnt = np.zeros(qi.size, dtype=np.int64)
        for b in order:
            act = np.flatnonzero((cnt < limit) & (lb[:, b] <= prune_r))
            if act.size == 0:
                if not np.any(cnt < limit):
                    break
                continue
            s = starts[b]
            G = Qa[act] @ Da[s : s + d_block].T
            tol = gam * (float(qn[act].max()) + dn_max[b] + r2)
            lo, hi = r2 - tol, r2 + tol
            below = G <= lo
            rows = np.flatnonzero(np.count_nonzero(G <= hi, axis=1) - np.count_nonzero(below, axis=1))
            if ws is None:
                c_lo = np.count_nonzero(below, axis=1)
            else:
                c_lo = below.astype(np.int64) @ ws[s : s + d_block]
            if rows.size:  # pairs within rounding of r: decide them as cKDTree does
                ii, jj = np.nonzero((G[rows] > lo) & (G[rows] <= hi))
                ii = rows[ii]
                inside = _sqdist_ckdtree(Qb[act[ii]], Ds[s + jj]) <= r2
                if ws is None:
                    c_lo = c_lo + np.bincount(ii[inside], minlength=act.size)
                else:
                    c_lo = c_lo + _int_bincount(ii[inside], ws[s + jj[inside]], act.size)
            cnt[act] += c_lo
        out[qi] = np.minimum(cnt, limit)

    nw = (os.cpu_count() or 1) if workers == -1 else max(1, int(workers))
    with one_blas_thread():  # shared with concurrent users (dpcore.runtime.blas_threads)
        if nw == 1:
            for qs in range(0, nq, q_block):
                run(qs)
        else:
            with ThreadPoolExecutor(max_workers=nw) as ex:
                list(ex.map(run, range(0, nq, q_block)))
    return out


#: :func:`multiplicities` compares rows with each query directly up to this many queries (no sort of the data).
_FEW_QUERIES = 32


def multiplicities(data, queries) -> np.ndarray:
    """Number of data rows exactly equal to each query (``x_i`` of seed 001).

    Parameters
    ----------
    data : array_like, shape (n, d)
        The records.
    queries : array_like, shape (q, d)
        Query points; an arbitrary point not in the data gets 0.

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(q,)``.

    Raises
    ------
    ValueError
        On malformed arrays or NaN/inf values.

    Notes
    -----
    Exact value equality (``-0.0 == 0.0``), computed by sorting the rows'
    byte keys once (``O(n log n)``) and binary-searching each query, or, for
    at most :data:`_FEW_QUERIES` queries (a chunk of a table against a few
    query points), by comparing every row with each query (``O(q n d)``,
    no sort); no distances are involved, so values closer than float
    underflow are not confused.
    """
    D = _as_matrix(data, "data")
    Q = _as_matrix(queries, "queries", ncols=D.shape[1])
    if Q.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if D.shape[0] == 0:
        return np.zeros(Q.shape[0], dtype=np.int64)
    if Q.shape[0] <= _FEW_QUERIES:
        return np.array([np.count_nonzero(np.all(D == q, axis=1)) for q in Q], dtype=np.int64)
    vt = np.dtype((np.void, D.dtype.itemsize * D.shape[1]))
    keys = D.view(vt).ravel()
    qkeys = Q.view(vt).ravel()
    uniq, counts = np.unique(keys, return_counts=True)
    pos = np.searchsorted(uniq, qkeys)
    pos_c = np.minimum(pos, uniq.size - 1)
    hit = uniq[pos_c] == qkeys
    return np.where(hit, counts[pos_c], 0).astype(np.int64)


def pairwise_ball_max(points, radius) -> int:
    """Largest number of ``points`` within distance ``radius`` of one of them.

    Parameters
    ----------
    points : array_like, shape (m, d)
        Public points.
    radius : float
        ``>= 0``.

    Returns
    -------
    int
        ``max_j #{l : d(p_l, p_j) <= radius}`` (counts ``p_j`` itself and
        duplicates); 0 for no points.
    """
    P = _as_matrix(points, "points")
    rad = _check_radius(radius)
    if P.shape[0] == 0:
        return 0
    if P.shape[0] <= _PAIRWISE_MAX_POINTS:  # a spec's few public points: no KD-tree (scipy stays unloaded)
        r2 = rad * rad  # cKDTree compares d^2 <= r * r (p = 2), d^2 summed in its order (_sqdist_ckdtree)
        best = 0
        for start in range(0, P.shape[0], _PAIRWISE_BLOCK):
            blk = P[start:start + _PAIRWISE_BLOCK]
            a = np.repeat(blk, P.shape[0], axis=0)
            b = np.tile(P, (blk.shape[0], 1))
            within = (_sqdist_ckdtree(a, b) <= r2).reshape(blk.shape[0], P.shape[0])
            best = max(best, int(within.sum(axis=1).max()))
        return best
    return int(np.max(_spatial.cKDTree(P).query_ball_point(P, rad, return_length=True)))


#: Up to this many points, :func:`pairwise_ball_max` compares every pair directly (in blocks of
#: :data:`_PAIRWISE_BLOCK` rows) instead of building a KD-tree.
_PAIRWISE_MAX_POINTS = 2048
_PAIRWISE_BLOCK = 64
