"""The standard normal quantile ``ndtri`` in plain Python, the same floating-point numbers as scipy's.

:func:`dpcore.mechanisms.accuracy.gaussian_half_width` states Gaussian noise's half-width from ``-ndtri(alpha / 2)``,
and the cost plan needs it (the outlier-count step chooses its method by half-width), so ``dpr spec check``
and ``dpr plan`` computed it with ``scipy.special.ndtri``: importing scipy.special costs them most of a
second (issue 32, section 2). This is the Cephes algorithm scipy's ``ndtri`` implements (rational
approximations on ``[exp(-2), 1 - exp(-2)]`` and, in ``sqrt(-2 log y)``, below 8 and from 8 on), with the
same coefficients and the same order of operations, so it returns the same doubles
(``tests/test_normal_quantile.py`` compares it with scipy bit for bit). Relative error about 1e-16.
"""
from __future__ import annotations

import math

__all__ = ["ndtri"]

_S2PI = 2.50662827463100050242e0  # sqrt(2 pi)
_EXP_M2 = 0.13533528323661269189  # exp(-2)

# approximation for 0 <= |y - 0.5| <= 3/8
_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1, 1.39312609387279679503e1,
       -1.23916583867381258016e0)
_Q0 = (1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1, -2.25462687854119370527e2,
       2.00260212380060660359e2, -8.20372256168333339912e1, 1.59056225126211695515e1, -1.18331621121330003142e0)
# approximation for interval z = sqrt(-2 log y) between 2 and 8 (y between exp(-2) = .135 and exp(-32))
_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
       1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1, -3.50424626827848203418e-2,
       -8.57456785154685413611e-4)
_Q1 = (1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1, 1.50425385692907503408e1,
       2.50464946208309415979e0, -1.42182922854787788574e-1, -3.80806407691578277194e-2, -9.33259480895457427372e-4)
# approximation for interval z = sqrt(-2 log y) between 8 and 64 (y between exp(-32) and exp(-2048))
_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
       2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4, 2.65806974686737550832e-6,
       6.23974539184983293730e-9)
_Q2 = (6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0, 2.16236993594496635890e-1,
       1.34204006088543189037e-2, 3.28014464682127739104e-4, 2.89247864745380683936e-6, 6.79019408009981274425e-9)


def _polevl(x: float, coef: tuple[float, ...]) -> float:
    ans = coef[0]
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def _p1evl(x: float, coef: tuple[float, ...]) -> float:  # leading coefficient 1, not stored
    ans = x + coef[0]
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def ndtri(y0: float) -> float:
    """The ``x`` with ``Phi(x) = y0`` for the standard normal CDF ``Phi`` (scipy's ``special.ndtri``).

    Parameters
    ----------
    y0 : float
        A probability in ``[0, 1]``.

    Returns
    -------
    float
        ``-inf`` at 0, ``inf`` at 1, NaN outside ``[0, 1]`` or for NaN.
    """
    y = float(y0)
    if math.isnan(y) or y < 0.0 or y > 1.0:
        return math.nan
    if y == 0.0:
        return -math.inf
    if y == 1.0:
        return math.inf
    negate = True
    if y > 1.0 - _EXP_M2:
        y = 1.0 - y
        negate = False
    if y > _EXP_M2:
        y = y - 0.5
        y2 = y * y
        x = y + y * (y2 * _polevl(y2, _P0) / _p1evl(y2, _Q0))
        return x * _S2PI
    x = math.sqrt(-2.0 * math.log(y))
    x0 = x - math.log(x) / x
    z = 1.0 / x
    if x < 8.0:  # y > exp(-32) = 1.2664165549e-14
        x1 = z * _polevl(z, _P1) / _p1evl(z, _Q1)
    else:
        x1 = z * _polevl(z, _P2) / _p1evl(z, _Q2)
    x = x0 - x1
    return -x if negate else x
