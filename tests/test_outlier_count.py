"""Tests for the DP outlier count (seed 002, Okada et al., Section 4)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.outlier_count import (
    KISSING_NUMBER_BOUNDS,
    OutlierCountMechanism,
    algorithm1,
    count_outliers,
    enclosable,
    global_sensitivity_bounds,
    kissing_upper,
    max_enclosable,
    neighbour_counts,
    relaxed_enclosable_bound,
    subspace_view,
)
from dpcore.noise import NoiseSource


def brute_degrees(X, r):
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    return (D <= r).sum(1) - 1


def brute_q(X, k, r):
    return int((brute_degrees(X, r) < k).sum())


def brute_E(P, r):
    """Largest subset enclosable in radius r, by all subsets (exponential)."""
    best = 0
    for m in range(1, len(P) + 1):
        for C in itertools.combinations(range(len(P)), m):
            if enclosable(P[list(C)], r):
                best = max(best, m)
    return best


def brute_local_sensitivity(X, k, r, grid):
    """max |q(X) - q(X')| over moving one record to any grid position (a lower bound on LS)."""
    q0 = brute_q(X, k, r)
    best = 0
    for i in range(len(X)):
        for g in grid:
            Y = X.copy()
            Y[i] = g
            best = max(best, abs(brute_q(Y, k, r) - q0))
    return best


# -- counting ------------------------------------------------------------------


def test_counts_match_brute_force_with_duplicates():
    rng = np.random.default_rng(1)
    for _ in range(20):
        X = np.round(rng.uniform(0, 1, (40, 2)), 1)  # many duplicates and exact ties
        for k, r in [(1, 0.1), (3, 0.2), (5, 0.15)]:
            assert np.array_equal(neighbour_counts(X, r), brute_degrees(X, r))
            assert count_outliers(X, k, r) == brute_q(X, k, r)


def test_subspace_view_gives_dist_S():
    rng = np.random.default_rng(2)
    X = rng.uniform(0, 1, (5, 4))
    XS = subspace_view(X, (0, 2, 3))
    d_view = np.linalg.norm(XS[0] - XS[1])
    d_def = math.sqrt(sum((X[0, i] - X[1, i]) ** 2 for i in (0, 2, 3)) / 3)
    assert d_view == pytest.approx(d_def, rel=1e-12)
    with pytest.raises(ValueError):
        subspace_view(X, (0, 7))


# -- global sensitivity ----------------------------------------------------------


def test_kissing_table_and_gs_bounds():
    assert set(range(1, 25)) <= set(KISSING_NUMBER_BOUNDS)
    for d, (lo, hi) in KISSING_NUMBER_BOUNDS.items():
        assert 2 * d <= lo <= hi <= 3**d - 1
    for d in (1, 2, 3, 4, 8, 24):
        assert KISSING_NUMBER_BOUNDS[d][0] == KISSING_NUMBER_BOUNDS[d][1]
    assert global_sensitivity_bounds(2, 3, 50) == (13, 19)
    assert global_sensitivity_bounds(1, 2, 100) == (5, 5)
    assert global_sensitivity_bounds(10, 3, 50) == (50, 50)
    assert global_sensitivity_bounds(10, 3, 10**6)[1] == 3 * kissing_upper(10) + 1


@pytest.mark.parametrize("k,N", [(1, 3), (1, 4), (2, 5), (2, 6)])
def test_global_sensitivity_1d_brute_force(k, N):
    """GS in 1-D is min(N, 2k+1) (Theorem 4 is tight for d = 1): brute force on a grid."""
    grid = np.arange(7, dtype=float)  # r = 1: integer grid, exact arithmetic
    best = 0
    for pts in itertools.combinations_with_replacement(grid, N):
        X = np.array(pts).reshape(-1, 1)
        q0 = brute_q(X, k, 1.0)
        for i in range(N):
            for g in grid:
                Y = X.copy()
                Y[i] = g
                best = max(best, abs(brute_q(Y, k, 1.0) - q0))
    lo, hi = global_sensitivity_bounds(1, k, N)
    assert best == lo == hi == min(N, 2 * k + 1)


# -- Algorithm 1 ----------------------------------------------------------------


def test_algorithm1_exact_matches_brute_force_and_pruned_search():
    rng = np.random.default_rng(3)
    for _ in range(40):
        d = int(rng.integers(1, 4))
        P = rng.uniform(0, 1, (int(rng.integers(1, 9)), d))
        r = float(rng.uniform(0.1, 0.4))
        e = brute_E(P, r)
        assert algorithm1(P, r) == e
        assert max_enclosable(P, r) == e


def test_relaxation_is_upper_bound_and_switches_at_size_limit():
    rng = np.random.default_rng(4)
    for _ in range(40):
        P = rng.uniform(0, 1, (int(rng.integers(1, 11)), 2))
        r = float(rng.uniform(0.05, 0.3))
        e = brute_E(P, r)
        for L in (1, 3, 5, 12):
            g = relaxed_enclosable_bound(P, r, L)
            assert g >= e
            if len(P) <= L:
                assert g == e  # exact below the limit
            else:
                assert g == max(e, len(P) - L)  # documented relaxation above it


# -- smooth sensitivity ---------------------------------------------------------


def _tiny(rng, d):
    N = int(rng.integers(4, 9))
    return np.round(rng.uniform(0, 1, (N, d)), 2)


@pytest.mark.parametrize("size_limit", [1, 2, 12])
def test_smoothness_under_neighbours(size_limit):
    """S(X) <= e^beta S(X') for random X and X' with one record moved (Definition 4, eq. 7)."""
    rng = np.random.default_rng(10 + size_limit)
    checked = 0
    for _ in range(60):
        d = int(rng.integers(1, 3))
        X = _tiny(rng, d)
        k = int(rng.integers(1, 4))
        r = float(rng.choice([0.1, 0.2, 0.3]))
        m = OutlierCountMechanism(k, r, 0.9, 0.5, size_limit=size_limit)
        S = m.smooth_sensitivity(X)
        for _ in range(4):
            Y = X.copy()
            i = int(rng.integers(len(X)))
            Y[i] = X[int(rng.integers(len(X)))] + rng.choice([0.0, 0.05, 0.1, 0.5], size=d)
            S2 = m.smooth_sensitivity(Y)
            assert S <= math.exp(m.beta) * S2 * (1 + 1e-12)
            assert S2 <= math.exp(m.beta) * S * (1 + 1e-12)
            checked += 1
    assert checked == 240


def test_smooth_bound_dominates_brute_force_local_sensitivity():
    """S(X) >= U(0) >= LS(X), LS by moving each record over a fine grid (tiny 1-D/2-D instances)."""
    rng = np.random.default_rng(20)
    grid1 = np.round(np.arange(-0.2, 1.21, 0.01), 2).reshape(-1, 1)
    g = np.round(np.arange(-0.1, 1.11, 0.05), 2)
    grid2 = np.array([(a, b) for a in g for b in g])
    for trial in range(12):
        d = 1 if trial % 2 == 0 else 2
        X = _tiny(rng, d)
        k = int(rng.integers(1, 3))
        r = 0.1 if d == 1 else 0.2
        m = OutlierCountMechanism(k, r, 0.5, 0.01)
        ls = brute_local_sensitivity(X, k, r, grid1 if d == 1 else grid2)
        u0 = m.local_sensitivity_bound(X)
        assert u0 >= ls
        assert m.smooth_sensitivity(X) >= u0 - 1e-12


def test_theorem4_extremal_configuration_is_covered():
    """The 1-D configuration of Theorem 4's proof: LS = 2k+1 and the bound reaches it."""
    k = 2
    X = np.array([[0.5], [0.4], [0.4], [0.6], [0.6]])
    m = OutlierCountMechanism(k, 0.1, 0.5, 0.01)
    Y = X.copy()
    Y[0] = 0.0
    assert abs(brute_q(X, k, 0.1) - brute_q(Y, k, 0.1)) == 2 * k + 1
    assert m.local_sensitivity_bound(X) == 2 * k + 1


# -- the fast path: the same exact quantities, one degree pass per release --------------


def _blobs(rng, N, d):
    X = np.vstack([rng.normal(size=(N - N // 20, d)), 4.0 + 3.0 * rng.normal(size=(N // 20, d))]) / np.sqrt(d)
    return np.vstack([X, X[:5]])  # a few duplicates


@pytest.mark.parametrize("d,N,r", [(10, 500, 0.6), (8, 500, 0.5), (2, 1500, 0.05), (3, 800, 0.3)])
def test_fast_path_gives_exactly_the_same_counts_and_smooth_bound(monkeypatch, d, N, r):
    """Blocked counting (d >= 8) and lazily extended degrees change no released quantity:
    q_count, S(X) and the release equal the KD-tree-counted values, and S(X) equals the
    fully evaluated max_t e^{-t beta} U(t) (no Proposition 2 early stop)."""
    import dpcore.mechanisms.neighbors as nb

    rng = np.random.default_rng(50 + d)
    X = _blobs(rng, N, d)
    for k, eps, full in ((3, 0.5, False), (1, 0.9, True)):
        m = OutlierCountMechanism(k, r, eps, 0.01)
        S_fast, U0_fast, _, q_fast = m._terms(X)
        y_fast = m.release(X, NoiseSource(seed=3))
        with monkeypatch.context() as mp:
            mp.setattr(nb, "_BLOCKED_MIN_DIM", 10**9)  # every count through cKDTree
            S_ref, U0_ref, ev_ref, q_ref = m._terms(X, full=full)  # full: every term U(t) evaluated
            assert q_ref == count_outliers(X, k, r) == brute_q(X, k, r)
            assert np.array_equal(neighbour_counts(X, r), brute_degrees(X, r))
        if full:
            assert S_ref == max(math.exp(-m.beta * t) * u for t, u in ev_ref.items())
        assert S_fast == S_ref
        assert (U0_fast, q_fast) == (U0_ref, q_ref)
        assert y_fast == float(NoiseSource(seed=3).gaussian(float(q_ref), m._smooth_sigma(S_ref)))
        assert m.smooth_sensitivity(X) == S_fast and count_outliers(X, k, r) == q_fast


def test_release_counts_degrees_once(monkeypatch):
    """release() takes S(X) and q_count from one degree pass over the data (no second count)."""
    from dpcore.mechanisms.outlier_count import enclosing, query, smooth_bound
    from dpcore.mechanisms.neighbors import ball_counts as real

    rng = np.random.default_rng(60)
    X = _blobs(rng, 800, 10)
    calls = []

    def spy(data, queries, r, **kw):
        calls.append((len(data), len(queries), r))
        return real(data, queries, r, **kw)

    for module in (query, smooth_bound, enclosing):  # every module of the package that counts
        assert module.ball_counts is real
        monkeypatch.setattr(module, "ball_counts", spy)
    m = OutlierCountMechanism(3, 0.6, 0.5, 0.01)
    m.release(X, NoiseSource(seed=1))
    n_points = len(np.unique(X, axis=0))  # counts run over the distinct points (five rows are duplicates)
    assert n_points == len(X) - 5
    over_data = [c for c in calls if c[0] == n_points and c[2] == 0.6]
    # one pass over all points; later extensions (larger t) re-count only saturated points
    assert [c[1] for c in over_data].count(n_points) == 1
    assert all(c[1] < n_points for c in over_data[1:])


# -- mechanism API ----------------------------------------------------------------


def test_sigma_release_and_privacy_map():
    rng = np.random.default_rng(5)
    X = np.vstack([rng.normal(0, 1, (45, 2)), rng.normal(20, 10, (5, 2))])
    sm = OutlierCountMechanism(3, 1.1, 0.5, 0.01)
    gl = OutlierCountMechanism(3, 1.1, 0.5, 0.01, method="global")
    assert sm.privacy_map() == PrivacyCost(0.5, 0.01) == gl.privacy_map()
    assert sm.notion == "dp" and sm.neighbour == "replace-one"
    alpha = 0.5 / (5 * math.sqrt(2 * math.log(200)))
    assert sm.noise_sigma(X) == pytest.approx(sm.smooth_sensitivity(X) / alpha)
    assert gl.noise_sigma(X) == pytest.approx(math.sqrt(2 * math.log(200)) * 19 / 0.5)
    q = count_outliers(X, 3, 1.1)
    expected = float(NoiseSource(seed=7).gaussian(float(q), sm.noise_sigma(X)))
    assert sm.release(X, NoiseSource(seed=7)) == expected
    assert sm.smooth_sensitivity(X) <= 19  # capped by the Theorem 4 upper bound
    # the diagnostics variant draws the same and reports the exact values it used
    for mech in (sm, gl):
        noisy, q_used, sigma = mech.release_with_diagnostics(X, NoiseSource(seed=7))
        assert (noisy, q_used, sigma) == (mech.release(X, NoiseSource(seed=7)), q, mech.noise_sigma(X))


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(k=0), "k must"),
        (dict(k=2.5), "k must"),
        (dict(r=0), "r must"),
        (dict(r=-1.0), "r must"),
        (dict(delta=0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(epsilon=0), "epsilon"),
        (dict(epsilon=1.5), "epsilon"),
        (dict(size_limit=0), "size_limit"),
        (dict(method="laplace"), "method"),
    ],
)
def test_validate_errors(kwargs, word):
    args = dict(k=3, r=0.1, epsilon=0.5, delta=0.01)
    args.update(kwargs)
    m = OutlierCountMechanism(**args)
    with pytest.raises(ValueError, match=word):
        m.validate()


def test_exact_search_limit_error_names_public_settings_only():
    """Issue 15 (smaller item): the node-budget error reaching logs carries no data-dependent quantity."""
    import re

    from dpcore.mechanisms.outlier_count import ExactSearchLimitError, max_enclosable

    rng = np.random.default_rng(3)
    P = rng.random((37, 2))  # a 37-point set whose exact search needs far more than 5 nodes
    with pytest.raises(ExactSearchLimitError) as e:
        max_enclosable(P, 0.25, node_limit=5)
    numbers = set(re.findall(r"\d+", str(e.value)))
    assert numbers <= {"5", "1"} and "37" not in str(e.value)  # only the public node_limit (and "Algorithm 1")
