"""The count methods: what each adds as noise and why it is private (seed 002 Section 4; Bun & Steinke 2019).

The names and groups here are what the spec, the step and
:class:`~dpcore.mechanisms.outlier_count.OutlierCountMechanism` dispatch on.

Mechanisms
----------
* ``method="global"``: Theorem 1 (Gaussian mechanism with global sensitivity)
  using the **upper** bound of Theorem 4, ``GS <= min(N, k K_d + 1)`` with an
  upper bound on the kissing number (:mod:`dpcore.mechanisms.kissing`).
* ``method="smooth"``: Theorem 2 (Nissim-Raskhodnikova-Smith Gaussian
  mechanism with a beta-smooth upper bound on the local sensitivity), with
  the bound of Theorems 5-6 evaluated by Algorithms 1-2 (Section 4.3).
* ``method="global_laplace"`` (issue 16): the pure epsilon-DP global path.
  ``q_count`` is an integer whose global sensitivity is at most the public
  integer ``G = k K_d^up + 1`` (Theorem 4's upper bound without its
  ``min(N, .)``; "Sensitivity under add/remove" in
  :mod:`~dpcore.mechanisms.outlier_count.global_sensitivity`), so adding discrete
  Laplace noise ``P(Z = z) ∝ exp(-|z| / s)`` with ``s >= G / epsilon``
  (the exact sampler of :meth:`dpcore.noise.NoiseSource.discrete_laplace`,
  ``s`` = :func:`dpcore.noise.conservative_scale` of ``G / epsilon``, exact
  rational arithmetic rounded up) gives
  ``P(q + Z = y) / P(q' + Z = y) = exp((|y - q'| - |y - q|) / s) <= exp(G / s) <= e^epsilon``
  for every neighbour: epsilon-DP, **delta = 0** (the geometric mechanism of
  Ghosh, Roughgarden & Sundararajan 2009, which is the discrete analogue of the
  Laplace mechanism of Dwork et al. 2006 that Section 2.1.1 builds on).  The
  output is an integer.  No data-dependent quantity enters the noise.
* ``method="smooth_student_t"`` (issue 16 part 2): the same beta-smooth bound
  ``S(X)`` as ``smooth`` (with its own ``beta``) and Student's T noise,
  pure epsilon-DP, **delta = 0** (Bun & Steinke 2019, Section 3; next section).
  The output is an integer.
* ``method="smooth_lln"`` / ``"smooth_arsinh"`` (issue 16 part 2): the same
  smooth bound with ``beta = t`` and Bun & Steinke's concentrated-DP noise
  (Laplace log-normal ``X e^{sigma Y}`` / arsinh-normal ``sinh(sigma Y)/sigma``;
  Section 3), ``(1/2) eps_cdp^2``-CDP.  The ledger charges ``(epsilon, delta)``:
  the release runs at the largest zCDP ``rho`` that implies it
  (``rho + 2 sqrt(rho ln(1/delta)) <= epsilon``), ``t`` is chosen from
  ``(epsilon, delta)`` only, and the output is an exactly sampled integer
  (:mod:`dpcore.mechanisms.smooth_cdp_params`, :mod:`dpcore.noise.smooth_cdp`).
  Under the ledger's plain-sum composition this conversion costs far more
  than it saves for one count (at the demo's ``epsilon = 0.58``,
  ``delta = 1e-6``: ``eps_cdp = 0.109``); they pay off only when many such
  releases would be composed in zCDP, which the ledger does not do
  (BENCHMARKS.md, "Composition accounting").  Accuracy: the public bound at
  ``S = G`` from the distribution's tail (:meth:`OutlierCountMechanism.ci_half_width`).

The smooth-sensitivity Student's T mechanism (``smooth_student_t``)
--------------------------------------------------------------------
Bun & Steinke, "Average-Case Averages: Private Algorithms for Smooth
Sensitivity and Mean Estimation" (NeurIPS 2019), Section 3.  Let ``Z ~ T_nu``
(density ``p(z) ∝ (1 + z^2/nu)^{-(nu+1)/2}``, ``g(z) = -ln p(z) = (nu+1)/2
ln(1 + z^2/nu) + const``).  If ``|f(x) - f(y)| <= S(x)`` and ``S(x) <=
e^beta S(y)`` for all neighbours ``x ~ y``, then

    M(x) = f(x) + (S(x) / s) Z   is epsilon-DP,   epsilon = s (nu+1)/(2 sqrt(nu)) + (nu+1) beta.

*Derivation.*  ``M(x)`` has density ``(1/c) p((m - f)/c)`` at ``m``,
``c = S(x)/s``.  Go from ``(f(x), c(x))`` to ``(f(y), c(y))`` in two steps.
(i) Shift: ``|g'(z)| = (nu+1) |z| / (nu + z^2) <= (nu+1)/(2 sqrt(nu))``
(maximum at ``|z| = sqrt(nu)``), and the centre moves by
``|f(x) - f(y)| / c(x) <= S(x) / c(x) = s`` in ``z`` units, so the log-density
changes by at most ``s (nu+1)/(2 sqrt(nu))``.  (ii) Dilation: with
``c' = c e^tau``, ``|tau| = |ln(S(y)/S(x))| <= beta``, the log-density is
``-ln c - tau - g(w)``, ``w = (m - f) e^{-tau} / c``, whose ``tau``-derivative
is ``-1 + w g'(w)`` with ``w g'(w) = (nu+1) w^2 / (nu + w^2)`` in ``[0, nu+1)``;
so it changes by at most ``max(1, nu) |tau| <= (nu+1) beta`` (the charge uses
the paper's ``(nu+1) beta``; the tighter ``nu beta`` is not claimed).  The two
bounds add (triangle inequality), for both directions.  Here ``f = q_count``,
``S`` is the bound of :mod:`~dpcore.mechanisms.outlier_count.smooth_bound` (``S >= LS`` for all three
kinds of neighbour, and ``S(X) <= e^beta S(X')``), so the release is epsilon-DP
for the union relation.  **Rounding** to the nearest integer is
post-processing; it makes exact sampling possible
(:meth:`dpcore.noise.NoiseSource.student_t_integer`: inverse-CDF sampling of a
lazily read uniform against the algebraic T_2 CDF, rational arithmetic only).

*Parameters (public rule).*  ``nu = 2``: its CDF ``F(x) = 1/2 + x / (2 sqrt(2 + x^2))``
is algebraic, so every sampling decision and the published half-width are
exact rationals (another ``nu`` would need a transcendental CDF).  Its variance
is infinite, which does not matter: the product states accuracy as interval
half-widths, which are finite (95%: ``T = 4.3027``).  Then
``epsilon = 3 s / (2 sqrt 2) + 3 beta``, and half of epsilon goes to each term
(``STUDENT_T_SHIFT_SHARE``): ``s = sqrt(2) epsilon / 3`` (the largest float
with ``9 s^2 <= 2 epsilon^2`` exactly), ``beta = epsilon / 6``.  Why half: the
published half-width is ``~ T G / s`` (at ``S = G``; any split with more to
``s`` would narrow it, but only by a factor below 2), while on data the noise
is ``T S(X) / s`` and ``S(X) >= S_floor ~ 1 / (e beta)`` for ``G >> 1/beta``
(:meth:`OutlierCountMechanism.smooth_sensitivity_floor`), so the floor's
half-width is ``~ T / (e beta s)``, smallest when ``beta s`` is largest under
``3 s / (2 sqrt 2) + 3 beta = epsilon``: exactly when both terms get
``epsilon / 2``.  At ``epsilon = 0.5`` and ``k = 3``: ``s = 0.2357``,
``beta = 1/12``; published 95% half-width 128 (``d = 1``, ``G = 7``) and 347
(``d = 2``, ``G = 19``) against the discrete Laplace's 42 and 114 and the
smooth Gaussian bound's 740 and 2006; at its public floor (``S = 4.25`` resp.
``4.80``) about 78 and 88.  So it never beats ``global_laplace`` in what can be
published (about 3 x wider at ``S = G``: ``T 3/sqrt(2) = 9.13`` against
``ln 20 = 3.0`` units of ``G / epsilon``) but, unlike the smooth Gaussian, it
can beat it *on the data* whenever ``S(X)`` is small against ``G``
(BENCHMARKS.md, "Choosing the count method").
"""
from __future__ import annotations

from fractions import Fraction

from ..smooth_cdp_params import CDP_FAMILIES

__all__ = ["METHODS", "SPEC_METHODS", "GAUSSIAN_METHODS", "PURE_METHODS", "CDP_METHODS", "SMOOTH_METHODS",
           "STUDENT_T_SHIFT_SHARE"]

#: Concrete count mechanisms: smooth / global Gaussian (Theorems 2 / 1), the global discrete Laplace and the
#: smooth-sensitivity Student's T (Bun & Steinke 2019, Section 3).
METHODS = ("smooth", "global", "global_laplace", "smooth_student_t", "smooth_lln", "smooth_arsinh")
#: Methods the spec accepts: the concrete ones plus ``auto`` (:func:`choose_method`).
SPEC_METHODS = METHODS + ("auto",)
#: Methods whose privacy proof (Theorems 1-2, classical Gaussian analysis) needs 0 < epsilon < 1 and delta > 0.
GAUSSIAN_METHODS = ("smooth", "global")
#: Pure epsilon-DP methods (delta = 0, integer output, any finite epsilon > 0).
PURE_METHODS = ("global_laplace", "smooth_student_t")
#: Concentrated-DP smooth methods (Bun & Steinke 2019: Laplace log-normal, arsinh-normal), charged (epsilon, delta)
#: through the zCDP conversion of :mod:`dpcore.mechanisms.smooth_cdp_params`; integer output.
CDP_METHODS = tuple(CDP_FAMILIES)
#: Methods whose noise scales with the beta-smooth bound S(X) (each with its own beta).
SMOOTH_METHODS = ("smooth", "smooth_student_t") + CDP_METHODS
#: Share of epsilon that smooth_student_t spends on the shift term (the rest on the dilation term 3 beta).
STUDENT_T_SHIFT_SHARE = Fraction(1, 2)
