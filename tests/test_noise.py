"""Tests for dpcore.noise: distributions, exactness of Bernoulli samplers, guards."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcore.noise import (
    NoiseSource,
    NotForPublicationError,
    _bernoulli_exp_neg_from,
    _bernoulli_from_bits,
)

# Significance threshold for goodness-of-fit tests (false-failure rate per test).
ALPHA = 1e-4


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


class ScriptedBits:
    """A ``next_bit`` callable that replays a fixed bit sequence, then raises."""

    def __init__(self, bits):
        self.bits = list(bits)
        self.used = 0

    def __call__(self) -> int:
        if self.used >= len(self.bits):
            raise IndexError("script exhausted")
        b = self.bits[self.used]
        self.used += 1
        return b


def dlap_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(z)


def chisq_discrete_laplace(samples: np.ndarray, scale: float) -> float:
    """Chi-square p-value vs the exact discrete Laplace pmf, tails pooled."""
    n = samples.size
    # bins: (-inf, -K-1], -K..K, [K+1, inf) with K such that expected counts >= 5
    k = 0
    while n * dlap_pmf(np.array([k + 1]), scale)[0] >= 5:
        k += 1
    centre = np.arange(-k, k + 1)
    p_centre = dlap_pmf(centre, scale)
    p_tail = (1 - p_centre.sum()) / 2
    obs_centre = np.array([(samples == z).sum() for z in centre])
    obs = np.concatenate([[(samples < -k).sum()], obs_centre, [(samples > k).sum()]])
    exp = n * np.concatenate([[p_tail], p_centre, [p_tail]])
    return stats.chisquare(obs, exp).pvalue


def dlap_variance(scale: float) -> float:
    a = math.exp(-1.0 / scale)
    return 2 * a / (1 - a) ** 2


def fraction_of_prefix(bits) -> Fraction:
    return Fraction(int("".join(map(str, bits)) or "0", 2), 2 ** len(bits))


# ---------------------------------------------------------------------------
# discrete Laplace
# ---------------------------------------------------------------------------


def test_discrete_laplace_production_distribution():
    ns = NoiseSource()
    scale = 2.0
    out = ns.discrete_laplace(np.zeros(200_000, dtype=np.int64), scale)
    assert out.dtype == np.int64
    assert out.shape == (200_000,)
    assert chisq_discrete_laplace(out, scale) > ALPHA
    # variance: sd of sample variance ~ sqrt((m4 - s^4)/n); allow a 5% band (>> 5 sd)
    assert out.var() == pytest.approx(dlap_variance(scale), rel=0.05)
    assert abs(out.mean()) < 0.05


def test_discrete_laplace_production_large_batch_and_offsets():
    ns = NoiseSource()
    vals = np.arange(300_000, dtype=np.int64) * 7 - 1000
    out = ns.discrete_laplace(vals, Fraction(1, 2))
    noise = out - vals
    assert out.dtype == np.int64 and out.shape == vals.shape
    assert noise.var() == pytest.approx(dlap_variance(0.5), rel=0.05)


def test_discrete_laplace_shape_preserved():
    for ns in (NoiseSource(), NoiseSource(seed=3)):
        z = ns.discrete_laplace(5, 1.0)
        assert z.shape == () and z.dtype == np.int64
        m = ns.discrete_laplace(np.zeros((3, 4, 5), dtype=np.int32), 1.5)
        assert m.shape == (3, 4, 5) and m.dtype == np.int64
        e = ns.discrete_laplace(np.zeros((0, 2), dtype=np.int64), 1.0)
        assert e.shape == (0, 2) and e.dtype == np.int64
        assert ns.discrete_laplace([[1, 2]], 1.0).shape == (1, 2)


def test_discrete_laplace_rejects_float_values():
    with pytest.raises(TypeError, match="values"):
        NoiseSource().discrete_laplace([1.5, 2.0], 1.0)


def test_discrete_laplace_seeded_deterministic_and_distribution():
    a = NoiseSource(seed=42).discrete_laplace(np.zeros(200_000, dtype=np.int64), 2.0)
    b = NoiseSource(seed=42).discrete_laplace(np.zeros(200_000, dtype=np.int64), 2.0)
    c = NoiseSource(seed=43).discrete_laplace(np.zeros(200_000, dtype=np.int64), 2.0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.dtype == np.int64
    assert chisq_discrete_laplace(a, 2.0) > ALPHA
    assert a.var() == pytest.approx(dlap_variance(2.0), rel=0.05)


# ---------------------------------------------------------------------------
# Gaussian
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 7])
def test_gaussian_ks(seed):
    ns = NoiseSource(seed=seed)
    sigma = 3.0
    vals = np.full(4000, 10.0)
    out = ns.gaussian(vals, sigma)
    assert out.dtype == np.float64 and out.shape == vals.shape
    assert stats.kstest(out - 10.0, "norm", args=(0, sigma)).pvalue > ALPHA


def test_gaussian_shape_and_seeded_determinism():
    assert NoiseSource().gaussian(1.0, 1.0).shape == ()
    assert NoiseSource().gaussian(np.zeros((2, 3)), 1.0).shape == (2, 3)
    a = NoiseSource(seed=5).gaussian(np.zeros(10), 2.0)
    b = NoiseSource(seed=5).gaussian(np.zeros(10), 2.0)
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# exponential mechanism
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 11])
def test_exponential_mechanism_frequencies(seed):
    ns = NoiseSource(seed=seed)
    u = [0.0, 1.0, 2.5, 1.5]
    eps, sens = 1.2, 1.0
    probs = NoiseSource.exponential_mechanism_probabilities(u, eps, sens)
    n = 20_000
    counts = np.bincount([ns.exponential_mechanism(u, eps, sens) for _ in range(n)], minlength=4)
    assert counts.size == 4
    assert stats.chisquare(counts, n * probs).pvalue > ALPHA


def test_exponential_mechanism_probabilities_properties():
    u = np.array([3.0, -1.0, 0.5, 10.0, 10.0])
    eps, sens = 0.7, 2.0
    p = NoiseSource.exponential_mechanism_probabilities(u, eps, sens)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(p / p[0], np.exp(eps * (u - u[0]) / (2 * sens)))
    # neighbouring utilities: every u_i moves by at most `sens`
    rng = np.random.default_rng(0)
    for _ in range(200):
        shift = rng.uniform(-sens, sens, size=u.size)
        shift[rng.integers(0, u.size)] = rng.choice([-sens, sens])
        q = NoiseSource.exponential_mechanism_probabilities(u + shift, eps, sens)
        ratio = np.maximum(p / q, q / p)
        assert ratio.max() <= math.exp(eps) * (1 + 1e-12)
    # stability with huge utilities
    big = NoiseSource.exponential_mechanism_probabilities([1e300, 1e300 - 1e290], 1.0, 1.0)
    assert np.all(np.isfinite(big)) and big.sum() == pytest.approx(1.0)


def test_exponential_mechanism_single_candidate():
    assert NoiseSource().exponential_mechanism([5.0], 1.0, 1.0) == 0


# ---------------------------------------------------------------------------
# exact Bernoulli from bits
# ---------------------------------------------------------------------------


def test_bernoulli_from_bits_three_eighths():
    p = Fraction(3, 8)  # 0.011
    expect = {}
    for bits in itertools.product([0, 1], repeat=3):
        expect[bits] = fraction_of_prefix(bits) < p
    for bits, want in expect.items():
        src = ScriptedBits(bits)
        assert _bernoulli_from_bits(p, src) is want, bits
    # the first bit 1 decides immediately (U >= 1/2 > 3/8)
    src = ScriptedBits([1])
    assert _bernoulli_from_bits(p, src) is False and src.used == 1


@pytest.mark.parametrize("L", [1, 3, 6, 9])
def test_bernoulli_from_bits_dyadic_enumeration(L):
    rng = np.random.default_rng(L)
    for a in sorted({0, 1, 2**L - 1, 2**L, *rng.integers(0, 2**L + 1, size=5).tolist()}):
        p = Fraction(a, 2**L)
        count = 0
        for bits in itertools.product([0, 1], repeat=L):
            src = ScriptedBits(bits)
            result = _bernoulli_from_bits(p, src)  # never needs more than L bits
            assert src.used <= L
            count += result
        assert count == a, (L, a)


def test_bernoulli_from_bits_tiny_probability_exact():
    p = Fraction(1e-21)
    assert p > 0
    # the expansion of p starts with 69 zeros (2**-70 < 1e-21 < 2**-69)
    assert Fraction(1, 2**70) < p < Fraction(1, 2**69)
    # all-zero prefix of length 69: still undecided, asks for bit 70
    src = ScriptedBits([0] * 69)
    with pytest.raises(IndexError):
        _bernoulli_from_bits(p, src)
    assert src.used == 69
    # 70 zeros: U < 2**-70 < p -> True
    assert _bernoulli_from_bits(p, ScriptedBits([0] * 70)) is True
    # any 1 within the first 69 bits: U >= 2**-69 > p -> False
    for pos in (0, 10, 68):
        bits = [0] * pos + [1]
        src = ScriptedBits(bits)
        assert _bernoulli_from_bits(p, src) is False and src.used == pos + 1


def test_bernoulli_from_bits_decisions_are_final_random_scripts():
    """Whatever is returned must hold for every continuation of the consumed bits."""
    rng = np.random.default_rng(123)
    ps = [Fraction(1, 3), Fraction(2, 7), Fraction(1e-21), Fraction(0.3), Fraction(999, 1000)]
    for p in ps:
        for _ in range(300):
            # random scripts, biased towards following p's expansion for long prefixes
            bits = []
            r = p
            for i in range(120):
                r *= 2
                pb = 1 if r >= 1 else 0
                r -= pb
                bits.append(pb if rng.random() < 0.9 else 1 - pb)
            src = ScriptedBits(bits)
            res = _bernoulli_from_bits(p, src)
            lo = fraction_of_prefix(bits[: src.used])
            hi = lo + Fraction(1, 2**src.used)
            if res:
                assert hi <= p
            else:
                assert lo >= p


def test_bernoulli_edges_and_frequency():
    ns = NoiseSource()
    assert not any(ns.bernoulli(0) for _ in range(2000))
    assert all(ns.bernoulli(1) for _ in range(2000))
    assert not any(ns.bernoulli(0.0) for _ in range(200))
    assert all(ns.bernoulli(Fraction(1)) for _ in range(200))
    n = 40_000
    k = sum(ns.bernoulli(0.3) for _ in range(n))
    assert stats.binomtest(k, n, 0.3).pvalue > ALPHA
    k = sum(ns.bernoulli(Fraction(1, 3)) for _ in range(n))
    assert stats.binomtest(k, n, 1 / 3).pvalue > ALPHA


def test_bernoulli_seeded_deterministic():
    ns1, ns2 = NoiseSource(seed=9), NoiseSource(seed=9)
    a = [ns1.bernoulli(0.37) for _ in range(200)]
    b = [ns2.bernoulli(0.37) for _ in range(200)]
    assert a == b
    assert 0 < sum(a) < 200


@pytest.mark.parametrize("x", [0.1, 1, 3])
def test_bernoulli_exp_neg_frequency(x):
    ns = NoiseSource()
    n = 20_000
    k = sum(ns.bernoulli_exp_neg(x) for _ in range(n))
    assert stats.binomtest(k, n, math.exp(-x)).pvalue > ALPHA


def _exact_prob_true(x: Fraction, tol=Fraction(1, 10**18)):
    """Exact P(True) of _bernoulli_exp_neg_from by exploring its Bernoulli-outcome tree.

    Returns (lower, upper) bounds: branches with probability mass < tol are left
    unresolved and counted only in the upper bound.
    """
    lower = Fraction(0)
    unresolved = Fraction(0)
    stack = [()]  # sequences of Bernoulli outcomes
    while stack:
        prefix = stack.pop()
        mass = Fraction(1)
        calls = []

        class Need(Exception):
            pass

        def bern(q, prefix=prefix, calls=calls):
            i = len(calls)
            calls.append(q)
            if i < len(prefix):
                return prefix[i]
            raise Need(q)

        try:
            res = _bernoulli_exp_neg_from(x, bern)
        except Need as need:
            q = need.args[0]
            for i, o in enumerate(prefix):
                mass *= calls[i] if o else 1 - calls[i]
            if mass < tol:
                unresolved += mass
                continue
            if q > 0:
                stack.append(prefix + (True,))
            if q < 1:
                stack.append(prefix + (False,))
            continue
        for i, o in enumerate(prefix):
            mass *= calls[i] if o else 1 - calls[i]
        if res:
            lower += mass
    return lower, lower + unresolved


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(7, 4)])
def test_bernoulli_exp_neg_exact_probability_tree(x):
    lo, hi = _exact_prob_true(x, tol=Fraction(1, 10**12))
    target = math.exp(-float(x))
    assert float(lo) <= target + 1e-15
    assert float(hi) >= target - 1e-15
    assert float(hi - lo) < 1e-9


def test_bernoulli_exp_neg_fifty_logic_scripted():
    """x = 50: True iff all 50 Bernoulli(exp(-1)) trials and the tail trial succeed."""
    x = Fraction(50)
    # A success of Bernoulli(exp(-1)) via the recorded oracle: outcomes for
    # Bern(1/1)=True, Bern(1/2)=True, Bern(1/3)=False  -> stops at k=3 (odd) -> True.
    calls = []
    script = iter([True, True, False] * 50 + [False])

    def bern(q):
        calls.append(q)
        return next(script)

    assert _bernoulli_exp_neg_from(x, bern) is True
    assert calls == [Fraction(1), Fraction(1, 2), Fraction(1, 3)] * 50 + [Fraction(0)]

    # failing trial number 37 (stops at even k) ends everything immediately with False
    calls.clear()
    script = iter([True, True, False] * 36 + [True, False])
    assert _bernoulli_exp_neg_from(x, bern) is False
    assert len(calls) == 36 * 3 + 2

    # fractional tail: x = 50 + 1/4 uses Bern(1/4 / k) after the 50 trials
    calls.clear()
    script = iter([True, True, False] * 50 + [True, False])
    assert _bernoulli_exp_neg_from(Fraction(201, 4), bern) is False  # stops at k=2
    assert calls[-2:] == [Fraction(1, 4), Fraction(1, 8)]


def test_bernoulli_exp_neg_fifty_with_bits():
    """Through real bit scripts: the bit path 0,1 per exp(-1) trial gives True."""
    # Bern(1) uses no bits; Bern(1/2): bit 0 -> True; Bern(1/3)=0.0101..: bit 1 -> False.
    bits = [0, 1] * 50
    src = ScriptedBits(bits)
    assert _bernoulli_exp_neg_from(Fraction(50), lambda q: _bernoulli_from_bits(q, src))
    assert src.used == 100
    # a 1 in place of trial j's Bern(1/2) bit stops that trial at k=2 (even): False,
    # and nothing after that bit is read
    for j in (0, 28, 49):
        flipped = list(bits)
        flipped[2 * j] = 1
        src = ScriptedBits(flipped)
        assert not _bernoulli_exp_neg_from(Fraction(50), lambda q: _bernoulli_from_bits(q, src))
        assert src.used == 2 * j + 1
    # one bit short of the full success path: still undecided
    src = ScriptedBits(bits[:-1])
    with pytest.raises(IndexError):
        _bernoulli_exp_neg_from(Fraction(50), lambda q: _bernoulli_from_bits(q, src))
    # seeded source: exp(-50) essentially never fires, and the call terminates quickly
    ns = NoiseSource(seed=0)
    assert not any(ns.bernoulli_exp_neg(50) for _ in range(2000))
    assert not any(ns.bernoulli_exp_neg(1e6) for _ in range(50))


# ---------------------------------------------------------------------------
# uniform sampling helpers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 4])
def test_integers_permutation_uniform01(seed):
    ns = NoiseSource(seed=seed)
    x = ns.integers(-3, 4, size=70_000)
    assert x.dtype == np.int64 and x.min() >= -3 and x.max() <= 3
    counts = np.bincount(x + 3, minlength=7)
    assert stats.chisquare(counts).pvalue > ALPHA
    assert ns.integers(5, 6) == 5
    assert isinstance(ns.integers(0, 10), int)
    assert ns.integers(0, 10, size=(2, 3)).shape == (2, 3)
    big = ns.integers(-(2**63), 2**63 - 1, size=1000)
    assert big.dtype == np.int64 and (big < 0).any() and (big > 0).any()
    with pytest.raises(ValueError, match="high"):
        ns.integers(3, 3)

    p = ns.permutation(1000)
    assert sorted(p.tolist()) == list(range(1000))
    assert ns.permutation(0).size == 0
    # each of the 6 permutations of 3 items equally likely
    perms = [tuple(ns.permutation(3)) for _ in range(6000)]
    _, c = np.unique(np.array(perms), axis=0, return_counts=True)
    assert c.size == 6 and stats.chisquare(c).pvalue > ALPHA

    u = ns.uniform01(50_000)
    assert u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    assert isinstance(ns.uniform01(), float)
    assert ns.uniform01((2, 2)).shape == (2, 2)


# ---------------------------------------------------------------------------
# publication guard
# ---------------------------------------------------------------------------


def test_not_for_publication():
    seeded = NoiseSource(seed=1)
    assert seeded.publishable is False and seeded.mode == "seeded-test"
    with pytest.raises(NotForPublicationError, match=r"NoiseSource\(\)"):
        seeded.require_publishable()
    prod = NoiseSource()
    assert prod.publishable is True and prod.mode == "csprng"
    prod.require_publishable()
    assert issubclass(NotForPublicationError, RuntimeError)


# ---------------------------------------------------------------------------
# bad arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 2])
def test_bad_arguments(seed):
    ns = NoiseSource(seed=seed)
    for bad in (0, -1.0, float("nan"), float("inf"), Fraction(-1, 2)):
        with pytest.raises(ValueError, match="scale"):
            ns.discrete_laplace([1, 2], bad)
    for bad in (0, -2.0, float("nan")):
        with pytest.raises(ValueError, match="sigma"):
            ns.gaussian([1.0], bad)
    with pytest.raises(ValueError, match="values"):
        ns.gaussian([1.0, float("nan")], 1.0)
    for bad in (0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon"):
            ns.exponential_mechanism([1.0, 2.0], bad, 1.0)
        with pytest.raises(ValueError, match="epsilon"):
            NoiseSource.exponential_mechanism_probabilities([1.0, 2.0], bad, 1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        ns.exponential_mechanism([1.0, 2.0], 1.0, 0)
    for bad_u in ([1.0, float("nan")], [float("inf"), 1.0], [], [[1.0, 2.0]]):
        with pytest.raises(ValueError, match="utilities"):
            ns.exponential_mechanism(bad_u, 1.0, 1.0)
    for bad_p in (-0.1, 1.0000001, Fraction(3, 2), float("nan"), 2):
        with pytest.raises(ValueError, match="p"):
            ns.bernoulli(bad_p)
    with pytest.raises(ValueError, match=r"\bp\b"):
        ns.bernoulli(-1e-300)
    for bad_x in (-1, -1e-30, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"\bx\b"):
            ns.bernoulli_exp_neg(bad_x)


# ---------------------------------------------------------------------------
# conservative rounding of noise scales (issue 15, small item 3)
# ---------------------------------------------------------------------------

from hypothesis import given, settings as hsettings, strategies as hst  # noqa: E402

from dpcore.budget.amounts import exact  # noqa: E402
from dpcore.noise import conservative_scale, lower_float, round_down, round_up, upper_float  # noqa: E402

_pos_fractions = hst.fractions(min_value=Fraction(1, 10**6), max_value=Fraction(10**6), max_denominator=10**9)


@hsettings(max_examples=300, deadline=None)
@given(num=_pos_fractions, den=_pos_fractions)
def test_conservative_scale_is_the_smallest_float_not_below_the_exact_ratio(num, den):
    s = conservative_scale(num, den)
    exact_ratio = num / den
    assert Fraction(s) >= exact_ratio
    assert Fraction(math.nextafter(s, 0.0)) < exact_ratio  # no smaller float is still >= the ratio
    assert Fraction(round_down(exact_ratio)) <= exact_ratio <= Fraction(round_up(exact_ratio))


def test_conservative_scale_on_the_cases_that_round_to_nearest_downwards():
    # 1/3, 2/0.3, 1/0.7 are each rounded *down* by float division or float(Fraction)
    for num, den in [(1, 3), (2, Fraction(3, 10)), (1, Fraction(7, 10)), (2, Fraction(1, 10))]:
        exact_ratio = Fraction(num) / Fraction(den)
        s = conservative_scale(num, den)
        assert Fraction(s) >= exact_ratio and Fraction(math.nextafter(s, 0.0)) < exact_ratio
    # a float epsilon is read both ways (binary value, and the ledger's decimal reading): the larger scale wins
    for eps in [0.1, 0.7, 0.3, 1e-3]:
        s = conservative_scale(2, eps)
        assert Fraction(s) >= 2 / Fraction(eps) and Fraction(s) >= 2 / exact(eps)


@hsettings(max_examples=300, deadline=None)
@given(x=hst.floats(min_value=1e-300, max_value=1e300))
def test_upper_and_lower_float_bracket_with_the_relative_margin(x):
    up, lo = upper_float(x), lower_float(x)
    assert Fraction(up) >= Fraction(x) * (1 + Fraction(2) ** -40)
    assert Fraction(lo) <= Fraction(x) * (1 - Fraction(2) ** -40)


def test_samplers_round_fraction_scales_up_and_em_scale_is_conservative():
    # the exponential mechanism's Gumbel scale 2Δu/ε is never below the exact value
    for eps in [Fraction(1, 3), 0.1, Fraction(7, 10), 1, 2.5]:
        for sens in [1, Fraction(1, 3), 0.5]:
            s = NoiseSource.exponential_mechanism_scale(eps, sens)
            assert Fraction(s) >= 2 * Fraction(sens) / Fraction(eps)
    # a Fraction scale/sigma handed to a sampler is rounded up, never to nearest
    third = Fraction(1, 3)
    assert Fraction(round_up(third)) > third > Fraction(float(third))
    a = NoiseSource(seed=5).discrete_laplace(np.zeros(4000, dtype=np.int64), scale=third)
    b = NoiseSource(seed=5).discrete_laplace(np.zeros(4000, dtype=np.int64), scale=round_up(third))
    assert np.array_equal(a, b)
    g1 = NoiseSource(seed=5).gaussian(np.zeros(10), third)
    g2 = NoiseSource(seed=5).gaussian(np.zeros(10), round_up(third))
    assert np.array_equal(g1, g2)


def test_mechanism_scales_never_below_their_exact_rational_values():
    from dpcore.mechanisms.row_counts import InputRowCounts, L1_SENSITIVITY

    for eps in [Fraction(1, 3), Fraction(1, 10), 0.3, 0.7]:
        m = InputRowCounts(epsilon=eps)  # charged as exact(eps), the decimal reading
        assert Fraction(m.noise_scale()) >= L1_SENSITIVITY / exact(eps)
    from dpcore.mechanisms.subspace import TopSubspaceSelection

    sel = TopSubspaceSelection(k=1, r=0.1, epsilon=0.1, h=3, candidates=[(0,), (1,), (2,)])
    assert sel.per_draw_epsilon == Fraction(1, 30)
    assert Fraction(NoiseSource.exponential_mechanism_scale(sel.per_draw_epsilon, 1)) >= 60
