"""Array-native count-of-counts publishing at census scale (issue 19, "Census scale").

The dict-based path (:meth:`CocoMechanism.publish` with ``sizes_by_leaf``, the
per-node :class:`NodeEstimate` lists and the per-group arrays of
:func:`~dpcore.mechanisms.coco.consistency.top_down`) needs memory
proportional to the number of *groups* per level several times over: 10^8
groups did not fit in 24 GB.  This module keeps everything proportional to
the number of *nodes x (K + 1)* cells instead:

* :func:`level_histograms` — the true H of every node of every level as
  ``(n_nodes, K + 1)`` matrices, built from two flat arrays (each group's leaf
  and size) with ``np.bincount`` over chunks of groups (no group-length int64
  temporary), upper levels by ``np.add.reduceat`` over the hierarchy's
  contiguous child blocks.  **Private** (internal).
* :func:`hc_estimate_rows` — the H_c method's per-node estimate
  (:func:`~dpcore.mechanisms.coco.consistency.hc_estimate`) of every row of a
  noisy matrix, into an int32/int64 matrix (same isotonic call per row, so the
  same result bit for bit).
* :func:`hc_variance_runs` — :func:`~dpcore.mechanisms.coco.consistency.hc_variances`
  of every row at once, one entry per *run* (a node's occupied size with its
  count) instead of one per group.
* :func:`top_down_runs` — :func:`~dpcore.mechanisms.coco.consistency.top_down`
  on runs: the sorted matching and inverse-variance merge of a level act on
  stretches of groups that share their (parent value, parent variance, child
  value, child variance), so the merge is computed once per stretch
  ("piece") and the merged estimates of a level are kept as *segments*
  ``(node, value, variance, count)`` in the order of the groups they stand
  for.  Same arithmetic on the same floats as the per-group code, so the
  same release; time and memory ``O(pieces)``, at most
  ``O(nodes x (K + 1))`` per level, independent of the number of groups.
* :func:`sum_levels` — parent = sum of children, level by level.

Everything except :func:`level_histograms` is post-processing of noisy
measurements and public group counts.  :meth:`CocoMechanism.publish_arrays`
strings them together.
"""
from __future__ import annotations

import numpy as np

from .consistency import HC_VARIANCE_RULES, merge_estimates, round_half_up
from .hierarchy import Hierarchy
from .isotonic import isotonic

__all__ = ["level_histograms", "sum_levels", "hc_estimate_rows", "hc_variance_runs", "top_down_runs",
           "count_dtype", "DEFAULT_GROUP_CHUNK"]

#: Groups per ``np.bincount`` call in :func:`level_histograms` (int64 index temporaries of 8 bytes x chunk).
DEFAULT_GROUP_CHUNK = 1 << 22


def count_dtype(total: int) -> np.dtype:
    """int32 when every count (at most the root's ``G``) fits, else int64."""
    return np.dtype(np.int32) if int(total) <= np.iinfo(np.int32).max else np.dtype(np.int64)


def sum_levels(leaf: np.ndarray, hierarchy: Hierarchy) -> list[np.ndarray]:
    """Every level's matrix from the leaves' (parent = sum of its children, exactly).

    Parameters
    ----------
    leaf : numpy.ndarray
        ``(n_leaves, B)`` integer matrix, rows in ``hierarchy.leaves`` order.

    Returns
    -------
    list of numpy.ndarray
        Per level (root first), ``(n_level, B)`` matrices of ``leaf``'s dtype.
    """
    L = hierarchy.levels
    out: list[np.ndarray] = [None] * L  # type: ignore[list-item]
    out[L - 1] = leaf
    for lv in range(L - 2, -1, -1):
        out[lv] = _sum_rows(out[lv + 1], hierarchy.parent_index(lv + 1), len(hierarchy.nodes_at(lv)))
    return out


def _sum_rows(M: np.ndarray, pidx: np.ndarray, n_parents: int) -> np.ndarray:
    """Per parent, the sum of its children's rows (integers; exact in M's dtype when the totals fit).

    A sparse 0/1 (parents x children) matrix product: ``np.add.reduceat``
    along axis 0 is ~10x slower on ``(30,000, 1,001)`` matrices.
    """
    from scipy import sparse
    S = sparse.csr_matrix((np.ones(len(pidx), dtype=M.dtype), (np.asarray(pidx), np.arange(len(pidx)))),
                          shape=(n_parents, len(pidx)))
    out = np.asarray(S @ M.reshape(len(pidx), -1), dtype=M.dtype)
    return out.reshape((n_parents,) + M.shape[1:])


def level_histograms(leaf_index, sizes, hierarchy: Hierarchy, K: int,
                     chunk: int = DEFAULT_GROUP_CHUNK) -> list[np.ndarray]:
    """True count-of-counts histogram H of every node of every level (internal, **private**).

    Parameters
    ----------
    leaf_index : array_like of int, shape (G,)
        Each group's leaf, as an index into ``hierarchy.leaves`` (public
        groups table).
    sizes : array_like of int, shape (G,)
        Each group's size (number of items; **private**), >= 0; sizes above
        ``K`` are clamped to ``K`` here.
    hierarchy : Hierarchy
    K : int
        Public maximum group size.
    chunk : int
        Groups per ``np.bincount`` call (memory: ~16 bytes per group of a chunk).

    Returns
    -------
    list of numpy.ndarray
        Per level, ``(n_level, K + 1)`` int32 (int64 beyond 2^31 - 1 groups)
        matrices, ``H[v, j]`` = number of groups of node ``v`` of size ``j``
        (clamped); rows in ``hierarchy.nodes_at(level)`` order.

    Raises
    ------
    ValueError
        Arrays of different lengths or not integer, a leaf index outside
        ``[0, n_leaves)``, a negative size (no value is named: sizes are private).
    """
    leaf_index = np.asarray(leaf_index)
    sizes = np.asarray(sizes)
    if leaf_index.ndim != 1 or sizes.ndim != 1 or leaf_index.shape != sizes.shape:
        raise ValueError(f"leaf_index and sizes must be 1-D arrays of the same length, got shapes "
                         f"{leaf_index.shape} and {sizes.shape}")
    if leaf_index.dtype.kind not in "iu" or sizes.dtype.kind not in "iu":
        raise ValueError(f"leaf_index and sizes must be integer arrays, got {leaf_index.dtype} and {sizes.dtype}")
    if isinstance(chunk, bool) or int(chunk) < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    K = int(K)
    B = K + 1
    n_leaves = len(hierarchy.leaves)
    dt = count_dtype(leaf_index.size)
    acc = np.zeros(n_leaves * B, dtype=dt)
    for lo in range(0, leaf_index.size, int(chunk)):
        li = leaf_index[lo:lo + chunk]
        sz = sizes[lo:lo + chunk]
        if li.size == 0:
            continue
        lmin, lmax = int(li.min()), int(li.max())
        if lmin < 0 or lmax >= n_leaves:
            raise ValueError(f"leaf_index must be in [0, {n_leaves - 1}] (indices into hierarchy.leaves), "
                             f"got a value in [{lmin}, {lmax}]")
        if int(sz.min()) < 0:
            raise ValueError("group sizes must be >= 0")
        # bins of this chunk only: a chunk sorted by leaf touches a short range of the accumulator
        idx = li.astype(np.int64)
        idx -= lmin
        idx *= B
        idx += np.minimum(sz, K)
        part = np.bincount(idx, minlength=(lmax - lmin + 1) * B)
        del idx
        seg = acc[lmin * B:(lmax + 1) * B]
        np.add(seg, part, out=seg, casting="unsafe")  # no int32 copy of part (totals fit in dt)
        del part
    return sum_levels(acc.reshape(n_leaves, B), hierarchy)


def hc_estimate_rows(noisy: np.ndarray, G: np.ndarray, loss: str = "l2", dtype=None) -> np.ndarray:
    """:func:`~dpcore.mechanisms.coco.consistency.hc_estimate` of every row (post-processing).

    Parameters
    ----------
    noisy : numpy.ndarray
        ``(n, K + 1)`` noisy H_c rows (the last cell is ignored: it is the
        public ``G``).
    G : numpy.ndarray
        ``(n,)`` public group counts.
    loss : {"l1", "l2"}
    dtype : numpy dtype, optional
        Of the result (default :func:`count_dtype` of ``max(G)``).

    Returns
    -------
    numpy.ndarray
        ``(n, K + 1)`` H (not cumulative): non-negative, row sums ``G``; equal
        to ``hc_estimate(noisy[i], G[i], loss)`` for every row ``i``.
    """
    noisy = np.asarray(noisy)
    G = np.asarray(G, dtype=np.int64)
    n, B = noisy.shape
    K = B - 1
    dt = np.dtype(dtype) if dtype is not None else count_dtype(int(G.max()) if G.size else 0)
    out = np.empty((n, B), dtype=dt)
    for i in range(n):
        g = int(G[i])
        x, _ = isotonic(noisy[i, :K].astype(np.float64), loss, lo=0.0, hi=float(g))
        hc = round_half_up(x)
        row = out[i]
        row[0] = hc[0]
        np.subtract(hc[1:], hc[:-1], out=row[1:K], casting="unsafe")
        row[K] = g - hc[K - 1]
    return out


def hc_variance_runs(H: np.ndarray, epsilon: float, rule: str = "positional"):
    """:func:`~dpcore.mechanisms.coco.consistency.hc_variances` of every row, one entry per run.

    Parameters
    ----------
    H : numpy.ndarray
        ``(n, K + 1)`` estimated histograms (non-negative integers).
    epsilon : float
        ε of the level.
    rule : {"positional", "slides"}

    Returns
    -------
    row, size, count : numpy.ndarray
        The non-zero cells ``H[row, size] = count`` in row-major order (a
        node's groups of one estimated size: a *run*).
    var : numpy.ndarray
        float64 variance of every group of the run (``hc_variances(H[row])``
        repeated ``count`` times is ``np.repeat(var[runs of row], count)``).
    """
    H = np.asarray(H)
    row, size = np.nonzero(H)
    count = H[row, size].astype(np.int64)
    e2 = float(epsilon) ** 2
    n = count.astype(np.float64)
    v = 4.0 / (e2 * n)
    if rule == "positional":
        K = H.shape[1] - 1
        same_prev = np.zeros(row.size, dtype=bool)
        same_prev[1:] = row[1:] == row[:-1]
        a = np.where(same_prev, np.roll(size, 1), -1)
        same_next = np.zeros(row.size, dtype=bool)
        same_next[:-1] = same_prev[1:]
        b = np.where(same_next, np.roll(size, -1), K + 1)
        v = v + (b - a).astype(np.float64) ** 2 / 12.0 * np.minimum(1.0, 4.0 / (e2 * n * n))
    elif rule != "slides":
        raise ValueError(f"rule must be one of {HC_VARIANCE_RULES}, got {rule!r}")
    return row.astype(np.int64), size.astype(np.int64), count, v


def top_down_runs(H_est: list[np.ndarray], epsilons, hierarchy: Hierarchy, K: int,
                  rule: str = "positional") -> list[np.ndarray]:
    """:func:`~dpcore.mechanisms.coco.consistency.top_down` for the H_c method, on runs.

    The per-group algorithm: every group of every node has an initial
    estimate (its size in the node's H_c estimate) and a variance
    (:func:`hc_variances`); from the root down, a level's current estimates
    are matched with the children's initial ones by sorting both by (parent,
    value) — ties by position — (:func:`match_level`), merged
    (:func:`merge_estimates`), and become the children's current estimates;
    the leaves' are rounded to ``[0, K]`` and summed upwards.

    Here the groups are never materialised.  The current estimates of a level
    are *segments* — a node, a value, a variance and a number of groups —
    listed in the order of the groups they stand for.  Sorting the segments
    by (node, value, segment index) gives exactly the stable per-group sort;
    the children's runs sorted by (parent, size, child) are the per-group
    child order; the two cumulative group counts cut both lists into pieces
    on which both sides are constant; the merge is computed once per piece,
    with the same floating-point operations as per group; and each piece
    becomes a segment of its child, in group order (pieces of one child run
    are consecutive groups of it).

    Parameters
    ----------
    H_est : list of numpy.ndarray
        Per level, ``(n_level, K + 1)`` per-node H_c-method estimates
        (:func:`hc_estimate_rows`); row sums = public G, parent's = sum of children's.
    epsilons : sequence of float
        ε of every level (for the variances).
    hierarchy : Hierarchy
    K : int
    rule : {"positional", "slides"}
        :func:`hc_variances` rule.

    Returns
    -------
    list of numpy.ndarray
        Per level, ``(n_level, K + 1)`` H (dtype of ``H_est``), equal to the
        per-group :func:`top_down`'s output; parent = sum of children exactly.

    Raises
    ------
    ValueError
        A node's number of groups differs from the sum over its children.
    """
    L = hierarchy.levels
    B = int(K) + 1
    node, size, count, var = hc_variance_runs(H_est[0], float(epsilons[0]), rule)
    val = size.astype(np.float64)
    for lv in range(1, L):
        # parent segments in (node, value, position) order
        p_ord = np.lexsort((np.arange(node.size), val, node))
        p_node, p_val, p_var = node[p_ord], val[p_ord], var[p_ord]
        p_end = np.cumsum(count[p_ord])
        del p_ord, node, val, var, count
        # child runs in (parent, size, child) order; row-major run index = the children's group order
        c_row, c_size, c_count, c_var = hc_variance_runs(H_est[lv], float(epsilons[lv]), rule)
        pidx = hierarchy.parent_index(lv)
        c_ord = np.lexsort((c_row, c_size, pidx[c_row]))
        c_end = np.cumsum(c_count[c_ord])
        if p_end.size or c_end.size:
            if p_end.size == 0 or c_end.size == 0 or p_end[-1] != c_end[-1]:
                raise ValueError("a node's number of groups differs from the sum over its children")
        bounds = np.union1d(p_end, c_end)
        length = np.diff(bounds, prepend=0)
        starts = bounds - length
        del bounds
        pi = np.searchsorted(p_end, starts, side="right")
        ci = np.searchsorted(c_end, starts, side="right")
        del starts, p_end, c_end
        run = c_ord[ci]  # row-major index of each piece's child run
        del c_ord, ci
        if not np.array_equal(p_node[pi], pidx[c_row[run]]):
            raise ValueError("a node's number of groups differs from the sum over its children")
        merged, mvar = merge_estimates(p_val[pi], p_var[pi], c_size[run].astype(np.float64), c_var[run])
        del pi, p_node, p_val, p_var
        # the children's segments in group order: by run (row-major), pieces of a run in matched order
        order = np.argsort(run, kind="stable")
        node, val, var, count = c_row[run[order]], merged[order], mvar[order], length[order]
        del order, run, merged, mvar, length, c_row, c_size, c_count, c_var
    sizes = np.clip(round_half_up(val), 0, int(K))
    n_leaves = len(hierarchy.leaves)
    dt = H_est[-1].dtype
    leaf = np.bincount(node * B + sizes, weights=count, minlength=n_leaves * B)
    leaf = np.rint(leaf).astype(dt).reshape(n_leaves, B)
    return sum_levels(leaf, hierarchy)
