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

Privacy notion: pure ``epsilon``-DP (``notion = "dp"``, ``delta = 0``) under
add/remove one item of one group; the noisy band centre is never returned.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcore.budget import PrivacyCost, exact
from dpcore.noise import NoiseSource, conservative_scale


__all__ = ["pfl_release", "pfl_cost", "pfl_plan", "BAND_FRACTION", "BAND_TAIL_1", "BAND_TAIL_2"]

#: Fraction of epsilon spent on the noisy band centre when the band is needed.
BAND_FRACTION = Fraction(1, 4)
#: Half-width of the band: ``W = ceil(BAND_TAIL_1 * s_1 + BAND_TAIL_2 * s_2)``
#: with ``s_1 = 1 / epsilon_1`` (centre noise scale) and ``s_2 = 2 / epsilon_2``
#: (the exponential mechanism's per-entry scale).
BAND_TAIL_1 = 6
BAND_TAIL_2 = 8
#: Positions per checkpoint of the backward messages (memory O((G / BLOCK + BLOCK) W)).
_BLOCK = 1024


def pfl_cost(epsilon) -> PrivacyCost:
    """The privacy cost charged by :func:`pfl_release`.

    Parameters
    ----------
    epsilon : float, int, str or Fraction
        The total ``epsilon > 0`` given to :func:`pfl_release`.

    Returns
    -------
    PrivacyCost
        ``(epsilon, 0)``: pure ``epsilon``-DP under add/remove one item of one
        group (one entry of the sorted vector changes by one; ``G`` public).
        Both stages (the noisy band centre, ``epsilon_1``, and the exponential
        mechanism, ``epsilon_2``) sum to ``epsilon`` by sequential composition.
    """
    eps = exact(epsilon)
    if eps <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    return PrivacyCost(eps, 0)


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
        centre, or ``None``), ``em_scale`` (``s_2 = 2 / epsilon_em`` rounded up:
        weights ``exp(-||x - y||_1 / s_2)``) and ``half_width`` ``W`` (or ``None``).
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
    eps1 = eps * BAND_FRACTION
    eps2 = eps - eps1
    s1 = conservative_scale(1, eps1)
    s2 = NoiseSource.exponential_mechanism_scale(eps2, 1)
    w = int(math.ceil(BAND_TAIL_1 * s1 + BAND_TAIL_2 * s2))
    if size_bound is not None and size_bound <= 2 * w:
        return {"stages": 1, "epsilon_band": Fraction(0), "epsilon_em": eps, "band_scale": None,
                "em_scale": NoiseSource.exponential_mechanism_scale(eps, 1), "half_width": None}
    return {"stages": 2, "epsilon_band": eps1, "epsilon_em": eps2, "band_scale": s1,
            "em_scale": s2, "half_width": w}


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


def _messages(x, lo, hi, inv_scale, start, stop, nxt):
    """Backward log-messages ``log B_i`` for ``i`` in ``[start, stop)``, given ``nxt = log B_stop`` (or None).

    ``B_i(v) = w_i(v) * sum_{u <= v, u in band_{i+1}} B_{i+1}(u)`` with
    ``w_i(v) = exp(-|x_i - v| / s)``, so ``B_i(v)`` is the total weight of the
    non-increasing completions ``y_i = v, y_{i+1}, ..., y_G`` inside the band.
    Returns a list indexed ``i - start``; entry ``k`` of ``log B_i`` is state
    ``lo_i + k``.
    """
    out = [None] * (stop - start)
    # A completion weight below e^-745 of the step's largest becomes log 0 = -inf: the
    # sampler (53-bit uniforms) cannot draw such a state with its exact probability anyway.
    with np.errstate(divide="ignore"):
        _messages_loop(x, lo, hi, inv_scale, start, stop, nxt, out)
    return out


def _messages_loop(x, lo, hi, inv_scale, start, stop, nxt, out):
    for i in range(stop - 1, start - 1, -1):
        v = np.arange(lo[i], hi[i] + 1, dtype=np.int64)
        lw = -np.abs(v - x[i]) * inv_scale
        if nxt is not None:
            idx = np.minimum(v - lo[i + 1], nxt.size - 1)
            m = nxt.max()
            lw = lw + (m + np.log(np.cumsum(np.exp(nxt - m))[idx]))
        out[i - start] = lw
        nxt = lw


def _stage2(x, lo, hi, inv_scale, uniforms) -> np.ndarray:
    """Sample ``y`` with ``P(y) ∝ exp(-||x - y||_1 / s)`` over non-increasing ``y`` in the band."""
    G = x.size
    # Backward pass: keep log B at each block start only.
    ckpt = {}
    nxt = None
    for start in range(((G - 1) // _BLOCK) * _BLOCK, -1, -_BLOCK):
        stop = min(start + _BLOCK, G)
        msgs = _messages(x, lo, hi, inv_scale, start, stop, nxt)
        nxt = msgs[0]
        ckpt[start] = nxt
    y = np.empty(G, dtype=np.int64)
    prev = None
    for start in range(0, G, _BLOCK):
        stop = min(start + _BLOCK, G)
        msgs = _messages(x, lo, hi, inv_scale, start, stop, ckpt.get(stop))
        for i in range(start, stop):
            lb = msgs[i - start]
            if prev is not None:
                lb = lb[: min(hi[i], prev) - lo[i] + 1]
            c = np.cumsum(np.exp(lb - lb.max()))
            k = int(np.searchsorted(c, uniforms[i] * c[-1], side="right"))
            prev = int(lo[i]) + min(k, c.size - 1)
            y[i] = prev
    return y


def _stage2_log_prob(x, lo, hi, inv_scale, y) -> float:
    """Exact log-probability that :func:`_stage2` returns ``y`` (for audits; ``-inf`` outside the band).

    The product of the conditionals the sampler draws from:
    ``P(y_1) = B_1(y_1) / sum B_1`` and
    ``P(y_i | y_{i-1}) = B_i(y_i) / sum_{u <= y_{i-1}} B_i(u)``.
    """
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if np.any(y < lo) or np.any(y > hi) or np.any(np.diff(y) > 0):
        return -math.inf
    msgs = _messages(x, lo, hi, inv_scale, 0, x.size, None)
    total = 0.0
    prev = None
    for i, lb in enumerate(msgs):
        if prev is not None:
            lb = lb[: min(hi[i], prev) - lo[i] + 1]
        m = lb.max()
        total += lb[y[i] - lo[i]] - (m + math.log(np.exp(lb - m).sum()))
        prev = int(y[i])
    return total


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
    positions (each step a cumulative sum over the band's states, log-space),
    ``y`` is drawn forward from the exact conditionals by inverse CDF on
    :meth:`NoiseSource.uniform01` (53-bit) uniforms; messages are kept at
    checkpoints every 1024 positions and recomputed per block (memory
    ``O((G / 1024 + 1024) W)``).  Time ``O(G W)`` with ``W ~ 6 / epsilon_1 +
    16 / epsilon_2``.  Caveat: the conditionals are computed in floating
    point and drawn with 53-bit uniforms, so a conditional probability below
    about ``2**-53`` of its step's total is not honoured exactly, and a state
    whose completion weight is below ``e^-745`` of the largest gets
    probability 0 (DESIGN rule 3 asks for exact samplers; this one is exact
    only up to that rounding, so the pure guarantee holds up to events of
    probability about ``G * 2**-53``).
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
    uniforms = np.asarray(noise.uniform01(size=G), dtype=np.float64)
    return _stage2(x, lo, hi, 1.0 / plan["em_scale"], uniforms)
