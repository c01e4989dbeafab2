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
    Exact, for OpenDP's discrete Laplace (geometric) noise of scale ``s``:
    ``P(|Z| > t) = 2 e^{-(t+1)/s} / (1 + e^{-1/s})``.
:func:`discrete_laplace_difference_half_width`
    Exact (numerical convolution with the tail mass added), for the
    difference of two independent discrete Laplace draws (a count derived as
    the difference of two noisy counts).
:func:`gaussian_half_width`
    Exact, ``sigma * z_{1 - alpha/2}``, rounded up.
:func:`interval_text`
    ``"1,204 ± 37 (95%)"`` for reports.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "Accuracy",
    "check_alpha",
    "discrete_laplace_tail",
    "discrete_laplace_half_width",
    "discrete_laplace_difference_half_width",
    "gaussian_half_width",
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


def discrete_laplace_tail(scale: float, t: int) -> float:
    """``P(|Z| > t)`` for ``Z`` discrete Laplace with scale ``s``: ``2 e^{-(t+1)/s} / (1 + e^{-1/s})``.

    The pmf is ``P(Z = z) = (1 - e^{-1/s}) / (1 + e^{-1/s}) e^{-|z|/s}``.
    """
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if t < 0:
        return 1.0
    return 2.0 * math.exp(-(t + 1) / s) / (1.0 + math.exp(-1.0 / s))


def discrete_laplace_half_width(scale: float, alpha: float = DEFAULT_ALPHA) -> int:
    """Smallest integer ``t >= 0`` with ``P(|Z| > t) <= alpha`` (exact tail formula).

    Parameters
    ----------
    scale : float
        The discrete Laplace scale actually used (public: sensitivity / epsilon, rounded up).
    alpha : float
        Significance in (0, 1).

    Returns
    -------
    int
        The half-width. A float evaluation near the boundary is resolved
        toward the larger ``t`` (the statement never claims more accuracy
        than the distribution gives): the tail at ``t`` is compared with
        ``alpha`` after a relative margin of ``1e-12``.
    """
    a = check_alpha(alpha)
    s = float(scale)
    # closed form, then a local search that is exact up to the float margin
    t = max(0, math.ceil(-s * math.log(a * (1.0 + math.exp(-1.0 / s)) / 2.0)) - 1)
    while t > 0 and discrete_laplace_tail(s, t - 1) * (1 + 1e-12) <= a:
        t -= 1
    while discrete_laplace_tail(s, t) * (1 + 1e-12) > a:
        t += 1
    return int(t)


def discrete_laplace_difference_half_width(scale: float, alpha: float = DEFAULT_ALPHA) -> int:
    """Smallest integer ``t`` with ``P(|Z_1 - Z_2| > t) <= alpha`` for two independent discrete Laplace draws.

    Computed by convolving the pmf on ``[-M, M]`` where each draw's tail
    beyond ``M`` has mass ``< 1e-15``; that truncated mass is added to the
    tail (so the returned ``t`` is never too small).
    """
    a = check_alpha(alpha)
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    M = int(math.ceil(s * 36)) + 1  # e^{-36} ~ 2e-16
    z = np.arange(-M, M + 1)
    q = math.exp(-1.0 / s)
    pmf = (1 - q) / (1 + q) * np.exp(-np.abs(z) / s)
    lost = 1.0 - float(pmf.sum())  # both tails of one draw beyond M
    diff = np.convolve(pmf, pmf)  # support [-2M, 2M]
    dz = np.arange(-2 * M, 2 * M + 1)
    absz = np.abs(dz)
    tail_beyond = np.zeros(2 * M + 2)  # tail_beyond[t] = P(|D| > t) within the truncation
    mass_at = np.bincount(absz, weights=diff, minlength=2 * M + 1)
    tail_beyond[: 2 * M + 1] = mass_at[::-1].cumsum()[::-1] - mass_at
    bound = tail_beyond + 2 * max(lost, 0.0) + 1e-15
    ok = np.flatnonzero(bound[: 2 * M + 1] * (1 + 1e-12) <= a)
    if not len(ok):
        raise ValueError("alpha too small for the numerical convolution")
    return int(ok[0])


def gaussian_half_width(sigma: float, alpha: float = DEFAULT_ALPHA) -> float:
    """``sigma * z_{1-alpha/2}`` (Gaussian noise), rounded up by a relative ``1e-12``."""
    a = check_alpha(alpha)
    sg = float(sigma)
    if not (math.isfinite(sg) and sg > 0):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    return math.nextafter(sg * float(stats.norm.isf(a / 2)) * (1 + 1e-12), math.inf)


def level_text(alpha: float) -> str:
    """``"95%"`` for ``alpha = 0.05``."""
    return f"{100 * (1 - check_alpha(alpha)):g}%"


def interval_text(value, half_width, alpha: float = DEFAULT_ALPHA) -> str:
    """``"1,204 ± 37 (95%)"`` (integers with thousands separators, floats with two decimals)."""
    def fmt(x) -> str:
        return f"{int(x):,}" if float(x).is_integer() else f"{float(x):,.2f}"

    return f"{fmt(value)} ± {fmt(half_width)} ({level_text(alpha)})"
