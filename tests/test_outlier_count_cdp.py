"""Issue 16 part 2: the concentrated-DP smooth-sensitivity counts (Bun & Steinke 2019, Section 3):
``smooth_lln`` (Laplace log-normal) and ``smooth_arsinh`` (arsinh-normal).

* (a) the interval arithmetic behind the exact sampler encloses the true values; the rounding driver gives
  exactly the distribution of ``round(F(U))`` (a case with a known pmf, with a rejection region);
* (b) the samplers: seeded draws match the pmfs (chi-square), production draws are publishable;
* (c) privacy audits: the Renyi divergences of the continuous distributions under the worst shift (``s``)
  and dilation (``e^{+-t}``) stay below ``alpha eps^2 / 2`` on a grid of orders (a too large ``s`` fails it);
  the released integers' hockey-stick divergence on every neighbouring pair of a tiny exhaustive universe
  (the mechanism's own ``q``, ``S(X)``) stays below the charged delta at the charged epsilon; the mechanism's
  ``S(X)`` is ``t``-smooth for these methods' ``t``;
* (d) the conversion (epsilon, delta) -> rho, the public parameters, the public half-width, ``auto`` and the
  spec / step wiring.
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from dpcore.mechanisms.outlier_count import OutlierCountMechanism, choose_method, public_global_sensitivity
from dpcore.mechanisms.smooth_cdp_params import SmoothCDPParameters, smooth_floor_unbounded
from dpcore.noise import NoiseSource
from dpcore.noise.interval import REJECT, UNDECIDED, Interval, round_exactly
from dpcore.noise.smooth_cdp import (
    ARSINH_SIGMA,
    arsinh_epsilon,
    arsinh_integer_from_bits,
    arsinh_integer_pmf,
    arsinh_parameters,
    arsinh_tail,
    lln_epsilon,
    lln_integer_from_bits,
    lln_integer_pmf,
    lln_parameters,
    lln_tail,
    zcdp_rho_for,
)
from dpcore.release.spec import OutlierCountsSpec
from test_outlier_count_neighbours import _datasets, _neighbours

EPS, DELTA = 0.5775, 1e-6
METHODS = ("smooth_lln", "smooth_arsinh")


def bits(seed: int):
    rng = np.random.default_rng(seed)
    return lambda: int(rng.integers(0, 2))


# --------------------------------------------------------------------------- (a) interval arithmetic

@pytest.mark.parametrize("seed", range(5))
def test_interval_operations_enclose_the_exact_values(seed):
    """Random boxes: every operation's enclosure contains the value at random interior points (80-digit check)."""
    rng = np.random.default_rng(seed)
    ctx = decimal.Context(prec=20)
    hi_ctx = decimal.Context(prec=80)
    for _ in range(40):
        a, b = sorted(rng.uniform(0.01, 3.0, 2))
        c, d = sorted(rng.uniform(-2.0, 2.0, 2))
        X = Interval(decimal.Decimal(repr(float(a))), decimal.Decimal(repr(float(b))), ctx)
        Y = Interval(decimal.Decimal(repr(float(c))), decimal.Decimal(repr(float(d))), ctx)
        ops = {
            "add": (X + Y, lambda x, y: hi_ctx.add(x, y)),
            "mul": (X * Y, lambda x, y: hi_ctx.multiply(x, y)),
            "sub": (X - Y, lambda x, y: hi_ctx.subtract(x, y)),
            "exp": (Y.exp(), lambda x, y: hi_ctx.exp(y)),
            "ln": (X.ln(), lambda x, y: hi_ctx.ln(x)),
            "sqrt": (X.sqrt(), lambda x, y: hi_ctx.sqrt(x)),
            "square": (Y.square(), lambda x, y: hi_ctx.multiply(y, y)),
            "recip": (X.reciprocal(), lambda x, y: hi_ctx.divide(1, x)),
            "sinh": (Y.sinh(), lambda x, y: (hi_ctx.exp(y) - hi_ctx.exp(-y)) / 2),
        }
        for _ in range(5):
            x = decimal.Decimal(repr(float(rng.uniform(a, b))))
            y = decimal.Decimal(repr(float(rng.uniform(c, d))))
            for name, (iv, f) in ops.items():
                v = f(x, y)
                assert iv.lo <= v <= iv.hi, (name, iv, v)
        for end in (X.lo, X.hi):  # endpoints too (the tightest case)
            assert X.ln().lo <= hi_ctx.ln(end) <= X.ln().hi


def test_rounding_driver_is_exact_on_a_known_distribution_with_rejection():
    """F(U) = 7 U accepted only when U < 0.9 (rejection): round(F) has P(k) = |[k-1/2, k+1/2) ∩ [0, 6.3)| / 6.3."""
    def evaluate(u):
        if u[0].lo >= Fraction(9, 10):
            return REJECT
        if u[0].hi >= Fraction(9, 10):
            return UNDECIDED
        return u[0] * 7

    nb = bits(3)
    draws = np.array([round_exactly(1, evaluate, nb) for _ in range(6000)])
    cells = np.arange(0, 7)
    lo = np.clip(cells - 0.5, 0, 6.3)
    hi = np.clip(cells + 0.5, 0, 6.3)
    p = (hi - lo) / 6.3
    obs = np.array([(draws == k).sum() for k in cells])
    assert obs.sum() == len(draws)
    assert stats.chisquare(obs, p * len(draws)).pvalue > 1e-3


def test_rounding_driver_refines_until_decided():
    """A value pinned near a half-integer still rounds right: 1/2 + 1e-30 U lies in cell 1 for every U > 0."""
    draws = {round_exactly(1, lambda u: Interval.point(Fraction(1, 2), u[0].ctx) + u[0] * Fraction(1, 10**30),
                           bits(s)) for s in range(20)}
    assert draws == {1}


# --------------------------------------------------------------------------- (b) samplers

@pytest.mark.parametrize("family", ["lln", "arsinh"])
@pytest.mark.parametrize("value,scale", [(0, 2.5), (17, 9.0)])
def test_seeded_draws_match_the_pmf(family, value, scale):
    sigma = 0.45 if family == "lln" else ARSINH_SIGMA
    sample = lln_integer_from_bits if family == "lln" else arsinh_integer_from_bits
    nb = bits(11)
    n = 2500
    draws = np.array([sample(Fraction(value), Fraction(scale), Fraction(sigma), nb) for _ in range(n)])
    lo, hi = value - int(6 * scale), value + int(6 * scale)
    pmf = (lln_integer_pmf(value, scale, lo, hi, sigma) if family == "lln"
           else arsinh_integer_pmf(value, scale, lo, hi, sigma))
    # bins: pool cells to expected counts >= 20, tails in the end bins
    exp_, obs_, acc_e, acc_o = [], [], 0.0, 0
    inside = (draws >= lo) & (draws <= hi)
    counts = np.bincount(draws[inside] - lo, minlength=hi - lo + 1)
    tail_p = 1.0 - pmf.sum()
    for p, o in zip(pmf, counts):
        acc_e += p * n
        acc_o += o
        if acc_e >= 20:
            exp_.append(acc_e), obs_.append(acc_o)
            acc_e, acc_o = 0.0, 0
    exp_[-1] += acc_e + tail_p * n
    obs_[-1] += acc_o + int((~inside).sum())
    assert stats.chisquare(obs_, exp_).pvalue > 1e-3


def test_production_draws_are_publishable_and_spread():
    n = NoiseSource()
    assert n.publishable
    xs = {n.smooth_cdp_integer("lln", 100, 5.0, 0.4) for _ in range(30)}
    ys = {n.smooth_cdp_integer("arsinh", 100, 5.0, ARSINH_SIGMA) for _ in range(30)}
    assert len(xs) > 5 and len(ys) > 5
    with pytest.raises(ValueError, match="family must be"):
        n.smooth_cdp_integer("cauchy", 1, 1.0, 1.0)
    with pytest.raises(ValueError, match="scale"):
        n.smooth_cdp_integer("lln", 1, 0.0, 1.0)


# --------------------------------------------------------------------------- (c) privacy audits

def _log_density(family: str, sigma: float, z: np.ndarray) -> np.ndarray:
    if family == "arsinh":
        w = np.arcsinh(sigma * z) / sigma
        return -0.5 * w * w - 0.5 * math.log(2 * math.pi) - 0.5 * np.log1p((sigma * z) ** 2)
    # Laplace log-normal: log E_Y[e^{-sigma Y - |z| e^{-sigma Y}}] - ln 2, a dense y grid centred on each peak
    az = np.abs(z)[:, None]
    ystar = np.zeros_like(az)
    for _ in range(40):  # Newton on g(y) = -sigma y - |z| e^{-sigma y} - y^2/2 (concave)
        e = np.exp(-sigma * ystar)
        g1 = -sigma + sigma * az * e - ystar
        g2 = -sigma * sigma * az * e - 1.0
        ystar = ystar - g1 / g2
    u = np.linspace(-14.0, 14.0, 401)[None, :]
    y = ystar + u
    lg = -sigma * y - az * np.exp(-sigma * y) - 0.5 * y * y - 0.5 * math.log(2 * math.pi)
    return special.logsumexp(lg, axis=1) + math.log(u[0, 1] - u[0, 0]) - math.log(2.0)


_V = np.linspace(-16.0, 16.0, 8001)  # sinh-spaced grid: |z| up to 4e6
_Z = np.sinh(_V)
_DZ = np.cosh(_V) * (_V[1] - _V[0])


def renyi_orders(family: str, sigma: float, shift: float, tau: float, orders) -> list[float]:
    """D_alpha(law(e^tau Z + shift) || law(Z)) for each alpha, by quadrature on a sinh-spaced grid (log domain)."""
    lp = _log_density(family, sigma, _Z)
    lq = _log_density(family, sigma, (_Z - shift) * math.exp(-tau)) - tau
    return [float(special.logsumexp(a * lq + (1 - a) * lp, b=_DZ) / (a - 1)) for a in orders]


ORDERS = (1.5, 2.0, 4.0, 8.0, 16.0)


@pytest.mark.parametrize("family", ["lln", "arsinh"])
@pytest.mark.parametrize("eps_cdp", [0.3, 1.0])
def test_renyi_divergence_at_the_worst_shift_and_dilation_is_within_the_cdp_bound(family, eps_cdp):
    """Bun & Steinke's constants: for t from the public rule's range and s = the largest shift scale,
    D_alpha <= alpha eps_cdp^2 / 2 in both directions for shifts +-s and dilations e^{+-t}."""
    for t in (0.02 * eps_cdp, 0.2 * eps_cdp):
        if family == "lln":
            sigma, s = lln_parameters(eps_cdp, t)
            assert lln_epsilon(s, t, sigma) <= eps_cdp
        else:
            if t * (t / ARSINH_SIGMA**2 + 1 / ARSINH_SIGMA + 2) >= eps_cdp**2:
                t = 0.02 * eps_cdp**2
            sigma, s = arsinh_parameters(eps_cdp, t)
            assert arsinh_epsilon(s, t, sigma) <= eps_cdp
        for shift in (s, -s):
            for tau in (t, -t, 0.0):
                for alpha, d in zip(ORDERS, renyi_orders(family, sigma, shift, tau, ORDERS)):
                    bound = alpha * eps_cdp**2 / 2
                    assert d <= bound * (1 + 1e-6), (family, t, alpha, shift, tau, d, bound)


@pytest.mark.parametrize("family", ["lln", "arsinh"])
def test_the_renyi_audit_fails_for_a_too_large_shift(family):
    """The audit can fail: three times the allowed shift scale breaks the bound at some order."""
    eps_cdp, t = 1.0, 0.01
    sigma, s = lln_parameters(eps_cdp, t) if family == "lln" else arsinh_parameters(eps_cdp, t)
    worst = max(d / (a * eps_cdp**2 / 2) for a, d in zip(ORDERS, renyi_orders(family, sigma, 3 * s, t, ORDERS)))
    assert worst > 1.0


def _hockey_stick_upper(p1, p2, eps, tail1) -> float:
    """sum max(0, P1 - e^eps P2) over the window, plus P1's mass outside it (an upper bound on delta(eps))."""
    return float(np.maximum(p1 - math.exp(eps) * p2, 0.0).sum() + tail1)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 2])
def test_exhaustive_neighbours_released_integers_within_the_charged_epsilon_delta(method, k):
    """Every replace / add / remove pair of the tiny 1-D universe, with the mechanism's own (q, S(X)): the
    released integers' delta(epsilon) at the charged epsilon is <= the charged delta (window: all but 1e-10,
    P's mass outside the window added), and the Renyi divergences of the integer pmfs are <= alpha rho."""
    m = OutlierCountMechanism(k, 0.1, EPS, DELTA, method=method)
    cost = m.privacy_map()
    p = m.cdp
    cache = {}

    def qc(X):
        if X not in cache:
            S, _, _, q = m._terms(np.array(X).reshape(-1, 1))
            cache[X] = (q, float(p.scale(S)))
        return cache[X]

    pairs = set()
    for X in _datasets():
        for _, Y in _neighbours(X):
            (q1, c1), (q2, c2) = qc(X), qc(Y)
            if (q1, c1) != (q2, c2):
                pairs.add((q1 - min(q1, q2), c1, q2 - min(q1, q2), c2))
    assert len(pairs) >= 3
    integer_pmf = (lambda v, c, lo, hi: lln_integer_pmf(v, c, lo, hi, p.sigma)) if p.family == "lln" else \
        (lambda v, c, lo, hi: arsinh_integer_pmf(v, c, lo, hi, p.sigma))
    pmfs = {}

    def pmf(v, c, lo, hi):
        """The pmf on [lo, hi], computed once: a pair and its reverse (both in ``pairs``) share their window."""
        key = (v, c, lo, hi)
        if key not in pmfs:
            pmfs[key] = integer_pmf(v, c, lo, hi)
        return pmfs[key]

    worst_delta, worst_renyi = 0.0, 0.0
    x = 60.0
    while p.tail(x) > 1e-10:  # the window holds all but 1e-10 of the mass (heavy arsinh tails)
        x *= 2
    for a, c1, b, c2 in sorted(pairs):
        W = int(x * max(c1, c2))
        lo, hi = min(a, b) - W, max(a, b) + W
        p1, p2 = pmf(a, c1, lo, hi), pmf(b, c2, lo, hi)
        tail1 = max(0.0, 1.0 - p1.sum())
        worst_delta = max(worst_delta, _hockey_stick_upper(p1, p2, float(cost.epsilon), tail1))
        keep = (p1 > 1e-300) & (p2 > 1e-300)
        for alpha in (2.0, 8.0):
            r = math.log(np.sum(p1[keep] ** alpha * p2[keep] ** (1 - alpha))) / (alpha - 1)
            worst_renyi = max(worst_renyi, r / (alpha * p.rho))
    assert worst_delta <= float(cost.delta), worst_delta
    assert worst_renyi <= 1.0, worst_renyi


@pytest.mark.parametrize("method", METHODS)
def test_smoothness_for_the_cdp_t(method):
    """S(X) <= e^t S(X') for t the method's public smoothness parameter, every neighbour of the 1-D universe."""
    for k in (1, 2, 3):
        m = OutlierCountMechanism(k, 0.1, 2.0, DELTA, method=method)
        t = m.cdp.t
        assert m.beta < t < m.beta + 1e-9
        memo = {}

        def S_of(X):
            if X not in memo:
                memo[X] = m._terms(np.array(X).reshape(-1, 1))
            return memo[X]

        n = 0
        for X in _datasets():
            S, _, _, q = S_of(X)
            assert S <= public_global_sensitivity(1, k)
            for _, Y in _neighbours(X):
                S2, _, _, q2 = S_of(Y)
                assert S <= math.exp(t) * S2
                assert abs(q - q2) <= min(S, S2) + 1e-12
                n += 1
        assert n > 300


# --------------------------------------------------------------------------- (d) parameters, accuracy, wiring

@pytest.mark.parametrize("eps,delta", [(0.5775, 1e-6), (0.1, 1e-5), (3.0, 1e-9), (Fraction(1, 2), Fraction(1, 10**6))])
def test_zcdp_conversion_is_the_largest_valid_rho(eps, delta):
    rho = zcdp_rho_for(eps, delta)
    e, d = decimal.Decimal(str(float(eps))), decimal.Decimal(str(float(delta)))
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        dr = decimal.Decimal(rho)
        assert dr + 2 * (dr * (1 / d).ln()).sqrt() <= e
        bigger = dr * decimal.Decimal(1 + 1e-9)
        assert bigger + 2 * (bigger * (1 / d).ln()).sqrt() > e - decimal.Decimal("1e-12")


def test_public_parameters_depend_on_epsilon_and_delta_only_and_respect_the_constraint():
    for method in METHODS:
        for e in (0.1, 0.5775, 2.0, 8.0):
            p = SmoothCDPParameters(method, e, DELTA)
            assert 0 < p.t and 0 < p.s
            assert p.cdp_epsilon_used() <= p.eps_cdp
            assert p == SmoothCDPParameters(method, e, DELTA)
    assert smooth_floor_unbounded(2.0) == 1.0
    assert abs(smooth_floor_unbounded(0.01) - 1 / (math.e * 0.01)) < 1.0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("d", [1, 2])
def test_published_half_width_is_public_and_covers_the_pmf_at_S_equal_G(method, d):
    m = OutlierCountMechanism(3, 0.1, EPS, DELTA, method=method)
    h = m.ci_half_width(d)
    assert h == m.ci_half_width(d)
    p = m.cdp
    G = public_global_sensitivity(d, 3)
    c = float(p.scale(G))
    pmf = (lln_integer_pmf(0, c, -h, h, p.sigma) if p.family == "lln" else arsinh_integer_pmf(0, c, -h, h, p.sigma))
    assert pmf.sum() >= 0.95 - 1e-6
    smaller = (lln_integer_pmf(0, c, -(h - 1), h - 1, p.sigma) if p.family == "lln"
               else arsinh_integer_pmf(0, c, -(h - 1), h - 1, p.sigma))
    assert smaller.sum() < 0.95 + 1e-6
    tail = lln_tail if p.family == "lln" else arsinh_tail
    assert tail(1.0, p.sigma) < 1.0


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.95, 3.0])
@pytest.mark.parametrize("k,d", [(1, 1), (3, 1), (3, 2), (10, 3)])
def test_auto_never_picks_them_their_public_interval_is_wider_than_laplace(eps, k, d):
    lap = OutlierCountMechanism(k, 0.1, eps, 0, method="global_laplace").ci_half_width(d)
    for method in METHODS:
        assert OutlierCountMechanism(k, 0.1, eps, DELTA, method=method).ci_half_width(d) > lap
    assert choose_method(eps, DELTA, k, d) in ("global_laplace", "global")


def test_release_is_an_integer_near_the_count_and_charges_epsilon_delta():
    rng = np.random.default_rng(0)
    X = rng.random((200, 1))
    for method in METHODS:
        m = OutlierCountMechanism(3, 0.01, 8.0, DELTA, method=method)
        out, q, sd = m.release_with_diagnostics(X, NoiseSource(seed=1))
        assert out == int(out) and m.integer_output
        assert m.privacy_map().epsilon == 8 and float(m.privacy_map().delta) == DELTA
        assert sd > 0 and abs(out - q) < 50 * sd


def test_validate_errors_and_spec_wiring():
    with pytest.raises(ValueError, match="delta must be a number with 0 < delta < 1 .*smooth_lln"):
        OutlierCountMechanism(3, 0.1, 0.5, 0, method="smooth_lln").validate()
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        OutlierCountMechanism(3, 0.1, -1, 1e-6, method="smooth_arsinh").validate()
    with pytest.raises(ValueError, match="cdp is defined"):
        OutlierCountMechanism(3, 0.1, 0.5, 0, method="global_laplace").cdp
    OutlierCountMechanism(3, 0.1, 5.0, 1e-6, method="smooth_lln").validate()  # epsilon above 1 is fine
    cfg = OutlierCountsSpec(method="smooth_arsinh", epsilon_count=2.0, delta_count=1e-7)
    m = OutlierCountMechanism.for_dimension(1, 3, 0.1, 2.0, 1e-7, method=cfg.method)
    assert m.delta == 1e-7 and float(m.privacy_map().delta) == 1e-7


def test_step_describes_the_method_with_public_figures_only():
    from dpcore.steps.outlier_counts import _describe_count

    for method, name in (("smooth_lln", "Laplace log-normal"), ("smooth_arsinh", "arsinh-normal")):
        text = _describe_count(OutlierCountMechanism(3, 0.05, EPS, DELTA, method=method), 1)
        assert name in text and "rho = " in text and "G = 7" in text and "scale is not published" in text
