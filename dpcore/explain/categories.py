"""Categorical predicates: values of a categorical attribute that point at the outliers.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": "construct
initial categorical rules by retrieving the values of categorical features that
result in reasonable recall and precision".

For one attribute, every value's row count and outlier count come from two
``bincount`` calls over ``pandas.factorize`` codes (vectorised, any number of
values). A value is a candidate when it covers at least ``min_support`` rows and
its precision is above the base rate (lift > 1: the value makes outliers more
likely); the best ``max_values`` candidates by F1 are kept. Besides single
values (``carrier = CMT``) one **value set** is offered (``week ∈ {1, 2}``): the
candidates sorted by precision, the prefix with the best F1 (F1 is a ratio of
sums, so the best set of a given size is a prefix in precision order), when it
has at least two values and beats the best single value. Missing values are never
covered.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["ValuePredicate", "value_predicates"]


@dataclass(frozen=True)
class ValuePredicate:
    """A set of values of one attribute, with the outliers (``tp``) and rows (``support``) it covers."""

    values: tuple
    tp: int
    support: int


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def value_predicates(column: pd.Series, y: np.ndarray, n_pos: int, min_support: int,
                     max_values: int) -> list[ValuePredicate]:
    """Candidate values (and one value set) of ``column`` for labels ``y``; best F1 first.

    Parameters
    ----------
    column : pandas.Series
        The categorical attribute (any dtype; not modified).
    y : ndarray of bool
        Labels, one per row.
    n_pos : int
        Number of labelled outliers (``y.sum()``).
    min_support : int
        Fewest rows a predicate must cover.
    max_values : int
        Single values kept (the value set comes on top).
    """
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    ok = codes >= 0
    c = codes[ok]
    k = len(uniques)
    if k == 0:
        return []
    cov = np.bincount(c, minlength=k)
    tp = np.bincount(c, weights=y[ok].astype(float), minlength=k).round().astype(np.int64)
    n = y.size
    base = n_pos / n
    with np.errstate(all="ignore"):
        prec = np.where(cov > 0, tp / np.maximum(cov, 1), 0.0)
    f1 = 2.0 * tp / (cov + n_pos)
    cand = np.flatnonzero((cov >= min_support) & (tp > 0) & (prec > base))
    if cand.size == 0:
        return []
    ranked = cand[np.lexsort((cand, -f1[cand]))]
    out = [ValuePredicate((_plain(uniques[i]),), int(tp[i]), int(cov[i])) for i in ranked[:max_values]]
    by_prec = cand[np.lexsort((-cov[cand], -prec[cand]))]
    ctp, ccov = np.cumsum(tp[by_prec]), np.cumsum(cov[by_prec])
    pf1 = 2.0 * ctp / (ccov + n_pos)
    j = int(np.argmax(pf1))
    if j >= 1 and pf1[j] > f1[ranked[0]]:
        vals = tuple(_plain(uniques[i]) for i in by_prec[: j + 1])
        try:
            vals = tuple(sorted(vals))
        except TypeError:  # mixed types: keep precision order
            pass
        out.append(ValuePredicate(vals, int(ctp[j]), int(ccov[j])))
    return out
