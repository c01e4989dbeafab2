"""The shared and threaded rule search gives exactly the rules of separate single-threaded fits.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": the trees,
their sorts and the rows of each categorical value do not depend on the labels,
so :meth:`RuleMiner.fit_each` computes them once for several label vectors
(:mod:`dpcore.explain.space`) and may search trees in threads (``n_jobs``). The
rules, their texts, order, precision, recall, F1 and support, the trees and the
number of candidates must equal those of one single-threaded fit per label
vector, and those of the search as it was before sharing (:func:`reference_fit`,
a frozen copy of the former ``RuleMiner.fit`` loop and range search), on tables
with several label vectors, missing values, categorical value sets and
conjunctions; the range search alone equals the former one on any sorted input.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.explain import Rule, RuleMiner
from dpcore.explain.ranges import Cut, _f1, boundaries, nice_between, search_sorted, sort_finite
from dpcore.explain.rules import _scores, categorical_rules, select_rules
from dpcore.explain.space import CategoricalCodes, TreeRows, condition_codes
from dpcore.explain.trees import iter_trees

UNITS = {"distance": "mile", "air_time": "minute", "dep_delay": "minute", "arr_delay": "minute", "fare": "usd"}
CATS = ["carrier", "origin", "week"]


def former_search_sorted(vs: np.ndarray, ys: np.ndarray, n_pos: int, min_support: int, n_thresholds: int) -> list[Cut]:
    """The former ``search_sorted`` (before issue 29), verbatim but for its name and this docstring."""
    m = vs.size
    if m < 2 or n_pos <= 0:
        return []
    cum = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(ys, out=cum[1:])
    tot = int(cum[m])
    if tot == 0:
        return []
    bnd = np.flatnonzero(np.concatenate(([True], vs[1:] != vs[:-1], [True])))  # cut positions 0..m
    inner = bnd[1:-1]
    if inner.size == 0:
        return []
    out: list[Cut] = []

    def cut_value(k: int) -> float:
        return nice_between(float(vs[k - 1]), float(vs[k]))

    # v < t: the first k rows
    tp = cum[inner]
    f1 = np.where(inner >= min_support, _f1(tp, inner, n_pos), -1.0)
    i = int(np.argmax(f1))
    if f1[i] > 0:
        k = int(inner[i])
        out.append(Cut(-np.inf, cut_value(k), int(tp[i]), k))
    # v ≥ t: the rows from k on
    cov = m - inner
    tp = tot - cum[inner]
    f1 = np.where(cov >= min_support, _f1(tp, cov, n_pos), -1.0)
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


def former_numeric_rules(tree, values, order, y, n_pos, min_support, n_thresholds, condition=None):
    """The former ``numeric_rules``: :func:`former_search_sorted` on ``values[order]``, ``y[order]``."""
    cuts = former_search_sorted(values[order], y[order], n_pos, min_support, n_thresholds)
    extra = {} if condition is None else {"column": condition.column, "values": condition.values}
    return [Rule(tree=tree, lower=c.lower, upper=c.upper, **extra, **_scores(c.tp, c.support, n_pos))
            for c in cuts]


def reference_fit(frame, labels, units, categorical, max_depth=2, max_rules=10, min_support=10,
                  max_categories=5, n_thresholds=32):
    """The search as ``RuleMiner.fit`` ran it before the shared search: one sort per tree, one mask per condition."""
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    ms = int(min_support) if isinstance(min_support, int) else max(1, math.ceil(float(min_support) * y.size))
    units_ = RuleMiner._check_inputs(frame, units, categorical)[0]
    cat = categorical_rules(frame, y, categorical, n_pos, ms, max_categories)
    cond_masks = [r.covers(frame) for r in cat]
    candidates = list(cat)
    trees = []
    for tree, values in iter_trees(frame, units_, max_depth):
        trees.append(tree)
        order = sort_finite(values)
        base = former_numeric_rules(tree, values, order, y, n_pos, ms, n_thresholds)
        candidates.extend(base)
        best = max((r.f1 for r in base), default=0.0)
        for cond, mask in zip(cat, cond_masks):
            floor = max(best, cond.f1)
            sub = order[mask[order]]
            for r in former_numeric_rules(tree, values, sub, y, n_pos, ms, n_thresholds, cond):
                if r.f1 > floor:
                    candidates.append(r)
    return trees, candidates, select_rules(candidates, frame, max_rules)


def table(seed: int, n: int = 6000) -> tuple[pd.DataFrame, list[np.ndarray]]:
    """Flights-like rows with missing values and three label vectors (a speed, a delay gap in one carrier, a week)."""
    rng = np.random.default_rng(seed)
    distance = rng.integers(100, 2500, n).astype(float)
    speed = rng.uniform(300, 560, n)
    air = np.round(distance / speed * 60.0)
    dep = np.round(rng.normal(10, 30, n))
    arr = dep + np.round(rng.normal(0, 10, n))
    carrier = rng.choice(["AA", "B6", "DL", "UA", "WN", "9E"], n).astype(object)
    origin = rng.choice(["EWR", "JFK", "LGA"], n).astype(object)
    week = rng.integers(1, 5, n).astype(float)
    gap = rng.random(n) < 0.08
    arr[gap & (carrier == "B6")] += rng.uniform(60, 200, int((gap & (carrier == "B6")).sum()))
    for a, share in ((air, 0.03), (dep, 0.02), (arr, 0.04)):  # missing numbers (cancelled flights)
        a[rng.random(n) < share] = np.nan
    carrier[rng.random(n) < 0.02] = None  # missing categories
    week[rng.random(n) < 0.02] = np.nan
    df = pd.DataFrame({"distance": distance, "air_time": air, "dep_delay": dep, "arr_delay": arr,
                       "fare": rng.gamma(4, 20, n), "carrier": carrier, "origin": origin, "week": week})
    with np.errstate(invalid="ignore"):
        fast = (distance / air * 60.0 > 520) | (rng.random(n) < 0.01)
        late = ((arr - dep) > 40) & (carrier == "B6") | (rng.random(n) < 0.01)
    wk = ((week == 3) | (week == 4)) & (rng.random(n) < 0.3) & (origin != "LGA")
    return df, [fast, late, wk]


def assert_same(a, b) -> None:
    """Two fits (or a fit and a reference triple) have the same trees, candidate count and rules."""
    trees_a, n_a, rules_a = a
    trees_b, n_b, rules_b = b
    assert [t.text for t in trees_a] == [t.text for t in trees_b]
    assert n_a == n_b
    assert [r.text for r in rules_a] == [r.text for r in rules_b]
    assert [r.as_dict() for r in rules_a] == [r.as_dict() for r in rules_b]  # scores, parts, similar: exact
    assert rules_a == rules_b


def summary(miner: RuleMiner):
    return miner.trees_, miner.n_candidates_, miner.rules_


@pytest.mark.parametrize("seed, depth, min_support", [(0, 2, 10), (1, 2, 0.002), (2, 1, 25), (3, 2, 5)])
def test_shared_and_threaded_equal_separate_fits(seed, depth, min_support):
    df, ys = table(seed)
    params = dict(max_depth=depth, max_rules=10, min_support=min_support)
    refs = [reference_fit(df, y, UNITS, CATS, max_depth=depth, min_support=min_support) for y in ys]
    conj = [r for _, cands, _ in refs for r in cands if r.tree is not None and r.column is not None]
    sets = [r for _, cands, _ in refs for r in cands if len(r.values) > 1]
    assert conj and sets, "the table must produce conjunctions and value sets"
    for n_jobs in (None, 1, 2):
        shared = RuleMiner(**params, n_jobs=n_jobs).fit_each(df, ys, units=UNITS, categorical=CATS)
        assert len(shared) == len(ys)
        for y, miner, (trees, cands, rules) in zip(ys, shared, refs):
            assert_same(summary(miner), (trees, len(cands), rules))
            assert_same(summary(miner), summary(RuleMiner(**params, n_jobs=n_jobs).fit(df, y, units=UNITS,
                                                                                      categorical=CATS)))
            assert miner.n_outliers_ == int(y.sum())


def test_pairs_that_cannot_beat_their_floor_are_not_searched(monkeypatch):
    """The bound of ``_LabelFit`` skips (tree, categorical rule) searches here, and the rules do not change."""
    import dpcore.explain.miner as miner_module

    df, ys = table(0)
    calls = []
    search = miner_module.sorted_rules
    monkeypatch.setattr(miner_module, "sorted_rules", lambda *a, **k: calls.append(1) or search(*a, **k))
    miners = RuleMiner().fit_each(df, ys, units=UNITS, categorical=CATS)
    pairs = 0
    for y, m in zip(ys, miners):
        trees, cands, rules = reference_fit(df, y, UNITS, CATS)
        assert_same(summary(m), (trees, len(cands), rules))
        n_cat = sum(1 for r in cands if r.tree is None)
        pairs += len(trees) * (1 + n_cat)
    assert 0 < len(calls) < pairs


def test_shared_search_with_a_sample_and_integer_labels():
    df, ys = table(7, n=3000)
    ys = [y.astype(int) for y in ys]  # 0/1 labels are accepted as by fit
    miners = RuleMiner(n_jobs=2).fit_each(df, ys, units=UNITS, categorical=CATS)
    for y, m in zip(ys, miners):
        trees, cands, rules = reference_fit(df, y, UNITS, CATS)
        assert_same(summary(m), (trees, len(cands), rules))


def test_a_condition_that_is_not_a_union_of_codes_falls_back_to_its_mask():
    col = pd.Series(["a", "b", None, "a", "c", "b"], dtype=object)
    cc = CategoricalCodes.of(col)
    assert condition_codes(col.isin(["a", "c"]).to_numpy(), cc) == (0, 2)
    assert condition_codes(np.array([True, False, False, False, False, False]), cc) is None  # half of "a"
    assert condition_codes(col.isna().to_numpy(), cc) is None  # missing values are never a condition
    values = np.array([3.0, np.nan, 1.0, 2.0, np.inf, 1.0])
    rows = TreeRows(values, {"c": cc})
    order = sort_finite(values)
    for mask in (col.isin(["a"]).to_numpy(), col.isin(["a", "b"]).to_numpy()):
        codes = condition_codes(mask, cc)
        for seg in (rows.segment("c", codes), rows.masked(mask)):
            np.testing.assert_array_equal(rows.rows(seg), order[mask[order]])
            np.testing.assert_array_equal(seg.vs, values[order[mask[order]]])


def test_fit_each_leaves_the_miner_unfitted_and_validates():
    df, ys = table(4, n=1500)
    proto = RuleMiner(max_rules=3)
    out = proto.fit_each(df, ys[:2], units=UNITS, categorical=CATS)
    assert not hasattr(proto, "rules_") and all(m is not proto for m in out)
    assert all(m.get_params() == proto.get_params() for m in out)
    with pytest.raises(ValueError, match="at least one label vector"):
        proto.fit_each(df, [], units=UNITS, categorical=CATS)
    with pytest.raises(ValueError, match="labels mark no outlier"):
        proto.fit_each(df, [ys[0], np.zeros(len(df), bool)], units=UNITS, categorical=CATS)
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n_jobs must be None or an integer ≥ 1"):
            RuleMiner(n_jobs=bad).fit(df, ys[0], units=UNITS, categorical=CATS)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(0, 400), distinct=st.integers(1, 60),
       share=st.floats(0.0, 1.0), min_support=st.integers(0, 120), n_thresholds=st.integers(2, 40))
def test_range_search_equals_the_former_one(seed, m, distinct, share, min_support, n_thresholds):
    rng = np.random.default_rng(seed)
    vs = np.sort(rng.integers(0, distinct, m).astype(float) * rng.choice([0.5, 1.0, 3.7]))
    ys = rng.random(m) < share
    n_pos = int(ys.sum()) + int(rng.integers(0, 3))  # recall over a whole table: outliers outside vs too
    want = former_search_sorted(vs, ys, n_pos, min_support, n_thresholds)
    assert search_sorted(vs, ys, n_pos, min_support, n_thresholds) == want
    assert search_sorted(vs, ys, n_pos, min_support, n_thresholds, boundaries(vs)) == want
