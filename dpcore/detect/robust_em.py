r"""Robust contextual outlier detection: Gaussian/Cauchy mixture regression fitted by EM.

One *filter* of seed 004 part 1 ("Detecting Outliers with Correlated Measures").
For a correlation template :math:`(j, S)` (slide "Outlier Detector Overview") the
behavioural value :math:`y_i = z_i[j]` is predicted from the contextual values
:math:`\vec x_i = (z_i[s])_{s\in S}`; every record gets the outlier score
:math:`t_i` and the filter flags the top :math:`K = \lfloor\sum_i t_i\rfloor`.

The detector is **non-private and internal** (DESIGN.md, "Shape"): its scores
only choose which records the private steps talk about; they are never
released. Nothing in this module logs or warns (DESIGN.md, privacy rule 6;
issue 15, hole 12): diagnostics such as non-convergence are **data** on the
fitted detector (``converged_``, ``n_iter_``, ``last_relative_change_``,
``diagnostics_``), which the detect step stores in the warehouse's
``internal`` schema only. Exception messages name parameters, public shapes
(the number of context columns and of model parameters) and the rule that
failed, never data values, row counts or row positions. The numeric code runs
under ``numpy.errstate(all="ignore")`` (thread-local), so no floating-point
``RuntimeWarning`` can carry anything out either; every result that matters is
checked for finiteness explicitly instead.

Model (slides "Mixture Model" and backup "Likelihood Function")
-----------------------------------------------------------------
.. math::

    y_i = \vec w\cdot\vec x_i + b_0 + \epsilon_i,\qquad
    \epsilon_i \sim (1-p)\,\mathcal N(0, \sigma^2) + p\,\mathrm{Cauchy},

the Cauchy written as the scale mixture of Gaussians of [BL09] used on the
"Likelihood Function" slide: :math:`\tau_i\sim\mathrm{Gamma}(0.5, b)` (shape 0.5,
*rate* b) and :math:`\epsilon_i\mid\tau_i\sim\mathcal N(0, 1/\tau_i)`, i.e.

.. math::

    f_C(\epsilon, \tau; b) = \frac{b^{0.5}}{\Gamma(0.5)}\tau^{-0.5}e^{-b\tau}
        \frac{\sqrt\tau}{\sqrt{2\pi}}e^{-\tau\epsilon^2/2}.

Integrating :math:`\tau` out (:math:`\int_0^\infty e^{-(b+\epsilon^2/2)\tau}d\tau
= 1/(b+\epsilon^2/2)`) gives the marginal

.. math::

    f_C(\epsilon; b) = \frac{\sqrt b}{\pi\sqrt2\,(b+\epsilon^2/2)}
        = \frac{1}{\pi\gamma\,(1+\epsilon^2/\gamma^2)},\qquad \gamma=\sqrt{2b},

a Cauchy density with scale :math:`\gamma=\sqrt{2b}`. With the latent indicator
:math:`\chi_i` (1 = the error is Cauchy) the complete-data likelihood is the
slide's :math:`L(\vec w,\sigma^2,p,b,\vec\chi,\vec\tau)`; the observed-data
log-likelihood maximised here is

.. math::

    \ell = \sum_i \log\big[(1-p)f_G(e_i;\sigma^2) + p f_C(e_i; b)\big],
    \qquad e_i = y_i - \vec w\cdot\vec x_i - b_0.

EM (slide "Parameters Learning"), exact updates
------------------------------------------------
*E-step* (current parameters, in log space):

* :math:`t_i = E[\chi_i\mid e_i] = \operatorname{expit}(\lambda_C-\lambda_G)` with
  :math:`\lambda_G=\log(1-p)-\tfrac12\log(2\pi\sigma^2)-e_i^2/(2\sigma^2)` and
  :math:`\lambda_C=\log p-\log\pi-\tfrac12\log(2b)-\log(1+e_i^2/(2b))`;
  :math:`\ell=\sum_i\operatorname{logaddexp}(\lambda_G,\lambda_C)`.
* :math:`\tau_i\mid e_i,\chi_i=1\sim\mathrm{Gamma}(\text{shape }1,\ \text{rate } b+e_i^2/2)`
  (prior shape 0.5 plus 0.5 from one Gaussian observation), so
  :math:`\bar\tau_i = E[\tau_i\mid e_i,\chi_i=1] = 1/(b+e_i^2/2)`.

*M-step* (maximise :math:`Q=E[\log L]` one block at a time, an ECM whose every
conditional step increases :math:`Q`, hence :math:`\ell` never decreases):

* :math:`p = \frac1n\sum_i t_i` (clipped to :math:`[10^{-9}, 1-10^{-9}]`).
* :math:`(\vec w, b_0)`: :math:`Q` contains
  :math:`-\sum_i[(1-t_i)/(2\sigma^2) + t_i\bar\tau_i/2]\,e_i^2`, so weighted least
  squares with weights :math:`\omega_i=(1-t_i)/\sigma^2+t_i\bar\tau_i`.
* :math:`\sigma^2 = \sum_i(1-t_i)e_i^2/\sum_i(1-t_i)` with the new residuals.
* :math:`b`: :math:`Q` contains :math:`\sum_i t_i(\tfrac12\log b - b\,\bar\tau_i)`, so
  :math:`b = \tfrac12\sum_i t_i / \sum_i t_i\bar\tau_i`
  (these two subject to the constraint below).

Constraint :math:`b\ge\sigma^2`. The log-odds :math:`\lambda_C-\lambda_G` as a
function of :math:`u=e^2` has derivative :math:`1/(2\sigma^2) - 1/(2b+u)`, which
is :math:`\ge 0` for all :math:`u` iff :math:`b\ge\sigma^2`. The constraint
therefore guarantees that :math:`t_i` is non-decreasing in :math:`|e_i|` — the
Cauchy component is the *outlier* component and cannot swap roles with the
Gaussian by fitting a narrow core (which unconstrained EM does on heavy-tailed
data, e.g. Student-t errors or NYC flights' air_time, scoring the best-fitting
records highest). :math:`\sigma^2` and :math:`b` are therefore updated *jointly*:
the :math:`(\sigma^2, b)` part of :math:`Q`,
:math:`-\tfrac{S_u}2\log\sigma^2 - \tfrac{R_u}{2\sigma^2} + \tfrac{S_t}2\log b - T b`
(:math:`S_u=\sum(1-t_i)`, :math:`R_u=\sum(1-t_i)e_i^2`, :math:`S_t=\sum t_i`,
:math:`T=\sum t_i\bar\tau_i`), is concave in :math:`(\log\sigma^{-2}, \log b)` and the
constraint is a half-plane there, so the conditional maximum is the
unconstrained one above when it is feasible, else the unique maximum on the
boundary :math:`\sigma^2=b=v`, the positive root of
:math:`-2Tv^2+(S_t-S_u)v+R_u=0`. Every step is thus an exact conditional maximum
and :math:`\ell` never decreases. :math:`\sigma^2` is floored at
:math:`\max(10^{-12}, \sigma^2_\text{floor})` (the first in standardised units,
so the likelihood stays bounded; the second is the ``sigma2_floor`` parameter,
the measurement resolution, see below); a vanishing denominator (no inliers or
no outliers left) keeps the old value. The floor keeps every step an exact
conditional maximum: :math:`Q` is separable, :math:`f(\sigma^2) + g(b)`, each
part unimodal in the log coordinates, so on the convex set
:math:`\{\sigma^2 \ge F,\ b \ge \sigma^2\}` the maximum is the one above with
:math:`\sigma^2` raised to :math:`F` and :math:`b` to :math:`\max(b, \sigma^2)`.

Measurement floor (``sigma2_floor``; slide "Parameters Learning")
-----------------------------------------------------------------
The slide's M-step :math:`\sigma^2 = \sum(1-t_i)e_i^2/\sum(1-t_i)` assumes
continuous :math:`y`. Recorded values are rounded to a resolution :math:`h`
(whole miles, whole minutes): :math:`y_i = y_i^* + u_i` with the rounding error
:math:`u_i\sim U(-h/2, h/2)`, variance :math:`h^2/12` (Sheppard's correction of
the grouped-data variance). No model of the true values can therefore have an
inlier variance below :math:`h^2/12` as a description of the recorded ones.
Without that bound, when the contexts (e.g. one-hot route dummies) reproduce
many rows *exactly*, the Gaussian's :math:`\sigma^2` drops to the numeric
floor, the exactly fitted rows become the Gaussian and every record off by a
single unit of rounding gets log-odds ~ :math:`e^2/(2\sigma^2)\approx10^{12}`
(measured on NYC flights ``distance ~ origin + dest`` in an earlier run of the
BENCHMARKS.md detect section; the benchmark now uses ``distance ~ route``). ``sigma2_floor`` is given in the **original units of y squared**; the
spec derives :math:`1/12` for attributes declared ``integer: true``
(:func:`dpcore.detect.design.sigma2_floor_of`).

Acceleration: the EM map is extrapolated by SQUAREM (Varadhan and Roland,
"Simple and globally convergent methods for accelerating the convergence of
any EM algorithm", Scand. J. Statist. 2008; scheme S3) on
:math:`(\vec w, b_0, \log\sigma^2, \operatorname{logit}p, \log b)`: two EM
steps, an extrapolated point, one stabilising EM step from it (which restores
:math:`b\ge\sigma^2`), kept only if its :math:`\ell` is at least that of the
two plain steps -- so :math:`\ell` still never decreases. On heavy-tailed data
(NYC flights) plain EM creeps along a flat ridge in :math:`(p, b, \sigma^2)`
and could hit ``max_iter``.

Stopping: after each EM step (plain) or SQUAREM cycle (3 M-steps) the E-step
gives the new :math:`\ell`; EM stops when
:math:`|\ell_\text{new}-\ell_\text{old}| / \max(|\ell_\text{old}|, n) <` ``tol``
(the ``n`` keeps the test meaningful when :math:`\ell` crosses 0), or after
``max_iter`` M-steps, with ``converged_ = False`` and a ``"not_converged"``
entry in ``diagnostics_`` (no warning is emitted).

Chunks (issue 21): tables larger than memory
---------------------------------------------
The E-step is per row and every quantity the M-step needs is a sum over rows
(:func:`~dpcore.detect.mixture_em._mstats`: :math:`S_t`, :math:`S_u`, :math:`T`, the weighted normal
equations :math:`Z^TWZ` and :math:`Z^TWy`; :func:`~dpcore.detect.mixture_em._ru`: :math:`R_u` with the
new coefficients; the log-likelihood), so EM runs over a *chunk source*
(:class:`~dpcore.detect.em_passes.ArrayChunks`; the warehouse's :class:`dpcore.detect.streaming.PartitionChunks`):
each M-step is two passes over the chunks (:func:`~dpcore.detect.em_passes.chunk_pass`, a module-level
function the source's mapper may run elsewhere), the partial sums are added
in the caller and nothing per row is kept (:func:`~dpcore.detect.em_passes._em_chunks`;
:func:`~dpcore.detect.em_passes._em` is its one-chunk case). One pass before them takes the exact extremes
(constant columns, 0/1 columns, constant :math:`y`). The scaling
(:math:`y`'s median and MAD, the columns' mean and sd) and the robust start
below use the *start sample*: all rows when :math:`n \le` ``start_sample``
(then EM runs on those rows in memory and the fit is exactly the in-memory one,
chunks or not), else ``start_sample`` rows drawn uniformly with
``random_state`` (:mod:`dpcore.detect.start_sample`, a keyed hash of the row
positions: the choice depends on :math:`n` and the key only). The chunks'
partial sums are added with one rounding (:func:`~dpcore.detect.em_passes._fsum`), but each chunk's own
sum rounds differently from a one-pass sum (last bits); on well-conditioned
fits the results agree to ~1e-13, on a flat likelihood ridge (heavy-tailed
errors, tens of SQUAREM cycles) the extrapolation amplifies the difference to a
few 1e-9 in the parameters and below 1e-8 in the scores (tests/test_detect_stream.py).

One-hot levels (issue 29): the scan pass also finds which 0/1 columns are
exclusive (contiguous runs in which no row holds two ones: each categorical
context's one-hot block, :func:`~dpcore.detect.level_design.level_layout`);
the EM on all rows then works on the factored design
(:class:`~dpcore.detect.level_design.FactoredDesign`: the dense columns and one
level code per block), whose normal equations' level blocks are per-level sums
(``np.bincount``) instead of the dense :math:`n q^2` product. The same sums
added in another order: the fits agree with the dense product's to round-off
(tests/test_level_design.py: 1e-8 on seeded cases and the demo's templates,
the same iterations, ``K`` and labels). The robust start's subsample stays dense.

Labelling (slide "Parameters Learning"): the top :math:`K=\lfloor\sum_i t_i\rfloor`
records by :math:`t_i` (ties: lower row index first; a ``1e-9`` guard absorbs
round-off in the sum), chosen by a threshold (:func:`dpcore.detect.labels.top_k_labels`), not a full sort.

Modules (issues 29 and 49): this module holds the model's derivation (this
docstring) and :class:`RobustRegressionDetector` (its parameters, the fit's
scaling and the scores); the EM core is :mod:`dpcore.detect.mixture_em`, the
robust start :mod:`dpcore.detect.robust_start` (why each of its steps is there,
sections "Robust start" and "Masking" of its docstring), the start sample
:mod:`dpcore.detect.start_sample`, the labels :mod:`dpcore.detect.labels`, the
streamed passes :mod:`dpcore.detect.em_passes` and the factored design
:mod:`dpcore.detect.level_design`.

Scaling: :math:`y` is standardised by its median and MAD (std if the MAD is 0),
the non-constant columns of :math:`X` by mean and std, except 0/1 columns
(one-hot levels), which stay indicators so that a rare level's coefficient is
determined by its own rows alone; constant columns are dropped (coefficient 0). The fit is thus equivariant: shifting or scaling
:math:`y` leaves scores and labels unchanged. All fitted attributes are
reported in the original units (:math:`\sigma^2` and :math:`b` scale with the
square of :math:`y`'s scale, ``log_likelihood_`` includes the Jacobian).
The M-step's weighted least squares is solved exactly when it is well posed;
collinear columns are handled by a ridge of :math:`10^{-9}` times each
column's own diagonal entry of the normal equations (not on the intercept) (the fitted values are unaffected; the coefficients of exactly
collinear columns are split between them).

Degenerate inputs (documented outcomes, never NaN scores)
---------------------------------------------------------
* Fewer rows than parameters (:math:`n < d + 4`: :math:`d` coefficients, the
  intercept, :math:`\sigma^2`, :math:`p`, :math:`b`): ``ValueError`` (naming the
  parameter count, not the row count).
* Constant context columns (including one-hot columns of domain values absent
  from the data): dropped, their coefficient is 0.
* Collinear / duplicated contexts: ridge as above, finite scores.
* All-identical ``y``: nothing to explain. All posteriors 0 (scores, the
  log-odds, ``-inf``), no labels, ``K = 0``,
  ``threshold_ = inf``, ``coef_ = 0``, ``intercept_`` = the value,
  ``sigma2_ = p_ = b_ = 0``, ``n_iter_ = 0``, ``converged_ = True``,
  ``log_likelihood_ = inf`` (a point mass). ``decision_function`` then scores a new
  row ``+inf`` if its ``y`` differs from the value, else ``-inf``.
* More than half of ``y`` identical (MAD 0, not constant): the Gaussian fits the
  identical values with :math:`\sigma^2` at its floor (``sigma2_floor`` when given,
  else the numeric one) and the other rows get :math:`t_i\approx1` (with the
  numeric floor; with a resolution floor the posterior of a row one unit away
  stays moderate).
* Every row an outlier-to-be (e.g. pure Cauchy noise): :math:`p` may approach 1;
  updates whose denominators vanish keep the previous value, scores stay in
  [0, 1].
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from dpcore.runtime.blas_threads import one_blas_thread
from dpcore.runtime.heap import trim_heap
from dpcore.runtime.lazy_modules import lazy_module

_special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

# The fit's other subjects live in their own modules (issues 29 and 49): import their names from there.
from .em_passes import (
    _Y_CLIP, ArrayChunks, _as_float, _check_X, _check_y, _column_moments, _design_of, _em_chunks, chunk_pass,
)
from .labels import top_k_labels
from .level_design import level_layout
from .mixture_em import _SIGMA2_FLOOR, _log_odds
from .robust_start import _MAD_TO_SD, em_start
from .start_sample import START_SAMPLE, _start_sample_rows

__all__ = ["DataSpreadError", "RobustRegressionDetector", "model_parameters"]

#: Constructor parameters, in order (``get_params``).
_PARAMS = (
    "max_iter", "tol", "n_starts", "random_state", "p_init", "sigma2_floor", "start", "n_subsets", "start_sample",
)
#: Values of ``start``.
_STARTS = ("auto", "lts", "ols", "legacy")


class DataSpreadError(ValueError):
    """The data's spread (a private fact) leaves the fit no finite scale; ``code`` names the case.

    A :class:`ValueError` (the in-memory :meth:`RobustRegressionDetector.fit`
    raises it as before); the streamed fit of a release catches it and
    becomes an unfitted filter instead (issue 28, section 6:
    :func:`dpcore.detect.streaming.fit_partitions`), since whether the data
    spreads that way is private and the release's earlier steps have charged.

    Attributes
    ----------
    code : str
        ``x_scale_overflow`` (a context column's mean or spread is not a
        finite float), ``y_scale_overflow`` (the same for y) or
        ``sigma2_floor_overflow`` (``sigma2_floor / scale**2`` overflows: y
        spreads far less than the floor).
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def model_parameters(d: int) -> int:
    """Free parameters of the mixture regression on ``d`` features: ``d`` coefficients, intercept, sigma^2, p, b.

    A fit needs at least this many rows (:meth:`RobustRegressionDetector.fit`).
    """
    return d + 4


# --------------------------------------------------------------------------- detector
class RobustRegressionDetector:
    r"""Gaussian/Cauchy mixture regression fitted by EM: one outlier *filter*.

    Seed 004, slides "Outlier Detector Overview", "Mixture Model",
    "Parameters Learning" and backup "Likelihood Function"; the exact model,
    EM updates, robust start and degenerate-input outcomes are derived in the
    module docstring.

    Parameters
    ----------
    max_iter : int, default 200
        Maximum number of EM iterations (M-steps) on all rows, ``>= 1``. The
        refinement of each robust start on the subsample uses the same cap.
    tol : float, default 1e-6
        Stop when ``|l_new - l_old| / max(|l_old|, n) < tol``; ``0 < tol < 1``.
    n_starts : int, default 5
        ``1 <= n_starts <= 1000``. ``start="lts"``: FAST-LTS concentrates the
        ``max(10, n_starts)`` best elemental candidates to convergence.
        ``start="legacy"``: the LTS starts refined by EM on the subsample, the
        best log-likelihood wins (the behaviour before issue 22).
    random_state : None, int >= 0 or numpy.random.Generator
        Seed of the subsample and the elemental subsets. Fixed seed = identical fit.
    p_init : float, default 0.1
        Initial outlier fraction ``p``, ``0 < p_init < 1``.
    sigma2_floor : float or None, default None
        Lower bound of the inlier variance :math:`\sigma^2`, in the original
        units of ``y`` squared (finite, ``>= 0``; ``None`` or 0: only the
        numeric floor, :math:`10^{-12}` times the squared robust scale of
        ``y``). The M-step of slide "Parameters Learning" clamps
        :math:`\sigma^2` at the larger of the two. Use the variance of the
        measurement's quantisation noise: a value recorded to resolution
        :math:`h` carries a rounding error uniform on :math:`\pm h/2`, variance
        :math:`h^2/12` (Sheppard's correction), so ``sigma2_floor = h**2 / 12``
        (``1/12`` for whole numbers). Without it, contexts that reproduce many
        rows exactly (one-hot dummies of a route) collapse :math:`\sigma` to
        the numeric floor and rows off by one unit get log-odds ~ :math:`10^{12}`.
        It scales with ``y``: rescaling ``y`` by ``c`` needs ``c**2`` times the
        floor for identical labels (shifting needs nothing).
    start : {"auto", "lts", "ols", "legacy"}, default "auto"
        How EM is started (:mod:`dpcore.detect.robust_start`, sections "Robust start" and "Masking").
        ``"lts"``: FAST-LTS (Rousseeuw and Van Driessen 2006), reweighted, as
        the single start, and the inlier-driven coefficient step, so a cluster
        of bad leverage points below ~50% of the rows cannot mask itself.
        ``"auto"``: ``"lts"`` (the name may pick by shape in future).
        ``"ols"``: exact EM from least squares (non-robust; for comparison).
        ``"legacy"``: the start before issue 22 (a lighter LTS, several starts
        by likelihood, exact EM), kept for comparison and reproduction.
    start_sample : int, default 500000
        Rows of the start sample (issue 21; :mod:`dpcore.detect.start_sample`),
        ``1 <= start_sample <= 10**8`` and at least the number of model
        parameters: the scaling and the robust start use ``min(n,
        start_sample)`` rows drawn with ``random_state`` (all rows when
        ``n <= start_sample``), EM then runs on all rows. Memory of the start
        grows with this number, not with ``n``.
    n_subsets : int or None, default None
        Elemental subsets of FAST-LTS (``start="lts"``/``"auto"``),
        ``1 <= n_subsets <= 100000``. ``None``: enough for a 99% chance of a
        clean subset at 40% contamination, at least 500 (500 up to 8
        contextual attributes, 1,266 for 10; at most 3,000). Wide one-hot
        designs are capped by a work budget (:mod:`dpcore.detect.robust_start`).

    Attributes
    ----------
    decision_scores_ : ndarray of shape (n,)
        Posterior log-odds ``log(t_i / (1 - t_i))`` that record *i*'s error is
        Cauchy (higher = more anomalous; never NaN). This is a strictly
        increasing function of the slides' score :math:`t_i`, so it ranks
        records exactly as :math:`t_i` would in exact arithmetic; in float64,
        :math:`t_i` itself saturates at 1.0 beyond log-odds of about 37, which
        on real data ties thousands of records and destroys the ranking of the
        tail (measured in BENCHMARKS.md, detect section). ``-inf``/``+inf`` do
        not occur for finite inputs; the all-identical-y case gives 0 and inf
        (see the module docstring).
    posterior_ : ndarray of shape (n,)
        :math:`t_i` itself, in [0, 1] (the E-step's expected outlier indicator).
    labels_ : ndarray of int, shape (n,)
        1 for the top ``K = floor(sum t_i)`` records by score (ties: lower row first).
    threshold_ : float
        Score (log-odds) of the K-th record; ``inf`` when ``K = 0``.
    K_ : int
        Number of labelled records.
    coef_, intercept_ : ndarray of shape (d,), float
        Regression coefficients and intercept in the original units (0 for
        constant columns).
    sigma2_, p_, b_ : float
        Inlier variance, outlier fraction, Gamma rate of the Cauchy's precision
        (Cauchy scale ``sqrt(2 b_)``), original units. ``sigma2_ >= sigma2_floor``.
    n_iter_ : int
        EM iterations (M-steps) on all rows.
    converged_ : bool
        False when EM stopped at ``max_iter`` before the relative change fell below ``tol``.
    last_relative_change_ : float
        The last relative log-likelihood change of the EM on all rows (0 for all-identical ``y``).
    log_likelihood_ : float
        Observed-data log-likelihood of ``y`` (original units) at the fitted parameters.
    start_log_likelihood_ : float
        Subsample log-likelihood of the EM from the winning robust start.
    diagnostics_ : list of dict
        Structured diagnostics of the last fit, plain JSON values, each with a
        ``"code"``:

        * ``{"code": "not_converged", "n_iter", "max_iter", "tol", "last_relative_change"}``
          -- EM on all rows stopped at ``max_iter``;
        * ``{"code": "constant_y"}`` -- all ``y`` identical (see the module docstring);
        * ``{"code": "constant_columns_dropped", "columns": [...]}`` -- positions in
          ``X`` of the constant columns, whose coefficient is 0;
        * ``{"code": "sigma2_at_floor", "floor": "measurement" | "numeric"}`` --
          :math:`\sigma^2` ended at ``sigma2_floor`` or at the numeric floor.

        These are internal (they describe the private data): the detector never
        warns or logs them; the detect step stores them with the fit's
        parameters in the warehouse's ``internal`` schema
        (:func:`dpcore.detect.combine.fit_template`, ``params["diagnostics"]``).
    """

    def __init__(
        self,
        max_iter: int = 200,
        tol: float = 1e-6,
        n_starts: int = 5,
        random_state=None,
        p_init: float = 0.1,
        sigma2_floor: float | None = None,
        start: str = "auto",
        n_subsets: int | None = None,
        start_sample: int = START_SAMPLE,
    ) -> None:
        self.max_iter = max_iter
        self.tol = tol
        self.n_starts = n_starts
        self.random_state = random_state
        self.p_init = p_init
        self.sigma2_floor = sigma2_floor
        self.start = start
        self.n_subsets = n_subsets
        self.start_sample = start_sample

    # ------------------------------------------------------------ sklearn-ish
    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters (scikit-learn convention)."""
        return {k: getattr(self, k) for k in _PARAMS}

    def set_params(self, **params) -> "RobustRegressionDetector":
        """Set constructor parameters (validated at ``fit``)."""
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r}; valid: {sorted(self.get_params())}")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"RobustRegressionDetector({args})"

    def _validate_params(self) -> None:
        mi = self.max_iter
        if isinstance(mi, bool) or not isinstance(mi, numbers.Integral) or mi < 1:
            raise ValueError(f"max_iter must be an integer >= 1, got {mi!r}")
        tol = self.tol
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (0 < tol < 1):
            raise ValueError(f"tol must be a number with 0 < tol < 1, got {tol!r}")
        ns = self.n_starts
        if isinstance(ns, bool) or not isinstance(ns, numbers.Integral) or not (1 <= ns <= 1000):
            raise ValueError(f"n_starts must be an integer with 1 <= n_starts <= 1000, got {ns!r}")
        pi = self.p_init
        if isinstance(pi, bool) or not isinstance(pi, numbers.Real) or not (0 < pi < 1):
            raise ValueError(f"p_init must be a number with 0 < p_init < 1, got {pi!r}")
        sf = self.sigma2_floor
        if sf is not None and (
            isinstance(sf, bool) or not isinstance(sf, numbers.Real) or not math.isfinite(sf) or sf < 0
        ):
            raise ValueError(f"sigma2_floor must be None or a finite number >= 0, got {sf!r}")
        rs = self.random_state
        ok = rs is None or isinstance(rs, np.random.Generator) or (
            isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and rs >= 0
        )
        if not ok:
            raise ValueError(f"random_state must be None, an integer >= 0 or a numpy Generator, got {rs!r}")
        if not isinstance(self.start, str) or self.start not in _STARTS:
            raise ValueError(f"start must be one of {list(_STARTS)}, got {self.start!r}")
        nsub = self.n_subsets
        if nsub is not None and (
            isinstance(nsub, bool) or not isinstance(nsub, numbers.Integral) or not (1 <= nsub <= 100_000)
        ):
            raise ValueError(f"n_subsets must be None or an integer with 1 <= n_subsets <= 100000, got {nsub!r}")
        ss = self.start_sample
        if isinstance(ss, bool) or not isinstance(ss, numbers.Integral) or not (1 <= ss <= 100_000_000):
            raise ValueError(f"start_sample must be an integer with 1 <= start_sample <= 100000000, got {ss!r}")

    # ------------------------------------------------------------ transforms
    def _std(self) -> tuple:
        """The fitted standardisation ``(active, x_loc, x_scale, y_loc, y_scale)``.

        See :func:`~dpcore.detect.em_passes._standardised`.
        """
        return (self._active, self._x_loc, self._x_scale, self._y_loc, self._y_scale)

    def _design(self, X: np.ndarray) -> np.ndarray:
        return _design_of(X, self._active, self._x_loc, self._x_scale)

    def _std_y(self, y: np.ndarray) -> np.ndarray:
        return np.clip((y - self._y_loc) / self._y_scale, -_Y_CLIP, _Y_CLIP)

    # ------------------------------------------------------------ fit
    def fit(self, X, y) -> "RobustRegressionDetector":
        """Fit the mixture regression and score the training rows.

        Parameters
        ----------
        X : array-like of shape (n, d)
            Contextual attributes (finite floats; categorical ones one-hot
            encoded, see :func:`dpcore.detect.design.design_matrix`). ``d`` may be 0
            (intercept-only model).
        y : array-like of shape (n,)
            Behavioural attribute (finite floats).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Invalid constructor parameter (named, with its allowed range), wrong
            shapes, non-finite values, or fewer rows than parameters. Messages
            name the parameter or the rule and public shapes (context columns,
            model parameters), never data values, row counts or row positions.
        DataSpreadError
            (a ValueError) The data's spread leaves no finite scale (``code``
            says which); the streamed fit of a release turns it into an
            unfitted filter.

        Notes
        -----
        Nothing is warned or logged. Non-convergence (EM stopped at
        ``max_iter``) leaves ``converged_ = False`` and a ``"not_converged"``
        entry in ``diagnostics_``; the caller stores these as internal data.
        The computation runs under ``numpy.errstate(all="ignore")``, which is
        thread-local (a context variable in numpy), so concurrent fits in a
        thread pool neither emit floating-point warnings nor change each
        other's or the process's warning state.
        """
        self._validate_params()
        X = _check_X(X)
        n, d = X.shape
        y = _check_y(y, n)
        self._check_shape(n, d)
        with np.errstate(all="ignore"), one_blas_thread():  # one BLAS thread: dpcore.runtime.blas_threads
            self._fit_source(ArrayChunks(X, y))
            self.decision_scores_ = self.decision_function(X, y)
            self.posterior_ = _special.expit(self.decision_scores_)
            self._label()
        return self

    def fit_chunks(self, source) -> "RobustRegressionDetector":
        """Fit the mixture regression on rows streamed in chunks (issue 21): the same fit as :meth:`fit`.

        Seed 004, slide "Parameters Learning": the E-step is per row and the
        M-step needs only sums over rows (:func:`~dpcore.detect.mixture_em._mstats`,
        :func:`~dpcore.detect.mixture_em._ru`), which add over chunks, so each EM
        step passes over the chunks twice and keeps nothing per row (module
        docstring, "Chunks"). :meth:`fit` is this
        method on one in-memory chunk (:class:`~dpcore.detect.em_passes.ArrayChunks`).

        Parameters
        ----------
        source : chunk source
            ``n_rows``, ``n_features``, ``load(i)``, ``take(rows)``, ``map(fn, state)``
            (see :class:`~dpcore.detect.em_passes.ArrayChunks`; the warehouse's is
            :class:`dpcore.detect.streaming.PartitionChunks`). Its mapper runs
            :func:`~dpcore.detect.em_passes.chunk_pass` on each chunk; the results are combined here.

        Returns
        -------
        self
            With every fitted attribute of :meth:`fit` except the per-row ones
            (``decision_scores_``, ``posterior_``, ``labels_``, ``threshold_``):
            score the rows with :meth:`decision_function` chunk by chunk; ``K_``
            is set (``floor(sum t_i)`` at the fitted parameters, from the last
            E-step), the labels are the top ``K_`` scores, ties by lower row.

        Raises
        ------
        ValueError
            As :meth:`fit`.
        """
        self._validate_params()
        n, d = int(source.n_rows), int(source.n_features)
        self._check_shape(n, d)
        with np.errstate(all="ignore"), one_blas_thread():  # one BLAS thread: dpcore.runtime.blas_threads
            return self._fit_source(source)

    def _check_shape(self, n: int, d: int) -> None:
        n_params = model_parameters(d)
        if n < n_params:
            raise ValueError(
                f"too few rows to fit the regression: fewer rows than the model's {n_params} parameters "
                f"({d} coefficients, intercept, sigma2, p, b)"
            )
        if int(self.start_sample) < n_params:
            raise ValueError(
                f"start_sample must be at least the model's {n_params} parameters ({d} coefficients, intercept, "
                "sigma2, p, b)"
            )
        self.n_features_in_ = d
        self.diagnostics_ = []

    def _fit_source(self, src) -> "RobustRegressionDetector":
        """The body of :meth:`fit` / :meth:`fit_chunks` (called under ``np.errstate(all="ignore")``).

        One pass over the chunks for the exact extremes (constant columns, 0/1
        columns, constant ``y``); the scaling and the robust start on the start
        sample (all rows when ``n <= start_sample``, else ``start_sample`` rows
        drawn with ``random_state``, :func:`~dpcore.detect.start_sample._start_sample_rows`); then EM over
        all rows: in memory on the start sample's standardised rows when it is
        the whole table, else chunk by chunk (:func:`~dpcore.detect.em_passes._em_chunks`).
        """
        n, d = int(src.n_rows), int(src.n_features)
        # ---- exact extremes over all rows (the scan also checks finiteness)
        scans = src.map(chunk_pass, {"kind": "scan"})
        xmin = np.min(np.stack([s[0] for s in scans]), axis=0)
        xmax = np.max(np.stack([s[1] for s in scans]), axis=0)
        binary_all = np.all(np.stack([s[2] for s in scans]), axis=0)
        ymin, ymax = min(s[3] for s in scans), max(s[4] for s in scans)
        prev_one = np.max(np.stack([s[5] for s in scans]), axis=0)
        del scans
        self._active = (xmax - xmin) > 0  # np.ptp(X, axis=0) > 0
        if not self._active.all():
            self.diagnostics_.append(
                {"code": "constant_columns_dropped", "columns": [int(j) for j in np.flatnonzero(~self._active)]}
            )
        # ---- the start sample: all rows, or start_sample rows drawn with random_state
        rng = np.random.default_rng(self.random_state)
        ns = min(n, int(self.start_sample))
        rows = None if ns == n else _start_sample_rows(n, ns, int(rng.integers(0, 2**63 - 1)))
        X, y = src.take(rows)
        X = _as_float(X, "X")
        y = _as_float(y, "y")
        # ---- scaling (on the start sample): column by column, no copy of X's active columns (_column_moments)
        self._x_loc, self._x_scale = _column_moments(X, self._active)
        if not (np.all(np.isfinite(self._x_loc)) and np.all(np.isfinite(self._x_scale))):
            raise DataSpreadError(
                "x_scale_overflow", "X has a column whose range is too large to standardise (|values| near the float limit)")
        self._x_scale = np.where(self._x_scale > 0, self._x_scale, 1.0)
        # 0/1 columns (one-hot levels) stay indicators: centring a rare level's
        # column spreads it over every row and makes its coefficient ill-determined
        # next to the heavily weighted inliers (see _solve).
        binary = binary_all[self._active]
        self._x_loc = np.where(binary, 0.0, self._x_loc)
        self._x_scale = np.where(binary, 1.0, self._x_scale)
        levels = np.flatnonzero(binary) + 1  # their positions in the design (after the intercept)
        # exclusive 0/1 columns (one-hot blocks): the EM's normal equations from per-level sums (issue 29)
        self._layout = level_layout(self._active, binary_all, prev_one)
        self._y_loc = float(np.median(y))
        mad = _MAD_TO_SD * float(np.median(np.abs(y - self._y_loc)))
        scale = mad if mad > 0 else float(np.std(y))
        if not math.isfinite(scale):
            raise DataSpreadError("y_scale_overflow", "y has a range too large to standardise (|values| near the float limit)")
        self._constant = bool(ymax - ymin == 0)  # np.ptp(y) == 0
        if self._constant:
            return self._fit_constant(ymin, d)
        if not scale > 0:  # the start sample holds a single value of y, the table does not: half its range
            scale = 0.5 * (ymax - ymin)
        self._y_scale = scale
        sf = 0.0 if self.sigma2_floor is None else float(self.sigma2_floor)
        floor = max(_SIGMA2_FLOOR, sf / (scale * scale))
        if not math.isfinite(floor):
            raise DataSpreadError("sigma2_floor_overflow",
                                  "sigma2_floor is too large relative to the spread of y (sigma2_floor / scale**2 overflows)")

        ys = self._std_y(y)
        Z = self._design(X)
        del X, y

        # ---- the robust start on a subsample of the start sample, refined by EM there (dpcore.detect.robust_start)
        max_iter, tol = int(self.max_iter), float(self.tol)
        start = "lts" if self.start == "auto" else self.start
        first = em_start(Z, ys, levels, rng, start=start, n_starts=int(self.n_starts), n_subsets=self.n_subsets,
                         p_init=self.p_init, max_iter=max_iter, tol=tol, floor=floor)
        self._lts_beta = first["lts_beta"]  # raw LTS coefficients, standardised units (benchmarks/detect_leverage.py)
        self.start_log_likelihood_ = first["ll"]
        beta0, ow = first["beta"], first["outlier_weight"]

        # ---- EM on all rows
        if rows is None:  # the start sample is the table: EM on its standardised rows, one chunk in memory
            em_src, em_std = ArrayChunks(Z if self._layout is None else self._layout.factor(Z), ys), None
        else:  # EM over the source's chunks, standardising each (in the factored form, dpcore.detect.level_design)
            del Z, ys
            trim_heap()  # the start sample's arrays and the robust start's leave free heap resident (dpcore.runtime.heap)
            em_src, em_std = src, (*self._std(), self._layout)
        res = _em_chunks(em_src, em_std, beta0, first["s2"], first["p"], first["b"], max_iter, tol, floor=floor,
                         outlier_weight=ow)
        del em_src
        self.n_iter_ = int(res["n_iter"])
        self.converged_ = bool(res["converged"])
        self.last_relative_change_ = float(res["rel"])
        if not self.converged_:  # data, not a warning (module docstring)
            self.diagnostics_.append({
                "code": "not_converged", "n_iter": self.n_iter_, "max_iter": max_iter, "tol": tol,
                "last_relative_change": self.last_relative_change_,
            })
        if float(res["s2"]) <= floor * (1.0 + 1e-9):
            kind = "measurement" if floor > _SIGMA2_FLOOR else "numeric"
            self.diagnostics_.append({"code": "sigma2_at_floor", "floor": kind})
        self._beta = res["beta"]
        self._s2, self._p, self._b = float(res["s2"]), float(res["p"]), float(res["b"])
        sy = self._y_scale
        coef = np.zeros(d)
        coef[self._active] = sy * self._beta[1:] / self._x_scale
        self.coef_ = coef
        self.intercept_ = float(self._y_loc + sy * (self._beta[0] - float(np.sum(self._beta[1:] * self._x_loc / self._x_scale))))
        # max: undo round-off of the standardisation (floor / sy**2 * sy**2) so sigma2_ >= sigma2_floor exactly
        self.sigma2_ = max(self._s2 * sy * sy, sf)
        self.p_ = self._p
        self.b_ = self._b * sy * sy
        self.log_likelihood_ = float(res["ll"] - n * math.log(sy))
        # K = floor(sum t_i) at the fitted parameters: the last E-step's sum (labelling, slide "Parameters Learning")
        self.K_ = min(n, int(math.floor(float(res["st"]) + 1e-9)))
        return self

    def _fit_constant(self, value: float, d: int) -> "RobustRegressionDetector":
        self.diagnostics_.append({"code": "constant_y"})
        self._y_scale = 1.0
        self.coef_ = np.zeros(d)
        self.intercept_ = float(value)
        self.sigma2_ = self.p_ = self.b_ = 0.0
        self.n_iter_ = 0
        self.converged_ = True
        self.last_relative_change_ = 0.0
        self.start_log_likelihood_ = math.inf
        self.log_likelihood_ = math.inf
        self.K_ = 0
        return self

    def _label(self) -> None:
        t = self.decision_scores_
        n = t.shape[0]
        K = min(n, int(math.floor(float(self.posterior_.sum()) + 1e-9)))
        self.K_ = K
        self.labels_, self.threshold_ = top_k_labels(t, K)

    # ------------------------------------------------------------ scoring
    def decision_function(self, X, y) -> np.ndarray:
        """Posterior outlier log-odds ``log(t_i / (1 - t_i))`` of new rows under the fitted parameters.

        Same E-step as the fit (module docstring), so on the training rows it
        returns exactly ``decision_scores_``. When the fit's level layout
        holds for the rows (every one-hot group 0/1 with at most one level
        per row, as on the training rows), the product ``Z @ beta`` is the
        factored one of the EM's passes
        (:class:`~dpcore.detect.level_design.FactoredDesign`), else the dense
        design's; the two agree to round-off.

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : array-like of shape (n,)

        Returns
        -------
        ndarray of shape (n,)
            Higher = more anomalous; ``expit`` of it is :math:`t_i`.

        Raises
        ------
        RuntimeError
            The detector is not fitted.
        ValueError
            Wrong shapes (``d`` must match the fit) or non-finite values.
        """
        if not hasattr(self, "_constant"):
            raise RuntimeError("RobustRegressionDetector is not fitted yet; call fit(X, y) first")
        X = _check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} columns but the detector was fitted with {self.n_features_in_}")
        y = _check_y(y, X.shape[0])
        if self._constant:
            return np.where(y != self.intercept_, np.inf, -np.inf)
        lay = getattr(self, "_layout", None)
        if lay is not None and lay.holds_for(X, self._active):  # the factored design, as the EM's passes use it
            Z = lay.standardise(X, self._active, self._x_loc, self._x_scale)
        else:
            Z = self._design(X)
        return self.standardised_scores(Z, self._std_y(y))

    def standardised_scores(self, Z, ys) -> np.ndarray:
        """:meth:`decision_function` of rows already standardised by this fit (a chunk source's ``standardised``).

        ``Z`` is the dense standardised design or its factored form
        (:class:`~dpcore.detect.level_design.FactoredDesign`, which
        :meth:`decision_function` uses whenever the fit's level layout holds
        for the rows, as on the training rows), ``ys`` the standardised
        ``y``: the streamed scoring pass reads both from the chunk cache
        instead of encoding the rows again (issue 29). Not for a fit of a
        constant ``y`` (no standardisation; :meth:`decision_function`).
        """
        # errstate is thread-local: no floating-point warning leaves (module docstring); one BLAS thread:
        # dpcore.runtime.blas_threads
        with np.errstate(all="ignore"), one_blas_thread():
            return _log_odds(ys - Z @ self._beta, self._s2, self._p, self._b)
