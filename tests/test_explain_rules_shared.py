"""The shared and threaded rule search gives exactly the rules of separate single-threaded fits.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": the trees,
their sorts and the rows of each categorical value do not depend on the labels,
so :meth:`RuleMiner.fit_each` computes them once for several label vectors
(:mod:`dpcore.explain.space`) and may search trees in threads (``n_jobs``). The
rules, their texts, order, precision, recall, F1 and support, the trees and the
number of candidates must equal those of one single-threaded fit per label
vector, and those of the search as it was before sharing (:func:`reference_fit`,
the frozen copy of the former ``RuleMiner.fit`` loop and range search in ``benchmarks/rules.py``), on tables
with several label vectors, missing values, categorical value sets and
conjunctions; the range search alone equals the former one on any sorted input.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.explain import RuleMiner
from dpcore.explain.ranges import boundaries, search_sorted, sort_finite
from dpcore.explain.space import CategoricalCodes, TreeRows, condition_codes
from benchmarks.rules import former_search_sorted, reference_fit  # the former search, frozen (one copy)

UNITS = {"distance": "mile", "air_time": "minute", "dep_delay": "minute", "arr_delay": "minute", "fare": "usd"}
CATS = ["carrier", "origin", "week"]


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
