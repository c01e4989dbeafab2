"""Concentrated-DP noise for smooth sensitivity: Laplace log-normal and arsinh-normal.

Source: Bun & Steinke, "Average-Case Averages: Private Algorithms for Smooth
Sensitivity and Mean Estimation" (NeurIPS 2019), Section 3 (Laplace
log-normal: Section 3.1 and its parameter choice in 3.1.1; arsinh-normal:
Section 3.3).  Their notion is ``(1/2) eps^2``-concentrated DP:
``D_alpha(M(x) || M(y)) <= alpha eps^2 / 2`` for every ``alpha > 1`` and
neighbours ``x ~ y``, i.e. ``rho``-zCDP with ``rho = eps^2 / 2``.

The mechanism
-------------
For an integer query ``f`` with a ``t``-smooth upper bound ``S`` on its local
sensitivity (``|f(x) - f(y)| <= S(x)`` and ``S(x) <= e^t S(y)`` for
neighbours), release

    K = round(f(x) + (S(x) / s) Z),   round(y) = floor(y + 1/2),

with ``Z`` from one of the distributions below.  It is ``(1/2) eps^2``-CDP
with

* **Laplace log-normal** ``LLN(sigma)``: ``Z = X e^{sigma Y}``, ``X`` standard
  Laplace (density ``e^{-|x|}/2``), ``Y ~ N(0, 1)`` independent:
  ``eps = t / sigma + e^{3 sigma^2 / 2} s``.  ``Var Z = 2 e^{2 sigma^2}``.
  Parameter choice (Section 3.1.1): for given ``eps`` and ``t``, ``sigma`` is
  the root in ``(t/eps, max(2t/eps, 1/2)]`` of ``5 (eps/t) sigma^3 - 5 sigma^2 - 1 = 0``
  and ``s = e^{-3 sigma^2/2} (eps - t / sigma)`` (minimises the variance).
* **Arsinh-normal** ``ArsinhN(sigma)``: ``Z = sinh(sigma Y) / sigma``,
  ``Y ~ N(0, 1)``: ``eps = (4 + 3 sigma^2) s / (6 sigma) + sqrt(t (t / sigma^2 + 1/sigma + 2))``;
  ``sigma = 2 / sqrt(3)`` minimises the shift coefficient ``(4 + 3 sigma^2)/(6 sigma)``
  (to ``2 / sqrt 3``).  ``P(|Z| > x) = 2 Q(arsinh(sigma x) / sigma)``, ``Q`` the
  normal upper tail; ``Var Z = (e^{2 sigma^2} - 1) / (2 sigma^2)``.

The constants are the paper's; this project's audits check them numerically
(``tests/test_outlier_count_cdp.py``: Renyi divergences of the shifted and
dilated distributions against ``alpha eps^2 / 2`` on grids of ``alpha``,
shifts ``<= s`` and dilations ``<= e^t``; the release's exact hockey-stick
divergence on neighbouring datasets against the delta charged).  Rounding is
post-processing.

From CDP to the ledger's (epsilon, delta)
-----------------------------------------
The ledger charges ``(epsilon, delta)``-DP (its composition is the plain sum;
BENCHMARKS.md "Composition accounting" records why zCDP accounting was not
adopted).  ``rho``-zCDP implies ``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP
(Bun & Steinke 2016, Proposition 1.3), so a count charged ``(epsilon, delta)``
runs at the largest ``rho`` with ``rho + 2 sqrt(rho ln(1/delta)) <= epsilon``,
``rho = (sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2``
(:func:`zcdp_rho_for`; evaluated in floating point, lowered, then checked with
upward-rounded arithmetic), and ``eps_cdp = sqrt(2 rho)``.

Sampling
--------
Exact, by :func:`dpcore.noise.interval.round_exactly`: ``Y`` from the
Marsaglia polar method on two lazy uniforms (accept ``0 < S = U^2 + V^2 < 1``,
``Y = U sqrt(-2 ln S / S)``), ``X = +-(-ln(1 - U_3))`` with the sign from a
fourth uniform, and the whole expression ``f + c Z`` enclosed in rigorous
decimal intervals until its rounding is decided (that module's "Validity
argument").  ``c = S(x) / s`` is used exactly (a ``Fraction``).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from .core import _exact_fraction, _exact_positive, _readings, lower_float, upper_float
from .interval import REJECT, UNDECIDED, Interval, round_exactly
from .student_t import _first_true
from dpcore.runtime.lazy_modules import lazy_module

special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

__all__ = [
    "ARSINH_SIGMA",
    "zcdp_rho_for",
    "cdp_epsilon_for",
    "lln_parameters",
    "lln_epsilon",
    "arsinh_parameters",
    "arsinh_epsilon",
    "lln_integer_from_bits",
    "arsinh_integer_from_bits",
    "lln_tail",
    "arsinh_tail",
    "lln_sd",
    "arsinh_sd",
    "rounded_half_width",
    "lln_integer_pmf",
    "arsinh_integer_pmf",
]

#: ``sigma`` of the arsinh-normal: ``2 / sqrt 3`` minimises ``(4 + 3 sigma^2) / (6 sigma)``.
ARSINH_SIGMA = 2.0 / math.sqrt(3.0)


# ---------------------------------------------------------------------------
# Privacy parameters (public: functions of epsilon, delta, t only)
# ---------------------------------------------------------------------------


def zcdp_rho_for(epsilon, delta) -> float:
    """The largest float ``rho`` (up to a ``2**-40`` relative margin) with ``rho + 2 sqrt(rho ln(1/delta)) <= epsilon``.

    Parameters
    ----------
    epsilon : float, int or Fraction
        ``> 0``: the epsilon the ledger charges (a float at the smaller of its binary and decimal readings).
    delta : float or Fraction
        In ``(0, 1)``: the delta the ledger charges.

    Returns
    -------
    float
        ``rho`` such that ``rho``-zCDP implies ``(epsilon, delta)``-DP (Bun &
        Steinke 2016, Proposition 1.3), verified with upward-rounded evaluation.

    Raises
    ------
    ValueError
        If ``epsilon <= 0`` or ``delta`` is not in ``(0, 1)``.
    """
    e = float(_readings(epsilon, "epsilon", min))
    d = float(_exact_positive(delta, "delta"))
    if not d < 1:
        raise ValueError(f"delta must be in (0, 1) for a concentrated-DP method (got {delta!r})")
    L = math.log(1.0 / d)
    rho = lower_float((math.sqrt(L + e) - math.sqrt(L)) ** 2)
    L_up = upper_float(L)
    while upper_float(rho + 2.0 * math.sqrt(upper_float(rho * L_up))) > e:
        rho = lower_float(rho)
    return rho


def cdp_epsilon_for(epsilon, delta) -> float:
    """``eps_cdp = sqrt(2 rho)`` (lowered) for the ``rho`` of :func:`zcdp_rho_for`."""
    return lower_float(math.sqrt(2.0 * zcdp_rho_for(epsilon, delta)))


def lln_epsilon(s: float, t: float, sigma: float) -> float:
    """Upper bound on ``t / sigma + e^{3 sigma^2 / 2} s`` (Laplace log-normal's CDP epsilon)."""
    return upper_float(upper_float(t / sigma) + upper_float(math.exp(1.5 * sigma * sigma) * s))


def arsinh_epsilon(s: float, t: float, sigma: float = ARSINH_SIGMA) -> float:
    """Upper bound on ``(4 + 3 sigma^2) s / (6 sigma) + sqrt(t (t / sigma^2 + 1/sigma + 2))``."""
    shift = upper_float((4.0 + 3.0 * sigma * sigma) * s / (6.0 * sigma))
    dil = upper_float(math.sqrt(upper_float(t * (t / (sigma * sigma) + 1.0 / sigma + 2.0))))
    return upper_float(shift + dil)


def _lln_sigma(eps: float, t: float) -> float:
    """Root of ``5 (eps/t) sigma^3 - 5 sigma^2 - 1`` in ``(t/eps, max(2t/eps, 1/2)]`` by bisection."""
    g = lambda x: 5.0 * (eps / t) * x ** 3 - 5.0 * x * x - 1.0  # noqa: E731
    lo, hi = t / eps, max(2.0 * t / eps, 0.5)
    while g(hi) < 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if g(mid) < 0:
            lo = mid
        else:
            hi = mid
    return hi


def lln_parameters(eps_cdp: float, t: float) -> tuple[float, float]:
    """``(sigma, s)`` of the Laplace log-normal for CDP epsilon ``eps_cdp`` and smoothness ``t`` (Section 3.1.1).

    ``s`` is lowered until :func:`lln_epsilon` (upward-rounded) is ``<= eps_cdp``.

    Raises
    ------
    ValueError
        If ``t <= 0`` or ``t >= eps_cdp`` leaves no room for the shift term.
    """
    if not (0 < t < eps_cdp):
        raise ValueError(f"the smoothness t must be in (0, eps_cdp = {eps_cdp}) (got {t})")
    sigma = _lln_sigma(eps_cdp, t)
    s = lower_float(math.exp(-1.5 * sigma * sigma) * (eps_cdp - t / sigma))
    while lln_epsilon(s, t, sigma) > eps_cdp:
        s = lower_float(s)
    return sigma, s


def arsinh_parameters(eps_cdp: float, t: float, sigma: float = ARSINH_SIGMA) -> tuple[float, float]:
    """``(sigma, s)`` of the arsinh-normal for CDP epsilon ``eps_cdp`` and smoothness ``t`` (Section 3.3).

    Raises
    ------
    ValueError
        If the dilation term ``sqrt(t (t/sigma^2 + 1/sigma + 2))`` already uses ``eps_cdp``.
    """
    dil = math.sqrt(t * (t / (sigma * sigma) + 1.0 / sigma + 2.0))
    if not (t > 0 and dil < eps_cdp):
        raise ValueError(f"the smoothness t = {t} leaves no room for the shift term at eps_cdp = {eps_cdp}")
    s = lower_float(6.0 * sigma / (4.0 + 3.0 * sigma * sigma) * (eps_cdp - dil))
    while arsinh_epsilon(s, t, sigma) > eps_cdp:
        s = lower_float(s)
    return sigma, s


def lln_sd(sigma: float) -> float:
    """Standard deviation ``sqrt(2) e^{sigma^2}`` of ``LLN(sigma)``."""
    return math.sqrt(2.0) * math.exp(sigma * sigma)


def arsinh_sd(sigma: float = ARSINH_SIGMA) -> float:
    """Standard deviation ``sqrt((e^{2 sigma^2} - 1) / (2 sigma^2))`` of ``sinh(sigma Y) / sigma``."""
    return math.sqrt(math.expm1(2.0 * sigma * sigma) / (2.0 * sigma * sigma))


# ---------------------------------------------------------------------------
# Exact samplers (interval refinement)
# ---------------------------------------------------------------------------


def _polar_normal(u1: Interval, u2: Interval):
    """Marsaglia's polar method on two uniforms: ``Y = U sqrt(-2 ln S / S)`` or REJECT / UNDECIDED."""
    U = u1 * 2 - 1
    V = u2 * 2 - 1
    S = U.square() + V.square()
    if S.lo >= 1:
        return REJECT
    if not (S.hi < 1 and S.lo > 0):
        return UNDECIDED
    return U * ((S.ln() * (-2)) / S).sqrt()


def _centre_and_scale(value, scale, ctx_interval: Interval) -> tuple[Interval, Interval]:
    ctx = ctx_interval.ctx
    return Interval.point(value, ctx), Interval.point(scale, ctx)


def lln_integer_from_bits(value: Fraction, scale: Fraction, sigma: Fraction,
                          next_bit: Callable[[], int]) -> int:
    """Exactly ``round(value + scale * X e^{sigma Y})`` (Laplace log-normal), from fair bits.

    Parameters
    ----------
    value, scale, sigma : Fraction
        Exact centre, scale ``c > 0`` and log-normal ``sigma > 0``.
    next_bit : callable
        Fair bits.

    Returns
    -------
    int
    """
    def evaluate(u: Sequence[Interval]):
        y = _polar_normal(u[0], u[1])
        if y is REJECT or y is UNDECIDED:
            return y
        e = (1 - u[2]).ln() * (-1)  # Exp(1) by inversion
        if u[3].hi <= Fraction(1, 2):
            x = -e
        elif u[3].lo >= Fraction(1, 2):
            x = e
        else:
            return UNDECIDED
        f, c = _centre_and_scale(value, scale, y)
        return f + c * x * (y * sigma).exp()

    return round_exactly(4, evaluate, next_bit)


def arsinh_integer_from_bits(value: Fraction, scale: Fraction, sigma: Fraction,
                             next_bit: Callable[[], int]) -> int:
    """Exactly ``round(value + scale * sinh(sigma Y) / sigma)`` (arsinh-normal), from fair bits."""
    def evaluate(u: Sequence[Interval]):
        y = _polar_normal(u[0], u[1])
        if y is REJECT or y is UNDECIDED:
            return y
        f, c = _centre_and_scale(value, scale, y)
        return f + c * (y * sigma).sinh() * Interval.point(1 / Fraction(sigma), y.ctx)

    return round_exactly(2, evaluate, next_bit)


# ---------------------------------------------------------------------------
# Distribution functions (accuracy statements and audits; float / quadrature)
# ---------------------------------------------------------------------------


def arsinh_tail(x: float, sigma: float = ARSINH_SIGMA) -> float:
    """``P(|Z| > x) = 2 Q(arsinh(sigma x) / sigma)``, ``Z = sinh(sigma Y)/sigma`` (closed form)."""
    if x <= 0:
        return 1.0
    return float(special.erfc(math.asinh(sigma * x) / sigma / math.sqrt(2.0)))


def lln_tail(x: float, sigma: float) -> float:
    """``P(|Z| > x) = E_Y[exp(-x e^{-sigma Y})]``, ``Z = X e^{sigma Y}`` (one-dimensional quadrature).

    Numerical (``scipy.integrate.quad`` over the normal density, absolute error
    ``< 1e-12`` requested); the accuracy statements built on it add a margin
    (:func:`rounded_half_width`).
    """
    if x <= 0:
        return 1.0
    f = lambda y: math.exp(-x * math.exp(-sigma * y) - 0.5 * y * y) / math.sqrt(2.0 * math.pi)  # noqa: E731
    from scipy import integrate  # on first use (a slow import that commands drawing no noise skip)

    val, _ = integrate.quad(f, -40.0, 40.0, epsabs=1e-13, epsrel=1e-12, limit=400,
                            points=[math.log(max(x, 1e-300)) / sigma] if sigma > 0 else None)
    return min(1.0, max(0.0, val))


#: Margin added to a numerically computed tail before it is compared with alpha (accuracy statements only).
TAIL_MARGIN = 1e-9


def rounded_half_width(tail: Callable[[float], float], scale: float, alpha: float) -> int:
    """Smallest integer ``h >= 0`` with ``P(|round(c Z)| > h) <= alpha`` from a tail function of ``Z``.

    ``|round(c Z)| <= h`` iff ``-h - 1/2 <= c Z < h + 1/2``, so
    ``P(|round(c Z)| > h) <= P(|Z| >= (h + 1/2) / c) = tail((h + 1/2) / c)``
    (continuous ``Z``); the tail is compared with ``alpha - TAIL_MARGIN``.
    Non-decreasing in ``c``: the figure at an upper bound of ``c`` covers every smaller scale.
    """
    c = float(scale)
    a = float(alpha) - TAIL_MARGIN
    return max(0, _first_true(lambda h: tail((h + 0.5) / c) <= a, 0))


def _cell_edges(value: float, scale: float, k_min: int, k_max: int) -> np.ndarray:
    return (np.arange(k_min, k_max + 2, dtype=np.float64) - 0.5 - float(value)) / float(scale)


def arsinh_integer_pmf(value: float, scale: float, k_min: int, k_max: int,
                       sigma: float = ARSINH_SIGMA) -> np.ndarray:
    """``P(K = k)`` for ``k = k_min..k_max``, ``K = round(value + scale Z)``, from the closed-form CDF.

    ``P(Z <= z) = Phi(arsinh(sigma z) / sigma)``; differences of ``log_ndtr``
    values in float64 (relative accuracy about ``1e-13`` away from the far
    tails).  For audits and accuracy statements, not for sampling.
    """
    edges = _cell_edges(value, scale, k_min, k_max)
    w = np.arcsinh(sigma * edges) / sigma
    cdf_hi = special.ndtr(w[1:])
    cdf_lo = special.ndtr(w[:-1])
    # upper tail: use survival functions for accuracy when both edges are positive
    sf = special.ndtr(-w)
    pos = w[:-1] > 0
    out = np.where(pos, sf[:-1] - sf[1:], cdf_hi - cdf_lo)
    return np.maximum(out, 0.0)


def lln_integer_pmf(value: float, scale: float, k_min: int, k_max: int, sigma: float,
                    nodes: int = 240) -> np.ndarray:
    """``P(K = k)`` for ``k = k_min..k_max``, ``K = round(value + scale X e^{sigma Y})``, by Gauss-Hermite quadrature.

    Conditional on ``Y = y`` the cell ``[a, b)`` of ``Z`` is the cell
    ``[a e^{-sigma y}, b e^{-sigma y})`` of the standard Laplace ``X``, whose
    CDF is closed form; the expectation over ``Y ~ N(0, 1)`` uses ``nodes``
    probabilists' Gauss-Hermite nodes, vectorised over cells.  Numerical
    (about ``1e-10`` absolute); for audits and benchmarks only.
    """
    edges = _cell_edges(value, scale, k_min, k_max)
    y, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / math.sqrt(2.0 * math.pi)
    m = np.exp(-sigma * y)[None, :]
    a = edges[:-1, None] * m
    b = edges[1:, None] * m
    pos = a >= 0
    neg = b <= 0
    with np.errstate(over="ignore", invalid="ignore"):  # the branch not taken may overflow
        mass = np.where(pos, 0.5 * (np.exp(-a) - np.exp(-b)),
                        np.where(neg, 0.5 * (np.exp(b) - np.exp(a)),
                                 1.0 - 0.5 * np.exp(np.minimum(a, 0)) - 0.5 * np.exp(-np.maximum(b, 0))))
    return np.maximum(mass @ w, 0.0)
