"""PFL's backward messages as dyadic rationals (compiled; no randomness).

The chain of :mod:`.pfl` draws ``y_i`` from the weights

    B_i(v) = t(|x_i - v|) * C_{i+1}(min(v, hi_{i+1})),   C_{i+1}(w) = sum_{lo_{i+1} <= u <= w} B_{i+1}(u),

(``B_G(v) = t(|x_G - v|)``) for ``v`` in the band ``lo_i .. hi_i``, where
``t(d)`` is ``exp(-d / s)`` rounded to a float64 mantissa times a power of
two (:func:`weight_table`).
``B_i(v)`` is the total weight of the non-increasing completions
``y_i = v, y_{i+1}, ..., y_G`` inside the band.

Each ``B_i(v)`` is stored as a float64 mantissa in ``[2^-64, 2^64)`` and
an ``int64`` exponent (rescaled by exact powers of two), so nothing underflows however
small a completion weight is relative to another: every state keeps a
positive weight.  All arithmetic is on positive numbers: the prefix sums
``C`` are sums of at most ``S`` positive terms (relative error
``<= gamma_S``), each multiplied by ``t`` (one more rounding), and the
rescalings by powers of two are exact (a term shifted into the subnormal
range is rounded by at most ``2^-1075`` absolute, one shifted by more than
1100 places, below ``2^64 2^-1100``, is dropped; the running sum is
``>= 2^-64``, so both are relative errors below ``2^-970``).  So every stored ``B_i(v)`` is ``t(|x_i - v|)`` times the exact
sum of the *stored* ``B_{i+1}`` up to ``v``, times ``(1 + theta)`` with
``|theta| <= (S + 2) 2^-53 (1 + 10^-3)``: the per-position factor that
:func:`.pfl.pfl_float_slack` bounds along a whole path.
"""
from __future__ import annotations

import decimal
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
from numba import njit

__all__ = ["weight_table", "messages_block"]


@lru_cache(maxsize=64)
def weight_table(scale: float, states: int) -> tuple[np.ndarray, np.ndarray]:
    """``t(d) = tm[d] 2^te[d]``, within a relative ``2^-53 (1 + 10^-30)`` of ``exp(-d / scale)``, ``d < states``.

    Computed in 40-digit decimal arithmetic (correctly rounded ``exp``), split into a power of two ``2^te``
    and a mantissa ``tm`` in ``[1, 2]`` rounded once to float64, so no weight underflows however large
    ``d / scale`` (a huge epsilon gives weights far below ``2^-1074``, still positive).
    """
    ctx = decimal.Context(prec=60, rounding=decimal.ROUND_HALF_EVEN, Emin=-10**9, Emax=10**9)
    q = Fraction(scale)  # a float is an exact rational
    inv = ctx.divide(decimal.Decimal(q.denominator), decimal.Decimal(q.numerator))
    ln2 = ctx.ln(decimal.Decimal(2))
    tm = np.empty(states)
    te = np.empty(states, dtype=np.int64)
    for d in range(states):
        x = ctx.multiply(decimal.Decimal(-d), inv)  # ln t(d)
        k = int(ctx.divide(x, ln2).to_integral_value(rounding=decimal.ROUND_FLOOR))
        tm[d] = float(ctx.exp(ctx.subtract(x, ctx.multiply(decimal.Decimal(k), ln2))))
        te[d] = k
    tm.setflags(write=False)  # cached: shared by every call with the same public (scale, states)
    te.setflags(write=False)
    return tm, te


#: ``POW2[k] = 2^(k - 1100)``, ``k = 0 .. 1100`` (0.0 below ``2^-1074``): exact rescaling without ``ldexp``.
POW2 = np.array([math.ldexp(1.0, k - 1100) for k in range(1101)])
_HI = 2.0 ** 64
_LO = 2.0 ** -64


@njit(cache=True, inline="always")
def _add(cm, ce, m, e, pow2):
    """``cm 2^ce + m 2^e`` as ``(mantissa, exponent)`` with the mantissa in ``[2^-64, 2^64)``.

    One rounding (the sum); rescalings by powers of two are exact but for a term shifted below ``2^-1022``,
    rounded by at most ``2^-1075`` against a sum ``>= 2^-64``.
    """
    if cm == 0.0:
        return m, e
    if e <= ce:
        d = e - ce
        if d < -1100:
            d = -1100
        cm = cm + m * pow2[d + 1100]
    else:
        d = ce - e
        if d < -1100:
            d = -1100
        cm = cm * pow2[d + 1100] + m
        ce = e
    if cm >= _HI:
        cm *= _LO
        ce += 64
    return cm, ce


@njit(cache=True)
def messages_block(xc, lo, hi, tm, te, start, stop, G, nxt_m, nxt_e, out_m, out_e):
    """Fill ``out_*[i - start]`` with ``B_i`` for ``start <= i < stop`` (entry ``k``: state ``lo[i] + k``).

    ``xc`` are the true sorted sizes clipped into the band (module :mod:`.pfl`); ``nxt_*`` hold
    ``B_stop`` when ``stop < G`` (ignored otherwise).  Each weight is ``out_m * 2^out_e`` with the
    mantissa ``out_m`` in ``[2^-64, 2^64)``.
    """
    pow2 = POW2
    for i in range(stop - 1, start - 1, -1):
        r = i - start
        n_i = hi[i] - lo[i] + 1
        if i == G - 1:
            for k in range(n_i):
                d = abs(xc[i] - (lo[i] + k))
                out_m[r, k] = tm[d]
                out_e[r, k] = te[d]
            continue
        if i == stop - 1:
            pm = nxt_m
            pe = nxt_e
        else:
            pm = out_m[r + 1]
            pe = out_e[r + 1]
        nlo = lo[i + 1]
        nhi = hi[i + 1]
        cm = 0.0
        ce = 0
        j = 0
        for k in range(n_i):
            v = lo[i] + k
            top = v if v < nhi else nhi
            jt = top - nlo
            while j <= jt:
                cm, ce = _add(cm, ce, pm[j], pe[j], pow2)
                j += 1
            d = abs(xc[i] - v)
            f = tm[d] * cm
            e = ce + te[d]
            while f < _LO and f > 0.0:
                f *= _HI
                e -= 64
            while f >= _HI:
                f *= _LO
                e += 64
            out_m[r, k] = f
            out_e[r, k] = e
