"""Count-of-counts representations H, H_g, H_c and the earthmover's distance.

Definitions (Kuo et al., PVLDB 2018, slide "Convenient Views of the Dataset"),
with sizes clamped to the public maximum ``K`` and size 0 allowed (a public
group may have no items):

* **H** (count-of-counts histogram), length ``K + 1``:
  ``H[j]`` = number of groups of size ``j``, ``j = 0..K``.
  Slide example (sizes 4, 2, 1, 1; the slide drops the size-0 cell):
  ``H^root = [2, 1, 0, 1]`` -> here ``[0, 2, 1, 0, 1]`` with ``K = 4``.
* **H_g** (unattributed histogram [HRMS10]), length ``G``: the group sizes
  sorted ascending.  ``H_g^root = [1, 1, 2, 4]``.
* **H_c** (cumulative count-of-counts), length ``K + 1``:
  ``H_c[i] = sum_{j <= i} H[j]`` (number of groups of size <= i), so
  ``H_c[K] = G``.  ``H_c^root = [2, 3, 3, 4]`` (here ``[0, 2, 3, 3, 4]``).

Error measure (slide "Error Measure", lemma [NLV07]): the earthmover's
distance ``emd = ||H_c - Ĥ_c||_1`` (= ``||H_g - Ĥ_g||_1`` when G is fixed).

True histograms computed here are **internal** (private): only the noisy
measurements of :class:`~dpcore.mechanisms.coco.CocoMechanism` and their
post-processing may be released.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .hierarchy import Hierarchy
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = [
    "group_sizes_by_leaf", "group_sizes_from_counts", "group_counts", "coco_histograms",
    "to_hg", "from_hg", "to_hc", "from_hc", "emd",
]


def _check_K(K) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or int(K) < 1:
        raise ValueError(f"K (public maximum group size) must be an integer >= 1, got {K!r}")
    return int(K)


def group_sizes_by_leaf(item_groups: np.ndarray, group_leaf: pd.Series, K: int,
                        hierarchy: Hierarchy | None = None) -> dict[str, np.ndarray]:
    """Size of every public group, per leaf, clamped to ``K`` (vectorised).

    Parameters
    ----------
    item_groups : array_like
        Group id of every private item (e.g. a flight's ``tailnum``).
        **Private.**
    group_leaf : pandas.Series
        Public groups table: index = group id, value = leaf node id.
        A group must appear once and map to exactly one leaf.
    K : int
        Public maximum group size (>= 1); larger groups are clamped to K.
    hierarchy : Hierarchy, optional
        When given, every leaf id must be a leaf of it, and leaves without
        groups are included with an empty array.

    Returns
    -------
    dict[str, numpy.ndarray]
        Leaf id -> int64 sizes (in [0, K]) of *all* its public groups, in
        the order of ``group_leaf`` (groups without items have size 0).

    Raises
    ------
    ValueError
        ``K < 1``; a group listed twice (mapped to two leaves); a group mapped
        to no leaf (missing leaf id); a leaf id not in ``hierarchy``; an item
        whose group is not in the public table (the message names no item,
        group or count: the items are private).

    See Also
    --------
    group_sizes_from_counts : the same from one count per distinct group (a SQL ``GROUP BY``).
    """
    K = _check_K(K)
    idx, leaf_vals = _checked_groups(group_leaf, hierarchy)
    items = np.asarray(item_groups)
    pos = _group_positions(idx, items)
    return _sizes_by_leaf(np.bincount(pos, minlength=len(idx)), leaf_vals, K, hierarchy)


def group_sizes_from_counts(groups, counts, group_leaf: pd.Series, K: int,
                            hierarchy: Hierarchy | None = None) -> dict[str, np.ndarray]:
    """:func:`group_sizes_by_leaf` from item counts per group instead of one entry per item.

    The aggregate form (issue 21): a warehouse computes ``SELECT group,
    count(*) ... GROUP BY group`` and only one row per distinct group reaches
    Python, so memory grows with the number of groups, not of items. The
    result is identical to ``group_sizes_by_leaf(np.repeat(groups, counts), ...)``.

    Parameters
    ----------
    groups : array_like
        Group ids (a group may appear more than once: its counts are added).
    counts : array_like of int
        Items of each entry of ``groups`` (>= 0). **Private.**
    group_leaf, K, hierarchy
        As :func:`group_sizes_by_leaf`.

    Returns
    -------
    dict[str, numpy.ndarray]
        As :func:`group_sizes_by_leaf`.

    Raises
    ------
    ValueError
        As :func:`group_sizes_by_leaf`; also ``counts`` not one non-negative
        integer per entry of ``groups``.
    """
    K = _check_K(K)
    idx, leaf_vals = _checked_groups(group_leaf, hierarchy)
    groups = np.asarray(groups)
    counts = np.asarray(counts)
    if counts.shape != groups.shape or (counts.size and counts.dtype.kind not in "iu"):
        raise ValueError("counts must hold one integer per entry of groups")
    if counts.size and int(counts.min()) < 0:
        raise ValueError("counts must be >= 0")
    pos = _group_positions(idx, groups)
    sizes = np.zeros(len(idx), dtype=np.int64)
    np.add.at(sizes, pos, counts.astype(np.int64))
    return _sizes_by_leaf(sizes, leaf_vals, K, hierarchy)


def _checked_groups(group_leaf: pd.Series, hierarchy: Hierarchy | None) -> tuple[pd.Index, np.ndarray]:
    """The public groups table's index and leaf ids (as text), checked (see :func:`group_sizes_by_leaf`)."""
    if not isinstance(group_leaf, pd.Series):
        raise ValueError("group_leaf must be a pandas Series (index = group id, value = leaf id)")
    idx = pd.Index(group_leaf.index)
    if idx.has_duplicates:
        dup = idx[idx.duplicated()][0]
        dup = dup.item() if isinstance(dup, np.generic) else dup
        raise ValueError(f"group {dup!r} appears more than once in the public groups table "
                         f"(a group must map to exactly one leaf)")
    leaf_vals = group_leaf.to_numpy()
    no_leaf = pd.isna(leaf_vals) | (pd.Series(leaf_vals, dtype=object).astype(str).str.len().to_numpy() == 0)
    if no_leaf.any():
        g = idx[np.flatnonzero(no_leaf)[0]]
        g = g.item() if isinstance(g, np.generic) else g
        raise ValueError(f"group {g!r} is mapped to no leaf in the public groups table")
    leaf_vals = leaf_vals.astype(str)
    if hierarchy is not None:
        known = set(hierarchy.leaves)
        bad = pd.unique(leaf_vals[~pd.Series(leaf_vals).isin(known).to_numpy()])
        if len(bad):
            raise ValueError(f"leaf {str(bad[0])!r} of the public groups table is not a leaf of the hierarchy")
    return idx, leaf_vals


def _group_positions(idx: pd.Index, items: np.ndarray) -> np.ndarray:
    """Position of every item's group in the public table; an item outside it is an error naming nothing private."""
    pos = idx.get_indexer(items) if len(items) else np.empty(0, dtype=np.int64)
    if (pos < 0).any():  # no group named: the items are private (validation keeps them in the public domain)
        raise ValueError("some items belong to a group that is not in the public groups table "
                         "(the group column's public domain must be covered by the groups table)")
    return pos


def _sizes_by_leaf(counts: np.ndarray, leaf_vals: np.ndarray, K: int,
                   hierarchy: Hierarchy | None) -> dict[str, np.ndarray]:
    """Per-group item counts (public table order) clamped at ``K`` and split by leaf."""
    sizes = np.minimum(counts, K).astype(np.int64)
    codes, uniques = pd.factorize(leaf_vals)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    out = {str(u): sizes[order[bounds[i]:bounds[i + 1]]] for i, u in enumerate(uniques)}
    if hierarchy is not None:
        out = {leaf: out.get(leaf, np.zeros(0, dtype=np.int64)) for leaf in hierarchy.leaves}
    return out


def group_counts(group_leaf: pd.Series, hierarchy: Hierarchy) -> dict[str, int]:
    """Public number of groups ``G_τ`` of every node (from the public table only).

    Parameters
    ----------
    group_leaf : pandas.Series
        Public groups table (index = group id, value = leaf id).
    hierarchy : Hierarchy

    Returns
    -------
    dict[str, int]
        Node id -> number of groups in its subtree.
    """
    vc = pd.Series(group_leaf.to_numpy()).astype(str).value_counts()
    unknown = set(vc.index) - set(hierarchy.leaves)
    if unknown:
        raise ValueError(f"leaf {sorted(unknown)[0]!r} of the public groups table is not a leaf of the hierarchy")
    leaf_counts = np.array([int(vc.get(leaf, 0)) for leaf in hierarchy.leaves], dtype=np.int64)
    return counts_from_leaf_counts(leaf_counts, hierarchy)


def counts_from_leaf_counts(leaf_counts: np.ndarray, hierarchy: Hierarchy) -> dict[str, int]:
    """Aggregate per-leaf group counts (in ``hierarchy.leaves`` order) to every node."""
    out: dict[str, int] = {}
    for level in range(hierarchy.levels):
        anc = hierarchy.ancestor_index(level)
        sums = np.bincount(anc, weights=leaf_counts, minlength=len(hierarchy.nodes_at(level)))
        out.update({n: int(s) for n, s in zip(hierarchy.nodes_at(level), sums)})
    return out


def _leaf_arrays(sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy, K: int):
    """Concatenate leaf sizes (hierarchy leaf order) -> (leaf index per group, sizes)."""
    leaves = hierarchy.leaves
    unknown = set(sizes_by_leaf) - set(leaves)
    if unknown:
        raise ValueError(f"sizes_by_leaf has key {sorted(unknown)[0]!r}, which is not a leaf of the hierarchy")
    arrs = [np.asarray(sizes_by_leaf.get(leaf, np.zeros(0, dtype=np.int64)), dtype=np.int64) for leaf in leaves]
    lens = np.array([len(a) for a in arrs], dtype=np.int64)
    sizes = np.concatenate(arrs) if arrs else np.zeros(0, dtype=np.int64)
    if sizes.size and (sizes.min() < 0 or sizes.max() > K):
        raise ValueError(f"group sizes must be in [0, K={K}] (clamp with group_sizes_by_leaf)")
    leaf_idx = np.repeat(np.arange(len(leaves), dtype=np.int64), lens)
    return leaf_idx, sizes, lens


def level_H_matrix(sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy, K: int,
                   level: int) -> np.ndarray:
    """True H of every node at ``level`` as a ``(n_nodes, K + 1)`` int64 matrix."""
    leaf_idx, sizes, _ = _leaf_arrays(sizes_by_leaf, hierarchy, K)
    node = hierarchy.ancestor_index(level)[leaf_idx]
    n = len(hierarchy.nodes_at(level))
    return np.bincount(node * (K + 1) + sizes, minlength=n * (K + 1)).reshape(n, K + 1).astype(np.int64)


def level_Hg(sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy, K: int,
             level: int) -> tuple[np.ndarray, np.ndarray]:
    """True H_g of every node at ``level``, concatenated.

    Returns
    -------
    counts : numpy.ndarray
        Number of groups per node (``nodes_at(level)`` order).
    values : numpy.ndarray
        Sorted sizes of node 0, then node 1, ... (int64).
    """
    leaf_idx, sizes, _ = _leaf_arrays(sizes_by_leaf, hierarchy, K)
    node = hierarchy.ancestor_index(level)[leaf_idx]
    n = len(hierarchy.nodes_at(level))
    order = np.lexsort((sizes, node))
    return np.bincount(node, minlength=n).astype(np.int64), sizes[order]


def coco_histograms(sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy, K: int) -> dict[str, np.ndarray]:
    """True count-of-counts histogram H of every node (internal only).

    Parameters
    ----------
    sizes_by_leaf : dict[str, numpy.ndarray]
        From :func:`group_sizes_by_leaf` (private).
    hierarchy : Hierarchy
    K : int
        Public maximum group size.

    Returns
    -------
    dict[str, numpy.ndarray]
        Node id -> int64 H of length ``K + 1`` (``H[j]`` = #groups of size j).
    """
    K = _check_K(K)
    out: dict[str, np.ndarray] = {}
    for level in range(hierarchy.levels):
        M = level_H_matrix(sizes_by_leaf, hierarchy, K, level)
        out.update(zip(hierarchy.nodes_at(level), M))
    return out


def to_hg(H) -> np.ndarray:
    """H -> H_g: the group sizes sorted ascending (length G = sum(H)).

    Slide "Convenient Views": ``H = [0, 2, 1, 0, 1]`` -> ``H_g = [1, 1, 2, 4]``.
    """
    H = np.asarray(H, dtype=np.int64)
    if (H < 0).any():
        raise ValueError("H must be non-negative")
    return np.repeat(np.arange(len(H), dtype=np.int64), H)


def from_hg(Hg, K: int) -> np.ndarray:
    """H_g (integer sizes in [0, K], any order) -> H of length K + 1."""
    K = _check_K(K)
    Hg = np.asarray(Hg)
    if Hg.size and (Hg.min() < 0 or Hg.max() > K):
        raise ValueError(f"H_g entries must be in [0, K={K}]")
    return np.bincount(Hg.astype(np.int64), minlength=K + 1).astype(np.int64)


def to_hc(H) -> np.ndarray:
    """H -> H_c: ``H_c[i] = sum_{j <= i} H[j]`` (length K + 1, ``H_c[K] = G``)."""
    return np.cumsum(np.asarray(H, dtype=np.int64))


def from_hc(Hc) -> np.ndarray:
    """H_c (non-decreasing, >= 0) -> H: ``H[0] = H_c[0]``, ``H[j] = H_c[j] - H_c[j-1]``."""
    Hc = np.asarray(Hc, dtype=np.int64)
    H = np.diff(Hc, prepend=0)
    if (H < 0).any():
        raise ValueError("H_c must be non-negative and non-decreasing")
    return H


def emd(H_true, H_est) -> float:
    """Earthmover's distance ``||H_c - Ĥ_c||_1`` (slide "Error Measure", [NLV07]).

    The minimum number of items to add or remove from groups to turn one
    count-of-counts histogram into the other (for equal G).  Internal
    evaluation only (it reads the true H).
    """
    a = np.cumsum(np.asarray(H_true, dtype=np.float64))
    b = np.cumsum(np.asarray(H_est, dtype=np.float64))
    if a.shape != b.shape:
        raise ValueError(f"histograms must have the same length, got {a.shape} and {b.shape}")
    return float(np.abs(a - b).sum())
