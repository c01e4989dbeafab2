"""PFL (exponential mechanism over sorted vectors) and Lin-Kifer HMM estimators (issues 17, 28).

Invariants on random inputs, noiseless limits, an exact privacy audit of PFL on
tiny inputs (every output enumerated, probabilities the exact rationals of the
chain the sampler draws from, so the audit covers the released distribution,
not an idealisation), an audit that fails when the score sensitivity is
understated, the sampler against that distribution, and the HMM's
forward-backward / Viterbi against brute-force enumeration of all
non-increasing paths.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpcore.noise import NoiseSource
from dpcore.mechanisms.unattributed.hmm import HMM_TAIL, _posterior_mean, _viterbi_path, hmm_band, hmm_estimate
from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.unattributed.pfl import (_band, _chain, pfl_cost, pfl_float_slack, pfl_output_probability,
                                                pfl_plan, pfl_release)


def _random_sorted(rng, G, K):
    x = np.minimum(rng.zipf(1.7, size=G) - 1, K)
    return np.sort(x)[::-1].astype(np.int64)


def _monotone_vectors(G, K):
    """Every non-increasing vector in {0..K}^G."""
    return [np.array(c[::-1], dtype=np.int64) for c in itertools.combinations_with_replacement(range(K + 1), G)]


def _neighbours(x, K):
    """Sorted vectors at L1 distance one from ``x`` within {0..K} (one item added to / removed from one group)."""
    out = []
    for i in range(x.size):
        for d in (-1, 1):
            y = x.copy()
            y[i] += d
            if 0 <= y[i] <= K and np.all(np.diff(y) <= 0):
                out.append(y)
    return out


def _check_invariants(y, G, K):
    assert y.dtype == np.int64
    assert y.shape == (G,)
    assert np.all(np.diff(y) <= 0)
    assert y.min() >= 0
    if K is not None:
        assert y.max() <= K


# ---------------------------------------------------------------- PFL


@pytest.mark.parametrize("seed", range(6))
def test_pfl_invariants_random(seed):
    rng = np.random.default_rng(seed)
    G = int(rng.integers(1, 400))
    K = [None, 5, 60, 2000][seed % 4]
    x = _random_sorted(rng, G, 2000 if K is None else K)
    eps = [0.3, 1.0, 4.0][seed % 3]
    y = pfl_release(x, eps, NoiseSource(seed=seed), K)
    _check_invariants(y, G, K)


def test_pfl_both_plans_are_exercised():
    assert pfl_plan(1.0, 10, 5)["stages"] == 1
    p = pfl_plan(1.0, 10, 10**4)
    assert p["stages"] == 2 and p["epsilon_band"] + p["epsilon_em"] == 1
    assert pfl_plan(1.0, 10, None)["stages"] == 2
    with pytest.raises(ValueError, match="G must be an integer"):
        pfl_cost(0.5, 10**8)


@pytest.mark.parametrize("G,K", [(10**7, None), (13_775, 1000), (100, 10**4), (5, 3)])
def test_pfl_is_pure_epsilon_dp(G, K):
    """Issue 28 section 5: the exact chain sampler costs no delta (it was (1 + e^eps) 2 G (S + 1) 2^-53)."""
    for eps in ("0.1", "1"):
        assert pfl_cost(eps, G, K) == PrivacyCost(eps, 0)
        plan = pfl_plan(eps, G, K)
        # the float slack is paid inside epsilon: the chain runs at eps_em - 2 eta, eta public (G, S only)
        assert plan["eta"] == pfl_float_slack(G, plan["states"])
        run = 2 / plan["em_scale"]
        assert run <= float(plan["epsilon_em"] - 2 * plan["eta"])
        assert run > float(plan["epsilon_em"]) * (1 - 1e-3) or G == 10**7


@pytest.mark.parametrize("K", [6, 10**4, None])
def test_pfl_noiseless_returns_truth(K):
    rng = np.random.default_rng(3)
    x = _random_sorted(rng, 200, 6)
    y = pfl_release(x, 1e6, NoiseSource(seed=4), K)
    np.testing.assert_array_equal(y, x)


def test_pfl_errors():
    ns = NoiseSource(seed=0)
    with pytest.raises(ValueError):
        pfl_release(np.array([1, 2], dtype=np.int64), 1.0, ns, None)  # not sorted
    with pytest.raises(ValueError):
        pfl_release(np.array([], dtype=np.int64), 1.0, ns, None)
    with pytest.raises(ValueError):
        pfl_release(np.array([5, 1], dtype=np.int64), 1.0, ns, 4)  # above the bound
    with pytest.raises(ValueError):
        pfl_release(np.array([2, -1], dtype=np.int64), 1.0, ns, None)
    with pytest.raises(TypeError):
        pfl_release(np.array([2.0, 1.0]), 1.0, ns, None)
    with pytest.raises(ValueError):
        pfl_release(np.array([2, 1], dtype=np.int64), 0.0, ns, None)


def _exact_distribution(x, lo, hi, scale, outputs):
    """The exact (rational) probability of every output under the chain the sampler draws from."""
    return [pfl_output_probability(x, lo, hi, scale, y) for y in outputs]


def _log_ratio(p, q):
    return abs(math.log(p.numerator * q.denominator) - math.log(q.numerator * p.denominator))


def _max_log_ratio(G, K, scale, lo, hi):
    outputs = _monotone_vectors(G, K)
    worst = 0.0
    for x in outputs:
        px = _exact_distribution(x, lo, hi, scale, outputs)
        assert sum(px) == 1  # exactly: a probability distribution over every non-increasing vector
        assert all(p > 0 for p in px)  # full support, nothing rounded to 0
        for xn in _neighbours(x, K):
            pn = _exact_distribution(xn, lo, hi, scale, outputs)
            worst = max(worst, max(_log_ratio(a, b) for a, b in zip(px, pn)))
    return worst


@pytest.mark.parametrize("G,K,eps", [(3, 3, 1.0), (2, 4, 0.5), (4, 2, 2.0)])
def test_pfl_exact_privacy_audit_single_stage(G, K, eps):
    """Every output's exact probability under every neighbouring pair: the loss is at most the charged epsilon."""
    plan = pfl_plan(eps, G, K)
    assert plan["stages"] == 1
    lo = np.zeros(G, dtype=np.int64)
    hi = np.full(G, K, dtype=np.int64)
    scale = plan["em_scale"]
    # The chain's probabilities are the exponential mechanism's (up to the float slack).
    outputs = _monotone_vectors(G, K)
    x = outputs[len(outputs) // 2]
    em = NoiseSource.exponential_mechanism_probabilities(
        [-float(np.abs(x - y).sum()) for y in outputs], 2 / scale, 1)
    np.testing.assert_allclose([float(p) for p in _exact_distribution(x, lo, hi, scale, outputs)], em, rtol=1e-12)
    worst = _max_log_ratio(G, K, scale, lo, hi)
    cost = pfl_cost(eps, G, K)
    assert cost.delta == 0
    assert worst <= float(cost.epsilon)
    assert worst > 0.5 * eps  # the audit is not vacuous


def test_pfl_audit_fails_with_understated_sensitivity():
    G, K, eps = 3, 3, 1.0
    lo = np.zeros(G, dtype=np.int64)
    hi = np.full(G, K, dtype=np.int64)
    # Weights exp(-eps ||x - y||_1) = the convention exp(eps u / (2 Delta)) with Delta = 1/2: too little noise.
    worst = _max_log_ratio(G, K, 1.0 / eps, lo, hi)
    assert worst > eps + 0.1


@pytest.mark.parametrize("center", [[3, 1], [4, 4], [2, 0], [5, 3]])
def test_pfl_two_stage_audit_given_band(center):
    """Stage 2 is eps_2-DP for every fixed (public, noisy) band; stage 1 is the eps_1 discrete Laplace."""
    G, K, eps, W = 2, 5, 1.0, 2
    plan = pfl_plan(eps, G, None)
    lo, hi = _band(np.array(center, dtype=np.int64), W, K)
    scale = plan["em_scale"]
    outputs = [y for y in _monotone_vectors(G, K) if np.all(y >= lo) and np.all(y <= hi)]
    worst = 0.0
    for x in _monotone_vectors(G, K):
        px = _exact_distribution(x, lo, hi, scale, outputs)
        assert sum(px) == 1 and all(p > 0 for p in px)
        for xn in _neighbours(x, K):
            pn = _exact_distribution(xn, lo, hi, scale, outputs)
            worst = max(worst, max(_log_ratio(a, b) for a, b in zip(px, pn)))
    assert worst <= float(plan["epsilon_em"])
    assert worst > 0.5 * float(plan["epsilon_em"])
    # Stage 1: discrete Laplace of scale 1/eps_1 on a sensitivity-1 vector: pmf ratio exp(1/scale) <= e^{eps_1}.
    assert 1.0 / plan["band_scale"] <= float(plan["epsilon_band"]) + 1e-15
    assert float(plan["epsilon_band"] + plan["epsilon_em"]) == pytest.approx(eps)
    assert pfl_cost(eps, G, None) == PrivacyCost(eps, 0)


def test_pfl_tiny_probabilities_are_kept_exactly():
    """A path whose weight is far below 2^-1074 of the likeliest keeps its exact (positive) probability.

    x = (3, ..., 3) on 400 positions, y = (0, ..., 0): ideal log-odds against y = x is -1200 / s (about
    -600 at eps = 1), where float64 probabilities underflow; the old 53-bit sampler gave such outputs
    probability 0 (the source of its delta).  The chain's exact log-odds agree with the ideal to the
    public slack eta.
    """
    G, K, eps = 400, 3, 1.0
    plan = pfl_plan(eps, G, K)
    lo = np.zeros(G, dtype=np.int64)
    hi = np.full(G, K, dtype=np.int64)
    x = np.full(G, 3, dtype=np.int64)
    p0 = pfl_output_probability(x, lo, hi, plan["em_scale"], np.zeros(G, dtype=np.int64))
    p1 = pfl_output_probability(x, lo, hi, plan["em_scale"], x)
    assert 0 < p0 < p1
    log_odds = math.log(p0.numerator * p1.denominator) - math.log(p1.numerator * p0.denominator)
    ideal = -3 * G / plan["em_scale"]
    assert ideal < -500  # below float64's range: exp(ideal) == 0.0
    assert abs(log_odds - ideal) <= 2 * float(plan["eta"]) + 1e-9 * abs(ideal)


def test_pfl_messages_stay_normalised_on_long_inputs():
    """Every stored message is a mantissa in [2^-64, 2^64) times a power of two, finite, on a long input.

    (A state whose prefix has one term -- the band's lowest -- once grew its mantissa by up to 2x per
    position and overflowed to inf / nan after about a thousand positions.)
    """
    from dpcore.mechanisms.unattributed.pfl import _prepare
    from dpcore.mechanisms.unattributed.pfl_messages import messages_block

    rng = np.random.default_rng(17)
    G, K, eps = 3000, 10**4, 1.0
    x = np.sort(np.minimum(rng.zipf(2.0, G), K).astype(np.int64))[::-1].copy()
    plan = pfl_plan(eps, G, K)
    lo, hi = _band(x, plan["half_width"], K)
    xc, table, width = _prepare(x, lo, hi, plan["em_scale"])
    om, oe = np.empty((G, width)), np.empty((G, width), dtype=np.int64)
    messages_block(xc, lo, hi, *table, 0, G, G, np.zeros(width), np.zeros(width, dtype=np.int64), om, oe)
    n = hi - lo + 1
    vals = np.concatenate([om[i, :n[i]] for i in range(G)])
    assert np.all(np.isfinite(vals)) and vals.min() >= 2.0**-64 and vals.max() < 2.0**64
    y = pfl_release(x, eps, NoiseSource(seed=2), K)
    _check_invariants(y, G, K)


def test_pfl_sampler_matches_its_exact_distribution():
    """Chi-square of many seeded draws of the chain against its exact distribution (seeded noise: tests only)."""
    G, K, eps = 3, 3, 1.0
    plan = pfl_plan(eps, G, K)
    lo = np.zeros(G, dtype=np.int64)
    hi = np.full(G, K, dtype=np.int64)
    x = np.array([3, 1, 1], dtype=np.int64)
    outputs = _monotone_vectors(G, K)
    p = np.array([float(q) for q in _exact_distribution(x, lo, hi, plan["em_scale"], outputs)])
    ns = NoiseSource(seed=11)
    n = 20000
    index = {tuple(y): k for k, y in enumerate(outputs)}
    counts = np.zeros(len(outputs))
    for _ in range(n):
        counts[index[tuple(_chain(x, lo, hi, plan["em_scale"], ns))]] += 1
    chi2 = float(np.sum((counts - n * p) ** 2 / (n * p)))
    assert chi2 < 80  # df = 19; P(chi2_19 > 80) < 1e-8


def test_pfl_chain_across_blocks_matches_its_exact_distribution(monkeypatch):
    """The checkpointed backward pass and the block-wise forward pass (block = 2 positions here) draw from the
    same exact distribution as the one-block computation."""
    import dpcore.mechanisms.unattributed.pfl as pfl

    monkeypatch.setattr(pfl, "_BLOCK", 2)
    G, K, eps = 5, 2, 1.5
    plan = pfl_plan(eps, G, K)
    lo = np.zeros(G, dtype=np.int64)
    hi = np.full(G, K, dtype=np.int64)
    x = np.array([2, 2, 1, 0, 0], dtype=np.int64)
    outputs = _monotone_vectors(G, K)
    p = np.array([float(q) for q in _exact_distribution(x, lo, hi, plan["em_scale"], outputs)])
    ns = NoiseSource(seed=5)
    n = 10000
    index = {tuple(y): k for k, y in enumerate(outputs)}
    counts = np.zeros(len(outputs))
    for _ in range(n):
        counts[index[tuple(pfl._chain(x, lo, hi, plan["em_scale"], ns))]] += 1
    chi2 = float(np.sum((counts - n * p) ** 2 / (n * p)))
    assert chi2 < 70  # df = 20; P(chi2_20 > 70) < 1e-6 (21 outputs)


# ---------------------------------------------------------------- HMM


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["forward_backward", "viterbi"])
def test_hmm_invariants_random(seed, how):
    rng = np.random.default_rng(100 + seed)
    G = int(rng.integers(1, 3000))
    K = [None, 8, 500][seed % 3]
    x = _random_sorted(rng, G, 500 if K is None else K)
    scale = [0.5, 2.0, 7.0][seed % 3]
    z = NoiseSource(seed=seed).discrete_laplace(x, scale)
    y = hmm_estimate(z, scale, K, how)
    _check_invariants(y, G, K)


@pytest.mark.parametrize("how", ["forward_backward", "viterbi"])
@pytest.mark.parametrize("K", [None, 50])
def test_hmm_noiseless_returns_truth(how, K):
    x = _random_sorted(np.random.default_rng(7), 500, 50)
    np.testing.assert_array_equal(hmm_estimate(x, 1e-3, K, how), x)


def _brute_posterior(z, scale, K):
    paths = np.array(_monotone_vectors(z.size, K))
    logw = -np.abs(paths - z).sum(axis=1) / scale
    w = np.exp(logw - logw.max())
    w /= w.sum()
    return paths, logw, w


@pytest.mark.parametrize("seed", range(5))
def test_hmm_forward_backward_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    G, K, scale = 4, 5, [0.7, 1.5, 3.0, 1.0, 2.2][seed]
    z = rng.integers(-2, 8, size=G).astype(np.int64)
    lo, hi, _ = hmm_band(z, scale, K)
    assert np.all(lo == 0) and np.all(hi == K)  # band covers everything here: exact model
    paths, _, w = _brute_posterior(z, scale, K)
    np.testing.assert_allclose(_posterior_mean(z, lo, hi, 1.0 / scale), w @ paths, rtol=1e-10, atol=1e-12)
    est = hmm_estimate(z, scale, K, "forward_backward")
    np.testing.assert_array_equal(est, np.minimum.accumulate(np.floor(w @ paths + 0.5).astype(np.int64)))


@pytest.mark.parametrize("seed", range(5))
def test_hmm_viterbi_matches_brute_force(seed):
    rng = np.random.default_rng(50 + seed)
    G, K, scale = 5, 4, 1.3
    z = rng.integers(-2, 7, size=G).astype(np.int64)
    paths, logw, _ = _brute_posterior(z, scale, K)
    path = hmm_estimate(z, scale, K, "viterbi")
    assert np.all(np.diff(path) <= 0)
    assert -np.abs(path - z).sum() / scale == pytest.approx(logw.max(), abs=1e-12)


def test_hmm_band_approximates_full_state_space():
    rng = np.random.default_rng(9)
    G, K, scale = 60, 120, 2.0
    x = _random_sorted(rng, G, 60)
    z = NoiseSource(seed=9).discrete_laplace(x, scale)
    lo, hi, _ = hmm_band(z, scale, K)
    assert np.mean(hi - lo) < K  # the band really restricts
    full_lo, full_hi = np.zeros(G, dtype=np.int64), np.full(G, K, dtype=np.int64)
    band_mean = _posterior_mean(z, lo, hi, 1 / scale)
    full_mean = _posterior_mean(z, full_lo, full_hi, 1 / scale)
    np.testing.assert_allclose(band_mean, full_mean, atol=1e-6)
    full_v = _viterbi_path(z, full_lo, full_hi, 1 / scale)
    band_v = _viterbi_path(z, lo, hi, 1 / scale)
    assert np.abs(band_v - z).sum() == np.abs(full_v - z).sum()
    # A too-narrow band does change the answer (the comparison can fail).
    lo2, hi2, _ = hmm_band(z, scale, K, tail=0.5)
    assert np.max(np.abs(_posterior_mean(z, lo2, hi2, 1 / scale) - full_mean)) > 1e-3
    assert HMM_TAIL >= 20


def test_hmm_errors():
    with pytest.raises(ValueError):
        hmm_estimate(np.array([1, 0], dtype=np.int64), 1.0, None, "mean")
    with pytest.raises(ValueError):
        hmm_estimate(np.array([1, 0], dtype=np.int64), 0.0, None, "viterbi")
    with pytest.raises(TypeError):
        hmm_estimate(np.array([1.5, 0.0]), 1.0, None, "viterbi")
    with pytest.raises(ValueError):
        hmm_estimate(np.array([], dtype=np.int64), 1.0, None, "viterbi")


def test_log_cumsum_exp_no_underflow():
    from dpcore.mechanisms.unattributed.hmm import log_cumsum_exp
    t = np.array([-2000.0, -1000.0, 0.0, -5.0])
    np.testing.assert_allclose(log_cumsum_exp(t), np.logaddexp.accumulate(t))
    t = np.random.default_rng(0).normal(size=50)
    np.testing.assert_allclose(log_cumsum_exp(t), np.logaddexp.accumulate(t), rtol=1e-12)


@pytest.mark.parametrize("how", ["forward_backward", "viterbi"])
def test_hmm_data_far_from_the_model_stays_finite(how):
    """Noisy values that contradict the order (increasing, far apart) once gave NaN through log(0)."""
    z = np.arange(0, 3000, 60, dtype=np.int64)
    y = hmm_estimate(z, 1.0, None, how)
    _check_invariants(y, z.size, None)
