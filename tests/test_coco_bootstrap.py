"""Empirical accuracy of coco releases (issue 16, part 1): the parametric bootstrap from the release.

The figure is post-processing of the release: it reads only the released
histograms and public structures (so it is identical whenever the release is),
it is reproducible from the public seed, it covers every level (also the
unmeasured upper levels of bottom-up methods), and on data like the release it
covers the stated share of cell errors.
"""
from __future__ import annotations

import numpy as np
import pytest

from dpcore.mechanisms.coco import CocoMechanism, Hierarchy, coco_histograms, group_counts
from dpcore.mechanisms.coco.bootstrap import bootstrap_level_errors
from dpcore.mechanisms.coco.representations import counts_from_leaf_counts
from dpcore.noise import NoiseSource

K = 12


def _world(seed=0, leaves=6, groups=40):
    rng = np.random.default_rng(seed)
    edges = [("*", "a"), ("*", "b")] + [("a" if i < leaves // 2 else "b", f"l{i}") for i in range(leaves)]
    h = Hierarchy.from_edges(edges)
    sizes = {f"l{i}": np.minimum(rng.geometric(0.25, size=groups) - 1, K).astype(np.int64) for i in range(leaves)}
    G = counts_from_leaf_counts(np.array([len(sizes[leaf]) for leaf in h.leaves]), h)
    return h, sizes, G


@pytest.mark.parametrize("method", ["top_down_hc", "bottom_up_hg", "hc_l2", "naive"])
def test_every_level_gets_a_figure_and_it_is_reproducible(method):
    h, sizes, G = _world()
    mech = CocoMechanism(method, 0.5, K)
    released = mech.publish(sizes, h, NoiseSource(seed=1))
    a = bootstrap_level_errors(mech, h, G, released, alpha=0.05, replicates=8)
    b = bootstrap_level_errors(mech, h, G, {n: np.array(v) for n, v in released.items()}, alpha=0.05, replicates=8)
    assert sorted(a) == list(range(h.levels))  # also the levels bottom-up does not measure
    assert a == b  # a function of the release and the public seed only
    for lv, e in a.items():
        assert e.cell_half_width >= 0 and e.mean_node_l1 >= 0 and e.replicates == 8


def test_more_budget_gives_smaller_figures():
    h, sizes, G = _world(seed=3)
    widths = []
    for eps in (0.2, 5.0):
        mech = CocoMechanism("top_down_hc", eps, K)
        released = mech.publish(sizes, h, NoiseSource(seed=2))
        widths.append(bootstrap_level_errors(mech, h, G, released, 0.05, 10)[2].mean_node_l1)
    assert widths[1] < widths[0]


def test_figure_covers_the_true_errors_on_data_like_the_release():
    """On the true data, the stated 95% cell half-width (from one release's bootstrap) covers about 95%
    of the cell errors of fresh releases: it is an estimate, so the check allows a margin."""
    h, sizes, G = _world(seed=5, leaves=8, groups=60)
    mech = CocoMechanism("top_down_hc", 1.0, K)
    released = mech.publish(sizes, h, NoiseSource(seed=7))
    stated = bootstrap_level_errors(mech, h, G, released, 0.05, 20)
    truth = coco_histograms(sizes, h, K)
    noise = NoiseSource(seed=11)
    errs = {lv: [] for lv in range(h.levels)}
    for _ in range(30):
        est = mech.publish(sizes, h, noise)
        for lv in range(h.levels):
            for n in h.nodes_at(lv):
                d = np.abs(np.asarray(est[n]) - truth[n])
                errs[lv].append(d[(np.asarray(est[n]) != 0) | (truth[n] != 0)])
    for lv in range(h.levels):
        e = np.concatenate(errs[lv])
        assert np.mean(e <= stated[lv].cell_half_width) >= 0.85, (lv, stated[lv], np.quantile(e, 0.95))


def test_bad_arguments_are_named():
    h, sizes, G = _world()
    mech = CocoMechanism("top_down_hc", 0.5, K)
    released = mech.publish(sizes, h, NoiseSource(seed=1))
    with pytest.raises(ValueError, match="replicates"):
        bootstrap_level_errors(mech, h, G, released, 0.05, 0)
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_level_errors(mech, h, G, released, 1.5, 5)
    bad = dict(released)
    bad[h.leaves[0]] = np.array([1, 2])
    with pytest.raises(ValueError, match=h.leaves[0]):
        bootstrap_level_errors(mech, h, G, bad, 0.05, 5)


def test_group_counts_helper_is_the_public_one():
    # the world's public G_τ equal the groups table's counts (the bootstrap's consistency input)
    import pandas as pd

    h, sizes, G = _world()
    leaf = pd.Series([leaf for leaf in h.leaves for _ in sizes[leaf]],
                     index=[f"g{i}" for i in range(sum(len(s) for s in sizes.values()))])
    assert group_counts(leaf, h) == G
