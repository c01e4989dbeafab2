"""Private (beta, r)-anomaly identification queries (AIQ) under sensitive privacy.

Source: seed 001, Asif, Papakonstantinou & Vaidya, "How to Accurately and
Privately Identify Anomalies", CCS'19.

Query
-----
For a record value ``i`` and database ``x`` (a histogram over record values),
``g(i, x) = 1`` iff ``i`` is a (beta, r)-anomaly (Definition 2.2): ``i`` is
present (``x_i > 0``) and ``B_x(i, r) <= beta``, where ``B_x(i, r)`` counts the
records within distance ``r`` of ``i`` (closed ball, including ``i`` itself and
duplicates; see :mod:`dpcore.mechanisms.neighbors`).  ``g`` depends on ``x`` only through
``b = B_x(i, r)`` and ``xi = x_i``, so every method here takes those two
integers per query.  An arbitrary query point has ``xi = 0`` and ``g = 0``.

Neighbour relation and notions
------------------------------
Databases are neighbours when they differ by adding or removing one record
(``||x - y||_1 = 1``, the neighbourhood graph G of Section 3).

* ``mechanism="dp"``: Construction 1 with ``lambda = Delta_G`` (eq. 2); by
  Lemma 4.3 and Theorem 4.1 with G_S = G it is epsilon-DP (notion ``dp``), and
  pareto optimal among epsilon-DP mechanisms (Theorem 4.4).
* ``mechanism="sp"``: Construction 1 with ``lambda = lambda_k`` (eq. 3); by
  Lemma 4.5 and Theorem 4.1 it is (epsilon, k)-sensitively private
  (Definition 3.2) for the k-sensitive neighbourhood graph (Definition 3.1):
  the DP guarantee for every pair of databases differing in a record that is
  normal, or becomes normal after adding/removing at most ``k`` records
  (notion ``sp``).
* ``mechanism="compiler"``: Construction 2 (Theorem 4.7) applied to the valid
  epsilon/2-DP mechanism ``U_{Delta_G}`` with
  ``delta = lambda_k - Delta_G`` (Section 4.2 instantiates ``k = 1``); epsilon-SP
  (notion ``sp``).

Error probabilities are exact (:class:`ExpErrorProbability`) and answers are
drawn with :class:`dpcore.noise.NoiseSource`'s exact Bernoulli samplers, so a
wrong-answer rate like ``1e-21`` is honoured exactly (DESIGN.md rule 3).

The baselines B1/B2 of Section 5 are evaluation baselines; they live in
``benchmarks/aiq.py``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from .params import real_between
from dpcore.runtime.chunks import serial_map
from .neighbors import ArrayChunks, chunked_ball_counts, pairwise_ball_max
from ..noise import NoiseSource

__all__ = ["AnomalyIdentification", "ExpErrorProbability", "exp_neg_bounds"]

MECHANISMS = ("sp", "dp", "compiler")
_HALF = Fraction(1, 2)
#: Saturation slack: ball counts are only needed exactly up to a cap at which
#: the wrong-answer probability is already below exp(-SATURATION_EXPONENT);
#: beyond it the exact count is fetched lazily (see ``answer``).
SATURATION_EXPONENT = 45


# ---------------------------------------------------------------------------
# exact arithmetic helpers
# ---------------------------------------------------------------------------


def _round_sig(f: Fraction, bits: int, up: bool) -> Fraction:
    """Round a positive Fraction to ``bits`` significant bits, down or up."""
    if f <= 0:
        return Fraction(0)
    e = f.numerator.bit_length() - f.denominator.bit_length()
    shift = bits - e
    scaled = f * (Fraction(2) ** shift)
    q = scaled.numerator // scaled.denominator
    if up and q * scaled.denominator != scaled.numerator:
        q += 1
    return Fraction(q) / (Fraction(2) ** shift)


def exp_neg_bounds(x, bits: int = 96) -> tuple[Fraction, Fraction]:
    """Rigorous rational bounds ``lo <= exp(-x) <= hi`` for rational ``x >= 0``.

    Parameters
    ----------
    x : Fraction, int or float
        Exponent ``>= 0`` (a float is taken exactly).
    bits : int, default 96
        Working precision in significant bits; the relative width of the
        bracket is about ``2**-(bits - 10)``.

    Returns
    -------
    tuple of Fraction
        ``(lo, hi)`` with ``0 < lo <= exp(-x) <= hi``.

    Notes
    -----
    ``exp(-x) = exp(-y) ** (2**s)`` with ``y = x / 2**s <= 1/2``.  The
    alternating Taylor series of ``exp(-y)`` brackets it between consecutive
    partial sums; the bracket is squared ``s`` times with outward rounding.
    """
    x = Fraction(x) if not isinstance(x, float) else Fraction(x)
    if x < 0:
        raise ValueError(f"x must be >= 0, got {x}")
    if x == 0:
        return Fraction(1), Fraction(1)
    s = 0
    y = x
    while y > _HALF:
        y /= 2
        s += 1
    guard = bits + s + 16
    term = Fraction(1)
    total = Fraction(1)
    n = 0
    tiny = Fraction(1, 2**guard)
    while True:
        n += 1
        term = term * (-y) / n
        prev = total
        total = total + term
        if abs(term) < tiny:
            break
    lo, hi = (total, prev) if term < 0 else (prev, total)
    lo = _round_sig(lo, guard, up=False)
    hi = _round_sig(hi, guard, up=True)
    for _ in range(s):
        lo = _round_sig(lo * lo, guard, up=False)
        hi = _round_sig(hi * hi, guard, up=True)
    return lo, hi


def _int_root(n: int, k: int) -> int | None:
    """Exact integer k-th root of ``n >= 0``, or None when ``n`` is no k-th power."""
    if n < 0:
        return None
    if n in (0, 1):
        return n
    lo, hi = 0, 1 << (n.bit_length() // k + 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid**k <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo if lo**k == n else None


def _rational_power(u: Fraction, q: Fraction) -> Fraction:
    """``u ** q`` exactly for rational ``u > 0`` when the result is rational."""
    a = _int_root(u.numerator, q.denominator)
    b = _int_root(u.denominator, q.denominator)
    if a is None or b is None:
        raise ValueError(f"({u}) ** ({q}) is not rational; pick e^epsilon as a perfect {q.denominator}-th power")
    return Fraction(a, b) ** q.numerator


@dataclass(frozen=True)
class ExpErrorProbability:
    """An exact wrong-answer probability ``exp(-eps*alpha) / (1 + exp(eps*gamma))``.

    Construction 1 (Claim 2): ``alpha = lambda - 1``, ``gamma = 1``.
    Construction 2 on ``U_{Delta_G}`` at epsilon/2 (Theorem 4.7):
    ``alpha = (Delta_G - 1)/2 + delta/4``, ``gamma = 1/2``.

    Attributes
    ----------
    epsilon : Fraction
        The mechanism's epsilon, exact (decimal text of a float).
    alpha, gamma : Fraction
        Rational coefficients; the value is a function of ``u = e^epsilon``:
        ``u**(-alpha) / (1 + u**gamma)``.

    Notes
    -----
    The value is irrational in general, so it is represented by this
    structure; use :meth:`bounds` for rigorous rational enclosures,
    ``float(p)`` for reporting (relative error ~1e-16, no underflow above
    1e-308), and :meth:`at_exp_epsilon` for exact evaluation when ``e^epsilon``
    is a chosen rational (used by the exact privacy audit).  Sampling uses
    ``exponent`` and ``logistic_exponent`` with the exact samplers.
    """

    epsilon: Fraction
    alpha: Fraction
    gamma: Fraction

    @property
    def exponent(self) -> Fraction:
        """Fraction: ``eps * alpha``, the exact argument of ``Bernoulli(exp(-.))``."""
        return self.epsilon * self.alpha

    @property
    def logistic_exponent(self) -> Fraction:
        """Fraction: ``eps * gamma`` in the factor ``1 / (1 + exp(eps*gamma))``."""
        return self.epsilon * self.gamma

    def log(self) -> float:
        """Natural logarithm of the probability (float, never underflows)."""
        c = float(self.logistic_exponent)
        return -float(self.exponent) - (c + math.log1p(math.exp(-c)))

    def __float__(self) -> float:
        return math.exp(self.log())

    def bounds(self, bits: int = 96) -> tuple[Fraction, Fraction]:
        """Rigorous rational ``(lo, hi)`` with ``lo <= p <= hi``."""
        alo, ahi = exp_neg_bounds(self.exponent, bits)
        clo, chi = exp_neg_bounds(self.logistic_exponent, bits)  # bounds on exp(-c)
        # p = exp(-a) / (1 + 1/exp(-c)) = exp(-a) * exp(-c) / (exp(-c) + 1)
        lo = alo * clo / (clo + 1)
        hi = ahi * chi / (chi + 1)
        return lo, hi

    def at_exp_epsilon(self, u) -> Fraction:
        """Exact value had ``e^epsilon`` been the rational ``u``.

        Parameters
        ----------
        u : Fraction or int
            ``> 1``; ``u**alpha`` and ``u**gamma`` must be rational (e.g. a
            perfect 4th power for the compiler's quarter exponents).

        Returns
        -------
        Fraction
            ``u**(-alpha) / (1 + u**gamma)``.
        """
        u = Fraction(u)
        if u <= 1:
            raise ValueError("u = e^epsilon must be > 1")
        return 1 / (_rational_power(u, self.alpha) * (1 + _rational_power(u, self.gamma)))


# ---------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------


def _logistic_bernoulli(noise: NoiseSource, c: Fraction) -> bool:
    """Exact ``Bernoulli(1 / (1 + exp(c)))`` for rational ``c >= 0``.

    With ``q = exp(-c)``, ``1/(1+e^c) = q/(1+q)``.  Each round flips a fair
    coin: 0 -> return False (prob 1/2); else draw ``Bernoulli(q)`` exactly:
    1 -> return True (prob q/2), 0 -> repeat.  Hence
    ``P(True) = (q/2) / (q/2 + 1/2) = q/(1+q)``.  Expected rounds <= 2.
    """
    while True:
        if not noise.bernoulli(_HALF):
            return False
        if noise.bernoulli_exp_neg(c):
            return True


def _chunk_source(data):
    """``data`` as a chunk source: a chunk source as is, an array as one chunk (:class:`ArrayChunks`)."""
    if hasattr(data, "n_chunks") and hasattr(data, "chunk"):
        return data
    return ArrayChunks.of(data)


def _as_int_array(v, name: str) -> np.ndarray:
    arr = np.asarray(v)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be non-negative integers (counts), got dtype {arr.dtype}")
    arr = np.atleast_1d(arr.astype(np.int64))
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0")
    return arr


class AnomalyIdentification:
    """(beta, r)-AIQ mechanism (seed 001, Section 4).

    Parameters
    ----------
    beta : int
        ``>= 1``: a present record is an anomaly when at most ``beta`` records
        (itself included) lie within distance ``r`` (Definition 2.2).
    r : float
        Radius, finite, ``>= 0``, in the (public-bounds scaled) distance.
    epsilon : float, int or Fraction
        ``> 0``; read exactly from its decimal text.
    k : int, default 1
        ``>= 1``; size of a "small change" in Definition 3.1 (only used by
        ``"sp"`` and ``"compiler"``; ``k >= beta + 1`` makes every record
        sensitive, i.e. DP).
    mechanism : {"sp", "dp", "compiler"}
        ``"sp"``: Construction 1 with ``lambda_k`` (eq. 3), notion ``sp``.
        ``"dp"``: Construction 1 with ``Delta_G`` (eq. 2), notion ``dp``.
        ``"compiler"``: Construction 2 (Theorem 4.7) on ``U_{Delta_G}`` at
        epsilon/2 with ``delta = lambda_k - Delta_G``, notion ``sp``.

    Notes
    -----
    * Input per query: ``b = B_x(i, r)`` and ``xi = x_i`` (computed by
      :meth:`counts` / :mod:`dpcore.mechanisms.neighbors`; they never leave the
      warehouse).  Output: one private bit per query, ``True`` = "anomaly".
    * Neighbour relation: add/remove one record (``neighbour = "add-remove"``).
    * Cost of one query: epsilon (notion ``dp`` or ``sp``); for a batch see
      :meth:`batch_cost`.
    * The constructor only stores; :meth:`validate` checks (every other method
      calls it).
    """

    neighbour = "add-remove"

    def __init__(self, beta: int, r: float, epsilon, k: int = 1, mechanism: str = "sp"):
        self.beta = beta
        self.r = r
        self.epsilon = epsilon
        self.k = k
        self.mechanism = mechanism

    # -- metadata -----------------------------------------------------------

    def validate(self) -> None:
        """Check the parameters.

        Raises
        ------
        ValueError
            Naming the parameter, its allowed range and how to fix it.
        """
        b = self.beta
        if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
            raise ValueError(f"beta must be an integer >= 1 (got {b!r}); set beta to the largest ball count that still makes a record an anomaly, e.g. beta=97")
        r = self.r
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(float(r)) or float(r) < 0:
            raise ValueError(f"r must be a finite number >= 0 (got {r!r}); give the radius in public-bounds scaled units, e.g. r=0.05")
        e = self.epsilon
        if not real_between(e, 0):
            raise ValueError(f"epsilon must be a finite number > 0 (got {e!r}); pass e.g. epsilon=0.1")
        kk = self.k
        if isinstance(kk, bool) or not isinstance(kk, numbers.Integral) or kk < 1:
            raise ValueError(f"k must be an integer >= 1 (got {kk!r}); k=1 protects records that become normal after one change")
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS} (got {self.mechanism!r})")

    @property
    def name(self) -> str:
        """str: ``aiq-sp-lambda_k``, ``aiq-dp-delta_g`` or ``aiq-sp-compiler``."""
        return {"sp": "aiq-sp-lambda_k", "dp": "aiq-dp-delta_g", "compiler": "aiq-sp-compiler"}[self.mechanism]

    @property
    def notion(self) -> str:
        """str: ``"dp"`` for ``mechanism="dp"``, else ``"sp"``."""
        return "dp" if self.mechanism == "dp" else "sp"

    @property
    def eps(self) -> Fraction:
        """Fraction: epsilon, exact (``Fraction(repr(float))``)."""
        self.validate()
        return exact(self.epsilon)

    # -- formulas -------------------------------------------------------------

    def truth(self, b, xi) -> np.ndarray:
        """Non-private ``g(i, x)``: ``xi > 0 and b <= beta`` (Definition 2.2)."""
        b, xi = self._check_counts(b, xi)
        return (xi > 0) & (b <= self.beta)

    def _check_counts(self, b, xi) -> tuple[np.ndarray, np.ndarray]:
        self.validate()
        b = _as_int_array(b, "b (ball count)")
        xi = _as_int_array(xi, "xi (multiplicity)")
        if b.shape != xi.shape:
            raise ValueError(f"b and xi must have the same shape, got {b.shape} and {xi.shape}")
        if np.any(b < xi):
            raise ValueError("ball count b must be >= multiplicity xi (the ball includes the record's own copies)")
        return b, xi

    @staticmethod
    def delta_g(b: np.ndarray, xi: np.ndarray, beta: int) -> np.ndarray:
        """``Delta_G`` of eq. (2): the mdd-function on the neighbourhood graph.

        ``1`` if ``xi = 0, b < beta``; ``2 + b - beta`` if ``xi = 0, b >= beta``;
        ``min(xi, beta + 1 - b)`` if ``xi > 0, b <= beta``; ``b - beta`` if
        ``xi > 0, b > beta``.  1-Lipschitz on G (Lemma 4.3).
        """
        b = np.asarray(b, dtype=np.int64)
        xi = np.asarray(xi, dtype=np.int64)
        return np.where(
            xi == 0,
            np.where(b < beta, 1, 2 + b - beta),
            np.where(b <= beta, np.minimum(xi, beta + 1 - b), b - beta),
        ).astype(np.int64)

    @staticmethod
    def lambda_k(b: np.ndarray, xi: np.ndarray, beta: int, k: int) -> np.ndarray:
        """``lambda_k`` of eq. (3): ``Delta_G`` if ``b >= beta + 1 - k``, else
        ``beta + 1 - b + min(0, xi - k)``.  A 1-Lipschitz lower bound on the
        mdd-function of the k-sensitive graph (Lemma 4.5), ``>= 1``."""
        b = np.asarray(b, dtype=np.int64)
        xi = np.asarray(xi, dtype=np.int64)
        dg = AnomalyIdentification.delta_g(b, xi, beta)
        return np.where(b >= beta + 1 - k, dg, beta + 1 - b + np.minimum(0, xi - k)).astype(np.int64)

    def lam(self, b, xi) -> np.ndarray:
        """The lambda per query: ``Delta_G`` (``"dp"``) or ``lambda_k``
        (``"sp"``); for ``"compiler"`` the ``lambda_k`` from which
        ``delta = lambda_k - Delta_G`` is formed.

        Parameters
        ----------
        b, xi : array_like of int
            Ball counts ``B_x(i, r)`` and multiplicities ``x_i``.

        Returns
        -------
        numpy.ndarray
            int64, ``>= 1``.
        """
        b, xi = self._check_counts(b, xi)
        if self.mechanism == "dp":
            return self.delta_g(b, xi, int(self.beta))
        return self.lambda_k(b, xi, int(self.beta), int(self.k))

    def _alpha_gamma(self, b: np.ndarray, xi: np.ndarray) -> tuple[list[Fraction], Fraction]:
        """Per-query ``alpha`` and the common ``gamma`` of :class:`ExpErrorProbability`."""
        beta, k = int(self.beta), int(self.k)
        if self.mechanism == "dp":
            lam = self.delta_g(b, xi, beta)
            return [Fraction(int(v) - 1) for v in lam], Fraction(1)
        if self.mechanism == "sp":
            lam = self.lambda_k(b, xi, beta, k)
            return [Fraction(int(v) - 1) for v in lam], Fraction(1)
        dg = self.delta_g(b, xi, beta)
        delta = self.lambda_k(b, xi, beta, k) - dg  # >= 0, 2-Lipschitz (Section 4.2)
        return [Fraction(int(g) - 1, 2) + Fraction(int(d), 4) for g, d in zip(dg, delta)], _HALF

    def error_probability(self, b, xi) -> list[ExpErrorProbability]:
        """Exact probability that the answer is wrong, per query.

        Construction 1 (Claim 2): ``exp(-eps (lambda - 1)) / (1 + e^eps)``.
        Construction 2 (Theorem 4.7):
        ``[exp(-(eps/2)(Delta_G - 1)) / (1 + e^(eps/2))] * exp(-(eps/4) delta)``.

        Parameters
        ----------
        b, xi : array_like of int
            Ball counts and multiplicities (exact, not saturated).

        Returns
        -------
        list of ExpErrorProbability
            Exact values (see the class for float, bounds and exact evaluation).
        """
        b, xi = self._check_counts(b, xi)
        eps = self.eps
        alphas, gamma = self._alpha_gamma(b, xi)
        return [ExpErrorProbability(eps, a, gamma) for a in alphas]

    def error_rate(self, b, xi) -> np.ndarray:
        """Float64 wrong-answer probabilities for reporting only (never for sampling).

        Returns ``exp(log p)``; values below ~1e-308 underflow to 0 (use
        :meth:`log_error_rate` then).
        """
        return np.exp(self.log_error_rate(b, xi))

    def log_error_rate(self, b, xi) -> np.ndarray:
        """Natural log of the wrong-answer probabilities (float64, vectorised)."""
        b, xi = self._check_counts(b, xi)
        eps = float(self.eps)
        beta, k = int(self.beta), int(self.k)
        if self.mechanism == "compiler":
            dg = self.delta_g(b, xi, beta)
            d = self.lambda_k(b, xi, beta, k) - dg
            a = eps * ((dg - 1) / 2 + d / 4)
            c = eps / 2
        else:
            a = eps * (self.lam(b, xi) - 1)
            c = eps
        return -a - (c + math.log1p(math.exp(-c)))

    def max_error_probability(self) -> float:
        """The largest wrong-answer probability over all inputs: a public accuracy bound (issue 16).

        Construction 1 answers wrongly with probability
        ``e^{-eps (lambda - 1)} / (1 + e^{eps})`` where ``lambda >= 1`` is the
        (sensitive) distance to a database with the other answer (Section 4,
        eq. 2/3); its maximum ``1 / (1 + e^{eps})`` is attained at the anomaly
        boundary (``lambda = 1``). The compiler (Construction 2) halves the
        rate: ``1 / (1 + e^{eps/2})``. A function of the public epsilon only,
        so it can be published next to every answer without leaking where the
        queried point lies; answers far from the boundary are right with much
        higher probability (the statement says so).

        Returns
        -------
        float
            The bound, rounded up by a relative ``1e-12``.
        """
        self.validate()
        c = float(self.eps) / (2 if self.mechanism == "compiler" else 1)
        return math.nextafter((1.0 / (1.0 + math.exp(c))) * (1 + 1e-12), 1.0)

    # -- saturation ----------------------------------------------------------

    def saturation_cap(self) -> int:
        """Smallest useful cap for saturated ball counts (see :meth:`answer`).

        Returns
        -------
        int
            ``beta + 2 + ceil(S / rate)`` with ``S = 45`` and ``rate = eps``
            (``eps/2`` for the compiler): for every ``b >= cap`` the answer is
            "not an anomaly" and the wrong-answer probability is below
            ``exp(-45)``, and ``alpha`` grows by exactly ``1`` (``1/2``) per
            extra record in the ball.
        """
        rate = self.eps if self.mechanism != "compiler" else self.eps / 2
        return int(self.beta) + 2 + math.ceil(Fraction(SATURATION_EXPONENT) / rate)

    # -- sampling -----------------------------------------------------------

    def answer(
        self,
        b,
        xi,
        noise: NoiseSource,
        *,
        cap: int | None = None,
        exact_count: Callable[[int], int] | None = None,
    ) -> np.ndarray:
        """Draw the private answers.

        Parameters
        ----------
        b, xi : array_like of int
            Ball counts and multiplicities per query.  With ``cap``, an entry
            ``b >= cap`` means only "``B >= cap``" (saturated count from
            ``ball_counts(..., cap=cap)``).
        noise : NoiseSource
            All randomness: exact ``bernoulli_exp_neg(eps * alpha)`` and the
            exact logistic factor ``1/(1 + e^(eps*gamma))`` (fair coins and
            ``bernoulli_exp_neg(eps*gamma)``).  No float probabilities.
        cap : int or None
            Saturation cap, ``>= beta + 2``.
        exact_count : callable or None
            ``exact_count(j)`` returns the exact ``B`` of query ``j``; called
            only for saturated queries, with probability ``< exp(-eps*(cap-beta-1))``
            each (required when ``cap`` is given).

        Returns
        -------
        numpy.ndarray
            bool per query: ``g(i, x)`` flipped with exactly the probability of
            :meth:`error_probability`.

        Notes
        -----
        Error event = ``Bernoulli(exp(-eps*alpha))`` AND
        ``Bernoulli(1/(1+e^(eps*gamma)))`` (independent), whose probability is
        the product, i.e. exactly Claim 2 / Theorem 4.7.  For a saturated
        query ``alpha(B) = alpha(cap) + s (B - cap)`` (``s = 1``, or ``1/2``
        for the compiler), so the first factor is drawn as
        ``Bernoulli(exp(-eps*alpha(cap)))`` and, only if that succeeds,
        ``Bernoulli(exp(-eps*s*(B - cap)))`` with the exact ``B``: the same
        distribution, without computing huge balls exactly.
        """
        b, xi = self._check_counts(b, xi)
        eps = self.eps
        truth = (xi > 0) & (b <= int(self.beta))
        sat = np.zeros(b.shape, dtype=bool)
        if cap is not None:
            if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < int(self.beta) + 2:
                raise ValueError(f"cap must be an int >= beta + 2 = {int(self.beta) + 2}, got {cap!r}")
            if exact_count is None:
                raise ValueError("exact_count is required when cap is given")
            sat = b >= cap
            b = np.where(sat, int(cap), b)
        alphas, gamma = self._alpha_gamma(b, xi)
        c = eps * gamma
        slope = Fraction(1) if self.mechanism != "compiler" else _HALF
        out = truth.copy()
        cache: dict[Fraction, Fraction] = {}
        for j, a in enumerate(alphas):
            x = cache.get(a)
            if x is None:
                x = cache[a] = eps * a
            if not noise.bernoulli_exp_neg(x):
                continue
            if sat[j]:
                true_b = int(exact_count(j))
                if true_b < int(cap):
                    raise RuntimeError("exact_count disagrees with the saturated count (inconsistent distance evaluation)")
                if not noise.bernoulli_exp_neg(eps * slope * (true_b - int(cap))):
                    continue
            if _logistic_bernoulli(noise, c):
                out[j] = not out[j]
        return out

    # -- end to end ----------------------------------------------------------

    def counts(self, data, queries, *, query_multiplicity=None, saturate: bool = True, mapper=serial_map):
        """Ball counts and multiplicities for query points (internal values).

        Parameters
        ----------
        data : array_like, shape (n, d), or a chunk source
            Records, already scaled by public bounds; or a chunk source
            (``n_chunks``, ``chunk(i)``: e.g. the warehouse's
            :class:`dpcore.steps.aiq.ScaledPartitions`), read one chunk at a
            time.  An array is the one-chunk case
            (:class:`dpcore.mechanisms.neighbors.ArrayChunks`).
        queries : array_like, shape (q, d)
            Query points (records or arbitrary points).
        query_multiplicity : array_like of int or None
            ``x_i`` if the caller knows it; else computed by exact equality.
        saturate : bool, default True
            Return saturated counts capped at :meth:`saturation_cap`.
        mapper : callable
            Runs the per-chunk work (:func:`dpcore.mechanisms.neighbors.chunked_ball_counts`).

        Returns
        -------
        (b, xi, cap) : (ndarray, ndarray, int or None)
            ``B_x(i, r)`` (Section 2; saturated at ``cap``) and ``x_i``: sums
            over the chunks, the same numbers as over the whole table.
            Non-private; keep them internal (DESIGN.md rule 6).
        """
        self.validate()
        cap = self.saturation_cap() if saturate else None
        b, xi = chunked_ball_counts(_chunk_source(data), queries, float(self.r), cap=cap, mapper=mapper)
        if query_multiplicity is not None:
            xi = _as_int_array(query_multiplicity, "query_multiplicity")
        return b, xi, cap

    def exact_count(self, data, query, *, mapper=serial_map) -> int:
        """The exact (unsaturated) ``B_x(i, r)`` of one query point (for :meth:`answer`'s saturated queries).

        Parameters
        ----------
        data : array_like or a chunk source
            As for :meth:`counts`.
        query : array_like, shape (d,) or (1, d)

        Returns
        -------
        int
            Internal only.
        """
        q = np.asarray(query, dtype=np.float64).reshape(1, -1)
        return int(chunked_ball_counts(_chunk_source(data), q, float(self.r), mapper=mapper)[0][0])

    def record_query_counts(self, data, data_ids, query_ids, *, saturate: bool = True):
        """Ball counts and multiplicities for queries by record id (internal values).

        The query point of a record-id query is the queried record's own
        (private) value, so a neighbour that changes, adds or removes the
        queried record changes the query itself: the guarantee covers every
        *other* record, not the queried one (DESIGN.md rule 9; the step states
        it). An id that is not among ``data_ids`` (absent from the input, or
        quarantined by validation) gets the data-independent input
        ``(b, xi) = (0, 0)`` -- a query at a point where nothing is present --
        so its answer is drawn by the same mechanism from a distribution that
        does not depend on the data, and no id is refused for being absent
        (rule 8: no free probes).

        Parameters
        ----------
        data : array_like, shape (n, d)
            Records, scaled by public bounds.
        data_ids : array_like, shape (n,)
            Their record ids (distinct).
        query_ids : sequence of str
            The queried ids (typically from a public roster).

        Returns
        -------
        (b, xi, present, cap, queries) : (ndarray, ndarray, ndarray of bool, int or None, ndarray)
            ``b``, ``xi`` as in :meth:`counts` (0 for absent ids); which ids
            were present; the saturation cap; the query points (rows of
            ``data``; zeros for absent ids, never used). Non-private: keep
            them internal (DESIGN.md rule 6).

        Notes
        -----
        Neighbour relation covered: add/remove one record other than the
        queried one (the answer for an absent id does not depend on the data
        at all). Audited exactly in ``tests/test_aiq_record_queries.py``.
        """
        self.validate()
        D = np.asarray(data, dtype=np.float64)
        if D.ndim == 1:
            D = D.reshape(-1, 1)
        import pandas as pd

        # row of each queried id, -1 where absent (vectorised)
        pos = np.asarray(pd.Index(np.asarray(data_ids, dtype=object)).get_indexer(list(query_ids)), dtype=np.int64)
        present = pos >= 0
        queries = np.zeros((len(pos), D.shape[1]), dtype=np.float64)
        queries[present] = D[pos[present]]
        cap = self.saturation_cap() if saturate else None
        b = np.zeros(len(pos), dtype=np.int64)
        xi = np.zeros(len(pos), dtype=np.int64)
        if present.any():
            b[present], xi[present], _ = self.counts(D, queries[present], saturate=saturate)
        return b, xi, present, cap, queries

    def run(self, data, queries, noise: NoiseSource, *, query_multiplicity=None) -> np.ndarray:
        """Private answers for query points over ``data`` (counts + :meth:`answer`).

        Returns
        -------
        numpy.ndarray
            bool per query.
        """
        b, xi, cap = self.counts(data, queries, query_multiplicity=query_multiplicity)
        Q = np.asarray(queries, dtype=np.float64)
        if Q.ndim == 1:
            Q = Q.reshape(-1, 1)

        def exact_count(j: int) -> int:
            return self.exact_count(data, Q[j])

        return self.answer(b, xi, noise, cap=cap, exact_count=exact_count)

    # -- composition (Section 3.1) -----------------------------------------------

    def batch_cost(self, n_queries: int, m: int | None = None) -> PrivacyCost:
        """Ledger charge for a batch of ``n_queries`` AIQs with the same (beta, r, k).

        Parameters
        ----------
        n_queries : int
            Number of queries (``>= 0``).
        m : int or None
            For queries that are **public** points: an upper bound on the
            number of queried points inside any ball of radius ``r``
            (:meth:`batch_m`).  ``None`` for record-id queries.

        Returns
        -------
        PrivacyCost
            ``epsilon * min(m, n_queries)`` if ``m`` is given, else
            ``epsilon * n_queries``; delta 0.  Notion: :attr:`notion`.

        Notes
        -----
        * Sequential composition (Section 3.1, Claim 3): ``n`` mechanisms each
          epsilon-SP for the same k-sensitive graph compose to
          ``n * epsilon`` (and ``dp`` likewise).
        * Claim 5 (with parallel composition, Claim 4): the AIQ for ``i``
          depends only on records within ``r`` of ``i``; adding/removing one
          record at ``j`` changes only queries inside the ball of radius ``r``
          around ``j``, so the batch is ``m * epsilon`` with ``m`` the maximum
          number of queries within any ball of radius ``r``; queries pairwise
          more than ``2r`` apart cost ``epsilon`` in total.
        * ``m`` computed from the positions of *records in the private data*
          is itself data dependent (it reveals how clustered the queried
          records are), so it may only be used for explicit public query
          points; for record-id queries pass ``m=None`` and the charge is
          ``n_queries * epsilon``.
        """
        self.validate()
        if isinstance(n_queries, bool) or not isinstance(n_queries, numbers.Integral) or n_queries < 0:
            raise ValueError(f"n_queries must be an integer >= 0, got {n_queries!r}")
        n = int(n_queries)
        if m is None:
            mult = n
        else:
            if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
                raise ValueError(f"m must be an integer >= 1 or None, got {m!r}")
            mult = min(int(m), n)
        return PrivacyCost(self.eps * mult)

    @staticmethod
    def batch_m(points, r) -> int:
        """Sound upper bound on the number of public query points in any ball of radius ``r``.

        Parameters
        ----------
        points : array_like, shape (q, d)
            Public query points (same scaled coordinates as the data).
        r : float
            The AIQ radius.

        Returns
        -------
        int
            ``max_j #{l : d(p_l, p_j) <= 2r (1 + 1e-9)}`` (duplicates
            counted); 0 for no points.  Any ball of radius ``r`` holding a set
            ``S`` of points has diameter ``2r``, so all of ``S`` lies within
            ``2r`` of any member: the true maximum (Claim 5's ``m``) is at most
            this value.  The ``1e-9`` slack only enlarges the bound.
        """
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(float(r)) or float(r) < 0:
            raise ValueError(f"r must be a finite number >= 0, got {r!r}")
        rad = 2.0 * float(r) * (1 + 1e-9)
        return pairwise_ball_max(points, rad)
