"""The beta-smooth upper bound ``S(X)`` on the local sensitivity of ``q_count`` (seed 002, Sections 4.2-4.3).

Theorems 5-6 evaluated by Algorithms 1-2 with Propositions 1-2; the noise
that uses it is in :mod:`dpcore.mechanisms.outlier_count.mechanism`.

Let ``deg(y)`` be the degree (eq. 19), ``V(j)`` the records of degree ``j``
(eq. 20) and, for ``t >= 0``,

    P_hi(t) = union_{i=-t..t} V(k + i),   P_lo(t) = union_{i=-t..t} V(k - 1 + i)

(the sets ``P`` of eqs. 45-46).  ``E(P) = max_x |P ∩ B(x, r)|`` is the largest
subset of ``P`` enclosable in a ball of radius ``r`` (Algorithm 1,
:mod:`dpcore.mechanisms.outlier_count.enclosing`).  Then

    U(t) = min(G, max(f_t(P_hi(t)), f_t(P_lo(t))) + t + 1),
    S(X) = max_{t >= 0} exp(-t beta) U(t),                         (eq. 29/31)

with the public ``G = k K_d^up + 1`` (Theorem 4 without its ``min(N, .)``) and

    f_t(P) = min( max(E(P), |P| - L),  K_d^up (D_t + 1) ),

``L = size_limit`` and ``D_t = k + t`` for ``P_hi`` (``k - 1 + t`` for ``P_lo``).

*Why it is an upper bound on LS (eq. 6).*  Theorem 5 (eq. 23) gives
``LS <= max(max_x |CV(X, x, k, r)|, max_x |CV(X, x, k-1, r)|) + 1`` and
``|CV(X, x, k, r)| = |B(x, r) ∩ V(k)| <= E(P_hi(0))`` (resp. ``P_lo(0)``).
``f_t >= E``: ``max(E, .) >= E`` trivially, and every subset ``C`` of ``P``
inside a ball of radius ``r`` has ``|C| <= K_d (D + 1)`` when all its points
have degree ``<= D`` (greedily pick a point, discard it and its ``<= D``
neighbours; the picked points lie in one ball of radius ``r`` and are pairwise
more than ``r`` apart, so they subtend angles ``> 60 deg`` at its centre and
there are at most ``K_d`` of them).  ``LS <= G`` is Theorem 4 (its proof: the
removal side and the insertion side flip at most ``k K_d`` records each, with
opposite signs, plus the moved record itself).  For add/remove neighbours
``LS <= max(1, E(V(k)), E(V(k-1))) <= U(0)`` and ``<= G`` ("Sensitivity under
add/remove" in :mod:`dpcore.mechanisms.outlier_count.global_sensitivity`), so ``S(X) >= U(0)`` dominates ``LS`` for all three kinds.

*Why it is beta-smooth (eq. 7).*  If ``X' ~ X`` replaces, removes or adds
one record ``z``, every other record's degree changes by at most one, so
``P(t)(X) \\ {z} ⊆ P(t+1)(X')`` (the proof of Lemma 1; for an addition even
``P(t)(X) ⊆ P(t+1)(X')``).  ``f_t`` is
(i) monotone under set inclusion, (ii) drops by at most 1 when one point is
deleted (true of ``E``, of ``|P| - L`` and of a constant; preserved by max and
min), and (iii) ``f_t <= f_{t+1}`` pointwise.  Hence
``f_t(P(t)(X)) <= f_{t+1}(P(t+1)(X')) + 1``, i.e. ``U(t)(X) <= U(t+1)(X')``
(the cap ``G`` is the same constant on both sides: with Theorem 4's
``min(N, .)`` it is not -- a removal lowers it, three coincident records with
``k = 2`` give ``U(0) = 3`` but ``U(t) <= 2`` after a removal -- which is why
``N`` is not used), and ``S(X) <= exp(beta) S(X')`` (the argument behind
Theorem 6; Nissim et al. 2007, Section 3).  The Nissim-Raskhodnikova-Smith
proof (Theorem 2) needs only ``S >= LS`` and ``S(X) <= e^beta S(X')`` on the
neighbour relation in question, so the release is (epsilon, delta)-DP for the
union relation.

*The relaxation above the size limit (Section 4.3, Proposition 1).*
Algorithm 1 is exponential in ``|P|``.  For ``|P| <= L`` the term
``|P| - L <= 0`` is void and ``f = E`` exactly (Algorithm 1 with pruning).
For ``|P| > L`` the floor ``|P| - L`` lets the exact search be skipped whenever
a cheap certificate shows ``E(P) <= |P| - L`` (the largest ``2r``-ball around
a point of ``P`` holds at most ``|P| - L`` points; every set enclosable in
radius ``r`` lies in such a ball); otherwise the search only looks for sets
larger than the floor.  It is Proposition 1's ``|P|``-based bound shifted
down by ``L``.  **Switching on the raw size is not valid**: "``E(P)`` if
``|P| <= L`` else ``|P|``" breaks property (ii) -- with ``|P| = L + 1`` spread
points, deleting one drops the value from ``L + 1`` to ``E``, and the
smoothness inequality fails -- so the switch is built into ``f`` itself.

*Algorithm 2 / Proposition 2.*  ``S`` is evaluated for ``t = 0, 1, ...``;
the tail ``max_{t' >= t} e^{-t' beta} U(t')`` is bounded with Proposition 1
(``f_{t'}(P(t')) <= g(P(t0)) + |P(t') \\ P(t0)|`` from the last evaluated
``t0``, and ``<= min(|P(t')|, K_d (D + 1))``), and evaluation stops once the
bound is ``<= S_max`` (Proposition 2).  Terms whose own bound is
``<= S_max`` are skipped.  The value returned is therefore *exactly*
``S(X)`` defined above (never a truncation), which is what the smoothness
proof needs.  Since ``U(0) >= 1``, terms with ``e^{-t beta} G <= 1`` never
matter, so at most ``ceil(ln G / beta)`` steps are needed and degrees are only
counted up to ``k + that`` (saturating counts).

*Memory (issue 21).*  Every count runs on the distinct points weighted by
their multiplicities (:class:`dpcore.mechanisms.neighbors.PointMultiset`; an array of
records is aggregated first, the pipeline aggregates in the warehouse): a
record's degree is the number of copies of the points within ``r`` of its
point minus one, the same for every copy; the histograms of degrees and the
sizes ``|P|`` add multiplicities; only the records of the points whose degree
is near ``k`` are expanded, for Algorithm 1, and only when ``|P|`` is below
the public bound ``K_d (D_t + 1) + L``.  Memory and time grow with the
distinct points, not with the records, and every quantity equals the
row-by-row computation (``tests/test_neighbours_bounded.py`` keeps that
algorithm as its oracle).

*Cost (the scale path).*  Degrees are counted once, saturated at ``k + 1``
(exact for every record of degree ``<= k + 1``: all that ``t = 0, 1`` and
``q_count`` need); a later ``t`` that needs more re-counts only the saturated
records, with a larger cap.  :meth:`~dpcore.mechanisms.outlier_count.OutlierCountMechanism.release` takes both
``S(X)`` and ``q_count`` (``#{deg < k}``) from that one pass.  Counting uses
:func:`dpcore.mechanisms.neighbors.ball_counts`, which in ``d >= 8`` switches from the
KD-tree to blocked matrix products with an exact re-evaluation of pairs
within rounding of ``r``.  None of this changes a released quantity: the
degrees below the cap are exact either way, every ``U(t)`` is computed from
exact degrees, and the skipped terms are skipped only on valid upper bounds,
so ``S(X)``, ``q_count`` and the noise are exactly those of the plain
definition (tested against the KD-tree path with every term evaluated).

Every function here returns exact, data-dependent statistics that must stay
in the warehouse (DESIGN.md rule 6).
"""
from __future__ import annotations

import math

import numpy as np

from dpcore.mechanisms.neighbors import PointMultiset, ball_counts
from ..kissing import kissing_upper
from .enclosing import relaxed_enclosable_bound
from .query import _point_degrees

__all__ = ["smooth_bound_terms", "local_bound", "saturated_degrees", "capped_enclosable"]


def saturated_degrees(ms: PointMultiset, r: float, need: int,
                      prev: tuple[np.ndarray, int] | None = None) -> tuple[np.ndarray, int]:
    """Degrees of each distinct point's records, exact up to at least ``need`` (saturating above).

    Parameters
    ----------
    ms : PointMultiset
        Distinct points and multiplicities (``N = ms.n`` records).
    r : float
        Radius ``> 0`` (closed ball).
    need : int
    prev : (deg, exact_max) or None
        Degrees already counted; only the points whose degree was
        saturated (``> exact_max``) are counted again.

    Returns
    -------
    (numpy.ndarray, int)
        ``(deg, exact_max)``, one degree per distinct point: ``deg[i]`` is
        exact when ``<= exact_max``; a larger stored value means "at least
        that".
    """
    N = ms.n
    cap, exact_max = (None, N - 1) if need >= N - 2 else (need + 2, need)  # +1: the record itself
    if prev is None:
        return ball_counts(ms.points, ms.points, r, cap=cap, weights=ms.weights) - 1, exact_max
    deg, old_max = prev
    deg = deg.copy()
    redo = np.flatnonzero(deg > old_max)
    if redo.size:
        deg[redo] = ball_counts(ms.points, ms.points[redo], r, cap=cap, weights=ms.weights) - 1
    return deg, exact_max


def capped_enclosable(ms: PointMultiset, idx: np.ndarray, Kcap: int, r, size_limit: int,
                      node_limit: int) -> tuple[int, int]:
    """(f_t(P), g_L(P)) with f_t = min(g_L, Kcap) for the records ``P`` of the points ``idx``; g_L only as needed.

    ``|P|`` is the sum of the multiplicities; the records are expanded
    (each point repeated by its multiplicity) only when Algorithm 1 runs,
    i.e. when ``|P| < Kcap + L``, a bound from public parameters.
    """
    m = int(ms.weights[idx].sum())
    L = int(size_limit)
    if m == 0:
        return 0, 0
    if m - L >= Kcap:
        return Kcap, m  # g_L >= m - L >= Kcap; m is an upper bound on g_L for the anchors
    g = relaxed_enclosable_bound(ms.expand(idx), r, L, node_limit=int(node_limit))
    return min(g, Kcap), g


def smooth_bound_terms(ms: PointMultiset, k: int, r, beta: float, G: int, size_limit: int, node_limit: int,
                       full: bool = False) -> tuple[float, int, dict[int, int], int]:
    """Algorithm 2 with Propositions 1-2: ``S(X)`` and ``q_count`` from one degree pass.

    Parameters
    ----------
    ms : PointMultiset
        The records in subspace coordinates as distinct points with
        multiplicities, ``ms.n >= 1`` (the same result as the rows: degrees,
        histograms and set sizes weight each point by its multiplicity; the
        records of the few points whose degree is near ``k`` are expanded for
        Algorithm 1).
    k : int
        Neighbour threshold ``>= 1``.
    r : float
        Radius ``> 0``.
    beta : float
        The smoothness parameter used (already lowered for floating point:
        :attr:`~dpcore.mechanisms.outlier_count.OutlierCountMechanism.beta`).
    G : int
        The public cap ``k K_d^up + 1``
        (:func:`~dpcore.mechanisms.outlier_count.global_sensitivity.public_global_sensitivity`;
        never ``min(N, .)``).
    size_limit : int
        ``L`` of the relaxation (:func:`relaxed_enclosable_bound`).
    node_limit : int
        Search-node budget of the exact search.
    full : bool
        Evaluate every term ``U(t)`` (no Proposition 2 stop; tests).

    Returns
    -------
    (float, int, dict, int)
        ``(S, U(0), {t: U(t) evaluated}, q_count)``.  ``q_count`` (eq. 14)
        comes from the same degree pass as ``S`` (degrees are counted once
        per release).

    Raises
    ------
    ExactSearchLimitError
        If an exact search exceeds ``node_limit`` (nothing released).
    """
    N, d = ms.n, ms.d
    w = ms.weights
    K = kissing_upper(d)
    # U(0) >= 1, so terms with exp(-t beta) G <= 1 never matter.
    horizon = int(math.ceil(math.log(G) / beta)) + 1 if G > 1 else 0
    ts = np.arange(horizon + 1)
    kc_hi = K * (k + ts + 1)
    kc_lo = K * (k + ts)
    decay = np.exp(-beta * ts)

    def sizes(deg: np.ndarray, exact_max: int):
        top = exact_max + 1
        hist = np.zeros(top + 1, dtype=np.int64)
        np.add.at(hist, np.minimum(deg, top), w)
        csum = np.concatenate([[0], np.cumsum(hist)])  # csum[j] = #{deg < j}, deg>=top lumped

        def size(lo: int, hi: int) -> int:
            lo = max(lo, 0)
            if hi > exact_max:  # unknown above exact_max: upper bound #{deg >= min(lo, top)}
                return int(N - csum[min(lo, top)])  # (lo > top happens on tables smaller than k)
            return int(csum[hi + 1] - csum[lo])

        s_hi = np.array([size(k - t, k + t) for t in ts])
        s_lo = np.array([size(k - 1 - t, k - 1 + t) for t in ts])
        return s_hi, s_lo

    # lazily counted degrees: exact up to k + 1 (all that t = 0, 1 need); extended, for the
    # saturated records only, when a larger t is evaluated
    deg, exact_max = saturated_degrees(ms, float(r), k + 1)
    q_count = int(w[deg < k].sum())  # deg < k <= exact_max: exact
    size_hi, size_lo = sizes(deg, exact_max)
    anc_hi = anc_lo = None  # Proposition 1 anchors (t0, upper bound on g_L(P(t0)))
    S_max = 0.0
    U0 = 0
    evaluated: dict[int, int] = {}
    for t in range(horizon + 1):
        b_hi = np.minimum(size_hi[t:], kc_hi[t:])
        b_lo = np.minimum(size_lo[t:], kc_lo[t:])
        if anc_hi is not None:
            t0, g0 = anc_hi
            b_hi = np.minimum(b_hi, g0 + size_hi[t:] - size_hi[t0])
            t0, g0 = anc_lo
            b_lo = np.minimum(b_lo, g0 + size_lo[t:] - size_lo[t0])
        ub = np.minimum(G, np.maximum(b_hi, b_lo) + ts[t:] + 1) * decay[t:]
        if not full and t > 0 and ub.max() <= S_max:  # Proposition 2: stop
            break
        if not full and t > 0 and ub[0] <= S_max:  # this term cannot raise the max
            continue
        if k + t > exact_max:
            deg, exact_max = saturated_degrees(ms, float(r), max(2 * (k + t), k + 16), prev=(deg, exact_max))
            new_hi, new_lo = sizes(deg, exact_max)
            # anchors need the exact sizes at t0 (<= old exact range: unchanged)
            size_hi, size_lo = new_hi, new_lo
        idx_hi = np.flatnonzero((deg >= k - t) & (deg <= k + t))
        idx_lo = np.flatnonzero((deg >= k - 1 - t) & (deg <= k - 1 + t))
        f_hi, g_hi = capped_enclosable(ms, idx_hi, int(kc_hi[t]), r, size_limit, node_limit)
        f_lo, g_lo = capped_enclosable(ms, idx_lo, int(kc_lo[t]), r, size_limit, node_limit)
        anc_hi, anc_lo = (t, g_hi), (t, g_lo)
        U = int(min(G, max(f_hi, f_lo) + t + 1))
        evaluated[t] = U
        if t == 0:
            U0 = U
        S_max = max(S_max, math.exp(-beta * t) * U)
        if S_max >= G:  # nothing can exceed G
            break
    return S_max, U0, evaluated, q_count


def local_bound(ms: PointMultiset, k: int, r, G: int, size_limit: int, node_limit: int) -> int:
    """``U(0)``: Theorem 5's bound (via ``V``, ``CV`` and Algorithm 1), capped by Theorem 4.

    Parameters
    ----------
    ms : PointMultiset
        Distinct points with multiplicities, ``ms.n >= 1``.
    k, r, size_limit, node_limit
        As for :func:`smooth_bound_terms`.
    G : int
        The public cap ``k K_d^up + 1``.

    Returns
    -------
    int
        ``min(G, max(f_0(P_hi(0)), f_0(P_lo(0))) + 1) >= LS(X)`` (eq. 23);
        exact Algorithm 1 when the candidate sets have at most
        ``size_limit`` points.
    """
    deg = _point_degrees(ms, float(r), k + 1)
    K = kissing_upper(ms.d)
    f_hi, _ = capped_enclosable(ms, np.flatnonzero(deg == k), K * (k + 1), r, size_limit, node_limit)
    f_lo, _ = capped_enclosable(ms, np.flatnonzero(deg == k - 1), K * k, r, size_limit, node_limit)
    return int(min(G, max(f_hi, f_lo) + 1))
