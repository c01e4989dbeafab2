"""Array-native coco path (issue 19, census scale): same release as the dict path, invariants, errors."""
from __future__ import annotations

import numpy as np
import pytest

from dpcore.mechanisms.coco import (CocoMechanism, Hierarchy, coco_histograms, hc_estimate, hc_estimate_rows,
                                    hc_variance_runs, hc_variances, level_histograms)
from dpcore.noise import NoiseSource
from test_coco import random_data, random_hierarchy

ARRAY = CocoMechanism.ARRAY_METHODS


def _flat(sizes_by_leaf, h, dtype=np.int32):
    li = np.concatenate([np.full(len(sizes_by_leaf.get(l, ())), i) for i, l in enumerate(h.leaves)])
    sz = np.concatenate([np.asarray(sizes_by_leaf.get(l, ()), dtype=np.int64) for l in h.leaves])
    return li.astype(dtype), sz.astype(dtype)


def _case(seed):
    """Random hierarchy and data with empty leaves (0 groups), a single-group leaf and many ties (small K)."""
    rng = np.random.default_rng(seed)
    h = random_hierarchy(rng, int(rng.integers(1, 4)), 4)
    K = int(rng.integers(1, 25))
    _, sb = random_data(rng, h, K, mean_groups=int(rng.integers(1, 10)), zipf=1.6 if seed % 2 else None)
    leaves = h.leaves
    sb[leaves[0]] = np.zeros(0, dtype=np.int64)
    if len(leaves) > 1:
        sb[leaves[-1]] = np.array([int(rng.integers(0, K + 1))])
    return h, K, sb


def _counts(sb, h):
    return np.array([len(sb.get(l, ())) for l in h.leaves], dtype=np.int64)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("method", ARRAY)
def test_publish_arrays_equals_publish_with_the_same_seeded_noise(seed, method):
    h, K, sb = _case(seed)
    li, sz = _flat(sb, h)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(li))  # groups in any order
    for eps in (0.25, [1.0] + [0.5] * (h.levels - 1)):
        mech = CocoMechanism(method, eps, K)
        want = mech.publish(sb, h, NoiseSource(seed=seed))
        got = mech.publish_arrays(li[order], sz[order], h, NoiseSource(seed=seed), group_chunk=7)
        assert [g.shape for g in got] == [(len(h.nodes_at(lv)), K + 1) for lv in range(h.levels)]
        d = mech.levels_to_dict(got, h)
        assert d.keys() == want.keys()
        for node in want:
            np.testing.assert_array_equal(d[node], want[node], err_msg=f"{method} node {node}")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("method", ARRAY)
def test_postprocess_arrays_equals_postprocess_on_the_same_measurements(seed, method):
    """Chunked noise draws differ from publish's single call: compare given the same noisy measurements."""
    h, K, sb = _case(100 + seed)
    li, sz = _flat(sb, h)
    mech = CocoMechanism(method, 0.5, K)
    H = level_histograms(li, sz, h, K)
    noise = NoiseSource(seed=seed)
    meas = {lv: mech.measure_arrays(H[lv], lv, h, noise, chunk_cells=2 * (K + 1) + 1)
            for lv in mech.levels_measured(h)}
    got = mech.postprocess_arrays(meas, h, _counts(sb, h))
    G = {n: int(r.sum()) for lv in range(h.levels) for n, r in zip(h.nodes_at(lv), H[lv])}
    dmeas = {lv: {n: m[i] for i, n in enumerate(h.nodes_at(lv))} for lv, m in meas.items()}
    want = mech.postprocess(dmeas, h, G)
    d = mech.levels_to_dict(got, h)
    for node in want:
        np.testing.assert_array_equal(d[node], want[node], err_msg=f"{method} node {node}")


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("method", ARRAY)
def test_invariants_of_the_array_path(seed, method):
    h, K, sb = _case(200 + seed)
    li, sz = _flat(sb, h)
    out = CocoMechanism(method, 0.3, K).publish_arrays(li, sz, h, NoiseSource(seed=seed))
    G = level_histograms(li, sz, h, K)
    for lv in range(h.levels):
        H = out[lv]
        assert H.dtype.kind == "i"
        assert (H >= 0).all()
        np.testing.assert_array_equal(H.sum(axis=1), G[lv].sum(axis=1))
        if lv and not method.startswith(("naive", "hc_")):
            pidx = h.parent_index(lv)
            sums = np.zeros_like(out[lv - 1])
            np.add.at(sums, pidx, H)
            np.testing.assert_array_equal(sums, out[lv - 1])


def test_level_histograms_equal_the_dict_path_and_clamp_in_any_chunking():
    rng = np.random.default_rng(3)
    h = random_hierarchy(rng, 3, 4)
    K = 9
    n = 500
    li = rng.integers(0, len(h.leaves), n)
    raw = rng.integers(0, 3 * K, n)  # above K: clamped
    sb = {l: np.minimum(raw[li == i], K) for i, l in enumerate(h.leaves)}
    want = coco_histograms(sb, h, K)
    for chunk in (1, 13, 10_000):
        for dt in (np.int32, np.int64, np.uint16):
            got = level_histograms(li.astype(dt), raw.astype(dt), h, K, chunk=chunk)
            for lv in range(h.levels):
                assert got[lv].dtype == np.int32
                for node, row in zip(h.nodes_at(lv), got[lv]):
                    np.testing.assert_array_equal(row, want[node])


def test_hc_rows_and_variance_runs_equal_the_per_node_functions():
    rng = np.random.default_rng(5)
    K, n = 12, 40
    G = rng.integers(0, 30, n)
    G[:3] = [0, 1, 2]
    noisy = np.cumsum(rng.integers(0, 3, (n, K + 1)), axis=1) + rng.integers(-4, 5, (n, K + 1))
    H = hc_estimate_rows(noisy, G)
    for i in range(n):
        np.testing.assert_array_equal(H[i], hc_estimate(noisy[i].astype(float), int(G[i]), "l2"))
    for rule in ("positional", "slides"):
        row, size, count, var = hc_variance_runs(H, 0.7, rule)
        for i in range(n):
            k = row == i
            np.testing.assert_array_equal(np.repeat(size[k], count[k]), np.repeat(np.arange(K + 1), H[i]))
            np.testing.assert_array_equal(np.repeat(var[k], count[k]), hc_variances(H[i], 0.7, rule))
    with pytest.raises(ValueError, match="rule"):
        hc_variance_runs(H, 0.7, "nope")


def test_array_path_errors():
    h = Hierarchy.from_edges([("*", "a"), ("*", "b")])
    li, sz = np.array([0, 1, 1]), np.array([1, 2, 3])
    with pytest.raises(ValueError, match="leaf_index must be in"):
        level_histograms(np.array([0, 2, 1]), sz, h, 5)
    with pytest.raises(ValueError, match=">= 0"):
        level_histograms(li, np.array([1, -1, 2]), h, 5)
    with pytest.raises(ValueError, match="same length"):
        level_histograms(li, sz[:2], h, 5)
    with pytest.raises(ValueError, match="integer"):
        level_histograms(li, sz.astype(float), h, 5)
    for m in ("top_down_hg", "bottom_up_hg", "hg_l2"):
        with pytest.raises(ValueError, match="no array path"):
            CocoMechanism(m, 1.0, 5).publish_arrays(li, sz, h, NoiseSource(seed=1))
    mech = CocoMechanism("top_down_hc", 1.0, 5)
    H = level_histograms(li, sz, h, 5)
    with pytest.raises(ValueError, match="shape"):
        mech.measure_arrays(H[1][:1], 1, h, NoiseSource(seed=1))
    with pytest.raises(ValueError, match="lack level"):
        mech.postprocess_arrays({1: mech.measure_arrays(H[1], 1, h, NoiseSource(seed=1))}, h, [1, 2])
    with pytest.raises(ValueError, match="leaf_group_counts"):
        mech.postprocess_arrays({}, h, [1, 2, 3])
    with pytest.raises(ValueError, match="not measured"):
        CocoMechanism("bottom_up_hc", 1.0, 5).measure_arrays(H[0], 0, h, NoiseSource(seed=1))


def test_top_down_runs_rejects_inconsistent_counts():
    h = Hierarchy.from_edges([("*", "a"), ("*", "b")])
    mech = CocoMechanism("top_down_hc", 1.0, 3)
    meas = {0: np.array([[0, 1, 2, 3]]), 1: np.array([[0, 1, 1, 1], [0, 0, 1, 1]])}
    est = mech.postprocess_arrays(meas, h, [1, 1])  # consistent: fine
    assert est[0].sum() == 2
    from dpcore.mechanisms.coco import top_down_runs
    from dpcore.mechanisms.coco.arrays import hc_estimate_rows as rows
    bad = [rows(meas[0], np.array([3])), rows(meas[1], np.array([1, 1]))]
    with pytest.raises(ValueError, match="number of groups"):
        top_down_runs(bad, [1.0, 1.0], h, 3)


@pytest.mark.parametrize("method", ["top_down_hc", "bottom_up_hc"])
def test_array_path_equals_publish_on_a_dense_four_level_tree(method):
    """Housing-like sizes, 10^5 groups over 3 x 4 x 10 tracts (many runs and pieces per node), groups in random order."""
    rng = np.random.default_rng(8)
    edges = [("*", f"s{s}") for s in range(3)]
    edges += [(f"s{s}", f"s{s}c{c}") for s in range(3) for c in range(4)]
    edges += [(f"s{s}c{c}", f"s{s}c{c}t{t}") for s in range(3) for c in range(4) for t in range(10)]
    h = Hierarchy.from_edges(edges)
    K, n = 200, 100_000
    w = rng.lognormal(0, 1, len(h.leaves))
    li = rng.choice(len(h.leaves), n, p=w / w.sum()).astype(np.int32)
    sz = rng.choice(np.arange(1, 8), n, p=[0.27, 0.34, 0.16, 0.13, 0.06, 0.025, 0.015])
    gq = rng.random(n) < 0.01
    sz[gq] = np.floor(8 * rng.random(int(gq.sum())) ** (-1 / 0.9)).clip(max=10**6).astype(np.int64)
    sb = {l: np.minimum(sz[li == i], K) for i, l in enumerate(h.leaves)}
    for eps in (0.2, 2.0):
        mech = CocoMechanism(method, eps, K)
        want = mech.publish(sb, h, NoiseSource(seed=3))
        got = mech.levels_to_dict(mech.publish_arrays(li, sz.astype(np.int32), h, NoiseSource(seed=3)), h)
        for node in want:
            np.testing.assert_array_equal(got[node], want[node], err_msg=node)
