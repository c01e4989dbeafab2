"""The :class:`NoiseSource`: production (exact samplers + OS CSPRNG) and seeded test modes.

Part of :mod:`dpcore.noise` (the package docstring states the rules).
OpenDP is imported on first use (:func:`_dp`, which calls
``opendp.mod.enable_features("contrib")``, required before its measurement
constructors can be used), and only the modules the measurements below are built
from: ``opendp.prelude`` also imports ``opendp.extras``, whose scikit-learn
wrappers load scikit-learn (about 30 MiB and 1 s that a release never uses:
issue 29, goal 4). Commands that draw no noise (``dpr spec check``, ``dpr plan``)
import neither.
"""

from __future__ import annotations

import math
import secrets
from functools import lru_cache
from typing import Callable

import numpy as np

from .core import (
    NotForPublicationError,
    _bernoulli_exp_neg_from,
    _bernoulli_from_bits,
    _exact_fraction,
    _positive_finite,
    _readings,
    _urandom_below,
    _urandom_bit_source,
    _urandom_u64,
    conservative_scale,
    round_up,
)

from .dlaplace import MAX_NUMERATOR, OSRandomness, cks_discrete_laplace, saturating_add, scale_ratio
from .student_t import student_t2_integer_from_bits
from .smooth_cdp import arsinh_integer_from_bits, lln_integer_from_bits



@lru_cache(maxsize=1)
def _dp():
    """OpenDP's domains, metrics, measures and measurements (``m``), contrib features enabled (on first use).

    The same functions ``opendp.prelude`` exports, without its ``opendp.extras`` (scikit-learn).
    """
    from types import SimpleNamespace

    import opendp.domains as domains
    import opendp.measurements as m
    import opendp.measures as measures
    import opendp.metrics as metrics
    from opendp.mod import enable_features

    enable_features("contrib")
    return SimpleNamespace(m=m, vector_domain=domains.vector_domain, atom_domain=domains.atom_domain,
                           l1_distance=metrics.l1_distance, l2_distance=metrics.l2_distance,
                           linf_distance=metrics.linf_distance,
                           zero_concentrated_divergence=measures.zero_concentrated_divergence)


__all__ = ["NoiseSource"]

# ---------------------------------------------------------------------------
# Cached OpenDP measurements (construction costs ~0.3 ms)
# ---------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _opendp_discrete_laplace(scale: float):
    dp = _dp()
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64"), scale=scale
    )


@lru_cache(maxsize=256)
def _opendp_gaussian(scale: float):
    dp = _dp()
    return dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.l2_distance(T=float),
        scale=scale,
    )


@lru_cache(maxsize=256)
def _opendp_noisy_max(scale: float):
    dp = _dp()
    return dp.m.make_noisy_max(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.linf_distance(T=float),
        dp.zero_concentrated_divergence(),
        scale=scale,
    )


#: Draws per call of the vectorised sampler (bounds its working memory to ~20 MB).
_DLAP_CHUNK = 1 << 18


def _opendp_discrete_laplace_add(arr: np.ndarray, scale: float) -> np.ndarray:
    """``values + Z`` with OpenDP's exact discrete Laplace sampler (saturating at the int64 bounds).

    The production sampler before issue 19, kept for scales whose numerator
    exceeds :data:`dpcore.noise.dlaplace.MAX_NUMERATOR` and as the reference
    of the exactness tests and ``benchmarks/noise.py``.  ``arr`` is an int64
    array, ``scale`` a float; OpenDP ``make_laplace`` on
    ``vector_domain(atom_domain(T=i64))`` with ``l1_distance(T=i64)``.  A
    contiguous 1-d int64 array goes to OpenDP as one buffer (its numpy input
    path); a Python list would be type-checked element by element (~1 us per
    cell).  About 5 us per draw.
    """
    meas = _opendp_discrete_laplace(scale)
    out = np.asarray(meas(np.ascontiguousarray(arr.ravel())), dtype=np.int64)
    return out.reshape(arr.shape)


def _vectorised_discrete_laplace_add(arr: np.ndarray, scale: float, rand=None) -> np.ndarray:
    """``clip(values + Z, int64 bounds)`` with the vectorised exact sampler (:mod:`dpcore.noise.dlaplace`).

    ``arr`` is an int64 array, ``scale`` a float whose exact value ``t / s``
    has ``t <= MAX_NUMERATOR``; ``rand`` defaults to :class:`OSRandomness`.
    Draws are made ``_DLAP_CHUNK`` at a time (independent draws, so chunking
    does not change the distribution).
    """
    t, s = scale_ratio(scale)
    rand = OSRandomness() if rand is None else rand
    flat = np.ascontiguousarray(arr, dtype=np.int64).ravel()
    out = np.empty_like(flat)
    for start in range(0, flat.size, _DLAP_CHUNK):
        stop = min(start + _DLAP_CHUNK, flat.size)
        neg, mag = cks_discrete_laplace(t, s, stop - start, rand)
        out[start:stop] = saturating_add(flat[start:stop], neg, mag)
    return out.reshape(arr.shape)


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
        ``None`` (production): discrete Laplace noise comes from the
        vectorised exact sampler of :mod:`dpcore.noise.dlaplace` (Canonne,
        Kamath & Steinke 2020) fed by ``os.urandom``, Gaussian and noisy-max
        noise from OpenDP's exact samplers (OS CSPRNG), and raw bits from
        ``os.urandom`` / ``secrets``.  Releases are publishable.
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

        Scale: a ``Fraction`` (or any non-float) scale is rounded *up* to a
        float (:func:`round_up`: more noise, never less); a float is used as
        is.  The float's exact binary value, a fraction ``n / d`` in lowest
        terms, is the scale the samplers below use, with no further rounding.

        Sampler (production): the vectorised exact discrete Laplace sampler of
        :mod:`dpcore.noise.dlaplace` -- Canonne, Kamath & Steinke (2020),
        Algorithm 2 with the rational scale ``n / d``, and their Algorithm 1
        for ``Bernoulli(exp(-U / n))`` and ``Bernoulli(exp(-1))`` -- run for
        all cells at once with numpy index arrays (each loop works only on
        the still-active draws; rejected draws are re-run with fresh
        randomness).  It is exact because every random choice is a
        ``Bernoulli(a / b)`` with integers ``a <= b``, drawn as ``W < a`` for
        ``W`` exactly uniform on ``{0, ..., b - 1}`` from ``os.urandom`` words
        (rejection sampling, no modulo bias), or a fair bit from
        ``os.urandom``, and all arithmetic is on integers, so
        ``P(Z = z) = (1 - e^{-1/s}) / (1 + e^{-1/s}) e^{-|z|/s}`` holds
        exactly, with no floating point anywhere.  No intermediate overflows
        for any scale below ``2**64`` (``n <= 2**64 - 1``): ``uint64`` is used
        only where the module docstring proves the values fit, Python ints
        otherwise.  About 20-30x OpenDP's draws per second
        (``benchmarks/noise.py``, BENCHMARKS.md).  Scales of ``2**64`` and
        above go to OpenDP's exact discrete Laplace sampler (``make_laplace``
        on ``vector_domain(atom_domain(T=i64))``, the previous production
        path, same distribution).

        Saturation: the sum ``values + Z`` is clipped to the int64 bounds
        (as OpenDP does): a cell whose sum would leave
        ``[-2**63, 2**63 - 1]`` gets the bound (this matters only for values
        within a few scales of the bounds, or scales near ``2**63``).

        Seeded mode: difference of two i.i.d. ``numpy`` geometric variables
        with ``p = 1 - exp(-1/s)`` (same distribution up to the float
        rounding of ``p``; test use only; the int64 sum is not saturated).
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
        arr = arr.astype(np.int64, copy=False)  # no copy of an int64 input: every path below returns a new array
        if arr.size == 0:
            return arr.copy()
        if self._rng is None:
            if scale_ratio(s)[0] <= MAX_NUMERATOR:
                return _vectorised_discrete_laplace_add(arr, s)
            return _opendp_discrete_laplace_add(arr, s)
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

    def student_t_integer(self, value, scale) -> int:
        """Release ``round(value + scale * Z)``, ``Z ~ T_2`` (Student's T, 2 degrees of freedom), exactly.

        Parameters
        ----------
        value : Fraction, int or float
            The centre (for a count: the exact integer count); a float is taken
            at its exact binary value.
        scale : Fraction, int or float
            ``> 0``; used **exactly** (a ``Fraction`` is not rounded): pass the
            ratio of the floats the privacy analysis uses, e.g.
            ``Fraction(S) / Fraction(s)``.

        Returns
        -------
        int
            ``k`` with probability exactly ``F((k + 1/2 - value) / scale) -
            F((k - 1/2 - value) / scale)``, ``F(x) = 1/2 + x / (2 sqrt(2 + x^2))``
            the T_2 CDF (``round(y) = floor(y + 1/2)``).

        Raises
        ------
        ValueError
            If ``value`` is not finite or ``scale`` is not a positive finite number.

        Notes
        -----
        Privacy: Bun & Steinke (2019), Section 3: with a beta-smooth bound
        ``S`` on the local sensitivity of an integer query ``f``,
        ``round(f(x) + (S(x) / s) Z)`` is ``epsilon``-DP for
        ``epsilon = 3 s / (2 sqrt 2) + 3 beta`` (derivation in
        :mod:`dpcore.mechanisms.outlier_count.methods`).  Rounding is post-processing.

        Validity of the sampler: inverse-CDF sampling of a uniform read lazily
        from fair bits, every comparison with the algebraic CDF made in exact
        rationals (:func:`dpcore.noise.student_t.student_t2_integer_from_bits`,
        module docstring), so the output distribution is exactly the one
        stated, with no floating-point rounding anywhere (Mironov 2012).  Bits
        come from ``os.urandom`` in production and from the seeded ``numpy``
        generator in test mode (:meth:`_bit_source`, as for :meth:`bernoulli`).
        """
        v = _exact_fraction(value, "value")
        _positive_finite(scale, "scale")
        c = _exact_fraction(scale, "scale")
        return student_t2_integer_from_bits(v, c, self._bit_source())

    def smooth_cdp_integer(self, family: str, value, scale, sigma) -> int:
        """Release ``round(value + scale * Z)`` exactly, ``Z`` Laplace log-normal or arsinh-normal.

        Parameters
        ----------
        family : {"lln", "arsinh"}
            ``"lln"``: ``Z = X e^{sigma Y}`` (``X`` standard Laplace, ``Y ~ N(0, 1)``);
            ``"arsinh"``: ``Z = sinh(sigma Y) / sigma`` (Bun & Steinke 2019, Section 3).
        value : Fraction, int or float
            The centre (for a count: the exact integer count).
        scale, sigma : Fraction, int or float
            ``> 0``, used **exactly** (a float at its binary value): pass the
            ratio of the floats the privacy analysis uses, e.g. ``Fraction(S) / Fraction(s)``.

        Returns
        -------
        int
            ``floor(value + scale Z + 1/2)``, with exactly that distribution.

        Raises
        ------
        ValueError
            On an unknown family or a non-finite / non-positive argument.

        Notes
        -----
        Privacy: ``(1/2) eps^2``-CDP for a ``t``-smooth bound ``S`` with the
        constants of :mod:`dpcore.noise.smooth_cdp`.  Validity of the sampler:
        lazy uniforms and rigorous decimal interval arithmetic, refined until
        the rounding is decided (:mod:`dpcore.noise.interval`, "Validity
        argument"); bits from ``os.urandom`` in production, from the seeded
        generator in test mode.
        """
        v = _exact_fraction(value, "value")
        _positive_finite(scale, "scale")
        _positive_finite(sigma, "sigma")
        c = _exact_fraction(scale, "scale")
        sg = _exact_fraction(sigma, "sigma")
        if family == "lln":
            return lln_integer_from_bits(v, c, sg, self._bit_source())
        if family == "arsinh":
            return arsinh_integer_from_bits(v, c, sg, self._bit_source())
        raise ValueError(f"family must be 'lln' or 'arsinh' (got {family!r})")

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

    # -- exact chains (PFL) ---------------------------------------------------

    def _words(self, n: int) -> np.ndarray:
        """``n`` uniform 64-bit words (``uint64``): the first bits of ``n`` lazy uniforms."""
        if self._rng is None:
            return _urandom_u64(n)
        return self._rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)

    def nonincreasing_chain(self, mant, expo, lo, hi, prev=None) -> np.ndarray:
        """Draw a block of a non-increasing chain with dyadic weights, exactly.

        Parameters
        ----------
        mant, expo : numpy.ndarray
            ``(n, width)`` positive float64 mantissas (at least ``2^-64``) and int64
            exponents: entry ``k`` of row ``j`` is the weight
            ``mant[j, k] * 2**expo[j, k] > 0`` of state ``lo[j] + k``.
        lo, hi : numpy.ndarray of int64
            Each position's states ``lo[j] .. hi[j]``, both non-increasing in ``j``.
        prev : int or None
            The state drawn just before the block (``None`` for the first block).

        Returns
        -------
        numpy.ndarray
            ``int64`` states ``y`` of length ``n``: ``y[j]`` is drawn from the
            states ``lo[j] <= v <= min(hi[j], y[j-1])`` (``prev`` for
            ``j = 0``) with probability **exactly** ``w_j(v) / sum_u w_j(u)``.

        Notes
        -----
        For mechanisms whose whole output distribution is defined by such
        rational conditionals (PFL: :mod:`dpcore.mechanisms.unattributed.pfl`),
        so the privacy proof needs no allowance for the sampler.  Sampler:
        inverse CDF on a lazy uniform per position, a compiled fast path with
        rigorous float margins and an exact integer path when the margins
        cannot decide (:mod:`dpcore.noise.dyadic`).  Randomness: one 64-bit
        word per position, plus rare further bits, from ``os.urandom``
        (production) or the seeded generator (tests).
        """
        from .dyadic import sample_chain_block

        lo = np.asarray(lo, dtype=np.int64)
        mant = np.ascontiguousarray(mant, dtype=np.float64)
        expo = np.ascontiguousarray(expo, dtype=np.int64)
        if mant.ndim != 2 or mant.shape != expo.shape or mant.shape[0] != lo.size:
            raise ValueError(f"mant and expo must be (n, width) arrays with n = len(lo); got {mant.shape}, "
                             f"{expo.shape} and {lo.size} positions")
        return sample_chain_block(mant, expo, lo, np.asarray(hi, dtype=np.int64), prev, self._words(lo.size),
                                  self._bit_source())

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
