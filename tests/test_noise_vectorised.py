"""Issue 19: the vectorised exact discrete Laplace sampler (:mod:`dpcore.noise.dlaplace`).

Exactness is tested level by level, each level with an injected deterministic source that enumerates every
random choice with its exact probability (no statistics):

* the primitives -- ``_urandom_below_narrow`` over full cycles of words, ``Randomness.bernoulli`` (``W < a``
  over every ``W``; per-draw bit comparison past ``word_max``);
* CKS Algorithm 1 as vectorised (``_bernoulli_exp_neg``): the exact rational probability that it has
  returned True by step ``K`` equals the Taylor partial sum of ``exp(-g)`` to degree ``K``;
* one pass of CKS Algorithm 2 as vectorised (``_round``), with ``Bernoulli(exp(-u/t))`` branching with mass
  ``x^u`` (``x = e^{-1/t}``): the output distribution, conditioned on acceptance, is computed as an exact
  power series in ``x`` (rational coefficients) and equals the closed form ``(1 - x^s)/(1 + x^s) x^{s|z|}``
  coefficient by coefficient up to a stated degree -- also with the magnitude clipped, the Python-int path
  forced, and two draws at once (the joint law is the product);
* the outer loop re-runs exactly the rejected draws (a scripted ``_round``).

Then: chi-square goodness of fit on 10^6 draws (fixed-seed source and the OS source) for several scales, a
two-sample comparison against OpenDP's sampler, the privacy-loss audit on the exact derived pmf, the scale
used (never below the requested one), overflow / saturation at the int64 bounds and the OpenDP fallback.
"""
from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import dpcore.noise.core as core
import dpcore.noise.dlaplace as dl
import dpcore.noise.source as source
from dpcore.noise import NoiseSource, round_up
from dpcore.noise.dlaplace import Randomness, cks_discrete_laplace, saturating_add, scale_ratio

ALPHA = 1e-4
U64 = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------- exact power series in x


class Series:
    """A power series in ``x`` with Fraction coefficients, truncated below degree ``D`` (exact arithmetic)."""

    def __init__(self, coef, D):
        self.c = (list(coef) + [Fraction(0)] * D)[:D]
        self.D = D

    @classmethod
    def mono(cls, coef, deg, D):
        c = [Fraction(0)] * D
        if deg < D:
            c[deg] = Fraction(coef)
        return cls(c, D)

    def __add__(self, o):
        return Series([a + b for a, b in zip(self.c, o.c)], self.D)

    def __mul__(self, o):
        if not isinstance(o, Series):
            return Series([a * o for a in self.c], self.D)
        out = [Fraction(0)] * self.D
        for i, a in enumerate(self.c):
            if a:
                for j in range(self.D - i):
                    out[i + j] += a * o.c[j]
        return Series(out, self.D)

    def shift(self, e):  # times x^e
        return Series([Fraction(0)] * e + self.c[: max(self.D - e, 0)], self.D)

    def inverse(self):
        assert self.c[0] != 0
        inv = [Fraction(0)] * self.D
        inv[0] = 1 / self.c[0]
        for n in range(1, self.D):
            inv[n] = -sum(self.c[k] * inv[n - k] for k in range(1, n + 1)) / self.c[0]
        return Series(inv, self.D)

    def is_zero(self):
        return not any(self.c)

    def __eq__(self, o):
        return self.c == o.c


def closed_form(t, s, z, D, limit=None):
    """P(Z = z) = (1 - x^s)/(1 + x^s) x^{s|z|} with x = e^{-1/t} (scale t/s), as a series; with ``limit``, the
    law of sign * min(|Z|, limit) (the clipped mass at +-limit is the whole tail)."""
    one = Series.mono(1, 0, D)
    xs = Series.mono(1, s, D)
    c = (one + xs * -1) * (one + xs).inverse()
    if limit is not None and abs(z) == limit:
        return c.shift(s * limit) * (one + xs * -1).inverse()
    return c.shift(s * abs(z))


class Need(Exception):
    """The script ran out: ``args[0]`` lists the options whose branch mass is non-zero (below degree D)."""


class SeriesRandomness(Randomness):
    """Replays a prefix of choices and tracks the exact mass of the path as a series in ``x = e^{-1/t}``.

    ``bernoulli_exp_neg(num, den)`` branches True with mass ``x^e``, False with ``1 - x^e``, ``e = t num / den``
    (an integer for every call the sampler makes); ``below(r)`` branches ``r`` ways with mass ``1/r``; a bit
    two ways with ``1/2``.  Branches whose mass vanishes below degree ``D`` are never explored (they contribute
    nothing to the truncated series).
    """

    def __init__(self, prefix, t, D):
        self.prefix, self.i, self.t, self.D = prefix, 0, t, D
        self.mass = Series.mono(1, 0, D)

    def _choose(self, options):  # options: [(value, function mass -> mass)]
        live = [(v, f) for v, f in options if not f(self.mass).is_zero()]
        if len(live) == 1 and len(options) == 1:
            v, f = live[0]
            self.mass = f(self.mass)
            return v
        if self.i < len(self.prefix):
            v, f = options[self.prefix[self.i]]
            self.i += 1
            self.mass = f(self.mass)
            return v
        raise Need([k for k, (v, f) in enumerate(options) if not f(self.mass).is_zero()])

    def below(self, r, n):
        return np.array([self._choose([(v, lambda m, r=r: m * Fraction(1, r)) for v in range(r)]) for _ in range(n)],
                        dtype=np.uint64)

    def bits(self, n):
        half = Fraction(1, 2)
        return np.array([self._choose([(False, lambda m: m * half), (True, lambda m: m * half)]) for _ in range(n)],
                        dtype=bool)

    def bernoulli(self, num, den, n):
        raise AssertionError("the series source replaces Bernoulli(exp(-g)) as a whole")

    def bernoulli_exp_neg(self, num, den, n):
        nums = [int(num)] * n if np.ndim(num) == 0 else [int(a) for a in num]
        out = []
        for a in nums:
            e = Fraction(self.t * a, den)
            assert e.denominator == 1, "every exponent the sampler uses is a multiple of 1/t"
            e = int(e)
            if e == 0:
                out.append(True)  # exp(0) = 1: no branch
                continue
            out.append(self._choose([(True, lambda m, e=e: m.shift(e)), (False, lambda m, e=e: m + m.shift(e) * -1)]))
        return np.array(out, dtype=bool)


def round_distribution(t, s, D, n=1, **kw):
    """The exact law of one pass (``_round``) of n draws: {outcome: Series}; outcome per draw is 'rej' or z."""
    limit, arith_max = kw.get("limit", U64), kw.get("arith_max", U64)
    dist = defaultdict(lambda: Series.mono(0, 0, D))
    stack = [()]
    leaves = 0
    while stack:
        prefix = stack.pop()
        src = SeriesRandomness(prefix, t, D)
        try:
            ok, neg, mag = dl._round(t, s, n, src, limit, arith_max)
        except Need as e:
            stack.extend(prefix + (k,) for k in e.args[0])
            continue
        leaves += 1
        key = tuple(("rej" if not o else (-int(m) if g else int(m))) for o, g, m in zip(ok, neg, mag))
        dist[key] = dist[key] + src.mass
    return dict(dist), leaves


def accepted_pmf(t, s, D, **kw):
    """{z: Series}: the law of Z (one draw), i.e. the pass's law conditioned on acceptance."""
    dist, _ = round_distribution(t, s, D, **kw)
    total = Series.mono(0, 0, D)
    for v in dist.values():
        total = total + v
    assert total == Series.mono(1, 0, D)  # the pass's outcomes have total mass exactly 1
    acc = Series.mono(0, 0, D)
    for k, v in dist.items():
        if k != ("rej",):
            acc = acc + v
    inv = acc.inverse()
    return {k[0]: v * inv for k, v in dist.items() if k != ("rej",)}


# (t, s, D): scale t/s; D = degree up to which the law is checked exactly
SCALES = [(1, 2, 24), (1, 1, 20), (3, 2, 24), (5, 1, 25), (2, 3, 24)]


@pytest.mark.parametrize("t,s,D", SCALES)
def test_exact_law_of_the_vectorised_round_equals_the_closed_form(t, s, D):
    """P(Z = z) from the code's own control flow, as an exact power series in x = e^{-1/t}, equals
    (1 - x^s)/(1 + x^s) x^{s|z|} in every coefficient below x^D, for every z (|z| >= D/s is 0 below x^D)."""
    pmf = accepted_pmf(t, s, D)
    zmax = (D - 1) // s
    assert set(pmf) >= set(range(-zmax, zmax + 1))
    for z in range(-zmax - 2, zmax + 3):
        got = pmf.get(z, Series.mono(0, 0, D))
        assert got == closed_form(t, s, z, D), (t, s, z)
    for z in pmf:  # nothing else has mass below x^D
        assert abs(z) <= zmax or pmf[z].is_zero()


@pytest.mark.parametrize("t,s,D", SCALES)
def test_privacy_loss_at_sensitivity_one_from_the_exact_pmf(t, s, D):
    """The audit of the other samplers, on the pmf derived above (not on the closed form): P(z) = x^s P(z - 1)
    for z >= 1 and P(z) = x^s P(z + 1) for z <= -1, exactly as series below x^D, and no mass below x^D beyond
    |z| = (D-1)/s.  So ln P(z) / P(z - 1) is -s/t for z >= 1 and +s/t for z <= 0: the privacy loss of
    values + Z against values + 1 + Z is exactly 1/scale (attained), never more."""
    pmf = accepted_pmf(t, s, D)
    zmax = (D - 1) // s
    xs = Series.mono(1, s, D)
    for z in range(1, zmax + 1):
        assert pmf[z] == pmf[z - 1] * xs
        assert pmf[-z] == pmf[-z + 1] * xs
    assert not pmf[0].is_zero()
    # the loss as the ratio of leading terms: x^{s|z|} over x^{s|z-1|}, i.e. exponent difference s = t / scale
    lead = {z: next(k for k, c in enumerate(pmf[z].c) if c) for z in range(-zmax, zmax + 1)}
    losses = {Fraction(lead[z] - lead[z - 1], t) for z in range(-zmax + 1, zmax + 1)}
    assert losses == {Fraction(s, t), -Fraction(s, t)}
    assert max(abs(v) for v in losses) == 1 / Fraction(t, s)


def test_the_audit_catches_a_wrong_scale():
    """Negative control: the law derived for scale 2 (t=2, s=1) fails the x^s relation of scale 1 (s=2 in
    units of 1/t), i.e. the audit is not vacuous."""
    pmf = accepted_pmf(2, 1, 16)
    assert pmf[1] == pmf[0] * Series.mono(1, 1, 16)
    assert not pmf[1] == pmf[0] * Series.mono(1, 2, 16)


@pytest.mark.parametrize("t,s,limit,D", [(1, 1, 2, 16), (3, 2, 1, 24), (2, 1, 3, 20)])
def test_exact_law_with_clipped_magnitude(t, s, limit, D):
    """With ``limit`` the magnitude is min(|Z|, limit): the mass at +-limit is the whole tail, exactly (this is
    how values + Z saturates at the int64 bounds, with limit 2^64 - 1); the V loop stops at ceil(limit s / t)."""
    pmf = accepted_pmf(t, s, D, limit=limit)
    assert set(pmf) <= set(range(-limit, limit + 1))
    for z in range(-limit, limit + 1):
        assert pmf[z] == closed_form(t, s, z, D, limit=limit), z


@pytest.mark.parametrize("t,s,arith_max,D", [(3, 2, 7, 24), (1, 8, 7, 40), (2, 3, 5, 24), (5, 1, 9, 25)])
def test_exact_law_through_the_python_int_path(t, s, arith_max, D):
    """A tiny ``arith_max`` sends X = U + tV beyond it (and s > arith_max) through the Python-int path and the
    'X < s hence Y = 0' shortcut: the law is still exactly the closed form."""
    pmf = accepted_pmf(t, s, D, arith_max=arith_max)
    for z in range(-((D - 1) // s), (D - 1) // s + 1):
        assert pmf[z] == closed_form(t, s, z, D), z


@pytest.mark.parametrize("t,s,D", [(1, 2, 12), (3, 2, 9)])
def test_two_draws_at_once_are_independent_with_the_same_law(t, s, D):
    """The masks of the vectorised pass: two draws in one call have the joint law of two independent passes."""
    joint, _ = round_distribution(t, s, D, n=2)
    single, _ = round_distribution(t, s, D, n=1)
    for (a,), pa in single.items():
        for (b,), pb in single.items():
            assert joint.get((a, b), Series.mono(0, 0, D)) == pa * pb, (a, b)


def test_outer_loop_reruns_exactly_the_rejected_draws(monkeypatch):
    """A scripted pass: the draws rejected in one pass (and only those) are re-run, results land in place."""
    calls = []
    script = iter([
        (np.array([True, False, True, False]), np.array([False, False, True, False]), np.array([5, 0, 7, 0], dtype=np.uint64)),
        (np.array([False, True]), np.array([False, True]), np.array([0, 2], dtype=np.uint64)),
        (np.array([True]), np.array([False]), np.array([9], dtype=np.uint64)),
    ])

    def fake_round(t, s, m, rand, limit, arith_max):
        calls.append(m)
        return next(script)

    monkeypatch.setattr(dl, "_round", fake_round)
    neg, mag = cks_discrete_laplace(3, 1, 4, rand=object.__new__(dl.OSRandomness))
    assert calls == [4, 2, 1]
    # pass 1 fills draws 0 and 2; pass 2 (draws 1, 3) fills draw 3; pass 3 (draw 1) fills draw 1
    assert neg.tolist() == [False, False, True, True]
    assert mag.tolist() == [5, 9, 7, 2]


# --------------------------------------------------------------------------- CKS Algorithm 1, exactly


class BernoulliEnum(Randomness):
    """Branches every Bernoulli(a/b) two ways with its exact rational mass; stops past step K (den = base K)."""

    def __init__(self, prefix, base, K):
        self.prefix, self.i, self.mass, self.base, self.K = prefix, 0, Fraction(1), base, K

    def bernoulli(self, num, den, n):
        if den > self.base * self.K:
            raise Need("past K")
        nums = [int(num)] * n if np.ndim(num) == 0 else [int(a) for a in num]
        out = []
        for a in nums:
            p = Fraction(a, den)
            opts = [(o, q) for o, q in ((True, p), (False, 1 - p)) if q > 0]
            if len(opts) == 1:
                out.append(opts[0][0])
                continue
            if self.i == len(self.prefix):
                raise Need(len(opts))
            o, q = opts[self.prefix[self.i]]
            self.i += 1
            self.mass *= q
            out.append(o)
        return np.array(out, dtype=bool)


def alg1_law(nums, den, K):
    """Exact rational law of _bernoulli_exp_neg on the draws ``nums`` over paths decided by step K."""
    dist = defaultdict(Fraction)
    undecided = Fraction(0)
    stack = [()]
    while stack:
        prefix = stack.pop()
        src = BernoulliEnum(prefix, den, K)
        try:
            out = dl._bernoulli_exp_neg(np.array(nums, dtype=np.uint64), den, len(nums), src)
        except Need as e:
            if e.args[0] == "past K":
                undecided += src.mass
            else:
                stack.extend(prefix + (k,) for k in range(e.args[0]))
            continue
        dist[tuple(out.tolist())] += src.mass
    return dist, undecided


@pytest.mark.parametrize("num,den", [(0, 5), (1, 5), (3, 5), (5, 5), (1, 1), (2, 7), (7, 7)])
def test_algorithm_1_exact_partial_sums(num, den):
    """P(True decided by step K) = sum_{i<=K} (-g)^i / i! exactly (g = num/den, K odd) and P(undecided) = g^K/K!:
    the Taylor series of exp(-g), term by term."""
    g = Fraction(num, den)
    for K in (1, 3, 5, 7):
        dist, undecided = alg1_law([num], den, K)
        assert dist[(True,)] == sum((-g) ** i / math.factorial(i) for i in range(K + 1))
        assert undecided == g**K / math.factorial(K)
        assert dist[(True,)] + dist[(False,)] + undecided == 1


def test_algorithm_1_vectorised_draws_are_independent():
    """Three draws with different g in one call: the joint law (decided by step 5) is the product."""
    nums, den, K = [1, 4, 0], 5, 5
    joint, undecided = alg1_law(nums, den, K)
    marg = [alg1_law([a], den, K)[0] for a in nums]
    for key, p in joint.items():
        assert p == math.prod(m[(o,)] for m, o in zip(marg, key))
    assert sum(joint.values()) + undecided == 1


# --------------------------------------------------------------------------- the primitives


class Counting(Randomness):
    """below(r, n) returns 0..r-1 (every value once): counts of ``W < a`` are exact."""

    word_max = 50

    def below(self, r, n):
        assert n == r
        return np.arange(r, dtype=np.uint64)


@pytest.mark.parametrize("den", [1, 2, 3, 7, 50])
def test_bernoulli_is_w_below_a_over_every_w(den):
    src = Counting()
    for a in range(den + 1):
        got = src.bernoulli(np.full(den, a, dtype=np.uint64), den, den)
        assert int(got.sum()) == a
    assert Counting().bernoulli(0, 3, 4).tolist() == [False] * 4
    assert Counting().bernoulli(3, 3, 4).tolist() == [True] * 4


class BitScript(Randomness):
    word_max = 4

    def __init__(self, bits):
        self._bits = list(bits)

    def bits(self, n):
        out, self._bits = self._bits[:n], self._bits[n:]
        if len(out) < n:
            raise Need("bits")
        return np.array(out, dtype=bool)


@pytest.mark.parametrize("a,den", [(1, 5), (3, 7), (2, 9), (5, 8)])
def test_bernoulli_past_word_max_compares_fair_bits_exactly(a, den):
    """den > word_max: per draw, fair bits against a/den's expansion.  Over all 2^L bit strings the True count,
    and the count of strings still undecided, bracket a/den exactly: floor(a 2^L / den) <= #True and
    #True + #undecided >= ceil(a 2^L / den)."""
    import itertools

    L = 8
    true = undecided = 0
    for bits in itertools.product([0, 1], repeat=L):
        try:
            out = BitScript(bits).bernoulli(np.array([a], dtype=np.uint64), den, 1)
        except (Need, IndexError):
            undecided += 1
            continue
        true += bool(out[0])
    assert true == (a * 2**L) // den
    assert true + undecided >= -(-(a * 2**L) // den)
    assert undecided <= 1


@pytest.mark.parametrize("r", [1, 2, 3, 5, 7, 10, 16, 17, 100, 255, 1000, 4096])
def test_urandom_below_narrow_is_uniform_over_a_full_cycle_of_words(monkeypatch, r):
    """Fed every 8- or 16-bit word once (in a cycle), the accepted outputs hit each residue equally often."""
    bits = 8 if r <= 16 else 16
    dtype = np.uint8 if bits == 8 else np.uint16
    cycle = np.arange(2**bits, dtype=dtype).tobytes()
    state = {"pos": 0}

    def fake_urandom(k):
        buf = (cycle * (k // len(cycle) + 2))[state["pos"] : state["pos"] + k]
        state["pos"] = (state["pos"] + k) % len(cycle)
        return buf

    monkeypatch.setattr(core.os, "urandom", fake_urandom)
    accepted = r * (2**bits // r)
    out = core._urandom_below_narrow(r, accepted)
    assert out.dtype == dtype
    assert np.bincount(out.astype(np.int64), minlength=r).tolist() == [accepted // r] * r


def test_urandom_below_narrow_rejects_the_top_words(monkeypatch):
    """32-bit words: r = 3 * 2^20 + 1 accepts u < r * floor(2^32 / r) and rejects the rest."""
    r = 3 * 2**20 + 1
    limit = r * (2**32 // r)
    words = np.array([limit - 1, limit, 2**32 - 1, 5] * 10, dtype=np.uint32)
    monkeypatch.setattr(core.os, "urandom", lambda k: (words.tobytes() * (k // words.nbytes + 1))[:k])
    out = core._urandom_below_narrow(r, 4)
    assert out.dtype == np.uint32
    assert out.tolist() == [(limit - 1) % r, 5, (limit - 1) % r, 5]


def test_saturating_add_matches_python_integers_at_the_edges():
    vals = [I64_MIN, I64_MIN + 1, -5, -1, 0, 1, 5, I64_MAX - 1, I64_MAX]
    mags = [0, 1, 2, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]
    V, M, N = zip(*[(v, m, g) for v in vals for m in mags for g in (False, True)])
    got = saturating_add(np.array(V, dtype=np.int64), np.array(N), np.array(M, dtype=np.uint64))
    want = [min(max(v - m if g else v + m, I64_MIN), I64_MAX) for v, m, g in zip(V, M, N)]
    assert got.tolist() == want


# --------------------------------------------------------------------------- goodness of fit on 10^6 draws


class SeededRandomness(Randomness):
    """numpy PCG64 (tests only): exact uniform integers (Lemire's unbiased method) and fair bits."""

    def __init__(self, seed):
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def below(self, r, n):
        return self.rng.integers(0, r, size=n, dtype=np.uint64)

    def bits(self, n):
        return self.rng.integers(0, 2, size=n, dtype=np.uint8).astype(bool)


def dlap_pmf(z, scale):
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(z)


def chisq_pvalue(z: np.ndarray, scale: float) -> float:
    """Chi-square vs the closed-form pmf: bins -K..K with expected counts >= 5, both tails pooled."""
    n = z.size
    a = math.exp(-1.0 / scale)
    K = 0
    while n * (1 - a) / (1 + a) * a ** (K + 1) >= 5:
        K += 1
    centre = np.arange(-K, K + 1)
    p = dlap_pmf(centre, scale)
    tail = (1 - p.sum()) / 2
    inside = np.bincount(np.clip(z, -K - 1, K + 1) + K + 1, minlength=2 * K + 3)
    exp = n * np.concatenate([[tail], p, [tail]])
    keep = exp > 0
    return stats.chisquare(inside[keep], exp[keep] * inside.sum() / exp[keep].sum()).pvalue


def ks_distance(z: np.ndarray, scale: float) -> float:
    """sup_k |ECDF(k) - F(k)| over the integers (the discrete Kolmogorov-Smirnov distance)."""
    lo, hi = int(z.min()), int(z.max())
    ks = np.arange(lo - 1, hi + 1)
    ecdf = np.cumsum(np.bincount(z - (lo - 1), minlength=ks.size)) / z.size
    a = math.exp(-1.0 / scale)
    # F(k) = 1 - a^{k+1}/(1+a) for k >= 0, a^{-k}/(1+a) for k < 0
    cdf = np.where(ks >= 0, 1 - a ** (ks + 1.0) / (1 + a), a ** (-ks.astype(float)) / (1 + a))
    return float(np.abs(ecdf - cdf).max())


@pytest.mark.parametrize("scale", [0.5, 1.0, 1.5, 10.0, 1000.0])
def test_goodness_of_fit_fixed_seed_1e6(scale):
    t, s = scale_ratio(scale)
    neg, mag = cks_discrete_laplace(t, s, 10**6, SeededRandomness(19))
    z = np.where(neg, -mag.astype(np.int64), mag.astype(np.int64))
    assert chisq_pvalue(z, scale) > ALPHA
    a = math.exp(-1 / scale)
    assert z.var() == pytest.approx(2 * a / (1 - a) ** 2, rel=0.02)
    assert ks_distance(z, scale) < 2.3e-3  # KS critical value at alpha 1e-4, n = 1e6 (conservative when discrete)


@pytest.mark.parametrize("scale", [Fraction(1, 3), 2.0, 100.0])
def test_goodness_of_fit_production_1e6(scale):
    out = NoiseSource().discrete_laplace(np.zeros(10**6, dtype=np.int64), scale)
    assert chisq_pvalue(out, round_up(scale)) > ALPHA


def test_same_law_as_opendp_two_sample():
    scale = 3.0
    ours = source._vectorised_discrete_laplace_add(np.zeros(200_000, dtype=np.int64), scale)
    theirs = source._opendp_discrete_laplace_add(np.zeros(200_000, dtype=np.int64), scale)
    bins = np.arange(-15, 17)
    table = np.array([np.histogram(np.clip(v, -15, 15), bins=bins)[0] for v in (ours, theirs)])
    assert stats.chi2_contingency(table).pvalue > ALPHA


# --------------------------------------------------------------------------- wiring, scale, overflow


def _spy(monkeypatch):
    seen = []
    real = source.cks_discrete_laplace

    def spy(t, s, n, rand=None, **kw):
        seen.append((t, s))
        return real(t, s, n, rand, **kw)

    monkeypatch.setattr(source, "cks_discrete_laplace", spy)
    return seen


@settings(max_examples=200, deadline=None)
@given(scale=st.one_of(st.fractions(Fraction(1, 10**6), Fraction(10**9), max_denominator=10**12),
                       st.floats(1e-6, 1e18), st.integers(1, 2**62)))
def test_scale_used_is_the_requested_one_rounded_up(scale):
    seen = []
    real = source.cks_discrete_laplace

    def spy(t, s, n, rand=None, **kw):
        seen.append((t, s))
        return real(t, s, n, rand, **kw)

    source.cks_discrete_laplace = spy
    try:
        NoiseSource().discrete_laplace(np.zeros(3, dtype=np.int64), scale)
    finally:
        source.cks_discrete_laplace = real
    (t, s), = {*seen}
    used = Fraction(t, s)
    assert used >= Fraction(scale)  # never less noise than requested
    assert used == Fraction(round_up(scale))  # exactly the float rounded up, no further rounding
    assert math.nextafter(float(used), 0.0) < Fraction(scale) or isinstance(scale, float)


def test_production_uses_the_vectorised_sampler_and_falls_back_to_opendp_past_2_64(monkeypatch):
    seen = _spy(monkeypatch)
    opendp = []
    real = source._opendp_discrete_laplace_add
    monkeypatch.setattr(source, "_opendp_discrete_laplace_add", lambda a, sc: opendp.append(sc) or real(a, sc))
    NoiseSource().discrete_laplace(np.zeros(10, dtype=np.int64), 2.0)
    assert seen == [(2, 1)] and opendp == []
    big = math.nextafter(2.0**64, 0)  # largest float below 2^64: t = 2^64 - 2^11 fits one word
    NoiseSource().discrete_laplace(np.zeros(10, dtype=np.int64), big)
    assert seen[-1] == (int(big), 1) and opendp == []
    out = NoiseSource().discrete_laplace(np.zeros(10, dtype=np.int64), 2.0**64)
    assert opendp == [2.0**64] and out.dtype == np.int64
    # seeded mode is untouched
    seen.clear()
    NoiseSource(seed=1).discrete_laplace(np.zeros(10, dtype=np.int64), 2.0)
    assert seen == []


def test_large_scales_do_not_overflow_and_saturate_like_opendp():
    """Scale 1e6: the right variance.  Scale just below 2^64: |Z| >= 2^63 often; every output is a valid
    int64, and the saturated shares (value 0: P(Z >= 2^63 - 1) and P(Z <= -2^63), ~0.30 each) match the closed
    form, for ours and for OpenDP's."""
    out = NoiseSource().discrete_laplace(np.zeros(200_000, dtype=np.int64), 1e6)
    a = math.exp(-1e-6)
    assert out.var() == pytest.approx(2 * a / (1 - a) ** 2, rel=0.03)
    big = math.nextafter(2.0**64, 0)
    n = 20_000
    ours = source._vectorised_discrete_laplace_add(np.zeros(n, dtype=np.int64), big)
    theirs = source._opendp_discrete_laplace_add(np.zeros(n, dtype=np.int64), big)
    a = math.exp(-1 / big)  # a^k is computed as exp(-k / scale): the float a itself rounds to 1
    p_pos = math.exp(-(2**63 - 1) / big) / (1 + a)  # P(Z >= 2^63 - 1): saturates at the top
    p_neg = math.exp(-(2**63) / big) / (1 + a)  # P(Z <= -2^63): saturates at the bottom
    for out in (ours, theirs):
        assert stats.binomtest(int((out == I64_MAX).sum()), n, p_pos).pvalue > ALPHA
        assert stats.binomtest(int((out == I64_MIN).sum()), n, p_neg).pvalue > ALPHA
    # values at the bounds: never wraps around
    vals = np.array([I64_MAX, I64_MIN] * 50_000, dtype=np.int64)
    out = NoiseSource().discrete_laplace(vals, 10.0)
    top, bottom = out[0::2], out[1::2]
    assert top.min() > I64_MAX - 10_000 and bottom.max() < I64_MIN + 10_000
    a = math.exp(-0.1)
    assert stats.binomtest(int((top == I64_MAX).sum()), 50_000, 1 / (1 + a)).pvalue > ALPHA  # P(Z >= 0)


def test_tiny_and_huge_denominators():
    """Scale 2^-60 (s = 2^60) and 1e-300 (s > 2^64): Z = 0 but for probability ~e^{-2^60}; the sampler ends."""
    for scale in (2.0**-60, 1e-300):
        out = NoiseSource().discrete_laplace(np.arange(1000, dtype=np.int64), scale)
        assert np.array_equal(out, np.arange(1000))


@pytest.mark.parametrize("scale", [3.0, 2.0**64])
@pytest.mark.parametrize("seed", [None, 1])
def test_int64_input_is_not_copied_or_modified_and_the_output_is_fresh(seed, scale):
    v = np.arange(-5, 5, dtype=np.int64)
    out = NoiseSource(seed=seed).discrete_laplace(v, scale)
    assert v.tolist() == list(range(-5, 5)) and not np.shares_memory(out, v)


def test_opendp_draws_without_loading_scikit_learn():
    """OpenDP's measurements come from its own modules, not ``opendp.prelude`` (whose extras load scikit-learn:
    about 30 MiB and a second a release never uses; issue 29, goal 4)."""
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from dpcore.noise import source\n"
            "x = source._opendp_discrete_laplace_add(np.zeros(5, dtype=np.int64), 3.0)\n"
            "g = source._opendp_gaussian(1.0)\n"
            "print(len(x), 'sklearn' in sys.modules, 'opendp.extras' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["5", "False", "False"], out.stderr[-2000:]
