"""Issue 16 part 2: the smooth-sensitivity Student's T count (Bun & Steinke 2019, Section 3), ``smooth_student_t``.

* (a) exact privacy audit of the integer T_2 release: the pmf of ``round(f + (S/s) Z)`` from the algebraic
  CDF (60-digit decimal) on neighbouring (f, S) pairs -- the worst cases (shift exactly S, dilation exactly
  e^beta) and every pair the mechanism produces on a tiny exhaustive universe -- has
  ``max |ln P(k) / P'(k)| <= epsilon`` (tails included); a mechanism with a too large ``s`` fails it;
* (b) the mechanism's S(X) is beta-smooth for *this* method's beta (epsilon / 6) under replace / add / remove;
* (c) the exact sampler: scripted bits decide the right cell, seeded draws match the exact pmf (chi-square),
  production draws work and are publishable;
* (d) the published half-width is public (one figure for every dataset) and is the smallest integer covering
  ``>= 1 - alpha`` of the exact pmf at S = G;
* (e) spec / step / flow wiring: delta is unused, bad parameters give clear errors.
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpcore.mechanisms.accuracy import discrete_laplace_half_width, student_t2_half_width
from dpcore.mechanisms.outlier_count import OutlierCountMechanism, choose_method, count_outliers, \
    public_global_sensitivity
from dpcore.noise import NoiseSource, student_t2_cdf_compare, student_t2_integer_pmf, student_t2_shift_scale
from dpcore.noise.student_t import student_t2_integer_from_bits
from dpcore.release.spec import OutlierCountsSpec
from dpcore.steps.outlier_counts import budget_split
from test_outlier_count_neighbours import _datasets, _neighbours, one_of_each_neighbour

EPS = 0.5


def st_mech(k=3, r=0.1, eps=EPS, **kw) -> OutlierCountMechanism:
    return OutlierCountMechanism(k, r, eps, 0, method="smooth_student_t", **kw)


# --------------------------------------------------------------------------- (a) exact privacy audit

def max_log_ratio(f1, c1, f2, c2, half_window: int = 4000) -> float:
    """``max |ln P1(E) / P2(E)|`` over every integer and both tail events beyond the window (60 digits)."""
    lo = min(int(f1), int(f2)) - half_window
    hi = max(int(f1), int(f2)) + half_window
    p1, l1, u1 = student_t2_integer_pmf(f1, c1, lo, hi)
    p2, l2, u2 = student_t2_integer_pmf(f2, c2, lo, hi)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return float(max(abs((a / b).ln()) for a, b in zip(p1 + [l1, u1], p2 + [l2, u2])))


def test_shift_scale_is_the_largest_float_meeting_the_shift_budget_exactly():
    for eps in (0.1, 0.5, 0.95, 1.0, 3.3, 10.0):
        s = student_t2_shift_scale(eps)
        e = min(Fraction(eps), Fraction(repr(eps))) / 2
        assert 9 * Fraction(s) ** 2 <= 8 * e * e  # 3 s / (2 sqrt 2) <= eps / 2, exactly
        assert 9 * Fraction(math.nextafter(s, math.inf)) ** 2 > 8 * e * e  # and the next float is not
    with pytest.raises(ValueError, match="epsilon"):
        student_t2_shift_scale(0.0)
    with pytest.raises(ValueError, match="share"):
        student_t2_shift_scale(0.5, Fraction(3, 2))


@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("S", [1, 3, 7])
def test_exact_privacy_loss_at_the_worst_shift_and_dilation(eps, S):
    """f vs f + S (the largest shift |f - f'| <= min(S(x), S(y))) with the scales S and S e^{+-beta}: the exact
    log-ratio of the released integer's pmf never exceeds the charged epsilon; it reaches a good part of it (the
    audit is not vacuous)."""
    m = st_mech(eps=eps)
    s = m.student_t_s
    beta = eps / 6
    S_up = S * math.exp(m.beta)  # the largest S(y) the mechanism's bound allows next to S(x) = S
    worst = 0.0
    for c1, c2 in [(S, S), (S, S_up), (S_up, S)]:
        for f1, f2 in [(0, S), (S, 0)]:
            worst = max(worst, max_log_ratio(f1, Fraction(c1) / Fraction(s), f2, Fraction(c2) / Fraction(s)))
    assert worst <= m.privacy_map().epsilon
    # not vacuous: the continuous worst case is s 3/(2 sqrt 2) + 2 beta = (5/6) eps for an infinitesimal shift;
    # a whole shift of s z-units gets a little less (0.57 eps at eps = 2)
    assert worst >= 0.5 * eps
    assert m.beta < beta


def test_audit_fails_for_a_too_large_shift_scale():
    """Negative control: with s doubled (all of epsilon on the shift term, beta unchanged: 1.5 epsilon by the
    formula) the same audit exceeds epsilon (measured 1.07 epsilon)."""
    m = st_mech(eps=EPS)
    s = Fraction(m.student_t_s) * 2
    S, S_up = 7, 7 * math.exp(m.beta)
    assert max_log_ratio(0, Fraction(S) / s, S, Fraction(S_up) / s) > EPS


@pytest.mark.parametrize("k", [1, 2, 3])
def test_exhaustive_neighbours_exact_privacy_loss_of_the_mechanism(k):
    """Every replace / add / remove pair of the tiny 1-D universe: the mechanism's own (q, S(X)) on both sides;
    the exact pmf log-ratio of the released integers is <= the charged epsilon."""
    m = st_mech(k=k, r=0.1)
    cache = {}

    def qc(X):
        if X not in cache:
            S, _, _, q = m._terms(np.array(X).reshape(-1, 1))
            cache[X] = (q, m.student_t_scale(S))
        return cache[X]

    pairs = set()
    for X in _datasets():
        for _, Y in _neighbours(X):
            (q1, c1), (q2, c2) = qc(X), qc(Y)
            if (q1, c1) != (q2, c2):
                pairs.add((q1 - min(q1, q2), c1, q2 - min(q1, q2), c2))  # the loss depends on q1 - q2 only
    assert len(pairs) >= 3
    worst = max(max_log_ratio(a, c1, b, c2, half_window=1500) for a, c1, b, c2 in pairs)
    assert worst <= EPS, worst


# --------------------------------------------------------------------------- (b) smoothness for this beta

def test_exhaustive_smoothness_for_the_student_t_beta():
    """S(X) <= e^beta S(X') for beta = epsilon / 6 exactly (no tolerance), every neighbour of every dataset of
    the 1-D universe, k = 1..3; and S dominates |Delta q| (the local sensitivity), S <= G."""
    beta = EPS / 6
    for k in (1, 2, 3):
        m = st_mech(k=k, r=0.1)
        G = public_global_sensitivity(1, k)
        memo = {}

        def stats_(X):
            if X not in memo:
                S, _, _, q = m._terms(np.array(X).reshape(-1, 1))
                memo[X] = (q, S)
            return memo[X]

        n = 0
        for X in _datasets():
            q, S = stats_(X)
            assert S <= G
            for kind, Y in _neighbours(X):
                q2, S2 = stats_(Y)
                assert S <= math.exp(beta) * S2, (k, kind, X, Y)
                assert abs(q - q2) <= min(S, S2) + 1e-12
                n += 1
        assert n > 300


coord = st.sampled_from([0.0, 0.05, 0.1, 0.15, 0.2, 0.3])
point = st.tuples(coord, coord)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(X=st.lists(point, min_size=1, max_size=7), k=st.integers(1, 3), new=point, data=st.data())
def test_smoothness_in_2d_for_add_remove_replace(X, k, new, data):
    beta = EPS / 6
    m = st_mech(k=k, r=0.1, size_limit=3)
    A = np.array(X, dtype=float)
    S = m.smooth_sensitivity(A)
    for B in one_of_each_neighbour(A, data.draw(st.integers(0, len(A) - 1)), new):
        S2 = m.smooth_sensitivity(B)
        assert S <= math.exp(beta) * S2 and S2 <= math.exp(beta) * S
        assert abs(count_outliers(A, k, 0.1) - count_outliers(B, k, 0.1)) <= min(S, S2) + 1e-12


def test_beta_is_per_method_and_lowered():
    sm = OutlierCountMechanism(3, 0.1, EPS, 1e-6)
    t = st_mech()
    assert t.beta < EPS / 6 < t.beta + 1e-11
    assert sm.beta < EPS / (4 * (1 + math.log(2e6)))
    assert t.beta > 5 * sm.beta  # a much larger beta: S(X) decays faster
    with pytest.raises(ValueError, match="beta is defined for the smooth methods"):
        OutlierCountMechanism(3, 0.1, EPS, 0, method="global_laplace").beta


# --------------------------------------------------------------------------- (c) the exact sampler

def _cdf(x) -> float:
    return float(stats.t.cdf(float(x), 2))


def test_cdf_comparison_is_exact_and_agrees_with_scipy():
    rng = np.random.default_rng(0)
    for _ in range(300):
        x = Fraction(float(rng.standard_cauchy())).limit_denominator(10**6)
        u = Fraction(int(rng.integers(0, 2**30)), 2**30)
        got = student_t2_cdf_compare(x, u)
        ref = _cdf(x) - float(u)
        if abs(ref) > 1e-12:
            assert got == (1 if ref > 0 else -1)
    # exact ties: F(0) = 1/2; F(1) = 1/2 + 1/(2 sqrt 3) is irrational, F(x) = 3/4 at x^2 = 2/3 (irrational x)
    assert student_t2_cdf_compare(Fraction(0), Fraction(1, 2)) == 0
    assert student_t2_cdf_compare(Fraction(10**9), Fraction(1)) == -1
    assert student_t2_cdf_compare(Fraction(-10**9), Fraction(0)) == 1


class Bits:
    def __init__(self, bits):
        self.bits, self.used = list(bits), 0

    def __call__(self):
        b = self.bits[self.used]
        self.used += 1
        return b


@pytest.mark.parametrize("value,scale", [(0, Fraction(1)), (17, Fraction(297, 10)), (Fraction(1, 3), Fraction(1, 7))])
def test_scripted_bits_land_in_the_inverse_cdf_cell(value, scale):
    """For random bit strings the returned k is the cell of every uniform that starts with the bits read:
    F(x_{k-1/2}) <= 0.b1..bL and 0.b1..bL + 2^-L <= F(x_{k+1/2}) (checked with mpmath at 50 digits)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    rng = np.random.default_rng(5)

    def F(x: Fraction):
        x = mpmath.mpf(x.numerator) / x.denominator
        return mpmath.mpf(1) / 2 + x / (2 * mpmath.sqrt(2 + x * x))

    for _ in range(200):
        bits = Bits(rng.integers(0, 2, 400).tolist())
        k = student_t2_integer_from_bits(Fraction(value), scale, bits)
        L = bits.used
        a = int("".join(map(str, bits.bits[:L])), 2)
        lo, hi = mpmath.mpf(a) / 2**L, mpmath.mpf(a + 1) / 2**L
        assert F((k - Fraction(1, 2) - value) / scale) <= lo
        assert hi <= F((k + Fraction(1, 2) - value) / scale)


def test_seeded_draws_match_the_exact_pmf():
    """Chi-square of 20,000 seeded draws of round(5 + 2.5 Z) against the exact pmf (cells -10..20, tails pooled);
    deterministic seed, false-failure rate 1e-4 for a correct sampler."""
    value, scale = 5, Fraction(5, 2)
    ns = NoiseSource(seed=2024)
    n = 20_000
    draws = np.array([ns.student_t_integer(value, scale) for _ in range(n)])
    pmf, lower, upper = student_t2_integer_pmf(value, scale, -10, 20)
    probs = np.array([float(lower)] + [float(p) for p in pmf] + [float(upper)])
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    inside = draws[(draws >= -10) & (draws <= 20)]
    counts = np.concatenate([[np.sum(draws < -10)], np.bincount(inside + 10, minlength=31), [np.sum(draws > 20)]])
    assert counts.sum() == n
    chi2 = float(((counts - n * probs) ** 2 / (n * probs)).sum())
    assert chi2 < stats.chi2.isf(1e-4, len(probs) - 1), chi2
    # same seed, same stream (test mode is deterministic)
    again = NoiseSource(seed=2024)
    assert [again.student_t_integer(value, scale) for _ in range(50)] == draws[:50].tolist()


def test_production_draws_are_publishable_and_spread():
    ns = NoiseSource()
    ns.require_publishable()
    draws = [ns.student_t_integer(100, Fraction(10)) for _ in range(400)]
    assert all(isinstance(x, int) for x in draws)
    assert 80 < float(np.median(draws)) < 120 and len(set(draws)) > 50
    # far tails are reachable without precision trouble: a huge scale
    big = [ns.student_t_integer(0, Fraction(10**12)) for _ in range(20)]
    assert max(abs(b) for b in big) > 10**10
    with pytest.raises(ValueError, match="scale"):
        ns.student_t_integer(0, 0)
    with pytest.raises(ValueError, match="value"):
        ns.student_t_integer(float("nan"), 1)


def test_release_is_the_integer_count_plus_the_sampler_draw():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (60, 2))
    m = st_mech(k=3, r=0.08)
    noisy, q, c = m.release_with_diagnostics(X, NoiseSource(seed=9))
    S = m.smooth_sensitivity(X)
    assert q == count_outliers(X, 3, 0.08) and c == float(Fraction(S) / Fraction(m.student_t_s))
    assert noisy == NoiseSource(seed=9).student_t_integer(q, m.student_t_scale(S)) and noisy == int(noisy)
    assert m.integer_output and m.name == "outlier-count-smooth-student-t"
    assert m.privacy_map().epsilon == EPS and m.privacy_map().delta == 0


# --------------------------------------------------------------------------- (d) the published half-width

@pytest.mark.parametrize("eps,k,d", [(0.5, 3, 1), (0.5, 3, 2), (0.1, 1, 1), (2.0, 10, 3)])
def test_published_half_width_is_public_and_the_smallest_exact_cover_at_S_equal_G(eps, k, d):
    m = st_mech(k=k, eps=eps)
    G = public_global_sensitivity(d, k)
    h = m.ci_half_width(d)
    c_G = m.student_t_scale(G)
    pmf, _, _ = student_t2_integer_pmf(0, c_G, -h, h)
    inside = sum(pmf)
    pmf1 = pmf[1:-1]
    assert inside >= decimal.Decimal("0.95") > sum(pmf1)  # covers, and h - 1 does not
    # public: the same figure whatever the data, and it covers the actual (smaller-scale) noise too
    rng = np.random.default_rng(7)
    for _ in range(4):
        X = rng.uniform(0, 1, (int(rng.integers(5, 40)), d))
        assert m.ci_half_width(d) == h
        S = m.smooth_sensitivity(X)
        assert S <= G and student_t2_half_width(m.student_t_scale(S), 0.05) <= h


def test_student_t2_half_width_closed_form():
    # T = 0.95 sqrt(2 / (1 - 0.95^2)) = 4.30265...; h = ceil(c T - 1/2)
    for c in (Fraction(1), Fraction(7, 3), Fraction(2970, 100)):
        T = 0.95 * math.sqrt(2 / (1 - 0.95**2))
        assert student_t2_half_width(c, 0.05) == max(0, math.ceil(float(c) * T - 0.5))
    # level 0.5: P(|round(Z)| <= 0) = P(|Z| < 1/2) = 0.5 / sqrt(2.25) = 1/3 < 1/2; h = 1: 1.5 / sqrt(4.25) > 1/2
    assert student_t2_half_width(Fraction(1), 0.5) == 1


def test_auto_never_picks_student_t_its_public_interval_is_wider_than_laplace():
    """The reason choose_method leaves smooth_student_t out: at S = G its publishable half-width is larger
    than the discrete Laplace's over a grid of epsilon, k, d and levels (about 3 x at 95%)."""
    for eps in (0.05, 0.1, 0.5, 0.95, 2.0, 10.0):
        for k in (1, 3, 10):
            for d in (1, 2, 4, 8):
                for level in (0.5, 0.9, 0.95, 0.99):
                    t = st_mech(k=k, eps=eps).ci_half_width(d, level)
                    lap = OutlierCountMechanism(k, 0.1, eps, 0, method="global_laplace").ci_half_width(d, level)
                    assert t > lap, (eps, k, d, level, t, lap)
                assert choose_method(min(eps, 0.99), 1e-6, k, d) == "global_laplace"
    m = st_mech(k=3, eps=0.5)
    G = public_global_sensitivity(1, 3)
    lap = discrete_laplace_half_width(OutlierCountMechanism(3, 0.1, 0.5, 0, method="global_laplace").laplace_scale(1))
    assert (m.ci_half_width(1), lap) == (128, 42) and G == 7


# --------------------------------------------------------------------------- (e) parameters and wiring

def test_validate_errors_name_the_parameter():
    with pytest.raises(ValueError, match="delta must be 0 for method='smooth_student_t'"):
        OutlierCountMechanism(3, 0.1, 0.5, 1e-6, method="smooth_student_t").validate()
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        OutlierCountMechanism(3, 0.1, -1, 0, method="smooth_student_t").validate()
    with pytest.raises(ValueError, match="too small for method='smooth_student_t'"):
        OutlierCountMechanism(3, 0.1, 1e-12, 0, method="smooth_student_t").validate()
    with pytest.raises(ValueError, match="student_t_s is defined for method='smooth_student_t' only"):
        OutlierCountMechanism(3, 0.1, 0.5, 0, method="global_laplace").student_t_s
    st_mech(eps=5.0).validate()  # pure DP: epsilon above 1 is fine


def test_spec_step_and_auto_wiring():
    cfg = OutlierCountsSpec(method="smooth_student_t", epsilon_count=2.0)
    assert cfg.method == "smooth_student_t" and cfg.delta_count == 1e-6  # present but unused
    with pytest.raises(ValueError, match="method"):
        OutlierCountsSpec(method="student_t")
    m = OutlierCountMechanism.for_dimension(2, 3, 0.1, 2.0, 1e-6, method="smooth_student_t")
    assert m.delta == 0 and m.privacy_map().delta == 0
    b = budget_split(5.0, 2, 4, "smooth_student_t")
    assert b.epsilon_count > 1  # no epsilon < 1 cap (pure DP)


def test_step_describes_the_method_with_public_figures_only():
    from dpcore.steps.outlier_counts import _describe_count

    m = st_mech(k=3, r=0.05)
    text = _describe_count(m, 1)
    assert "Student's T" in text and "delta = 0" in text and "G = 7" in text
    assert "scale is not published" in text
