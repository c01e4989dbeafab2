"""Issue 16: the global discrete Laplace count, its public accuracy statement, ``method: auto`` and the
``epsilon_total`` split of the outlier-counts step.

Privacy is audited exactly: the released distributions are integer shifts of one discrete Laplace, so the
privacy loss at every output ``y`` is ``(|y - q'| - |y - q|) / s`` -- a rational number once ``s`` (a float)
is read exactly -- and it is compared with the *charged* epsilon in Fractions, over every replace / add /
remove neighbour of an exhaustive tiny universe (the machinery of ``test_outlier_count_neighbours``).
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.mechanisms.accuracy import (
    discrete_laplace_half_width, discrete_laplace_tail, gaussian_half_width, student_t2_half_width,
)
from dpcore.budget.amounts import PrivacyCost, exact
from dpcore.mechanisms.outlier_count import (
    METHODS,
    SMOOTH_METHODS,
    OutlierCountMechanism,
    choose_method,
    count_outliers,
    public_global_sensitivity,
)
from dpcore.noise import NoiseSource
from dpcore.release.spec import OutlierCountsSpec
from dpcore.steps.outlier_counts import budget_split
from test_outlier_count_neighbours import _datasets, _neighbours

EPS = 0.5


def laplace(k=3, eps=EPS, r=0.1):
    return OutlierCountMechanism(k, r, eps, 0, method="global_laplace")


def exact_loss(q1: int, q2: int, s: float, ys) -> Fraction:
    """max_y ln P(q1 + Z = y) - ln P(q2 + Z = y) for Z discrete Laplace(s), exactly (a Fraction)."""
    S = Fraction(s)
    return max(Fraction(abs(y - q2) - abs(y - q1)) / S for y in ys)


def pmf_log_ratio(q1: int, q2: int, s: float, y: int) -> decimal.Decimal:
    """The same from the pmf itself, (1 - a) / (1 + a) a^|z| with a = e^{-1/s}, in 50-digit decimals."""
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        S = decimal.Decimal(s)
        a = (-1 / S).exp()
        c = (1 - a) / (1 + a)
        return (c * a ** abs(y - q1)).ln() - (c * a ** abs(y - q2)).ln()


# --------------------------------------------------------------------------- the exact audit


@settings(max_examples=40, deadline=None)
@given(eps=st.one_of(st.floats(0.01, 5.0), st.fractions(Fraction(1, 100), Fraction(5)).map(lambda f: f.limit_denominator(997))),
       d=st.integers(1, 6), k=st.integers(1, 8))
def test_privacy_loss_at_the_public_sensitivity_is_at_most_the_charged_epsilon(eps, d, k):
    """Counts G apart (the largest move of one record): the exact pmf ratio is e^{G/s} <= e^epsilon, with
    epsilon as the ledger charges it (its decimal reading) and as its binary value; delta charged = 0."""
    m = laplace(k, eps)
    G = public_global_sensitivity(d, k)
    s = m.laplace_scale(d)
    cost = m.privacy_map()
    assert cost.delta == 0 and cost == PrivacyCost(eps, 0)
    loss = exact_loss(0, G, s, range(-3 * G, 4 * G))
    assert loss == Fraction(G) / Fraction(s)
    assert loss <= cost.epsilon
    if isinstance(eps, float):
        assert loss <= Fraction(eps)  # the float's binary value too
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        bound = decimal.Decimal(cost.epsilon.numerator) / decimal.Decimal(cost.epsilon.denominator) + decimal.Decimal("1e-40")
    for y in (-G, 0, G // 2, G, 2 * G):  # 50-digit pmf ratios: equal to G/s up to ~1e-45
        assert pmf_log_ratio(0, G, s, y) <= bound


@pytest.mark.parametrize("k", [1, 2, 3])
def test_exhaustive_replace_add_remove_exact_privacy_loss(k):
    """Every multiset of 1-4 points of the 1-D universe and every replace / add / remove neighbour:
    |Delta q| <= G = k K_1 + 1, the noise scale and the published half-width are the same on both sides
    (nothing depends on N or the data), and the exact privacy loss of the two released distributions over
    every output in a window is <= the charged epsilon (a Fraction comparison, no tolerance)."""
    r = 0.1
    m = laplace(k, EPS, r)
    G = public_global_sensitivity(1, k)
    s = m.laplace_scale(1)
    hw = m.ci_half_width(1)
    charged = m.privacy_map().epsilon
    cache: dict[tuple, int] = {}

    def q(X):
        if X not in cache:
            cache[X] = count_outliers(np.array(X).reshape(-1, 1), k, r)
        return cache[X]

    worst = Fraction(0)
    kinds = {"add": 0, "remove": 0, "replace": 0}
    for X in _datasets():
        for kind, Y in _neighbours(X):
            q1, q2 = q(X), q(Y)
            assert abs(q1 - q2) <= G, (kind, X, Y)
            A, B = np.array(X).reshape(-1, 1), np.array(Y).reshape(-1, 1)
            assert m.noise_sigma(A) == m.noise_sigma(B) and m.ci_half_width(A.shape[1]) == hw
            loss = max(exact_loss(q1, q2, s, range(-40, 50)), exact_loss(q2, q1, s, range(-40, 50)))
            worst = max(worst, loss)
            kinds[kind] += 1
    assert min(kinds.values()) > 100
    assert worst <= charged
    assert worst > 0  # some neighbours do move the count


def test_release_is_the_integer_count_plus_the_sampler_draw():
    rng = np.random.default_rng(5)
    X = np.vstack([rng.normal(0, 1, (45, 2)), rng.normal(20, 10, (5, 2))])
    m = OutlierCountMechanism(3, 1.1, 0.5, 0, method="global_laplace")
    q = count_outliers(X, 3, 1.1)
    s = m.laplace_scale(2)
    assert s == 19 / 0.5 and m.name == "outlier-count-global-laplace" and m.integer_output
    expected = int(NoiseSource(seed=7).discrete_laplace(np.int64(q), s))
    noisy, q_used, sd = m.release_with_diagnostics(X, NoiseSource(seed=7))
    assert (noisy, q_used) == (float(expected), q) and noisy == int(noisy)
    a = math.exp(-1 / s)
    assert sd == pytest.approx(math.sqrt(2 * a) / (1 - a)) == m.noise_sigma(X)
    draws = np.array([m.release(X, NoiseSource(seed=i)) for i in range(400)])
    assert abs(draws.mean() - q) < 4 * sd / math.sqrt(400)
    assert draws.std() == pytest.approx(sd, rel=0.15)
    # production sampler (OpenDP) gives an integer too
    assert float(m.release(X, NoiseSource())).is_integer()


def test_scale_is_rounded_up_from_exact_rationals():
    """s >= G / epsilon exactly, for epsilon read as the ledger reads it and as its binary value."""
    for eps in (0.1, 0.3, 0.7, 1 / 3, 2.2, Fraction(231, 400)):
        m = laplace(3, eps)
        for d in (1, 2, 3, 7):
            s = Fraction(m.laplace_scale(d))
            G = public_global_sensitivity(d, 3)
            assert G / s <= exact(eps)
            if isinstance(eps, float):
                assert G / s <= Fraction(eps)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(delta=1e-6), "delta must be 0"),
        (dict(delta=None), "delta must be 0"),
        (dict(epsilon=0), "epsilon"),
        (dict(epsilon=float("inf")), "epsilon"),
        (dict(method="auto"), "for_dimension"),
    ],
)
def test_validate_errors_name_the_parameter(kwargs, word):
    args = dict(k=3, r=0.1, epsilon=0.5, delta=0, method="global_laplace")
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        OutlierCountMechanism(**args).validate()


def test_laplace_accepts_epsilon_above_one_but_the_gaussians_do_not():
    OutlierCountMechanism(3, 0.1, 2.0, 0, method="global_laplace").validate()
    for method in ("smooth", "global"):
        with pytest.raises(ValueError, match="epsilon must be a number with 0 < epsilon < 1"):
            OutlierCountMechanism(3, 0.1, 2.0, 1e-6, method=method).validate()


# --------------------------------------------------------------------------- accuracy statements


@pytest.mark.parametrize("s", [0.3, 1.0, 2.5, 7.0, 12.12, 14.0, 100.0, 1234.5])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_discrete_laplace_half_width_is_the_smallest_covering_integer(s, level):
    """From the pmf summed term by term (independently of the closed-form tail): P(|Z| <= t) >= level and
    P(|Z| <= t - 1) < level; OpenDP's accuracy (P(|Z| >= A) = alpha) agrees: t = floor(A)."""
    import opendp.accuracy as acc

    t = discrete_laplace_half_width(s, 1 - Fraction(repr(level)))  # alpha = 1 - level, exactly
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        S = decimal.Decimal(s)
        a = (-1 / S).exp()
        c = (1 - a) / (1 + a)

        def inside(u):
            return c * (1 + 2 * sum(a**z for z in range(1, u + 1))) if u >= 0 else decimal.Decimal(0)

        lev = decimal.Decimal(repr(level))
        assert inside(t) >= lev
        assert inside(t - 1) < lev
        assert abs(decimal.Decimal(1) - inside(t) - decimal.Decimal(discrete_laplace_tail(s, t))) < decimal.Decimal("1e-15")
    A = acc.discrete_laplacian_scale_to_accuracy(s, 1 - level)
    assert t == math.floor(A) or abs(t - A) < 1e-9


def test_gaussian_half_width_rounds_up():
    for sigma in (0.1, 1.0, 19.79, 375.04, 1e4):
        t = math.ceil(gaussian_half_width(sigma))
        assert sigma * 1.959963984540054 <= t < sigma * 1.959963984540054 + 1
    assert math.ceil(gaussian_half_width(1.0, 0.5)) == 1  # 0.674...


def test_published_half_width_is_public_and_bounds_the_smooth_noise():
    """The step publishes ci_half_width(d): a function of (method, epsilon, delta, k, d) only. For the smooth
    method it is the bound with S = G, never below the actual (data-dependent) half-width."""
    rng = np.random.default_rng(11)
    sm = OutlierCountMechanism(3, 0.2, 0.5, 1e-6)
    gl = OutlierCountMechanism(3, 0.2, 0.5, 1e-6, method="global")
    la = laplace(3, 0.5, 0.2)
    assert la.ci_half_width(1) == 42  # s = 14: the demo's old per-count epsilon
    assert gl.ci_half_width(1) == math.ceil(gaussian_half_width(gl.global_sigma(1)))
    for _ in range(5):
        X = rng.uniform(0, 1, (int(rng.integers(5, 40)), 2))
        assert math.ceil(gaussian_half_width(sm.noise_sigma(X))) <= sm.ci_half_width(2)
        assert sm.smooth_sensitivity(X) >= sm.smooth_sensitivity_floor(2) - 1e-12



def _mech_for(method, k, eps, delta=1e-6):
    """A mechanism of ``method`` at (k, eps): pure methods get delta 0, the Gaussian ones ``delta``."""
    return OutlierCountMechanism.for_dimension(1, k, 0.1, eps, delta, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_ci_half_width_is_half_width_at_G_and_half_width_at_is_monotone_in_S(method):
    """``ci_half_width(d, level) == half_width_at(G, d, level)`` for every method, and ``half_width_at`` is
    non-decreasing in ``S`` (so the figure at S = G covers every S(X) <= G); the global methods ignore ``S``."""
    for eps in (0.1, 0.5, 0.95):
        for k in (1, 3, 10):
            m = _mech_for(method, k, eps)
            for d in (1, 2, 4, 10):
                G = public_global_sensitivity(d, k)
                for level in (0.5, 0.9, 0.95, 0.99):
                    assert m.ci_half_width(d, level) == m.half_width_at(G, d, level)
                Ss = sorted({0.25, 1.0, 1.5, 2.0, G / 3, G - 0.5, float(G), 2.0 * G} | (
                    {m.smooth_sensitivity_floor(d)} if method in SMOOTH_METHODS else set()))
                hws = [m.half_width_at(S, d) for S in Ss]
                assert all(a <= b for a, b in zip(hws, hws[1:])), (method, eps, k, d, list(zip(Ss, hws)))
                if method not in SMOOTH_METHODS:
                    assert len(set(hws)) == 1 and m.half_width_at(None, d) == hws[0]


def test_half_width_at_equals_the_hand_formulas_and_rejects_a_bad_S():
    sm, st_ = _mech_for("smooth", 3, 0.5), _mech_for("smooth_student_t", 3, 0.5)
    for S in (1.0, 4.25, 6.9, 7.0):
        assert sm.half_width_at(S, 1) == math.ceil(gaussian_half_width(sm._smooth_sigma(S), 0.05))
        assert st_.half_width_at(S, 1) == student_t2_half_width(st_.student_t_scale(S), 0.05)
    assert st_.half_width_at(7, 1) == 128 and sm.half_width_at(7, 1) == 740  # the module docstring's figures
    for bad in (0, -1.0, math.inf, math.nan, None, True):
        for m in (sm, st_):
            with pytest.raises(ValueError, match="S must be"):
                m.half_width_at(bad, 1)


# --------------------------------------------------------------------------- method: auto


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.02, 3.0), log10_delta=st.floats(-12, -0.05), k=st.integers(1, 6), d=st.integers(1, 6))
def test_auto_is_the_smallest_publishable_interval_and_never_smooth(eps, log10_delta, k, d):
    delta = 10.0**log10_delta
    got = choose_method(eps, delta, k, d)
    assert got in ("global_laplace", "global")
    lap = OutlierCountMechanism(k, 1.0, eps, 0, method="global_laplace").ci_half_width(d)
    if eps < 1:
        gau = OutlierCountMechanism(k, 1.0, eps, delta, method="global").ci_half_width(d)
        sm = OutlierCountMechanism(k, 1.0, eps, delta).ci_half_width(d)
        assert min(lap, gau) <= sm
        assert got == ("global" if gau < lap else "global_laplace")
    else:
        assert got == "global_laplace"
    assert choose_method(eps, 0, k, d) == "global_laplace"
    mech = OutlierCountMechanism.for_dimension(d, k, 0.1, eps, delta)
    assert mech.method == got and (mech.delta == 0) == (got == "global_laplace")


def test_auto_at_the_demo_parameters_and_the_gaussian_crossover():
    assert choose_method(0.5, 1e-6, 3, 1) == "global_laplace"
    assert choose_method(0.5, 0.1, 3, 1) == "global_laplace"
    assert choose_method(0.5, 0.9, 3, 1) == "global"  # an absurd delta: only there the Gaussian is narrower
    with pytest.raises(ValueError, match="delta"):
        choose_method(0.5, 1.0, 3, 1)


# --------------------------------------------------------------------------- epsilon_total


def test_budget_split_is_exact_and_uses_public_parameters_only():
    b = budget_split(1.5, 2, 4, "global_laplace")
    assert (b.epsilon_select, b.epsilon_count, b.share) == (Fraction(69, 200), Fraction(231, 400), Fraction(23, 100))
    for E, h, m, method in [(1.5, 2, 4, "auto"), (0.3, 1, 10, "smooth"), (3.7, 3, 45, "global_laplace"),
                            (1.0, 4, 4, "global"), (0.1, 1, 1, "global_laplace")]:
        b = budget_split(E, h, m, method)
        assert b.epsilon_select + h * b.epsilon_count == exact(E)  # exact: the charges sum to the total
        assert b.epsilon_select > 0 and b.epsilon_count > 0
        expected = math.log(math.comb(m, h)) / (math.log(math.comb(m, h)) + h * math.log(20))
        assert b.share == Fraction(min(max(round(100 * expected), 1), 99), 100)
    assert budget_split(1.0, 4, 4, "global").share == Fraction(1, 100)  # nothing to choose
    # Gaussian methods: counts capped below 1, the rest to the selection
    g = budget_split(5.0, 2, 4, "smooth")
    assert g.epsilon_count == Fraction(99, 100) and g.epsilon_select == 5 - 2 * Fraction(99, 100)
    assert budget_split(5.0, 2, 4, "global_laplace").epsilon_count > 1
    with pytest.raises(ValueError, match="h=3"):
        budget_split(1.0, 3, 2, "auto")


def test_spec_takes_epsilon_total_or_the_explicit_pair():
    assert (OutlierCountsSpec().epsilon_select, OutlierCountsSpec().epsilon_count) == (0.5, 0.5)
    t = OutlierCountsSpec(epsilon_total=1.5, method="auto")
    assert t.epsilon_select is None and t.epsilon_count is None
    assert OutlierCountsSpec(**t.model_dump()) == t  # round trip (operator flows re-parse sections)
    for extra in ({"epsilon_select": 0.2}, {"epsilon_count": 0.2}):
        with pytest.raises(ValueError, match="either epsilon_total"):
            OutlierCountsSpec(epsilon_total=1.5, **extra)
