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
"""
from __future__ import annotations

import math
import numbers
import os

import numpy as np
from scipy.spatial import cKDTree

__all__ = [
    "scale_by_bounds",
    "ball_counts",
    "multiplicities",
    "pairwise_ball_max",
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
                method: str = "auto") -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(q,)``.

    Raises
    ------
    ValueError
        On malformed arrays, ``r < 0`` or non-finite, ``cap < 1``.

    Notes
    -----
    Exact counts use ``cKDTree.query_ball_point(..., return_length=True)``
    (C loops, no per-record Python).  Saturating counts avoid visiting huge
    balls, using only sound bounds:

    1. *Pivots.*  For up to 2048 evenly strided data rows ``p`` the distance
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
    nq = Q.shape[0]
    out = np.zeros(nq, dtype=np.int64)
    if nq == 0 or D.shape[0] == 0:
        return out
    if method == "blocked" or (method == "auto" and D.shape[1] >= _BLOCKED_MIN_DIM):
        return _blocked_counts(D, Q, r, None if cap is None or cap > D.shape[0] else int(cap), workers)
    tree = cKDTree(D, balanced_tree=False)
    if cap is None or cap > D.shape[0]:
        return _exact_counts(tree, Q, r, block_rows, workers)
    cap = int(cap)
    undecided = np.ones(nq, dtype=bool)
    safe_r = r * (1.0 - _MARGIN)

    # 1. pivot bounds
    n = D.shape[0]
    n_piv = min(n, 2048)
    piv_idx = np.unique(np.linspace(0, n - 1, n_piv).round().astype(np.int64))
    rho = _kth_nn_distance(tree, D[piv_idx], cap, r, workers)
    good = np.isfinite(rho) & (rho <= safe_r)
    if np.any(good):
        pivots = D[piv_idx[good]]
        rho_g = rho[good]
        ptree = cKDTree(pivots, balanced_tree=False)
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


def _exact_counts(tree: cKDTree, Q: np.ndarray, r: float, block_rows: int, workers: int) -> np.ndarray:
    """Exact closed-ball counts for every row of ``Q`` (blocked KD-tree calls)."""
    out = np.empty(Q.shape[0], dtype=np.int64)
    for s in range(0, Q.shape[0], block_rows):
        out[s : s + block_rows] = tree.query_ball_point(
            Q[s : s + block_rows], r, p=2.0, return_length=True, workers=workers
        )
    return out


def _kth_nn_distance(tree: cKDTree, Q: np.ndarray, k: int, r: float, workers: int, block_rows: int = 4096) -> np.ndarray:
    """Distance from each row of ``Q`` to its ``k``-th nearest data row (inf if > r)."""
    out = np.empty(Q.shape[0], dtype=np.float64)
    ub = np.nextafter(r, np.inf) * (1 + 1e-9) if r > 0 else np.nextafter(0.0, 1.0)
    for s in range(0, Q.shape[0], block_rows):
        dist, _ = tree.query(Q[s : s + block_rows], k=[k], distance_upper_bound=ub, workers=workers)
        out[s : s + block_rows] = dist[:, 0]
    return out


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
    return cKDTree(A, leafsize=64, balanced_tree=True, compact_nodes=False).indices.astype(np.int64)


def _blocked_counts(D: np.ndarray, Q: np.ndarray, r: float, cap: int | None, workers: int = -1,
                    q_block: int = 256, d_block: int = 1024) -> np.ndarray:
    """Exact (saturating) closed-ball counts by blocked matrix products.

    Same answers as :func:`_exact_counts` (``min(count, cap)``); see
    :func:`ball_counts`, Notes, for the method and the exactness argument.
    """
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    n, d = D.shape
    nq = Q.shape[0]
    limit = n + 1 if cap is None else int(cap)
    r2 = r * r  # cKDTree compares d^2 <= r * r (p = 2)
    eps = float(np.finfo(np.float64).eps)
    gam = 8.0 * (d + 4) * eps  # generous bound factor for the rounding error of a length-(d+2) dot product
    dord = _tree_order(D)
    Ds = D[dord]
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
            c_lo = np.count_nonzero(G <= lo, axis=1)
            rows = np.flatnonzero(np.count_nonzero(G <= hi, axis=1) - c_lo)
            if rows.size:  # pairs within rounding of r: decide them as cKDTree does
                ii, jj = np.nonzero((G[rows] > lo) & (G[rows] <= hi))
                ii = rows[ii]
                inside = _sqdist_ckdtree(Qb[act[ii]], Ds[s + jj]) <= r2
                c_lo = c_lo + np.bincount(ii[inside], minlength=act.size)
            cnt[act] += c_lo
        out[qi] = np.minimum(cnt, limit)

    nw = (os.cpu_count() or 1) if workers == -1 else max(1, int(workers))
    with threadpool_limits(limits=1, user_api="blas"):
        if nw == 1:
            for qs in range(0, nq, q_block):
                run(qs)
        else:
            with ThreadPoolExecutor(max_workers=nw) as ex:
                list(ex.map(run, range(0, nq, q_block)))
    return out


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
    byte keys once (``O(n log n)``) and binary-searching each query; no
    distances are involved, so values closer than float underflow are not
    confused.
    """
    D = _as_matrix(data, "data")
    Q = _as_matrix(queries, "queries", ncols=D.shape[1])
    if Q.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if D.shape[0] == 0:
        return np.zeros(Q.shape[0], dtype=np.int64)
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
    return int(np.max(cKDTree(P).query_ball_point(P, rad, return_length=True)))
