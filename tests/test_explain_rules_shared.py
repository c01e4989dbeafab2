"""The shared and threaded rule search gives exactly the rules of separate single-threaded fits.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": the trees,
their sorts and the rows of each categorical value do not depend on the labels,
so :meth:`RuleMiner.fit_each` computes them once for several label vectors
(:mod:`dpcore.explain.space`) and may search trees in threads (``n_jobs``). The
rules, their texts, order, precision, recall, F1 and support, the trees and the
number of candidates must equal those of one single-threaded fit per label
vector, and those of the search as it was before sharing (:func:`reference_fit`,
a frozen copy of the former ``RuleMiner.fit`` loop), on tables with several
label vectors, missing values, categorical value sets and conjunctions.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpcore.explain import RuleMiner
from dpcore.explain.ranges import sort_finite
from dpcore.explain.rules import categorical_rules, numeric_rules, select_rules
from dpcore.explain.space import CategoricalCodes, TreeRows, condition_codes
from dpcore.explain.trees import iter_trees

UNITS = {"distance": "mile", "air_time": "minute", "dep_delay": "minute", "arr_delay": "minute", "fare": "usd"}
CATS = ["carrier", "origin", "week"]


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
        base = numeric_rules(tree, values, order, y, n_pos, ms, n_thresholds)
        candidates.extend(base)
        best = max((r.f1 for r in base), default=0.0)
        for cond, mask in zip(cat, cond_masks):
            floor = max(best, cond.f1)
            sub = order[mask[order]]
            for r in numeric_rules(tree, values, sub, y, n_pos, ms, n_thresholds, cond):
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
            np.testing.assert_array_equal(seg.rows, order[mask[order]])
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
