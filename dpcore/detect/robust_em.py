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
(:func:`_mstats`: :math:`S_t`, :math:`S_u`, :math:`T`, the weighted normal
equations :math:`Z^TWZ` and :math:`Z^TWy`; :func:`_ru`: :math:`R_u` with the
new coefficients; the log-likelihood), so EM runs over a *chunk source*
(:class:`ArrayChunks`; the warehouse's :class:`dpcore.detect.streaming.PartitionChunks`):
each M-step is two passes over the chunks (:func:`chunk_pass`, a module-level
function the source's mapper may run elsewhere), the partial sums are added
in the caller and nothing per row is kept (:func:`_em_chunks`; :func:`_em`
is its one-chunk case). One pass before them takes the exact extremes
(constant columns, 0/1 columns, constant :math:`y`). The scaling
(:math:`y`'s median and MAD, the columns' mean and sd) and the robust start
below use the *start sample*: all rows when :math:`n \le` ``start_sample``
(then EM runs on those rows in memory and the fit is exactly the in-memory one,
chunks or not), else ``start_sample`` rows drawn uniformly with
``random_state`` (:func:`_start_sample_rows`, a keyed hash of the row
positions: the choice depends on :math:`n` and the key only). The chunks'
partial sums are added with one rounding (:func:`_fsum`), but each chunk's own
sum rounds differently from a one-pass sum (last bits); on well-conditioned
fits the results agree to ~1e-13, on a flat likelihood ridge (heavy-tailed
errors, tens of SQUAREM cycles) the extrapolation amplifies the difference to a
few 1e-9 in the parameters and below 1e-8 in the scores (tests/test_detect_stream.py).

Labelling (slide "Parameters Learning"): the top :math:`K=\lfloor\sum_i t_i\rfloor`
records by :math:`t_i` (ties: lower row index first; a ``1e-9`` guard absorbs
round-off in the sum).

Robust start (``start="auto"`` = ``"lts"``, issue 22)
------------------------------------------------------
EM is local; started from least squares it is captured by bad leverage points.
The start is FAST-LTS (Rousseeuw and Van Driessen, "Computing LTS regression
for large data sets", Data Min. Knowl. Discov. 2006), the least trimmed
squares estimator of Rousseeuw (1984, JASA 79), on a random subsample of at
most ``_START_ROWS = 3000`` rows of the start sample ("all rows" below means
the start sample's rows, see "Chunks") (``m`` rows, ``q`` regression coefficients,
coverage :math:`h=\lfloor (m+q+1)/2\rfloor`, breakdown point
:math:`(m-h+1)/m\approx 50\%`):

1. ``n_subsets`` random elemental subsets (``q`` distinct rows each; their
   exact fit, batched). With a fraction :math:`\varepsilon` of outliers a
   subset is clean with probability :math:`(1-\varepsilon)^q`, so :math:`N`
   subsets hold a clean one with probability
   :math:`1-(1-(1-\varepsilon)^q)^N`. The default (``n_subsets=None``) is the
   smallest :math:`N\ge500` giving 99% at :math:`\varepsilon=0.4`, capped at
   3,000: 500 cover :math:`q\le9` (8 contextual attributes), :math:`q=11`
   (10 attributes) needs 1,266 (:func:`_n_subsets_auto`). Wide designs (many
   one-hot columns) get fewer, so that one concentration step over all of
   them costs at most :math:`10^9` multiply-adds (never fewer than
   ``4 * n_starts``); for them elemental sets are mostly singular anyway, and
   the level-median correction below does the work.
2. Two concentration steps (C-steps: refit least squares on the :math:`h`
   rows with the smallest squared residuals) on every subset. Theorem 1 of
   the paper: a C-step never increases the trimmed objective
   :math:`\sum_{i\le h} r^2_{(i)}` (tested). Exactly :math:`h` rows are taken
   (``argpartition``), ties or not, as the theorem needs.
3. The ``max(10, n_starts)`` best distinct candidates are concentrated to
   convergence (at most 100 steps); the best trimmed objective wins.
4. Large tables (:math:`n > m`): the winner is concentrated on **all** rows
   (at most 5 C-steps with :math:`h=\lfloor (n+q+1)/2\rfloor`; one pass over
   the rows each, so the 1M x 5 fit stays within its 10 s budget).
5. Reweighting (Rousseeuw and Leroy 1987, Sec. 5.1; the paper, Sec. 4): the
   raw LTS scale :math:`s_0^2 = \frac1h\sum_{i\le h}r^2_{(i)} / c_{h/n}`,
   :math:`c_\alpha = E[X^2 \mid |X|\le\Phi^{-1}((1+\alpha)/2)]` for
   standard normal :math:`X` (:func:`_trimmed_variance_factor`), then least
   squares on the rows with :math:`|r_i|\le 2.2414\,s_0` (97.5% of
   :math:`|N(0,1)|`). This reweighted fit is the EM's start (:math:`\sigma`
   from the MAD of its residuals, ``p = p_init``).

Before each EM, the coefficient of every 0/1 column (one-hot level) is
corrected by the median residual of its rows, and the intercept by that of
the rows in no level (the reference levels), two backfitting sweeps
(:func:`_level_medians`), on the subsample and again on all rows: LTS may
leave a whole level outside its h-subset, and levels absent from the
subsample have no information at all. All batched numpy; the random choices
come from ``numpy.random.default_rng(random_state)``.

Masking: why the EM's coefficient step differs under ``start="lts"``
--------------------------------------------------------------------
A good start is not enough. On a fixture with a tight cluster of bad
leverage points (``benchmarks/detect_leverage.py``: a fraction eps of the rows
at :math:`x\approx10`, :math:`y` far below the plane, plus 5% vertical
outliers) EM started at the reweighted LTS fit -- which ranks the planted
rows perfectly -- slid into the masked fit (the plane through the cluster,
clean rows flagged; ROC AUC 0.42-0.71). With :math:`\sigma^2` capped at
:math:`1.5^2` times the LTS scale and the EM run from every kept LTS
candidate, 19 of the 863 seeds where LTS itself was right failed
(n = 30..1000, p = 1, 2, 3, 5, eps = 0.1..0.4, 20 seeds per cell): 16 drifted
from the reweighted LTS start, 3 were won on likelihood by the EM of another
LTS candidate. Measured while deciding:

* capping :math:`\sigma^2` at :math:`1.5^2` or :math:`1^2` times the
  reweighted LTS scale, or fixing it there (the MM-estimator's fixed S-scale,
  Yohai 1987), recovered none of the 16 (the masked fits had
  :math:`\sigma^2` within the cap: the drift is in :math:`\vec w`, not in
  :math:`\sigma`); capping :math:`p\le0.5` changed nothing either;
* choosing among EM results by the trimmed objective, by a bisquare
  M-objective at the LTS scale, or by the distance of the EM coefficients
  from the LTS ones (a Hausman-type check, Yohai, Stahel and Zamar 1991)
  does not separate drifted from good fits (10 seeds per cell): good fits reach trimmed-objective
  ratios of 3.8 and coefficient distances of 64 (per coefficient, in
  covariance units), drifted ones start at 1.1 and 14; the masked fits even
  have the *higher* mixture likelihood and the lower bisquare objective;
* what drives the drift is the Cauchy part of the weighted least squares,
  :math:`\omega_i=(1-t_i)/\sigma^2+t_i\bar\tau_i`: for an outlier far away
  :math:`\bar\tau_i\approx2/e_i^2`, so its pull on :math:`\vec w` is
  :math:`\propto x_i/e_i` -- it redescends only like the Cauchy
  :math:`\psi`, and a cluster at high leverage multiplies it; as the fit
  moves towards the cluster, :math:`e_i` shrinks and the pull grows (an
  M-estimator with a slowly redescending :math:`\psi` has no leverage
  breakdown protection; Maronna, Martin and Yohai 2006, Sec. 5.9).

So under ``start="lts"`` the coefficient step uses
:math:`\omega_i=(1-t_i)/\sigma^2+\kappa\,t_i\bar\tau_i` with
:math:`\kappa` = ``_OUTLIER_WEIGHT`` = :math:`10^{-3}`: the rows the model
holds as outliers keep a thousandth of their weight, so the step is driven by
the inliers, like the hard-redescending (bisquare) :math:`\psi` of the
MM-estimator's M-step (Yohai 1987; Salibian-Barrera and Yohai 2006 for the
fast S/MM computation), which keeps the start's breakdown point. With it, and
the reweighted fit as the only start, all 19 were recovered (ROC AUC 1.000)
and none of the 863 failed. :math:`\kappa`
stays positive so that a one-hot level whose rows the Cauchy component holds
still gets its own weighted mean (the exact solve of
:func:`_solve_exact_or_ridge` needs their weight above :math:`10^{-10}` of the
intercept's); measured window: :math:`\kappa\in[10^{-4}, 3\cdot10^{-2}]`
recovered all 863, :math:`\kappa=0.1` failed one; the floor tests
(whole-number levels) hold down to :math:`10^{-6}` with the reference-level
correction above. The step is then an ECM step for the *inlier* part of
:math:`Q` only, so :math:`\ell` is no longer guaranteed to increase at every
step (the SQUAREM safeguard and the stopping rule are unchanged); the E-step,
the :math:`(\sigma^2, b)` step, the scores, ``labels_``, ``K`` and the
measurement floor are exactly as above. Only the reweighted LTS fit starts the
EM (the MM principle: refine the high-breakdown estimate locally; other LTS
candidates, refined by EM, won on likelihood with masked fits of
:math:`p>0.5` -- the tight cluster as the "inlier" Gaussian).

``start="legacy"`` is the start before issue 22, kept for comparison: 300
elemental subsets, two C-steps, ``n_starts`` kept and concentrated (at most 30
steps) with :math:`h=\lfloor(m+q+2)/2\rfloor`, each refined by exact EM, best
subsample likelihood. ``start="ols"``: exact EM from least squares on the
subsample (the classical, non-robust start).

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

import contextlib
import math
import numbers

import numpy as np
from ..lazy_modules import lazy_module

_special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

__all__ = ["START_SAMPLE", "ArrayChunks", "DataSpreadError", "RobustRegressionDetector", "chunk_pass", "model_parameters"]

#: Constructor parameters, in order (``get_params``).
_PARAMS = (
    "max_iter", "tol", "n_starts", "random_state", "p_init", "sigma2_floor", "start", "n_subsets", "start_sample",
)
#: Values of ``start``.
_STARTS = ("auto", "lts", "ols", "legacy")

_LOG_PI = math.log(math.pi)
_LOG_2PI = math.log(2.0 * math.pi)
#: Floor of sigma^2 in standardised units (y has unit robust spread).
_SIGMA2_FLOOR = 1e-12
#: p is kept in [_P_FLOOR, 1 - _P_FLOOR] so both log-weights stay finite.
_P_FLOOR = 1e-9
#: Standardised y is clipped here so squared residuals cannot overflow.
_Y_CLIP = 1e100
#: Relative ridge on the normal equations (collinear contexts).
_RIDGE = 1e-9
#: Smallest share of its diagonal entry a Cholesky pivot may keep before the
#: M-step falls back to the ridge (see :func:`_solve_exact_or_ridge`).
_RANK_TOL = 1e-10
#: Lazily created ``threadpoolctl.ThreadpoolController`` (False when unavailable).
_TP_CONTROLLER = None
#: Work budget (multiply-adds) of one concentration step over all elemental
#: starts, ``n_elemental * rows * q**2``; bounds the number of elemental starts
#: for wide designs (many one-hot columns), never below ``4 * n_starts``.
_ELEMENTAL_WORK = 1e9
#: Rows of the robust-start subsample.
_START_ROWS = 3000
#: Default rows of the start sample (``start_sample``): the robust start and the scaling see at most this many
#: rows, drawn with ``random_state``; the EM then runs on all rows in chunks (issue 21).
START_SAMPLE = 500_000
#: Elemental subsets drawn for the robust start.
_N_ELEMENTAL = 300
#: Concentration steps applied to every elemental start / to the kept ones.
_C_STEPS_ALL = 2
_C_STEPS_KEPT = 30
#: C-steps to convergence on the kept FAST-LTS candidates: at most this many.
_C_STEPS_MAX = 100
#: C-steps on all rows after FAST-LTS on the start subsample (large tables).
_C_STEPS_FINAL = 5
#: Share of the Cauchy weights t_i * tau_bar_i kept in the coefficient step of start="lts"/"auto"
#: (module docstring, "Masking"): small enough that no leverage cluster pulls the fit, positive so
#: that a one-hot level whose rows the Cauchy holds keeps its own weighted mean.
_OUTLIER_WEIGHT = 1e-3
#: Reweighting of the LTS fit: rows with |r| <= _RW_CUT * s (the 97.5% quantile of |N(0, 1)|).
_RW_CUT = 2.241402727604947
#: Consistency factor of the MAD for the normal distribution.
_MAD_TO_SD = 1.482602218505602


# --------------------------------------------------------------------------- helpers
def _as_float(a, name: str) -> np.ndarray:
    """``a`` as a float64 array, refusing complex and non-numeric input (message names ``name``)."""
    arr = np.asarray(a)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must be real-valued, got a complex array")
    try:
        return np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric (convertible to float); got dtype {arr.dtype}") from None


def _check_X(X, name: str = "X") -> np.ndarray:
    arr = _as_float(X, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows x contextual columns), got a {arr.ndim}-D array")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has NaN or infinite values; every value must be finite")
    return arr


def _check_y(y, n: int, name: str = "y") -> np.ndarray:
    arr = _as_float(y, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got a {arr.ndim}-D array")
    if arr.shape[0] != n:
        raise ValueError(f"X and {name} have different numbers of rows; they must match")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has NaN or infinite values; every value must be finite")
    return arr


def _solve_exact_or_ridge(G: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve one system ``G beta = rhs`` without a ridge when it is well posed, else :func:`_solve`.

    Well posed: the Cholesky factor exists and every pivot keeps more than
    ``_RANK_TOL`` of its column's diagonal entry (``L_jj^2 > 1e-10 G_jj``, i.e.
    no column is explained by the earlier ones up to ``1 - 1e-10`` of its
    weighted variance). The EM M-step uses this: under the measurement floor the
    Gaussian rows weigh ~1e7 times more than the rows the Cauchy component
    holds, and even a relative ridge of 1e-9 on the level columns then moved the
    intercept -- i.e. the mean of the dropped reference level, whose rows were
    all held by the Cauchy -- far from that level's rows, which kept the whole
    level flagged (NYC flights ``distance ~ route``: the 55 rows of the
    reference route, residual 765 miles). Without a ridge the weighted least
    squares puts every level's fitted value at its own weighted mean, however
    small its weights. Collinear designs still get the ridge.
    """
    diag = np.diagonal(G)
    if np.all(diag > 0):
        try:
            L = np.linalg.cholesky(G)
        except np.linalg.LinAlgError:
            L = None
        if L is not None and np.all(np.square(np.diagonal(L)) > _RANK_TOL * diag):
            with _one_blas_thread():
                return np.linalg.solve(G, rhs)
    return _solve(G, rhs)


def _solve(G: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve (stacks of) normal equations ``G beta = rhs`` with a tiny per-column relative ridge.

    ``G`` has shape (..., q, q), ``rhs`` (..., q). The ridge adds ``1e-9 * G_jj``
    to each diagonal entry (``1e-9`` times the mean diagonal, or ``1e-9``, where
    ``G_jj = 0``). Relative to each column's *own* weight, it makes every stack
    positive definite without changing well-posed solutions beyond round-off.
    (A ridge relative to the *mean* diagonal shrank the coefficient of a rare
    one-hot level whose rows all carry small EM weights towards 0 -- a whole
    category of records was then left unfitted and flagged.)

    Column 0 is the intercept (the constant column of every design here) and
    gets no ridge: its diagonal entry is the weight of *all* rows, so a ridge
    relative to it outweighed the rows of the dropped reference level once the
    EM had down-weighted them, pulled the intercept off that level's mean and
    flagged the whole level (NYC flights ``distance ~ route``: the 55 rows of
    the reference route, residual 765 miles). The intercept column is 1 on every
    row, so ``G`` stays positive definite without it.

    The q x q solves are small; they run with one BLAS thread (``threadpoolctl``),
    as multi-threaded OpenBLAS is up to ~40x slower on them on a busy machine.
    """
    q = G.shape[-1]
    diag = np.diagonal(G, axis1=-2, axis2=-1)
    mean = diag.mean(axis=-1, keepdims=True)
    fill = np.where(mean > 0, mean, 1.0)
    lam = _RIDGE * np.where(diag > 0, diag, fill)
    lam[..., 0] = 0.0  # the intercept is never shrunk (see above)
    G = G + lam[..., None] * np.eye(q)
    with _one_blas_thread():
        try:
            return np.linalg.solve(G, rhs[..., None])[..., 0]
        except np.linalg.LinAlgError:  # pragma: no cover - ridge makes this practically unreachable
            return (np.linalg.pinv(G) @ rhs[..., None])[..., 0]


def _one_blas_thread():
    """Context manager limiting BLAS to one thread (a no-op without ``threadpoolctl``)."""
    global _TP_CONTROLLER
    if _TP_CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController

            _TP_CONTROLLER = ThreadpoolController()
        except Exception:  # pragma: no cover - threadpoolctl ships with scikit-learn
            _TP_CONTROLLER = False
    if _TP_CONTROLLER is False:  # pragma: no cover
        return contextlib.nullcontext()
    return _TP_CONTROLLER.limit(limits=1, user_api="blas")


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


def _log_odds(r: np.ndarray, s2: float, p: float, b: float) -> np.ndarray:
    """Posterior log-odds ``log(t_i / (1 - t_i))`` that record i's error is Cauchy (never saturates)."""
    r2 = r * r
    lg = (math.log1p(-p) - 0.5 * (_LOG_2PI + math.log(s2))) - r2 * (0.5 / s2)
    lc = (math.log(p) - _LOG_PI - 0.5 * math.log(2.0 * b)) - np.log1p(r2 * (0.5 / b))
    return lc - lg


def _estep(r: np.ndarray, s2: float, p: float, b: float):
    """Posterior outlier probabilities, E[tau | outlier] and the log-likelihood."""
    r2 = r * r
    lg = (math.log1p(-p) - 0.5 * (_LOG_2PI + math.log(s2))) - r2 * (0.5 / s2)
    lc = (math.log(p) - _LOG_PI - 0.5 * math.log(2.0 * b)) - np.log1p(r2 * (0.5 / b))
    ll = float(np.logaddexp(lg, lc).sum())
    t = _special.expit(lc - lg)
    etau = 1.0 / (b + 0.5 * r2)
    return t, etau, ll


def _mstats(Z, y, t, etau, s2, outlier_weight: float = 1.0):
    """The M-step's sufficient statistics of some rows: they add over chunks of rows.

    Returns ``st = sum t``, ``su = sum (1-t)``, ``te = sum t tau_bar``, the
    weighted normal equations ``G = Z^T W Z`` and ``rhs = Z^T W y`` with
    ``w = (1-t)/sigma^2 + outlier_weight * t tau_bar`` (module docstring,
    "EM"). Everything the M-step needs except ``ru = sum (1-t) e_new^2``, which
    needs the new coefficients (:func:`_ru`).
    """
    st = float(t.sum())
    u = 1.0 - t
    w = u * (1.0 / s2) + outlier_weight * (t * etau)  # 1.0 * x == x exactly: the exact step is unchanged
    Zw = Z * w[:, None]
    return st, float(u.sum()), float(t @ etau), Zw.T @ Z, Zw.T @ y


def _ru(Z, y, t, beta_new) -> float:
    """``sum (1-t_i) e_i^2`` with the residuals of the new coefficients (the sigma^2 update's numerator)."""
    r = y - Z @ beta_new
    return float((1.0 - t) @ (r * r))


def _mstep(Z, y, t, etau, s2, b, floor: float = _SIGMA2_FLOOR, outlier_weight: float = 1.0):
    """One ECM sweep: p, then (w, b0), then (sigma^2, b) jointly (see the module docstring).

    ``outlier_weight`` scales the Cauchy part ``t_i tau_bar_i`` of the
    coefficient step's weights: 1 is the exact ECM step (``start="legacy"``,
    ``"ols"``); ``_OUTLIER_WEIGHT`` (``start="lts"``) is the inlier-driven step
    of the module docstring, section "Masking". Built from the same
    per-chunk statistics as the streamed EM (:func:`_mstats`, :func:`_ru`).
    """
    n = y.shape[0]
    st, su, te, G, rhs = _mstats(Z, y, t, etau, s2, outlier_weight)
    p = min(max(st / n, _P_FLOOR), 1.0 - _P_FLOOR)
    beta = _solve_exact_or_ridge(G, rhs)
    s2, b = _noise_step(su, _ru(Z, y, t, beta), st, te, s2, b, floor)
    return beta, s2, p, b, y - Z @ beta


def _noise_step(
    su: float, ru: float, st: float, te: float, s2_old: float, b_old: float, floor: float = _SIGMA2_FLOOR
) -> tuple[float, float]:
    """Joint conditional maximum of Q over (sigma^2, b) subject to b >= sigma^2.

    ``su = sum(1-t)``, ``ru = sum((1-t) e^2)``, ``st = sum(t)``, ``te = sum(t tau_bar)``.
    Q(sigma^2, b) = -su/2 log sigma^2 - ru/(2 sigma^2) + st/2 log b - te b is concave
    in (log 1/sigma^2, log b) and the constraint is the half-plane
    log b - log sigma^2 >= 0, so: take the unconstrained maximum
    (ru/su, st/(2 te)) if feasible, else the unique maximum on the boundary
    b = sigma^2 = v, the positive root of -2 te v^2 + (st - su) v + ru = 0.
    Vanishing denominators (no inliers / no outliers) keep the old value.
    ``floor`` (standardised units, >= the numeric floor): sigma^2 >= floor; raising
    sigma^2 to it and b to max(b, sigma^2) is the exact maximum on the constrained
    set (Q is separable and unimodal in each part, module docstring).
    """
    tiny = 1e-12
    s2 = ru / su if su > tiny else s2_old
    b = 0.5 * st / te if (st > tiny and te > 1e-300) else b_old
    if b < s2 and su > tiny and st > tiny and te > 1e-300 and ru > 0:
        c = st - su
        s2 = b = (c + math.sqrt(c * c + 8.0 * te * ru)) / (4.0 * te)
    s2 = max(s2, floor)
    return s2, max(b, s2)


# --------------------------------------------------------------------------- chunks (issue 21)
class ArrayChunks:
    """In-memory rows ``(X, y)`` as a chunk source: consecutive chunks of ``rows`` rows (default: one chunk).

    The chunk-source protocol of the streamed fit
    (:meth:`RobustRegressionDetector.fit_chunks`): ``n_rows``, ``n_features``,
    ``load(i)`` (the raw ``X``, ``y`` of chunk ``i``), ``take(rows)`` (the rows
    at sorted positions ``rows``, or all rows for None), ``standardised(i, std)``
    (chunk ``i``'s ``(Z, y)``, :func:`_standardised`; a source may cache it) and ``map(fn, state)``
    (``mapper(fn, [(self, i, state) for every chunk])``). :meth:`fit` runs on
    one chunk of this class; tests run it with awkward chunk sizes.
    :class:`dpcore.detect.streaming.PartitionChunks` is the warehouse's source.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    rows : int, optional
        Rows per chunk (``None``: one chunk).
    mapper : callable, optional
        ``mapper(fn, items) -> list`` (default :func:`dpcore.chunks.serial_map`).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, rows: int | None = None, mapper=None) -> None:
        self.X = X
        self.y = y
        self.rows = rows
        self.mapper = mapper

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_chunks(self) -> int:
        n = self.n_rows
        if n == 0:
            return 0
        rows = n if self.rows is None else int(self.rows)
        return -(-n // rows)

    def load(self, i: int):
        """Chunk ``i``: ``(X, y)`` views."""
        if self.rows is None:
            return self.X, self.y
        a = i * int(self.rows)
        return self.X[a:a + int(self.rows)], self.y[a:a + int(self.rows)]

    def standardised(self, i: int, std):
        """Chunk ``i`` standardised by ``std`` (:func:`_standardised`)."""
        X, y = self.load(i)
        return _standardised(X, y, std)

    def take(self, rows):
        """Rows at the sorted positions ``rows`` (None: all rows, no copy)."""
        if rows is None:
            return self.X, self.y
        return self.X[rows], self.y[rows]

    def map(self, fn, state) -> list:
        """``mapper(fn, [(self, i, state) ...])`` over every chunk, results in chunk order."""
        items = [(self, i, state) for i in range(self.n_chunks)]
        return (self.mapper or _serial_map)(fn, items)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser (Steele, Lea and Flood 2014) on uint64: a bijection that scrambles the bits."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


#: Row positions hashed per block when drawing the start sample.
_SAMPLE_BLOCK = 1 << 20


def _start_sample_rows(n: int, m: int, key: int) -> np.ndarray:
    """Sorted positions of ``m`` of ``n`` rows, uniformly at random without replacement, in O(m) memory.

    Each position ``i`` gets the pseudo-random key
    ``splitmix64(splitmix64(i XOR k1) XOR k2)`` with ``k1 = splitmix64(key)``,
    ``k2 = splitmix64(k1)`` (distinct for distinct positions: the finaliser is a
    bijection; two keyed rounds, so that samples of nearby keys are not
    translates of one another) and the
    ``m`` smallest keys win: a uniform ``m``-subset for a random ``key``
    (the detector draws it from ``random_state``). The choice depends only
    on ``n``, ``m`` and ``key``, never on the data or the chunk size; positions
    are hashed in blocks of :data:`_SAMPLE_BLOCK`, keeping the best ``m`` so far.
    """
    k1 = _splitmix64(np.array([key], dtype=np.uint64))
    k2 = _splitmix64(k1)
    best_keys = np.empty(0, dtype=np.uint64)
    best_rows = np.empty(0, dtype=np.int64)
    for a in range(0, n, _SAMPLE_BLOCK):
        rows = np.arange(a, min(n, a + _SAMPLE_BLOCK), dtype=np.int64)
        keys = _splitmix64(_splitmix64(rows.astype(np.uint64) ^ k1) ^ k2)
        keys = np.concatenate([best_keys, keys])
        rows = np.concatenate([best_rows, rows])
        if keys.size > m:
            keep = np.argpartition(keys, m - 1)[:m]
            keys, rows = keys[keep], rows[keep]
        best_keys, best_rows = keys, rows
    return np.sort(best_rows)


def _serial_map(fn, items) -> list:
    from ..chunks import serial_map

    return serial_map(fn, items)


def _standardised(X: np.ndarray, y: np.ndarray, std) -> tuple[np.ndarray, np.ndarray]:
    """The design ``Z`` (intercept first) and standardised ``y`` of raw rows; ``std=None``: already standardised."""
    if std is None:
        return X, y
    active, x_loc, x_scale, y_loc, y_scale = std
    return _design_of(X, active, x_loc, x_scale), np.clip((y - y_loc) / y_scale, -_Y_CLIP, _Y_CLIP)


def _design_of(X: np.ndarray, active: np.ndarray, x_loc: np.ndarray, x_scale: np.ndarray) -> np.ndarray:
    """Standardised design of raw rows: the intercept, then the active columns centred and scaled (row-wise)."""
    Xa = X[:, active]
    Z = np.empty((X.shape[0], Xa.shape[1] + 1))
    Z[:, 0] = 1.0
    np.subtract(Xa, x_loc, out=Z[:, 1:])
    Z[:, 1:] /= x_scale
    return Z


def chunk_pass(item):
    """One chunk's share of a pass of the streamed fit: a module-level function a mapper can ship.

    ``item = (source, i, state)``; ``state["kind"]`` says which pass:

    * ``"scan"``: column minima and maxima, whether each column is 0/1, the
      minimum and maximum of ``y`` (checks finiteness: errors as :meth:`RobustRegressionDetector.fit`);
    * ``"estep"``: the E-step at ``state``'s parameters (log-likelihood) and the
      M-step's sufficient statistics :func:`_mstats`;
    * ``"ru"``: :func:`_ru` with the posteriors at the old parameters and the new coefficients.

    Everything returned adds (or takes extremes) over chunks; the caller combines.
    """
    src, i, state = item
    kind = state["kind"]
    with np.errstate(all="ignore"):
        if kind == "scan":
            X, y = src.load(i)
            X = _check_X(X)
            y = _check_y(y, X.shape[0])
            return (X.min(axis=0), X.max(axis=0), np.all((X == 0.0) | (X == 1.0), axis=0), float(y.min()),
                    float(y.max()))
        Z, ys = src.standardised(i, state["std"])
        beta, s2, p, b = state["theta"]
        r = ys - Z @ beta
        if kind == "estep":
            t, etau, ll = _estep(r, s2, p, b)
            return (ll, *_mstats(Z, ys, t, etau, s2, state["ow"]))
        if kind == "ru":
            return _ru(Z, ys, _special.expit(_log_odds(r, s2, p, b)), state["beta_new"])
    raise ValueError(f"unknown chunk pass kind {kind!r}")


def _estep_pass(src, std, beta, s2, p, b, ow):
    """E-step over every chunk: the state ``(beta, s2, p, b, ll, (st, su, te, G, rhs))``."""
    parts = src.map(chunk_pass, {"kind": "estep", "std": std, "theta": (beta, s2, p, b), "ow": ow})
    ll, st, su, te, G, rhs = (_fsum([x[k] for x in parts]) for k in range(6))
    return (beta, s2, p, b, ll, (st, su, te, G, rhs))


def _fsum(parts: list):
    """The chunks' partial sums added with one rounding (:func:`math.fsum`, element-wise for arrays).

    The order of the chunks then does not matter and the combined sums carry
    only the chunks' own round-off (one chunk: the partial sum itself, bit for
    bit). On a flat likelihood ridge, where SQUAREM amplifies last-bit
    differences, this halves the streamed fit's distance from the in-memory
    one against adding the partial sums in turn (tests/test_detect_stream.py).
    """
    if len(parts) == 1:
        return parts[0]
    if np.ndim(parts[0]) == 0:
        return math.fsum(parts)
    stacked = np.stack(parts).reshape(len(parts), -1)
    return np.array([math.fsum(col) for col in stacked.T]).reshape(np.shape(parts[0]))


def _em_chunks(
    src, std, beta, s2, p, b, max_iter: int, tol: float, accelerate: bool = True, floor: float = _SIGMA2_FLOOR,
    outlier_weight: float = 1.0,
):
    """EM over a chunk source: :func:`_em`'s iteration with every row-wise sum taken chunk by chunk.

    Each M-step is two passes over the chunks: the E-step at the current
    parameters with the statistics :func:`_mstats` (they add over chunks),
    then, once the new coefficients are solved, :func:`_ru`; the E-step of the
    next parameters is the next pass. Nothing per row is kept between passes,
    so memory does not grow with the rows. ``std``: the standardisation
    ``(active, x_loc, x_scale, y_loc, y_scale)`` applied to each raw chunk, or
    None for chunks that are already ``(Z, y)``.
    """
    n = int(src.n_rows)
    ow = outlier_weight

    def step(state):
        beta_o, s2_o, p_o, b_o, _ll, (st, su, te, G, rhs) = state
        p_n = min(max(st / n, _P_FLOOR), 1.0 - _P_FLOOR)
        beta_n = _solve_exact_or_ridge(G, rhs)
        ru = _fsum(src.map(chunk_pass, {"kind": "ru", "std": std, "theta": (beta_o, s2_o, p_o, b_o),
                                        "beta_new": beta_n}))
        s2_n, b_n = _noise_step(su, ru, st, te, s2_o, b_o, floor)
        return _estep_pass(src, std, beta_n, s2_n, p_n, b_n, ow)

    def vec(st):
        return np.r_[st[0], math.log(st[1]), math.log(st[2]) - math.log1p(-st[2]), math.log(st[3])]

    state = _estep_pass(src, std, beta, s2, p, b, ow)
    rel = math.inf
    converged = False
    it = 0
    while it < max_iter:
        ll_old = state[4]
        if accelerate and max_iter - it >= 3:
            s1 = step(state)
            s2_ = step(s1)
            it += 2
            new = s2_
            th0, th1, th2 = vec(state), vec(s1), vec(s2_)
            rr, v = th1 - th0, th2 - 2.0 * th1 + th0
            nv = float(np.linalg.norm(v))
            if nv > 0 and np.all(np.isfinite(v)):
                alpha = max(min(-float(np.linalg.norm(rr)) / nv, -1.0), -100.0)
                if alpha < -1.0:
                    th = th0 - 2.0 * alpha * rr + alpha * alpha * v
                    q = beta.shape[0]
                    e_beta = th[:q]
                    e_s2 = max(math.exp(min(th[q], 700.0)), floor)
                    e_p = min(max(float(_special.expit(th[q + 1])), _P_FLOOR), 1.0 - _P_FLOOR)
                    e_b = max(math.exp(min(th[q + 2], 700.0)), _SIGMA2_FLOOR)
                    if np.all(np.isfinite(e_beta)):  # else the E-step's likelihood is not finite: no candidate
                        e_state = _estep_pass(src, std, e_beta, e_s2, e_p, e_b, ow)
                        if math.isfinite(e_state[4]):
                            cand = step(e_state)
                            it += 1
                            if math.isfinite(cand[4]) and cand[4] >= s2_[4]:
                                new = cand
            state = new
        else:
            state = step(state)
            it += 1
        rel = abs(state[4] - ll_old) / max(abs(ll_old), n)
        if rel < tol:
            converged = True
            break
    beta, s2, p, b = state[:4]
    return {"beta": beta, "s2": s2, "p": p, "b": b, "ll": state[4], "n_iter": it, "converged": converged, "rel": rel,
            "st": state[5][0]}


def _em(
    Z, y, beta, s2, p, b, max_iter: int, tol: float, accelerate: bool = True, floor: float = _SIGMA2_FLOOR,
    outlier_weight: float = 1.0,
):
    """Run EM from the given parameters on in-memory ``(Z, y)``; returns a dict with the final state.

    With ``accelerate`` the EM map is extrapolated by SQUAREM (Varadhan and
    Roland 2008, step length ``-||r|| / ||v||`` clipped to [-100, -1]) on
    :math:`(\\vec w, b_0, \\log\\sigma^2, \\operatorname{logit} p, \\log b)`: two EM steps,
    one extrapolated point, one stabilising EM step from it; the result is kept
    only if its log-likelihood is at least that of the two plain steps, so
    :math:`\\ell` still never decreases. ``n_iter`` counts M-steps (EM-map
    evaluations, 3 per accelerated cycle); plain steps finish the budget.
    ``floor``: lower bound of sigma^2 in standardised units (>= ``_SIGMA2_FLOOR``);
    ``outlier_weight``: see :func:`_mstep` (1 = the exact ECM).

    The one-chunk case of :func:`_em_chunks` (the same code streams a table in chunks).
    """
    return _em_chunks(ArrayChunks(Z, y), None, beta, s2, p, b, max_iter, tol, accelerate, floor, outlier_weight)


def _lts_starts(Z: np.ndarray, y: np.ndarray, rng: np.random.Generator, n_keep: int) -> list[np.ndarray]:
    """``start="legacy"``: FAST-LTS-like robust starts on a (sub)sample, the ``n_keep`` best coefficient vectors."""
    m, q = Z.shape
    h = min(m, (m + q + 2) // 2)
    n_el = max(min(_N_ELEMENTAL, int(_ELEMENTAL_WORK // (m * q * q))), 4 * n_keep)
    # elemental subsets: q distinct rows each (argpartition of uniform keys)
    idx = np.argpartition(rng.random((n_el, m)), q - 1, axis=1)[:, :q]
    A = Z[idx]  # (n_el, q, q)
    At = np.swapaxes(A, 1, 2)
    B = _solve(At @ A, (At @ y[idx][..., None])[..., 0])
    ZZ = (Z[:, :, None] * Z[:, None, :]).reshape(m, q * q)
    Zy = Z * y[:, None]

    def lts(B):
        R2 = np.square(y[:, None] - Z @ B.T)  # (m, n_el)
        part = np.partition(R2, h - 1, axis=0)
        return R2, part[h - 1], part[:h].sum(axis=0)

    def cstep(B):
        R2, kth, obj = lts(B)
        M = (R2 <= kth).astype(np.float64)
        G = (M.T @ ZZ).reshape(-1, q, q)
        return _solve(G, M.T @ Zy), obj

    for _ in range(_C_STEPS_ALL):
        B, _obj = cstep(B)
    _, _, obj = lts(B)
    order = np.argsort(obj, kind="stable")
    kept: list[int] = []
    seen: list[np.ndarray] = []
    for k in order:  # at most n_el iterations over candidates (not records)
        if any(np.allclose(B[k], s, rtol=1e-6, atol=1e-9) for s in seen):
            continue
        kept.append(int(k))
        seen.append(B[k])
        if len(kept) == n_keep:
            break
    Bk = B[kept]
    prev = np.full(len(kept), np.inf)
    for _ in range(_C_STEPS_KEPT):
        Bn, obj = cstep(Bk)
        if np.all(obj >= prev * (1 - 1e-12)):
            break
        prev = obj
        Bk = Bn
    return [Bk[i] for i in range(Bk.shape[0])]


# --------------------------------------------------------------------------- FAST-LTS (start="lts"/"auto")
def _lts_h(m: int, q: int) -> int:
    """Coverage of the LTS fit: ``h = floor((m + q + 1) / 2)`` rows (Rousseeuw and Van Driessen 2006), at most ``m``."""
    return min(m, (m + q + 1) // 2)


def _subset_ls(Z: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Least squares on each row subset ``idx[k]`` (shape (k, h)), batched; returns (k, q) coefficients.

    Chunked over subsets so the gathered ``Z[idx]`` stays below ~2e7 floats
    (wide one-hot designs); the tiny relative ridge of :func:`_solve` keeps
    singular subsets (an elemental set holding two rows of one level) finite.
    """
    k, h = idx.shape
    q = Z.shape[1]
    out = np.empty((k, q))
    step = max(1, int(2e7 // max(1, h * q)))
    for a in range(0, k, step):
        ii = idx[a:a + step]
        A = Z[ii]  # (c, h, q)
        At = np.swapaxes(A, 1, 2)
        out[a:a + step] = _solve(At @ A, (At @ y[ii][..., None])[..., 0])
    return out


def _lts_objective(Z: np.ndarray, y: np.ndarray, B: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Trimmed objective of each row of ``B``: the sum of the ``h`` smallest squared residuals, and those rows.

    Returns ``obj`` (k,) and ``idx`` (k, h): for each candidate exactly ``h``
    row positions (``argpartition``; ties broken arbitrarily but the count is
    always ``h``, which the C-step theorem needs).
    """
    R2 = np.square(y[None, :] - B @ Z.T)  # (k, m)
    idx = np.argpartition(R2, h - 1, axis=1)[:, :h]
    return np.take_along_axis(R2, idx, axis=1).sum(axis=1), idx


def _c_step(Z: np.ndarray, y: np.ndarray, B: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One concentration step for every candidate (rows of ``B``).

    Rousseeuw and Van Driessen (2006), Theorem 1: refit least squares on the
    ``h`` rows with the smallest squared residuals; the trimmed objective of
    the new fit is at most that of the old one (the new fit minimises the sum
    of squares over those ``h`` rows, and the ``h`` smallest of its own squared
    residuals sum to no more than that). Returns the new coefficients, the
    objective of the *old* ones and the old h-subsets.
    """
    obj, idx = _lts_objective(Z, y, B, h)
    return _subset_ls(Z, y, idx), obj, idx


def _concentrate(Z, y, B, h: int, max_steps: int):
    """C-steps until no candidate's objective drops by more than a relative 1e-12 (or ``max_steps``).

    Returns the coefficients and their objectives, both sorted by objective. A
    step is accepted per candidate only when it lowers the objective, so the
    returned objective is the smallest one seen (round-off of the ridge cannot
    make it increase).
    """
    obj, _ = _lts_objective(Z, y, B, h)
    for _ in range(max_steps):
        Bn, _, _ = _c_step(Z, y, B, h)
        on, _ = _lts_objective(Z, y, Bn, h)
        better = on < obj * (1.0 - 1e-12)
        if not better.any():
            break
        B = np.where(better[:, None], Bn, B)
        obj = np.where(better, on, obj)
    order = np.argsort(obj, kind="stable")
    return B[order], obj[order]


def _n_subsets_auto(q: int) -> int:
    """Elemental subsets for a 99% chance of at least one clean one at 40% contamination (at least 500).

    With a fraction ``eps`` of outliers a random ``q``-row subset is clean with
    probability ``(1 - eps)**q``; ``N`` subsets contain a clean one with
    probability ``1 - (1 - (1 - eps)**q)**N`` (Rousseeuw and Leroy 1987,
    Sec. 5.1; Rousseeuw and Van Driessen 2006). For ``eps = 0.4`` and 99%:
    ``N = log(0.01) / log(1 - 0.6**q)``: 500 cover ``q <= 9`` (8 contextual
    attributes), ``q = 11`` (p = 10) needs 1,266, capped at 3,000.
    """
    pc = 0.6 ** q
    need = math.log(0.01) / math.log1p(-pc) if pc > 1e-300 else math.inf
    return int(min(max(500, math.ceil(need)), 3000))


def _fast_lts(Z: np.ndarray, y: np.ndarray, rng: np.random.Generator, n_subsets: int, n_keep: int):
    """FAST-LTS (Rousseeuw and Van Driessen 2006) on ``(Z, y)``, vectorised over the subsets.

    ``n_subsets`` random elemental subsets (``q`` distinct rows each, the exact
    fit through them; fewer for wide designs, see ``_ELEMENTAL_WORK``), two
    C-steps on all of them, then the ``max(10, n_keep)`` best distinct ones
    concentrated to convergence (at most ``_C_STEPS_MAX`` steps). Returns the
    converged coefficients sorted by trimmed objective (best first) and the
    objectives, with ``h = floor((m + q + 1) / 2)``.
    """
    m, q = Z.shape
    h = _lts_h(m, q)
    n_el = max(min(n_subsets, int(_ELEMENTAL_WORK // (m * q * q))), 4 * n_keep)
    idx = np.argpartition(rng.random((n_el, m)), q - 1, axis=1)[:, :q]
    B = _subset_ls(Z, y, idx)
    for _ in range(_C_STEPS_ALL):
        B, _, _ = _c_step(Z, y, B, h)
    obj, _ = _lts_objective(Z, y, B, h)
    order = np.argsort(obj, kind="stable")
    # distinct candidates: identical converged fits are kept once (vectorised over candidates)
    Bo = B[order]
    key = np.round(Bo / np.maximum(np.abs(Bo).max(axis=0), 1e-12), 9)
    _, first = np.unique(key, axis=0, return_index=True)
    keep = np.sort(first)[: max(10, n_keep)]
    return _concentrate(Z, y, Bo[keep], h, _C_STEPS_MAX)


def _trimmed_variance_factor(alpha: float) -> float:
    r"""``E[X^2 | |X| <= z]`` for standard normal ``X`` and ``P(|X| <= z) = alpha``.

    ``= 1 - 2 z \phi(z) / alpha`` with ``z = \Phi^{-1}((1 + alpha) / 2)``; the
    consistency factor of a trimmed sum of squares (Croux and Rousseeuw 1992;
    Rousseeuw and Leroy 1987, Sec. 5.1 for the LTS scale).
    """
    if alpha >= 1.0:
        return 1.0
    z = float(_special.ndtri(0.5 * (1.0 + alpha)))
    return 1.0 - 2.0 * z * math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) / alpha


def _lts_reweight(Z: np.ndarray, y: np.ndarray, beta: np.ndarray, h: int, floor: float) -> np.ndarray:
    """The reweighted LTS fit: least squares on the rows within 2.2414 raw LTS scales.

    Raw scale :math:`s_0`: the mean of the ``h`` smallest squared residuals
    divided by the consistency factor :func:`_trimmed_variance_factor`
    ``(h / m)``. Reweighting (Rousseeuw and Van Driessen 2006, Sec. 4;
    Rousseeuw and Leroy 1987, Sec. 5.1): least squares on the rows with
    ``|r| <= 2.2414 s_0`` (97.5% of ``|N(0, 1)|``); it keeps the 50% breakdown
    of the LTS fit and gains efficiency. Returns ``beta`` itself when the raw
    scale is at the floor (an exact fit of at least ``h`` rows) or too few rows
    pass.
    """
    m, q = Z.shape
    r2 = np.square(y - Z @ beta)
    s2 = float(np.partition(r2, h - 1)[:h].mean()) / _trimmed_variance_factor(h / m)
    ok = r2 <= _RW_CUT * _RW_CUT * s2
    if not s2 > floor or ok.sum() <= q:
        return beta
    Zk = Z[ok]
    return _solve(Zk.T @ Zk, Zk.T @ y[ok])


def _level_medians(
    Z: np.ndarray, y: np.ndarray, beta: np.ndarray, cols: np.ndarray, passes: int = 2, reference: bool = False
) -> np.ndarray:
    """Level-wise median correction of a start: a least-absolute-deviations coordinate step per 0/1 column.

    For each indicator column ``j`` (a one-hot level) shift its coefficient by
    the median residual of the rows in that level (``passes`` backfitting sweeps
    over the columns, as levels of different attributes overlap). Each step
    lowers the L1 loss; the median keeps the 50% breakdown *within* a level.
    Why: LTS keeps the best-fitting half of the rows, so a whole level (a
    destination served by 1% of the flights) can fall outside the h-subset and
    keep an arbitrary coefficient; EM then cannot recover, because a single
    injected record that happens to lie on the wrong fit becomes the level's
    "inlier" with weight 1/sigma^2 while its genuine rows are Cauchy-weighted.

    ``reference`` (``start="lts"``): the intercept (column 0) joins the sweep
    with the rows whose indicator columns are all 0 -- the reference level(s),
    which no level column reaches; the level steps that follow in the same
    sweep re-centre the other levels. The inlier-driven EM step
    (``_OUTLIER_WEIGHT``) cannot move a level the start left wholly outside the
    Gaussian, so the start must fit it.
    """
    if cols.size == 0:
        return beta
    beta = beta.copy()
    members = [np.flatnonzero(Z[:, j] == 1.0) for j in cols]
    if reference:
        cols = np.r_[0, cols]
        members = [np.flatnonzero(~(Z[:, cols[1:]] == 1.0).any(axis=1)), *members]
    r = y - Z @ beta
    for _ in range(passes):
        for j, rows in zip(cols, members):
            if rows.size == 0:
                continue
            shift = float(np.median(r[rows]))
            if shift != 0.0:
                beta[j] += shift
                r[rows] -= shift
    return beta


def _start_params(Z, y, beta, p_init: float, floor: float = _SIGMA2_FLOOR):
    """Mixture parameters from a robust coefficient vector (sigma^2 >= ``floor``, standardised units)."""
    r = y - Z @ beta
    r2 = r * r
    s2 = (_MAD_TO_SD * float(np.median(np.abs(r)))) ** 2
    if s2 <= _SIGMA2_FLOOR:
        h = (r.size + 1) // 2
        s2 = float(np.partition(r2, h - 1)[:h].mean())
    s2 = max(s2, floor)
    far = r2 > 6.25 * s2
    b = 0.5 * float(np.median(r2[far])) if far.any() else 10.0 * s2
    return s2, p_init, max(b, s2)


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
        How EM is started (module docstring, "Robust start" and "Masking").
        ``"lts"``: FAST-LTS (Rousseeuw and Van Driessen 2006), reweighted, as
        the single start, and the inlier-driven coefficient step, so a cluster
        of bad leverage points below ~50% of the rows cannot mask itself.
        ``"auto"``: ``"lts"`` (the name may pick by shape in future).
        ``"ols"``: exact EM from least squares (non-robust; for comparison).
        ``"legacy"``: the start before issue 22 (a lighter LTS, several starts
        by likelihood, exact EM), kept for comparison and reproduction.
    start_sample : int, default 500000
        Rows of the start sample (issue 21; module docstring, "Chunks"),
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
        designs are capped by a work budget (module docstring).

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
        """The fitted standardisation ``(active, x_loc, x_scale, y_loc, y_scale)`` (see :func:`_standardised`)."""
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
        with np.errstate(all="ignore"):
            self._fit_source(ArrayChunks(X, y))
            self.decision_scores_ = self.decision_function(X, y)
            self.posterior_ = _special.expit(self.decision_scores_)
            self._label()
        return self

    def fit_chunks(self, source) -> "RobustRegressionDetector":
        """Fit the mixture regression on rows streamed in chunks (issue 21): the same fit as :meth:`fit`.

        Seed 004, slide "Parameters Learning": the E-step is per row and the
        M-step needs only sums over rows (:func:`_mstats`, :func:`_ru`), which
        add over chunks, so each EM step passes over the chunks twice and keeps
        nothing per row (module docstring, "Chunks"). :meth:`fit` is this
        method on one in-memory chunk (:class:`ArrayChunks`).

        Parameters
        ----------
        source : chunk source
            ``n_rows``, ``n_features``, ``load(i)``, ``take(rows)``, ``map(fn, state)``
            (see :class:`ArrayChunks`; the warehouse's is
            :class:`dpcore.detect.streaming.PartitionChunks`). Its mapper runs
            :func:`chunk_pass` on each chunk; the results are combined here.

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
        with np.errstate(all="ignore"):
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
        drawn with ``random_state``, :func:`_start_sample_rows`); then EM over
        all rows: in memory on the start sample's standardised rows when it is
        the whole table, else chunk by chunk (:func:`_em_chunks`).
        """
        n, d = int(src.n_rows), int(src.n_features)
        # ---- exact extremes over all rows (the scan also checks finiteness)
        scans = src.map(chunk_pass, {"kind": "scan"})
        xmin = np.min(np.stack([s[0] for s in scans]), axis=0)
        xmax = np.max(np.stack([s[1] for s in scans]), axis=0)
        binary_all = np.all(np.stack([s[2] for s in scans]), axis=0)
        ymin, ymax = min(s[3] for s in scans), max(s[4] for s in scans)
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
        # ---- scaling (on the start sample)
        Xa = X[:, self._active]
        self._x_loc = Xa.mean(axis=0)
        self._x_scale = Xa.std(axis=0)
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
        del X, Xa, y
        q = Z.shape[1]
        n0 = Z.shape[0]  # rows of the start sample

        # ---- robust start on a subsample of the start sample
        m = min(n0, _START_ROWS)
        sub = np.arange(n0) if m == n0 else np.sort(rng.choice(n0, size=m, replace=False))
        Zs, ys_s = Z[sub], ys[sub]
        max_iter, tol = int(self.max_iter), float(self.tol)
        n_starts = int(self.n_starts)
        start = "lts" if self.start == "auto" else self.start
        ow = 1.0
        self._lts_beta = None
        if start == "legacy":
            cands = _lts_starts(Zs, ys_s, rng, n_starts)
        elif start == "ols":
            cands = [_solve(Zs.T @ Zs, Zs.T @ ys_s)]
        else:
            n_sub = _n_subsets_auto(q) if self.n_subsets is None else int(self.n_subsets)
            B, _ = _fast_lts(Zs, ys_s, rng, n_sub, n_starts)
            if m < n0:  # the subsample's best fit, concentrated on the start sample (module docstring, "Robust start", 4.)
                B, _ = _concentrate(Z, ys, B[:1], _lts_h(n0, q), _C_STEPS_FINAL)
                beta_rw = _lts_reweight(Z, ys, B[0], _lts_h(n0, q), floor)
            else:
                beta_rw = _lts_reweight(Zs, ys_s, B[0], _lts_h(m, q), floor)
            self._lts_beta = B[0]  # raw LTS coefficients, standardised units (benchmarks/detect_leverage.py)
            cands = [beta_rw]
            ow = _OUTLIER_WEIGHT
        best = None
        for beta0 in cands:
            beta0 = _level_medians(Zs, ys_s, beta0, levels, reference=start == "lts")
            s2, p, b = _start_params(Zs, ys_s, beta0, float(self.p_init), floor)
            res = _em(Zs, ys_s, beta0, s2, p, b, max_iter, tol, floor=floor, outlier_weight=ow)
            if best is None or res["ll"] > best["ll"]:
                best = res
        self.start_log_likelihood_ = best["ll"]
        del Zs, ys_s

        # ---- EM on all rows (levels absent from the subsample get their median, on the start sample, first)
        beta0 = _level_medians(Z, ys, best["beta"], levels, reference=start == "lts")
        if rows is None:  # the start sample is the table: EM on its standardised rows, one chunk in memory
            em_src, em_std = ArrayChunks(Z, ys), None
        else:  # EM over the source's chunks, standardising each
            del Z, ys
            em_src, em_std = src, self._std()
        res = _em_chunks(em_src, em_std, beta0, best["s2"], best["p"], best["b"], max_iter, tol, floor=floor,
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
        order = np.argsort(-t, kind="stable")
        labels = np.zeros(n, dtype=np.int64)
        labels[order[:K]] = 1
        self.K_ = K
        self.labels_ = labels
        self.threshold_ = float(t[order[K - 1]]) if K > 0 else math.inf

    # ------------------------------------------------------------ scoring
    def decision_function(self, X, y) -> np.ndarray:
        """Posterior outlier log-odds ``log(t_i / (1 - t_i))`` of new rows under the fitted parameters.

        Same E-step as the fit (module docstring), so on the training rows it
        returns exactly ``decision_scores_``.

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
        with np.errstate(all="ignore"):  # thread-local; no floating-point warning leaves (module docstring)
            r = self._std_y(y) - self._design(X) @ self._beta
            return _log_odds(r, self._s2, self._p, self._b)
