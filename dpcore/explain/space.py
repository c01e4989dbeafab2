"""The label-independent part of the rule search, shared by several label vectors over one table.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": the
operation trees, their values, the sort of every tree's values and the rows of
every categorical predicate in that sorted order depend on the table only; the
labels (the outliers to explain) enter only through the counts of outliers
below each cut. :meth:`~dpcore.explain.RuleMiner.fit_each` therefore builds,
per tree, one :class:`TreeRows` and searches every label vector on it (the
pipeline's ``rules`` step mines one label vector per detector template over the
same rows).

* :class:`CategoricalCodes` -- per categorical attribute, ``pandas.factorize``
  codes (missing values apart), computed once per table.
* :func:`condition_codes` -- the codes a categorical rule covers, **checked**:
  a rule is served from the codes only when its covered rows
  (:meth:`~dpcore.explain.rules.Rule.covers`) are exactly the rows with those
  codes; otherwise the search falls back to the rule's own row mask.
* :class:`TreeRows` -- one tree's sorted finite rows (:func:`~.ranges.sort_finite`),
  sorted values and cut boundaries (:func:`~.ranges.boundaries`), and, per
  categorical attribute, the codes gathered once in that sort order (one byte
  per row), so the rows of one value in value order are found by a comparison
  of small integers instead of a gather of the value's row mask per tree and rule.

Exactness: the rows a conjunction is searched on are the same rows in the same
order as ``order[mask[order]]`` (the per-rule mask over the tree's sort order
that :class:`~dpcore.explain.RuleMiner` used before): a comparison of the codes
in sort order selects exactly the positions ``mask[order]`` selects, once
:func:`condition_codes` has checked that the mask is those codes' rows. The
label-dependent search (:func:`~.ranges.search_sorted`) finds the same cuts as
before. So rules, scores and order are identical to separate fits and to the
former search (``tests/test_explain_rules_shared.py``).

Memory: only the trees being searched (``n_jobs`` of them, plus as many
queued) hold their sorted rows (order, values and boundaries: three arrays of
the table's length), one byte per row per categorical attribute for the codes
in sort order, and the rows of one condition at a time; nothing is kept
across trees.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ranges import boundaries, sort_finite
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["CategoricalCodes", "condition_codes", "TreeRows", "Segment"]


@dataclass(frozen=True)
class CategoricalCodes:
    """``pandas.factorize`` codes of one categorical attribute (``-1`` for a missing value) and their count ``k``.

    ``shifted`` holds ``codes + 1`` in the smallest integer type (0 = missing),
    so that gathering it in a tree's sort order is cheap.
    """

    codes: np.ndarray
    k: int
    shifted: np.ndarray

    @classmethod
    def of(cls, column: pd.Series) -> "CategoricalCodes":
        """The codes of ``column`` (not modified)."""
        codes, uniques = pd.factorize(column, use_na_sentinel=True)
        codes = np.asarray(codes, dtype=np.int64)
        k = len(uniques)
        small = np.int8 if k < 127 else np.int16 if k < 32767 else np.int64
        return cls(codes, k, (codes + 1).astype(small))

    def lookup(self, codes) -> np.ndarray:
        """A boolean table over ``-1..k-1`` (index ``code + 1``), True at ``codes``."""
        lut = np.zeros(self.k + 1, dtype=bool)
        lut[np.asarray(codes, dtype=np.int64) + 1] = True
        return lut


def condition_codes(mask: np.ndarray, cc: CategoricalCodes) -> tuple[int, ...] | None:
    """The codes whose rows are exactly ``mask``, or None when ``mask`` is not such a union.

    ``mask`` is a categorical rule's covered rows (:meth:`~dpcore.explain.rules.Rule.covers`);
    the check makes serving the rule from codes exact for any dtype (a value
    that ``isin`` and ``factorize`` would treat differently falls back to the mask).
    """
    c = np.unique(cc.codes[mask])
    if c.size == 0 or c[0] < 0:
        return None
    if not np.array_equal(cc.lookup(c)[cc.shifted], mask):
        return None
    return tuple(int(x) for x in c)


@dataclass(frozen=True)
class Segment:
    """Rows searched for one condition, in value order.

    ``sel`` are their positions (increasing) among the tree's sorted finite rows
    (:attr:`TreeRows.order`; None: all of them), ``vs`` their values, ``bnd`` the
    cut boundaries of ``vs``; :meth:`TreeRows.rows` gives their row indices.
    """

    sel: np.ndarray | None
    vs: np.ndarray
    bnd: np.ndarray


class TreeRows:
    """One tree's label-independent search data (module docstring).

    Parameters
    ----------
    values : ndarray of float
        The tree's values on every row (NaN / ±inf where undefined).
    codes : dict
        Categorical attribute -> :class:`CategoricalCodes` of the same table.

    Attributes
    ----------
    order : ndarray of int
        Rows with a finite value, sorted by value (:func:`~.ranges.sort_finite`).
    all : Segment
        Every finite row (the search of the tree's rules on all rows; ``sel`` is None).
    """

    def __init__(self, values: np.ndarray, codes: dict[str, CategoricalCodes]):
        self.codes = codes
        self.order = sort_finite(values)
        vs = values[self.order]
        self.all = Segment(None, vs, boundaries(vs))
        self._sorted_codes: dict[str, np.ndarray] = {}

    def _select(self, sel: np.ndarray) -> Segment:
        idx = np.flatnonzero(sel)  # increasing positions: the gathers from them stay in order (cache-friendly)
        vs = self.all.vs[idx]
        return Segment(idx, vs, boundaries(vs))

    def rows(self, seg: Segment) -> np.ndarray:
        """The row indices of ``seg``, in value order (``order[mask[order]]`` for its condition's rows ``mask``)."""
        return self.order if seg.sel is None else self.order[seg.sel]

    def segment(self, column: str, codes: tuple[int, ...]) -> Segment:
        """The rows with one of ``codes`` in ``column``, in value order.

        The same rows in the same order as ``order[mask[order]]`` for the rows
        ``mask`` of those codes; the codes are gathered in sort order once per
        attribute and tree, a segment costs one comparison over them.
        """
        sc = self._sorted_codes.get(column)
        if sc is None:
            sc = self._sorted_codes[column] = self.codes[column].shifted[self.order]
        sel = sc == codes[0] + 1 if len(codes) == 1 else self.codes[column].lookup(codes)[sc]
        return self._select(sel)

    def masked(self, mask: np.ndarray) -> Segment:
        """The rows of ``mask`` in value order (the fallback of :func:`condition_codes`)."""
        return self._select(mask[self.order])
