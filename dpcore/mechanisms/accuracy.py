"""Accuracy statements for released numbers (issue 16, part 1).

Every released number carries a statement of how wrong it may be. For
additive noise the statement is the half-width ``t`` of a ``(1 - alpha)``
interval computed from the **exact** noise distribution: ``P(|noise| > t) <=
alpha``, so ``[released - t, released + t]`` covers the true value with
probability at least ``1 - alpha`` (over the mechanism's randomness).
Clamping a released count at 0 keeps the statement valid (the truth is
``>= 0``, so clamping never moves the value away from it).

An accuracy statement is itself published, so it must be a function of
**public** parameters only (spec values, public bounds): a statement derived
from a data-dependent noise scale (smooth sensitivity) would publish a
function of the data. Every function here takes public parameters only.

Functions
---------
:func:`discrete_laplace_half_width`
    Exact, for the discrete Laplace (geometric) noise of scale ``s`` of
    :meth:`dpcore.noise.NoiseSource.discrete_laplace`:
    ``P(|Z| > t) = 2 e^{-(t+1)/s} / (1 + e^{-1/s})`` in 50-digit decimal
    arithmetic (the one implementation; :mod:`dpcore.mechanisms.outlier_count`
    uses it too).
:func:`discrete_laplace_difference_half_width`
    Exact (numerical convolution with the tail mass added), for the
    difference of two independent discrete Laplace draws (a count derived as
    the difference of two noisy counts).
:func:`gaussian_half_width`
    Exact, ``sigma * z_{1 - alpha/2}``, rounded up.
:func:`student_t2_half_width`
    Exact (rational arithmetic), for the integer Student's T (nu = 2) noise of
    :meth:`dpcore.noise.NoiseSource.student_t_integer`.

Every function takes ``alpha`` (significance, ``1 - level``).
:func:`interval_text`
    ``"1,204 (95%: 1,167 to 1,241)"`` for reports: the interval clipped to
    what is possible (a count is ``>= 0``; a public upper bound where one
    exists), saying so when the noise is larger than the count.
"""
from __future__ import annotations

import decimal
import math
import numbers
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpcore.noise import upper_float
from dpcore.noise.core import _exact_positive
from dpcore.noise.student_t import student_t2_quantile_sq
from .normal_quantile import ndtri  # scipy's ndtri, same doubles, without importing scipy (issue 32)

__all__ = [
    "Accuracy",
    "check_alpha",
    "exact_alpha",
    "discrete_laplace_tail",
    "discrete_laplace_half_width",
    "discrete_laplace_difference_tail",
    "discrete_laplace_difference_half_width",
    "gaussian_half_width",
    "student_t2_half_width",
    "interval_text",
]

#: Default significance: 95% intervals.
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Accuracy:
    """A public accuracy statement for a released number (or every number of a table column).

    Attributes
    ----------
    bound : float or None
        ``kind == "interval"`` or ``"measurement"``: the half-width ``t`` with
        ``P(|released - true| > t) <= alpha``; ``"error_probability"``: the
        largest probability that a released answer is wrong;
        ``"utility"``: the largest shortfall of the released choice's utility
        below the best candidate's, with probability ``>= level``.
    level : float
        ``1 - alpha`` (1 for a worst-case error probability).
    kind : str
        ``"interval"``: from the exact noise distribution (valid after
        clamping at 0); ``"error_probability"``: the largest probability that
        a released bit is wrong; ``"utility"``: a public utility guarantee
        (exponential mechanism); ``"measurement"``: the interval of each
        noisy measurement before consistency post-processing (see
        ``statement``); ``"empirical"``: an estimate from a simulation that
        uses only the release and public parameters (a parametric bootstrap),
        not a guarantee; ``"none"``: no figure (``bound`` None, the statement
        says why).
    statement : str
        Plain words, for the report and the manifest.
    """

    bound: float
    level: float
    kind: str
    statement: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the manifest."""
        return asdict(self)


def check_alpha(alpha) -> float:
    """``alpha`` as a float in (0, 1), or a ValueError naming the parameter."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < float(alpha) < 1:
        raise ValueError(f"accuracy alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


#: Decimal digits of the exact-pmf evaluations of the discrete Laplace tail.
DECIMAL_DIGITS = 50


def exact_alpha(alpha) -> Fraction:
    """``alpha`` as an exact rational in (0, 1): a ``Fraction`` as is, a float through its decimal text.

    Reading a float through ``repr`` makes ``0.05`` exactly ``1/20`` (what the
    spec says), and ``1 - Fraction("0.95")`` gives the same value for a level.

    Raises
    ------
    ValueError
        Naming ``alpha`` when it is not a number in (0, 1).
    """
    check_alpha(alpha)
    if isinstance(alpha, numbers.Rational):
        return Fraction(alpha.numerator, alpha.denominator)
    return Fraction(repr(float(alpha)))


def _decimal(q: Fraction) -> decimal.Decimal:
    return decimal.Decimal(q.numerator) / decimal.Decimal(q.denominator)


def _decimal_scale(scale) -> decimal.Decimal:
    """A positive finite scale as a Decimal (a float converts exactly; a Fraction to 50 digits)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (
            math.isfinite(float(scale)) and float(scale) > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if isinstance(scale, numbers.Rational) and not isinstance(scale, numbers.Integral):
        return _decimal(Fraction(scale.numerator, scale.denominator))
    return decimal.Decimal(float(scale))


def _dl_tail(s: decimal.Decimal, t: int) -> decimal.Decimal:
    return 2 * (-(decimal.Decimal(t) + 1) / s).exp() / (1 + (-1 / s).exp())


def discrete_laplace_tail(scale, t: int) -> float:
    """``P(|Z| > t)`` for ``Z`` discrete Laplace with scale ``s``: ``2 e^{-(t+1)/s} / (1 + e^{-1/s})``.

    Parameters
    ----------
    scale : float or Fraction
        ``s > 0`` (a float is taken at its exact binary value).
    t : int
        The threshold; ``t < 0`` gives 1.

    Returns
    -------
    float
        With ``a = e^{-1/s}`` the pmf is ``(1 - a) / (1 + a) a^|z|`` and
        ``P(Z > t) = a^{t+1} / (1 + a)``; evaluated with 50 significant digits,
        then rounded to a float.
    """
    if isinstance(t, bool) or not isinstance(t, numbers.Integral):
        raise ValueError(f"t must be an integer (got {t!r})")
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_DIGITS
        s = _decimal_scale(scale)
        return 1.0 if t < 0 else float(_dl_tail(s, int(t)))


def discrete_laplace_half_width(scale, alpha=DEFAULT_ALPHA) -> int:
    """Smallest integer ``t >= 0`` with ``P(|Z| > t) <= alpha`` (exact pmf of the discrete Laplace).

    Parameters
    ----------
    scale : float or Fraction
        The discrete Laplace scale actually used (public: sensitivity / epsilon, rounded up).
    alpha : float or Fraction
        Significance in (0, 1) (:func:`exact_alpha`: a float through its decimal text).

    Returns
    -------
    int
        The exact half-width: ``P(|Z| <= t) >= 1 - alpha`` and
        ``P(|Z| <= t - 1) < 1 - alpha``.  Compared with 50 significant digits
        (a tie closer than ``1e-45`` would be the only way to get it wrong).
    """
    a_exact = exact_alpha(alpha)
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_DIGITS
        a = _decimal(a_exact)
        s = _decimal_scale(scale)
        q = (-1 / s).exp()
        guess = s * (2 / (a * (1 + q))).ln() - 1  # solves 2 q^(t+1) / (1 + q) = alpha
        t = max(int(guess.to_integral_value(rounding=decimal.ROUND_CEILING)), 0)
        while t > 0 and _dl_tail(s, t - 1) <= a:
            t -= 1
        while _dl_tail(s, t) > a:
            t += 1
        return t


def student_t2_half_width(scale, alpha=DEFAULT_ALPHA) -> int:
    """Smallest integer ``h >= 0`` with ``P(|round(c Z)| <= h) >= 1 - alpha``, ``Z ~ T_2``, exactly.

    The accuracy of :meth:`dpcore.noise.NoiseSource.student_t_integer` around
    an integer centre ``f``: the release is ``K = floor(f + c Z + 1/2)``, so
    ``|K - f| <= h`` iff ``-h - 1/2 <= c Z < h + 1/2``, with probability
    ``y / sqrt(2 + y^2)``, ``y = (h + 1/2) / c`` (T_2 CDF,
    :mod:`dpcore.noise.student_t`).  That is ``>= 1 - alpha`` iff
    ``y^2 >= T^2 = 2 (1 - alpha)^2 / (1 - (1 - alpha)^2)``
    (:func:`dpcore.noise.student_t.student_t2_quantile_sq`), decided in exact
    rationals: the half-width is ``ceil(c T - 1/2)`` without any rounding error.
    It is non-decreasing in ``c``, so the figure at an upper bound of ``c`` is
    valid for every smaller scale.

    Parameters
    ----------
    scale : Fraction, int or float
        ``c > 0``, exact (a float at its binary value).
    alpha : float or Fraction
        Significance in (0, 1).

    Returns
    -------
    int
    """
    c = _exact_positive(scale, "scale")
    T2 = student_t2_quantile_sq(exact_alpha(alpha))
    bound = c * c * T2  # need (h + 1/2)^2 >= bound

    def ok(h: int) -> bool:
        return (h + Fraction(1, 2)) ** 2 >= bound

    h = max(0, math.ceil(math.sqrt(float(bound)) - 0.5))
    while h > 0 and ok(h - 1):
        h -= 1
    while not ok(h):
        h += 1
    return h


def discrete_laplace_difference_tail(scale) -> np.ndarray:
    """Upper bounds on ``P(|Z_1 - Z_2| > t)``, ``t = 0, 1, ...``, for two independent discrete Laplace draws.

    Computed by convolving the pmf on ``[-M, M]`` where each draw's tail
    beyond ``M`` has mass ``< 1e-15``; that truncated mass (and ``1e-15``) is
    added to every entry, so each entry is never too small.

    Returns
    -------
    numpy.ndarray
        Entry ``t`` bounds ``P(|D| > t)`` for ``0 <= t <= 2M``.
    """
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    M = int(math.ceil(s * 36)) + 1  # e^{-36} ~ 2e-16
    z = np.arange(-M, M + 1)
    q = math.exp(-1.0 / s)
    pmf = (1 - q) / (1 + q) * np.exp(-np.abs(z) / s)
    lost = 1.0 - float(pmf.sum())  # both tails of one draw beyond M
    diff = np.convolve(pmf, pmf)  # support [-2M, 2M]
    absz = np.abs(np.arange(-2 * M, 2 * M + 1))
    mass_at = np.bincount(absz, weights=diff, minlength=2 * M + 1)
    tail_beyond = mass_at[::-1].cumsum()[::-1] - mass_at  # P(|D| > t) within the truncation
    return tail_beyond + 2 * max(lost, 0.0) + 1e-15


def discrete_laplace_difference_half_width(scale: float, alpha: float = DEFAULT_ALPHA) -> int:
    """Smallest integer ``t`` with ``P(|Z_1 - Z_2| > t) <= alpha`` for two independent discrete Laplace draws.

    From :func:`discrete_laplace_difference_tail` (never too small).
    """
    a = check_alpha(alpha)
    bound = discrete_laplace_difference_tail(scale)
    ok = np.flatnonzero(bound * (1 + 1e-12) <= a)
    if not len(ok):
        raise ValueError("alpha too small for the numerical convolution")
    return int(ok[0])


def gaussian_half_width(sigma, alpha=DEFAULT_ALPHA) -> float:
    """An upper bound on ``sigma * z_{1 - alpha/2}`` (Gaussian noise ``N(0, sigma^2)``).

    Parameters
    ----------
    sigma : float
        Standard deviation ``> 0`` (the value the sampler uses).
    alpha : float or Fraction
        Significance in (0, 1).

    Returns
    -------
    float
        ``t`` with ``P(|N(0, sigma^2)| <= t) >= 1 - alpha``: the quantile
        (scipy's ``norm.isf``, i.e. ``-special.ndtri``, computed by :func:`dpcore.mechanisms.normal_quantile.ndtri`
        to the same doubles; relative error ~1e-15) and the product are each
        rounded up by :func:`dpcore.noise.upper_float` (relative ``2**-40``),
        so the stated half-width is never below the exact one.  Take its
        ``ceil`` for an integer statement.
    """
    a = check_alpha(alpha)
    sg = float(sigma) if isinstance(sigma, numbers.Real) and not isinstance(sigma, bool) else math.nan
    if not (math.isfinite(sg) and sg > 0):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    z = upper_float(float(-ndtri(a / 2)))  # scipy's norm.isf(q) is -ndtri(q), without importing scipy.stats
    return upper_float(z * sg)


def level_text(alpha: float) -> str:
    """``"95%"`` for ``alpha = 0.05``."""
    return f"{100 * (1 - check_alpha(alpha)):g}%"


#: What :func:`interval_text` appends when the interval reaches the count's lower limit 0.
NOISE_LARGER_TEXT = "the noise is larger than the count: 0 is within the interval"


def interval_text(value, half_width, alpha: float = DEFAULT_ALPHA, *, lower=0, upper=None) -> str:
    """A released value with its ``(1 - alpha)`` interval, clipped to what is possible (issue 32, section 4).

    Parameters
    ----------
    value : int or float
        The released (noisy, post-processed) value.
    half_width : int or float
        The public half-width ``t`` of the interval ``[value - t, value + t]``.
    alpha : float
        Significance (``1 - level``).
    lower : int or float or None
        Smallest possible true value (0 for a count; None when unbounded).
        Clipping changes no coverage: the truth is never below it.
    upper : int or float or None
        A public upper bound on the true value (e.g. a public population
        size), or None.

    Returns
    -------
    str
        ``"1,204 (95%: 1,167 to 1,241)"`` (integers with thousands
        separators, floats with two decimals); when ``value - t`` reaches
        ``lower == 0`` it adds ``"; the noise is larger than the count: 0 is
        within the interval"``, e.g. ``"86 (95%: 0 to 220; the noise ...)"``.
    """
    def fmt(x) -> str:
        return f"{int(x):,}" if float(x).is_integer() else f"{float(x):,.2f}"

    lo, hi = value - half_width, value + half_width
    clipped_low = lower is not None and lo <= lower
    if lower is not None:
        lo = max(lo, lower)
    if upper is not None:
        hi = min(hi, upper)
    note = f"; {NOISE_LARGER_TEXT}" if clipped_low and lower == 0 else ""
    return f"{fmt(value)} ({level_text(alpha)}: {fmt(lo)} to {fmt(hi)}{note})"
