"""The mechanism: one private outlier count in a subspace (seed 002, Section 4), and ``method: auto``.

:class:`OutlierCountMechanism` adds the noise of one of the methods of
:mod:`dpcore.mechanisms.outlier_count.methods` to ``q_count``
(:mod:`~dpcore.mechanisms.outlier_count.query`), scaled by the public global
sensitivity (:mod:`~dpcore.mechanisms.outlier_count.global_sensitivity`) or by
the beta-smooth bound ``S(X)`` (:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`),
and states its accuracy from public parameters only.

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
  :func:`dpcore.mechanisms.accuracy.student_t2_half_width`; the rounding's half unit is
  part of it).

All half-widths come from :mod:`dpcore.mechanisms.accuracy` (one implementation each).
:meth:`OutlierCountMechanism.half_width_at` evaluates the same figure at any
value ``S`` of the smooth bound: at ``S = G`` it is the published bound above
(``ci_half_width`` is exactly that call), at ``S = S(X)`` the actual,
data-dependent half-width (internal only: benchmarks, never published).

Clamping the released count at 0 (post-processing) keeps the statement, since
``q_count >= 0``.

Choosing the method (``method: auto``)
--------------------------------------
:func:`choose_method` picks, from ``(epsilon, delta, k, d)`` only, the method
with the smallest **publishable** 95% half-width
("Accuracy statements" above);
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

Floating point
--------------
The scales are evaluated in IEEE double and rounded
toward more noise (issue 15): ``alpha`` is lowered and ``sigma`` raised by a
relative ``2**-40`` (:func:`dpcore.noise.upper_float`), the global sigma
likewise; ``beta`` used is ``lower_float(beta) - 2**-40`` (absolute), which
makes the float ``S`` (relative error ``< 1e-13``) a valid bound with
``S(X) <= e^beta S(X')`` for the exact ``beta`` and ``sigma alpha >= LS``
(tests compare with 50-digit evaluations).

Nothing in this module except :meth:`OutlierCountMechanism.release` is
private (DESIGN.md rule 6).
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

from dpcore.mechanisms.accuracy import discrete_laplace_half_width, gaussian_half_width, student_t2_half_width
from dpcore.budget.amounts import PrivacyCost
from ...noise import NoiseSource, conservative_scale, lower_float, student_t2_shift_scale, upper_float
from ..params import real_between
from ..smooth_cdp_params import SmoothCDPParameters
from .enclosing import DEFAULT_NODE_LIMIT
from .global_sensitivity import public_global_sensitivity
from .methods import CDP_METHODS, METHODS, PURE_METHODS, SMOOTH_METHODS, STUDENT_T_SHIFT_SHARE
from .query import _check_k, _check_r, _dimension, _multiset, count_outliers
from .smooth_bound import local_bound, smooth_bound_terms

__all__ = ["OutlierCountMechanism", "CI_LEVEL", "BETA_SLACK", "choose_method"]

#: Default confidence level of the published accuracy statement.
CI_LEVEL = 0.95
#: Absolute amount by which the smoothness parameter used is below Theorem 2's
#: beta (absorbs the floating-point error of S(X); :attr:`OutlierCountMechanism.beta`).
BETA_SLACK = 2.0**-40


def _alpha_of_level(level) -> Fraction:
    """``1 - level`` as an exact rational (``level`` read through its decimal text: 0.95 gives 1/20)."""
    if not real_between(level, 0, 1):
        raise ValueError(f"level must be a number with 0 < level < 1 (got {level!r}), e.g. level=0.95")
    return 1 - Fraction(repr(float(level)))


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
        (:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`).  ``"global"``: Theorem 1 with ``GS`` upper bound of
        Theorem 4 (the Gaussian baseline).  ``"global_laplace"``: discrete
        Laplace with scale ``G / epsilon`` (pure epsilon-DP, integer output).
        ``"smooth_student_t"``: Bun & Steinke's Student's T (``nu = 2``) with
        the beta-smooth bound, ``beta = epsilon / 6``, ``s = sqrt(2) epsilon / 3``
        (pure epsilon-DP, integer output; :mod:`~dpcore.mechanisms.outlier_count.methods`).
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
            ``global_laplace`` (:mod:`~dpcore.mechanisms.outlier_count.methods`: pmf ratio ``<= e^{G/s}``,
            ``s >= G / epsilon``) and ``smooth_student_t`` (:mod:`~dpcore.mechanisms.outlier_count.methods`:
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
        gets half of epsilon; :mod:`~dpcore.mechanisms.outlier_count.methods`).  Other methods have none.
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

    def _terms(self, XS, full: bool = False):
        """Algorithm 2 with Propositions 1-2 (:func:`~dpcore.mechanisms.outlier_count.smooth_bound.smooth_bound_terms`).

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
            ``(S, U(0), {t: U(t) evaluated}, q_count)`` at this mechanism's
            ``k``, ``r``, :attr:`beta` and public ``G``; ``q_count`` (eq. 14)
            comes from the same degree pass as ``S`` (degrees are counted once
            per release).
        """
        self.validate()
        ms = _multiset(XS)
        if ms.n == 0:
            return 0.0, 0, {}, 0
        G = self.global_sensitivity_upper(ms.d)  # public: k K_d + 1, never min(N, .)
        return smooth_bound_terms(ms, int(self.k), self.r, self.beta, G, self.size_limit, self.node_limit, full=full)

    def local_sensitivity_bound(self, XS) -> int:
        """``U(0)``: Theorem 5's bound (via ``V``, ``CV`` and Algorithm 1), capped by Theorem 4.

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset

        Returns
        -------
        int
            :func:`~dpcore.mechanisms.outlier_count.smooth_bound.local_bound`
            (``>= LS(X)``, eq. 23) at this mechanism's ``k``, ``r``,
            ``size_limit``, ``node_limit`` and public ``G``; 0 for no record.
        """
        self.validate()
        ms = _multiset(XS)
        if ms.n == 0:
            return 0
        G = self.global_sensitivity_upper(ms.d)  # noqa: N806  (public, no N)
        return local_bound(ms, int(self.k), self.r, G, self.size_limit, self.node_limit)

    def smooth_sensitivity(self, XS) -> float:
        """The beta-smooth upper bound ``S(X)`` (Theorem 6, Algorithms 1-2).

        Parameters
        ----------
        XS : array_like, shape (N, d), or PointMultiset

        Returns
        -------
        float
            ``max_t exp(-t beta) U(t)`` (:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`), with the
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
            ``ceil(sigma z)`` (:func:`dpcore.mechanisms.accuracy.gaussian_half_width`).  ``smooth``: the
            **bound** with ``S(X)`` replaced by its public maximum ``G``
            (``ceil(G z / alpha)``); the data-dependent sigma is never used, so
            the figure is identical on neighbouring datasets.
            ``smooth_student_t``: likewise at ``S = G``: the exact smallest
            integer ``h`` with ``P(|round(c_G Z)| <= h) >= level``,
            ``c_G = G / s``, ``Z ~ T_2`` (:func:`dpcore.mechanisms.accuracy.student_t2_half_width`,
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
            (:func:`dpcore.mechanisms.accuracy.discrete_laplace_half_width`).
            ``global``: ``ceil(gaussian_half_width(global_sigma(d), alpha))``.
            ``smooth``: ``ceil(gaussian_half_width(S / alpha_smooth, alpha))``
            (sigma rounded up as in the release).  ``smooth_student_t``:
            :func:`dpcore.mechanisms.accuracy.student_t2_half_width` of the exact scale
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
        (eq. 14) come from one degree pass (:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`, "Cost"); the
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
