"""The single source of randomness for every privacy-protected release.

Every random draw that a differentially private mechanism in this project
makes goes through :class:`NoiseSource`.  The rules it implements are:

* **Vetted, floating-point-safe samplers.**  Discrete Laplace noise uses the
  vectorised exact sampler of :mod:`dpcore.noise.dlaplace` (Canonne, Kamath &
  Steinke 2020, Algorithms 1-2, integer arithmetic only, ``os.urandom``;
  OpenDP's ``make_laplace`` on integers for scales of ``2**64`` and above).
  Gaussian noise and noisy-max selection use OpenDP's samplers
  (``make_gaussian``, ``make_noisy_max`` with Gumbel noise).  These are exact
  samplers that draw from the operating system's CSPRNG and do not suffer
  from the floating-point attacks on textbook samplers (Mironov 2012, "On
  significance of the least significant bits for differential privacy").
  ``numpy.random.laplace`` on floats is never used for a release.
* **Exact tiny probabilities.**  Bernoulli trials are sampled *exactly* for any
  rational ``p`` (a float is converted exactly with ``Fraction(float)``), by
  lazily comparing uniform random bits with the binary expansion of ``p``.
  A probability such as ``1e-21`` -- far below ``2**-53`` -- is therefore
  honoured exactly instead of being rounded to zero.  ``Bernoulli(exp(-x))`` is
  sampled exactly with Canonne, Kamath & Steinke (2020), Algorithm 1.
* **Exact Student's T (nu = 2) integers.**  :meth:`NoiseSource.student_t_integer`
  releases ``round(value + scale * Z)``, ``Z ~ T_2``, exactly: a uniform is
  drawn lazily as a dyadic interval and compared with the algebraic CDF
  ``F(x) = 1/2 + x / (2 sqrt(2 + x^2))`` in rational arithmetic
  (:mod:`dpcore.noise.student_t`; Bun & Steinke 2019, Section 3).
* **Exact Laplace log-normal and arsinh-normal integers.**
  :meth:`NoiseSource.smooth_cdp_integer` releases ``round(value + scale * Z)``
  for Bun & Steinke's concentrated-DP distributions exactly: lazy uniforms
  through the polar normal and the exponential, enclosed in rigorous decimal
  intervals until the rounding is decided (:mod:`dpcore.noise.interval`).
* **Exact chains with dyadic weights.**  :meth:`NoiseSource.nonincreasing_chain`
  draws a non-increasing chain whose conditionals are rationals (weights
  ``m 2^e``, any dynamic range) exactly: inverse CDF on a lazy uniform, a
  compiled fast path with rigorous float margins, Python integers when the
  margins cannot decide (:mod:`dpcore.noise.dyadic`; PFL's sampler, so PFL
  is pure epsilon-DP with no allowance for its sampler).
* **Production versus tests.**  ``NoiseSource()`` (no seed) is the production
  source: the exact samplers above plus ``os.urandom``/``secrets`` bits.  Its releases are
  publishable.  ``NoiseSource(seed=...)`` is a deterministic
  ``numpy.random.Generator(PCG64(seed))`` for tests only; it reports
  ``publishable = False`` and :meth:`NoiseSource.require_publishable` raises
  :class:`NotForPublicationError`, so a release produced with it can be marked
  not-for-publication and refused by the publishing step.

Layout
------
``core``: argument checks, conservative rounding of scales, exact Bernoulli
samplers and OS bit sources (pure functions of a bit stream).  ``source``:
:class:`NoiseSource` (its first OpenDP draw calls ``opendp.mod.enable_features("contrib")``,
which OpenDP requires before its measurement constructors can be used).
``student_t``: the exact integer Student's T (nu = 2) sampler and its CDF.
``dlaplace``: the vectorised exact discrete Laplace sampler.
``interval``: exact integer rounding of continuous noise (lazy uniforms,
rigorous decimal interval arithmetic).  ``smooth_cdp``: the concentrated-DP
smooth-sensitivity distributions of Bun & Steinke 2019 (Laplace log-normal,
arsinh-normal), their parameters, tails and exact samplers.  ``dyadic``: the
exact chain sampler behind :meth:`NoiseSource.nonincreasing_chain` (numba
kernels, imported on first use).
Everything public (and the private helpers the tests use) is re-exported here,
so ``from dpcore.noise import NoiseSource, conservative_scale`` keeps working.

Who may import it: any ``dpcore`` package above it (noise is drawn only through this package, DESIGN.md)
and ``tasks/``/``flows/``. It imports :mod:`dpcore.runtime` only.
"""

from __future__ import annotations

from .core import (
    FLOAT_EVAL_MARGIN,
    NotForPublicationError,
    _bernoulli_exp_neg_from,
    _bernoulli_from_bits,
    _exact_fraction,
    _readings,
    _urandom_bit_source,
    conservative_scale,
    lower_float,
    round_down,
    round_up,
    upper_float,
)
from .source import NoiseSource
from .student_t import (
    student_t2_cdf_compare,
    student_t2_integer_from_bits,
    student_t2_integer_pmf,
    student_t2_shift_scale,
)

__all__ = [
    "NotForPublicationError",
    "NoiseSource",
    "FLOAT_EVAL_MARGIN",
    "conservative_scale",
    "round_up",
    "round_down",
    "upper_float",
    "lower_float",
    "student_t2_cdf_compare",
    "student_t2_integer_from_bits",
    "student_t2_integer_pmf",
    "student_t2_shift_scale",
]
