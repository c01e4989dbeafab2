"""Lin & Kifer's hidden Markov model for unattributed histograms (SIGMOD 2013): pure post-processing.

Seed 004 ("Algorithms Designed for Unattributed Histogram") lists
HMM.forward-backward and HMM.viterbi [LK13]: the unattributed histogram
``H_g`` (group sizes sorted non-increasing) is read as a hidden Markov model
whose *time* is the position ``i = 1..G`` in the sorted order and whose hidden
*state* is the size ``s_i`` of the group at that position; the observation at
time ``i`` is the noisy size ``z_i = s_i + Z_i`` released by a noise-addition
mechanism.  Inference on that model turns the noisy vector into a consistent
(non-increasing, non-negative, integer) estimate.

Model used here (stated, because the choice is ours where the stored text of
LK13 could not be consulted in full):

* States: sizes ``0..K`` (``K`` the public size bound, or, when it is not
  given, ``max(z) + W`` with ``W`` below: a function of the noisy vector only).
* Prior (transition): the order is non-increasing, so a transition from size
  ``u`` at time ``i`` goes only to sizes ``v <= u`` at time ``i + 1``.  Every
  allowed transition has the same unnormalised weight 1 and the initial
  weight is 1 for every state, so the prior is **uniform over all
  non-increasing paths** in ``{0..K}^G`` (the normalising constants do not
  change the posterior; the transition probabilities of this prior are
  ``P(v | u) ∝ 1[v <= u] * #(completions from v)``).
* Emission: the discrete Laplace pmf of the release,
  ``P(z_i | s_i) ∝ exp(-|z_i - s_i| / scale)``.

Estimators: ``"forward_backward"`` computes the exact posterior marginals by
the forward-backward algorithm and returns the posterior means rounded to the
nearest integer (the means are already non-increasing because every path in
the prior's support is; a cumulative minimum guards against float rounding);
``"viterbi"`` returns the MAP path (maximum posterior probability, i.e. the
non-increasing path minimising ``sum |z_i - s_i|``, ties to the smaller size
at each back-tracking step).

Efficiency: every time step is ``O(band)`` numpy work in log-space: the sums
over ``u >= v`` (forward), ``v <= u`` (backward) and the maxima over
``u >= v`` (Viterbi) are prefix sums / prefix maxima over the states.  The
state space at time ``i`` is restricted to the band
``[max(0, min_{j <= i} z_j - W), min(K, max_{j >= i} z_j + W)]`` with
``W = ceil(HMM_TAIL * scale)``, a public function of the noisy vector (so
post-processing, no privacy cost).  The band bounds are non-increasing, so
every non-increasing path inside it is allowed; the restriction drops the
paths that leave the band, i.e. states at least ``W`` (25 noise scales)
above every later observation or below every earlier one.  Each such state
pays an emission factor of at most ``e^{-25}`` against the band edge; the
result is an approximation of the unrestricted posterior, checked against
the full state space in the tests.  Forward messages are kept only at
checkpoints every 1024 positions and recomputed per block (memory
``O((G / 1024 + 1024) * band)``).

Privacy: none consumed; the input is an already-released noisy vector, so
the output inherits its guarantee (post-processing).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["hmm_estimate", "hmm_band", "log_cumsum_exp", "HMM_TAIL", "HOWS"]

#: Band half-width in noise scales (see the module docstring).
HMM_TAIL = 25
#: The two estimators.
HOWS = ("forward_backward", "viterbi")
_BLOCK = 1024


def _check(noisy_desc, scale, size_bound, how):
    z = np.asarray(noisy_desc)
    if z.ndim != 1 or z.size == 0:
        raise ValueError(f"noisy_desc must be a non-empty 1-D array, got shape {z.shape}")
    if z.dtype.kind not in "iu":
        raise TypeError(f"noisy_desc must hold integers (discrete Laplace releases), got dtype {z.dtype}")
    try:
        s = float(scale)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}") from exc
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if size_bound is not None and (isinstance(size_bound, bool) or int(size_bound) != size_bound or size_bound < 0):
        raise ValueError(f"size_bound must be a non-negative int or None, got {size_bound!r}")
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    return z.astype(np.int64), s


def hmm_band(z: np.ndarray, scale: float, size_bound: int | None, tail: float = HMM_TAIL):
    """The state band ``lo, hi`` (int64, non-increasing, ``lo <= hi``) and ``K``, from the noisy vector only.

    Parameters
    ----------
    z : numpy.ndarray of int64
        The noisy vector.
    scale : float
        Its discrete Laplace scale.
    size_bound : int or None
        Public ``K``; ``None``: ``K = max(0, max(z)) + W``.
    tail : float
        ``W = ceil(tail * scale)``.

    Returns
    -------
    tuple
        ``(lo, hi, K)``.
    """
    w = int(math.ceil(tail * scale))
    K = int(size_bound) if size_bound is not None else int(max(0, z.max())) + w
    pmin = np.minimum.accumulate(z)
    smax = np.maximum.accumulate(z[::-1])[::-1]
    lo = np.clip(pmin - w, 0, K)
    hi = np.clip(smax + w, 0, K)
    hi = np.maximum(hi, lo)
    return lo.astype(np.int64), hi.astype(np.int64), K


def log_cumsum_exp(t: np.ndarray) -> np.ndarray:
    """``log(cumsum(exp(t)))`` without underflow.

    A shifted linear-space cumulative sum when its smallest partial sum is a
    normal float (the common case, about 4x faster); otherwise
    ``numpy.logaddexp.accumulate``, so a partial sum below ``e^-745`` of the
    largest term is kept in log-space instead of becoming ``log 0 = -inf``.
    """
    m = t.max()
    cs = np.cumsum(np.exp(t - m))
    if cs[0] > 1e-290:
        return m + np.log(cs)
    return np.logaddexp.accumulate(t)


def _log_emission(z_i, lo_i, hi_i, inv_scale):
    v = np.arange(lo_i, hi_i + 1, dtype=np.int64)
    return -np.abs(v - z_i) * inv_scale


def _forward(z, lo, hi, inv_scale, start, stop, prev, viterbi):
    """Forward log-messages for times ``[start, stop)`` given the message at ``start - 1`` (or None).

    Forward-backward: ``log alpha_i(v) = le_i(v) + log sum_{u >= v} alpha_{i-1}(u)``;
    Viterbi: ``log delta_i(v) = le_i(v) + max_{u >= v} delta_{i-1}(u)``.
    """
    out = []
    for i in range(start, stop):
        le = _log_emission(z[i], lo[i], hi[i], inv_scale)
        if prev is not None:
            idx = np.maximum(np.arange(lo[i], hi[i] + 1, dtype=np.int64) - lo[i - 1], 0)
            if viterbi:
                acc = np.maximum.accumulate(prev[::-1])[::-1]
                le = le + acc[idx]
            else:
                le = le + log_cumsum_exp(prev[::-1])[::-1][idx]
        out.append(le)
        prev = le
    return out


def _checkpoints(z, lo, hi, inv_scale, viterbi):
    """Forward messages at the end of every block (the ``prev`` for the next block)."""
    G = z.size
    ck = {0: None}
    prev = None
    for start in range(0, G, _BLOCK):
        stop = min(start + _BLOCK, G)
        msgs = _forward(z, lo, hi, inv_scale, start, stop, prev, viterbi)
        prev = msgs[-1]
        ck[stop] = prev
    return ck


def _posterior_mean(z, lo, hi, inv_scale) -> np.ndarray:
    """Exact posterior means ``E[s_i | z]`` under the banded model (forward-backward)."""
    G = z.size
    ck = _checkpoints(z, lo, hi, inv_scale, viterbi=False)
    mean = np.empty(G, dtype=np.float64)
    beta_next = None  # log beta_{i+1} on band_{i+1}
    for start in range(((G - 1) // _BLOCK) * _BLOCK, -1, -_BLOCK):
        stop = min(start + _BLOCK, G)
        alphas = _forward(z, lo, hi, inv_scale, start, stop, ck[start], viterbi=False)
        for i in range(stop - 1, start - 1, -1):
            if i == G - 1:
                lb = np.zeros(hi[i] - lo[i] + 1)
            else:
                t = _log_emission(z[i + 1], lo[i + 1], hi[i + 1], inv_scale) + beta_next
                idx = np.minimum(np.arange(lo[i], hi[i] + 1, dtype=np.int64) - lo[i + 1], t.size - 1)
                lb = log_cumsum_exp(t)[idx]
            lp = alphas[i - start] + lb
            p = np.exp(lp - lp.max())
            mean[i] = lo[i] + float(np.dot(p, np.arange(p.size))) / float(p.sum())
            beta_next = lb
    return mean


def _viterbi_path(z, lo, hi, inv_scale) -> np.ndarray:
    """A MAP path (maximum of ``-sum |z_i - s_i|`` over non-increasing paths in the band)."""
    G = z.size
    ck = _checkpoints(z, lo, hi, inv_scale, viterbi=True)
    path = np.empty(G, dtype=np.int64)
    nxt = None
    for start in range(((G - 1) // _BLOCK) * _BLOCK, -1, -_BLOCK):
        stop = min(start + _BLOCK, G)
        deltas = _forward(z, lo, hi, inv_scale, start, stop, ck[start], viterbi=True)
        for i in range(stop - 1, start - 1, -1):
            d = deltas[i - start]
            k0 = 0 if nxt is None else max(int(nxt) - int(lo[i]), 0)
            k = k0 + int(np.argmax(d[k0:]))
            nxt = int(lo[i]) + k
            path[i] = nxt
    return path


def hmm_estimate(noisy_desc: np.ndarray, scale: float, size_bound: int | None, how: str) -> np.ndarray:
    """Estimate the sorted sizes from a noisy sorted vector with Lin & Kifer's HMM [LK13].

    Parameters
    ----------
    noisy_desc : numpy.ndarray of int
        ``x + Z``: the true sizes sorted non-increasing plus independent
        discrete Laplace noise, ``P(Z = z) ∝ exp(-|z| / scale)``; length ``G``.
        Need not be sorted and may hold negative values.
    scale : float
        The noise scale ``> 0`` (public: it is the mechanism's parameter).
    size_bound : int or None
        Public bound ``K`` on a size (the states are ``0..K``); ``None``:
        ``K = max(0, max(noisy)) + ceil(25 scale)``, a function of the noisy
        vector only.
    how : {"forward_backward", "viterbi"}
        Posterior mean per position (rounded) or MAP path.

    Returns
    -------
    numpy.ndarray
        ``int64``, length ``G``, non-increasing, in ``[0, K]``.

    Raises
    ------
    ValueError, TypeError
        Empty / non-integer input, ``scale <= 0``, a bad ``size_bound`` or an
        unknown ``how``.

    Notes
    -----
    LK13's unattributed-histogram HMM (time = position in the sorted order,
    state = that group's size; transitions only to smaller-or-equal sizes;
    emission = the noise pmf), with the prior uniform over non-increasing
    paths and the state band of the module docstring.
    ``"forward_backward"``: ``round(E[s_i | z])`` (half up), then a
    cumulative minimum and clipping to ``[0, K]`` (no-ops up to float
    rounding).  ``"viterbi"``: ``argmax_s P(s | z)``.

    Privacy: post-processing of the noisy vector; no privacy cost, and the
    neighbour relation and guarantee are those of the release of
    ``noisy_desc`` (for the product: add/remove one item of one group,
    ``(1 / scale)``-DP for the discrete Laplace on the sorted vector).

    Time ``O(G * band)`` with ``band ~ 50 scale + noise range``; memory
    ``O((G / 1024 + 1024) * band)``.
    """
    z, s = _check(noisy_desc, scale, size_bound, how)
    lo, hi, K = hmm_band(z, s, size_bound)
    inv = 1.0 / s
    if how == "viterbi":
        est = _viterbi_path(z, lo, hi, inv)
    else:
        est = np.floor(_posterior_mean(z, lo, hi, inv) + 0.5).astype(np.int64)
    est = np.minimum.accumulate(np.clip(est, 0, K))
    return est.astype(np.int64)
