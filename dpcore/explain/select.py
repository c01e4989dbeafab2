"""Rule selection: group near-duplicate rules, rank by F1, keep the top ones.

Seed 004, slide "Outlier Rules Discovery - Rule Selection Phase": "eliminate the
numeric rule candidates by pruning and grouping similar rules together ...
rank the rules by F1 score; return top ranked rules". (Combining numeric and
categorical rules into conjunctions happens before, in the miner, which keeps a
conjunction only when it beats both of its parts.)

Greedy grouping: candidates are visited by decreasing F1 (ties: simpler rule --
lower tree depth, no categorical part -- then generation order). A candidate
whose covered rows have Jaccard similarity ≥ ``jaccard`` (default 0.9) with an
already kept rule joins that rule's group (its text goes to the kept rule's
``similar``); otherwise it is kept. A near-duplicate that is *simpler* (lower
tree depth, or no categorical part) and within ``simpler_tol`` (0.01) in F1 of
the kept rule takes its place as the group's representative: ``carrier = CMT``
rather than a conjunction that drops a handful of its rows. The visit stops when ``max_rules`` rules are
kept or after ``max_visits`` candidates (default ``50 * max_rules``), so
``similar`` lists the near-duplicates met before the list filled. Covered sets
are bit-packed (``numpy.packbits``) and compared with ``numpy.bitwise_count``;
tree values are recomputed for the visited candidates with a small cache, since
conjunctions of one tree with several categories share them.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import numpy as np

__all__ = ["select_rules"]


def select_rules(candidates, frame, max_rules: int = 10, jaccard: float = 0.9, max_visits: int | None = None,
                 simpler_tol: float = 0.01, cache_size: int = 8) -> list:
    """The top ``max_rules`` candidates by F1 after grouping near-duplicates (module docstring).

    Parameters
    ----------
    candidates : sequence of Rule
    frame : pandas.DataFrame
        The training table the candidates' scores were measured on.
    max_rules : int
    jaccard : float
        Similarity (intersection over union of covered rows) from which two rules are near-duplicates.
    max_visits : int, optional
        Candidates visited at most (default ``50 * max_rules``).
    simpler_tol : float
        A near-duplicate that is simpler (lower :attr:`Rule.complexity`) and at
        most this much lower in F1 replaces the kept rule as its group's representative.
    cache_size : int
        Tree value arrays kept while visiting.

    Returns
    -------
    list of Rule
        Sorted by decreasing F1, each with ``similar`` set.
    """
    if not 0.0 < jaccard <= 1.0:
        raise ValueError(f"jaccard must be in (0, 1], got {jaccard!r}")
    if max_visits is None:
        max_visits = 50 * max_rules
    order = sorted(range(len(candidates)), key=lambda i: (-candidates[i].f1, candidates[i].complexity, i))
    cache: OrderedDict = OrderedDict()
    kept, bits, sizes, groups = [], [], [], []
    for i in order[:max_visits]:
        r = candidates[i]
        v = None
        if r.tree is not None:
            v = cache.get(r.tree)
            if v is None:
                v = r.tree.values(frame)
                cache[r.tree] = v
                if len(cache) > cache_size:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(r.tree)
        cov = r.covers(frame, tree_values=v)
        b = np.packbits(cov)
        size = int(np.count_nonzero(cov))
        dup = None
        for j, (bj, sj) in enumerate(zip(bits, sizes)):
            inter = int(np.bitwise_count(b & bj).sum())
            union = size + sj - inter
            if union and inter >= jaccard * union:
                dup = j
                break
        if dup is not None:
            k = kept[dup]
            if r.complexity < k.complexity and r.f1 >= k.f1 - simpler_tol:  # the simpler rule represents the group
                groups[dup].append(k.text)
                kept[dup], bits[dup], sizes[dup] = r, b, size
            else:
                groups[dup].append(r.text)
            continue
        kept.append(r)
        bits.append(b)
        sizes.append(size)
        groups.append([])
        if len(kept) >= max_rules:
            break
    out = [replace(r, similar=tuple(g)) for r, g in zip(kept, groups)]
    return sorted(out, key=lambda r: -r.f1)  # stable; a simpler representative may rank a little lower
