r"""The robust start of the EM: FAST-LTS (elemental subsets, C-steps), reweighting, level medians (issue 22).

Seed 004 part 1 ("Detecting Outliers with Correlated Measures"), slide
"Parameters Learning": EM is local, so the mixture regression of
:class:`~dpcore.detect.robust_em.RobustRegressionDetector` (model and EM:
:mod:`dpcore.detect.robust_em`, :mod:`dpcore.detect.mixture_em`) needs a start
that bad leverage points cannot capture. This module is that start:
Rousseeuw and Van Driessen, "Computing LTS regression for large data sets"
(Data Min. Knowl. Discov. 2006) on a subsample of the start sample, the
reweighted LTS fit (Rousseeuw and Leroy 1987, Sec. 5.1), the level-wise
median correction of one-hot coefficients and the mixture parameters of a
start, put together by :func:`em_start`; ``start="legacy"`` (the start before
issue 22) is :func:`_lts_starts`. Why each step is there, with the
measurements that chose it: the sections below. Split out of
:mod:`dpcore.detect.robust_em` in issue 29 (the functions) and issue 49 (the
start's orchestration and these sections). All batched numpy on standardised
``(Z, y)``; random choices from the caller's ``numpy.random.Generator``;
nothing logs or warns.

Robust start (``start="auto"`` = ``"lts"``, issue 22)
------------------------------------------------------
EM is local; started from least squares it is captured by bad leverage points.
The start is FAST-LTS (Rousseeuw and Van Driessen, "Computing LTS regression
for large data sets", Data Min. Knowl. Discov. 2006), the least trimmed
squares estimator of Rousseeuw (1984, JASA 79), on a random subsample of at
most ``_START_ROWS = 3000`` rows of the start sample ("all rows" below means
the start sample's rows: :mod:`dpcore.detect.start_sample`) (``m`` rows, ``q`` regression coefficients,
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
:func:`~dpcore.detect.mixture_em._solve_exact_or_ridge` needs their weight above :math:`10^{-10}` of the
intercept's); measured window: :math:`\kappa\in[10^{-4}, 3\cdot10^{-2}]`
recovered all 863, :math:`\kappa=0.1` failed one; the floor tests
(whole-number levels) hold down to :math:`10^{-6}` with the reference-level
correction above. The step is then an ECM step for the *inlier* part of
:math:`Q` only, so :math:`\ell` is no longer guaranteed to increase at every
step (the SQUAREM safeguard and the stopping rule are unchanged); the E-step,
the :math:`(\sigma^2, b)` step, the scores, ``labels_``, ``K`` and the
measurement floor are exactly as derived in :mod:`dpcore.detect.robust_em`. Only the reweighted LTS fit starts the
EM (the MM principle: refine the high-breakdown estimate locally; other LTS
candidates, refined by EM, won on likelihood with masked fits of
:math:`p>0.5` -- the tight cluster as the "inlier" Gaussian).

``start="legacy"`` is the start before issue 22, kept for comparison: 300
elemental subsets, two C-steps, ``n_starts`` kept and concentrated (at most 30
steps) with :math:`h=\lfloor(m+q+2)/2\rfloor`, each refined by exact EM, best
subsample likelihood. ``start="ols"``: exact EM from least squares on the
subsample (the classical, non-robust start).
"""
from __future__ import annotations

import math

import numpy as np
from dpcore.runtime.lazy_modules import lazy_module

_special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

from dpcore.runtime.chunks import CHUNK_SHARE, MemoryBudget
from .em_passes import _em
from .mixture_em import _OUTLIER_WEIGHT, _SIGMA2_FLOOR, _solve

#: Rows of the robust-start subsample (of the start sample).
_START_ROWS = 3000
#: Work budget (multiply-adds) of one concentration step over all elemental
#: starts, ``n_elemental * rows * q**2``; bounds the number of elemental starts
#: for wide designs (many one-hot columns), never below ``4 * n_starts``.
_ELEMENTAL_WORK = 1e9
#: Elemental subsets drawn for the robust start.
_N_ELEMENTAL = 300
#: Concentration steps applied to every elemental start / to the kept ones.
_C_STEPS_ALL = 2
_C_STEPS_KEPT = 30
#: C-steps to convergence on the kept FAST-LTS candidates: at most this many.
_C_STEPS_MAX = 100
#: C-steps on all rows after FAST-LTS on the start subsample (large tables).
_C_STEPS_FINAL = 5
#: Reweighting of the LTS fit: rows with |r| <= _RW_CUT * s (the 97.5% quantile of |N(0, 1)|).
_RW_CUT = 2.241402727604947
#: Consistency factor of the MAD for the normal distribution.
_MAD_TO_SD = 1.482602218505602


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


def _lts_h(m: int, q: int) -> int:
    """Coverage of the LTS fit: ``h = floor((m + q + 1) / 2)`` rows (Rousseeuw and Van Driessen 2006), at most ``m``."""
    return min(m, (m + q + 1) // 2)


def _gather_floats() -> int:
    """Floats of one gather of :func:`_subset_ls`: a chunk's share of ``DPR_MEMORY_LIMIT``, halved.

    :data:`dpcore.runtime.chunks.CHUNK_SHARE` of the cap (:class:`dpcore.runtime.chunks.MemoryBudget`),
    for the gathered ``(c, h, q)`` rows and the copy of their transpose (8
    bytes each): 1 Mi floats under 512 MiB, 4 Mi under the 2 GiB default.
    Before issue 29 (goal 4) it was a fixed 2e7 floats, about 320 MB with
    the copy, which alone took a 512 MiB run above its cap on the demo.
    """
    return int(MemoryBudget.from_env().effective_limit * CHUNK_SHARE) // 16


def _subset_ls(Z: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Least squares on each row subset ``idx[k]`` (shape (k, h)), batched; returns (k, q) coefficients.

    Chunked over subsets so the gathered ``Z[idx]`` and the contiguous copy
    of its transpose that the batched product makes stay within
    :func:`_gather_floats` (a share of ``DPR_MEMORY_LIMIT``; each subset's
    fit is computed alone, so the chunking never changes the result); the
    tiny relative ridge of :func:`_solve` keeps singular subsets (an
    elemental set holding two rows of one level) finite.
    """
    k, h = idx.shape
    q = Z.shape[1]
    out = np.empty((k, q))
    step = max(1, _gather_floats() // max(1, h * q))
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

    The squared residuals are computed in place, and the selection runs over
    blocks of candidates within :func:`_gather_floats` (each row's
    ``argpartition`` and sum are its own, so the blocks give the same bits):
    the ``(k, m)`` positions of a whole ``argpartition`` (kept alive by the
    ``(k, h)`` view returned before) and a second ``(k, m)`` temporary are not
    held. On the 10x table's widest template (1,153 candidates on 3,000 rows,
    four blocks under ``DPR_MEMORY_LIMIT=512MiB``, one under the 2 GiB default)
    the fit's traced peak fell from 192 to 168 MiB (issue 29, goal 4).
    """
    k, m = B.shape[0], Z.shape[0]
    R2 = B @ Z.T  # (k, m)
    np.subtract(y[None, :], R2, out=R2)
    np.square(R2, out=R2)
    step = max(1, _gather_floats() // max(1, m))
    if step >= k:  # one block: the positions as a view of the whole selection (no second (k, h) array)
        idx = np.argpartition(R2, h - 1, axis=1)[:, :h]
        return np.take_along_axis(R2, idx, axis=1).sum(axis=1), idx
    obj = np.empty(k)
    idx = np.empty((k, h), dtype=np.intp)
    for a in range(0, k, step):
        part = np.argpartition(R2[a:a + step], h - 1, axis=1)[:, :h]
        obj[a:a + step] = np.take_along_axis(R2[a:a + step], part, axis=1).sum(axis=1)
        idx[a:a + step] = part
    return obj, idx


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


def _elemental_subsets(rng: np.random.Generator, n_el: int, m: int, q: int) -> np.ndarray:
    """``n_el`` random ``q``-row subsets of ``m`` rows: ``argpartition(rng.random((n_el, m)), q - 1)[:, :q]``.

    Drawn in blocks of rows within :func:`_gather_floats` into an ``(n_el, q)``
    array of its own: the generator yields the same numbers in the same order
    whatever the blocks (so the same subsets, and the same generator state
    after), and each row's ``argpartition`` is its own. Before issue 29 (goal
    4) the ``(n_el, m)`` keys and their ``(n_el, m)`` positions were held at
    once, and the positions for the whole FAST-LTS (the ``[:, :q]`` view kept
    them alive): 26 MiB each for the 10x table's widest template (1,153
    subsets of 3,000 rows).

    Returns
    -------
    ndarray of intp, shape (n_el, q)
    """
    idx = np.empty((n_el, q), dtype=np.intp)
    step = max(1, _gather_floats() // max(1, m))
    for a in range(0, n_el, step):
        b = min(n_el, a + step)
        idx[a:b] = np.argpartition(rng.random((b - a, m)), q - 1, axis=1)[:, :q]
    return idx


def _fast_lts(Z: np.ndarray, y: np.ndarray, rng: np.random.Generator, n_subsets: int, n_keep: int,
              concentrate=None):
    """FAST-LTS (Rousseeuw and Van Driessen 2006) on ``(Z, y)``, vectorised over the subsets.

    ``n_subsets`` random elemental subsets (``q`` distinct rows each, the exact
    fit through them; fewer for wide designs, see ``_ELEMENTAL_WORK``), two
    C-steps on all of them, then the ``max(10, n_keep)`` best distinct ones
    concentrated to convergence (at most ``_C_STEPS_MAX`` steps). Returns the
    converged coefficients sorted by trimmed objective (best first) and the
    objectives, with ``h = floor((m + q + 1) / 2)``. ``concentrate``: the
    final concentration (default :func:`_concentrate`; the detector passes the
    one its module holds, so it can be observed there).
    """
    m, q = Z.shape
    h = _lts_h(m, q)
    n_el = max(min(n_subsets, int(_ELEMENTAL_WORK // (m * q * q))), 4 * n_keep)
    B = _subset_ls(Z, y, _elemental_subsets(rng, n_el, m, q))
    for _ in range(_C_STEPS_ALL):
        B = _c_step(Z, y, B, h)[0]  # the step's (k, h) positions are not kept alive into the next selection
    obj = _lts_objective(Z, y, B, h)[0]
    order = np.argsort(obj, kind="stable")
    # distinct candidates: identical converged fits are kept once (vectorised over candidates)
    Bo = B[order]
    key = np.round(Bo / np.maximum(np.abs(Bo).max(axis=0), 1e-12), 9)
    _, first = np.unique(key, axis=0, return_index=True)
    keep = np.sort(first)[: max(10, n_keep)]
    return (concentrate or _concentrate)(Z, y, Bo[keep], h, _C_STEPS_MAX)


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
    if reference:  # the rows no level column reaches, one column at a time (not an n x len(cols) copy of Z)
        outside = np.ones(Z.shape[0], dtype=bool)
        for rows in members:
            outside[rows] = False
        cols = np.r_[0, cols]
        members = [np.flatnonzero(outside), *members]
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


def em_start(Z: np.ndarray, ys: np.ndarray, levels: np.ndarray, rng: np.random.Generator, *, start: str,
             n_starts: int, n_subsets: int | None, p_init: float, max_iter: int, tol: float,
             floor: float) -> dict:
    """The start of the EM on all rows: the robust start on a subsample of the start sample, refined there by EM.

    The sections "Robust start" and "Masking" of this module: ``start="lts"`` draws a subsample of at most
    :data:`_START_ROWS` rows, runs FAST-LTS on it (on the whole start sample for the final C-steps when the
    subsample is smaller), reweights, corrects the one-hot levels by their median residuals
    (:func:`_level_medians`) and refines the result by EM on the subsample with the inlier-driven coefficient
    step (:data:`~dpcore.detect.mixture_em._OUTLIER_WEIGHT`); ``"legacy"`` refines its ``n_starts`` LTS
    candidates by exact EM and keeps the best likelihood; ``"ols"`` starts from least squares. Last, the level
    medians again on the whole start sample (levels absent from the subsample get theirs).

    Parameters
    ----------
    Z : ndarray of shape (n0, q)
        The start sample's standardised design (intercept first; :mod:`dpcore.detect.start_sample`).
    ys : ndarray of shape (n0,)
        Its standardised ``y``.
    levels : ndarray of int
        Positions in ``Z`` of the 0/1 columns (one-hot levels).
    rng : numpy.random.Generator
        The detector's generator, after the start sample's key was drawn (the subsample and the elemental
        subsets come from it, in that order).
    start : {"lts", "ols", "legacy"}
        ``"auto"`` already read as ``"lts"``.
    n_starts, n_subsets, p_init, max_iter, tol
        The detector's parameters (validated by it).
    floor : float
        The floor of sigma^2 in standardised units.

    Returns
    -------
    dict
        ``beta`` (the EM's starting coefficients on all rows), ``s2``, ``p``, ``b`` (the subsample EM's
        mixture parameters), ``ll`` (its log-likelihood on the subsample), ``lts_beta`` (the raw LTS
        coefficients, None unless ``start="lts"``) and ``outlier_weight`` (the coefficient step's share of
        the Cauchy weights for the EM on all rows: 1 for exact EM).
    """
    n0, q = Z.shape
    m = min(n0, _START_ROWS)
    sub = np.arange(n0) if m == n0 else np.sort(rng.choice(n0, size=m, replace=False))
    Zs, ys_s = Z[sub], ys[sub]
    ow = 1.0
    lts_beta = None
    if start == "legacy":
        cands = _lts_starts(Zs, ys_s, rng, n_starts)
    elif start == "ols":
        cands = [_solve(Zs.T @ Zs, Zs.T @ ys_s)]
    else:
        n_sub = _n_subsets_auto(q) if n_subsets is None else int(n_subsets)
        B, _ = _fast_lts(Zs, ys_s, rng, n_sub, n_starts, concentrate=_concentrate)
        if m < n0:  # the subsample's best fit, concentrated on the start sample (module docstring, "Robust start", 4.)
            B, _ = _concentrate(Z, ys, B[:1], _lts_h(n0, q), _C_STEPS_FINAL)
            beta_rw = _lts_reweight(Z, ys, B[0], _lts_h(n0, q), floor)
        else:
            beta_rw = _lts_reweight(Zs, ys_s, B[0], _lts_h(m, q), floor)
        lts_beta = B[0]  # raw LTS coefficients, standardised units (benchmarks/detect_leverage.py)
        cands = [beta_rw]
        ow = _OUTLIER_WEIGHT
    best = None
    for beta0 in cands:
        beta0 = _level_medians(Zs, ys_s, beta0, levels, reference=start == "lts")
        s2, p, b = _start_params(Zs, ys_s, beta0, float(p_init), floor)
        res = _em(Zs, ys_s, beta0, s2, p, b, max_iter, tol, floor=floor, outlier_weight=ow)
        if best is None or res["ll"] > best["ll"]:
            best = res
    del Zs, ys_s
    # levels absent from the subsample get their median, on the start sample, before the EM on all rows
    beta = _level_medians(Z, ys, best["beta"], levels, reference=start == "lts")
    return {"beta": beta, "s2": best["s2"], "p": best["p"], "b": best["b"], "ll": best["ll"], "lts_beta": lts_beta,
            "outlier_weight": ow}
