"""Differentially private count of distance-based outliers in a subspace.

Source: seed 002, Okada, Fukuchi, Kakizaki & Sakuma, "Differentially Private
Analysis of Outliers" (the paper).  Section/equation/theorem numbers below are
the paper's.

Query (Section 3.1-3.2)
-----------------------
Records are real vectors scaled to [0, 1] by the spec's *public* bounds
(:func:`dpcore.neighbors.scale_by_bounds`).  In subspace ``S`` the distance is
``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)`` (Section 3.1);
:func:`subspace_view` returns coordinates in which plain Euclidean distance is
``dist_S``.  ``N_S(X, r, x)`` (Definition 7, eq. 12) are the *other* records
within ``r`` (closed ball; duplicates are distinct records and count), and
``x`` is an outlier when ``|N_S| < k`` (Definition 8, eq. 13).
``q_count = |O_S(X, k, r)|`` (eq. 14).

Neighbour relation and privacy notion
-------------------------------------
The paper uses replace one record with ``N`` fixed (Section 2:
``H(X, X') = 1``, ``|X| = |X'| = N``).  In the pipeline ``X`` is the
*validated* table: a raw row replaced by one that fails validation is a
**removal** from it, a quarantined raw row replaced by a valid one an
**addition**, and ``N`` (the number of validated records) is private.  So
this implementation never uses ``N`` (the public bound
``G = k K_d^up + 1`` replaces Theorem 4's ``min(N, k K_d + 1)``: issue 15,
hole 7) and its guarantee is stated for the union relation

    X ~ X'  iff  X' is X with one record replaced, added or removed,

``neighbour = "replace-one"`` in the ledger (the budget relation it is charged
under; the union contains replace-one, so the charge is not smaller than the
guarantee needs).  Notion ``dp``: (epsilon, delta)-differential privacy
(Definition 1).  One release costs ``(epsilon, delta)``
(:meth:`OutlierCountMechanism.privacy_map`).  Not covered at that cost: a raw
replacement that changes *two* validated records (it creates or resolves a
duplicate record id, which quarantines every row sharing it): such pairs are
at distance 2 and get group privacy ``(2 epsilon, (1 + e^epsilon) delta)``.

*Sensitivity under add/remove* (``deg`` = degrees in ``X``).  Removing ``z``:
``q(X \ z) - q(X) = #{y in B(z, r), y != z, deg(y) = k} - [deg(z) < k]``;
adding ``z``: ``q(X + z) - q(X) = [z outlier in X + z] - #{y in B(z, r):
deg(y) = k - 1}``.  The two terms have opposite signs, so
``|Delta q| <= max(1, |B(z, r) ∩ V(k)|)`` resp. ``max(1, |B(z, r) ∩ V(k-1)|)``:
at most ``max(1, E(V(k)), E(V(k-1))) <= U(0)`` (below), and at most
``k K_d`` by Theorem 4's packing argument (the flipped records lie within
``r`` of ``z`` and have at most ``k`` neighbours counting ``z``), so ``<= G``.
Replace is a removal then an addition: Theorems 4-5 as in the paper.

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
  ``min(N, .)``; "Sensitivity under add/remove" above), so adding discrete
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
``S`` is the bound of "The smooth upper bound" below (``S >= LS`` for all three
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

Accuracy statements (public parameters only)
--------------------------------------------
:meth:`OutlierCountMechanism.ci_half_width` gives a half-width ``t`` with
``P(|released - q_count| <= t) >= level`` that depends on ``epsilon``,
``delta``, ``k`` and ``d`` only (never on the data), so it may be published
next to the count:

* discrete Laplace: the smallest integer ``t >= 0`` with
  ``P(|Z| > t) = 2 e^{-(t+1)/s} / (1 + e^{-1/s}) <= 1 - level`` (exact pmf,
  evaluated in 50-digit decimal arithmetic);
* global Gaussian: ``ceil(sigma z_{(1+level)/2})``;
* smooth Gaussian: ``sigma = S(X) / alpha`` is data-dependent and must never
  be stated; the published figure is the **bound** with ``S`` replaced by its
  public maximum ``G`` (``S <= G`` always), ``ceil(G z / alpha)``.
* smooth Student's T: likewise at ``S = G``: the exact smallest integer ``h``
  with ``P(|round((G/s) Z)| <= h) >= level`` (rational arithmetic,
  :func:`dpcore.accuracy.student_t2_half_width`; the rounding's half unit is
  part of it).

All half-widths come from :mod:`dpcore.accuracy` (one implementation each).
:meth:`OutlierCountMechanism.half_width_at` evaluates the same figure at any
value ``S`` of the smooth bound: at ``S = G`` it is the published bound above
(``ci_half_width`` is exactly that call), at ``S = S(X)`` the actual,
data-dependent half-width (internal only: benchmarks, never published).

Clamping the released count at 0 (post-processing) keeps the statement, since
``q_count >= 0``.

Choosing the method from public parameters (``method: auto``)
-------------------------------------------------------------
:func:`choose_method` picks, from ``(epsilon, delta, k, d)`` only, the method
with the smallest **publishable** 95% half-width above; ties go to
``global_laplace`` (delta = 0).  The smooth method's publishable half-width is
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

The smooth upper bound implemented here
---------------------------------------
Let ``deg(y)`` be the degree (eq. 19), ``V(j)`` the records of degree ``j``
(eq. 20) and, for ``t >= 0``,

    P_hi(t) = union_{i=-t..t} V(k + i),   P_lo(t) = union_{i=-t..t} V(k - 1 + i)

(the sets ``P`` of eqs. 45-46).  ``E(P) = max_x |P ∩ B(x, r)|`` is the largest
subset of ``P`` enclosable in a ball of radius ``r`` (Algorithm 1).  Then

    U(t) = min(G, max(f_t(P_hi(t)), f_t(P_lo(t))) + t + 1),
    S(X) = max_{t >= 0} exp(-t beta) U(t),                         (eq. 29/31)

with the public ``G = k K_d^up + 1`` (Theorem 4 without its ``min(N, .)``) and

    f_t(P) = min( max(E(P), |P| - L),  K_d^up (D_t + 1) ),

``L = size_limit`` and ``D_t = k + t`` for ``P_hi`` (``k - 1 + t`` for ``P_lo``).

*Why it is an upper bound on LS (eq. 6).*  Theorem 5 (eq. 23) gives
``LS <= max(max_x |CV(X, x, k, r)|, max_x |CV(X, x, k-1, r)|) + 1`` and
``|CV(X, x, k, r)| = |B(x, r) ∩ V(k)| <= E(P_hi(0))`` (resp. ``P_lo(0)``).
``f_t >= E``: ``max(E, .) >= E`` trivially, and every subset ``C`` of ``P``
inside a ball of radius ``r`` has ``|C| <= K_d (D + 1)`` when all its points
have degree ``<= D`` (greedily pick a point, discard it and its ``<= D``
neighbours; the picked points lie in one ball of radius ``r`` and are pairwise
more than ``r`` apart, so they subtend angles ``> 60 deg`` at its centre and
there are at most ``K_d`` of them).  ``LS <= G`` is Theorem 4 (its proof: the
removal side and the insertion side flip at most ``k K_d`` records each, with
opposite signs, plus the moved record itself).  For add/remove neighbours
``LS <= max(1, E(V(k)), E(V(k-1))) <= U(0)`` and ``<= G`` ("Sensitivity under
add/remove" above), so ``S(X) >= U(0)`` dominates ``LS`` for all three kinds.

*Why it is beta-smooth (eq. 7).*  If ``X' ~ X`` replaces, removes or adds
one record ``z``, every other record's degree changes by at most one, so
``P(t)(X) \\ {z} ⊆ P(t+1)(X')`` (the proof of Lemma 1; for an addition even
``P(t)(X) ⊆ P(t+1)(X')``).  ``f_t`` is
(i) monotone under set inclusion, (ii) drops by at most 1 when one point is
deleted (true of ``E``, of ``|P| - L`` and of a constant; preserved by max and
min), and (iii) ``f_t <= f_{t+1}`` pointwise.  Hence
``f_t(P(t)(X)) <= f_{t+1}(P(t+1)(X')) + 1``, i.e. ``U(t)(X) <= U(t+1)(X')``
(the cap ``G`` is the same constant on both sides: with Theorem 4's
``min(N, .)`` it is not -- a removal lowers it, three coincident records with
``k = 2`` give ``U(0) = 3`` but ``U(t) <= 2`` after a removal -- which is why
``N`` is not used), and ``S(X) <= exp(beta) S(X')`` (the argument behind
Theorem 6; Nissim et al. 2007, Section 3).  The Nissim-Raskhodnikova-Smith
proof (Theorem 2) needs only ``S >= LS`` and ``S(X) <= e^beta S(X')`` on the
neighbour relation in question, so the release is (epsilon, delta)-DP for the
union relation.

*The relaxation above the size limit (Section 4.3, Proposition 1).*
Algorithm 1 is exponential in ``|P|``.  For ``|P| <= L`` the term
``|P| - L <= 0`` is void and ``f = E`` exactly (Algorithm 1 with pruning).
For ``|P| > L`` the floor ``|P| - L`` lets the exact search be skipped whenever
a cheap certificate shows ``E(P) <= |P| - L`` (the largest ``2r``-ball around
a point of ``P`` holds at most ``|P| - L`` points; every set enclosable in
radius ``r`` lies in such a ball); otherwise the search only looks for sets
larger than the floor.  It is Proposition 1's ``|P|``-based bound shifted
down by ``L``.  **Switching on the raw size is not valid**: "``E(P)`` if
``|P| <= L`` else ``|P|``" breaks property (ii) -- with ``|P| = L + 1`` spread
points, deleting one drops the value from ``L + 1`` to ``E``, and the
smoothness inequality fails -- so the switch is built into ``f`` itself.

*Algorithm 2 / Proposition 2.*  ``S`` is evaluated for ``t = 0, 1, ...``;
the tail ``max_{t' >= t} e^{-t' beta} U(t')`` is bounded with Proposition 1
(``f_{t'}(P(t')) <= g(P(t0)) + |P(t') \\ P(t0)|`` from the last evaluated
``t0``, and ``<= min(|P(t')|, K_d (D + 1))``), and evaluation stops once the
bound is ``<= S_max`` (Proposition 2).  Terms whose own bound is
``<= S_max`` are skipped.  The value returned is therefore *exactly*
``S(X)`` defined above (never a truncation), which is what the smoothness
proof needs.  Since ``U(0) >= 1``, terms with ``e^{-t beta} G <= 1`` never
matter, so at most ``ceil(ln G / beta)`` steps are needed and degrees are only
counted up to ``k + that`` (saturating counts).

*Memory (issue 21).*  Every count runs on the distinct points weighted by
their multiplicities (:class:`dpcore.neighbors.PointMultiset`; an array of
records is aggregated first, the pipeline aggregates in the warehouse): a
record's degree is the number of copies of the points within ``r`` of its
point minus one, the same for every copy; the histograms of degrees and the
sizes ``|P|`` add multiplicities; only the records of the points whose degree
is near ``k`` are expanded, for Algorithm 1, and only when ``|P|`` is below
the public bound ``K_d (D_t + 1) + L``.  Memory and time grow with the
distinct points, not with the records, and every quantity equals the
row-by-row computation (``tests/test_neighbours_bounded.py`` keeps that
algorithm as its oracle).

*Cost (the scale path).*  Degrees are counted once, saturated at ``k + 1``
(exact for every record of degree ``<= k + 1``: all that ``t = 0, 1`` and
``q_count`` need); a later ``t`` that needs more re-counts only the saturated
records, with a larger cap.  :meth:`OutlierCountMechanism.release` takes both
``S(X)`` and ``q_count`` (``#{deg < k}``) from that one pass.  Counting uses
:func:`dpcore.neighbors.ball_counts`, which in ``d >= 8`` switches from the
KD-tree to blocked matrix products with an exact re-evaluation of pairs
within rounding of ``r``.  None of this changes a released quantity: the
degrees below the cap are exact either way, every ``U(t)`` is computed from
exact degrees, and the skipped terms are skipped only on valid upper bounds,
so ``S(X)``, ``q_count`` and the noise are exactly those of the plain
definition (tested against the KD-tree path with every term evaluated).

*Floating point.*  The scales are evaluated in IEEE double and rounded
toward more noise (issue 15): ``alpha`` is lowered and ``sigma`` raised by a
relative ``2**-40`` (:func:`dpcore.noise.upper_float`), the global sigma
likewise; ``beta`` used is ``lower_float(beta) - 2**-40`` (absolute), which
makes the float ``S`` (relative error ``< 1e-13``) a valid bound with
``S(X) <= e^beta S(X')`` for the exact ``beta`` and ``sigma alpha >= LS``
(tests compare with 50-digit evaluations).

Numerical notes: ball membership uses the closed ball as evaluated by
:func:`dpcore.neighbors.ball_counts`.  The enclosing-ball test accepts a set
when its smallest enclosing ball has radius ``<= r (1 + 1e-7)`` (and accepts
on a numerical failure of the miniball routine), i.e. it can only *over*-count
``E`` -- the safe direction.

Nothing in this module except :meth:`OutlierCountMechanism.release` is
private: all other functions return exact statistics that must stay in the
warehouse (DESIGN.md rule 6).
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from ..accuracy import discrete_laplace_half_width, gaussian_half_width, student_t2_half_width
from ..budget import PrivacyCost
from .params import real_between
from ..neighbors import PointMultiset, _as_matrix, ball_counts
from ..noise import NoiseSource, conservative_scale, lower_float, student_t2_shift_scale, upper_float
from .kissing import KISSING_NUMBER_BOUNDS, kissing_lower, kissing_upper
from .smooth_cdp_params import CDP_FAMILIES, SmoothCDPParameters

__all__ = [
    "KISSING_NUMBER_BOUNDS",
    "kissing_upper",
    "kissing_lower",
    "global_sensitivity_bounds",
    "public_global_sensitivity",
    "subspace_view",
    "neighbour_counts",
    "count_outliers",
    "enclosable",
    "algorithm1",
    "max_enclosable",
    "relaxed_enclosable_bound",
    "ExactSearchLimitError",
    "OutlierCountMechanism",
    "METHODS",
    "SPEC_METHODS",
    "CDP_METHODS",
    "choose_method",
]

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
#: Default confidence level of the published accuracy statement.
CI_LEVEL = 0.95
#: Absolute amount by which the smoothness parameter used is below Theorem 2's
#: beta (absorbs the floating-point error of S(X); :attr:`OutlierCountMechanism.beta`).
BETA_SLACK = 2.0**-40
#: Relative slack of the enclosing-ball test (over-accepts: safe direction).
_SEB_TOL = 1e-7
#: Default node budget of the exact branch-and-bound (Algorithm 1).
DEFAULT_NODE_LIMIT = 2_000_000


class ExactSearchLimitError(RuntimeError):
    """The exact search of Algorithm 1 exceeded its node budget.

    Raised instead of returning a bound that might not be a valid smooth upper
    bound; nothing is released. The message carries public settings only
    (never the size of the data-dependent point set: issue 15).  Lower ``size_limit`` (raises the floor
    ``|P| - size_limit`` and prunes more) or use ``method="global"``.
    """


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _as_points(XS, name: str = "XS") -> np.ndarray:
    """Records as a finite float64 ``(N, d)`` array with ``d >= 1``.

    The shared check of :func:`dpcore.neighbors._as_matrix` (one definition
    for the data checks of seeds 001 and 002).
    """
    return _as_matrix(XS, name, min_cols=1)


def _multiset(XS, name: str = "XS") -> PointMultiset:
    """``XS`` as distinct points with multiplicities (:class:`dpcore.neighbors.PointMultiset`).

    An array of records is aggregated (records with the same coordinates have
    the same degree); a :class:`PointMultiset` (e.g. aggregated in the
    warehouse) is used as it is.  Every count below runs on this form, so the
    in-memory array and the warehouse aggregate give the same numbers.
    """
    if isinstance(XS, PointMultiset):
        if XS.points.ndim != 2 or XS.points.shape[1] < 1:
            raise ValueError(f"{name} must have d >= 1 columns")
        return XS
    return PointMultiset.of_rows(_as_points(XS, name), name)


def _dimension(XS) -> int:
    """Number of coordinates ``d = |S|`` of records given as an array or a :class:`PointMultiset`."""
    return XS.d if isinstance(XS, PointMultiset) else _as_points(XS).shape[1]


def _point_degrees(ms: PointMultiset, r: float, cap: int | None = None) -> np.ndarray:
    """``deg`` (eq. 19) of each distinct point's records: copies within ``r``, minus the record itself."""
    if cap is None:
        return ball_counts(ms.points, ms.points, r, weights=ms.weights) - 1
    return ball_counts(ms.points, ms.points, r, weights=ms.weights, cap=int(cap) + 1) - 1


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(
            f"k must be an integer >= 1 (got {k!r}); it is the neighbour threshold of Definition 8, "
            "a record with fewer than k neighbours within r is an outlier, e.g. k=3"
        )
    return int(k)


def _check_r(r) -> float:
    ok = not isinstance(r, bool) and isinstance(r, numbers.Real) and math.isfinite(float(r)) and float(r) > 0
    if not ok:
        raise ValueError(
            f"r must be a finite number > 0 (got {r!r}); give the radius in the dist_S units of the "
            "public-bounds scaled data, e.g. r=0.13"
        )
    return float(r)


def global_sensitivity_bounds(d: int, k: int, N: int | None = None) -> tuple[int, int]:
    """Theorem 4 (eq. 18): bounds on the global sensitivity of ``q_count``.

    Parameters
    ----------
    d : int
        Dimension of the subspace (``|S|``), ``>= 1``.
    k : int
        Neighbour threshold, ``>= 1``.
    N : int or None
        Number of records, ``>= 1``, for the paper's statement
        ``min(N, .)``; ``None`` (what every mechanism here uses) omits the
        ``min(N, .)``.  **N of a validated table is private** (it moves when a
        replaced row fails validation), so no privacy-relevant quantity may use
        it (issue 15, hole 7): pass ``N`` only for reporting and tests.

    Returns
    -------
    (int, int)
        ``(2 d k + 1, k K_d + 1)`` (each ``min``-ed with ``N`` when given)
        where ``K_d`` is the table's **upper** bound on the kissing number (so
        the second entry is a valid upper bound on ``GS``, for replace-one
        *and* add/remove-one neighbours; in d = 1 both equal ``2k + 1``).

    Raises
    ------
    ValueError
        On non-integer or non-positive arguments.
    """
    args = (("d", d), ("k", k)) + ((("N", N),) if N is not None else ())
    for name, v in args:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    d, k = int(d), int(k)
    lo, up = 2 * d * k + 1, k * kissing_upper(d) + 1
    if N is None:
        return lo, up
    return min(int(N), lo), min(int(N), up)


def public_global_sensitivity(d: int, k: int) -> int:
    """``GS_up = k K_d^up + 1``: the public upper bound on ``GS`` of ``q_count``.

    A function of the public parameters ``d = |S|`` and ``k`` only.  It bounds
    ``|q_count(X) - q_count(X')|`` for every ``X'`` obtained from ``X`` by
    replacing, adding or removing one record (module docstring, "Neighbour
    relation"); unlike Theorem 4's ``min(N, .)`` it never depends on the
    private number of validated records.
    """
    return global_sensitivity_bounds(d, k)[1]


def subspace_view(X, subspace) -> np.ndarray:
    """Coordinates of ``X`` in subspace ``S`` scaled so Euclidean = ``dist_S``.

    Parameters
    ----------
    X : array_like, shape (N, D)
        Records already scaled to [0, 1] by the spec's *public* bounds.
    subspace : sequence of int
        Distinct column indices ``S`` (non-empty).

    Returns
    -------
    numpy.ndarray
        ``X[:, S] / sqrt(|S|)``, shape ``(N, |S|)``, float64: the Euclidean
        distance between rows equals ``dist_S`` of Section 3.1.

    Raises
    ------
    ValueError
        On an empty, duplicated or out-of-range subspace.
    """
    A = _as_points(X, "X")
    S = [int(i) for i in subspace]
    if not S:
        raise ValueError("subspace must name at least one attribute")
    if len(set(S)) != len(S):
        raise ValueError(f"subspace has repeated attributes: {S}")
    bad = [i for i in S if i < 0 or i >= A.shape[1]]
    if bad:
        raise ValueError(f"subspace attribute(s) {bad} out of range 0..{A.shape[1] - 1}")
    return A[:, S] / math.sqrt(len(S))


def neighbour_counts(XS, r, cap: int | None = None) -> np.ndarray:
    """``deg(x) = |N(X, r, x)|`` (eq. 19): other records within ``r``.

    Parameters
    ----------
    XS : array_like, shape (N, d), or PointMultiset
        Records in subspace coordinates (:func:`subspace_view`), or their
        distinct points with multiplicities.
    r : float
        Radius ``> 0`` (closed ball).
    cap : int or None
        ``None``: exact.  An int ``c >= 0``: saturating, ``min(deg, c)``
        (faster on dense data; a value ``< c`` is exact).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(N,)`` (one per record; for a PointMultiset one per
        distinct point, the degree of each of its records).  The record itself
        is excluded; duplicates of it are other records and count.

    Notes
    -----
    Counted over the distinct points weighted by multiplicity
    (:func:`dpcore.neighbors.ball_counts` with ``weights``): memory and time
    grow with the distinct points, not with the records.
    """
    r = _check_r(r)
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 0:
            raise ValueError(f"cap must be None or an int >= 0, got {cap!r}")
    if isinstance(XS, PointMultiset):
        return _point_degrees(_multiset(XS), r, cap)
    ms, inverse = PointMultiset.of_rows(_as_points(XS), "XS", return_inverse=True)
    return _point_degrees(ms, r, cap)[inverse]


def count_outliers(XS, k, r) -> int:
    """``q_count`` (eq. 14): records with fewer than ``k`` neighbours within ``r``.

    Parameters
    ----------
    XS : array_like, shape (N, d), or PointMultiset
        Records in subspace coordinates, or their distinct points with
        multiplicities.
    k : int
        ``>= 1``.
    r : float
        ``> 0``.

    Returns
    -------
    int
        ``|O_S(X, k, r)|`` (Definition 8): the multiplicities of the points
        whose records have fewer than ``k`` neighbours.  Exact; never release
        it raw.
    """
    k = _check_k(k)
    ms = _multiset(XS)
    deg = _point_degrees(ms, _check_r(r), k)
    return int(ms.weights[deg < k].sum())


# ---------------------------------------------------------------------------
# Algorithm 1: largest subset of P enclosable in a ball of radius r
# ---------------------------------------------------------------------------


def _two_r_eff(r: float) -> float:
    """Diameter bound of sets accepted by the (tolerant) enclosing-ball test."""
    return 2.0 * r * (1 + _SEB_TOL) * (1 + 1e-9)


def _seb(points: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Smallest enclosing ball (centre, squared radius) or None on failure."""
    import miniball

    u = np.unique(points, axis=0)
    if u.shape[0] == 1:
        return u[0].copy(), 0.0
    if u.shape[0] == 2:
        c = (u[0] + u[1]) / 2.0
        return c, float(np.sum((u[0] - c) ** 2))
    try:
        res = miniball.get_bounding_ball(u)
    except Exception:  # singular circumsphere systems on degenerate inputs
        return None
    if res is None:
        return None
    c, r2 = res
    c = np.asarray(c, dtype=np.float64)
    # report the radius actually needed around the returned centre
    r2 = max(float(r2), float(np.max(np.sum((u - c) ** 2, axis=1))))
    return c, r2


def enclosable(points, r) -> bool:
    """Whether ``points`` fit in a closed ball of radius ``r`` (``seb(C) <= r``).

    Parameters
    ----------
    points : array_like, shape (m, d)
    r : float

    Returns
    -------
    bool
        ``True`` when the smallest enclosing ball (Fischer-Gaertner-Kutz /
        Welzl, ``miniball``) has radius ``<= r (1 + 1e-7)``, or when the
        routine fails numerically (over-accepting only enlarges ``E``: the safe
        direction for an upper bound).
    """
    P = _as_points(points, "points")
    if P.shape[0] <= 1:
        return True
    lim = (r * (1 + _SEB_TOL)) ** 2
    res = _seb(P)
    if res is None:
        return True
    return res[1] <= lim


def algorithm1(P, r) -> int:
    """Algorithm 1 of the paper, verbatim (no pruning beyond ``seb``).

    Recursive include/exclude search for the largest subset ``C ⊆ P`` with
    ``seb(C) <= r`` -- the value of eq. (45)/(46).  ``O(2^|P|)`` calls of
    ``seb``; for tests and tiny ``P`` only (use :func:`max_enclosable`).

    Parameters
    ----------
    P : array_like, shape (m, d)
    r : float

    Returns
    -------
    int
        ``max_x |P ∩ B(x, r)|`` (0 for empty ``P``).
    """
    P = _as_points(P, "P") if len(P) else np.zeros((0, 1))
    m = P.shape[0]

    def E(C: list[int], i: int) -> int:
        if C and not enclosable(P[C], r):
            return 0
        best = len(C)
        if i < m:
            best = max(best, E(C + [i], i + 1), E(C, i + 1))
        return best

    return E([], 0)


def max_enclosable(P, r, floor: int = 0, node_limit: int = DEFAULT_NODE_LIMIT) -> int:
    """``max(E(P), floor)`` exactly, by Algorithm 1 with pruning.

    Parameters
    ----------
    P : array_like, shape (m, d)
        Points (duplicates allowed; they count separately).
    r : float
        Ball radius ``> 0``.
    floor : int, default 0
        Only subsets larger than ``floor`` are searched for.
    node_limit : int
        Budget of search nodes; exceeding it raises.

    Returns
    -------
    int
        ``max(E(P), floor)`` with ``E(P) = max_x |P ∩ B(x, r)|``.

    Raises
    ------
    ExactSearchLimitError
        If the search needs more than ``node_limit`` nodes.

    Notes
    -----
    Same search space as Algorithm 1 (subsets with ``seb <= r``, which is
    hereditary), with exact pruning: (a) a set enclosable in radius ``r`` has
    diameter ``<= 2r``, so the search runs per connected component of the
    ``2r``-graph and only extends a set by points within ``2r`` of all its
    members; (b) branch-and-bound on ``|C| + |candidates| <= best``; (c) the
    lower bound ``max_y |P ∩ B(y, r)|`` (balls centred at points) seeds
    ``best``; (d) a point within ``r`` of a known enclosing centre of ``C`` is
    accepted without a new ``seb`` call.
    """
    P = _as_points(P, "P") if len(P) else np.zeros((0, 1))
    r = _check_r(r)
    m = P.shape[0]
    best = max(int(floor), 0)
    if m <= best:
        return best
    best = max(best, int(ball_counts(P, P, r).max()))
    if m <= best:
        return best
    tree = cKDTree(P)
    two_r = _two_r_eff(r)
    pairs = tree.query_pairs(two_r, output_type="ndarray")
    if pairs.size == 0:
        return max(best, 1)
    adj = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(m, m))
    ncomp, labels = connected_components(adj, directed=False)
    sizes = np.bincount(labels, minlength=ncomp)
    nodes = 0
    lim2 = (r * (1 + _SEB_TOL)) ** 2
    for comp in np.argsort(-sizes):
        if sizes[comp] <= best:
            break
        idx = np.flatnonzero(labels == comp)
        Q = P[idx]
        D2 = np.sum((Q[:, None, :] - Q[None, :, :]) ** 2, axis=2)
        A = D2 <= two_r**2
        deg = A.sum(axis=1)  # includes self
        if deg.max() <= best:
            continue
        order = np.argsort(-deg, kind="stable")
        order = order[deg[order] > best]

        def expand(cur: list[int], centre: np.ndarray, cand: np.ndarray) -> None:
            nonlocal best, nodes
            for pos in range(cand.size):
                if len(cur) + cand.size - pos <= best:
                    return
                p = int(cand[pos])
                nodes += 1
                if nodes > node_limit:
                    raise ExactSearchLimitError(
                        f"exact Algorithm 1 exceeded its node budget ({node_limit} search nodes, a public setting); "
                        "lower size_limit or use method='global'"
                    )
                new = cur + [p]
                if np.sum((Q[p] - centre) ** 2) <= r * r:
                    c_new = centre
                else:
                    res = _seb(Q[new])
                    if res is not None and res[1] > lim2:
                        continue
                    # numerical failure (res None): accept -- over-counting is safe
                    c_new = res[0] if res is not None else Q[p]
                if len(new) > best:
                    best = len(new)
                rest = cand[pos + 1 :]
                rest = rest[A[p, rest]]
                expand(new, c_new, rest)

        for pos in range(order.size):
            p = int(order[pos])
            rest = order[pos + 1 :]
            rest = rest[A[p, rest]]
            if 1 + rest.size <= best:
                continue
            expand([p], Q[p].copy(), rest)
    return best


def relaxed_enclosable_bound(P, r, size_limit: int, node_limit: int = DEFAULT_NODE_LIMIT) -> int:
    """``g_L(P) = max(E(P), |P| - L)``: exact below the size limit, valid above.

    Parameters
    ----------
    P : array_like, shape (m, d)
    r : float
    size_limit : int
        ``L >= 1``.  For ``|P| <= L`` the result is ``E(P)`` exactly.
    node_limit : int
        Budget of the exact search.

    Returns
    -------
    int
        ``max(E(P), |P| - L)``.

    Notes
    -----
    ``g_L >= E``, is monotone under inclusion and drops by at most one when a
    point is deleted, which is what the smoothness proof (module docstring)
    needs.  For ``|P| > L`` the exact search is skipped when the largest
    ``2r``-ball centred at a point of ``P`` holds at most ``|P| - L`` points
    (every set in a ball of radius ``r`` lies in such a ball).
    """
    if len(P) == 0:
        return 0
    P = _as_points(P, "P")
    L = int(size_limit)
    m = P.shape[0]
    thr = m - L
    if thr >= 1:
        h = int(ball_counts(P, P, _two_r_eff(r), cap=thr + 1).max())
        if h <= thr:
            return thr
    return max_enclosable(P, r, floor=max(thr, 0), node_limit=node_limit)


# ---------------------------------------------------------------------------
# accuracy statements (public: noise distributions only, no data)
# ---------------------------------------------------------------------------

def _alpha_of_level(level) -> Fraction:
    """``1 - level`` as an exact rational (``level`` read through its decimal text: 0.95 gives 1/20)."""
    if not real_between(level, 0, 1):
        raise ValueError(f"level must be a number with 0 < level < 1 (got {level!r}), e.g. level=0.95")
    return 1 - Fraction(repr(float(level)))


# ---------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------


class OutlierCountMechanism:
    """(epsilon, delta)-DP (or pure epsilon-DP) count of distance-based outliers (Section 4).

    Parameters
    ----------
    k : int
        Neighbour threshold ``>= 1`` (Definition 8).
    r : float
        Radius ``> 0`` in ``dist_S`` units of the public-bounds scaled data.
    epsilon : float, int or Fraction
        Gaussian methods: ``0 < epsilon < 1`` (Theorems 1 and 2 rest on the
        classical Gaussian analysis, stated for epsilon < 1).
        ``global_laplace``, ``smooth_student_t``: any finite ``epsilon > 0``.
    delta : float
        Gaussian methods: ``0 < delta < 1``.  ``global_laplace``,
        ``smooth_student_t``: ``0`` (pure DP).
    method : {"smooth", "global", "global_laplace", "smooth_student_t", "smooth_lln", "smooth_arsinh"}
        ``"smooth"``: Theorem 2 with the beta-smooth bound of Sections 4.2-4.3
        (module docstring).  ``"global"``: Theorem 1 with ``GS`` upper bound of
        Theorem 4 (the Gaussian baseline).  ``"global_laplace"``: discrete
        Laplace with scale ``G / epsilon`` (pure epsilon-DP, integer output).
        ``"smooth_student_t"``: Bun & Steinke's Student's T (``nu = 2``) with
        the beta-smooth bound, ``beta = epsilon / 6``, ``s = sqrt(2) epsilon / 3``
        (pure epsilon-DP, integer output; module docstring).
        ``"smooth_lln"``, ``"smooth_arsinh"``: Bun & Steinke's concentrated-DP
        distributions with the smooth bound, charged ``(epsilon, delta)``
        (``0 < delta < 1``) through the zCDP conversion; integer output.
        ``"auto"`` is resolved from public parameters by
        :meth:`for_dimension` / :func:`choose_method` before a mechanism is built.
    size_limit : int, default 12
        ``L``: Algorithm 1 runs exactly on candidate sets of at most ``L``
        points; above, the valid relaxation ``max(E(P), |P| - L)`` is used.
    node_limit : int
        Search-node budget of the exact search (raises, releasing nothing).

    Notes
    -----
    * Input: ``XS`` = the records in subspace coordinates
      (:func:`subspace_view`); ``d = XS.shape[1] = |S|``.
    * Output: one real number, ``q_count + N(0, sigma^2)`` (Gaussian methods),
      or one integer ``q_count + Z``, ``Z`` discrete Laplace (``global_laplace``),
      or one integer ``round(q_count + (S(X)/s) Z)``, ``Z ~ T_2`` (``smooth_student_t``).
    * Neighbour relation: one record replaced, added or removed (module
      docstring; ``N`` is never used); charged as ``neighbour = "replace-one"``;
      notion ``dp``; cost of one release ``(epsilon, delta)``, ``(epsilon, 0)``
      for ``global_laplace`` and ``smooth_student_t``.
    * ``sigma``: smooth: ``S_beta(X) / alpha`` with
      ``alpha = epsilon / (5 sqrt(2 ln(2/delta)))``,
      ``beta = epsilon / (4 (p + ln(2/delta)))``, ``p = 1`` (Theorem 2, eq. 9).
      Global: ``sqrt(2 ln(2/delta)) GS_up / epsilon`` (Theorem 1, eq. 4).
      Note ``sigma`` itself depends on the data in the smooth method and must
      not be published separately from the noisy count (it is not private).
      Discrete Laplace: scale ``s = G / epsilon`` rounded up
      (:meth:`laplace_scale`), public.  Student's T: scale
      ``S_beta(X) / s`` (:meth:`student_t_scale`), data-dependent, internal.
    * Accuracy: :meth:`ci_half_width` (public parameters only).
    * The constructor only stores; :meth:`validate` checks.
    """

    notion = "dp"
    neighbour = "replace-one"
    output_dimension = 1

    def __init__(self, k: int, r: float, epsilon, delta, method: str = "smooth", size_limit: int = 12,
                 node_limit: int = DEFAULT_NODE_LIMIT):
        self.k = k
        self.r = r
        self.epsilon = epsilon
        self.delta = delta
        self.method = method
        self.size_limit = size_limit
        self.node_limit = node_limit

    # -- metadata -------------------------------------------------------------

    def validate(self) -> None:
        """Check the parameters.

        Raises
        ------
        ValueError
            Naming the parameter, its allowed range and how to fix it.
        """
        _check_k(self.k)
        _check_r(self.r)
        if self.method not in METHODS:
            hint = " ('auto' is resolved first: OutlierCountMechanism.for_dimension)" if self.method == "auto" else ""
            raise ValueError(f"method must be one of {METHODS} (got {self.method!r}){hint}")
        e = self.epsilon
        dl = self.delta
        if self.method in PURE_METHODS:
            if not real_between(e, 0):
                raise ValueError(
                    f"epsilon must be a finite number > 0 (got {e!r}) for method={self.method!r}; pass e.g. epsilon=0.5"
                )
            if isinstance(dl, bool) or not isinstance(dl, numbers.Real) or dl != 0:
                raise ValueError(
                    f"delta must be 0 for method={self.method!r} (got {dl!r}): the mechanism is pure epsilon-DP; "
                    "pass delta=0"
                )
        elif self.method in CDP_METHODS:
            if not real_between(e, 0):
                raise ValueError(
                    f"epsilon must be a finite number > 0 (got {e!r}) for method={self.method!r}; pass e.g. epsilon=0.5"
                )
            if not real_between(dl, 0, 1):
                raise ValueError(
                    f"delta must be a number with 0 < delta < 1 (got {dl!r}) for method={self.method!r}: the "
                    "concentrated-DP guarantee is converted to (epsilon, delta)-DP; use e.g. delta=1e-6"
                )
        else:
            if not real_between(e, 0, 1):
                raise ValueError(
                    f"epsilon must be a number with 0 < epsilon < 1 (got {e!r}); the Gaussian mechanisms of "
                    "Theorems 1-2 are proved for epsilon < 1. Pass e.g. epsilon=0.5, split a larger budget "
                    "over several releases, or use method='global_laplace' (any epsilon > 0)"
                )
            if not real_between(dl, 0, 1):
                raise ValueError(
                    f"delta must be a number with 0 < delta < 1 (got {dl!r}); use a small value such as "
                    "delta=1e-6 (well below 1/N)"
                )
        L = self.size_limit
        if isinstance(L, bool) or not isinstance(L, numbers.Integral) or L < 1:
            raise ValueError(
                f"size_limit must be an integer >= 1 (got {L!r}); it is the largest candidate set on which "
                "Algorithm 1 runs exactly, e.g. size_limit=12"
            )
        nl = self.node_limit
        if isinstance(nl, bool) or not isinstance(nl, numbers.Integral) or nl < 1:
            raise ValueError(f"node_limit must be an integer >= 1 (got {nl!r})")
        if self.method in SMOOTH_METHODS and not self._beta_float() > 4 * BETA_SLACK:
            raise ValueError(
                f"epsilon={e!r} is too small for method={self.method!r} with delta={dl!r} (its smoothness parameter "
                "beta would fall below 2**-38); use a larger epsilon or method='global_laplace'"
            )

    @classmethod
    def for_dimension(cls, d: int, k: int, r: float, epsilon, delta, method: str = "auto", size_limit: int = 12,
                      node_limit: int = DEFAULT_NODE_LIMIT) -> "OutlierCountMechanism":
        """The mechanism for a subspace of dimension ``d``, resolving ``method="auto"`` from public parameters.

        Parameters
        ----------
        d : int
            Subspace dimension ``|S| >= 1`` (public: the released selection fixes it).
        k, r, size_limit, node_limit
            As for the constructor.
        epsilon : float or Fraction
            Epsilon of this count.
        delta : float
            The delta the owner allows for this count (``> 0`` lets ``auto``
            consider the Gaussian methods; ``0`` restricts it to the pure ones,
            ``global_laplace``).  A ``global_laplace`` or ``smooth_student_t``
            mechanism is built with ``delta = 0`` whatever is passed: it spends none.
        method : {"auto", "smooth", "global", "global_laplace", "smooth_student_t"}
            ``auto``: :func:`choose_method` (public parameters only).

        Returns
        -------
        OutlierCountMechanism
            Not yet validated (call :meth:`validate`).
        """
        if method == "auto":
            method = choose_method(epsilon, delta, k, d)
        return cls(k, r, epsilon, 0 if method in PURE_METHODS else delta, method=method, size_limit=size_limit,
                   node_limit=node_limit)

    @property
    def name(self) -> str:
        """str: ``outlier-count-`` + the method with ``-`` for ``_`` (e.g. ``outlier-count-smooth-student-t``)."""
        return f"outlier-count-{str(self.method).replace('_', '-')}"

    @property
    def integer_output(self) -> bool:
        """bool: whether the release is an integer (``global_laplace``, ``smooth_student_t``, ``smooth_lln``, ``smooth_arsinh``)."""
        return self.method in PURE_METHODS or self.method in CDP_METHODS

    @property
    def cdp(self) -> SmoothCDPParameters:
        """The public parameters (``rho``, ``t``, ``sigma``, ``s``) of ``smooth_lln`` / ``smooth_arsinh``."""
        self.validate()
        if self.method not in CDP_METHODS:
            raise ValueError(f"cdp is defined for the methods {CDP_METHODS} only (method={self.method!r})")
        return SmoothCDPParameters(self.method, self.epsilon, self.delta)

    def privacy_map(self) -> PrivacyCost:
        """Cost of one release, notion ``dp``.

        Returns
        -------
        PrivacyCost
            Exact ``(epsilon, delta)`` for one record replaced, added or
            removed (Theorems 1 and 2); ``(epsilon, 0)`` for
            ``global_laplace`` (module docstring: pmf ratio ``<= e^{G/s}``,
            ``s >= G / epsilon``) and ``smooth_student_t`` (module docstring:
            ``3 s / (2 sqrt 2) + 3 beta <= epsilon``).
        """
        self.validate()
        if self.method in PURE_METHODS:
            return PrivacyCost(self.epsilon, 0)
        return PrivacyCost(self.epsilon, self.delta)

    @property
    def _ln2d(self) -> float:
        return math.log(2.0 / float(self.delta))

    def _beta_float(self) -> float:
        """The method's smoothness parameter in floating point (before :attr:`beta` lowers it).

        ``smooth``: ``epsilon / (4 (p + ln(2/delta)))``, ``p = 1`` (Theorem 2,
        eq. 9).  ``smooth_student_t``: ``(1 - STUDENT_T_SHIFT_SHARE) epsilon / 3``
        = ``epsilon / 6`` (the dilation term ``(nu + 1) beta`` with ``nu = 2``
        gets half of epsilon; module docstring).  Other methods have none.
        """
        if self.method == "smooth_student_t":
            return float(self.epsilon) * float(1 - STUDENT_T_SHIFT_SHARE) / 3.0
        if self.method in CDP_METHODS:
            return SmoothCDPParameters(self.method, self.epsilon, self.delta).t
        if self.method != "smooth":
            raise ValueError(f"beta is defined for the smooth methods {SMOOTH_METHODS} only (method={self.method!r})")
        return float(self.epsilon) / (4.0 * (self.output_dimension + self._ln2d))

    @property
    def alpha(self) -> float:
        """float: a lower bound on ``epsilon / (5 sqrt(2 ln(2/delta)))`` (Theorem 2).

        Evaluated in floating point and lowered by :func:`dpcore.noise.lower_float`
        (relative margin ``2**-40``), so ``S / alpha`` never undershoots the exact
        ``S / alpha`` (more noise, never less).
        """
        self.validate()
        return lower_float(float(self.epsilon) / (5.0 * math.sqrt(2.0 * self._ln2d)))

    @property
    def beta(self) -> float:
        """float: the smoothness parameter used, below the method's exact beta (:meth:`_beta_float`).

        ``smooth``: ``beta = epsilon / (4 (p + ln(2/delta)))``, ``p = 1``;
        ``smooth_student_t``: ``beta = epsilon / 6`` (a float epsilon read at
        either of its binary or decimal values: they differ by less than
        ``2**-53`` relative, far inside the ``2**-40`` margin below).
        ``beta_used = lower_float(beta) - BETA_SLACK`` (``BETA_SLACK = 2**-40``,
        absolute).  A smaller beta gives a larger (still valid) bound, and the
        slack ``e^(beta - beta_used) >= 1 + 2**-40`` absorbs the relative
        floating-point error of ``S(X)`` (``< 1e-13``: at most ``~ln(G) + 10``
        ulp from ``exp(-t beta)``, the product with ``U(t)`` and the max), so
        the float ``S`` actually used satisfies ``S(X) <= e^beta S(X')`` for the
        exact ``beta`` the privacy proof charges (module docstring, "Floating point").
        """
        self.validate()
        return lower_float(self._beta_float()) - BETA_SLACK

    def global_sensitivity_upper(self, XS=None) -> int:
        """``k K_d^up + 1`` (:func:`public_global_sensitivity`) for the subspace dimension ``d``.

        Parameters
        ----------
        XS : array_like, shape (N, d), or int
            The records (only their dimension ``d`` is used) or ``d`` itself.

        Returns
        -------
        int
            The public bound; **not** ``min(N, .)``: the number of validated
            records is private (issue 15, hole 7).
        """
        d = int(XS) if isinstance(XS, numbers.Integral) else _dimension(XS)
        return public_global_sensitivity(d, int(self.k))

    # -- smooth sensitivity ---------------------------------------------------

    def _degrees(self, ms: PointMultiset, need: int,
                 prev: tuple[np.ndarray, int] | None = None) -> tuple[np.ndarray, int]:
        """Degrees of each distinct point's records, exact up to at least ``need`` (saturating above).

        Parameters
        ----------
        ms : PointMultiset
            Distinct points and multiplicities (``N = ms.n`` records).
        need : int
        prev : (deg, exact_max) or None
            Degrees already counted; only the points whose degree was
            saturated (``> exact_max``) are counted again.

        Returns
        -------
        (numpy.ndarray, int)
            ``(deg, exact_max)``, one degree per distinct point: ``deg[i]`` is
            exact when ``<= exact_max``; a larger stored value means "at least
            that".
        """
        N = ms.n
        cap, exact_max = (None, N - 1) if need >= N - 2 else (need + 2, need)  # +1: the record itself
        if prev is None:
            return ball_counts(ms.points, ms.points, float(self.r), cap=cap, weights=ms.weights) - 1, exact_max
        deg, old_max = prev
        deg = deg.copy()
        redo = np.flatnonzero(deg > old_max)
        if redo.size:
            deg[redo] = ball_counts(ms.points, ms.points[redo], float(self.r), cap=cap, weights=ms.weights) - 1
        return deg, exact_max

    def _f(self, ms: PointMultiset, idx: np.ndarray, Kcap: int) -> tuple[int, int]:
        """(f_t(P), g_L(P)) with f_t = min(g_L, Kcap) for the records ``P`` of the points ``idx``; g_L only as needed.

        ``|P|`` is the sum of the multiplicities; the records are expanded
        (each point repeated by its multiplicity) only when Algorithm 1 runs,
        i.e. when ``|P| < Kcap + L``, a bound from public parameters.
        """
        m = int(ms.weights[idx].sum())
        L = int(self.size_limit)
        if m == 0:
            return 0, 0
        if m - L >= Kcap:
            return Kcap, m  # g_L >= m - L >= Kcap; m is an upper bound on g_L for the anchors
        g = relaxed_enclosable_bound(ms.expand(idx), self.r, L, node_limit=int(self.node_limit))
        return min(g, Kcap), g

    def _terms(self, XS, full: bool = False):
        """Algorithm 2 with Propositions 1-2.

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset
            Records in subspace coordinates, or their distinct points with
            multiplicities (the same result: degrees, histograms and set
            sizes weight each point by its multiplicity; the records of the
            few points whose degree is near ``k`` are expanded for Algorithm 1).
        full : bool
            Evaluate every term ``U(t)`` (no Proposition 2 stop; tests).

        Returns
        -------
        (float, int, dict, int)
            ``(S, U(0), {t: U(t) evaluated}, q_count)``.  ``q_count`` (eq. 14)
            comes from the same degree pass as ``S`` (degrees are counted once
            per release).
        """
        self.validate()
        ms = _multiset(XS)
        N, d = ms.n, ms.d
        w = ms.weights
        k = int(self.k)
        if N == 0:
            return 0.0, 0, {}, 0
        G = self.global_sensitivity_upper(d)  # public: k K_d + 1, never min(N, .)
        beta = self.beta
        K = kissing_upper(d)
        # U(0) >= 1, so terms with exp(-t beta) G <= 1 never matter.
        horizon = int(math.ceil(math.log(G) / beta)) + 1 if G > 1 else 0
        ts = np.arange(horizon + 1)
        kc_hi = K * (k + ts + 1)
        kc_lo = K * (k + ts)
        decay = np.exp(-beta * ts)

        def sizes(deg: np.ndarray, exact_max: int):
            top = exact_max + 1
            hist = np.zeros(top + 1, dtype=np.int64)
            np.add.at(hist, np.minimum(deg, top), w)
            csum = np.concatenate([[0], np.cumsum(hist)])  # csum[j] = #{deg < j}, deg>=top lumped

            def size(lo: int, hi: int) -> int:
                lo = max(lo, 0)
                if hi > exact_max:  # unknown above exact_max: upper bound #{deg >= min(lo, top)}
                    return int(N - csum[min(lo, top)])  # (lo > top happens on tables smaller than k)
                return int(csum[hi + 1] - csum[lo])

            s_hi = np.array([size(k - t, k + t) for t in ts])
            s_lo = np.array([size(k - 1 - t, k - 1 + t) for t in ts])
            return s_hi, s_lo

        # lazily counted degrees: exact up to k + 1 (all that t = 0, 1 need); extended, for the
        # saturated records only, when a larger t is evaluated
        deg, exact_max = self._degrees(ms, k + 1)
        q_count = int(w[deg < k].sum())  # deg < k <= exact_max: exact
        size_hi, size_lo = sizes(deg, exact_max)
        anc_hi = anc_lo = None  # Proposition 1 anchors (t0, upper bound on g_L(P(t0)))
        S_max = 0.0
        U0 = 0
        evaluated: dict[int, int] = {}
        for t in range(horizon + 1):
            b_hi = np.minimum(size_hi[t:], kc_hi[t:])
            b_lo = np.minimum(size_lo[t:], kc_lo[t:])
            if anc_hi is not None:
                t0, g0 = anc_hi
                b_hi = np.minimum(b_hi, g0 + size_hi[t:] - size_hi[t0])
                t0, g0 = anc_lo
                b_lo = np.minimum(b_lo, g0 + size_lo[t:] - size_lo[t0])
            ub = np.minimum(G, np.maximum(b_hi, b_lo) + ts[t:] + 1) * decay[t:]
            if not full and t > 0 and ub.max() <= S_max:  # Proposition 2: stop
                break
            if not full and t > 0 and ub[0] <= S_max:  # this term cannot raise the max
                continue
            if k + t > exact_max:
                deg, exact_max = self._degrees(ms, max(2 * (k + t), k + 16), prev=(deg, exact_max))
                new_hi, new_lo = sizes(deg, exact_max)
                # anchors need the exact sizes at t0 (<= old exact range: unchanged)
                size_hi, size_lo = new_hi, new_lo
            idx_hi = np.flatnonzero((deg >= k - t) & (deg <= k + t))
            idx_lo = np.flatnonzero((deg >= k - 1 - t) & (deg <= k - 1 + t))
            f_hi, g_hi = self._f(ms, idx_hi, int(kc_hi[t]))
            f_lo, g_lo = self._f(ms, idx_lo, int(kc_lo[t]))
            anc_hi, anc_lo = (t, g_hi), (t, g_lo)
            U = int(min(G, max(f_hi, f_lo) + t + 1))
            evaluated[t] = U
            if t == 0:
                U0 = U
            S_max = max(S_max, math.exp(-beta * t) * U)
            if S_max >= G:  # nothing can exceed G
                break
        return S_max, U0, evaluated, q_count

    def local_sensitivity_bound(self, XS) -> int:
        """``U(0)``: Theorem 5's bound (via ``V``, ``CV`` and Algorithm 1), capped by Theorem 4.

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset

        Returns
        -------
        int
            ``min(G, max(f_0(P_hi(0)), f_0(P_lo(0))) + 1) >= LS(X)`` (eq. 23);
            exact Algorithm 1 when the candidate sets have at most
            ``size_limit`` points.
        """
        self.validate()
        ms = _multiset(XS)
        if ms.n == 0:
            return 0
        k = int(self.k)
        deg = _point_degrees(ms, float(self.r), k + 1)
        G = self.global_sensitivity_upper(ms.d)  # noqa: N806  (public, no N)
        K = kissing_upper(ms.d)
        f_hi, _ = self._f(ms, np.flatnonzero(deg == k), K * (k + 1))
        f_lo, _ = self._f(ms, np.flatnonzero(deg == k - 1), K * k)
        return int(min(G, max(f_hi, f_lo) + 1))

    def smooth_sensitivity(self, XS) -> float:
        """The beta-smooth upper bound ``S(X)`` (Theorem 6, Algorithms 1-2).

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset

        Returns
        -------
        float
            ``max_t exp(-t beta) U(t)`` (module docstring), with the
            method's :attr:`beta` (``epsilon / (4 (1 + ln(2/delta)))`` for
            ``smooth``, ``epsilon / 6`` for ``smooth_student_t``); ``>= LS(X)`` and
            ``S(X) <= e^beta S(X')`` for every neighbour ``X'`` (one record
            replaced, added or removed).

        Raises
        ------
        ExactSearchLimitError
            If an exact search exceeds ``node_limit`` (nothing released).
        """
        return float(self._terms(XS)[0])

    def noise_sigma(self, XS) -> float:
        """Standard deviation of the noise for ``XS``.

        Returns
        -------
        float
            Smooth: ``S(X) / alpha`` (Theorem 2).  Global:
            ``sqrt(2 ln(2/delta)) GS_up / epsilon`` (Theorem 1) with the public
            ``GS_up = k K_d + 1``.  Both are evaluated in floating point and
            rounded up (:func:`dpcore.noise.upper_float`, relative margin
            ``2**-40``): never below the exact formula.  Data-dependent in the
            smooth case: internal only.  ``global_laplace``: the standard
            deviation ``sqrt(2 a) / (1 - a)``, ``a = e^{-1/s}``, of the discrete
            Laplace with the scale :meth:`laplace_scale` (public).
            ``smooth_student_t``: the **scale** ``c = S(X) / s`` of the T_2
            noise (:meth:`student_t_scale`; its variance is infinite for
            ``nu = 2``), data-dependent: internal only.
        """
        self.validate()
        d = _dimension(XS)
        if self.method == "global":
            return self.global_sigma(d)
        if self.method == "global_laplace":
            return self.laplace_sd(d)
        if self.method == "smooth_student_t":
            return float(self.student_t_scale(self.smooth_sensitivity(XS)))
        if self.method in CDP_METHODS:
            return self.cdp.sd(self.smooth_sensitivity(XS))
        return self._smooth_sigma(self.smooth_sensitivity(XS))

    def global_sigma(self, d: int) -> float:
        """The global Gaussian method's sigma for subspace dimension ``d`` (public: no data needed).

        Returns
        -------
        float
            An upper bound (relative margin ``2**-40``) on
            ``sqrt(2 ln(2/delta)) (k K_d + 1) / epsilon``.
        """
        self.validate()
        G = self.global_sensitivity_upper(int(d))
        return upper_float(math.sqrt(2.0 * self._ln2d) * G / float(self.epsilon))

    def laplace_scale(self, d: int) -> float:
        """The discrete Laplace scale ``s`` for dimension ``d``: the smallest float ``>= G / epsilon``.

        Exact rational arithmetic (:func:`dpcore.noise.conservative_scale`; a
        float epsilon is read at the smaller of its binary and decimal values),
        so ``G / s <= epsilon`` exactly.  Public.  Only for ``global_laplace``.
        """
        self.validate()
        if self.method != "global_laplace":
            raise ValueError(f"laplace_scale is defined for method='global_laplace' only (method={self.method!r})")
        return conservative_scale(self.global_sensitivity_upper(int(d)), self.epsilon)

    @property
    def student_t_s(self) -> float:
        """float: ``s`` of ``smooth_student_t``: the largest float with ``3 s / (2 sqrt 2) <= epsilon / 2``.

        Exact rational check (:func:`dpcore.noise.student_t2_shift_scale` with
        ``STUDENT_T_SHIFT_SHARE = 1/2``), so the shift term never exceeds its
        half of epsilon.  Public.
        """
        self.validate()
        if self.method != "smooth_student_t":
            raise ValueError(f"student_t_s is defined for method='smooth_student_t' only (method={self.method!r})")
        return student_t2_shift_scale(self.epsilon, STUDENT_T_SHIFT_SHARE)

    def student_t_scale(self, S) -> Fraction:
        """The exact scale ``c = S / s`` of the T_2 noise for a smooth bound ``S`` (a float: the one computed).

        Returns
        -------
        Fraction
            ``Fraction(S) / Fraction(s)``: the sampler uses this rational
            exactly (no rounding between the privacy analysis and the draw).
            Data-dependent when ``S = S(X)``: internal only.
        """
        return Fraction(float(S)) / Fraction(self.student_t_s)

    def laplace_sd(self, d: int) -> float:
        """Standard deviation ``sqrt(2 a) / (1 - a)`` of the discrete Laplace with scale :meth:`laplace_scale`."""
        a = math.exp(-1.0 / self.laplace_scale(d))
        return math.sqrt(2.0 * a) / (1.0 - a)

    def smooth_sensitivity_floor(self, d: int) -> float:
        """Public lower bound on ``S(X)`` for every non-empty ``X`` in dimension ``d`` (smooth methods).

        ``U(t) = min(G, max(f_t(P_hi), f_t(P_lo)) + t + 1) >= min(G, t + 1)``
        because ``f_t >= 0``, hence ``S(X) = max_t e^{-t beta} U(t) >=
        max_t e^{-t beta} min(G, t + 1)``.  With the ``beta`` used by
        :meth:`smooth_sensitivity`.  For the benchmark and :func:`choose_method`'s
        documentation; it is not a privacy quantity.
        """
        if self.method not in SMOOTH_METHODS:
            raise ValueError(
                f"smooth_sensitivity_floor is defined for the smooth methods {SMOOTH_METHODS} only (method={self.method!r})"
            )
        G = public_global_sensitivity(int(d), int(self.k))
        beta = self.beta
        t = np.arange(0, min(G - 1, int(math.ceil(1.0 / beta)) + 1) + 1)
        return float(np.max(np.exp(-beta * t) * np.minimum(G, t + 1)))

    def ci_half_width(self, d: int, level=CI_LEVEL) -> int:
        """Half-width of the ``level`` interval of the noise, from public parameters only.

        Parameters
        ----------
        d : int
            Subspace dimension ``|S|``.
        level : float
            Coverage, default 0.95.

        Returns
        -------
        int
            ``t`` with ``P(|released - q_count| <= t) >= level`` for every
            dataset (also after clamping the release at 0):
            :meth:`half_width_at` at ``S = G``, the public global sensitivity
            ``k K_d^up + 1``.
            ``global_laplace``: the exact smallest such integer
            (:func:`discrete_laplace_half_width`).  ``global``:
            ``ceil(sigma z)`` (:func:`dpcore.accuracy.gaussian_half_width`).  ``smooth``: the
            **bound** with ``S(X)`` replaced by its public maximum ``G``
            (``ceil(G z / alpha)``); the data-dependent sigma is never used, so
            the figure is identical on neighbouring datasets.
            ``smooth_student_t``: likewise at ``S = G``: the exact smallest
            integer ``h`` with ``P(|round(c_G Z)| <= h) >= level``,
            ``c_G = G / s``, ``Z ~ T_2`` (:func:`dpcore.accuracy.student_t2_half_width`,
            exact rationals; the half unit of the rounding is included).  It is
            non-decreasing in ``c`` and ``S(X) <= G``, so it covers every dataset.
        """
        self.validate()
        d = int(d)
        return self.half_width_at(self.global_sensitivity_upper(d), d, level)

    def half_width_at(self, S, d: int, level=CI_LEVEL) -> int:
        """Half-width of the ``level`` interval of the released count's noise when the smooth bound equals ``S``.

        Parameters
        ----------
        S : float
            A value of the beta-smooth bound (finite, ``> 0``).  Ignored by
            the global methods (``global``, ``global_laplace``: their noise
            does not depend on it; ``None`` is accepted there).  With
            ``S = S(X)`` (:meth:`smooth_sensitivity` of the data) the figure
            is **data-dependent** and internal only (benchmarks, the
            warehouse's ``internal`` schema): it must never be published.
            With ``S = G`` (:meth:`global_sensitivity_upper`, public) it is
            the public bound that :meth:`ci_half_width` publishes; with
            ``S`` = :meth:`smooth_sensitivity_floor` it is the public floor
            below which no non-empty dataset's half-width falls.
        d : int
            Subspace dimension ``|S|``.
        level : float
            Coverage, default 0.95 (``alpha = 1 - level``, exact rational).

        Returns
        -------
        int
            ``global_laplace``: the exact smallest ``t`` with
            ``P(|Z| <= t) >= level`` at scale :meth:`laplace_scale`
            (:func:`dpcore.accuracy.discrete_laplace_half_width`).
            ``global``: ``ceil(gaussian_half_width(global_sigma(d), alpha))``.
            ``smooth``: ``ceil(gaussian_half_width(S / alpha_smooth, alpha))``
            (sigma rounded up as in the release).  ``smooth_student_t``:
            :func:`dpcore.accuracy.student_t2_half_width` of the exact scale
            ``S / s`` (:meth:`student_t_scale`).  ``smooth_lln``, ``smooth_arsinh``:
            the smallest integer covering ``level`` of ``round((S / s) Z)``
            from the distribution's tail (:meth:`SmoothCDPParameters.half_width_at`).
            Non-decreasing in ``S``.

        Raises
        ------
        ValueError
            On bad parameters (:meth:`validate`), a bad ``level``, or, for a
            smooth method, ``S`` not a finite number ``> 0``.

        Notes
        -----
        One branch per method, dispatched on :attr:`method`: a new method
        needs one more branch here (and nothing in :meth:`ci_half_width`).
        """
        self.validate()
        d = int(d)
        alpha = _alpha_of_level(level)
        method = self.method
        if method == "global_laplace":
            return discrete_laplace_half_width(self.laplace_scale(d), alpha)
        if method == "global":
            return int(math.ceil(gaussian_half_width(self.global_sigma(d), alpha)))
        ok = isinstance(S, numbers.Real) and not isinstance(S, bool) and math.isfinite(float(S)) and float(S) > 0
        if not ok:
            raise ValueError(f"S must be a finite number > 0 for method={method!r} (got {S!r}): a smooth bound value")
        if method == "smooth":
            return int(math.ceil(gaussian_half_width(self._smooth_sigma(float(S)), alpha)))
        if method == "smooth_student_t":
            return student_t2_half_width(self.student_t_scale(S), alpha)
        return self.cdp.half_width_at(S, float(alpha))  # smooth_lln, smooth_arsinh (cdp refuses any other method)

    def _smooth_sigma(self, S: float) -> float:
        """``S / alpha`` rounded up (``alpha`` is itself rounded down)."""
        return upper_float(float(S) / self.alpha)

    def release(self, XS, noise: NoiseSource) -> float:
        """``q_count(X)`` plus noise -- the only noisy call.

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset
            Records in subspace coordinates.
        noise : NoiseSource
            The project's noise source (DESIGN.md rule 3).

        Returns
        -------
        float
            The private count: ``q_count + N(0, noise_sigma(X)^2)``
            (``(epsilon, delta)``-DP), or for ``global_laplace`` the integer
            ``q_count + Z`` as a float (``epsilon``-DP), or for
            ``smooth_student_t`` the integer ``round(q_count + (S(X)/s) Z)``,
            ``Z ~ T_2``, as a float (``epsilon``-DP), for one record
            replaced, added or removed.  Charge :meth:`privacy_map` before calling.

        Notes
        -----
        Smooth method: ``S(X)`` (Theorem 6, Algorithms 1-2) and ``q_count``
        (eq. 14) come from one degree pass (module docstring, "Cost"); the
        values equal :meth:`noise_sigma` and :func:`count_outliers` exactly.
        """
        return self.release_with_diagnostics(XS, noise)[0]

    def release_with_diagnostics(self, XS, noise: NoiseSource) -> tuple[float, int, float]:
        """:meth:`release`, also returning the internal ``q_count`` and noise scale it used.

        Returns
        -------
        tuple of (float, int, float)
            ``(private count, q_count, sigma)``. Only the first is private;
            ``q_count`` and ``sigma`` (the noise's standard deviation,
            data-dependent for the smooth method; for ``smooth_student_t`` the
            T_2 scale ``S(X) / s``) are for the warehouse's
            ``internal`` schema. One degree pass, so a caller that wants the
            diagnostics does not count a second time.
        """
        self.validate()
        if self.method == "global_laplace":
            d = _dimension(XS)
            q = count_outliers(XS, self.k, self.r)
            noisy = int(noise.discrete_laplace(np.int64(q), self.laplace_scale(d)))
            return float(noisy), int(q), self.laplace_sd(d)
        if self.method == "smooth_student_t":  # one degree pass, exact scale S(X) / s, exact T_2 integer
            S, _, _, q = self._terms(XS)
            c = self.student_t_scale(S)
            return float(noise.student_t_integer(int(q), c)), int(q), float(c)
        if self.method in CDP_METHODS:  # one degree pass, exact scale S(X) / s, exact rounded CDP noise
            S, _, _, q = self._terms(XS)
            p = self.cdp
            c = p.scale(S)
            return float(noise.smooth_cdp_integer(p.family, int(q), c, p.sigma)), int(q), p.sd(S)
        if self.method == "global":
            sigma = self.noise_sigma(XS)
            q = count_outliers(XS, self.k, self.r)
        else:  # one degree pass gives both S(X) and q_count (same exact values as separate calls)
            S, _, _, q = self._terms(XS)
            sigma = self._smooth_sigma(S)
        return float(noise.gaussian(float(q), sigma)), int(q), float(sigma)


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
