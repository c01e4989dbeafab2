"""Public parameters of the concentrated-DP smooth-sensitivity count methods.

For ``OutlierCountMechanism(method="smooth_lln" | "smooth_arsinh")``
(:mod:`dpcore.mechanisms.outlier_count`): the count is released as
``round(q_count + (S_t(X) / s) Z)`` with ``Z`` Laplace log-normal or
arsinh-normal (Bun & Steinke 2019, Section 3; :mod:`dpcore.noise.smooth_cdp`)
and ``S_t`` the ``t``-smooth upper bound of the seed's Sections 4.2-4.3 with
``beta = t``.

Cost and neighbour relation
---------------------------
The ledger charges ``(epsilon, delta)`` per count (notion ``dp``, one record
replaced, added or removed, like the other count methods).  The release runs
at ``rho``-zCDP with the largest ``rho`` such that
``rho + 2 sqrt(rho ln(1/delta)) <= epsilon`` (Bun & Steinke 2016,
Proposition 1.3; :func:`dpcore.noise.smooth_cdp.zcdp_rho_for`), i.e. at
``(1/2) eps_cdp^2``-CDP with ``eps_cdp = sqrt(2 rho)``; the distribution's
constraint (``t / sigma + e^{3 sigma^2/2} s <= eps_cdp`` resp.
``(4 + 3 sigma^2) s / (6 sigma) + sqrt(t (t/sigma^2 + 1/sigma + 2)) <= eps_cdp``)
is checked with upward-rounded evaluation.

The public rule for ``t`` (never the data)
------------------------------------------
``t`` trades the dilation term against the shift term.  The noise on data is
``S_t(X) sd(Z) / s(t)``, and ``S_t(X)`` is at least the public floor
``max_j e^{-t j} min(G, j + 1)``; for ``G >> 1/t`` that is
``F(t) = max_j e^{-t j} (j + 1)`` (about ``1 / (e t)``).  The rule takes the
``t`` on a fixed geometric grid of shares of ``eps_cdp`` (1e-4 .. 0.99, 400
points) that minimises ``F(t) sd(Z(t)) / s(t)``, the noise at that floor: a
function of ``(family, epsilon, delta)`` only, like Student's T's
``beta = epsilon / 6``.  (``sigma`` and ``s`` then follow Section 3.1.1 for the
Laplace log-normal; ``sigma = 2 / sqrt 3`` for the arsinh-normal.)

What is optimal (Hladik & Tetek, "Smooth Sensitivity Revisited: Towards Optimality", FORC 2025)
-----------------------------------------------------------------------------------------------
They ask which noise distribution to pair with smooth sensitivity and give a
pure epsilon-DP family with a Laplace core and polynomial (Pareto) tails:
density ``∝ e^{-|z|}`` for ``|z| <= gamma + 1`` and
``∝ e^{-(gamma+1)} ((gamma + 1)/|z|)^{gamma+1}`` beyond.  Its log-density is
1-Lipschitz (shift cost ``s``) and ``|z g'(z)| <= gamma + 1`` with the scale
derivative ``-1 + z g'(z)`` in ``[-1, gamma]`` (dilation cost ``gamma t``), so
``epsilon = s + gamma t``; its variance tends to the Laplace's as ``t -> 0``,
which makes the Laplace mechanism the limit case and the family optimal in
that sense, and it improves on Student's T's standard deviation by factors
that grow as ``t`` shrinks.  It is not implemented here: for the outlier
count the publishable interval is the bound at ``S = G``, where every smooth
method loses to the global discrete Laplace (at best it tends to it as
``t -> 0``), and on the demo's data ``S(X) ~ G``; it would replace Student's T
where the true noise on data matters (BENCHMARKS.md, "Choosing the count
method").  The concentrated-DP distributions here are Bun & Steinke's, as
issue 16 asks.

Accuracy statement
------------------
:meth:`SmoothCDPParameters.half_width_at` gives the smallest integer ``h``
with ``P(|round(c Z)| > h) <= alpha``, ``c = S / s``, from the distribution's
tail (closed form for the arsinh-normal, one-dimensional quadrature with a
``1e-9`` margin for the Laplace log-normal).  With ``S = G`` it is public and
covers every dataset (non-decreasing in ``c``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..noise.smooth_cdp import (
    ARSINH_SIGMA,
    arsinh_epsilon,
    arsinh_parameters,
    arsinh_sd,
    arsinh_tail,
    cdp_epsilon_for,
    lln_epsilon,
    lln_parameters,
    lln_sd,
    lln_tail,
    rounded_half_width,
    zcdp_rho_for,
)

__all__ = ["CDP_FAMILIES", "SmoothCDPParameters", "smooth_floor_unbounded"]

#: ``method`` -> distribution family of :mod:`dpcore.noise.smooth_cdp`.
CDP_FAMILIES = {"smooth_lln": "lln", "smooth_arsinh": "arsinh"}

_SHARES = np.geomspace(1e-4, 0.99, 400)


def smooth_floor_unbounded(t: float) -> float:
    """``max_j e^{-t j} (j + 1)`` over integers ``j >= 0`` (the smooth bound's floor for ``G -> inf``)."""
    if t >= 1:
        return 1.0
    j0 = max(0, int(math.floor(1.0 / t - 1.0)))
    return max(math.exp(-t * j) * (j + 1) for j in (j0, j0 + 1))


def _dilation_t(eps_cdp: float, share: float, family: str) -> float:
    """The ``t`` whose dilation term is ``share * eps_cdp`` (LLN: ``t = share * eps``, then sigma solves 3.1.1)."""
    if family == "lln":
        return share * eps_cdp
    sg = ARSINH_SIGMA
    # t^2 / sigma^2 + t (1/sigma + 2) = (share eps)^2
    a, b, c = 1.0 / (sg * sg), 1.0 / sg + 2.0, -((share * eps_cdp) ** 2)
    return (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)


@lru_cache(maxsize=256)
def _choose(family: str, eps_cdp: float) -> tuple[float, float, float]:
    best = None
    for q in _SHARES:
        t = _dilation_t(eps_cdp, float(q), family)
        try:
            sigma, s = lln_parameters(eps_cdp, t) if family == "lln" else arsinh_parameters(eps_cdp, t)
        except ValueError:
            continue
        sd = lln_sd(sigma) if family == "lln" else arsinh_sd(sigma)
        obj = smooth_floor_unbounded(t) * sd / s
        if math.isfinite(obj) and (best is None or obj < best[0]):
            best = (obj, t, sigma, s)
    if best is None:
        raise ValueError(f"no feasible smoothness parameter for family={family!r} at eps_cdp={eps_cdp}")
    return best[1], best[2], best[3]


@dataclass(frozen=True)
class SmoothCDPParameters:
    """Public parameters of one concentrated-DP smooth count (module docstring).

    Parameters
    ----------
    method : {"smooth_lln", "smooth_arsinh"}
    epsilon, delta
        The ``(epsilon, delta)`` charged for the count (``epsilon > 0``, ``0 < delta < 1``).

    Attributes (computed)
    ---------------------
    rho, eps_cdp : float
        zCDP ``rho`` and ``eps_cdp = sqrt(2 rho)`` the release satisfies.
    t, sigma, s : float
        Smoothness parameter (``beta``), the distribution's ``sigma`` and the shift scale ``s``.
    """

    method: str
    epsilon: object
    delta: object

    @property
    def family(self) -> str:
        return CDP_FAMILIES[self.method]

    @property
    def rho(self) -> float:
        return zcdp_rho_for(self.epsilon, self.delta)

    @property
    def eps_cdp(self) -> float:
        return cdp_epsilon_for(self.epsilon, self.delta)

    def _tss(self) -> tuple[float, float, float]:
        return _choose(self.family, self.eps_cdp)

    @property
    def t(self) -> float:
        return self._tss()[0]

    @property
    def sigma(self) -> float:
        return self._tss()[1]

    @property
    def s(self) -> float:
        return self._tss()[2]

    def cdp_epsilon_used(self) -> float:
        """Upward-rounded CDP epsilon of ``(t, sigma, s)``: ``<= eps_cdp`` (checked when built)."""
        t, sigma, s = self._tss()
        return lln_epsilon(s, t, sigma) if self.family == "lln" else arsinh_epsilon(s, t, sigma)

    def scale(self, S) -> Fraction:
        """Exact noise scale ``c = S / s`` (``Fraction`` of the floats used)."""
        return Fraction(float(S)) / Fraction(self.s)

    def sd(self, S) -> float:
        """Standard deviation ``c sd(Z)`` of the unrounded noise at smooth bound ``S`` (internal when ``S = S(X)``)."""
        sd = lln_sd(self.sigma) if self.family == "lln" else arsinh_sd(self.sigma)
        return float(self.scale(S)) * sd

    def tail(self, x: float) -> float:
        """``P(|Z| > x)`` of the distribution."""
        return lln_tail(x, self.sigma) if self.family == "lln" else arsinh_tail(x, self.sigma)

    def half_width_at(self, S, alpha: float) -> int:
        """Smallest integer ``h`` with ``P(|round(c Z)| > h) <= alpha`` at ``c = S / s`` (public iff ``S`` is)."""
        return rounded_half_width(self.tail, float(self.scale(S)), alpha)
