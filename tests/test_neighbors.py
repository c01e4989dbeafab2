"""Radius-neighbour primitives against brute force (dpcore.mechanisms.neighbors)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.mechanisms.neighbors import (
    _blocked_counts, _sqdist_ckdtree, ball_counts, multiplicities, pairwise_ball_max, scale_by_bounds,
)
from scipy.spatial import cKDTree


def brute_counts(data, queries, r):
    data = np.asarray(data, float).reshape(len(data), -1)
    queries = np.asarray(queries, float).reshape(len(queries), -1)
    d2 = ((queries[:, None, :] - data[None, :, :]) ** 2).sum(-1)
    return (d2 <= r * r).sum(1)


def brute_mult(data, queries):
    return np.array([np.all(data == q, axis=1).sum() for q in queries])


@pytest.mark.parametrize("r", [0.0, 1.0, 2.0, 3.0])
def test_ball_counts_integer_grid_with_duplicates(r):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 6, size=(400, 3)).astype(float)  # many exact duplicates, exact distances
    queries = np.vstack([data[:50], rng.integers(-1, 7, size=(50, 3)).astype(float)])
    got = ball_counts(data, queries, r)
    want = brute_counts(data, queries, r)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    # closed ball: the point itself and its duplicates are counted
    assert np.all(got[:50] >= brute_mult(data, data[:50]))


def test_ball_counts_random_floats_and_blocks():
    rng = np.random.default_rng(2)
    data = rng.normal(size=(700, 4))
    queries = rng.normal(size=(300, 4))
    want = brute_counts(data, queries, 1.3)
    np.testing.assert_array_equal(ball_counts(data, queries, 1.3, block_rows=7), want)


@pytest.mark.parametrize("cap", [1, 5, 37, 400, 5000])
def test_saturating_counts_equal_min_of_exact(cap):
    rng = np.random.default_rng(3)
    # dense blob (pivot shortcut fires) + sparse far points (exact path) + duplicates
    dense = rng.normal(scale=0.3, size=(2500, 3))
    sparse = rng.uniform(5, 40, size=(60, 3))
    data = np.vstack([dense, sparse, sparse[:10]])
    # more queries than pivots (2048), so the pivot shortcut runs; fewer queries skip it
    queries = np.vstack([data, rng.uniform(-3, 45, size=(100, 3))])
    want = brute_counts(data, queries, 1.0)
    got = ball_counts(data, queries, 1.0, cap=cap)
    np.testing.assert_array_equal(got, np.minimum(want, cap))
    np.testing.assert_array_equal(ball_counts(data, queries[::50], 1.0, cap=cap), np.minimum(want[::50], cap))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(-4, 4), st.integers(-4, 4)), min_size=1, max_size=10),
    st.sampled_from([0.0, 1.0, 1.5, 2.0, 4.0]),
    st.integers(1, 10),
)
def test_ball_counts_property(data, queries, r, cap):
    data = np.array(data, float)
    queries = np.array(queries, float)
    want = brute_counts(data, queries, r)
    np.testing.assert_array_equal(ball_counts(data, queries, r), want)
    np.testing.assert_array_equal(ball_counts(data, queries, r, cap=cap), np.minimum(want, cap))


# -- blocked matrix-product counting (high dimension) must equal the KD-tree exactly --


@pytest.mark.parametrize("d,r", [(10, 0.6), (8, 0.5), (3, 0.2)])
@pytest.mark.parametrize("cap", [None, 1, 4, 12, 300])
def test_blocked_counts_equal_kdtree_counts(d, r, cap):
    """Seed 002 scale path: blocked counts == cKDTree counts (exact and saturating), many blocks."""
    rng = np.random.default_rng(30 + d)
    data = np.vstack([rng.normal(size=(1500, d)) / np.sqrt(d), 3.0 + rng.normal(size=(30, d))])
    data = np.vstack([data, data[:20]])  # duplicates
    queries = np.vstack([data[::3], rng.normal(size=(100, d))])
    want = ball_counts(data, queries, r, cap=cap, method="kdtree")
    for kw in (dict(), dict(q_block=7, d_block=33, workers=1), dict(q_block=64, d_block=100, workers=2)):
        got = _blocked_counts(data, queries, r, cap, **kw)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ball_counts(data, queries, r, cap=cap, method="blocked"), want)
    # brute force agrees too (no distance in these data is within rounding of r)
    np.testing.assert_array_equal(want, brute_counts(data, queries, r) if cap is None else np.minimum(brute_counts(data, queries, r), cap))


@pytest.mark.parametrize("r", [0.0, 1.0, 2.0, 3.0, 5.0])
def test_blocked_counts_integer_ties(r):
    """Integer coordinates in 9-D: many distances exactly r; closed ball, duplicates, cap."""
    rng = np.random.default_rng(40)
    data = rng.integers(0, 3, size=(600, 9)).astype(float)
    queries = np.vstack([data[:80], rng.integers(-1, 4, size=(40, 9)).astype(float)])
    want = brute_counts(data, queries, r)
    np.testing.assert_array_equal(ball_counts(data, queries, r, method="kdtree"), want)
    np.testing.assert_array_equal(_blocked_counts(data, queries, r, None, q_block=16, d_block=50), want)
    for cap in (1, 5, 50):
        np.testing.assert_array_equal(_blocked_counts(data, queries, r, cap, q_block=16, d_block=50), np.minimum(want, cap))


def test_blocked_counts_decide_boundary_pairs_as_the_kdtree():
    """Float data with r placed exactly on computed distances: the band re-evaluation matches cKDTree."""
    rng = np.random.default_rng(41)
    for d in (8, 10, 11):
        data = rng.normal(size=(300, d)) * 0.3 + 5.0  # offset: larger rounding in the product form
        q = data[:1]
        d2 = _sqdist_ckdtree(np.repeat(q, data.shape[0], axis=0), data)
        tree = cKDTree(data)
        for j in rng.choice(np.arange(1, data.shape[0]), size=15, replace=False):
            r = float(np.sqrt(d2[j]))
            for rr in (np.nextafter(r, 0), r, np.nextafter(r, np.inf)):
                rr = float(rr)
                want = int(tree.query_ball_point(q[0], rr, return_length=True))
                assert int(_blocked_counts(data, q, rr, None, d_block=64)[0]) == want
                assert want == int(np.count_nonzero(d2 <= rr * rr))


def test_ball_counts_errors():
    with pytest.raises(ValueError, match="r must be"):
        ball_counts([[0.0]], [[0.0]], -1)
    with pytest.raises(ValueError, match="columns"):
        ball_counts(np.zeros((3, 2)), np.zeros((1, 3)), 1.0)
    with pytest.raises(ValueError, match="NaN"):
        ball_counts([[np.nan]], [[0.0]], 1.0)
    with pytest.raises(ValueError, match="cap"):
        ball_counts([[0.0]], [[0.0]], 1.0, cap=0)
    with pytest.raises(ValueError, match="method"):
        ball_counts([[0.0]], [[0.0]], 1.0, method="grid")
    assert ball_counts(np.zeros((0, 2)), np.zeros((2, 2)), 1.0).tolist() == [0, 0]


def test_multiplicities_against_brute_force():
    rng = np.random.default_rng(4)
    data = rng.integers(0, 4, size=(300, 2)).astype(float)
    queries = np.vstack([data[:40], [[0.5, 0.5], [9.0, 9.0]]])
    got = multiplicities(data, queries)
    np.testing.assert_array_equal(got, brute_mult(data, queries))
    assert got[-2:].tolist() == [0, 0]  # arbitrary points
    # -0.0 equals 0.0; values closer than float underflow stay distinct
    assert multiplicities([[0.0], [-0.0], [1e-200]], [[0.0], [1e-200], [2e-200]]).tolist() == [2, 1, 0]


def test_scale_by_bounds():
    X = np.array([[0.0, 10.0], [5.0, 20.0], [10.0, 30.0]])
    out = scale_by_bounds(X, [0, 10], [10, 30])
    np.testing.assert_allclose(out, [[0, 0], [0.5, 0.5], [1, 1]])
    assert out.dtype == np.float64
    # public bounds, not data statistics: a point outside maps outside [0, 1]
    assert scale_by_bounds([[20.0]], [0.0], [10.0])[0, 0] == 2.0
    with pytest.raises(ValueError, match="highs > lows"):
        scale_by_bounds(X, [0, 10], [0, 30])
    with pytest.raises(ValueError, match="one entry per column"):
        scale_by_bounds(X, [0], [1])


def test_pairwise_ball_max():
    pts = np.array([[0.0], [1.0], [2.0], [10.0], [10.0]])
    assert pairwise_ball_max(pts, 0.5) == 2  # the duplicate pair
    assert pairwise_ball_max(pts, 1.0) == 3  # closed: 0,1,2 around 1
    assert pairwise_ball_max(np.zeros((0, 1)), 1.0) == 0
