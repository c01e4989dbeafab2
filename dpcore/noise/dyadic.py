"""Exact sampling of a non-increasing chain whose conditional weights are dyadic rationals.

A mechanism such as PFL (:mod:`dpcore.mechanisms.unattributed.pfl`) defines,
deterministically from its input, one row of positive weights per position
``i`` of a chain, for the states ``lo_i, lo_i + 1, ..., hi_i``.  Each weight is
a dyadic rational held as a positive float64 mantissa ``m`` (PFL keeps it in
``[2^-64, 2^64)``) and an ``int64`` exponent ``e`` (value ``m * 2^e``; no underflow, whatever the
dynamic range).  The chain is drawn forward:

    y_1 ~ w_1(v) over lo_1 <= v <= hi_1,
    y_i ~ w_i(v) over lo_i <= v <= min(hi_i, y_{i-1}),

each draw with **exactly** the probability ``w_i(v) / sum_u w_i(u)``
(a rational number), so the output distribution is exactly the product of
these rational conditionals: no 53-bit rounding of a uniform, no state whose
probability is rounded to 0.

Validity argument (inverse CDF on a lazy uniform)
-------------------------------------------------
Per position, ``U = 0.b_1 b_2 ...`` is a uniform real in ``[0, 1)`` read
lazily: its first 64 bits ``a`` (one 64-bit word from the caller's
:class:`~dpcore.noise.NoiseSource`) place it in ``[a 2^-64, (a + 1) 2^-64)``.
The drawn state is the ``k`` with ``P_{k-1} <= U T < P_k`` (exact prefix sums
``P`` of the row, total ``T``): inverse CDF, probability exactly
``w_k / T``.

* *Fast path* (compiled, :func:`_chain_fast`): the prefix sums are computed
  in float64 in the frame of the row's largest exponent.  A sum of ``n``
  non-negative floats is within a relative ``gamma_n = n u / (1 - n u)``
  (``u = 2^-53``) of the exact sum of its terms, and shifting a term into the
  frame changes it by at most ``2^-1075`` (subnormal rounding), or drops it
  when it is shifted by more than 1100 binary places (a term below
  ``2^65 2^-1100 = 2^-1035`` for mantissas below ``2^65``, as PFL's are),
  against a total at least the largest-exponent term's mantissa
  (``>= 2^-64`` for PFL).  The fast path returns ``k`` only if, with a
  relative margin ``r = (n + 8) 2^-52`` (twice ``gamma_n`` plus the rounding
  of the few products in the test) and an absolute margin ``(n + 1) 2^-1030``,
  the whole interval of ``U T`` lies in ``[P_{k-1}, P_k)`` for every exact
  value the float sums can stand for.  Then ``k`` is the exact inverse-CDF
  cell of ``U``, whatever ``U``'s later bits.
* *Exact path* (:func:`exact_index`, Python integers): otherwise the row is
  scaled to integers (a float is an exact dyadic rational) and ``U``'s interval is
  compared with the exact prefix sums, reading more bits of ``U`` from the
  source (32, then doubling) until the interval lies inside one cell.  The bits read by the fast
  path are kept (the same ``U``), so conditioning on the fast path's failure
  does not bias the draw.  The loop stops with probability 1 (``U`` on a cell
  boundary has probability 0); the fast path fails with probability about
  ``n 2^-50`` per position.

Randomness: 64-bit words and bits from the caller's
:class:`~dpcore.noise.NoiseSource` only (``os.urandom`` in production, a
seeded generator in tests).  No floating-point value is ever compared with a
uniform except through the rigorous margins above.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numba import njit

__all__ = ["sample_chain_block", "exact_index", "fast_index"]

#: Bits of ``U`` read by the first refinement on the exact path (each later one doubles the bits read).
_STEP_BITS = 32
#: Bits of ``U`` after which the exact path gives up: a cell that narrow is met with probability below
#: ``n 2^-(2^40)`` on sound input, so reaching it means a bug (e.g. a callback of bits that never changes).
_MAX_BITS = 2**40


#: ``_POW2[k] = 2^(k - 1100)``, ``k = 0 .. 1100`` (0.0 below ``2^-1074``): exact shifts without ``ldexp``.
_POW2 = np.array([math.ldexp(1.0, k - 1100) for k in range(1101)])


@njit(cache=True)
def _row_prefix(mant, expo, cnt, scratch, pow2):
    """Float prefix sums of ``mant[k] 2^expo[k]``, ``k < cnt``, in the frame of the largest exponent."""
    emax = expo[0]
    for k in range(1, cnt):
        if expo[k] > emax:
            emax = expo[k]
    s = 0.0
    for k in range(cnt):
        d = expo[k] - emax
        if d < -1100:
            d = -1100
        s += mant[k] * pow2[d + 1100]
        scratch[k] = s
    return s


@njit(cache=True)
def _decide(scratch, cnt, total, word):
    """The state index the fast path certifies for the 64-bit word ``word``, or -1 (undecided)."""
    r = (cnt + 8) * 2.0 ** -52
    a0 = (cnt + 1) * 2.0 ** -1030
    fa = float(word)
    ua = fa * 2.0 ** -64
    ub = (fa + 1.0) * 2.0 ** -64
    t = ua * total
    lo_k = 0
    hi_k = cnt - 1
    while lo_k < hi_k:  # first k with scratch[k] > t
        mid = (lo_k + hi_k) // 2
        if scratch[mid] > t:
            hi_k = mid
        else:
            lo_k = mid + 1
    k = lo_k
    if not (ub * total * (1.0 + r) + a0 <= scratch[k] * (1.0 - r) - a0):
        return -1
    if k > 0 and not (ua * total * (1.0 - r) - a0 >= scratch[k - 1] * (1.0 + r) + a0):
        return -1
    return k


@njit(cache=True)
def _chain_fast(mant, expo, lo, hi, prev, words, y, scratch, pow2):
    """Draw positions ``0, 1, ...`` of a block by the fast path; stop at the first undecided one.

    Returns the index of the first undecided position (``lo.size`` when all were decided);
    ``y[:j]`` holds the drawn states.  ``prev < 0`` means no constraint from a previous position.
    """
    n = lo.size
    for j in range(n):
        top = hi[j]
        if prev >= 0 and prev < top:
            top = prev
        cnt = top - lo[j] + 1
        total = _row_prefix(mant[j], expo[j], cnt, scratch, pow2)
        k = _decide(scratch, cnt, total, words[j])
        if k < 0:
            return j
        y[j] = lo[j] + k
        prev = y[j]
    return n


def fast_index(mant: np.ndarray, expo: np.ndarray, word: int) -> int:
    """The fast path alone on one row (``-1`` when it cannot decide); for tests and audits.

    Mantissas must be below ``2^65`` (the absolute margin assumes it; PFL's are below ``2^65``).
    """
    mant = np.ascontiguousarray(mant, dtype=np.float64)
    expo = np.ascontiguousarray(expo, dtype=np.int64)
    scratch = np.empty(mant.size)
    total = _row_prefix(mant, expo, mant.size, scratch, _POW2)
    return int(_decide(scratch, mant.size, total, np.uint64(word)))


def exact_index(mant, expo, word: int, next_bit: Callable[[], int] | None) -> int:
    """Exact inverse-CDF cell of the lazy uniform whose first 64 bits are ``word`` (module docstring).

    Parameters
    ----------
    mant, expo : array-like
        The row: weights ``mant[k] * 2**expo[k]``, ``mant`` positive and finite.
    word : int
        The first 64 bits of ``U``.
    next_bit : callable or None
        Further fair bits of ``U`` (from a :class:`~dpcore.noise.NoiseSource`); ``None`` returns ``-1``
        instead of reading more (tests: "is ``word`` alone enough?").

    Returns
    -------
    int
        ``k`` with ``P_{k-1} <= U T < P_k`` (exact rational comparison), or ``-1`` as above.
    """
    m, e = [], []
    for mk, ek in zip(np.asarray(mant, dtype=np.float64).tolist(), np.asarray(expo, dtype=np.int64).tolist()):
        if not (math.isfinite(mk) and mk > 0):
            raise ValueError("every weight of a chain row must be positive and finite")
        num, den = mk.as_integer_ratio()  # exact; den is a power of two
        m.append(num)
        e.append(int(ek) - (den.bit_length() - 1))
    emin = min(e)
    total = 0
    for mk, ek in zip(m, e):
        total += mk << (ek - emin)
    a, L = int(word), 64
    while L <= _MAX_BITS:
        lo_target = a * total  # U T >= a T / 2^L; compare prefix sums scaled by 2^L
        hi_target = (a + 1) * total
        p = 0
        for k, (mk, ek) in enumerate(zip(m, e)):
            p += mk << (ek - emin)
            if (p << L) > lo_target:  # first k with P_k > a 2^-L T
                if hi_target <= (p << L):
                    return k
                break
        if next_bit is None:
            return -1
        step = max(_STEP_BITS, L)  # doubling: a cell of width 2^-b needs O(log b) rounds
        for _ in range(step):
            a = (a << 1) | (next_bit() & 1)
        L += step
    raise RuntimeError("exact chain sampling did not converge (a row with a zero or non-finite weight?)")


def sample_chain_block(mant: np.ndarray, expo: np.ndarray, lo: np.ndarray, hi: np.ndarray, prev: int | None,
                       words: np.ndarray, next_bit: Callable[[], int]) -> np.ndarray:
    """Draw a block of the chain exactly (module docstring).

    Parameters
    ----------
    mant, expo : numpy.ndarray
        ``(n, width)`` rows: entry ``k`` of row ``j`` is the weight of state ``lo[j] + k``
        (``k <= hi[j] - lo[j]``; the rest is ignored).
    lo, hi : numpy.ndarray of int64
        The states of each position, non-increasing in ``j``.
    prev : int or None
        The state drawn at the position before the block (``None``: no constraint).
    words : numpy.ndarray of uint64
        ``n`` uniform 64-bit words, the first bits of each position's uniform.
    next_bit : callable
        Further fair bits for the rare exact path.

    Returns
    -------
    numpy.ndarray
        ``int64`` states, length ``n``, non-increasing, ``<= prev``.
    """
    n = lo.size
    y = np.empty(n, dtype=np.int64)
    scratch = np.empty(mant.shape[1] if mant.ndim == 2 else 1)
    lo = np.ascontiguousarray(lo, dtype=np.int64)
    hi = np.ascontiguousarray(hi, dtype=np.int64)
    j = 0
    p = -1 if prev is None else int(prev)
    while j < n:
        done = _chain_fast(mant[j:], expo[j:], lo[j:], hi[j:], p, words[j:], y[j:], scratch, _POW2)
        j += done
        if j > 0:
            p = int(y[j - 1])
        if j == n:
            break
        top = int(hi[j]) if p < 0 else min(int(hi[j]), p)
        cnt = top - int(lo[j]) + 1
        k = exact_index(mant[j, :cnt], expo[j, :cnt], int(words[j]), next_bit)
        y[j] = int(lo[j]) + k
        p = int(y[j])
        j += 1
    return y
