"""Range search: the best one- and two-sided thresholds of one numeric value per row.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": "convert
every operation tree into numeric rules by searching for ranges". For the
values ``v`` of a tree (:mod:`.trees`) and the outlier labels ``y`` this finds,
by F1 against the labels,

* the best ``v < t`` and the best ``v ≥ t`` **exactly**: the finite values are
  sorted once; the cumulative sum of the labels in that order gives the true
  positives of every cut between two distinct values, so precision, recall and
  F1 of all cuts are one vectorised expression (O(m log m) for the sort, O(m)
  after it, m = rows with a finite value);
* the best range ``lo ≤ v < hi`` approximately: cuts are restricted to a grid of
  ``n_thresholds + 1`` distinct-value boundaries at equally spaced ranks
  (quantiles), all O(g^2) pairs of grid cuts are scored at once, then each end
  is refined exactly over every boundary in the two grid cells around it
  (coordinate ascent, two rounds). A planted range is found exactly when its
  ends are the best cuts within their neighbouring grid cells, which holds
  whenever the range holds more than a few grid cells' worth of rows.

Recall is always divided by the number of labelled outliers of the *whole*
table, ``n_pos``: rows without a finite value (missing inputs, division by zero)
are not covered by the rule but still count as missed outliers; a search
restricted to a subset of rows (the rows of a categorical value, for a
conjunction) likewise keeps the global ``n_pos``.

Thresholds are readable numbers: the cut between sorted neighbours ``a < b``
(rule ``v < t`` covers ``a`` and not ``b``) is the number with the fewest
significant digits in ``(a, b]`` (:func:`nice_between`), so re-evaluating a rule
on the training rows covers exactly the rows counted here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Cut", "sort_finite", "boundaries", "search_sorted", "nice_between", "format_number"]


@dataclass(frozen=True)
class Cut:
    """One range found by :func:`search_sorted`: ``lower ≤ v < upper`` (``-inf``/``inf`` for one-sided).

    ``tp`` = labelled outliers covered, ``support`` = rows covered.
    """

    lower: float
    upper: float
    tp: int
    support: int


def sort_finite(values: np.ndarray) -> np.ndarray:
    """Row indices of the finite ``values``, sorted by value (NaN and ±inf rows left out)."""
    valid = np.flatnonzero(np.isfinite(values))
    return valid[np.argsort(values[valid])]


def boundaries(vs: np.ndarray) -> np.ndarray:
    """Cut positions ``0..m`` of sorted values ``vs``: 0, every ``k`` with ``vs[k - 1] != vs[k]``, and ``m``.

    Depends on the values only, not on the labels, so several label vectors
    searched over the same sorted values share it (:func:`search_sorted`'s
    ``bnd``; :class:`~dpcore.explain.space.TreeRows`).
    """
    return np.flatnonzero(np.concatenate(([True], vs[1:] != vs[:-1], [True])))


def nice_between(lo: float, hi: float) -> float:
    """The number with the fewest significant digits in ``(lo, hi]`` (``lo < hi``); 0 when the interval holds it."""
    if not lo < hi:
        raise ValueError("nice_between needs lo < hi")
    if lo < 0.0 <= hi:
        return 0.0
    mag = max(abs(lo), abs(hi))
    e = math.floor(math.log10(mag))
    for d in range(1, 18):
        step_exp = e - d + 1
        c = round(math.floor(hi / 10.0 ** step_exp) * 10.0 ** step_exp, -step_exp)
        if lo < c <= hi:
            return float(c)
    return float(hi)


def format_number(x: float) -> str:
    """Shortest round-trip decimal text of ``x`` without exponent (``3.46``, ``180``, ``-0.5``)."""
    if x == 0:
        return "0"
    return np.format_float_positional(float(x), trim="-")


def _f1(tp: np.ndarray, cov: np.ndarray, n_pos: int) -> np.ndarray:
    return 2.0 * tp / (cov + n_pos)


def search_sorted(vs: np.ndarray, ys: np.ndarray, n_pos: int, min_support: int, n_thresholds: int,
                  bnd: np.ndarray | None = None) -> list[Cut]:
    """Best ``v < t``, ``v ≥ t`` and ``lo ≤ v < hi`` for sorted finite values ``vs`` with labels ``ys``.

    Parameters
    ----------
    vs : ndarray of float, sorted ascending, all finite
    ys : ndarray of bool, the labels in the same order
    n_pos : int
        Labelled outliers of the whole table (the recall denominator).
    min_support : int
        Rules covering fewer rows are not returned.
    n_thresholds : int
        Grid size of the two-sided search (module docstring).
    bnd : ndarray of int, optional
        ``boundaries(vs)``, when already computed (it does not depend on ``ys``).

    Returns
    -------
    list of Cut
        Up to three (one per form), each covering at least ``min_support`` rows
        and at least one outlier; none when ``vs`` has fewer than two distinct
        values. Cuts covering every row are never returned.
    """
    m = vs.size
    if m < 2 or n_pos <= 0:
        return []
    cum = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(ys.view(np.uint8) if ys.dtype == bool else ys, out=cum[1:])  # bytes sum faster than bools
    tot = int(cum[m])
    if tot == 0:
        return []
    if bnd is None:
        bnd = boundaries(vs)  # cut positions 0..m
    inner = bnd[1:-1]
    if inner.size == 0:
        return []
    out: list[Cut] = []

    def cut_value(k: int) -> float:
        return nice_between(float(vs[k - 1]), float(vs[k]))

    ci = cum[inner]
    # v < t: the first k rows; inner increases, so the cuts with k ≥ min_support are a suffix of it
    s = int(np.searchsorted(inner, min_support))
    if s < inner.size:
        f1 = _f1(ci[s:], inner[s:], n_pos)
        i = int(np.argmax(f1))  # the first best cut, as over all cuts with the others scored -1
        if f1[i] > 0:
            k = int(inner[s + i])
            out.append(Cut(-np.inf, cut_value(k), int(ci[s + i]), k))
    # v ≥ t: the rows from k on; the cuts with m - k ≥ min_support are a prefix of inner
    e = int(np.searchsorted(inner, m - min_support, side="right"))
    if e > 0:
        cov = m - inner[:e]
        tp = tot - ci[:e]
        f1 = _f1(tp, cov, n_pos)
        i = int(np.argmax(f1))
        if f1[i] > 0:
            k = int(inner[i])
            out.append(Cut(cut_value(k), np.inf, int(tp[i]), int(cov[i])))
    # lo ≤ v < hi on a grid of g + 1 cuts, then refined
    g = min(n_thresholds, bnd.size - 1)
    idx = np.clip(np.searchsorted(bnd, np.linspace(0, m, g + 1)), 0, bnd.size - 1)
    grid = np.unique(bnd[idx])
    if grid.size < 3:
        return out
    cg = cum[grid]
    tp2 = cg[None, :] - cg[:, None]
    cov2 = grid[None, :] - grid[:, None]
    ok = (cov2 >= max(min_support, 1)) & np.triu(np.ones((grid.size, grid.size), bool), 1)
    ok[0, -1] = False  # the whole table
    f2 = np.where(ok, _f1(tp2, np.maximum(cov2, 0), n_pos), -1.0)
    gi, gj = np.unravel_index(int(np.argmax(f2)), f2.shape)
    if f2[gi, gj] <= 0:
        return out
    lo_k, hi_k = int(grid[gi]), int(grid[gj])

    def window(gk: int) -> np.ndarray:
        a = grid[max(gk - 1, 0)]
        b = grid[min(gk + 1, grid.size - 1)]
        return bnd[np.searchsorted(bnd, a): np.searchsorted(bnd, b, side="right")]

    lo_w, hi_w = window(gi), window(gj)
    best = float(f2[gi, gj])
    for _ in range(2):
        c = lo_w[lo_w < hi_k]
        cv = hi_k - c
        f = np.where(cv >= min_support, _f1(cum[hi_k] - cum[c], cv, n_pos), -1.0)
        j = int(np.argmax(f))
        if f[j] > best:
            best, lo_k = float(f[j]), int(c[j])
        c = hi_w[hi_w > lo_k]
        cv = c - lo_k
        f = np.where(cv >= min_support, _f1(cum[c] - cum[lo_k], cv, n_pos), -1.0)
        j = int(np.argmax(f))
        if f[j] > best:
            best, hi_k = float(f[j]), int(c[j])
    if lo_k == 0 or hi_k == m:  # one-sided: already found exactly above
        return out
    out.append(Cut(cut_value(lo_k), cut_value(hi_k), int(cum[hi_k] - cum[lo_k]), hi_k - lo_k))
    return out
