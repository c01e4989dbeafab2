"""The single source of randomness for every privacy-protected release.

Every random draw that a differentially private mechanism in this project
makes goes through :class:`NoiseSource`.  The rules it implements are:

* **Vetted, floating-point-safe samplers.**  Additive noise and noisy-max
  selection use OpenDP's samplers (``make_laplace`` on integers = discrete
  Laplace, ``make_gaussian``, ``make_noisy_max`` with Gumbel noise).  These are
  exact samplers that draw from the operating system's CSPRNG and do not
  suffer from the floating-point attacks on textbook samplers (Mironov 2012,
  "On significance of the least significant bits for differential privacy").
  ``numpy.random.laplace`` on floats is never used for a release.
* **Exact tiny probabilities.**  Bernoulli trials are sampled *exactly* for any
  rational ``p`` (a float is converted exactly with ``Fraction(float)``), by
  lazily comparing uniform random bits with the binary expansion of ``p``.
  A probability such as ``1e-21`` -- far below ``2**-53`` -- is therefore
  honoured exactly instead of being rounded to zero.  ``Bernoulli(exp(-x))`` is
  sampled exactly with Canonne, Kamath & Steinke (2020), Algorithm 1.
* **Production versus tests.**  ``NoiseSource()`` (no seed) is the production
  source: OpenDP samplers plus ``os.urandom``/``secrets`` bits.  Its releases are
  publishable.  ``NoiseSource(seed=...)`` is a deterministic
  ``numpy.random.Generator(PCG64(seed))`` for tests only; it reports
  ``publishable = False`` and :meth:`NoiseSource.require_publishable` raises
  :class:`NotForPublicationError`, so a release produced with it can be marked
  not-for-publication and refused by the publishing step.

Notes
-----
Importing this module calls ``opendp.prelude.enable_features("contrib")``,
which OpenDP requires before its measurement constructors can be used.
"""

from __future__ import annotations

import math
import numbers
import os
import secrets
from fractions import Fraction
from functools import lru_cache
from typing import Callable

import numpy as np
import opendp.prelude as dp

dp.enable_features("contrib")

__all__ = [
    "NotForPublicationError",
    "NoiseSource",
    "FLOAT_EVAL_MARGIN",
    "conservative_scale",
    "round_up",
    "round_down",
    "upper_float",
    "lower_float",
]

_U64_MAX = (1 << 64) - 1


class NotForPublicationError(RuntimeError):
    """Raised when a release would be made with a non-publishable noise source.

    A :class:`NoiseSource` constructed with a ``seed`` is deterministic and
    therefore provides **no** privacy: anyone who knows the seed can subtract
    the noise.  Such a source exists for tests only; any attempt to publish
    with it raises this error.
    """


# ---------------------------------------------------------------------------
# Argument validation helpers
# ---------------------------------------------------------------------------


def _positive_finite(value, name: str) -> float:
    """Return ``value`` as a float after checking it is finite and > 0.

    Parameters
    ----------
    value : float, int or Fraction
        The number to check.
    name : str
        Argument name used in the error message.

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    ValueError
        If ``value`` is not a real number, is not finite, or is not > 0.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    f = float(value)
    if not math.isfinite(f) or not f > 0:
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    return f


def _exact_fraction(value, name: str) -> Fraction:
    """Convert ``value`` to an exact :class:`fractions.Fraction`.

    Parameters
    ----------
    value : Fraction, int or float
        A float is converted exactly (``Fraction(1e-21)`` is the exact binary
        value of the double nearest to 1e-21, not zero).
    name : str
        Argument name used in error messages.

    Returns
    -------
    Fraction
        The exact rational value.

    Raises
    ------
    ValueError
        If ``value`` is not a rational/float number or is NaN/infinite.
    """
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, numbers.Rational):
        return Fraction(value.numerator, value.denominator)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return Fraction(f)
    raise ValueError(
        f"{name} must be a fractions.Fraction, int or float, got {type(value).__name__}"
    )


# ---------------------------------------------------------------------------
# Conservative rounding of noise scales (issue 15: toward more noise)
# ---------------------------------------------------------------------------

#: Relative margin added by :func:`upper_float` / removed by :func:`lower_float`.
#: A value computed in IEEE double through ``n`` elementary operations, each
#: with relative error at most ``4 u`` (``u = 2**-53``: ``+ - * /`` and ``sqrt``
#: are correctly rounded, ``u``; the C library's and numpy's ``log``/``exp``
#: are within a few ulp), has relative error at most ``(1 + 4u)**n - 1``,
#: below ``8 n u`` for ``n <= 2**48``.  ``2**-40 = 1024 * 8u`` therefore covers
#: every formula with up to 1024 operations (the noise scales here use fewer
#: than 20).
FLOAT_EVAL_MARGIN = 2.0**-40


def _exact_positive(value, name: str) -> Fraction:
    """``value`` as an exact positive Fraction (a float is converted exactly)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    if isinstance(value, numbers.Rational):
        q = Fraction(value.numerator, value.denominator)
    else:
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
        q = Fraction(f)
    if q <= 0:
        raise ValueError(f"{name} must be a positive finite real number, got {value!r}")
    return q


def round_up(value) -> float:
    """The smallest float ``>=`` the exact rational value of ``value``.

    Parameters
    ----------
    value : Fraction, int or float
        ``> 0``; a float is returned unchanged (it is exact).

    Returns
    -------
    float
        ``s`` with ``Fraction(s) >= value`` and no float in ``[value, s)``.

    Raises
    ------
    ValueError
        If ``value`` is not a positive finite real number, or its rounded-up
        value overflows the float range.
    """
    q = _exact_positive(value, "value")
    s = float(q)  # Fraction.__float__ rounds to nearest
    if Fraction(s) < q:
        s = math.nextafter(s, math.inf)
    if not math.isfinite(s):
        raise ValueError("scale too large for a float")
    return s


def round_down(value) -> float:
    """The largest float ``<=`` the exact rational value of ``value`` (``> 0``)."""
    q = _exact_positive(value, "value")
    s = float(q)
    if Fraction(s) > q:
        s = math.nextafter(s, 0.0)
    return s


def conservative_scale(numerator, denominator) -> float:
    """A noise scale ``numerator / denominator`` rounded toward more noise.

    Parameters
    ----------
    numerator, denominator : Fraction, int or float
        Positive, finite (typically a sensitivity and an epsilon).  Floats
        are taken at their exact binary values.

    Returns
    -------
    float
        The smallest float ``>=`` the exact rational ``numerator /
        denominator`` (``Fraction`` arithmetic, then :func:`round_up`): the
        mechanism never uses less noise than its privacy analysis assumes.

    Raises
    ------
    ValueError
        If an argument is not a positive finite real number.

    Examples
    --------
    >>> from fractions import Fraction
    >>> Fraction(conservative_scale(1, 3)) >= Fraction(1, 3)
    True
    """
    return round_up(_readings(numerator, "numerator", max) / _readings(denominator, "denominator", min))


def _readings(value, name: str, pick) -> Fraction:
    """``pick`` (``max`` or ``min``) of a float's two exact readings: its binary value and its
    decimal text (the ledger charges ``dpcore.budget.exact(x) = Fraction(repr(x))``). Taking the
    larger numerator and the smaller denominator makes a scale conservative under either reading.
    Non-floats have one reading."""
    q = _exact_positive(value, name)
    if isinstance(value, float):
        q = pick(q, Fraction(repr(value)))
    return q


def upper_float(value: float, margin: float = FLOAT_EVAL_MARGIN) -> float:
    """An upper bound on the exact value of a float-evaluated formula.

    For scales computed through ``sqrt``/``log``/``exp`` (no exact rational
    form), evaluate the formula in floating point and pass the result here.

    Parameters
    ----------
    value : float
        The float evaluation of a positive formula (at most ~1000 elementary
        operations, each within 4 ulp: :data:`FLOAT_EVAL_MARGIN`).
    margin : float
        Relative margin, default :data:`FLOAT_EVAL_MARGIN` (``2**-40``).

    Returns
    -------
    float
        ``>= value * (1 + margin)`` (the product is rounded, then one ulp
        is added), hence ``>=`` the exact value of the formula.
    """
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"value must be a positive finite float, got {value!r}")
    out = math.nextafter(v * (1.0 + margin), math.inf)
    if not math.isfinite(out):
        raise ValueError("scale too large for a float")
    return out


def lower_float(value: float, margin: float = FLOAT_EVAL_MARGIN) -> float:
    """A lower bound on the exact value of a float-evaluated positive formula
    (``<= value * (1 - margin)``; the counterpart of :func:`upper_float`)."""
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"value must be a positive finite float, got {value!r}")
    return math.nextafter(v * (1.0 - margin), 0.0)


# ---------------------------------------------------------------------------
# Exact samplers as pure functions of a randomness source
# ---------------------------------------------------------------------------


def _bernoulli_from_bits(p: Fraction, next_bit: Callable[[], int]) -> bool:
    """Sample ``Bernoulli(p)`` exactly from a stream of fair random bits.

    The bits ``b1 b2 b3 ...`` returned by ``next_bit`` are read as the binary
    expansion of a uniform ``U = 0.b1 b2 b3 ...`` in [0, 1).  The function
    returns ``U < p``, generating bits lazily and comparing them one at a time
    with the binary expansion of ``p``; it stops at the first position where
    they differ.  In expectation 2 bits are consumed.

    Parameters
    ----------
    p : Fraction
        The success probability, ``0 <= p <= 1``, as an exact rational.
    next_bit : callable
        ``next_bit()`` returns the next fair random bit (0 or 1).

    Returns
    -------
    bool
        ``True`` with probability exactly ``p``.

    Notes
    -----
    Decisions are final: when it returns ``True`` every continuation of the
    consumed bits gives ``U < p``; when it returns ``False`` every continuation
    gives ``U >= p`` (for a dyadic ``p = a / 2**L`` once the expansion of ``p``
    has ended the prefix equals ``p`` and ``U >= p`` is already certain, so at
    most ``L`` bits are consumed).  No floating point is involved, so
    probabilities far below ``2**-53`` are honoured exactly.
    """
    num, den = p.numerator, p.denominator
    if num <= 0:
        return False
    if num >= den:
        return True
    r = num  # remainder: p's still-unread expansion equals r / den
    while True:
        if r == 0:
            # p's expansion has terminated: U's prefix equals p's, so U >= p.
            return False
        r *= 2
        if r >= den:
            p_bit = 1
            r -= den
        else:
            p_bit = 0
        b = next_bit()
        if b != p_bit:
            # First differing bit decides: U < p iff U's bit is 0 there.
            return b < p_bit


def _bernoulli_exp_neg_from(x: Fraction, bern: Callable[[Fraction], bool]) -> bool:
    """Sample ``Bernoulli(exp(-x))`` exactly for rational ``x >= 0``.

    Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
    Privacy", Algorithm 1.  Only exact Bernoulli trials of rational parameters
    are used, so the result is exact even when ``exp(-x)`` is astronomically
    small (e.g. ``exp(-50) ~ 2e-22``).

    Parameters
    ----------
    x : Fraction
        Non-negative rational exponent.
    bern : callable
        ``bern(q)`` returns an exact ``Bernoulli(q)`` draw for rational ``q``
        in [0, 1].

    Returns
    -------
    bool
        ``True`` with probability exactly ``exp(-x)``.

    Notes
    -----
    For ``0 <= x <= 1``: draw ``A_k ~ Bernoulli(x / k)`` for ``k = 1, 2, ...``
    until the first ``A_k = 0``; return whether that ``k`` is odd.  The first
    zero is at ``k`` with probability ``x^(k-1)/(k-1)! - x^k/k!``, so
    ``P(True) = sum_{j>=0} (-x)^j / j! = exp(-x)``.  For ``x > 1``: draw
    ``floor(x)`` independent ``Bernoulli(exp(-1))`` (stop at the first failure)
    and then one ``Bernoulli(exp(-(x - floor(x))))``.
    """
    if x <= 1:
        k = 1
        while bern(x / k):
            k += 1
        return k % 2 == 1
    whole = x.numerator // x.denominator
    one = Fraction(1)
    for _ in range(whole):
        if not _bernoulli_exp_neg_from(one, bern):
            return False
    return _bernoulli_exp_neg_from(x - whole, bern)


def _urandom_bit_source() -> Callable[[], int]:
    """Return a fresh ``next_bit`` callable reading from ``os.urandom``.

    Bits are fetched 64 at a time into a buffer that is local to the returned
    closure, so no random state is shared between calls, threads or forked
    worker processes.

    Returns
    -------
    callable
        ``next_bit()`` returning a fair bit from the OS CSPRNG.
    """
    buf = 0
    left = 0

    def next_bit() -> int:
        nonlocal buf, left
        if left == 0:
            buf = int.from_bytes(os.urandom(8), "little")
            left = 64
        b = buf & 1
        buf >>= 1
        left -= 1
        return b

    return next_bit


def _urandom_u64(n: int) -> np.ndarray:
    """Return ``n`` independent uniform 64-bit unsigned ints from ``os.urandom``.

    Parameters
    ----------
    n : int
        Number of values.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(n,)``.
    """
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()


def _urandom_below(r: int, n: int) -> np.ndarray:
    """Return ``n`` exactly uniform integers in ``[0, r)`` from ``os.urandom``.

    Rejection sampling on 64-bit words: a word ``u`` is accepted when
    ``u < r * q`` with ``q = (2**64 - 1) // r``; the accepted set has a size
    that is a multiple of ``r``, so ``u % r`` is exactly uniform.

    Parameters
    ----------
    r : int
        Range size, ``1 <= r <= 2**64 - 1``.
    n : int
        Number of values.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(n,)``.
    """
    limit = np.uint64(r * (_U64_MAX // r))
    r64 = np.uint64(r)
    out = np.empty(n, dtype=np.uint64)
    filled = 0
    while filled < n:
        need = n - filled
        u = _urandom_u64(need + need // 8 + 8)
        u = u[u < limit][:need]
        out[filled : filled + u.size] = u % r64
        filled += u.size
    return out


# ---------------------------------------------------------------------------
# Cached OpenDP measurements (construction costs ~0.3 ms)
# ---------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _opendp_discrete_laplace(scale: float):
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale=scale
    )


@lru_cache(maxsize=256)
def _opendp_gaussian(scale: float):
    return dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.l2_distance(T=float),
        scale=scale,
    )


@lru_cache(maxsize=256)
def _opendp_noisy_max(scale: float):
    return dp.m.make_noisy_max(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.linf_distance(T=float),
        dp.zero_concentrated_divergence(),
        scale=scale,
    )


def _size_to_shape(size) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


# ---------------------------------------------------------------------------
# The noise source
# ---------------------------------------------------------------------------


class NoiseSource:
    """The only source of randomness for privacy-protected releases.

    Parameters
    ----------
    seed : int or None, default None
        ``None`` (production): noise comes from OpenDP's exact samplers, which
        draw from the OS CSPRNG, and raw bits come from ``os.urandom`` /
        ``secrets``.  Releases are publishable.
        An ``int`` (tests only): every draw comes from
        ``numpy.random.Generator(PCG64(seed))`` and is deterministic given the
        seed.  Such a source offers **no privacy** (the noise can be
        reconstructed from the seed); ``publishable`` is ``False`` and
        :meth:`require_publishable` raises.

    Attributes
    ----------
    publishable : bool
        ``True`` only for the production (unseeded) source.
    mode : str
        ``"csprng"`` or ``"seeded-test"``; record it in release metadata.

    Examples
    --------
    >>> ns = NoiseSource()
    >>> ns.require_publishable()
    >>> noisy = ns.discrete_laplace([10, 20, 30], scale=2.0)
    """

    def __init__(self, seed: int | None = None):
        if seed is None:
            self._rng: np.random.Generator | None = None
        else:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
                raise ValueError(f"seed must be an int or None, got {seed!r}")
            self._rng = np.random.Generator(np.random.PCG64(int(seed)))
        self._seed = seed

    # -- publication status -------------------------------------------------

    @property
    def publishable(self) -> bool:
        """bool: whether releases made with this source may be published.

        ``True`` for ``NoiseSource()`` (CSPRNG), ``False`` for a seeded source.
        """
        return self._rng is None

    @property
    def mode(self) -> str:
        """str: ``"csprng"`` (production) or ``"seeded-test"`` (tests only)."""
        return "csprng" if self._rng is None else "seeded-test"

    def require_publishable(self) -> None:
        """Raise unless this source may be used for a published release.

        Returns
        -------
        None

        Raises
        ------
        NotForPublicationError
            If the source was constructed with a seed.  Seeded noise is
            reproducible by anyone who knows the seed and so gives no
            differential-privacy guarantee.
        """
        if not self.publishable:
            raise NotForPublicationError(
                f"This NoiseSource was constructed with seed={self._seed!r} "
                "(mode 'seeded-test'); its noise is reproducible and gives no privacy, "
                "so the release is NOT FOR PUBLICATION. To publish, construct the "
                "noise source without a seed: NoiseSource()."
            )

    def __repr__(self) -> str:
        return f"NoiseSource(mode={self.mode!r})"

    # -- raw randomness -----------------------------------------------------

    def _bit_source(self) -> Callable[[], int]:
        """Return a ``next_bit`` callable for this source's mode."""
        if self._rng is None:
            return _urandom_bit_source()
        rng = self._rng

        def next_bit() -> int:
            return int(rng.integers(0, 2))

        return next_bit

    # -- additive noise -----------------------------------------------------

    def discrete_laplace(self, values, scale) -> np.ndarray:
        """Add discrete Laplace (two-sided geometric) noise to integers.

        Parameters
        ----------
        values : array_like of int
            Integer values of any shape (a 0-d input gives a 0-d output).
        scale : float, int or Fraction
            Noise scale ``s > 0``: the noise ``Z`` has
            ``P(Z = z) ∝ exp(-|z| / s)`` on the integers.

        Returns
        -------
        numpy.ndarray
            ``int64`` array of the same shape as ``values``: ``values + Z``
            with independent noise per cell.

        Raises
        ------
        ValueError
            If ``scale`` is not a positive finite number.
        TypeError
            If ``values`` are not integers.

        Notes
        -----
        Privacy: for a query with L1 sensitivity ``Δ`` (in integer units)
        the release is ``(Δ / s)``-differentially private.

        Sampler: production uses OpenDP ``make_laplace`` on
        ``vector_domain(atom_domain(T=i64))`` with ``l1_distance(T=i64)``,
        which is OpenDP's exact discrete Laplace sampler (no floating point,
        OS CSPRNG), invoked once for all cells with the values passed as one
        int64 buffer.  OpenDP adds with saturation at the int64 bounds.  A
        ``Fraction`` scale is rounded *up* to a float (:func:`round_up`: more
        noise, never less), which OpenDP then treats exactly.  Seeded mode: difference of two i.i.d.
        ``numpy`` geometric variables with ``p = 1 - exp(-1/s)`` (same
        distribution, test use only).
        """
        _positive_finite(scale, "scale")
        s = round_up(scale)  # a Fraction scale is rounded up, never to nearest (issue 15)
        arr = np.asarray(values)
        if arr.dtype.kind == "b":
            arr = arr.astype(np.int64)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"values must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError("values must fit in int64")
        arr = arr.astype(np.int64)
        if arr.size == 0:
            return arr.copy()
        if self._rng is None:
            meas = _opendp_discrete_laplace(s)
            # a contiguous 1-d int64 array goes to OpenDP as one buffer (its
            # numpy input path); a Python list would be type-checked element
            # by element (~1 us per cell).  Same measurement, same sampler.
            out = np.asarray(meas(np.ascontiguousarray(arr.ravel())), dtype=np.int64)
            return out.reshape(arr.shape)
        p = -math.expm1(-1.0 / s)
        z = self._rng.geometric(p, size=arr.shape) - self._rng.geometric(p, size=arr.shape)
        return arr + z.astype(np.int64)

    def gaussian(self, values, sigma) -> np.ndarray:
        """Add Gaussian noise ``N(0, sigma**2)`` to real values.

        Parameters
        ----------
        values : array_like of float
            Finite real values of any shape (0-d gives 0-d).
        sigma : float, int or Fraction
            Standard deviation ``> 0``.  A float is used as is; a
            ``Fraction`` is rounded up (:func:`round_up`).  A sigma computed
            through ``sqrt``/``log`` must already be an upper bound
            (:func:`upper_float`).

        Returns
        -------
        numpy.ndarray
            ``float64`` array of the same shape: ``values + N(0, sigma**2)``.

        Raises
        ------
        ValueError
            If ``sigma`` is not positive and finite or ``values`` contain
            NaN/inf.

        Notes
        -----
        Privacy: for a query with L2 sensitivity ``Δ`` the release satisfies
        ``ρ``-zCDP with ``ρ = Δ² / (2 sigma²)`` (and the corresponding
        (ε, δ)-DP guarantees).

        Sampler: production uses OpenDP ``make_gaussian`` on
        ``vector_domain(atom_domain(T=float, nan=False))`` with
        ``l2_distance(T=float)``, whose float sampler is exact and rounds
        correctly (no Mironov-style artefacts, OS CSPRNG).  It costs about
        50 µs per draw; use it for small numbers of values.  Seeded mode:
        ``numpy`` ``Generator.normal`` (test use only).
        """
        _positive_finite(sigma, "sigma")
        sg = round_up(sigma)  # a Fraction sigma is rounded up, never to nearest (issue 15)
        arr = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError("values must be finite (no NaN or inf)")
        if arr.size == 0:
            return arr.copy()
        if self._rng is None:
            meas = _opendp_gaussian(sg)
            out = np.asarray(meas(arr.ravel().tolist()), dtype=np.float64)
            return out.reshape(arr.shape)
        return arr + self._rng.normal(0.0, sg, size=arr.shape)

    # -- selection ----------------------------------------------------------

    @staticmethod
    def _check_em_args(utilities, epsilon, sensitivity):
        eps = _positive_finite(epsilon, "epsilon")
        sens = _positive_finite(sensitivity, "sensitivity")
        try:
            u = np.asarray(utilities, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"utilities must be a 1-D sequence of finite floats: {exc}") from exc
        if u.ndim != 1 or u.size == 0:
            raise ValueError(
                f"utilities must be a non-empty 1-D sequence, got shape {u.shape}"
            )
        if not np.all(np.isfinite(u)):
            raise ValueError("utilities must be finite floats (found NaN or inf)")
        return u, eps, sens

    def exponential_mechanism(self, utilities, epsilon, sensitivity) -> int:
        """Select an index with the exponential mechanism (McSherry–Talwar).

        Parameters
        ----------
        utilities : array_like of float, shape (k,)
            Finite utility ``u_i`` of each candidate.
        epsilon : float
            Privacy parameter ``ε > 0``.
        sensitivity : float
            ``Δu > 0``: the largest change of any ``u_i`` between
            neighbouring datasets.

        Returns
        -------
        int
            The selected index ``i``, drawn with
            ``P(i) ∝ exp(ε u_i / (2 Δu))`` (see
            :meth:`exponential_mechanism_probabilities`).

        Raises
        ------
        ValueError
            If ``utilities`` is empty, not 1-D or not finite, or ``epsilon`` /
            ``sensitivity`` are not positive and finite.

        Notes
        -----
        Privacy: ``ε``-differentially private by the McSherry–Talwar theorem
        whenever every ``u_i`` changes by at most ``Δu`` between neighbours.

        Sampler: production uses OpenDP report-noisy-max
        (``make_noisy_max`` on ``vector_domain(atom_domain(T=float,
        nan=False))``, ``linf_distance(T=float)``,
        ``zero_concentrated_divergence()``, ``scale = 2 Δu / ε`` rounded up to a
        float, :meth:`exponential_mechanism_scale`).  With a zCDP
        output measure OpenDP adds Gumbel noise, and argmax of
        ``u_i + Gumbel(scale)`` has exactly the exponential-mechanism
        distribution; OpenDP samples it exactly from the OS CSPRNG.  OpenDP's
        own privacy map reports ``ρ = ε² / 8`` zCDP for this measurement; the
        pure ``ε``-DP bound used by this project is the McSherry–Talwar
        theorem for the (identical) exponential-mechanism distribution.
        Seeded mode: ``argmax(u / scale + Gumbel)`` with ``numpy``.
        """
        u, eps, sens = self._check_em_args(utilities, epsilon, sensitivity)
        if u.size == 1:
            return 0
        scale = NoiseSource.exponential_mechanism_scale(epsilon, sensitivity)
        if self._rng is None:
            meas = _opendp_noisy_max(scale)
            return int(meas(u.tolist()))
        logits = u / scale
        return int(np.argmax(logits + self._rng.gumbel(size=u.size)))

    @staticmethod
    def exponential_mechanism_scale(epsilon, sensitivity) -> float:
        """The Gumbel scale ``2 Δu / ε`` of :meth:`exponential_mechanism`, rounded up.

        Parameters
        ----------
        epsilon, sensitivity : float, int or Fraction
            ``> 0``; taken at their exact values.

        Returns
        -------
        float
            :func:`conservative_scale` ``(2 Δu, ε)``: the smallest float
            ``>=`` the exact ``2 Δu / ε`` (a larger scale is a smaller
            effective ε, never a larger one).
        """
        return conservative_scale(2 * _readings(sensitivity, "sensitivity", max), _readings(epsilon, "epsilon", min))

    @staticmethod
    def exponential_mechanism_probabilities(utilities, epsilon, sensitivity) -> np.ndarray:
        """Exact selection probabilities of :meth:`exponential_mechanism`.

        Parameters
        ----------
        utilities : array_like of float, shape (k,)
            Finite utilities.
        epsilon : float
            ``ε > 0``.
        sensitivity : float
            ``Δu > 0``.

        Returns
        -------
        numpy.ndarray
            ``float64`` array of shape ``(k,)``, ``p_i ∝ exp(u_i / scale)`` with
            the scale the sampler uses (``2 Δu / ε`` rounded up),
            computed as a numerically stable softmax; sums to 1.  Used by
            privacy audits and tests.

        Raises
        ------
        ValueError
            Same conditions as :meth:`exponential_mechanism`.
        """
        u, eps, sens = NoiseSource._check_em_args(utilities, epsilon, sensitivity)
        logits = u / NoiseSource.exponential_mechanism_scale(epsilon, sensitivity)
        w = np.exp(logits - logits.max())
        return w / w.sum()

    # -- exact Bernoulli ----------------------------------------------------

    def bernoulli(self, p) -> bool:
        """Draw an exact ``Bernoulli(p)``.

        Parameters
        ----------
        p : Fraction, int or float
            Success probability in [0, 1].  A float is converted exactly with
            ``Fraction(float)``, so ``1e-21`` is honoured exactly (it is not
            rounded to zero).

        Returns
        -------
        bool
            ``True`` with probability exactly ``p``.

        Raises
        ------
        ValueError
            If ``p`` is not a number or lies outside [0, 1].

        Notes
        -----
        Privacy: mechanisms whose analysis needs very small failure or
        flip probabilities (e.g. ``1e-21`` in the sensitive-privacy
        mechanism) rely on this being exact.

        Sampler: a lazily generated uniform ``U = 0.b1 b2 ...`` is compared
        bit by bit with the binary expansion of ``p`` (expected 2 bits;
        :func:`_bernoulli_from_bits`).  Bits come from ``os.urandom`` in
        production and from the seeded ``numpy`` generator in test mode.
        """
        q = _exact_fraction(p, "p")
        if q < 0 or q > 1:
            raise ValueError(f"p must be in [0, 1], got {p!r}")
        return _bernoulli_from_bits(q, self._bit_source())

    def bernoulli_exp_neg(self, x) -> bool:
        """Draw an exact ``Bernoulli(exp(-x))`` for rational ``x >= 0``.

        Parameters
        ----------
        x : Fraction, int or float
            Exponent ``>= 0``; a float is converted exactly.

        Returns
        -------
        bool
            ``True`` with probability exactly ``exp(-x)``.

        Raises
        ------
        ValueError
            If ``x`` is negative, NaN or infinite.

        Notes
        -----
        Privacy: used for failure probabilities such as ``exp(-50)`` that
        cannot be represented by ``random() < p`` in floating point.

        Sampler: Canonne, Kamath & Steinke (2020), Algorithm 1
        (:func:`_bernoulli_exp_neg_from`), built only from exact Bernoulli
        trials of rationals (:meth:`bernoulli`'s bit comparison).
        """
        q = _exact_fraction(x, "x")
        if q < 0:
            raise ValueError(f"x must be >= 0, got {x!r}")
        bits = self._bit_source()
        return _bernoulli_exp_neg_from(q, lambda r: _bernoulli_from_bits(r, bits))

    # -- uniform sampling inside mechanisms ---------------------------------

    def integers(self, low: int, high: int, size=None):
        """Uniform integers in ``[low, high)``.

        Parameters
        ----------
        low, high : int
            Bounds, ``low < high``.
        size : int, tuple of int or None
            Output shape; ``None`` returns a Python ``int``.

        Returns
        -------
        int or numpy.ndarray
            A Python ``int`` if ``size`` is None, else an ``int64`` array.

        Raises
        ------
        ValueError
            If ``high <= low`` (or, with ``size``, the values do not fit in
            int64).

        Notes
        -----
        For samplers that are part of a mechanism (random walks, uniform
        sub-sampling), whose privacy analysis assumes exact uniformity.

        Sampler: production draws **exactly uniform** values from the OS
        CSPRNG: a scalar via ``secrets.randbelow``; arrays via vectorised
        rejection sampling on 64-bit words from ``os.urandom`` (no modulo
        bias, no PRNG in between).  Seeded mode: ``Generator.integers``.
        """
        low, high = int(low), int(high)
        if high <= low:
            raise ValueError(f"high must be > low, got low={low}, high={high}")
        r = high - low
        if size is None:
            if self._rng is None:
                return low + secrets.randbelow(r)
            return int(self._rng.integers(low, high))
        shape = _size_to_shape(size)
        if low < -(1 << 63) or high - 1 > (1 << 63) - 1:
            raise ValueError("low and high must fit in int64 when size is given")
        if self._rng is not None:
            return self._rng.integers(low, high, size=shape, dtype=np.int64)
        n = int(np.prod(shape, dtype=np.int64))
        offs = _urandom_below(r, n)  # exact uniform in [0, r), r <= 2**64 - 1
        # low + offs is in int64 range; add modulo 2**64 and reinterpret.
        base = np.full(n, low % (1 << 64), dtype=np.uint64)
        out = (base + offs).view(np.int64)
        return out.reshape(shape)

    def permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation of ``range(n)``.

        Parameters
        ----------
        n : int
            Length, ``>= 0``.

        Returns
        -------
        numpy.ndarray
            ``int64`` array containing ``0 .. n-1`` in random order.

        Raises
        ------
        ValueError
            If ``n`` is negative.

        Notes
        -----
        Sampler: production draws ``n`` independent 64-bit keys from
        ``os.urandom`` and returns their sort order; if any two keys tie, all
        keys are redrawn.  Conditioned on distinct keys the order is exactly
        uniform by exchangeability, so the permutation is exactly uniform.
        Seeded mode: ``Generator.permutation``.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        n = int(n)
        if self._rng is not None:
            return self._rng.permutation(n).astype(np.int64)
        while True:
            keys = _urandom_u64(n)
            order = np.argsort(keys, kind="stable")
            if n < 2 or np.all(np.diff(keys[order]) != 0):
                return order.astype(np.int64)

    def uniform01(self, size=None):
        """Uniform floats in ``[0, 1)`` for non-privacy-critical sampling.

        Parameters
        ----------
        size : int, tuple of int or None
            Output shape; ``None`` returns a Python ``float``.

        Returns
        -------
        float or numpy.ndarray
            Values ``k / 2**53`` with ``k`` uniform in ``[0, 2**53)``.

        Notes
        -----
        For choices inside a mechanism that carry no privacy weight (e.g. a
        random starting point).  **Not** for noise or for comparing against
        a probability: use :meth:`bernoulli` for that.

        Sampler: production takes the top 53 bits of 64-bit words from
        ``os.urandom`` directly (OS CSPRNG; stronger than the per-call
        CSPRNG-seeded ``Generator`` the design allows).  Seeded mode:
        ``Generator.random``.
        """
        shape = _size_to_shape(size)
        if self._rng is not None:
            if size is None:
                return float(self._rng.random())
            return self._rng.random(size=shape)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        vals = (_urandom_u64(n) >> np.uint64(11)).astype(np.float64) * (2.0**-53)
        if size is None:
            return float(vals[0])
        return vals.reshape(shape)
