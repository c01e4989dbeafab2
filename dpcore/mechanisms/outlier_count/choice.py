"""``method: auto``: choosing the count method from public parameters only.

:func:`choose_method` picks, from ``(epsilon, delta, k, d)`` only, the method
with the smallest **publishable** 95% half-width
(:mod:`~dpcore.mechanisms.outlier_count.mechanism`, "Accuracy statements");
ties go to ``global_laplace`` (delta = 0).  The smooth method's publishable half-width is
its public bound, ``5 x`` the global Gaussian's (``G / alpha`` against
``sqrt(2 ln(2/delta)) G / epsilon``), so ``auto`` never picks it.  It is also
provably no better than the global discrete Laplace *on any non-empty data*
whenever its public floor ``S >= S_floor = max_t e^{-t beta} min(G, t + 1)``
(:meth:`OutlierCountMechanism.smooth_sensitivity_floor`: ``U(t) >= min(G, t + 1)``
because ``f_t >= 0``) already gives a larger half-width; that covers every cell of the benchmark
grid with ``d <= 4`` (``k`` in {1, 3, 10}, ``epsilon`` in {0.1, 0.5, 0.95},
``delta = 1e-6``; BENCHMARKS.md, "Choosing the count method"), where on the
synthetic data it lost everywhere but at ``d >= 8, k = 10, epsilon >= 0.5``.
The global Gaussian (Theorem 1, ``sigma = sqrt(2 ln(2/delta)) G / epsilon``)
beats the discrete Laplace's half-width only for ``delta`` above about 0.62
(measured by bisection there).  ``smooth_student_t`` is not compared: its
publishable half-width (``S = G``) is about 3 x the discrete Laplace's
(``9.13`` against ``<= ln 40 = 3.69`` units of ``G / epsilon`` at 95%, plus at
most one unit of rounding; a test checks it over a grid of ``epsilon``, ``k``,
``d`` and levels), so it could never be the smallest.
"""
from __future__ import annotations

import numbers

from ..params import real_between
from .mechanism import CI_LEVEL, OutlierCountMechanism
from .query import _check_k

__all__ = ["choose_method"]


def choose_method(epsilon, delta, k: int, d: int, level=CI_LEVEL) -> str:
    """``method: auto``: the count method with the smallest publishable half-width, from public parameters only.

    Parameters
    ----------
    epsilon : float or Fraction
        Epsilon of one count (``> 0``).
    delta : float
        The delta the owner allows for one count (``>= 0``; ``0`` means pure DP only).
    k : int
        Neighbour threshold.
    d : int
        Subspace dimension.
    level : float
        Coverage of the compared intervals (default 0.95).

    Returns
    -------
    str
        ``"global_laplace"`` unless the global Gaussian's half-width
        (Theorem 1) is strictly smaller, which needs ``0 < epsilon < 1``,
        ``delta > 0`` and, in practice, ``delta`` above about 0.62.  ``smooth_student_t``
        is not a candidate: its publishable half-width (``S = G``) is about 3 x
        the discrete Laplace's (module docstring). ``smooth_lln`` and ``smooth_arsinh`` are not
        candidates either: the zCDP conversion leaves them ``eps_cdp`` far below
        ``epsilon`` for a single count, and their publishable half-widths are
        several times the Laplace's (a test checks the grid).  The smooth
        method is never returned: its publishable half-width (the bound with
        ``S = G``, :meth:`OutlierCountMechanism.ci_half_width`) is 5 times the
        global Gaussian's, and where it might be smaller *on the data* is a
        data-dependent fact that must not steer the choice (module docstring,
        "Choosing the method").  Never reads data; identical on every dataset.

    Raises
    ------
    ValueError
        On parameters that no method accepts (``epsilon <= 0``, ``delta`` outside ``[0, 1)``, bad ``k``/``d``).
    """
    _check_k(k)
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"d must be an integer >= 1 (got {d!r}); it is the subspace dimension |S|")
    if not real_between(epsilon, 0):
        raise ValueError(f"epsilon must be a finite number > 0 (got {epsilon!r})")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 <= float(delta) < 1:
        raise ValueError(f"delta must be a number with 0 <= delta < 1 (got {delta!r})")
    lap = OutlierCountMechanism(k, 1.0, epsilon, 0, method="global_laplace").ci_half_width(d, level)
    if float(delta) > 0 and float(epsilon) < 1:
        gauss = OutlierCountMechanism(k, 1.0, epsilon, delta, method="global").ci_half_width(d, level)
        if gauss < lap:
            return "global"
    return "global_laplace"
