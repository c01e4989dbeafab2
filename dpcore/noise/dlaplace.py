"""Vectorised exact discrete Laplace sampler (Canonne, Kamath & Steinke 2020, Algorithms 1 and 2).

Part of :mod:`dpcore.noise` (the package docstring states the rules).  Used by
:meth:`dpcore.noise.NoiseSource.discrete_laplace` in production mode.  It draws
``n`` independent values of ``Z`` with ``P(Z = z) ∝ exp(-|z| s / t)`` on the
integers for a rational scale ``t / s`` (positive integers ``t``, ``s``), all
``n`` at once with numpy index arrays, using integer arithmetic only and
randomness from the OS CSPRNG.

The algorithm (CKS 2020, Algorithm 2, scale ``t / s``), run for every draw
------------------------------------------------------------------------
1. ``U`` uniform on ``{0, ..., t - 1}``; ``D ~ Bernoulli(exp(-U / t))``; if
   ``D = 0``, restart at step 1.
2. ``V = 0``; while ``Bernoulli(exp(-1))`` succeeds, ``V += 1``.
3. ``X = U + t V``; ``Y = floor(X / s)``.
4. ``B`` a fair bit; if ``B = 1`` and ``Y = 0``, restart at step 1; else
   ``Z = (1 - 2B) Y``.

One pass of steps 1-4 (:func:`_round`) runs for all still-unfinished draws
at once; each loop inside it (the ``k`` loop of Algorithm 1 below, the ``V``
loop) works on the index array of the draws still active in it, and the
outer loop (:func:`cks_discrete_laplace`) re-runs only the draws that
restarted, with fresh randomness.

``Bernoulli(exp(-g))`` for rational ``g = a / b`` in ``[0, 1]`` is CKS
Algorithm 1: ``A_k ~ Bernoulli(a / (b k))`` for ``k = 1, 2, ...`` until the
first ``A_k = 0``; the result is whether that ``k`` is odd (``P(first zero at
k) = g^(k-1)/(k-1)! - g^k/k!``, so ``P(odd) = sum_j (-g)^j / j! = exp(-g)``).
Step 1 uses ``g = U / t``, step 2 uses ``g = 1``.  Every Bernoulli trial is
``Bernoulli(a / b)`` with integers ``0 <= a <= b`` and is drawn as
``W < a`` with ``W`` exactly uniform on ``{0, ..., b - 1}``
(:func:`dpcore.noise.core._urandom_below_narrow`: rejection on 8-, 16-, 32-
or 64-bit words from ``os.urandom``, the narrowest with ``b <= 2**bits / 16``;
the accepted set is a multiple of ``b``), so ``P = a / b`` exactly.  The sign
``B`` is one bit of an ``os.urandom`` byte.

Why the output is exact
-----------------------
* Conditioned on acceptance in step 1, ``P(U = u) ∝ exp(-u / t)``.  Step 2
  gives ``P(V = v) = (1 - e^-1) e^-v``.  So ``P(X = x) ∝ exp(-x / t)`` for
  ``x >= 0`` (``x = u + t v`` uniquely), i.e. ``X`` is geometric; then
  ``P(Y = y) = sum_{x = ys}^{ys + s - 1} P(X = x) ∝ exp(-y s / t)``.  With the
  sign ``B`` and the rejection of ``(B = 1, Y = 0)`` (so that 0 is not counted
  twice), ``P(Z = z) ∝ exp(-|z| s / t)``: the discrete Laplace with scale
  ``t / s``, i.e. ``P(Z = z) = (1 - e^{-s/t}) / (1 + e^{-s/t}) e^{-|z| s/t}``.
  (CKS 2020, Algorithm 2 and its analysis.)
* Vectorisation does not change this: position ``i`` of every array is its
  own copy of the algorithm, consuming its own fresh uniform values (every
  call draws independent values, one per active draw); a loop iteration works
  on the index array of the still-active draws and a restarted draw is re-run
  with fresh values, as the sequential algorithm would.  The draws are
  therefore independent and each has the law above; no floating-point number
  is used anywhere.  (``tests/test_noise_vectorised.py`` derives the law of
  :func:`_round` from the code's own control flow as an exact power series and
  compares it with the closed form coefficient by coefficient.)
* Saturation (see below) only clips ``|Z|`` where the clipped value gives the
  same saturated sum, so ``clip(value + Z)`` is unchanged.

Overflow: none, for every scale ``t / s`` with ``t <= 2**64 - 1``
----------------------------------------------------------------
Exact parameters ``t``, ``s``, ``k`` and the ``V`` counter ``j`` are Python
ints (unbounded).  Per-draw values are numpy ``uint64``:

* ``U <= t - 1 <= 2**64 - 2``.
* A trial ``Bernoulli(a / b)`` with ``b <= 2**64 - 1`` is one call of
  ``_urandom_below_narrow(b, n)`` (valid for ``1 <= b <= 2**64 - 1``) compared with
  ``a <= b``; for ``b >= 2**64`` (``b = t k`` with a large ``k``, reached with
  probability ``<= 1/(k-1)!``) each draw compares fair bits with ``a / b``'s
  binary expansion in Python ints (:func:`_bernoulli_from_bits`), no fixed
  width involved.
* ``X = U + t j`` is computed in ``uint64`` only while ``t j + (t - 1) <=
  2**64 - 1`` (then ``X <= 2**64 - 1``); beyond that (``j`` huge, probability
  ``e^-j``) ``X`` and ``Y`` are computed in Python ints.  ``Y = X // s`` is a
  ``uint64`` division when ``s <= 2**64 - 1``, and ``0`` when ``s >= 2**64``
  (then ``X <= 2**64 - 1 < s``).
* The magnitude returned is ``min(Y, limit)`` with ``limit <= 2**64 - 1``;
  the ``V`` loop stops at ``j = ceil(limit s / t)``, where ``Y >= floor(t j /
  s) >= limit`` whatever happens next.
* :func:`saturating_add` adds ``±mag`` to an int64 value in offset binary
  (``value + 2**63`` in ``[0, 2**64 - 1]``): ``+mag`` is applied only when
  ``mag <= 2**64 - 1 - (value + 2**63)``, ``-mag`` only when ``mag <= value +
  2**63``; otherwise the result is the int64 bound.  With ``limit = 2**64 -
  1`` a clipped magnitude saturates every int64 value, exactly as the
  unclipped ``|Z| >= 2**64 - 1`` would.

For a float scale, ``t / s`` is its exact binary value in lowest terms: every
float below ``2**64`` has ``t <= 2**64 - 1`` (an integer below ``2**64``, or an
odd mantissa ``< 2**53`` over a power of two).  :data:`MAX_NUMERATOR` states
the bound; the caller falls back to OpenDP above it.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

from .core import _U64_MAX, _bernoulli_from_bits, _urandom_below_narrow, _urandom_bit_source

__all__ = [
    "MAX_NUMERATOR",
    "OSRandomness",
    "Randomness",
    "cks_discrete_laplace",
    "saturating_add",
    "scale_ratio",
]

#: The largest numerator ``t`` of the scale ``t / s`` the vectorised sampler takes
#: (``U`` must fit in one ``uint64`` word).  Every float scale below ``2**64`` qualifies.
MAX_NUMERATOR = _U64_MAX

_SIGN = np.uint64(1 << 63)


def scale_ratio(scale: float) -> tuple[int, int]:
    """``(t, s)``: the exact value of a float scale as a fraction ``t / s`` in lowest terms."""
    q = Fraction(scale)
    return q.numerator, q.denominator


class Randomness:
    """The randomness the sampler consumes: uniform integers, Bernoulli trials, fair bits.

    Subclasses supply :meth:`below` and :meth:`bits`; :meth:`bernoulli` is built
    from them.  Tests inject subclasses that enumerate every outcome.

    Attributes
    ----------
    word_max : int
        The largest ``r`` for which :meth:`below` may be called.
    """

    word_max: int = _U64_MAX

    def below(self, r: int, n: int) -> np.ndarray:
        """``n`` independent exactly uniform integers in ``[0, r)``, ``1 <= r <= word_max``.

        An unsigned numpy integer array (any width that holds ``r - 1``)."""
        raise NotImplementedError

    def bits(self, n: int) -> np.ndarray:
        """``n`` independent fair bits (``bool``)."""
        raise NotImplementedError

    def next_bit(self) -> int:
        """One fair bit (used only by the per-draw path of :meth:`bernoulli`)."""
        return int(self.bits(1)[0])

    def bernoulli(self, num, den: int, n: int) -> np.ndarray:
        """``n`` independent ``Bernoulli(num_i / den)`` trials (``bool``).

        ``num`` is an int or a ``uint64`` array of length ``n`` with ``0 <= num_i
        <= den``; ``den`` is a positive Python int.  ``den <= word_max``: ``W <
        num_i`` with ``W`` uniform on ``[0, den)`` (exact).  ``den > word_max``:
        per draw, fair bits compared with the binary expansion of ``num_i / den``
        (:func:`_bernoulli_from_bits`, exact, Python ints).
        """
        if isinstance(num, (int, np.integer)):
            if num <= 0:
                return np.zeros(n, dtype=bool)
            if num >= den:
                return np.ones(n, dtype=bool)
        if den <= self.word_max:
            return self.below(den, n) < num
        nums = [int(num)] * n if isinstance(num, (int, np.integer)) else [int(a) for a in num]
        nb = self.next_bit
        return np.fromiter((_bernoulli_from_bits(Fraction(a, den), nb) for a in nums), dtype=bool, count=n)

    def bernoulli_exp_neg(self, num, den: int, n: int) -> np.ndarray:
        """``n`` independent ``Bernoulli(exp(-num_i / den))``, ``0 <= num_i <= den`` (CKS Algorithm 1 on :meth:`bernoulli`)."""
        return _bernoulli_exp_neg(num, den, n, self)


class OSRandomness(Randomness):
    """Production randomness: everything from ``os.urandom`` (the OS CSPRNG)."""

    word_max = _U64_MAX

    def __init__(self):
        self._bit = _urandom_bit_source()

    def below(self, r: int, n: int) -> np.ndarray:
        return _urandom_below_narrow(r, n)

    def bits(self, n: int) -> np.ndarray:
        raw = np.frombuffer(os.urandom((n + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw, count=n).astype(bool)

    def next_bit(self) -> int:
        return self._bit()


# ---------------------------------------------------------------------------
# The algorithm
# ---------------------------------------------------------------------------


def _bernoulli_exp_neg(num, den: int, n: int, rand: Randomness) -> np.ndarray:
    """``n`` draws of ``Bernoulli(exp(-num_i / den))``, ``0 <= num_i <= den`` (CKS Algorithm 1, ``g <= 1``).

    ``A_k ~ Bernoulli(num_i / (den k))`` for ``k = 1, 2, ...`` while the draw is
    active; a draw stops at its first ``A_k = 0`` with result ``k odd``.
    """
    scalar = isinstance(num, (int, np.integer))
    a = rand.bernoulli(num, den, n)  # k = 1, every draw
    out = ~a  # stopped at k = 1 (odd): True; the active ones are False until they stop at an odd k
    act = np.flatnonzero(a)
    cur = num if scalar else num[act]
    k = 2
    while act.size:
        a = rand.bernoulli(cur, den * k, act.size)
        if k % 2 == 1:
            out[act[~a]] = True
        act = act[a]
        if not scalar:
            cur = cur[a]
        k += 1
    return out


def _magnitude(u: np.ndarray, j: int, t: int, s: int, limit: int, arith_max: int) -> np.ndarray:
    """``min(floor((u + t j) / s), limit)`` for a ``uint64`` array ``u`` (each ``< t``), without overflow."""
    if t * j + (t - 1) <= arith_max:  # then u + t j <= arith_max <= 2**64 - 1
        x = u + np.uint64(t * j)
        y = x // np.uint64(s) if s <= arith_max else np.zeros_like(x)  # s > arith_max >= x: Y = 0
        return np.minimum(y, np.uint64(limit))
    return np.fromiter((min((int(a) + t * j) // s, limit) for a in u), dtype=np.uint64, count=u.size)


def _geometric_part(t: int, s: int, u: np.ndarray, rand: Randomness, limit: int, arith_max: int) -> np.ndarray:
    """Steps 2-3 for every draw: ``V`` geometric, ``min(floor((U + t V) / s), limit)``."""
    n = u.size
    y = np.empty(n, dtype=np.uint64)
    act = np.arange(n)
    v_cap = -(-limit * s // t)  # ceil(limit s / t): V >= v_cap gives Y >= floor(t V / s) >= limit
    j = 0  # every active draw has V = j
    while act.size:
        if j >= v_cap:
            y[act] = limit
            break
        a = rand.bernoulli_exp_neg(1, 1, act.size)  # Bernoulli(exp(-1)): V continues
        done = act[~a]
        if done.size:
            y[done] = _magnitude(u[done], j, t, s, limit, arith_max)
        act = act[a]
        j += 1
    return y


def _round(t: int, s: int, m: int, rand: Randomness, limit: int, arith_max: int):
    """One pass of CKS Algorithm 2's loop body for ``m`` draws: ``(ok, neg, mag)``.

    ``ok`` is False where the sequential algorithm would restart (``D = 0``, or
    ``B = 1`` and ``Y = 0``); there ``neg`` and ``mag`` are meaningless.  ``V``
    and ``B`` are drawn only for the draws with ``D = 1``.
    """
    if t == 1:  # U = 0 and Bernoulli(exp(0)) = 1: nothing random
        u = np.zeros(m, dtype=np.uint64)
        y = _geometric_part(t, s, u, rand, limit, arith_max)
        b = rand.bits(m)
        return ~(b & (y == 0)), b, y
    u = rand.below(t, m).astype(np.uint64, copy=False)
    d = rand.bernoulli_exp_neg(u, t, m)  # D ~ Bernoulli(exp(-U / t))
    idx = np.flatnonzero(d)
    y = np.zeros(m, dtype=np.uint64)
    b = np.zeros(m, dtype=bool)
    yi = _geometric_part(t, s, u[idx], rand, limit, arith_max)
    bi = rand.bits(idx.size)
    y[idx] = yi
    b[idx] = bi
    ok = d
    ok[idx] = ~(bi & (yi == 0))  # B = 1 and Y = 0 is rejected (0 would count twice)
    return ok, b, y


def cks_discrete_laplace(t: int, s: int, n: int, rand: Randomness | None = None, *,
                         limit: int = _U64_MAX, arith_max: int = _U64_MAX) -> tuple[np.ndarray, np.ndarray]:
    """``n`` i.i.d. exact discrete Laplace draws with scale ``t / s`` (module docstring).

    Parameters
    ----------
    t, s : int
        Positive integers, ``1 <= t <= rand.word_max`` (and ``<= MAX_NUMERATOR``);
        the scale is exactly ``t / s``.
    n : int
        Number of draws.
    rand : Randomness, optional
        Source of randomness; default :class:`OSRandomness` (production).
    limit : int, keyword
        Magnitudes are clipped at ``limit`` (``1 <= limit <= 2**64 - 1``); the
        default clips only where an int64 sum saturates anyway.
    arith_max : int, keyword
        The largest value the ``uint64`` fast path may hold (``<= 2**64 - 1``).
        Tests lower it to exercise the Python-int path.

    Returns
    -------
    (neg, mag) : (numpy.ndarray of bool, numpy.ndarray of uint64)
        ``Z_i = -mag_i`` if ``neg_i`` else ``mag_i``, with ``mag_i = min(|Z_i|, limit)``.
    """
    rand = OSRandomness() if rand is None else rand
    t, s, n = int(t), int(s), int(n)
    if t < 1 or s < 1:
        raise ValueError(f"t and s must be positive integers, got t={t}, s={s}")
    if t > min(rand.word_max, MAX_NUMERATOR):
        raise ValueError(f"scale numerator t={t} exceeds {min(rand.word_max, MAX_NUMERATOR)}")
    if not 1 <= limit <= _U64_MAX or not 1 <= arith_max <= _U64_MAX:
        raise ValueError("limit and arith_max must lie in [1, 2**64 - 1]")
    neg = np.zeros(n, dtype=bool)
    mag = np.zeros(n, dtype=np.uint64)
    todo = np.arange(n)
    while todo.size:  # every pass re-runs the rejected draws only, with fresh randomness
        ok, b, y = _round(t, s, todo.size, rand, limit, arith_max)
        keep = todo[ok]
        neg[keep] = b[ok]
        mag[keep] = y[ok]
        todo = todo[~ok]
    return neg, mag


def saturating_add(values: np.ndarray, neg: np.ndarray, mag: np.ndarray) -> np.ndarray:
    """``clip(values ± mag, int64 bounds)`` exactly (``values`` int64, ``mag`` uint64; module docstring)."""
    vu = values.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN  # value + 2**63, in [0, 2**64 - 1]
    up = np.where(mag > np.uint64(_U64_MAX) - vu, np.uint64(_U64_MAX), vu + mag)
    down = np.where(mag > vu, np.uint64(0), vu - mag)
    return (np.where(neg, down, up) ^ _SIGN).view(np.int64)
