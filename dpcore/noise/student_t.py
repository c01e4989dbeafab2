"""Exact integer-valued Student's T noise with nu = 2 degrees of freedom.

Used by the smooth-sensitivity Student's T mechanism of Bun & Steinke,
"Average-Case Averages: Private Algorithms for Smooth Sensitivity and Mean
Estimation" (NeurIPS 2019), Section 3 (:mod:`dpcore.mechanisms.outlier_count.methods`,
``method="smooth_student_t"``).  The release is the integer

    K = round(value + scale * Z),   Z ~ T_2,   round(y) = floor(y + 1/2),

i.e. ``K = k`` iff ``k - 1/2 <= value + scale Z < k + 1/2``.  Rounding to an
integer is post-processing of ``value + scale Z``, so it keeps the
mechanism's privacy guarantee, and it is what makes exact sampling possible.

Why nu = 2: its CDF is algebraic,

    F(x) = 1/2 + x / (2 sqrt(2 + x^2)),

(``d/dx`` of the right-hand side is ``(2 + x^2)^{-3/2}``, the T_2 density
``Gamma(3/2) / (sqrt(2 pi) Gamma(1)) (1 + x^2/2)^{-3/2}``), strictly
increasing from 0 to 1.  Hence for rational ``x`` and ``u``, ``F(x)`` against
``u`` is decided exactly in rational arithmetic (:func:`student_t2_cdf_compare`):
with ``w = 2u - 1``, ``F(x) > u`` iff ``h(x) = x / sqrt(2 + x^2) > w``; when
the signs of ``x`` and ``w`` differ the sign decides, and when they agree
``|h(x)| > |w|`` iff ``x^2 (1 - w^2) > 2 w^2`` (squares of non-negative
numbers, ``sqrt`` cleared).  No floating point touches a sampled value, so
Mironov's (2012) attack on floating-point samplers does not apply.

Sampler (:func:`student_t2_integer_from_bits`).  A uniform ``U = 0.b1 b2 ...``
is read lazily from fair bits, as the dyadic interval ``[lo, hi) = [a 2^-L,
(a + 1) 2^-L)`` of its first ``L`` bits.  ``K = k`` iff
``F(x_{k-1/2}) <= U < F(x_{k+1/2})`` with ``x_j = (j - value) / scale``
(inverse-CDF sampling; ``P(K = k) = F(x_{k+1/2}) - F(x_{k-1/2})`` exactly).
The sampler finds the smallest ``k`` with ``F(x_{k+1/2}) > lo`` (then
``F(x_{k-1/2}) <= lo <= U``) by exponential and binary search around a float
guess (the guess only saves comparisons; every decision is exact) and returns
it when ``hi <= F(x_{k+1/2})`` (then ``U < F(x_{k+1/2})`` for every
continuation of the bits); otherwise it reads more bits.  Each returned value
is therefore the cell of the uniform ``U`` that the bits define, so the output
has exactly the distribution above.  It stops with probability 1 (only a
``U`` on one of the countably many cell boundaries would not be decided); the
expected number of bits is about ``log2(scale) + O(1)`` beyond the first 48.
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction
from typing import Callable

from .core import _exact_fraction, _exact_positive, _readings

__all__ = [
    "student_t2_cdf_compare",
    "student_t2_integer_from_bits",
    "student_t2_integer_pmf",
    "student_t2_shift_scale",
    "student_t2_quantile_sq",
    "T2_SHIFT_CONSTANT",
]

#: ``(nu + 1) / (2 sqrt(nu))`` at ``nu = 2``: the Lipschitz constant of the T_2 log-density,
#: ``sup_z |d/dz (3/2) ln(1 + z^2/2)| = sup_z 3 z / (2 + z^2) = 3 / (2 sqrt 2)`` (at ``z = sqrt 2``).
T2_SHIFT_CONSTANT = 3 / (2 * math.sqrt(2))

#: Bits of the uniform read before the first decision (more are read 8 at a time as needed).
_FIRST_BITS = 48
_STEP_BITS = 8


def _sign(q) -> int:
    return (q > 0) - (q < 0)


def student_t2_cdf_compare(x: Fraction, u: Fraction) -> int:
    """The sign of ``F(x) - u`` for the T_2 CDF ``F``, decided exactly.

    Parameters
    ----------
    x : Fraction
        Any rational point.
    u : Fraction
        A rational in ``[0, 1]``.

    Returns
    -------
    int
        ``1`` if ``F(x) > u``, ``0`` if equal, ``-1`` if ``F(x) < u``.

    Notes
    -----
    ``F(x) = 1/2 + h(x) / 2`` with ``h(x) = x / sqrt(2 + x^2)`` in ``(-1, 1)``;
    compare ``h(x)`` with ``w = 2u - 1``.  Different signs: ``sign(x) -
    sign(w)`` decides (``h`` has the sign of ``x``).  Same non-zero sign:
    ``|h(x)| > |w|`` iff ``x^2 > w^2 (2 + x^2)`` iff ``x^2 (1 - w^2) > 2 w^2``.
    All in :class:`fractions.Fraction` arithmetic (module docstring).
    """
    w = 2 * u - 1
    sx, sw = _sign(x), _sign(w)
    if sx != sw:
        return _sign(sx - sw)
    if sx == 0:
        return 0
    x2, w2 = x * x, w * w
    return sx * _sign(x2 * (1 - w2) - 2 * w2)


def _quantile_guess(u: Fraction) -> float:
    """A float approximation of ``F^{-1}(u) = w sqrt(2 / (1 - w^2))``, ``w = 2u - 1`` (a search start only)."""
    w = float(2 * u - 1)
    one_minus = 1.0 - w * w
    if not one_minus > 0:
        return math.copysign(1e300, w)
    return w * math.sqrt(2.0 / one_minus)


def _first_true(pred: Callable[[int], bool], start: int) -> int:
    """Smallest integer ``k`` with ``pred(k)`` for a monotone ``pred`` (False ... False True ... True).

    Exponential search from ``start`` (``O(log |k - start|)`` calls), then binary search.
    """
    if pred(start):
        hi, step = start, 1
        while pred(hi - step):
            hi -= step
            step *= 2
        lo = hi - step
    else:
        lo, step = start, 1
        while not pred(lo + step):
            lo += step
            step *= 2
        hi = lo + step
    while hi - lo > 1:  # pred(lo) is False, pred(hi) is True
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def student_t2_integer_from_bits(value: Fraction, scale: Fraction, next_bit: Callable[[], int]) -> int:
    """Sample ``round(value + scale Z)``, ``Z ~ T_2``, exactly from fair bits.

    Parameters
    ----------
    value : Fraction
        The centre (for the mechanism: the exact count).
    scale : Fraction
        ``> 0``, exact (for the mechanism: ``S(X) / s`` as a ratio of the floats used).
    next_bit : callable
        ``next_bit()`` returns the next fair random bit.

    Returns
    -------
    int
        ``k`` with probability exactly ``F((k + 1/2 - value) / scale) -
        F((k - 1/2 - value) / scale)`` (module docstring: inverse-CDF sampling
        of a lazily read uniform, every comparison exact).
    """
    a, L = 0, 0

    def read(n: int) -> None:
        nonlocal a, L
        for _ in range(n):
            a = 2 * a + next_bit()
        L += n

    def x_of(k: int) -> Fraction:  # the upper edge of cell k in Z units
        return (k + Fraction(1, 2) - value) / scale

    read(_FIRST_BITS)
    while True:
        if a == 0:  # lo = 0: the cell is unbounded below, more bits are needed
            read(_STEP_BITS)
            continue
        lo = Fraction(a, 1 << L)
        hi = Fraction(a + 1, 1 << L)
        q = _quantile_guess(lo)
        g = value + scale * Fraction(q) if abs(q) < 1e300 else value
        k = _first_true(lambda j: student_t2_cdf_compare(x_of(j), lo) > 0, math.floor(g))
        if student_t2_cdf_compare(x_of(k), hi) >= 0:
            return int(k)
        read(_STEP_BITS)


def student_t2_shift_scale(epsilon, share=Fraction(1, 2)) -> float:
    """The largest float ``s`` with ``s (nu + 1) / (2 sqrt(nu)) <= share * epsilon`` at ``nu = 2``, exactly.

    Parameters
    ----------
    epsilon : float, int or Fraction
        ``> 0``: the mechanism's epsilon (a float is read at the smaller of
        its binary and decimal values, as the ledger may charge either).
    share : Fraction
        In ``(0, 1]``: the part of epsilon spent on the shift term.

    Returns
    -------
    float
        ``s`` with ``9 s^2 <= 8 (share epsilon)^2`` checked in exact rationals
        (``3 s / (2 sqrt 2) <= share epsilon``): rounded toward a smaller
        ``s``, i.e. more noise, never less.

    Raises
    ------
    ValueError
        If ``epsilon`` is not a positive finite number or ``share`` is outside ``(0, 1]``.
    """
    sh = _exact_fraction(share, "share")
    if not 0 < sh <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    e = _readings(epsilon, "epsilon", min) * sh
    s = float(e) * 2.0 * math.sqrt(2.0) / 3.0
    s = math.nextafter(s * (1.0 + 2.0**-40), math.inf)
    while 9 * Fraction(s) ** 2 > 8 * e * e:  # from above in steps of a few ulp ...
        s = math.nextafter(s * (1.0 - 2.0**-50), 0.0)
    while 9 * Fraction(math.nextafter(s, math.inf)) ** 2 <= 8 * e * e:  # ... then up to the largest one, ulp by ulp
        s = math.nextafter(s, math.inf)
    return s


def student_t2_quantile_sq(alpha) -> Fraction:
    """``T^2`` (exact rational) for the two-sided T_2 quantile: ``P(|Z| <= T) = 1 - alpha``.

    ``P(|Z| <= y) = 2 F(y) - 1 = y / sqrt(2 + y^2)``; setting it to ``c = 1 - alpha`` gives
    ``y^2 = 2 c^2 / (1 - c^2)`` (so ``T = c sqrt(2 / (1 - c^2))``; 4.3027 at ``alpha = 0.05``).

    Parameters
    ----------
    alpha : Fraction or float
        In ``(0, 1)``; a float is read through its decimal text.
    """
    a = alpha if isinstance(alpha, Fraction) else Fraction(repr(float(alpha)))
    if not 0 < a < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    c = 1 - a
    return 2 * c * c / (1 - c * c)


def _decimal(q: Fraction) -> decimal.Decimal:
    return decimal.Decimal(q.numerator) / decimal.Decimal(q.denominator)


def _lower_and_upper(x: Fraction) -> tuple[decimal.Decimal, decimal.Decimal]:
    """``(F(x), 1 - F(x))`` in the current decimal context, the smaller one without cancellation.

    ``1 - F(|x|) = F(-|x|) = 1 / (r (r + |x|))`` with ``r = sqrt(2 + x^2)``.
    """
    ax = _decimal(abs(x))
    r = (2 + ax * ax).sqrt()
    small = 1 / (r * (r + ax))
    return (small, 1 - small) if x < 0 else (1 - small, small)


def student_t2_integer_pmf(value, scale, k_min: int, k_max: int, digits: int = 60):
    """Exact-to-``digits`` pmf of :func:`student_t2_integer_from_bits` on ``k_min..k_max`` plus both tails.

    For audits and tests (a Python loop over the integers of the window, not over records).

    Parameters
    ----------
    value, scale : Fraction, int or float
        As for the sampler (floats taken at their exact values); ``scale > 0``.
    k_min, k_max : int
        The window, ``k_min <= k_max``.
    digits : int
        Decimal precision (default 60).

    Returns
    -------
    (list of decimal.Decimal, decimal.Decimal, decimal.Decimal)
        ``(pmf[k_min..k_max], P(K < k_min), P(K > k_max))``; each cell is the
        difference of two CDF values taken on the side where it is small
        (:func:`_lower_and_upper`), so far-tail cells keep full precision.
    """
    v = _exact_fraction(value, "value")
    c = _exact_positive(scale, "scale")
    if k_max < k_min:
        raise ValueError(f"k_max must be >= k_min, got {k_min}..{k_max}")
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        edges = [_lower_and_upper((k + Fraction(1, 2) - v) / c) for k in range(k_min - 1, k_max + 1)]
        pmf = []
        for (lo_F, lo_S), (hi_F, hi_S) in zip(edges[:-1], edges[1:]):
            pmf.append(lo_S - hi_S if lo_S < lo_F else hi_F - lo_F)  # edges are increasing in x
        return pmf, edges[0][0], edges[-1][1]
