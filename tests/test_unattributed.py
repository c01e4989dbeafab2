"""Unattributed histograms (issue 17): interface, invariants, noiseless truth, exact privacy audits.

Audit method: a recording :class:`NoiseSource` keeps every ``discrete_laplace``
call (true values, scale, noisy output).  For neighbouring inputs ``x ~ x'``
the neighbour's run *replays* the noisy outputs of ``x``'s run, so both runs
follow the same adaptive path (same DAWA partition, same AHP clusters); the
privacy loss of that output is exactly
``sum_calls sum_i (|y_i - v'_i| - |y_i - v_i|) / s`` (discrete Laplace pmf
``∝ exp(-|z|/s)``, equal normalisers), and its maximum over outputs is
``sum_calls ||v - v'||_1 / s``.  Both are computed in exact rationals and must
not exceed the charged epsilon.
"""
from __future__ import annotations

import importlib.util
import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.unattributed import (METHODS, NEEDS_SIZE_BOUND, UnattributedHistogramMechanism, accuracy,
                                            as_sorted_sizes, choose_method)
from dpcore.mechanisms.unattributed.mechanism import HMM_MAX_G
from dpcore.mechanisms.unattributed import mechanism as mech_mod
from dpcore.mechanisms.unattributed.mechanism import hg_postprocess
from dpcore.noise import NoiseSource, conservative_scale


def _have(mod: str) -> bool:
    return importlib.util.find_spec(f"dpcore.mechanisms.unattributed.{mod}") is not None


def _skip_missing(method: str):
    if method == "pfl":
        pytest.importorskip("dpcore.mechanisms.unattributed.pfl")
    if method.startswith("hmm_"):
        pytest.importorskip("dpcore.mechanisms.unattributed.hmm")
    if method.split("_")[0] in ("dawa", "ahp", "hbtree"):
        pytest.importorskip("dpcore.mechanisms.unattributed.range_algorithms")


NOISE_METHODS = [m for m in METHODS if m != "pfl"]  # every method whose noise is discrete Laplace


class Recorder(NoiseSource):
    """A seeded noise source that records (or replays) every discrete Laplace call."""

    def __init__(self, seed=0, replay=None):
        super().__init__(seed=seed)
        self.calls = []
        self.replay = None if replay is None else list(replay)

    def discrete_laplace(self, values, scale):
        v = np.asarray(values).astype(np.int64).copy()
        if self.replay is not None:
            y = np.asarray(self.replay.pop(0))
            assert y.shape == v.shape, "neighbouring runs measured vectors of different shapes"
        else:
            y = super().discrete_laplace(values, scale)
        self.calls.append((v, float(scale), np.asarray(y).copy()))
        return np.asarray(y).copy()


def audit(method, x, x_nb, eps, K, seed=0):
    """(exact loss of the realised output, worst-case loss over outputs) for x -> x_nb, as Fractions."""
    mech = UnattributedHistogramMechanism(method, eps, K)
    rec = Recorder(seed)
    mech.release(x, rec)
    rep = Recorder(seed, replay=[c[2] for c in rec.calls])
    mech.release(x_nb, rep)
    assert len(rep.calls) == len(rec.calls)
    realised = worst = Fraction(0)
    for (v, s, y), (v2, s2, _) in zip(rec.calls, rep.calls):
        assert s == s2, "a noise scale depends on the data"
        S = Fraction(s)
        worst += Fraction(int(np.abs(v - v2).sum())) / S
        realised += Fraction(int((np.abs(y - v2) - np.abs(y - v)).sum())) / S
    return realised, worst


def _tiny_pairs(G=3, K=4):
    """Every sorted vector of G sizes in [0, K] with every neighbour (one item added to one group)."""
    out = []
    for x in itertools.combinations_with_replacement(range(K + 1), G):
        x = np.array(x[::-1], dtype=np.int64)
        for i in range(G):
            if x[i] < K:
                y = x.copy()
                y[i] += 1
                out.append((x, np.sort(y)[::-1]))
    return out


# ----------------------------------------------------------------- interface
def test_methods_and_exports():
    assert len(METHODS) == 17 and len(set(METHODS)) == 17
    assert "auto" not in METHODS
    m = UnattributedHistogramMechanism("hg_l1", 0.5)
    assert m.notion == "dp" and m.neighbour == "add-remove"
    assert m.name == "unattributed-hg-l1"
    assert m.params() == {"method": "hg_l1", "epsilon": 0.5, "size_bound": None}


@pytest.mark.parametrize("method", METHODS)
def test_privacy_map_is_pure_epsilon(method):
    m = UnattributedHistogramMechanism(method, 0.3, 50)
    assert m.cost == PrivacyCost("0.3", 0)
    assert m.privacy_map(2) == PrivacyCost("0.6", 0)
    assert m.cost.delta == 0


def test_pfl_charges_pure_epsilon_whatever_G():
    """Issue 28 section 5: pfl's exact chain sampler charges no delta (it charged (1 + e^eps) tv before)."""
    from dpcore.mechanisms.unattributed.pfl import pfl_cost

    m = UnattributedHistogramMechanism("pfl", 0.3, 50, groups=1000)
    assert m.cost == pfl_cost("0.3", 1000, 50) == PrivacyCost("0.3", 0)
    assert m.privacy_map(2) == PrivacyCost("0.6", 0)
    assert m.privacy_map(0) == PrivacyCost(0, 0)
    unknown = UnattributedHistogramMechanism("pfl", 0.3, 50)  # the plan for the public maximum G
    assert unknown.cost == PrivacyCost("0.3", 0)
    big = UnattributedHistogramMechanism("pfl", 0.1, 1000, groups=13_775)  # the case: delta was ~8e-6
    assert big.cost == PrivacyCost("0.1", 0)
    with pytest.raises(ValueError, match="groups=1000 was given"):
        m.release(np.arange(10), NoiseSource(seed=0))


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="auto", epsilon=1), "choose_method"),
    (dict(method="hg", epsilon=1), "method must be one of"),
    (dict(method="hg_l1", epsilon=0), "epsilon must be > 0"),
    (dict(method="hg_l1", epsilon=-1), "epsilon"),
    (dict(method="hg_l1", epsilon=float("nan")), "epsilon must be a finite"),
    (dict(method="hg_l1", epsilon=float("inf")), "epsilon must be a finite"),
    (dict(method="hg_l1", epsilon=True), "epsilon must be a finite"),
    (dict(method="hg_l1", epsilon=1, size_bound=0), "size_bound must be None or an integer >= 1"),
    (dict(method="hg_l1", epsilon=1, size_bound=2.5), "size_bound"),
    (dict(method="hc_l1", epsilon=1), "size_bound .* is required by method='hc_l1'"),
    (dict(method="dawa_h", epsilon=1), "size_bound .* is required"),
])
def test_validate_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        UnattributedHistogramMechanism(**kwargs).validate()


@pytest.mark.parametrize("sizes, match", [
    ([], "must not be empty"),
    ([1.5, 2], "non-integer"),
    ([1, -1], "negative"),
    ([1.0, float("nan")], "NaN"),
    ([1.0, float("inf")], "infinite"),
    ([[1, 2]], "1-d"),
    (["a", "b"], "non-negative integers"),
    ([True, False], "non-negative integers"),
    ([3, 11], "size_bound=10"),
])
def test_bad_sizes(sizes, match):
    m = UnattributedHistogramMechanism("hg_l2", 1.0, 10)
    with pytest.raises(ValueError, match=match):
        m.release(sizes, NoiseSource(seed=0))


def test_bad_size_message_shows_no_value():
    m = UnattributedHistogramMechanism("hg_l2", 1.0, 10)
    with pytest.raises(ValueError) as e:
        m.release([3, 987654], NoiseSource(seed=0))
    assert "987654" not in str(e.value)


def test_integer_floats_are_accepted():
    assert as_sorted_sizes([1.0, 3.0, 2.0]).tolist() == [3, 2, 1]


# ---------------------------------------------------------------- invariants
def _zipf_sizes(G, K, seed):
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(1.7, G) - 1, K)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_invariants(method, eps):
    _skip_missing(method)
    for seed, (G, K) in enumerate([(1, 5), (7, 3), (200, 60)]):
        x = _zipf_sizes(G, K, seed)
        for bound in ([K] if method in NEEDS_SIZE_BOUND else [K, None]):
            out = UnattributedHistogramMechanism(method, eps, bound).release(x, NoiseSource(seed=seed))
            assert out.dtype == np.int64 and out.shape == (G,)
            assert (out >= 0).all()
            assert (np.diff(out) <= 0).all()
            if bound is not None:
                assert (out <= bound).all()


@pytest.mark.parametrize("method", METHODS)
def test_noiseless_returns_truth(method):
    _skip_missing(method)
    for seed, (G, K) in enumerate([(1, 5), (9, 4), (300, 40)]):
        x = _zipf_sizes(G, K, seed + 10)
        out = UnattributedHistogramMechanism(method, 1e6, K).release(x, NoiseSource(seed=seed))
        assert out.tolist() == sorted(x.tolist(), reverse=True)


def test_input_order_does_not_matter():
    x = np.array([5, 0, 3, 3, 9, 1])
    a = UnattributedHistogramMechanism("hg_l1", 1.0, 10).release(x, NoiseSource(seed=3))
    b = UnattributedHistogramMechanism("hg_l1", 1.0, 10).release(x[::-1].copy(), NoiseSource(seed=3))
    assert a.tolist() == b.tolist()


# ------------------------------------------------------------------ privacy
@pytest.mark.parametrize("method", NOISE_METHODS)
def test_exact_privacy_audit(method):
    """Every neighbouring pair of tiny inputs (both directions), several noise draws:
    realised and worst-case privacy loss <= the charged epsilon."""
    _skip_missing(method)
    eps = Fraction(7, 10)
    charged = UnattributedHistogramMechanism(method, "0.7", 4).cost.epsilon
    assert charged == eps
    worst_seen = Fraction(0)
    for x, y in _tiny_pairs():
        for a, b in ((x, y), (y, x)):
            for seed in range(2):
                realised, worst = audit(method, a, b, "0.7", 4, seed)
                assert realised <= charged and worst <= charged
                worst_seen = max(worst_seen, worst)
    assert worst_seen > 0  # the audit saw a real change of the measurement


def test_single_measurement_audit_is_tight():
    """hg/hc/naive: one call, scale 1/eps, a neighbour moves one entry by 1: loss = 1/s = eps (rounded down)."""
    for method in ("naive", "hg_l2", "hc_l1"):
        _, worst = audit(method, np.array([3, 1, 0]), np.array([3, 2, 0]), "0.7", 4)
        s = Fraction(conservative_scale(1, Fraction(7, 10)))
        assert worst == 1 / s and Fraction(69999, 100000) < worst <= Fraction(7, 10)


@pytest.mark.parametrize("method", ["hg_l2", "hc_l2", "naive"])
def test_wrong_scale_fails_the_audit(method, monkeypatch):
    """Half the noise scale: the audit must catch it (the audit is not vacuous)."""
    monkeypatch.setattr(mech_mod, "conservative_scale", lambda n, d: conservative_scale(n, d) / 2)
    _, worst = audit(method, np.array([3, 1, 0]), np.array([3, 2, 0]), "0.7", 4)
    assert worst > Fraction(7, 10)


# ------------------------------------------------------- post-processing facts
@pytest.mark.parametrize("loss", ["l1", "l2"])
def test_isotonic_postprocess_is_sup_norm_contraction(loss):
    """The fact behind accuracy()'s max_entry_error: |y - t| <= M everywhere => |est - t| <= M."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        G = int(rng.integers(1, 40))
        t = np.sort(rng.integers(0, 30, G))[::-1]
        M = int(rng.integers(0, 6))
        y = t + rng.integers(-M, M + 1, G)
        est = hg_postprocess(y, 30, loss)
        assert np.abs(est - t).max() <= M


def test_accuracy_bound_holds_empirically():
    """The public max_entry_error bound holds in >= 1 - alpha of the runs (it is conservative)."""
    G, K, eps, alpha = 100, 50, 0.5, 0.2
    x = _zipf_sizes(G, K, 1)
    truth = np.sort(x)[::-1]
    for method in ("naive", "hg_l1", "hg_l2"):
        acc = accuracy(method, eps, G, K, alpha)
        assert acc["kind"] == "bound"
        ok = sum(np.abs(UnattributedHistogramMechanism(method, eps, K).release(x, NoiseSource(seed=s)) - truth).max()
                 <= acc["max_entry_error"] for s in range(50))
        assert ok >= 0.8 * 50
    acc = accuracy("hc_l1", eps, G, K, alpha)
    ok = sum(np.abs(UnattributedHistogramMechanism("hc_l1", eps, K).release(x, NoiseSource(seed=s)) - truth).sum()
             <= acc["l1_bound"] for s in range(50))
    assert ok >= 0.8 * 50


def test_accuracy_labels():
    assert accuracy("dawa_hg", 1.0, 10)["kind"] == "empirical"
    assert accuracy("hmm_viterbi", 1.0, 10)["kind"] == "measurement"
    assert accuracy("hc_l2", 1.0, 10, 5)["kind"] == "bound"
    with pytest.raises(ValueError, match="size_bound"):
        accuracy("hc_l2", 1.0, 10)
    with pytest.raises(ValueError, match="alpha"):
        accuracy("hg_l2", 1.0, 10, None, 1.5)


# ------------------------------------------------------------------- auto
def test_choose_method_rules():
    # L2: HMM forward-backward at every epsilon up to HMM_MAX_G groups, then hg_l1 (benchmarks/unattributed.py)
    for eps in (0.1, 0.5, 1.0, 2.0):
        assert choose_method(eps, 1000, 100, "l2") == "hmm_forward_backward"
        assert choose_method(eps, 1000, None, "l2") == "hmm_forward_backward"
    assert choose_method(1.0, HMM_MAX_G, 10, "l2") == "hmm_forward_backward"
    assert choose_method(1.0, HMM_MAX_G + 1, 10, "l2") == "hg_l1"
    # L1: hc_l1 when K is known and K <= G (its noise is on K + 1 cells), else hg_l1
    assert choose_method(0.1, 1000, 100, "l1") == "hc_l1"
    assert choose_method(2.0, 1000, 1000, "l1") == "hc_l1"
    assert choose_method(2.0, 1000, 1001, "l1") == "hg_l1"
    assert choose_method(0.1, 224, 20000, "l1") == "hg_l1"
    assert choose_method(0.1, 1000, None, "l1") == "hg_l1"
    for eps in (0.1, 1, 3):
        for G in (1, 100, 10 ** 6):
            for K in (None, 1, 1000):
                for metric in ("l1", "l2"):
                    m = choose_method(eps, G, K, metric)
                    assert m in METHODS
                    UnattributedHistogramMechanism(m, eps, K).validate()
    with pytest.raises(ValueError, match="metric"):
        choose_method(1, 10, 5, "linf")
    with pytest.raises(ValueError, match="G must be"):
        choose_method(1, 0, 5, "l1")


# ------------------------------------------------- composed methods: stage audits
from dpcore.mechanisms.unattributed import range_algorithms as ra  # noqa: E402
from dpcore.mechanisms.unattributed.mechanism import REPRESENTATION_METHODS, SENSITIVITY  # noqa: E402


@pytest.mark.parametrize("alg", ["dawa", "ahp", "hbtree"])
def test_plan_epsilons_sum_to_total(alg):
    for n in (1, 2, 3, 8, 100, 10 ** 4 + 1, 10 ** 6):
        for D in (1, 2):
            for eps in (Fraction(1, 10), Fraction(7, 10), Fraction(3)):
                stages = ra.plan(alg, n, D, eps)
                assert sum(s.epsilon for s in stages) == eps
                for s in stages:
                    assert s.epsilon > 0
                    assert Fraction(s.scale) >= Fraction(s.sensitivity) / s.epsilon
                    assert s.scale == conservative_scale(s.sensitivity, s.epsilon)


@pytest.mark.parametrize("method", sorted(REPRESENTATION_METHODS))
def test_stage_sensitivities_and_scales(method):
    """Each drawn call uses its planned scale, and no neighbour moves a stage's measured vector by more than
    the stage's stated L1 sensitivity (brute force over every tiny neighbouring pair, both directions)."""
    alg, rep = REPRESENTATION_METHODS[method]
    K = 4
    attained = set()
    for x, y in _tiny_pairs(G=3, K=K):
        for a, b in ((x, y), (y, x)):
            mech = UnattributedHistogramMechanism(method, "0.7", K)
            rec = Recorder(0)
            mech.release(a, rec)
            rep_ = Recorder(0, replay=[c[2] for c in rec.calls])
            mech.release(b, rep_)
            vec_len = 3 if rep == "hg" else K + 1
            stages = ra.plan(alg, vec_len, SENSITIVITY[rep], Fraction(7, 10))
            assert [c[1] for c in rec.calls] == [s.scale for s in stages]
            for (v, _, _), (v2, _, _), st in zip(rec.calls, rep_.calls, stages):
                d = int(np.abs(v - v2).sum())
                assert d <= st.sensitivity
                if d == st.sensitivity:
                    attained.add(st.name)
    assert attained  # the stated sensitivities are attained on some pair (not loose by construction)


@pytest.mark.parametrize("method", ["dawa_hg", "dawa_h", "ahp_hc", "hbtree_hg", "hbtree_h"])
def test_wrong_scale_fails_composed_audit(method, monkeypatch):
    monkeypatch.setattr(ra, "conservative_scale", lambda n, d: conservative_scale(n, d) / 2)
    worst = max(audit(method, a, b, "0.7", 4)[1] for a, b in _tiny_pairs())
    assert worst > Fraction(7, 10)


def _brute_dyadic(v, score):
    """Min total score over partitions of [0, n) into aligned dyadic intervals (brute force recursion)."""
    n = len(v)

    def best(lo, L):
        if lo >= n:
            return 0.0
        if lo + L <= n:
            whole = score(lo, L)
            if L == 1:
                return whole
            return min(whole, best(lo, L // 2) + best(lo + L // 2, L // 2))
        return best(lo, L // 2) + best(lo + L // 2, L // 2)

    N = 1
    while N < n:
        N *= 2
    return best(0, N)


def test_dawa_partition_is_optimal_without_noise():
    """With (almost) no noise the tree DP finds the partition of least total cost dev(b) + Δ/eps_2."""
    rng = np.random.default_rng(2)
    eps = Fraction(10 ** 6)
    for _ in range(100):
        n = int(rng.integers(1, 14))
        v = rng.integers(0, 4, n) * rng.integers(0, 2, n)
        stages = ra.plan("dawa", n, 1, eps)
        bucket_err = 1 / float(stages[-1].epsilon)
        starts = ra.dawa_partition(v, stages, NoiseSource(seed=0))
        lens = np.diff(np.append(starts, n))

        def score(lo, L):
            b = v[lo:lo + L]
            return float(np.abs(b - b.mean()).sum()) + bucket_err

        got = sum(score(s, L) for s, L in zip(starts, lens))
        assert starts[0] == 0 and (lens > 0).all() and lens.sum() == n
        assert all(s % L == 0 and (L & (L - 1)) == 0 for s, L in zip(starts, lens))  # aligned dyadic
        assert got == pytest.approx(_brute_dyadic(v, score), abs=1e-6)


def test_hbtree_inference_is_least_squares():
    """The two-pass estimate equals the least-squares fit of the leaves to all measured levels."""
    n = 100
    b, h = ra.hbtree_branching(n)
    assert (b, h) == (10, 2)
    v = np.random.default_rng(3).integers(0, 20, n)
    rec = Recorder(4)
    est = ra.estimate_vector("hbtree", v, 1, Fraction(1, 2), rec)
    rows, rhs = [], []
    for t, (_, _, y) in enumerate(rec.calls):  # level t: nodes of b^t leaves each
        width = b ** t
        for j, yj in enumerate(y):
            r = np.zeros(b ** h)
            r[j * width:(j + 1) * width] = 1
            rows.append(r)
            rhs.append(yj)
    sol = np.linalg.lstsq(np.array(rows), np.array(rhs, dtype=float), rcond=None)[0]
    assert np.allclose(est, sol[:n])


def test_ahp_clusters_never_split_ties_and_reduce_error():
    vals = np.array([0.0, 1.0, 2.0, 50.0, 51.0])
    counts = np.array([5, 1, 1, 3, 2])
    starts = ra._greedy_runs(vals, counts, var=2.0 * 10 ** 2)
    assert starts.tolist() == [0, 3]  # small values together, large values together
    assert ra._greedy_runs(vals, counts, var=1e-9).tolist() == [0, 1, 2, 3, 4]


def test_lazy_dispatch_to_pfl_and_hmm(monkeypatch):
    """The agreed calls: pfl_release(sizes_desc, epsilon, noise, size_bound) and
    hmm_estimate(noisy_desc, scale, size_bound, how) on the noisy sorted vector (scale 1/eps)."""
    import sys
    import types
    seen = {}

    def pfl_release(sizes_desc, epsilon, noise, size_bound):
        seen["pfl"] = (sizes_desc.tolist(), epsilon, size_bound)
        return sizes_desc.copy()

    def hmm_estimate(noisy_desc, scale, size_bound, how):
        seen["hmm"] = (noisy_desc.copy(), scale, size_bound, how)
        return np.sort(np.clip(noisy_desc, 0, None))[::-1]

    monkeypatch.setitem(sys.modules, "dpcore.mechanisms.unattributed.pfl", types.SimpleNamespace(pfl_release=pfl_release))
    monkeypatch.setitem(sys.modules, "dpcore.mechanisms.unattributed.hmm", types.SimpleNamespace(hmm_estimate=hmm_estimate))
    x = np.array([1, 5, 2])
    out = UnattributedHistogramMechanism("pfl", "0.5", 9).release(x, NoiseSource(seed=0))
    assert out.tolist() == [5, 2, 1] and seen["pfl"] == ([5, 2, 1], Fraction(1, 2), 9)
    rec = Recorder(1)
    UnattributedHistogramMechanism("hmm_viterbi", "0.5", None).release(x, rec)
    (v, s, y), = rec.calls
    assert v.tolist() == [5, 2, 1] and s == conservative_scale(1, Fraction(1, 2))
    assert np.array_equal(seen["hmm"][0], y) and seen["hmm"][1:] == (s, None, "viterbi")


@pytest.mark.parametrize("method", NOISE_METHODS)
def test_measurement_plan_matches_the_draws(method):
    _skip_missing(method)
    x = _zipf_sizes(50, 20, 7)
    mech = UnattributedHistogramMechanism(method, "0.4", 20)
    stages = mech.measurement_plan(50)
    assert sum(s.epsilon for s in stages) == mech.cost.epsilon
    rec = Recorder(0)
    mech.release(x, rec)
    assert [c[1] for c in rec.calls] == [s.scale for s in stages]
    with pytest.raises(ValueError, match="pfl"):
        UnattributedHistogramMechanism("pfl", 1).measurement_plan(5)
