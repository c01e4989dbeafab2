"""Range-query histogram algorithms applied to one representation of an unattributed histogram.

Seed 004, slides "Algorithms Designed for Other Problems" and "How We Use
Algorithms for Other Problems": DAWA's partition stage, AHP and HbTree are
run on the vector ``v`` of one representation (``H``: count of counts, length
``K + 1``, L1 sensitivity ``Δ = 2``; ``H_g``: sorted sizes, length ``G``,
``Δ = 1``; ``H_c``: cumulative count of counts, length ``K + 1``, ``Δ = 1``)
and return a noisy real estimate of ``v``; the caller applies the
representation's consistency step (:func:`.mechanism.representation_postprocess`).

Neighbours (module :mod:`.mechanism`): one item added to or removed from one
group, so ``v`` changes by at most ``Δ`` in L1 (one or two cells by one).
Notion: pure ``epsilon``-DP, ``delta = 0``.  Every noisy quantity is an
integer plus exact discrete Laplace noise from
:meth:`dpcore.noise.NoiseSource.discrete_laplace`, with scales from
:func:`dpcore.noise.conservative_scale` (never below ``sensitivity / epsilon_i``).
Each algorithm is a sequential composition of stages whose epsilons sum
exactly (rational arithmetic) to the total; :func:`plan` lists them (stage,
epsilon, L1 sensitivity of the stage's measured vector, scale) and the tests
audit that list against the scales actually drawn.  Everything else
(choosing the partition from noisy costs, clustering noisy values, least
squares over the tree) is post-processing.

DAWA, stage 1 (Li, Hay & Miklau, VLDB 2014, Section 3: "private partitioning")
-------------------------------------------------------------------------------
Cost of a bucket ``b`` (an interval of cells): its L1 deviation from its mean,
``dev(b) = sum_{i in b} |v_i - mean_b(v)|``, plus the expected error of its
noisy count in stage 2 (``Δ / epsilon_2``); the partition minimising the sum of
**noisy** bucket costs is chosen; stage 2 measures the bucket sums and spreads
each uniformly.  Epsilon split as the paper's default and ektelo's:
``epsilon_1 = epsilon / 4`` (partition), ``epsilon_2 = 3 epsilon / 4`` (bucket sums).

Candidate buckets: the **aligned dyadic intervals** ``[j 2^k, (j+1) 2^k)`` inside
``[0, n)`` (the paper and ektelo also restrict the lengths to powers of two to get
an ``O(n log n)`` algorithm; here the starts are aligned too).  Then every cell
lies in exactly one candidate per length, and the best partition is found by one
vectorised bottom-up pass over the dyadic tree
(``best(node) = min(cost(node), best(left) + best(right))``), ``O(n)`` per level.

Privacy of stage 1 (stated and audited here, more conservative than the paper):
the noisy costs of *all* candidates are the measured vector.  With
``dev2(b) = |b| dev(b) = sum_{i in b} | |b| v_i - sum_b v |`` (an integer), one unit
change of one cell changes ``dev2(b)`` by at most ``2 (|b| - 1)`` (the cell's own
term by ``|b| - 1``, each of the ``|b| - 1`` others by 1), so the length-``2^k``
level, whose candidates are disjoint, has L1 sensitivity ``2 Δ (2^k - 1)``.  Each of
the ``m = floor(log2 n)`` levels with length ``>= 2`` gets ``epsilon_1 / m``
(singletons have ``dev = 0`` and need no noise), and the noisy deviation is
``(dev2(b) + Z_b) / |b|`` with ``Z_b`` discrete Laplace of scale
``2 Δ (|b| - 1) m / epsilon_1`` (noise ``~ 2 Δ m / epsilon_1`` in deviation
units).  The paper adds ``Lap(2 / epsilon_1)`` per bucket and argues about the
chosen partition directly; its argument is not a composition bound we can audit,
so this implementation pays the factor ``m`` (about ``log2 n``) instead: a
coarser partition, never a weaker guarantee.  With ``n = 1`` there is nothing to
partition and the whole epsilon goes to stage 2.

AHP (Zhang, Chen, Xu, Meng & Xie, SDM 2014)
-------------------------------------------
Stage 1 (``epsilon_1 = 0.85 epsilon``): noisy vector ``v + Z``, ``Z`` discrete
Laplace of scale ``Δ / epsilon_1``; entries ``<= eta Δ ln(n) / epsilon_1`` set to 0
(``eta = 0.35``; ratio and ``eta`` are the DPBench / ektelo defaults); sort; greedy
clustering of the sorted noisy values (a cluster's error is its sum of squared
deviations plus ``2 (Δ / epsilon_2)^2 / |C|``, the variance of its averaged noise;
the next value joins the current cluster when that does not increase the total
error).  Values equal after noise are never split (a run of ties is one unit of the
scan; this keeps the scan short and is post-processing).  Stage 2
(``epsilon_2 = 0.15 epsilon``): the true sums over the clusters (disjoint sets of
cells: sensitivity ``Δ``) with discrete Laplace of scale ``Δ / epsilon_2``, each
averaged over its cluster.

HbTree (Qardaji, Yang & Li, VLDB 2013)
--------------------------------------
A ``b``-ary tree over the cells (padded with public zero cells to ``b^h``),
``h = ceil(log_b n)`` measured levels below the unmeasured root, the branching
factor ``b`` minimising ``(b - 1) h^3`` (their estimate of the average range-query
variance with consistency; ``b = 16`` for ``n = 10^6``).  Uniform split:
``epsilon / h`` per level; a level's nodes are disjoint, so its sensitivity is
``Δ``; discrete Laplace of scale ``Δ h / epsilon`` on every node.  Then the
least-squares consistent tree (Hay, Rastogi, Miklau & Suciu, VLDB 2010,
Section 4: weighted averaging bottom-up, mean consistency top-down) and its leaves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...noise import NoiseSource, conservative_scale

__all__ = ["Stage", "plan", "estimate_vector", "dawa_estimate", "ahp_estimate", "hbtree_estimate",
           "DAWA_PARTITION_SHARE", "AHP_STAGE1_SHARE", "AHP_ETA", "hbtree_branching"]

#: DAWA: share of epsilon for the private partition (Li-Hay-Miklau 2014; ektelo's ratio=0.25).
DAWA_PARTITION_SHARE = Fraction(1, 4)
#: AHP: share of epsilon for the first (clustering) stage, and the threshold factor eta (DPBench defaults).
AHP_STAGE1_SHARE = Fraction(85, 100)
AHP_ETA = 0.35
_INT_LIMIT = 2 ** 62


@dataclass(frozen=True)
class Stage:
    """One noisy measurement of an algorithm.

    Attributes
    ----------
    name : str
    epsilon : Fraction
        Its share of the total (the shares sum to the total exactly).
    sensitivity : int
        L1 sensitivity of the measured integer vector under add/remove one item.
    scale : float
        Discrete Laplace scale used: ``conservative_scale(sensitivity, epsilon)``.
    """

    name: str
    epsilon: Fraction
    sensitivity: int
    scale: float


def _stage(name, eps, sens) -> Stage:
    return Stage(name, Fraction(eps), int(sens), conservative_scale(int(sens), Fraction(eps)))


def _dawa_levels(n: int) -> list[int]:
    """Lengths ``2^k >= 2`` with at least one aligned interval inside ``[0, n)``."""
    out, L = [], 2
    while L <= n:
        out.append(L)
        L *= 2
    return out


def hbtree_branching(n: int) -> tuple[int, int]:
    """``(b, h)``: the branching factor in ``[2, max(2, n)]`` minimising ``(b - 1) h^3``, ``h = max(1, ceil(log_b n))``."""
    best = None
    for b in range(2, max(2, min(n, 1024)) + 1):
        h, p = 1, b
        while p < n:
            p *= b
            h += 1
        key = ((b - 1) * h ** 3, b)
        if best is None or key < best[0]:
            best = (key, b, h)
    return best[1], best[2]


def plan(alg: str, n: int, sensitivity: int, epsilon) -> list[Stage]:
    """The noisy measurements of ``alg`` on a vector of length ``n`` (public parameters only).

    Parameters
    ----------
    alg : {"dawa", "ahp", "hbtree"}
    n : int
        Length of the representation's vector (``>= 1``).
    sensitivity : int
        ``Δ`` of the representation (2 for ``H``, 1 for ``H_g``, ``H_c``).
    epsilon : Fraction
        Total epsilon.

    Returns
    -------
    list of Stage
        In the order they are drawn; ``sum(stage.epsilon) == epsilon`` exactly.
    """
    eps = Fraction(epsilon)
    D = int(sensitivity)
    if alg == "dawa":
        levels = _dawa_levels(n)
        if not levels:
            return [_stage("bucket sums", eps, D)]
        e1 = eps * DAWA_PARTITION_SHARE
        per = e1 / len(levels)
        return [_stage(f"partition costs, length {L}", per, 2 * D * (L - 1)) for L in levels] + \
            [_stage("bucket sums", eps - e1, D)]
    if alg == "ahp":
        e1 = eps * AHP_STAGE1_SHARE
        return [_stage("noisy vector", e1, D), _stage("cluster sums", eps - e1, D)]
    if alg == "hbtree":
        b, h = hbtree_branching(n)
        return [_stage(f"tree level {lv} (branching {b})", eps / h, D) for lv in range(h, 0, -1)]
    raise ValueError(f"alg must be 'dawa', 'ahp' or 'hbtree', got {alg!r}")


def estimate_vector(alg: str, v: np.ndarray, sensitivity: int, epsilon, noise: NoiseSource) -> np.ndarray:
    """Run ``alg`` on the private integer vector ``v``: a noisy float estimate of ``v`` (same length).

    ``epsilon``-DP under add/remove one item when ``v`` has L1 sensitivity
    ``sensitivity`` (module docstring); draws exactly the stages of :func:`plan`.
    """
    fn = {"dawa": dawa_estimate, "ahp": ahp_estimate, "hbtree": hbtree_estimate}.get(alg)
    if fn is None:
        raise ValueError(f"alg must be 'dawa', 'ahp' or 'hbtree', got {alg!r}")
    v = np.asarray(v, dtype=np.int64)
    return fn(v, plan(alg, v.size, sensitivity, epsilon), noise)


# ------------------------------------------------------------------- DAWA
def _dev2(v: np.ndarray, L: int) -> np.ndarray:
    """``|b| * dev(b)`` (exact integers) for the aligned intervals of length ``L`` inside the vector."""
    nb = v.size // L
    X = v[: nb * L].reshape(nb, L)
    vmax = int(np.abs(X).max()) if X.size else 0
    if L * L * max(vmax, 1) < _INT_LIMIT:
        S = X.sum(axis=1)
        return np.abs(L * X - S[:, None]).sum(axis=1)
    Xo = X.astype(object)  # exact Python integers when int64 could overflow (huge sizes only)
    S = Xo.sum(axis=1)
    d = np.abs(L * Xo - S[:, None]).sum(axis=1)
    return np.array([min(int(t), np.iinfo(np.int64).max // 2) for t in d], dtype=np.int64)


def dawa_partition(v: np.ndarray, stages: list[Stage], noise: NoiseSource) -> np.ndarray:
    """DAWA stage 1: bucket starts (sorted, first 0) of the noisy-cost-optimal aligned dyadic partition."""
    n = v.size
    count_stage = stages[-1]
    bucket_err = count_stage.sensitivity / float(count_stage.epsilon)  # expected |noise| of a bucket count
    cost_stages = stages[:-1]
    if not cost_stages:
        return np.arange(n)
    top = len(cost_stages)
    N = 1 << top if (1 << top) >= n else 1 << (top + 1)
    # level 0: singletons (dev = 0 exactly, no noise); padding cells cost 0
    best = np.zeros(N)
    best[:n] = bucket_err
    whole = []  # per level >= 1: does the node take its whole interval as one bucket
    for k, st in enumerate(cost_stages, start=1):
        L = 1 << k
        dev2 = _dev2(v, L)
        noisy = noise.discrete_laplace(dev2, st.scale)
        score = np.maximum(noisy / L, 0.0) + bucket_err
        split = best[0::2] + best[1::2]
        nodes = split.size
        take = np.zeros(nodes, dtype=bool)
        m = score.size  # nodes fully inside [0, n)
        take[:m] = score <= split[:m]
        best = split.copy()
        best[:m] = np.where(take[:m], score, split[:m])
        whole.append(take)
    # levels above the last cost level (only when N > 2^top): they always split
    while best.size > 1:
        best = best[0::2] + best[1::2]
        whole.append(np.zeros(best.size, dtype=bool))
    starts = []
    active = np.ones(1, dtype=bool)
    for k in range(len(whole), 0, -1):
        take = whole[k - 1]
        L = 1 << k
        chosen = np.flatnonzero(active & take)
        starts.append(chosen * L)
        active = np.repeat(active & ~take, 2)
    starts.append(np.flatnonzero(active[:n]))
    s = np.concatenate(starts)
    s = np.sort(s[s < n])
    return s


def dawa_estimate(v: np.ndarray, stages: list[Stage], noise: NoiseSource) -> np.ndarray:
    """DAWA (partition stage + uniform bucket estimates) on ``v``; see the module docstring."""
    starts = dawa_partition(v, stages, noise)
    sums = np.add.reduceat(v, starts)
    lens = np.diff(np.append(starts, v.size))
    noisy = noise.discrete_laplace(sums, stages[-1].scale)
    return np.repeat(noisy / lens, lens)


# -------------------------------------------------------------------- AHP
def _greedy_runs(values: np.ndarray, counts: np.ndarray, var: float) -> np.ndarray:
    """Greedy AHP clustering over runs of equal sorted values: run index where each cluster starts."""
    c = counts.astype(np.float64)
    P1 = np.concatenate([[0.0], np.cumsum(c * values)])
    P2 = np.concatenate([[0.0], np.cumsum(c * values * values)])
    PC = np.concatenate([[0.0], np.cumsum(c)])
    p1, p2, pc = P1.tolist(), P2.tolist(), PC.tolist()
    cl = c.tolist()
    starts = [0]
    i = 0
    for j in range(1, len(cl)):
        w = pc[j] - pc[i]
        s1 = p1[j] - p1[i]
        cur = (p2[j] - p2[i]) - s1 * s1 / w + var / w
        w2 = w + cl[j]
        s2 = s1 + p1[j + 1] - p1[j]
        merged = (p2[j + 1] - p2[i]) - s2 * s2 / w2 + var / w2
        if merged > cur + var / cl[j]:
            starts.append(j)
            i = j
    return np.asarray(starts, dtype=np.int64)


def ahp_estimate(v: np.ndarray, stages: list[Stage], noise: NoiseSource) -> np.ndarray:
    """AHP (noisy vector, threshold, sort, greedy clusters, noisy cluster averages); module docstring."""
    s1, s2 = stages
    n = v.size
    noisy = noise.discrete_laplace(v, s1.scale).astype(np.float64)
    cutoff = AHP_ETA * s1.sensitivity * math.log(n) / float(s1.epsilon) if n > 1 else 0.0
    noisy[noisy <= cutoff] = 0.0
    order = np.argsort(noisy, kind="stable")
    sv = noisy[order]
    run_start = np.flatnonzero(np.concatenate([[True], sv[1:] != sv[:-1]]))
    run_len = np.diff(np.append(run_start, n))
    var = 2.0 * (s2.sensitivity / float(s2.epsilon)) ** 2
    cl_runs = _greedy_runs(sv[run_start], run_len, var)
    cl_start = run_start[cl_runs]  # positions in sorted order
    sums = np.add.reduceat(v[order], cl_start)
    lens = np.diff(np.append(cl_start, n))
    noisy_sums = noise.discrete_laplace(sums, s2.scale)
    est = np.empty(n)
    est[order] = np.repeat(noisy_sums / lens, lens)
    return est


# ----------------------------------------------------------------- HbTree
def hbtree_estimate(v: np.ndarray, stages: list[Stage], noise: NoiseSource) -> np.ndarray:
    """HbTree: noisy b-ary tree levels + least-squares consistency (Hay et al. 2010); module docstring."""
    n = v.size
    b, h = hbtree_branching(n)
    if len(stages) != h:
        raise ValueError("internal error: HbTree stages do not match the tree height")
    N = b ** h
    leaves = np.zeros(N, dtype=np.int64)
    leaves[:n] = v
    true_levels = [leaves]  # index 0 = leaves (height 1)
    for _ in range(h - 1):
        true_levels.append(true_levels[-1].reshape(-1, b).sum(axis=1))
    noisy = [noise.discrete_laplace(true_levels[t], stages[t].scale).astype(np.float64) for t in range(h)]
    # bottom-up weighted averages (equal variances per level)
    z = [noisy[0]]
    for t in range(1, h):
        height = t + 1
        alpha = (b ** height - b ** (height - 1)) / (b ** height - 1)
        child = z[-1].reshape(-1, b).sum(axis=1)
        z.append(alpha * noisy[t] + (1 - alpha) * child)
    # top-down mean consistency (the root is unmeasured: its estimate is the sum of its children)
    u = z[-1]
    for t in range(h - 2, -1, -1):
        zc = z[t].reshape(-1, b)
        u = (zc + ((u - zc.sum(axis=1)) / b)[:, None]).ravel()
    return u[:n]
