"""``consistent_hc`` (issue 19): tree-wide least squares on the noisy H_c of every node,
then the integer projection that keeps parent = sum of children.

* the two-pass estimate (Hay et al. 2010) equals a dense weighted least-squares
  solve (numpy ``lstsq`` over the leaves, which parametrise every consistent
  tree) to 1e-9 on small random trees, incl. empty nodes;
* the integer step: integral, non-negative, monotone H_c, last cell G, parent =
  sum of children; a child keeps its rounded estimate where the parent agrees;
* invariants of every method's output over random hierarchies (hypothesis),
  incl. empty nodes and single-group nodes;
* privacy: the measurement stage is the top-down H_c one (same sensitivity,
  scale and levels); the post-processing reads only noisy cells and public counts.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.mechanisms.coco import (CocoMechanism, Hierarchy, consistent_hc, distribute_to_children, group_counts,
                                    gls_tree)
from dpcore.mechanisms.coco.consistency import discrete_laplace_variance, isotonic_rows
from dpcore.noise import NoiseSource
from test_coco import _check_invariants, random_data, random_hierarchy


def _leaf_matrix(h: Hierarchy) -> list[np.ndarray]:
    """Per level, the 0/1 matrix mapping leaf values to node values (node = sum of its leaves)."""
    out = []
    for lv in range(h.levels):
        anc = h.ancestor_index(lv)
        M = np.zeros((len(h.nodes_at(lv)), len(h.leaves)))
        M[anc, np.arange(len(h.leaves))] = 1.0
        out.append(M)
    return out


def _dense_gls(Y, var, G, h):
    """Reference: minimise sum_v ||y_v - x_v||^2 / var_level over consistent trees (x = M x_leaves),
    leaves of an empty subtree fixed at 0; solved with numpy.linalg.lstsq on the stacked system."""
    M = _leaf_matrix(h)
    free = G[-1] > 0
    A = np.vstack([M[lv][:, free] / np.sqrt(var[lv]) for lv in range(h.levels)])
    b = np.vstack([Y[lv] / np.sqrt(var[lv]) for lv in range(h.levels)])
    x_leaf = np.zeros((len(h.leaves), Y[0].shape[1]))
    x_leaf[free] = np.linalg.lstsq(A, b, rcond=None)[0]
    return [M[lv] @ x_leaf for lv in range(h.levels)]


@pytest.mark.parametrize("seed", range(25))
def test_two_pass_equals_dense_least_squares(seed):
    rng = np.random.default_rng(seed)
    h = random_hierarchy(rng, int(rng.integers(1, 4)), max_children=4)
    leaf_G = rng.integers(0, 4, len(h.leaves)) * (rng.random(len(h.leaves)) < 0.7)
    G = [np.bincount(h.ancestor_index(lv), weights=leaf_G, minlength=len(h.nodes_at(lv))).astype(np.int64)
         for lv in range(h.levels)]
    B = int(rng.integers(1, 6))
    Y = [rng.normal(0, 5, (len(h.nodes_at(lv)), B)) for lv in range(h.levels)]
    var = list(rng.uniform(0.1, 10.0, h.levels))
    X = gls_tree(Y, var, G, h)
    ref = _dense_gls(Y, var, G, h)
    for lv in range(h.levels):
        np.testing.assert_allclose(X[lv], ref[lv], rtol=0, atol=1e-9)
        assert np.all(X[lv][G[lv] == 0] == 0)
    for lv in range(h.levels - 1):  # consistent in the reals
        S = np.zeros_like(X[lv])
        np.add.at(S, h.parent_index(lv + 1), X[lv + 1])
        np.testing.assert_allclose(S, X[lv], rtol=0, atol=1e-9)


def test_root_variance_is_the_least_squares_variance():
    # root -> 2 leaves, unit variances: the root combines y_root (var 1) with y_a + y_b (var 2): 1 / (1 + 1/2)
    h = Hierarchy.from_edges([("*", "a"), ("*", "b")])
    G = [np.array([2]), np.array([1, 1])]
    _, v = gls_tree([np.zeros((1, 1)), np.zeros((2, 1))], [1.0, 1.0], G, h, return_root_variance=True)
    assert v == pytest.approx(2 / 3)


def test_discrete_laplace_variance():
    for scale in (0.3, 1.0, 7.5):
        k = np.arange(-400, 401)
        p = np.exp(-np.abs(k) / scale)
        p /= p.sum()
        assert discrete_laplace_variance(scale) == pytest.approx(float((p * k * k).sum()), rel=1e-9)


def test_isotonic_rows_equals_row_by_row():
    from dpcore.mechanisms.coco import isotonic_l2
    rng = np.random.default_rng(3)
    X = rng.normal(0, 50, (40, 30)) + np.linspace(0, 100, 30)
    hi = rng.integers(0, 120, 40).astype(float)
    fit = isotonic_rows(X, hi)
    for i in range(40):
        np.testing.assert_allclose(fit[i], isotonic_l2(X[i], 0.0, hi[i])[0], atol=1e-9)


def test_distribute_keeps_children_where_the_parent_agrees():
    # parent = exactly the sum of the children's rounded estimates -> children unchanged
    R = np.array([[0, 1, 3, 3], [1, 1, 2, 4], [0, 0, 0, 0]])
    P = R.sum(axis=0, keepdims=True)
    H = distribute_to_children(P, R, np.array([0, 0, 0]))
    assert np.array_equal(np.cumsum(H, axis=1), R)
    # the parent disagrees: children still sum to it, each keeps its G, all monotone
    P2 = np.array([[3, 3, 3, 7]])
    H2 = distribute_to_children(P2, R, np.array([0, 0, 0]))
    assert np.array_equal(H2.sum(axis=0), np.diff(P2[0], prepend=0))
    assert H2.sum(axis=1).tolist() == [3, 4, 0] and H2.min() >= 0


def test_distribute_rejects_inconsistent_counts():
    with pytest.raises(ValueError, match="number of groups"):
        distribute_to_children(np.array([[1, 2]]), np.array([[0, 1]]), np.array([0]))


@given(seed=st.integers(0, 10**6), depth=st.integers(1, 3), K=st.integers(1, 15),
       mean_groups=st.sampled_from([0, 1, 3, 10]), eps=st.floats(0.01, 5.0),
       method=st.sampled_from(CocoMechanism.METHODS))
@settings(max_examples=150, deadline=None)
def test_invariants_of_every_method(seed, depth, K, mean_groups, eps, method):
    """Integers, >= 0, sizes sum to G per node; parent = sum of children for the
    hierarchical methods (random hierarchies: empty and single-group nodes occur)."""
    rng = np.random.default_rng(seed)
    h = random_hierarchy(rng, depth, max_children=4)
    group_leaf, sb = random_data(rng, h, K, mean_groups=mean_groups)
    out = CocoMechanism(method, eps, K).publish(sb, h, NoiseSource(seed=seed))
    _check_invariants(method, out, h, group_counts(group_leaf, h), K)


@given(seed=st.integers(0, 10**6), depth=st.integers(1, 4), K=st.integers(1, 30))
@settings(max_examples=90, deadline=None)
def test_consistent_projection_on_arbitrary_noise(seed, depth, K):
    """The integer step holds its invariants for any real input (wild noise, per-level eps)."""
    rng = np.random.default_rng(seed)
    h = random_hierarchy(rng, depth, max_children=5)
    leaf_G = rng.integers(0, 3, len(h.leaves)) * (rng.random(len(h.leaves)) < 0.6)
    G = [np.bincount(h.ancestor_index(lv), weights=leaf_G, minlength=len(h.nodes_at(lv))).astype(np.int64)
         for lv in range(h.levels)]
    Y = [rng.normal(0, rng.uniform(0.1, 100), (len(h.nodes_at(lv)), K + 1)) for lv in range(h.levels)]
    anchor = ["root", "leaves", int(rng.integers(0, h.levels))][seed % 3]
    H, X = consistent_hc(Y, list(rng.uniform(0.01, 50, h.levels)), G, h, anchor)
    for lv in range(h.levels):
        assert H[lv].dtype == np.int64 and H[lv].min() >= 0
        assert np.array_equal(H[lv].sum(axis=1), G[lv])
        if lv:
            S = np.zeros_like(H[lv - 1])
            np.add.at(S, h.parent_index(lv), H[lv])
            assert np.array_equal(S, H[lv - 1])


def test_measurement_stage_is_the_top_down_hc_one():
    """Privacy: consistent_hc measures what top_down_hc measures (H_c of every node of every level,
    sensitivity 1, scale 1/eps_level, cost sum of eps): the same noisy cells for the same seed."""
    rng = np.random.default_rng(5)
    h = random_hierarchy(rng, 2, max_children=3)
    _, sb = random_data(rng, h, 6, mean_groups=5)
    eps = [0.3, 0.7, 1.1]
    a, b = CocoMechanism("consistent_hc", eps, 6), CocoMechanism("top_down_hc", eps, 6)
    assert a.representation == b.representation == "Hc"
    assert a.sensitivity() == b.sensitivity() == 1
    assert a.levels_measured(h) == b.levels_measured(h) == [0, 1, 2]
    assert a.total_cost(h) == b.total_cost(h)
    for lv in range(3):
        assert a.noise_scale(lv) == b.noise_scale(lv)
        assert a.measure_level(sb, h, lv, NoiseSource(seed=9)) == b.measure_level(sb, h, lv, NoiseSource(seed=9))
        assert a.level_variance(lv) == pytest.approx(discrete_laplace_variance(a.noise_scale(lv)))


def test_consistent_beats_own_estimates_on_a_dense_tree():
    """Sanity of the least squares: on a dense example, the level-1 error is below the per-node H_c L2 method's."""
    from dpcore.mechanisms.coco import coco_histograms, emd
    rng = np.random.default_rng(11)
    h = random_hierarchy(rng, 2, max_children=4)
    _, sb = random_data(rng, h, 20, mean_groups=40)
    true = coco_histograms(sb, h, 20)
    err = {}
    for m in ("consistent_hc", "hc_l2"):
        e = 0.0
        for s in range(20):
            out = CocoMechanism(m, 0.3, 20).publish(sb, h, NoiseSource(seed=s))
            e += np.mean([emd(true[n], out[n]) for n in h.nodes_at(1)])
        err[m] = e
    assert err["consistent_hc"] < err["hc_l2"]


# ------------------------------------------------- issue 19 item 3: leaves-first integer step, budget split
@pytest.mark.parametrize("seed", range(15))
def test_posterior_variances_equal_the_dense_covariance(seed):
    """gls_tree_variances = diagonal of the dense (A^T W A)^-1 (mapped to every node), incl. empty nodes."""
    from dpcore.mechanisms.coco import gls_tree_variances
    rng = np.random.default_rng(100 + seed)
    h = random_hierarchy(rng, int(rng.integers(1, 4)), max_children=4)
    leaf_G = rng.integers(0, 4, len(h.leaves)) * (rng.random(len(h.leaves)) < 0.7)
    G = [np.bincount(h.ancestor_index(lv), weights=leaf_G, minlength=len(h.nodes_at(lv))).astype(np.int64)
         for lv in range(h.levels)]
    var = list(rng.uniform(0.1, 10.0, h.levels))
    P = gls_tree_variances(var, G, h)
    M = _leaf_matrix(h)
    free = G[-1] > 0
    if not free.any():
        assert all(np.all(p == 0) for p in P)
        return
    A = np.vstack([M[lv][:, free] / np.sqrt(var[lv]) for lv in range(h.levels)])
    C = np.linalg.inv(A.T @ A)
    for lv in range(h.levels):
        Mf = M[lv][:, free]
        np.testing.assert_allclose(P[lv], np.einsum("ij,jk,ik->i", Mf, C, Mf), rtol=1e-9, atol=1e-12)


def test_leaf_anchor_keeps_rounded_leaves_and_sums_up():
    """anchor='leaves': every leaf is its own isotonic + rounded least-squares estimate; parents are sums."""
    from dpcore.mechanisms.coco.consistency import round_half_up
    rng = np.random.default_rng(4)
    h = random_hierarchy(rng, 2, max_children=4)
    leaf_G = rng.integers(1, 6, len(h.leaves))
    G = [np.bincount(h.ancestor_index(lv), weights=leaf_G, minlength=len(h.nodes_at(lv))).astype(np.int64)
         for lv in range(h.levels)]
    Y = [rng.normal(0, 2, (len(h.nodes_at(lv)), 8)) + np.linspace(0, 1, 8) * G[lv][:, None] for lv in range(h.levels)]
    H, X = consistent_hc(Y, [4.0, 2.0, 1.0], G, h, "leaves")
    L = h.levels - 1
    R = np.concatenate([round_half_up(isotonic_rows(X[L][:, :-1], G[L])), G[L][:, None]], axis=1)
    assert np.array_equal(np.cumsum(H[L], axis=1), R)
    with pytest.raises(ValueError, match="anchor"):
        consistent_hc(Y, [4.0, 2.0, 1.0], G, h, "middle")


def _public_counts(h, leaf_G):
    return {n: int(g) for lv in range(h.levels)
            for n, g in zip(h.nodes_at(lv), np.bincount(h.ancestor_index(lv), weights=leaf_G,
                                                          minlength=len(h.nodes_at(lv))).astype(np.int64))}


@pytest.mark.parametrize("method", ["consistent_hc", "consistent_hc_leaf", "top_down_hc", "hg_l2"])
def test_split_is_a_function_of_public_parameters_only(method):
    """Two data sets with the same public parameters (tree, G per node, K, total) get the identical split;
    it is exact (Fractions) and sums exactly to the total; the charged total equals it."""
    from fractions import Fraction
    from dpcore.mechanisms.coco import choose_split
    rng = np.random.default_rng(8)
    h = random_hierarchy(rng, 3, max_children=4)
    leaf_G = rng.integers(0, 30, len(h.leaves))
    counts = _public_counts(h, leaf_G)
    # two different private data sets with the same public group counts per leaf
    a = {leaf: rng.integers(1, 50, g) for leaf, g in zip(h.leaves, leaf_G)}
    b = {leaf: np.full(g, 7) for leaf, g in zip(h.leaves, leaf_G)}
    assert group_counts_of(a, h) == group_counts_of(b, h) == counts
    s1 = choose_split(h, counts, 50, "0.9", method)
    s2 = choose_split(h, dict(reversed(list(counts.items()))), 50, 0.9, method)
    assert s1 == s2 and all(isinstance(e, Fraction) and e > 0 for e in s1)
    assert sum(s1) == Fraction(9, 10) and len(s1) == h.levels
    assert CocoMechanism(method, s1, 50).total_cost(h).epsilon == Fraction(9, 10)


def group_counts_of(sizes, h):
    leaf_G = np.array([len(sizes[leaf]) for leaf in h.leaves])
    return _public_counts(h, leaf_G)


def test_split_model_and_refusals():
    from dpcore.mechanisms.coco import choose_split, split_errors
    h = Hierarchy.from_edges([("*", "a"), ("*", "b")] + [(p, f"{p}{i}") for p in "ab" for i in range(20)])
    counts = _public_counts(h, np.full(40, 5))
    s = choose_split(h, counts, 10, 3, "consistent_hc")
    # no other grid split has a smaller worst-level ratio
    e = split_errors(h, counts, [float(x) / 3 for x in s], 3)
    assert e.shape == (3,) and np.all(e > 0)
    leaf = choose_split(h, counts, 10, 3, "consistent_hc_leaf")
    assert leaf[-1] == 3 - 2 * leaf[0] and leaf[0] == leaf[1] > 0
    with pytest.raises(ValueError, match="leaves only"):
        choose_split(h, counts, 10, 3, "bottom_up_hc")
    with pytest.raises(ValueError, match="epsilon_total"):
        choose_split(h, counts, 10, 0, "consistent_hc")


def test_spec_auto_split_needs_a_total():
    from pydantic import ValidationError
    from dpcore.release.spec import CocoSpec
    ok = CocoSpec(epsilon_per_level="auto", epsilon_total=1.5, method="consistent_hc_leaf")
    assert ok.epsilon_per_level == "auto"
    with pytest.raises(ValidationError, match="epsilon_total"):
        CocoSpec(epsilon_per_level="auto", method="consistent_hc")
    with pytest.raises(ValidationError, match="only read"):
        CocoSpec(epsilon_per_level=0.5, epsilon_total=1.5)
    with pytest.raises(ValidationError, match="leaves"):
        CocoSpec(epsilon_per_level="auto", epsilon_total=1.5, method="bottom_up_hc")
