"""Exact rounding and exact samplers as pure functions of a bit stream (no global state).

Part of :mod:`dpcore.noise` (the package docstring states the rules).  This
module holds what the samplers share: argument checks, the conservative
rounding of noise scales (issue 15: toward more noise), the exact Bernoulli
samplers (:func:`_bernoulli_from_bits`, Canonne-Kamath-Steinke
:func:`_bernoulli_exp_neg_from`) and the ``os.urandom`` bit and word sources.
Nothing here draws randomness by itself: every sampler takes a ``next_bit``
callable, supplied by :meth:`dpcore.noise.NoiseSource._bit_source`.
"""

from __future__ import annotations

import math
import numbers
import os
from fractions import Fraction
from typing import Callable

import numpy as np

_U64_MAX = (1 << 64) - 1


class NotForPublicationError(RuntimeError):
    """Raised when a release would be made with a non-publishable noise source.

    A :class:`NoiseSource` constructed with a ``seed`` is deterministic and
    therefore provides **no** privacy: anyone who knows the seed can subtract
    the noise.  Such a source exists for tests only; any attempt to publish
    with it raises this error.
    """


# ---------------------------------------------------------------------------
# Argument validation helpers
# ---------------------------------------------------------------------------


def _positive_finite(value, name: str) -> float:
    """Return ``value`` as a float after checking it is finite and > 0.

    Parameters
    ----------
    value : float, int or Fraction
        The number to check.
    name : str
        Argument name used in the error message.

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    ValueError
        If ``value`` is not a real number, is not finite, or is not > 0.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    f = float(value)
    if not math.isfinite(f) or not f > 0:
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    return f


def _exact_fraction(value, name: str) -> Fraction:
    """Convert ``value`` to an exact :class:`fractions.Fraction`.

    Parameters
    ----------
    value : Fraction, int or float
        A float is converted exactly (``Fraction(1e-21)`` is the exact binary
        value of the double nearest to 1e-21, not zero).
    name : str
        Argument name used in error messages.

    Returns
    -------
    Fraction
        The exact rational value.

    Raises
    ------
    ValueError
        If ``value`` is not a rational/float number or is NaN/infinite.
    """
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, numbers.Rational):
        return Fraction(value.numerator, value.denominator)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return Fraction(f)
    raise ValueError(
        f"{name} must be a fractions.Fraction, int or float, got {type(value).__name__}"
    )


# ---------------------------------------------------------------------------
# Conservative rounding of noise scales (issue 15: toward more noise)
# ---------------------------------------------------------------------------

#: Relative margin added by :func:`upper_float` / removed by :func:`lower_float`.
#: A value computed in IEEE double through ``n`` elementary operations, each
#: with relative error at most ``4 u`` (``u = 2**-53``: ``+ - * /`` and ``sqrt``
#: are correctly rounded, ``u``; the C library's and numpy's ``log``/``exp``
#: are within a few ulp), has relative error at most ``(1 + 4u)**n - 1``,
#: below ``8 n u`` for ``n <= 2**48``.  ``2**-40 = 1024 * 8u`` therefore covers
#: every formula with up to 1024 operations (the noise scales here use fewer
#: than 20).
FLOAT_EVAL_MARGIN = 2.0**-40


def _exact_positive(value, name: str) -> Fraction:
    """``value`` as an exact positive Fraction (a float is converted exactly)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    if isinstance(value, numbers.Rational):
        q = Fraction(value.numerator, value.denominator)
    else:
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
        q = Fraction(f)
    if q <= 0:
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    return q


def round_up(value) -> float:
    """The smallest float ``>=`` the exact rational value of ``value``.

    Parameters
    ----------
    value : Fraction, int or float
        ``> 0``; a float is returned unchanged (it is exact).

    Returns
    -------
    float
        ``s`` with ``Fraction(s) >= value`` and no float in ``[value, s)``.

    Raises
    ------
    ValueError
        If ``value`` is not a positive finite real number, or its rounded-up
        value overflows the float range.
    """
    q = _exact_positive(value, "value")
    s = float(q)  # Fraction.__float__ rounds to nearest
    if Fraction(s) < q:
        s = math.nextafter(s, math.inf)
    if not math.isfinite(s):
        raise ValueError("scale too large for a float")
    return s


def round_down(value) -> float:
    """The largest float ``<=`` the exact rational value of ``value`` (``> 0``)."""
    q = _exact_positive(value, "value")
    s = float(q)
    if Fraction(s) > q:
        s = math.nextafter(s, 0.0)
    return s


def conservative_scale(numerator, denominator) -> float:
    """A noise scale ``numerator / denominator`` rounded toward more noise.

    Parameters
    ----------
    numerator, denominator : Fraction, int or float
        Positive, finite (typically a sensitivity and an epsilon).  Floats
        are taken at their exact binary values.

    Returns
    -------
    float
        The smallest float ``>=`` the exact rational ``numerator /
        denominator`` (``Fraction`` arithmetic, then :func:`round_up`): the
        mechanism never uses less noise than its privacy analysis assumes.

    Raises
    ------
    ValueError
        If an argument is not a positive finite real number.

    Examples
    --------
    >>> from fractions import Fraction
    >>> Fraction(conservative_scale(1, 3)) >= Fraction(1, 3)
    True
    """
    return round_up(_readings(numerator, "numerator", max) / _readings(denominator, "denominator", min))


def _readings(value, name: str, pick) -> Fraction:
    """``pick`` (``max`` or ``min``) of a float's two exact readings: its binary value and its
    decimal text (the ledger charges ``dpcore.budget.amounts.exact(x) = Fraction(repr(x))``). Taking the
    larger numerator and the smaller denominator makes a scale conservative under either reading.
    Non-floats have one reading."""
    q = _exact_positive(value, name)
    if isinstance(value, float):
        q = pick(q, Fraction(repr(value)))
    return q


def upper_float(value: float, margin: float = FLOAT_EVAL_MARGIN) -> float:
    """An upper bound on the exact value of a float-evaluated formula.

    For scales computed through ``sqrt``/``log``/``exp`` (no exact rational
    form), evaluate the formula in floating point and pass the result here.

    Parameters
    ----------
    value : float
        The float evaluation of a positive formula (at most ~1000 elementary
        operations, each within 4 ulp: :data:`FLOAT_EVAL_MARGIN`).
    margin : float
        Relative margin, default :data:`FLOAT_EVAL_MARGIN` (``2**-40``).

    Returns
    -------
    float
        ``>= value * (1 + margin)`` (the product is rounded, then one ulp
        is added), hence ``>=`` the exact value of the formula.
    """
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"value must be a positive finite float, got {value!r}")
    out = math.nextafter(v * (1.0 + margin), math.inf)
    if not math.isfinite(out):
        raise ValueError("scale too large for a float")
    return out


def lower_float(value: float, margin: float = FLOAT_EVAL_MARGIN) -> float:
    """A lower bound on the exact value of a float-evaluated positive formula
    (``<= value * (1 - margin)``; the counterpart of :func:`upper_float`)."""
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"value must be a positive finite float, got {value!r}")
    return math.nextafter(v * (1.0 - margin), 0.0)


# ---------------------------------------------------------------------------
# Exact samplers as pure functions of a randomness source
# ---------------------------------------------------------------------------


def _bernoulli_from_bits(p: Fraction, next_bit: Callable[[], int]) -> bool:
    """Sample ``Bernoulli(p)`` exactly from a stream of fair random bits.

    The bits ``b1 b2 b3 ...`` returned by ``next_bit`` are read as the binary
    expansion of a uniform ``U = 0.b1 b2 b3 ...`` in [0, 1).  The function
    returns ``U < p``, generating bits lazily and comparing them one at a time
    with the binary expansion of ``p``; it stops at the first position where
    they differ.  In expectation 2 bits are consumed.

    Parameters
    ----------
    p : Fraction
        The success probability, ``0 <= p <= 1``, as an exact rational.
    next_bit : callable
        ``next_bit()`` returns the next fair random bit (0 or 1).

    Returns
    -------
    bool
        ``True`` with probability exactly ``p``.

    Notes
    -----
    Decisions are final: when it returns ``True`` every continuation of the
    consumed bits gives ``U < p``; when it returns ``False`` every continuation
    gives ``U >= p`` (for a dyadic ``p = a / 2**L`` once the expansion of ``p``
    has ended the prefix equals ``p`` and ``U >= p`` is already certain, so at
    most ``L`` bits are consumed).  No floating point is involved, so
    probabilities far below ``2**-53`` are honoured exactly.
    """
    num, den = p.numerator, p.denominator
    if num <= 0:
        return False
    if num >= den:
        return True
    r = num  # remainder: p's still-unread expansion equals r / den
    while True:
        if r == 0:
            # p's expansion has terminated: U's prefix equals p's, so U >= p.
            return False
        r *= 2
        if r >= den:
            p_bit = 1
            r -= den
        else:
            p_bit = 0
        b = next_bit()
        if b != p_bit:
            # First differing bit decides: U < p iff U's bit is 0 there.
            return b < p_bit


def _bernoulli_exp_neg_from(x: Fraction, bern: Callable[[Fraction], bool]) -> bool:
    """Sample ``Bernoulli(exp(-x))`` exactly for rational ``x >= 0``.

    Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
    Privacy", Algorithm 1.  Only exact Bernoulli trials of rational parameters
    are used, so the result is exact even when ``exp(-x)`` is astronomically
    small (e.g. ``exp(-50) ~ 2e-22``).

    Parameters
    ----------
    x : Fraction
        Non-negative rational exponent.
    bern : callable
        ``bern(q)`` returns an exact ``Bernoulli(q)`` draw for rational ``q``
        in [0, 1].

    Returns
    -------
    bool
        ``True`` with probability exactly ``exp(-x)``.

    Notes
    -----
    For ``0 <= x <= 1``: draw ``A_k ~ Bernoulli(x / k)`` for ``k = 1, 2, ...``
    until the first ``A_k = 0``; return whether that ``k`` is odd.  The first
    zero is at ``k`` with probability ``x^(k-1)/(k-1)! - x^k/k!``, so
    ``P(True) = sum_{j>=0} (-x)^j / j! = exp(-x)``.  For ``x > 1``: draw
    ``floor(x)`` independent ``Bernoulli(exp(-1))`` (stop at the first failure)
    and then one ``Bernoulli(exp(-(x - floor(x))))``.
    """
    if x <= 1:
        k = 1
        while bern(x / k):
            k += 1
        return k % 2 == 1
    whole = x.numerator // x.denominator
    one = Fraction(1)
    for _ in range(whole):
        if not _bernoulli_exp_neg_from(one, bern):
            return False
    return _bernoulli_exp_neg_from(x - whole, bern)


def _urandom_bit_source() -> Callable[[], int]:
    """Return a fresh ``next_bit`` callable reading from ``os.urandom``.

    Bits are fetched 64 at a time into a buffer that is local to the returned
    closure, so no random state is shared between calls, threads or forked
    worker processes.

    Returns
    -------
    callable
        ``next_bit()`` returning a fair bit from the OS CSPRNG.
    """
    buf = 0
    left = 0

    def next_bit() -> int:
        nonlocal buf, left
        if left == 0:
            buf = int.from_bytes(os.urandom(8), "little")
            left = 64
        b = buf & 1
        buf >>= 1
        left -= 1
        return b

    return next_bit


def _urandom_u64(n: int) -> np.ndarray:
    """Return ``n`` independent uniform 64-bit unsigned ints from ``os.urandom``.

    Parameters
    ----------
    n : int
        Number of values.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(n,)``.
    """
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()


def _urandom_below(r: int, n: int) -> np.ndarray:
    """Return ``n`` exactly uniform integers in ``[0, r)`` from ``os.urandom``.

    Rejection sampling on 64-bit words: a word ``u`` is accepted when
    ``u < r * q`` with ``q = (2**64 - 1) // r``; the accepted set has a size
    that is a multiple of ``r``, so ``u % r`` is exactly uniform.

    Parameters
    ----------
    r : int
        Range size, ``1 <= r <= 2**64 - 1``.
    n : int
        Number of values.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(n,)``.
    """
    return _fill_below(r, n, np.uint64, r * (_U64_MAX // r), spare=8)


def _fill_below(r: int, n: int, dtype, limit: int, spare: int) -> np.ndarray:
    """``n`` words of ``dtype`` from ``os.urandom``, kept when below ``limit`` (a multiple of ``r``), mod ``r``.

    The accepted set ``[0, limit)`` has a size that is a multiple of ``r``, so
    each kept ``u % r`` is exactly uniform on ``[0, r)``; each round reads
    ``need + need // 8 + spare`` words.
    """
    width = np.dtype(dtype).itemsize
    lim, r_w = dtype(limit), dtype(r)
    out = np.empty(n, dtype=dtype)
    filled = 0
    while filled < n:
        need = n - filled
        u = np.frombuffer(os.urandom(width * (need + need // 8 + spare)), dtype=dtype)
        u = u[u < lim][:need]
        out[filled : filled + u.size] = u % r_w
        filled += u.size
    return out


_NARROW_WORDS = ((np.uint8, 8), (np.uint16, 16), (np.uint32, 32))


def _urandom_below_narrow(r: int, n: int) -> np.ndarray:
    """Like :func:`_urandom_below`, reading the narrowest word that suits ``r``.

    The word is the first of 8, 16, 32 bits with ``r <= 2**bits / 16`` (64-bit
    words, i.e. :func:`_urandom_below`, otherwise).  A word ``u`` (uniform on
    ``[0, 2**bits)``) is accepted when ``u < r * (2**bits // r)``: the accepted
    set has a size that is a multiple of ``r``, so ``u % r`` is exactly
    uniform on ``[0, r)``; at least 15/16 of the words are accepted.

    Parameters
    ----------
    r : int
        Range size, ``1 <= r <= 2**64 - 1``.
    n : int
        Number of values.

    Returns
    -------
    numpy.ndarray
        Shape ``(n,)``, an unsigned integer dtype wide enough for ``r - 1``
        (``uint8`` .. ``uint64``).
    """
    for dtype, bits in _NARROW_WORDS:
        if r <= 1 << (bits - 4):
            break
    else:
        return _urandom_below(r, n)
    size = 1 << bits
    limit = r * (size // r)  # <= size; == size when r divides 2**bits (every word accepted)
    width = bits // 8
    if limit == size:
        u = np.frombuffer(os.urandom(width * n), dtype=dtype)
        return u % dtype(r)
    return _fill_below(r, n, dtype, limit, spare=16)
