"""PFL: the exponential mechanism over sorted size vectors (Blocki, Datta & Bonneau, NDSS 2016).

Seed 004 ("Algorithms Designed for Unattributed Histogram") lists PFL [BDB16]
as the efficient version of the exponential mechanism for unattributed
histograms.  BDB16 release a password frequency list ``f`` (an integer
partition of the number of users ``N``) by the exponential mechanism with the
score ``-||f - f'||_1`` over integer partitions ``f'``; their partitions may
have any total (neighbouring lists differ by one user, so ``N`` changes by
one and is not public) and their efficient sampler is an *approximate*
instantiation (a dynamic program over a truncated set of partitions), which
makes their mechanism ``(epsilon, delta)``-DP, not pure.

This module keeps BDB16's score and output family but adapts it to the
product's problem and makes the guarantee pure:

* Output space: non-increasing integer vectors ``y`` of the **public** length
  ``G`` with ``0 <= y_i`` (and ``y_i <= K`` when the public bound ``K`` is
  given).  The total ``sum(y)`` is free, like BDB16's partitions of any size:
  ``N`` is never used or assumed public.
* Score: ``u(x, y) = -||x - y||_1`` with ``x`` the true sorted sizes.  Under
  the product's neighbour relation (one item added to or removed from one
  group: exactly one entry of the sorted vector changes by one, ``G`` fixed)
  the score changes by at most ``1`` for every ``y`` (triangle inequality), so
  ``Delta u = 1``.
* Efficiency: the weight ``exp(-||x - y||_1 / s)`` factorises over positions
  and the constraint ``y_1 >= ... >= y_G`` is a chain, so the normalising
  sums are a backward dynamic program over positions ("time") with the value
  ``y_i`` as the state, each step a cumulative sum over states, and ``y`` is
  then sampled forward one position at a time from the exact conditionals.
  This replaces BDB16's dynamic program over partitions (which counts
  partitions by distance to ``f``) by one that works for a fixed ``G``.
* Pure DP with a band: running the chain over all ``K + 1`` states costs
  ``O(G K)``, too slow for ``G = 10^6, K = 10^4``.  A band around the data
  would make the output space depend on the data (and cost a ``delta``, as in
  BDB16).  Instead, when the public parameters say the full state space is
  too large, a fraction :data:`BAND_FRACTION` of ``epsilon`` buys a noisy
  sorted vector (discrete Laplace, sensitivity 1) whose sorted values centre
  a band of public half-width ``W`` (a function of ``epsilon`` only); the
  exponential mechanism with the rest of ``epsilon`` then runs over the
  non-increasing vectors inside that band.  The band is a function of an
  already-released noisy vector, so for each band the second stage is pure
  ``epsilon_2``-DP and the whole is ``epsilon_1 + epsilon_2 = epsilon`` by
  sequential composition.  A band that misses the truth costs accuracy only.

Privacy notion and cost (``notion = "dp"``, add/remove one item of one
group; the noisy band centre is never returned): **pure** ``epsilon``-DP,
``delta = 0`` (:func:`pfl_cost`).  The sampler is exact for the distribution
it defines, and that distribution is within a public factor of the ideal
exponential mechanism:

* *The chain.*  The backward messages ``B_i(v)`` (total weight of the
  completions ``y_i = v, ..., y_G`` in the band) are computed
  deterministically from ``x``, as dyadic rationals (float64 mantissa and
  ``int64`` exponent: :mod:`.pfl_messages`; no state's weight underflows to
  0), and ``y`` is drawn forward with the conditionals
  ``P(y_i = v | y_{i-1}) = B_i(v) / sum_{u <= y_{i-1}} B_i(u)`` taken
  **exactly** (:meth:`NoiseSource.nonincreasing_chain`: inverse CDF on a lazy
  uniform, integer arithmetic when float margins cannot decide).  So the
  released ``y`` has exactly the probability ``Q_x(y)``, the product of
  these rational conditionals: no 53-bit rounding, no additive ``delta``.
* *Multiplicative part.*  With ``S`` states per position (``K + 1``, or
  ``2 W + 1`` in the band), each stored ``B_i(v)`` is the weight
  ``t(|x_i - v|)`` (``exp(-|x_i - v| / s)`` to a relative ``2^-53``) times the
  exact sum of the stored ``B_{i+1}(u)``, ``u <= v``, up to a factor
  ``1 + theta``, ``|theta| <= (S + 2) 2^-53 (1 + 10^-3)`` (positive sums and
  products only).  The product of the conditionals along ``y`` telescopes
  (the numerator at ``i`` and the denominator at ``i + 1`` are the same
  stored messages), so ``Q_x(y)`` is the ideal probability
  ``exp(-||x - y||_1 / s) / Z`` up to a factor ``e^{+-eta}``: the path's
  factors are within ``G log(1 / (1 - theta))`` in log, the normaliser's
  too, and ``2 G log(1 / (1 - theta)) <= eta = 8 G (S + 2) 2^-53``
  (:func:`pfl_float_slack`).  The exponential
  mechanism is therefore run at ``epsilon_2 - 2 eta``: ``Q_x(y) / Q_x'(y) <=
  e^{epsilon_2 - 2 eta} e^{2 eta} = e^{epsilon_2}`` for every ``y`` and
  neighbours ``x, x'``.
* *Clipping.*  The messages use ``x`` clipped into the band: for ``y`` in
  the band, ``|x_i - y_i| = |clip(x_i) - y_i| + |x_i - clip(x_i)|``, a
  constant in ``y``, so the distribution is unchanged and ``|x_i - v| < S``.

``G`` is public (the step passes it; the mechanism's default is the public
maximum :data:`PFL_MAX_GROUPS`, refused above).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from dpcore.noise import NoiseSource, conservative_scale

from .pfl_messages import messages_block, weight_table


__all__ = ["pfl_release", "pfl_cost", "pfl_plan", "pfl_float_slack", "pfl_output_probability", "BAND_FRACTION",
           "BAND_TAIL_1", "BAND_TAIL_2", "PFL_MAX_GROUPS"]

#: Largest public number of groups PFL accepts (its float slack ``eta`` grows with G; module docstring).
PFL_MAX_GROUPS = 10**7
_U = Fraction(1, 2**53)

#: Fraction of epsilon spent on the noisy band centre when the band is needed.
BAND_FRACTION = Fraction(1, 4)
#: Half-width of the band: ``W = ceil(BAND_TAIL_1 * s_1 + BAND_TAIL_2 * s_2)``
#: with ``s_1 = 1 / epsilon_1`` (centre noise scale) and ``s_2 = 2 / epsilon_2``
#: (the exponential mechanism's per-entry scale).
BAND_TAIL_1 = 6
BAND_TAIL_2 = 8
#: Positions per checkpoint of the backward messages (memory O((G / BLOCK + BLOCK) W)).
_BLOCK = 1024


def pfl_float_slack(G: int, states: int) -> Fraction:
    """``eta = 8 G (states + 2) 2^-53`` for ``G`` positions of at most ``states`` states (module docstring).

    Bounds ``|log Q_x(y) - log P_x(y)|`` between the probability ``Q_x(y)`` the exact sampler gives ``y``
    (messages stored as dyadic rationals) and the ideal exponential mechanism's ``P_x(y)``, for every ``y``.
    """
    return 8 * G * (states + 2) * _U


def pfl_cost(epsilon, G: int = PFL_MAX_GROUPS, size_bound: int | None = None) -> PrivacyCost:
    """The privacy cost charged by :func:`pfl_release`: pure ``(epsilon, 0)``.

    Parameters
    ----------
    epsilon : float, int, str or Fraction
        The total ``epsilon > 0`` given to :func:`pfl_release`.
    G : int
        Public number of groups (default: the public maximum :data:`PFL_MAX_GROUPS`).  It does not change
        the cost; it is checked (and sets the float slack the second stage is run under, :func:`pfl_plan`).
    size_bound : int or None
        Public ``K`` (decides one or two stages).

    Returns
    -------
    PrivacyCost
        ``(epsilon, 0)`` under add/remove one item of one group (one entry
        of the sorted vector changes by one; ``G`` public): both stages sum
        to ``epsilon``, the second run at ``epsilon_2 - 2 eta`` so that the
        exactly sampled chain, within ``e^{+-eta}`` of the ideal mechanism,
        is ``epsilon_2``-DP (module docstring).  ``delta = 0``: the sampler
        adds no additive term (every output probability is the chain's exact
        rational one).
    """
    plan = pfl_plan(epsilon, G, size_bound)
    return PrivacyCost(plan["epsilon_band"] + plan["epsilon_em"], 0)


def pfl_plan(epsilon, G: int, size_bound: int | None) -> dict:
    """The public plan of :func:`pfl_release`: single- or two-stage, epsilon split, band width.

    Parameters
    ----------
    epsilon : float, int, str or Fraction
        Total ``epsilon > 0``.
    G : int
        Public number of groups.
    size_bound : int or None
        Public bound ``K`` on a group's size, or ``None``.

    Returns
    -------
    dict
        ``stages`` (1 or 2), ``epsilon_band`` and ``epsilon_em`` (Fractions,
        summing to ``epsilon``), ``band_scale`` (discrete Laplace scale of the
        centre, or ``None``), ``em_scale`` (``s_2 = 2 / (epsilon_em - 2 eta)`` rounded
        up: weights ``exp(-||x - y||_1 / s_2)``), ``half_width`` ``W`` (or ``None``),
        ``states`` ``S`` per position and the float slack ``eta`` (:func:`pfl_float_slack`).
        A function of public parameters only.

    Notes
    -----
    One stage (all of ``epsilon`` on the exponential mechanism over every
    non-increasing vector in ``{0..K}^G``) when ``K`` is given and the band
    would cover ``{0..K}`` anyway (``K <= 2 W``); otherwise two stages.
    """
    eps = exact(epsilon)
    if eps <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    if isinstance(G, bool) or not isinstance(G, int) or not 1 <= G <= PFL_MAX_GROUPS:
        raise ValueError(f"G must be an integer in [1, {PFL_MAX_GROUPS}] for pfl (got {G!r}): its float slack "
                         "grows with G")
    eps1 = eps * BAND_FRACTION
    eps2 = eps - eps1
    s1 = conservative_scale(1, eps1)
    s2 = NoiseSource.exponential_mechanism_scale(eps2, 1)
    w = int(math.ceil(BAND_TAIL_1 * s1 + BAND_TAIL_2 * s2))
    if size_bound is not None and size_bound <= 2 * w:
        states = int(size_bound) + 1
        eta = pfl_float_slack(G, states)
        return {"stages": 1, "epsilon_band": Fraction(0), "epsilon_em": eps, "band_scale": None,
                "em_scale": _em_scale(eps, eta), "half_width": None, "states": states, "eta": eta}
    states = 2 * w + 1
    eta = pfl_float_slack(G, states)
    return {"stages": 2, "epsilon_band": eps1, "epsilon_em": eps2, "band_scale": s1,
            "em_scale": _em_scale(eps2, eta), "half_width": w, "states": states, "eta": eta}


def _em_scale(eps_em: Fraction, eta: Fraction) -> float:
    """The exponential mechanism's scale at ``eps_em - 2 eta`` (the float slack taken off; module docstring)."""
    run = eps_em - 2 * eta
    if run <= 0:
        raise ValueError(f"epsilon {float(eps_em)} is too small for pfl at this G (float slack {float(eta):.3g})")
    return NoiseSource.exponential_mechanism_scale(run, 1)


def _check_sizes(sizes_desc, size_bound) -> np.ndarray:
    x = np.asarray(sizes_desc)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"sizes_desc must be a non-empty 1-D array, got shape {x.shape}")
    if x.dtype.kind not in "iu":
        raise TypeError(f"sizes_desc must hold integers, got dtype {x.dtype}")
    x = x.astype(np.int64)
    if x.min() < 0:
        raise ValueError("sizes_desc must be non-negative")
    if np.any(np.diff(x) > 0):
        raise ValueError("sizes_desc must be sorted in non-increasing order")
    if size_bound is not None:
        if isinstance(size_bound, bool) or int(size_bound) != size_bound or size_bound < 0:
            raise ValueError(f"size_bound must be a non-negative int or None, got {size_bound!r}")
        if x[0] > size_bound:
            raise ValueError("a group size exceeds the public size_bound")
    return x


def _band(center: np.ndarray, half_width: int, size_bound: int | None):
    """``lo, hi``: non-increasing int64 bounds ``max(0, c - W) .. min(K, c + W)`` for a non-increasing ``c``."""
    lo = np.maximum(center - half_width, 0)
    hi = center + half_width
    if size_bound is not None:
        hi = np.minimum(hi, size_bound)
        lo = np.minimum(lo, size_bound)
    return lo.astype(np.int64), hi.astype(np.int64)


def _prepare(x, lo, hi, scale: float):
    """Sizes clipped into the band (same distribution, module docstring), the weight table, the row width."""
    xc = np.clip(x, lo, hi).astype(np.int64)
    width = int((hi - lo).max()) + 1
    return xc, weight_table(scale, width), width


def _chain(x, lo, hi, scale: float, noise: NoiseSource) -> np.ndarray:
    """Draw ``y`` from the exact chain (module docstring) over the non-increasing vectors in the band.

    Backward pass: messages from the last position to the first, keeping one row per block of
    :data:`_BLOCK` positions; forward pass: per block, the messages are recomputed from the next checkpoint
    (the same deterministic computation, so the same rows) and the block is drawn exactly by
    :meth:`NoiseSource.nonincreasing_chain`.
    """
    G = x.size
    xc, table, width = _prepare(x, lo, hi, scale)
    ckpt = {}
    nxt_m, nxt_e = np.zeros(width), np.zeros(width, dtype=np.int64)
    for start in range(((G - 1) // _BLOCK) * _BLOCK, -1, -_BLOCK):
        stop = min(start + _BLOCK, G)
        out_m, out_e = np.empty((stop - start, width)), np.empty((stop - start, width), dtype=np.int64)
        messages_block(xc, lo, hi, *table, start, stop, G, nxt_m, nxt_e, out_m, out_e)
        nxt_m, nxt_e = out_m[0].copy(), out_e[0].copy()
        ckpt[start] = (nxt_m, nxt_e)
    y = np.empty(G, dtype=np.int64)
    prev = None
    for start in range(0, G, _BLOCK):
        stop = min(start + _BLOCK, G)
        nm, ne = ckpt.get(stop, (np.zeros(width), np.zeros(width, dtype=np.int64)))
        out_m, out_e = np.empty((stop - start, width)), np.empty((stop - start, width), dtype=np.int64)
        messages_block(xc, lo, hi, *table, start, stop, G, nm, ne, out_m, out_e)
        y[start:stop] = noise.nonincreasing_chain(out_m, out_e, lo[start:stop], hi[start:stop], prev)
        prev = int(y[stop - 1])
    return y


def pfl_output_probability(x, lo, hi, scale: float, y) -> Fraction:
    """The exact probability (a rational) that the chain draws ``y`` given the band (for audits).

    ``Q_x(y) = prod_i B_i(y_i) / sum_{lo_i <= u <= min(hi_i, y_{i-1})} B_i(u)`` with the stored dyadic messages
    (:mod:`.pfl_messages`), i.e. the distribution :meth:`NoiseSource.nonincreasing_chain` samples exactly;
    ``0`` outside the band or for a vector that is not non-increasing.
    """
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if np.any(y < lo) or np.any(y > hi) or np.any(np.diff(y) > 0):
        return Fraction(0)
    G = x.size
    xc, table, width = _prepare(x, lo, hi, scale)
    out_m, out_e = np.empty((G, width)), np.empty((G, width), dtype=np.int64)
    messages_block(xc, lo, hi, *table, 0, G, G, np.zeros(width), np.zeros(width, dtype=np.int64), out_m, out_e)
    p = Fraction(1)
    prev = None
    for i in range(G):
        top = int(hi[i]) if prev is None else min(int(hi[i]), prev)
        row = [Fraction(float(out_m[i, k])) * Fraction(2) ** int(out_e[i, k]) for k in range(top - int(lo[i]) + 1)]
        p *= row[int(y[i] - lo[i])] / sum(row)
        prev = int(y[i])
    return p


def pfl_release(sizes_desc: np.ndarray, epsilon, noise: NoiseSource, size_bound: int | None) -> np.ndarray:
    """Release an unattributed histogram with PFL, the exponential mechanism over sorted vectors [BDB16].

    Parameters
    ----------
    sizes_desc : numpy.ndarray of int
        The true group sizes sorted non-increasing, length ``G >= 1`` (``G``
        public).  Non-negative integers, each ``<= size_bound`` if given.
    epsilon : float, int, str or Fraction
        Total privacy parameter ``> 0`` (charged in full: :func:`pfl_cost`).
    noise : NoiseSource
        The only source of randomness.
    size_bound : int or None
        Public bound ``K`` on a group's size; outputs never exceed it.
        ``None``: no bound (the band's upper end comes from the noisy centre).

    Returns
    -------
    numpy.ndarray
        ``int64``, length ``G``, non-increasing, ``>= 0`` (and ``<= K``).

    Raises
    ------
    ValueError, TypeError
        Empty / non-integer / negative / unsorted input, a size above
        ``size_bound``, or ``epsilon <= 0``.

    Notes
    -----
    Mechanism (BDB16 Section IV, the exponential mechanism with the score
    ``-||f - f'||_1``; McSherry-Talwar convention ``exp(eps u / (2 Delta u))``
    with ``Delta u = 1``): see the module docstring.  Plan (:func:`pfl_plan`,
    public parameters only):

    1. One stage if ``K`` is given and ``K <= 2 W``: output ``y`` with
       ``P(y) ∝ exp(-epsilon ||x - y||_1 / 2)`` over all non-increasing ``y``
       in ``{0..K}^G``.
    2. Otherwise ``epsilon_1 = epsilon / 4``: ``c = sort_desc(clip(x + Z, 0,
       K))`` with ``Z`` discrete Laplace of scale ``1 / epsilon_1`` (L1
       sensitivity 1: ``epsilon_1``-DP); band ``[max(0, c_i - W), min(K, c_i +
       W)]``; then ``epsilon_2 = 3 epsilon / 4`` on the exponential mechanism
       over the non-increasing ``y`` inside the band.

    Neighbour relation: one item added to or removed from one group, so one
    entry of the sorted vector changes by one; ``G`` fixed and public; the
    total ``N`` is not public and changes by one (BDB16's relation too; their
    output partitions also have a free total).  Privacy: pure
    ``epsilon``-DP (both stages, sequential composition); ``notion = "dp"``.

    Sampling: the normalising sums are a backward dynamic program over
    positions (each step a prefix sum over the band's states, dyadic
    rationals with their own exponents: :mod:`.pfl_messages`, compiled), and
    ``y`` is drawn forward from the chain's rational conditionals exactly
    (:meth:`NoiseSource.nonincreasing_chain`); messages are kept at
    checkpoints every 1024 positions and recomputed per block (memory
    ``O((G / 1024 + 1024) W)``).  Time ``O(G W)`` with ``W ~ 6 / epsilon_1 +
    16 / epsilon_2``.  The sampler is exact (DESIGN rule 3): every output
    has exactly the chain's probability, however small, so the charge has
    ``delta = 0``; the floating-point messages only move the chain within a
    public factor ``e^{+-eta}`` of the ideal mechanism, paid for by running it
    at ``epsilon_2 - 2 eta`` (module docstring).
    """
    x = _check_sizes(sizes_desc, size_bound)
    plan = pfl_plan(epsilon, x.size, size_bound)
    G = x.size
    if plan["stages"] == 1:
        lo = np.zeros(G, dtype=np.int64)
        hi = np.full(G, int(size_bound), dtype=np.int64)
    else:
        noisy = noise.discrete_laplace(x, plan["band_scale"])
        center = np.sort(np.maximum(noisy, 0))[::-1]
        if size_bound is not None:
            center = np.minimum(center, size_bound)
        lo, hi = _band(center, plan["half_width"], size_bound)
    return _chain(x, lo, hi, plan["em_scale"], noise)
