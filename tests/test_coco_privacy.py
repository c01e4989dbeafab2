"""Privacy audit of the count-of-counts mechanism (issue 7).

* Sensitivity: on tiny instances, adding or removing one item (brute force over
  every group and every starting configuration, with clamping at K) changes
  the perturbed representation of a level by at most the stated L1
  sensitivity, and the bound is attained.
* Exact privacy loss of a level's release on the worst neighbouring pair is
  at most the charged epsilon.
* Noise: measure_level makes one discrete_laplace call per level with scale
  sensitivity / epsilon on the true representation.
* Post-processing reads only the stored measurements and public counts.
"""
from __future__ import annotations

import inspect
import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.coco import CocoMechanism, Hierarchy, group_counts, group_sizes_by_leaf
from dpcore.noise import NoiseSource

K = 3
# root -> {x, y}; x -> {x1, x2}; y -> {y1}
HIER = Hierarchy.from_edges([("*", "x"), ("*", "y"), ("x", "x1"), ("x", "x2"), ("y", "y1")])
GROUP_LEAF = pd.Series(["x1", "x1", "x2", "y1"], index=["g0", "g1", "g2", "g3"])
REPS = {"naive": 2, "hg_l2": 1, "hc_l2": 1}


_LEAF_OF = GROUP_LEAF.to_numpy()


def _sizes(raw_counts):
    """sizes_by_leaf for raw item counts per group, clamped at K (same as
    group_sizes_by_leaf, checked once below, without pandas for speed)."""
    c = np.minimum(np.asarray(raw_counts, dtype=np.int64), K)
    return {leaf: c[_LEAF_OF == leaf] for leaf in HIER.leaves}


def test_fast_sizes_agree_with_group_sizes_by_leaf():
    raw = [5, 0, 2, 1]
    items = np.repeat(GROUP_LEAF.index.to_numpy(), raw)
    ref = group_sizes_by_leaf(items, GROUP_LEAF, K, hierarchy=HIER)
    fast = _sizes(raw)
    assert ref.keys() == fast.keys()
    for leaf in ref:
        assert np.array_equal(ref[leaf], fast[leaf])


def _level_vector(mech, raw_counts, level):
    _, _, values = mech.true_level(_sizes(raw_counts), HIER, level)
    return values


@pytest.mark.parametrize("method", list(CocoMechanism.METHODS))
def test_sensitivity_brute_force_add_remove_one_item(method):
    mech = CocoMechanism(method, 1.0, K)
    sens = mech.sensitivity()
    assert sens == (2 if method == "naive" else 1)
    worst = 0
    # raw counts 0..K+1 (K+1 is clamped to K) for each of the 4 groups
    for raw in itertools.product(range(K + 2), repeat=len(GROUP_LEAF)):
        raw = np.array(raw)
        for level in mech.levels_measured(HIER):
            base = _level_vector(mech, raw, level)
            for g in range(len(raw)):
                for delta in (+1, -1):
                    nb = raw.copy()
                    nb[g] += delta
                    if nb[g] < 0:
                        continue
                    other = _level_vector(mech, nb, level)
                    assert other.shape == base.shape  # G is public: lengths never change
                    d = int(np.abs(other - base).sum())
                    assert d <= sens, (method, raw, g, delta, level, d)
                    worst = max(worst, d)
    assert worst == sens  # the stated sensitivity is attained (tight)


def test_clamped_group_change_is_invisible():
    mech = CocoMechanism("hc_l2", 1.0, K)
    raw = np.array([K, 1, 0, 2])
    raw2 = raw.copy()
    raw2[0] += 1  # K -> K+1, clamped back to K
    for level in range(HIER.levels):
        assert np.array_equal(_level_vector(mech, raw, level), _level_vector(mech, raw2, level))


def _dlap_logpmf(z, s):
    return -abs(z) / s - math.log((1 - math.exp(-1 / s)) / (1 + math.exp(-1 / s)))


@pytest.mark.parametrize("method", ["naive", "hg_l2", "hc_l1", "top_down_hg", "bottom_up_hc"])
def test_exact_privacy_loss_of_a_level_within_charged_epsilon(method):
    """Exact output distribution of one level's release on the worst neighbours:
    the max log-ratio over all outputs (a product of discrete Laplace pmfs)
    equals ||v - v'||_1 / scale <= epsilon charged by level_cost."""
    eps = [0.7, 0.3, 1.1]
    mech = CocoMechanism(method, eps, K)
    for level in mech.levels_measured(HIER):
        s = mech.noise_scale(level)
        charged = mech.level_cost(level, HIER).epsilon
        worst = 0.0
        for raw in itertools.product(range(K + 1), repeat=len(GROUP_LEAF)):
            raw = np.array(raw)
            v = _level_vector(mech, raw, level)
            for g in range(len(raw)):
                nb = raw.copy()
                nb[g] += 1
                w = _level_vector(mech, nb, level)
                # per cell the log-ratio is maximised at output o = v_i (|o - w_i| - |o - v_i|
                # <= |v_i - w_i|, attained there); evaluate it exactly on that output
                loss = sum(_dlap_logpmf(0, s) - _dlap_logpmf(int(vi - wi), s) for vi, wi in zip(v, w))
                worst = max(worst, loss)
        assert worst <= float(charged) + 1e-12
        assert worst == pytest.approx(float(charged), rel=1e-9)  # tight


class _Spy:
    def __init__(self, monkeypatch):
        self.calls = []
        orig = NoiseSource.discrete_laplace
        spy = self

        def wrapped(self_, values, scale):
            spy.calls.append((np.asarray(values).copy(), scale))
            return orig(self_, values, scale)

        monkeypatch.setattr(NoiseSource, "discrete_laplace", wrapped)


@pytest.mark.parametrize("method", list(CocoMechanism.METHODS))
def test_noise_scale_is_sensitivity_over_epsilon(monkeypatch, method):
    spy = _Spy(monkeypatch)
    eps = [0.5, 0.3, 2.0]
    mech = CocoMechanism(method, eps, K)
    raw = np.array([3, 1, 0, 2])
    items = np.repeat(GROUP_LEAF.index.to_numpy(), raw)
    sb = group_sizes_by_leaf(items, GROUP_LEAF, K, hierarchy=HIER)
    noise = NoiseSource(seed=3)
    for level in mech.levels_measured(HIER):
        before = len(spy.calls)
        out = mech.measure_level(sb, HIER, level, noise)
        assert len(spy.calls) == before + 1  # one vectorised draw per level
        values, scale = spy.calls[-1]
        exact_scale = Fraction(mech.sensitivity()) / Fraction(str(eps[level]))
        assert Fraction(scale) >= exact_scale  # never less noise than charged
        assert scale == pytest.approx(float(exact_scale), rel=1e-15)
        assert np.array_equal(values, mech.true_level(sb, HIER, level)[2])
        assert set(out) == set(HIER.nodes_at(level))
        assert all(isinstance(c, int) for cells in out.values() for c in cells)
        assert mech.level_cost(level) == PrivacyCost(str(eps[level]))
    if method.startswith("bottom_up"):
        assert mech.levels_measured(HIER) == [HIER.levels - 1]
        assert mech.level_cost(0, HIER) == PrivacyCost(0)
        assert mech.total_cost(HIER) == PrivacyCost("2.0")
    else:
        assert mech.levels_measured(HIER) == [0, 1, 2]
        assert mech.total_cost(HIER) == PrivacyCost("2.8")


def test_unmeasured_level_is_refused():
    mech = CocoMechanism("bottom_up_hg", 1.0, K)
    sb = group_sizes_by_leaf(np.array(["g0"]), GROUP_LEAF, K, hierarchy=HIER)
    with pytest.raises(ValueError, match="not measured"):
        mech.measure_level(sb, HIER, 0, NoiseSource(seed=1))


def test_postprocess_signature_has_no_private_input():
    params = list(inspect.signature(CocoMechanism.postprocess).parameters)
    assert params == ["self", "measurements", "hierarchy", "group_counts"]


@pytest.mark.parametrize("method", list(CocoMechanism.METHODS))
def test_postprocess_depends_only_on_measurements_and_public_counts(monkeypatch, method):
    mech = CocoMechanism(method, 0.5, K)
    counts = group_counts(GROUP_LEAF, HIER)
    d1 = group_sizes_by_leaf(np.repeat(GROUP_LEAF.index.to_numpy(), [3, 1, 0, 2]), GROUP_LEAF, K, hierarchy=HIER)
    d2 = group_sizes_by_leaf(np.repeat(GROUP_LEAF.index.to_numpy(), [0, 0, 3, 3]), GROUP_LEAF, K, hierarchy=HIER)
    noise = NoiseSource(seed=11)
    meas = {lv: mech.measure_level(d1, HIER, lv, noise) for lv in mech.levels_measured(HIER)}
    stored = json.loads(json.dumps(meas))  # what the ledger keeps (string keys)
    first = mech.postprocess(meas, HIER, counts)
    # touch a different private dataset in between, and forbid any noise draw
    mech.measure_level(d2, HIER, mech.levels_measured(HIER)[0], noise)

    def boom(*a, **k):
        raise AssertionError("postprocess drew noise")

    for name in ("discrete_laplace", "gaussian", "integers", "uniform01", "bernoulli"):
        monkeypatch.setattr(NoiseSource, name, boom)
    again = mech.postprocess(stored, HIER, counts)
    assert first.keys() == again.keys()
    for node in first:
        assert np.array_equal(first[node], again[node])
