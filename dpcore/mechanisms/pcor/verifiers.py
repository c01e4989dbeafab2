"""Outlier verification functions ``f_M(D_C, V)`` of PCOR (Section 3, Section 6.5 of seed 003).

Shafieinejad, Kerschbaum and Ilyas (SIGMOD'21) define, for a context ``C``
with population ``D_C`` and a record ``V``, ``f_M(D_C, V) = true`` iff ``V``
is an outlier of ``D_C`` with respect to the metric attribute ``M``
(Section 3); a context is *valid* (matching) for ``V`` iff ``V ∈ D_C`` and
``f_M(D_C, V)``.  Section 6.5 uses three deterministic detectors, each here
with a fast path over a :class:`~dpcore.mechanisms.pcor.index.CellIndex`
and an independent naive reference that filters the records of ``D_C`` and
runs the textbook computation (``scipy`` / ``numpy``):

* :class:`GrubbsVerifier` -- Grubbs' two-sided test (Grubbs 1969, [23]).
* :class:`LOFVerifier` -- the local outlier factor (Breunig et al. 2000, [8])
  on the one-dimensional metric.
* :class:`HistogramVerifier` -- the equal-width histogram of Section 6.5:
  ``sqrt(|D_C|)`` bins, bins holding fewer than ``2.5e-3 |D_C|`` records are
  outlying.

Every ``verify`` returns ``False`` for contexts that do not contain ``V``.
All verifiers are deterministic (no randomness, no tie-breaking by order).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from dpcore.mechanisms.pcor.index import CellIndex

__all__ = ["GrubbsVerifier", "LOFVerifier", "HistogramVerifier", "make_verifier", "VERIFIERS",
           "grubbs_critical_value", "lof_1d", "histogram_edges"]

LOF_EPS = 1e-10  # sklearn's offset in the local reachability density: lrd = 1 / (mean reach-dist + 1e-10)


# --------------------------------------------------------------------------- helpers


def _population_mask(codes, context, space) -> np.ndarray:
    if space is None:
        raise ValueError("verify_naive needs space=<ContextSpace> to locate each attribute's bits in the context")
    codes = np.asarray(codes, dtype=np.int64)
    ctx = space._as_single(context)
    return ctx[space.offsets[None, :] + codes].all(axis=1)


def _as_batch(index: CellIndex, row, contexts) -> tuple[int, np.ndarray, np.ndarray]:
    row = index.check_row(row)
    ctx = index.space._as_batch(contexts)
    contains = index.space.contains(ctx, index.codes[row])
    return row, ctx, contains


def _own_cells(index: CellIndex, rows) -> tuple[np.ndarray, np.ndarray]:
    """Checked held-row positions and the position of each record's own cell in ``index.occupied``."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and ((rows < 0).any() or (rows >= index.n_held).any()):
        raise IndexError("rows: some record positions are out of range")
    return rows, np.searchsorted(index.occupied, index.cell_of_row[rows])


def grubbs_critical_value(n, alpha: float) -> np.ndarray:
    """Two-sided Grubbs critical value ``G_crit(N, alpha)`` (Grubbs 1969).

    ``G_crit = (N - 1) / sqrt(N) * sqrt(t**2 / (N - 2 + t**2))`` with ``t`` the
    ``1 - alpha / (2N)`` quantile of Student's t with ``N - 2`` degrees of
    freedom.  Defined for ``N >= 3`` (``nan`` otherwise).

    Parameters
    ----------
    n : array_like of int
    alpha : float

    Returns
    -------
    numpy.ndarray of float64, the shape of ``n``.
    """
    n = np.asarray(n, dtype=np.float64)
    out = np.full(n.shape, np.nan)
    ok = n >= 3
    nn = n[ok]
    from scipy import special  # on first use (dpr plan and spec check skip it)

    # Student's t quantile: scipy.stats.t.ppf(q, df) is special.stdtrit(df, q), the same doubles, without
    # importing scipy.stats (about 60 MiB: issue 29, goal 4)
    tq = special.stdtrit(nn - 2.0, 1.0 - alpha / (2.0 * nn))
    out[ok] = (nn - 1.0) / np.sqrt(nn) * np.sqrt(tq * tq / (nn - 2.0 + tq * tq))
    return out


def histogram_edges(lo, hi, nbins, i) -> np.ndarray:
    """Edge ``i`` of ``np.linspace(lo, hi, nbins + 1)``, vectorised and bit-identical to numpy.

    Reproduces numpy's ``linspace`` arithmetic (``i * step + lo`` with
    ``step = (hi - lo) / nbins``, the denormal ``step == 0`` branch, and the
    last edge set to ``hi``), which is what ``np.histogram`` uses for its
    equal-width bins.
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    nbins = np.asarray(nbins, dtype=np.int64)
    i = np.asarray(i, dtype=np.int64)
    delta = hi - lo
    div = nbins.astype(np.float64)
    step = delta / div
    fi = i.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.where(step == 0, (fi / div) * delta, fi * step) + lo
    return np.where(i >= nbins, hi, e)


def _ceil_sqrt(n) -> np.ndarray:
    """Exact ``ceil(sqrt(n))`` for int64 ``n >= 0``."""
    n = np.asarray(n, dtype=np.int64)
    r = np.floor(np.sqrt(n.astype(np.float64))).astype(np.int64)
    r = np.where(r * r > n, r - 1, r)
    r = np.where((r + 1) * (r + 1) <= n, r + 1, r)  # now r = isqrt(n)
    return np.where(r * r == n, r, r + 1)


# --------------------------------------------------------------------------- LOF core (1-D, weighted)


def lof_1d(values, mult, j, k: int, lo: float = -np.inf, hi: float = np.inf) -> tuple[float, bool]:
    """LOF of the value ``values[j]`` in a 1-D multiset, with a sufficiency proof (see :func:`_lof_1d`)."""
    lof, ok, _ = _lof_1d(values, mult, j, k, lo, hi)
    return lof, ok


def _lof_1d(values, mult, j, k: int, lo: float = -np.inf, hi: float = np.inf):
    """LOF of the value ``values[j]`` in a 1-D multiset, with a sufficiency proof.

    Definition (Breunig et al. 2000, [8] of seed 003, for the metric attribute
    as in Section 6.5), for a record ``p`` of the population with ``k`` fixed:

    * ``k-distance(p)`` is the ``k``-th smallest of ``|x_q - x_p|`` over the
      other records ``q != p`` (ties counted with multiplicity; other records
      with the same value are at distance 0);
    * ``N_k(p) = {q != p : |x_q - x_p| <= k-distance(p)}`` -- all tied records
      at the k-distance are included, so ``|N_k(p)| >= k``;
    * ``reach-dist(p, o) = max(k-distance(o), |x_p - x_o|)``;
    * ``lrd(p) = 1 / (mean_{o in N_k(p)} reach-dist(p, o) + 1e-10)`` -- the
      ``1e-10`` is scikit-learn's convention, so duplicates (zero
      reach-distances) give a finite density ``1e10`` instead of infinity;
    * ``LOF(p) = mean_{o in N_k(p)} lrd(o) / lrd(p)``.

    On data without ties ``|N_k(p)| = k`` and this is exactly
    ``sklearn.neighbors.LocalOutlierFactor(n_neighbors=k)``'s
    ``-negative_outlier_factor_``; with ties it is Breunig's tie-inclusive
    definition (sklearn would pick k of the tied records by index order).
    All records with the same value have the same k-distance, lrd and LOF,
    so the computation runs on distinct values with multiplicities.

    Parameters
    ----------
    values : (L,) float64
        Sorted distinct values of a window of the population.
    mult : (L,) int64
        Their multiplicities in the population (exact inside ``[lo, hi]``).
    j : int
        Index of ``x_V`` in ``values``.
    k : int
        Neighbourhood size (already ``min(k, N - 1)``), ``>= 1``.
    lo, hi : float
        The window is **complete** on ``[lo, hi]``: every population record
        with a value in that closed interval is in ``values``/``mult``
        (values outside may be partial).

    Returns
    -------
    lof : float
        ``LOF(V)`` computed on the window.
    need : tuple of float or None
        ``(min(x - kd), max(x + kd))`` over the records the computation
        used, from the window's k-distances (upper bounds of the true ones
        where the window is incomplete); a hint for the next window, or
        ``None`` when some k-distance is not defined on the window.
    sufficient : bool
        ``True`` when the window provably gives the population's LOF(V):
        for ``V``, every ``o in N_k(V)`` and every ``q in N_k(o)`` the
        window k-distance satisfies ``kd < x - lo`` and ``kd < hi - x``, i.e.
        the window edges lie strictly beyond every distance the computation
        used.  Proof: records missing from the window lie outside
        ``[lo, hi]``, hence (floating subtraction being monotone) at a
        computed distance ``>= x - lo > kd`` (resp. ``>= hi - x``) from
        ``x``; so the window's count of records within any ``d <= kd`` equals
        the population's, the window k-distance (the least ``d`` reaching
        ``k + 1`` records with ``p`` itself) is the population's, and so is
        ``N_k``.  By induction over the three levels (``V``; ``N_k(V)``, whose
        lrd needs their ``N_k``; the k-distances of those), every quantity in
        ``LOF(V)`` is the population's.
    """
    values = np.asarray(values, dtype=np.float64)
    mult = np.asarray(mult, dtype=np.int64)
    L = values.shape[0]
    k = int(k)
    # k-distance per distinct value: cap multiplicities at k + 1 (keeps "count within d >= k + 1"),
    # then the k + 1 nearest records (with p itself) form a contiguous block of the sorted records.
    cap = np.minimum(mult, k + 1)
    xr = np.repeat(values, cap)
    nr = xr.shape[0]
    first = np.cumsum(cap) - cap
    s = first[:, None] - k + np.arange(k + 1)[None, :]
    okb = (s >= 0) & (s + k <= nr - 1)
    sc = np.clip(s, 0, max(nr - 1, 0))
    ec = np.clip(s + k, 0, max(nr - 1, 0))
    x0 = values[:, None]
    blk = np.maximum(x0 - xr[sc], xr[ec] - x0) if nr else np.full(s.shape, np.inf)
    kd = np.where(okb, blk, np.inf).min(axis=1)
    # neighbourhoods: at most k uniques inside (x - kd, x + kd) besides x, plus the two boundary values
    off = np.arange(-(k + 1), k + 2)
    J = np.arange(L)[:, None] + off[None, :]
    inr = (J >= 0) & (J < L)
    Jc = np.clip(J, 0, L - 1)
    D = np.abs(values[Jc] - x0)
    member = inr & (D <= kd[:, None])
    w = np.where(member, mult[Jc] - (off[None, :] == 0), 0)
    nk = w.sum(axis=1)
    reach = np.maximum(kd[Jc], D)
    with np.errstate(invalid="ignore", divide="ignore"):
        sum_reach = np.where(w > 0, w * reach, 0.0).sum(axis=1)
        lrd = 1.0 / (sum_reach / nk + LOF_EPS)
        lof = float(np.where(w[j] > 0, w[j] * lrd[Jc[j]], 0.0).sum() / nk[j] / lrd[j])
    inside = (kd < values - lo) & (kd < hi - values)
    lvl1 = Jc[j][w[j] > 0]
    lvl2 = Jc[lvl1][w[lvl1] > 0]
    check = np.concatenate([[j], lvl1, lvl2])
    sufficient = bool(np.all(inside[check])) and np.isfinite(lof)
    kc = kd[check]
    need = (float(np.min(values[check] - kc)), float(np.max(values[check] + kc))) if np.isfinite(kc).all() else None
    return lof, sufficient, need


# --------------------------------------------------------------------------- parameter checks


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (0.0 < float(alpha) < 0.5):
        raise ValueError(f"Grubbs parameter alpha must be a real number in (0, 0.5), got {alpha!r}")
    return float(alpha)


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or int(k) < 1:
        raise ValueError(f"LOF parameter k must be an integer >= 1, got {k!r}")
    return int(k)


def _check_threshold(threshold) -> float:
    if (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
            or not math.isfinite(float(threshold)) or float(threshold) <= 0):
        raise ValueError(f"LOF parameter threshold must be a finite real number > 0, got {threshold!r}")
    return float(threshold)


def _check_min_share(min_share) -> float:
    if (isinstance(min_share, bool) or not isinstance(min_share, numbers.Real)
            or not (0.0 < float(min_share) < 1.0)):
        raise ValueError(f"Histogram parameter min_share must be a real number in (0, 1), got {min_share!r}")
    return float(min_share)


# --------------------------------------------------------------------------- Grubbs


class GrubbsVerifier:
    """Grubbs' two-sided test as ``f_M`` (Section 2.1 / 6.5 of seed 003; Grubbs 1969).

    ``V`` is an outlier of ``D_C`` iff, with ``N = |D_C|``, ``x̄`` the mean and
    ``s`` the sample standard deviation (``ddof = 1``) of the metric over
    ``D_C``::

        G = |x_V - x̄| / s  >  G_crit(N, alpha)
        G_crit = (N - 1) / sqrt(N) * sqrt(t**2 / (N - 2 + t**2)),  t = t_{1 - alpha/(2N), N-2}

    This is a **single** two-sided Grubbs test applied to ``V`` itself (is
    ``V`` significantly far from the mean?), not the iterated generalized
    ESD procedure: no other record is removed first.  ``N < 3`` (the test
    is undefined) and ``s = 0`` (all values of ``D_C`` equal; detected
    exactly as ``min == max``) give ``False``.

    Fast path (:meth:`verify`): ``N``, ``sum (x - c)`` and ``sum (x - c)**2``
    of ``D_C`` from the per-cell sums by one batched contraction, min/max from
    the per-cell min/max; ``O(cells)`` per context.  ``G_crit`` is vectorised
    and cached per ``N``.

    Parameters
    ----------
    alpha : float
        Significance level in ``(0, 0.5)``; default 0.05.
    """

    name = "grubbs"

    def __init__(self, alpha: float = 0.05):
        self.alpha = _check_alpha(alpha)
        self._gcrit_n = np.zeros(0, dtype=np.int64)  # the N computed so far, sorted
        self._gcrit = np.zeros(0)  # G_crit of each

    def params(self) -> dict:
        """JSON-able parameters."""
        return {"alpha": self.alpha}

    def __repr__(self) -> str:
        return f"GrubbsVerifier(alpha={self.alpha})"

    def critical(self, n) -> np.ndarray:
        """``G_crit(N, alpha)`` for an array of ``N`` (cached; ``nan`` for ``N < 3``).

        The cache holds the distinct ``N`` computed so far (sorted, found by ``searchsorted``): its size grows
        with the contexts evaluated, never with the populations. It was an array indexed by ``N`` up to the
        largest population met, 8 bytes per record of the table: 737 MiB per search at 1000x the demo (337
        million rows), held by each of the concurrent searches (issue 51).
        """
        n = np.asarray(n, dtype=np.int64)
        if n.size == 0:
            return np.zeros(n.shape)
        new = np.setdiff1d(n[n >= 3], self._gcrit_n)  # sorted, distinct, not cached yet
        if new.size:
            keys = np.concatenate([self._gcrit_n, new])
            order = np.argsort(keys, kind="stable")
            self._gcrit_n = keys[order]
            self._gcrit = np.concatenate([self._gcrit, grubbs_critical_value(new, self.alpha)])[order]
        vals = np.full(n.shape, np.nan)
        ok = n >= 3
        vals[ok] = self._gcrit[np.searchsorted(self._gcrit_n, n[ok])]
        return vals

    def decide(self, x_centred: float, sums, mn, mx) -> np.ndarray:
        """Grubbs decision from sufficient statistics.

        Parameters
        ----------
        x_centred : float or (B,) float64
            ``x_V - centre`` (one record, or one per row of ``sums``).
        sums : (B, 3) float64
            Count, sum and sum of squares of ``x - centre`` over each ``D_C``.
        mn, mx : (B,) float64
            Min and max of the metric over each ``D_C``.

        Returns
        -------
        (B,) bool
        """
        sums = np.asarray(sums, dtype=np.float64)
        n = np.rint(sums[:, 0]).astype(np.int64)
        out = np.zeros(n.shape, dtype=bool)
        ok = (n >= 3) & (mn < mx)
        if not ok.any():
            return out
        nn = n[ok].astype(np.float64)
        x = np.broadcast_to(np.asarray(x_centred, dtype=np.float64), n.shape)[ok]
        s1 = sums[ok, 1]
        s2 = sums[ok, 2]
        mean = s1 / nn
        var = np.maximum(s2 - s1 * mean, 0.0) / (nn - 1.0)
        sd = np.sqrt(var)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.abs(x - mean) / sd
        out[ok] = (sd > 0) & (g > self.critical(n[ok]))
        return out

    def verify(self, index: CellIndex, row: int, contexts) -> np.ndarray:
        """``f_M(D_C, V)`` for a batch of contexts (fast path).

        Parameters
        ----------
        index : CellIndex
        row : int
            Position of ``V`` among the index's held rows (:meth:`CellIndex.with_rows`).
        contexts : (B, t) bool

        Returns
        -------
        (B,) bool; ``False`` where ``V`` is not in ``D_C``.
        """
        row, ctx, contains = _as_batch(index, row, contexts)
        out = np.zeros(ctx.shape[0], dtype=bool)
        if not contains.any():
            return out
        sub = ctx[contains]
        sums = index.context_sums(sub)
        mn, mx = index.context_minmax(sub)
        out[contains] = self.decide(index.x_centred(row), sums, mn, mx)
        return out

    def verify_own_cells(self, index: CellIndex, rows) -> np.ndarray:
        """``f_M(D_C, V)`` with ``C`` each record's own cell, for many records at once.

        The own cell is the context holding exactly the record's values
        (:meth:`~dpcore.mechanisms.pcor.contexts.ContextSpace.cell_context`);
        the decision equals :meth:`verify` on that context, vectorised over
        records from the per-cell sums.

        Parameters
        ----------
        index : CellIndex
        rows : array_like of int
            Positions among the index's held rows (:meth:`CellIndex.with_rows`).

        Returns
        -------
        (R,) bool
        """
        rows, occ = _own_cells(index, rows)
        sums = np.stack([index.occupied_count[occ].astype(np.float64), index.occupied_sum[occ],
                         index.occupied_sumsq[occ]], axis=1)
        return self.decide(index.metric[rows] - index.centre, sums, index.occupied_min[occ], index.occupied_max[occ])

    def verify_naive(self, codes, metric, row: int, context, space=None) -> bool:
        """Reference: filter the records of ``D_C`` and run the textbook test.

        Parameters
        ----------
        codes : (N, m) int codes; metric : (N,) float
        row : int
        context : (t,) bool
        space : ContextSpace
            Needed to locate each attribute's bits (an addition to the
            contract signature).

        Returns
        -------
        bool
        """
        mask = _population_mask(codes, context, space)
        if not mask[row]:
            return False
        y = np.asarray(metric, dtype=np.float64)[mask]
        n = y.shape[0]
        if n < 3 or y.min() == y.max():
            return False
        g = abs(float(metric[row]) - y.mean()) / y.std(ddof=1)
        from scipy import special

        tq = special.stdtrit(n - 2, 1 - self.alpha / (2 * n))  # stats.t.ppf's value (see grubbs_critical_value)
        gcrit = (n - 1) / math.sqrt(n) * math.sqrt(tq * tq / (n - 2 + tq * tq))
        return bool(g > gcrit)

    def enumerate(self, index: CellIndex, row: int, chunk: int = 1 << 20):
        """Validity and population of **every** context containing ``V`` (Algorithm 1's COE).

        Uses :meth:`CellIndex.iter_enumeration` (subset expansion of the
        per-cell sums) and :meth:`decide`; ``O(2**(t - m))`` vectorised.

        Returns
        -------
        keys : (K,) uint64; valid : (K,) bool; population : (K,) int64
            In the order of the enumeration (not sorted).
        """
        x = index.x_centred(row)
        if (1 << (index.space.t - index.space.m)) > index.n_rows:
            self.critical(np.arange(index.n_rows + 1))  # one vectorised t.ppf over every possible N
        ks, vs, ps = [], [], []
        for keys, sums, mn, mx in index.iter_enumeration(row, chunk=chunk):
            ks.append(keys)
            vs.append(self.decide(x, sums, mn, mx))
            ps.append(np.rint(sums[:, 0]).astype(np.int64))
        return np.concatenate(ks), np.concatenate(vs), np.concatenate(ps)


# --------------------------------------------------------------------------- LOF


class LOFVerifier:
    """Local outlier factor on the metric as ``f_M`` (Section 6 of seed 003; Breunig et al. 2000).

    ``V`` is an outlier of ``D_C`` iff ``LOF(V) > threshold`` where LOF is
    computed over ``D_C`` on the one-dimensional metric with
    ``k_eff = min(k, |D_C| - 1)`` neighbours (as scikit-learn caps
    ``n_neighbors``); see :func:`lof_1d` for the exact definition (tie-
    inclusive k-distance neighbourhoods, scikit-learn's ``1e-10`` offset in the
    reachability density).  ``|D_C| < 2`` gives ``False``.

    Fast path: in 1-D only values near ``x_V`` in sorted order matter.  From
    each cell of the context a few distinct values on each side of ``x_V``
    (in proportion to the cell's size) are gathered via the global sorted
    ``(cell, rank)`` keys (one ``searchsorted`` for all cells) and merged;
    :func:`lof_1d` computes ``LOF(V)`` on the ``3 (k + 2)`` distinct values
    each side of ``x_V`` with a proof that the window was sufficient; if
    not, the window doubles, ending at the whole population.  Exact in all
    cases, including integer metrics with many ties.

    Parameters
    ----------
    k : int
        ``>= 1``; default 10.
    threshold : float
        Finite, ``> 0``; default 1.5.
    initial_window : int, optional
        Size ``w`` of the first window: each cell contributes
        ``1 + ceil(w * |cell| / |D_C|)`` distinct values on each side of
        ``x_V`` (default ``w = 6 (k + 1)``, about two neighbourhoods' worth
        of records); doubled until sufficient.  Performance only, not part
        of :meth:`params`.
    pad_rounds : int, optional
        Constant work (issue 46.2): every context's window search makes at
        least this many rounds (default 2), the rounds after the first
        sufficient window growing the window as an insufficient one would,
        their results discarded; not part of :meth:`params` (the LOF is the
        same). Why: the window search is the verifier's cost, and how many
        rounds it needs depends on the record -- on the demo's flights
        (BENCHMARKS.md "Absent records do the same work", LOF columns) a
        drawn record's contexts needed one round each, the most delayed
        flights' about two (their neighbours lie far away in the metric), so
        an outlier's verification took 2-3 times as long. With two rounds
        for every context both do the same number of rounds. Not padded:
        a context that needs more than ``pad_rounds`` rounds (a window
        doubled more often) still takes longer, and each round's size
        follows the cells' value ranges (windows are clipped at a cell's
        ends); padding every context to the whole population, the only
        data-independent bound, would cost ``O(|D_C|)`` per context.
    """

    name = "lof"

    def __init__(self, k: int = 10, threshold: float = 1.5, initial_window: int | None = None,
                 pad_rounds: int = 2):
        self.k = _check_k(k)
        self.threshold = _check_threshold(threshold)
        self.initial_window = int(initial_window) if initial_window is not None else 6 * (self.k + 1)
        if self.initial_window < 1:
            raise ValueError("LOF initial_window must be >= 1")
        self.pad_rounds = int(pad_rounds)
        if self.pad_rounds < 1:
            raise ValueError("LOF pad_rounds must be >= 1")
        self.last_windows: list[int] = []  # diagnostics: final window size of each context of the last verify
        self.last_rounds: list[int] = []  # work counter: window rounds of each context of the last verify

    def params(self) -> dict:
        """JSON-able parameters."""
        return {"k": self.k, "threshold": self.threshold}

    def __repr__(self) -> str:
        return f"LOFVerifier(k={self.k}, threshold={self.threshold})"

    def lof_fast(self, index: CellIndex, row: int, cells_occ: np.ndarray, n: int) -> float:
        """``LOF(V)`` over the union of the given occupied cells (indices into ``index.occupied``)."""
        k = min(self.k, n - 1)
        U = index.n_unique
        rv = int(index.row_rank[row])
        start = index.occupied_entry_start[cells_occ]
        stop = index.occupied_entry_stop[cells_occ]
        target = index.occupied[cells_occ] * U + rv
        a = np.searchsorted(index.entry_key, target, side="left")
        b = np.searchsorted(index.entry_key, target, side="right")
        share = index.occupied_count[cells_occ] / float(n)
        base = index.occupied[cells_occ] * U
        w = self.initial_window
        radius = 3 * (k + 2)  # distinct values each side of x_V that the three LOF levels can reach
        wc = 1 + np.ceil(w * share).astype(np.int64)  # per cell: ~its share of w values, at least 2
        left = np.maximum(a - wc, start)
        right = np.minimum(b + wc, stop)
        need = None
        rounds = 0
        found = None  # LOF(V), once a window proved sufficient; later rounds are padding (results discarded)
        while True:
            rounds += 1
            tl = left > start
            tr = right < stop
            lo = float(index.entry_value[left[tl]].max()) if tl.any() else -np.inf
            hi = float(index.entry_value[right[tr] - 1].min()) if tr.any() else np.inf
            lengths = right - left
            total = int(lengths.sum())
            seg_start = np.cumsum(lengths) - lengths
            idx = np.repeat(left - seg_start, lengths) + np.arange(total)
            ranks, inv = np.unique(index.entry_rank[idx], return_inverse=True)
            mult = np.bincount(inv, weights=index.entry_count[idx]).astype(np.int64)
            values = index.uniq[ranks]
            j = int(np.searchsorted(ranks, rv))
            # LOF on a contiguous run of the window's distinct values around x_V (complete on its own range)
            a2, b2 = j - radius, j + radius + 1
            if need is not None:
                a2 = min(a2, int(np.searchsorted(values, need[0], side="left")) - (k + 2))
                b2 = max(b2, int(np.searchsorted(values, need[1], side="right")) + (k + 2))
            a2, b2 = max(a2, 0), min(b2, values.size)
            lo2 = max(lo, float(values[a2])) if a2 > 0 else lo
            hi2 = min(hi, float(values[b2 - 1])) if b2 < values.size else hi
            lof, ok, need = _lof_1d(values[a2:b2], mult[a2:b2], j - a2, k, lo2, hi2)
            whole = not (tl.any() or tr.any() or a2 > 0 or b2 < values.size)
            if found is None and (ok or whole):
                if not ok:  # whole population: always sufficient; guards an internal error
                    raise RuntimeError("LOF window covering the whole population reported insufficient")
                found = (lof, w)
            if found is not None and (rounds >= self.pad_rounds or whole):
                self.last_windows.append(found[1])
                self.last_rounds.append(rounds)
                return found[0]
            # grow: double the window, and cover the value range the last attempt needed (plus one
            # entry beyond on each side, so the completeness bounds lie strictly outside it)
            w *= 2
            radius *= 2
            wc = 1 + np.ceil(w * share).astype(np.int64)
            new_left = np.maximum(a - wc, start)
            new_right = np.minimum(b + wc, stop)
            if need is not None:
                r_lo = np.searchsorted(index.uniq, need[0], side="left")
                r_hi = np.searchsorted(index.uniq, need[1], side="right")
                v_left = np.searchsorted(index.entry_key, base + r_lo, side="left") - 1
                v_right = np.searchsorted(index.entry_key, base + r_hi, side="left") + 1
                new_left = np.minimum(new_left, np.maximum(v_left, start))
                new_right = np.maximum(new_right, np.minimum(v_right, stop))
            left = np.minimum(left, new_left)
            right = np.maximum(right, new_right)

    def lof(self, index: CellIndex, row: int, contexts) -> np.ndarray:
        """``LOF(V)`` over ``D_C`` for a batch of contexts (fast path; one window search per context).

        Returns
        -------
        (B,) float64; ``nan`` where ``V`` is not in ``D_C`` or ``|D_C| < 2``.
        """
        row, ctx, contains = _as_batch(index, row, contexts)
        out = np.full(ctx.shape[0], np.nan)
        self.last_windows = []
        self.last_rounds = []
        pos = np.flatnonzero(contains)
        if pos.size == 0:
            return out
        cm = index.occupied_mask(ctx[pos])
        n = cm.astype(np.int64) @ index.occupied_count
        for p, cells, nn in zip(pos, cm, n):
            if nn >= 2:
                out[p] = self.lof_fast(index, row, np.flatnonzero(cells), int(nn))
        return out

    def verify(self, index: CellIndex, row: int, contexts) -> np.ndarray:
        """``f_M(D_C, V)`` for a batch of contexts: ``LOF(V) > threshold`` (fast path).

        Returns
        -------
        (B,) bool; ``False`` where ``V`` is not in ``D_C`` or ``|D_C| < 2``.
        """
        lof = self.lof(index, row, contexts)
        return np.nan_to_num(lof, nan=-np.inf) > self.threshold

    def verify_own_cells(self, index: CellIndex, rows) -> np.ndarray:
        """``f_M(D_C, V)`` with ``C`` each record's own cell, for many records.

        Equals :meth:`verify` on each record's cell context. Records of one
        cell with the same value have the same LOF, so one :meth:`lof_fast`
        runs per distinct (cell, value) pair among ``rows``: a loop bounded
        by the number of records asked about (callers pass a bounded batch,
        e.g. the detector's top-ranked candidates), never by the data size.

        Parameters
        ----------
        index : CellIndex
        rows : array_like of int

        Returns
        -------
        (R,) bool
        """
        rows, occ = _own_cells(index, rows)
        pairs, first, inv = np.unique(np.stack([occ, index.row_rank[rows]], axis=1).reshape(-1, 2), axis=0,
                                      return_index=True, return_inverse=True)
        inv = inv.reshape(-1)  # first: one representative record per pair
        lof = np.full(pairs.shape[0], -np.inf)
        for i, (p, r) in enumerate(zip(pairs[:, 0], rows[first])):
            n = int(index.occupied_count[p])
            if n >= 2:
                lof[i] = self.lof_fast(index, int(r), np.array([p]), n)
        return lof[inv] > self.threshold

    def lof_naive(self, values, x: float) -> float:
        """Reference ``LOF`` of one record with value ``x`` in the population ``values`` (by the definition).

        Record-level: k-distances by ``np.partition`` of the distance vector,
        neighbourhoods by ``|x_q - x| <= k-distance`` minus the record itself;
        quantities are memoised per value (records with equal values have
        equal k-distance and lrd).
        """
        y = np.asarray(values, dtype=np.float64)
        n = y.shape[0]
        k = min(self.k, n - 1)
        kd_memo: dict = {}
        lrd_memo: dict = {}

        def kdist(v):
            if v not in kd_memo:
                d = np.abs(y - v)
                kd_memo[v] = float(np.partition(d, k)[k])  # index k: the record itself is one of the zeros
            return kd_memo[v]

        def neighbours(v):
            d = np.abs(y - v)
            nb = y[d <= kdist(v)]
            return np.delete(nb, np.flatnonzero(nb == v)[0])  # drop the record itself (one instance)

        def lrd(v):
            if v not in lrd_memo:
                nb = neighbours(v)
                uq, inv = np.unique(nb, return_inverse=True)
                kds = np.array([kdist(u) for u in uq])[inv]
                lrd_memo[v] = 1.0 / (np.mean(np.maximum(kds, np.abs(nb - v))) + LOF_EPS)
            return lrd_memo[v]

        nb = neighbours(x)
        uq, inv = np.unique(nb, return_inverse=True)
        lrds = np.array([lrd(u) for u in uq])[inv]
        return float(np.mean(lrds) / lrd(x))

    def verify_naive(self, codes, metric, row: int, context, space=None) -> bool:
        """Reference: filter ``D_C`` and compute ``LOF(V)`` by the definition (see :meth:`lof_naive`)."""
        mask = _population_mask(codes, context, space)
        if not mask[row]:
            return False
        y = np.asarray(metric, dtype=np.float64)[mask]
        if y.shape[0] < 2:
            return False
        return self.lof_naive(y, float(metric[row])) > self.threshold


# --------------------------------------------------------------------------- Histogram


class HistogramVerifier:
    """Equal-width histogram as ``f_M`` (Section 6.5 of seed 003).

    Over ``D_C`` (``N = |D_C|``): ``B = ceil(sqrt(N))`` equal-width bins on
    ``[min, max]`` of the metric with ``np.histogram`` semantics (edges
    ``np.linspace(min, max, B + 1)``, bin ``i`` is ``[e_i, e_{i+1})``, the
    last bin closed).  ``V`` is an outlier iff the count of its bin is
    ``< min_share * N`` (Section 6.5: ``2.5e-3 |D_C|``).  ``N == 1`` (one bin
    holding ``V``) and ``min == max`` (every record in one bin, as
    ``np.histogram`` widens the range by 0.5 each side) give ``False``: the
    bin holds all ``N`` records.  Since ``V``'s bin holds ``V``, an outlier
    needs ``N > 1 / min_share``.

    Fast path: min/max from the per-cell min/max by a batched contraction;
    ``V``'s bin edges by numpy's linspace arithmetic
    (:func:`histogram_edges`); the bin count by ``searchsorted`` of the edge
    ranks on the global ``(cell, rank)`` keys for all cells of all contexts
    of the batch at once.

    Constant work (issue 46.2): measured, not padded. Every step above is
    one vectorised operation over the batch's contexts and the occupied
    cells (their number, not the record, sets the sizes); the record enters
    only as the value whose bin is located, and :meth:`bin_of`'s correction
    loop runs once more only where a float rounding puts it in the wrong
    bin (for every record alike). On the demo's flights (BENCHMARKS.md
    "Absent records do the same work", verifiers' table: one call over 256
    contexts) a drawn record, an absent id's stand-in and the most delayed
    flights take the same 9-22 ms up to the machine's load, as Grubbs
    (per-cell sums) does.

    Parameters
    ----------
    min_share : float
        In ``(0, 1)``; default ``2.5e-3``.
    """

    name = "histogram"

    def __init__(self, min_share: float = 2.5e-3):
        self.min_share = _check_min_share(min_share)

    def params(self) -> dict:
        """JSON-able parameters."""
        return {"min_share": self.min_share}

    def __repr__(self) -> str:
        return f"HistogramVerifier(min_share={self.min_share})"

    @staticmethod
    def bin_of(x: np.ndarray, mn, mx, nbins) -> np.ndarray:
        """Index of the bin holding ``x`` (``np.histogram`` semantics; requires ``mn <= x <= mx``, ``mn < mx``)."""
        x = np.asarray(x, dtype=np.float64)
        mn = np.asarray(mn, dtype=np.float64)
        mx = np.asarray(mx, dtype=np.float64)
        nbins = np.asarray(nbins, dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            g = np.floor((x - mn) / (mx - mn) * nbins)
        i = np.clip(np.nan_to_num(g, nan=0.0), 0, nbins - 1).astype(np.int64)
        for _ in range(64):  # correct the floating guess against the exact edges (numpy does the same)
            down = (i > 0) & (x < histogram_edges(mn, mx, nbins, i))
            up = (i < nbins - 1) & (x >= histogram_edges(mn, mx, nbins, i + 1))
            if not (down.any() or up.any()):
                break
            i = i - down + up
        return i

    def bin_count(self, index: CellIndex, row: int, contexts) -> tuple[np.ndarray, np.ndarray]:
        """Count of ``V``'s histogram bin and ``|D_C|`` for a batch of contexts (fast path, vectorised).

        Returns
        -------
        count : (B,) int64
            Records of ``D_C`` in ``V``'s bin (``|D_C|`` when ``min == max``,
            ``0`` when ``V`` is not in ``D_C``).
        n : (B,) int64
            ``|D_C|``.
        """
        row, ctx, contains = _as_batch(index, row, contexts)
        count = np.zeros(ctx.shape[0], dtype=np.int64)
        n_all = np.zeros(ctx.shape[0], dtype=np.int64)
        pos = np.flatnonzero(contains)
        if pos.size == 0:
            return count, n_all
        sub = ctx[pos]
        cm = index.occupied_mask(sub)
        n = cm.astype(np.int64) @ index.occupied_count
        n_all[pos] = n
        mn, mx = index.context_minmax(sub)
        ok = mn < mx
        count[pos[~ok]] = n[~ok]
        if not ok.any():
            return count, n_all
        pos, cm, n, mn, mx = pos[ok], cm[ok], n[ok], mn[ok], mx[ok]
        nb = _ceil_sqrt(n)
        x = float(index.metric[row])
        i = self.bin_of(np.full(n.shape, x), mn, mx, nb)
        e_lo = histogram_edges(mn, mx, nb, i)
        e_hi = histogram_edges(mn, mx, nb, i + 1)
        r_lo = np.searchsorted(index.uniq, e_lo, side="left")
        r_hi = np.where(i == nb - 1, np.searchsorted(index.uniq, e_hi, side="right"),
                        np.searchsorted(index.uniq, e_hi, side="left"))
        counts = index.count_in_rank_range(index.occupied[None, :], r_lo[:, None], r_hi[:, None])
        count[pos] = np.where(cm, counts, 0).sum(axis=1)
        return count, n_all

    def verify(self, index: CellIndex, row: int, contexts) -> np.ndarray:
        """``f_M(D_C, V)`` for a batch of contexts: ``V``'s bin count ``< min_share * |D_C|`` (fast path).

        Returns
        -------
        (B,) bool; ``False`` where ``V`` is not in ``D_C``.
        """
        count, n = self.bin_count(index, row, contexts)
        return (n > 0) & (count < self.min_share * n)

    def verify_own_cells(self, index: CellIndex, rows) -> np.ndarray:
        """``f_M(D_C, V)`` with ``C`` each record's own cell, for many records at once.

        Equals :meth:`verify` on each record's cell context: the cell's
        min/max and size, ``V``'s bin by numpy's linspace arithmetic and its
        count by one ``searchsorted`` per bound, vectorised over records.

        Parameters
        ----------
        index : CellIndex
        rows : array_like of int

        Returns
        -------
        (R,) bool
        """
        rows, occ = _own_cells(index, rows)
        n = index.occupied_count[occ]
        mn, mx = index.occupied_min[occ], index.occupied_max[occ]
        count = n.copy()  # min == max: every record in V's bin
        ok = mn < mx
        if ok.any():
            nb = _ceil_sqrt(n[ok])
            i = self.bin_of(index.metric[rows[ok]], mn[ok], mx[ok], nb)
            e_lo = histogram_edges(mn[ok], mx[ok], nb, i)
            e_hi = histogram_edges(mn[ok], mx[ok], nb, i + 1)
            r_lo = np.searchsorted(index.uniq, e_lo, side="left")
            r_hi = np.where(i == nb - 1, np.searchsorted(index.uniq, e_hi, side="right"),
                            np.searchsorted(index.uniq, e_hi, side="left"))
            count[ok] = index.count_in_rank_range(index.occupied[occ[ok]], r_lo, r_hi)
        return (n > 0) & (count < self.min_share * n)

    def verify_naive(self, codes, metric, row: int, context, space=None) -> bool:
        """Reference: filter ``D_C``, ``np.histogram(y, bins=ceil(sqrt(N)))``, look up ``V``'s bin count."""
        mask = _population_mask(codes, context, space)
        if not mask[row]:
            return False
        y = np.asarray(metric, dtype=np.float64)[mask]
        n = y.shape[0]
        nb = math.isqrt(n - 1) + 1 if n > 0 else 1  # ceil(sqrt(n))
        counts, edges = np.histogram(y, bins=nb)
        x = float(metric[row])
        i = int(np.searchsorted(edges, x, side="right")) - 1
        i = min(max(i, 0), nb - 1)
        return bool(counts[i] < self.min_share * n)


# --------------------------------------------------------------------------- factory

VERIFIERS = {"grubbs": GrubbsVerifier, "lof": LOFVerifier, "histogram": HistogramVerifier}
_ALLOWED = {
    "grubbs": {"alpha": "a real number in (0, 0.5)"},
    "lof": {"k": "an integer >= 1", "threshold": "a finite real number > 0", "initial_window": "an integer >= 1"},
    "histogram": {"min_share": "a real number in (0, 1)"},
}


def make_verifier(name: str, **params):
    """Build a verifier by name (``"grubbs"``, ``"lof"``, ``"histogram"``).

    Parameters
    ----------
    name : str
    **params
        ``alpha`` (Grubbs, in (0, 0.5)); ``k`` (LOF, integer >= 1),
        ``threshold`` (LOF, finite > 0); ``min_share`` (Histogram, in (0, 1)).

    Raises
    ------
    ValueError
        Unknown verifier, unknown parameter, or a value out of range; the
        message names the parameter and its allowed range.
    """
    key = str(name).strip().lower()
    if key not in VERIFIERS:
        raise ValueError(f"unknown outlier verifier {name!r}; choose one of {sorted(VERIFIERS)}")
    allowed = _ALLOWED[key]
    for p in params:
        if p not in allowed:
            ranges = "; ".join(f"{q}: {r}" for q, r in allowed.items())
            raise ValueError(f"verifier {key!r} has no parameter {p!r} (parameters: {ranges})")
    return VERIFIERS[key](**params)
