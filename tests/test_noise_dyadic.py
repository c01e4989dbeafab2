"""The exact chain sampler of dpcore.noise.dyadic (PFL's sampler, issue 28 section 5).

The fast path's decisions are checked against the exact integer inverse CDF on
the same 64-bit words (it may refuse, never disagree), the exact path on words
that sit on or next to a cell boundary, and the whole block sampler against its
exact conditionals, once with the fast path and once with every position forced
onto the exact path.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpcore.noise.dyadic as dyadic
from dpcore.noise import NoiseSource
from dpcore.noise.dyadic import exact_index, fast_index, sample_chain_block


def _exact_cell(mant, expo, word: int) -> int | None:
    """Inverse-CDF cell of every U in [word 2^-64, (word + 1) 2^-64) by Fractions, or None if it straddles."""
    w = [Fraction(float(m)) * Fraction(2) ** int(e) for m, e in zip(mant, expo)]
    t = sum(w)
    lo, hi = Fraction(word, 2**64), Fraction(word + 1, 2**64)
    p = Fraction(0)
    for k, wk in enumerate(w):
        if lo * t >= p and hi * t <= p + wk:
            return k
        p += wk
    return None


def _random_row(rng, n, spread):
    mant = 2.0 ** rng.uniform(-64, 65, size=n) if spread else rng.uniform(0.5, 1.0, size=n)
    expo = rng.integers(-spread, spread + 1, size=n) if spread else np.zeros(n, dtype=np.int64)
    return mant, expo.astype(np.int64)


@pytest.mark.parametrize("spread", [0, 3, 200, 5_000_000])
def test_fast_path_never_disagrees_with_the_exact_inverse_cdf(spread):
    rng = np.random.default_rng(spread)
    decided = 0
    trials = 40 if spread > 10**4 else 300  # 5-million-bit integers on the exact side: fewer trials
    for trial in range(trials):
        mant, expo = _random_row(rng, int(rng.integers(1, 40)), spread)
        word = int(rng.integers(0, 2**64, dtype=np.uint64))
        k = fast_index(mant, expo, word)
        exact = exact_index(mant, expo, word, None)
        if k >= 0:
            decided += 1
            assert k == exact
            if spread <= 200:
                assert k == _exact_cell(mant, expo, word)
    assert decided >= trials - trials // 30  # the exact path is the rare exception


def test_exact_path_on_cell_boundaries():
    one = np.array([0.5, 0.5])
    zero = np.array([0, 0], dtype=np.int64)
    half = 2**63  # U in [1/2, 1/2 + 2^-64): exactly on the boundary between two equal weights
    assert fast_index(one, zero, half) == -1  # the float margins cannot decide ...
    assert exact_index(one, zero, half, None) == 1  # ... the integers can, with no further bit
    assert exact_index(one, zero, half - 1, None) == 0
    # weights 1 : 2, boundary at U = 1/3 (not dyadic): the word's interval contains it, more bits decide
    w = np.array([0.5, 1.0])
    a = 2**64 // 3
    assert exact_index(w, zero, a, None) == -1
    assert exact_index(w, zero, a, lambda: 0) == 0  # U just below 1/3
    assert exact_index(w, zero, a, lambda: 1) == 1  # U just above 1/3
    # a weight 2^-100000 of its neighbour keeps its own (tiny) cell at the bottom of [0, 1): U = 0.000...
    tiny = (np.array([0.5, 0.5]), np.array([-100_000, 0]))
    assert exact_index(*tiny, 0, lambda: 0) == 0
    assert exact_index(*tiny, 0, lambda: 1) == 1
    assert exact_index(*tiny, 1, None) == 1


def _chain_probability(mant, expo, lo, hi, y) -> Fraction:
    p = Fraction(1)
    prev = None
    for j in range(len(lo)):
        top = hi[j] if prev is None else min(hi[j], prev)
        row = [Fraction(float(mant[j, k])) * Fraction(2) ** int(expo[j, k]) for k in range(top - lo[j] + 1)]
        p *= row[y[j] - lo[j]] / sum(row)
        prev = y[j]
    return p


def _block():
    mant = np.array([[0.5, 0.75, 0.6, 0.9], [0.7, 0.5, 0.99, 0.8], [0.5, 0.5, 0.5, 0.5]])
    expo = np.array([[0, 1, -2, 0], [3, 0, 1, -1], [0, 0, 0, 0]], dtype=np.int64)
    lo = np.array([1, 1, 0], dtype=np.int64)
    hi = np.array([4, 3, 3], dtype=np.int64)
    outs = [(a, b, c) for a in range(1, 5) for b in range(1, min(3, a) + 1) for c in range(0, b + 1)]
    return mant, expo, lo, hi, outs


def _chi2(draw, n=12000):
    mant, expo, lo, hi, outs = _block()
    p = np.array([float(_chain_probability(mant, expo, lo, hi, y)) for y in outs])
    assert p.sum() == pytest.approx(1.0)
    index = {y: k for k, y in enumerate(outs)}
    counts = np.zeros(len(outs))
    for _ in range(n):
        counts[index[tuple(int(v) for v in draw(mant, expo, lo, hi))]] += 1
    return float(np.sum((counts - n * p) ** 2 / (n * p))), len(outs) - 1


def test_block_sampler_matches_its_exact_conditionals():
    ns = NoiseSource(seed=3)
    chi2, df = _chi2(lambda m, e, lo, hi: ns.nonincreasing_chain(m, e, lo, hi))
    assert df == 24 and chi2 < 85  # P(chi2_24 > 85) < 1e-7


def test_exact_path_alone_matches_the_exact_conditionals(monkeypatch):
    """Every position forced onto the integer path (the fast path declines everything)."""
    calls = []

    def never(mant, expo, lo, hi, prev, words, y, scratch, pow2):
        calls.append(1)
        return 0

    monkeypatch.setattr(dyadic, "_chain_fast", never)
    ns = NoiseSource(seed=4)
    chi2, df = _chi2(lambda m, e, lo, hi: ns.nonincreasing_chain(m, e, lo, hi), n=6000)
    assert calls and chi2 < 85


def test_block_respects_prev_and_production_source():
    mant, expo, lo, hi, _ = _block()
    y = NoiseSource().nonincreasing_chain(mant, expo, lo, hi, prev=2)
    assert y[0] <= 2 and np.all(np.diff(y) <= 0) and np.all(y >= lo) and np.all(y <= hi)
    with pytest.raises(ValueError, match="mant and expo"):
        NoiseSource(seed=0).nonincreasing_chain(mant[:2], expo, lo, hi)
    with pytest.raises(ValueError, match="positive"):
        exact_index(np.array([0.5, 0.0]), np.array([0, 0]), 0, None)
    words = np.zeros(3, dtype=np.uint64)  # U = 0 on every position: the lowest state each time
    assert sample_chain_block(mant, expo, lo, hi, None, words, lambda: 0).tolist() == [1, 1, 0]
    assert math.isfinite(float(mant.sum()))
