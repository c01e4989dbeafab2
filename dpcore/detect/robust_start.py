"""The robust start of the EM: FAST-LTS (elemental subsets, C-steps), reweighting, level medians (issue 22).

Rousseeuw and Van Driessen, "Computing LTS regression for large data sets"
(Data Min. Knowl. Discov. 2006) on a subsample of the start sample, the
reweighted LTS fit (Rousseeuw and Leroy 1987, Sec. 5.1), the level-wise
median correction of one-hot coefficients and the mixture parameters of a
start; ``start="legacy"`` (the start before issue 22) is :func:`_lts_starts`.
Why each step is there, with the measurements that chose it: the module
docstring of :mod:`dpcore.detect.robust_em`, sections "Robust start" and
"Masking". Split out of it in issue 29 (which re-exports every name). All
batched numpy on standardised ``(Z, y)``; random choices from the caller's
``numpy.random.Generator``; nothing logs or warns.
"""
from __future__ import annotations

import math

import numpy as np
from ..lazy_modules import lazy_module

_special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

from ..chunks import CHUNK_SHARE, MemoryBudget
from .mixture_em import _SIGMA2_FLOOR, _solve

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

    :data:`dpcore.chunks.CHUNK_SHARE` of the cap (:class:`dpcore.chunks.MemoryBudget`),
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
