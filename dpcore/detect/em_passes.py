"""The streamed passes of the EM (issue 21): chunk sources, one chunk's share of a pass, the sums combined.

Seed 004, slide "Parameters Learning": the E-step is per row and the M-step
needs only sums over rows, so the fit passes over chunks of rows
(:class:`ArrayChunks` in memory, :class:`dpcore.detect.streaming.PartitionChunks`
over a warehouse export) with :func:`chunk_pass`, a module-level function a
mapper may run elsewhere, and adds the chunks' partial sums with one rounding
(:func:`_fsum`). :func:`_em_chunks` runs the EM core's iteration
(:func:`dpcore.detect.mixture_em._em_loop`) over these passes; :func:`_em` is
its one-chunk case. Split out of :mod:`dpcore.detect.robust_em` in issue 29
(which re-exports every name). Errors name the argument and the rule, never
data values, row counts or positions; nothing here logs or warns.
"""
from __future__ import annotations

import math

import numpy as np
from dpcore.runtime.blas_threads import one_blas_thread

from .level_design import encoded_scan, previous_one
from .mixture_em import _SIGMA2_FLOOR, _em_loop, _estep, _log_odds, _mstats, _posterior, _ru

#: Standardised y is clipped here so squared residuals cannot overflow.
_Y_CLIP = 1e100


def _as_float(a, name: str) -> np.ndarray:
    """``a`` as a float64 array, refusing complex and non-numeric input (message names ``name``)."""
    arr = np.asarray(a)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must be real-valued, got a complex array")
    try:
        return np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric (convertible to float); got dtype {arr.dtype}") from None


def _check_X(X, name: str = "X") -> np.ndarray:
    arr = _as_float(X, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows x contextual columns), got a {arr.ndim}-D array")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has NaN or infinite values; every value must be finite")
    return arr


def _check_y(y, n: int, name: str = "y") -> np.ndarray:
    arr = _as_float(y, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got a {arr.ndim}-D array")
    if arr.shape[0] != n:
        raise ValueError(f"X and {name} have different numbers of rows; they must match")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has NaN or infinite values; every value must be finite")
    return arr


class ArrayChunks:
    """In-memory rows ``(X, y)`` as a chunk source: consecutive chunks of ``rows`` rows (default: one chunk).

    The chunk-source protocol of the streamed fit
    (:meth:`RobustRegressionDetector.fit_chunks`): ``n_rows``, ``n_features``,
    ``load(i)`` (the raw ``X``, ``y`` of chunk ``i``), ``take(rows)`` (the rows
    at sorted positions ``rows``, or all rows for None), ``standardised(i, std)``
    (chunk ``i``'s ``(Z, y)``, :func:`_standardised`; a source may cache it) and ``map(fn, state)``
    (``mapper(fn, [(self, i, state) for every chunk])``). :meth:`fit` runs on
    one chunk of this class; tests run it with awkward chunk sizes.
    :class:`dpcore.detect.streaming.PartitionChunks` is the warehouse's source.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    y : ndarray of shape (n,)
    rows : int, optional
        Rows per chunk (``None``: one chunk).
    mapper : callable, optional
        ``mapper(fn, items) -> list`` (default :func:`dpcore.runtime.chunks.serial_map`).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, rows: int | None = None, mapper=None) -> None:
        self.X = X
        self.y = y
        self.rows = rows
        self.mapper = mapper

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_chunks(self) -> int:
        n = self.n_rows
        if n == 0:
            return 0
        rows = n if self.rows is None else int(self.rows)
        return -(-n // rows)

    def load(self, i: int):
        """Chunk ``i``: ``(X, y)`` views."""
        if self.rows is None:
            return self.X, self.y
        a = i * int(self.rows)
        return self.X[a:a + int(self.rows)], self.y[a:a + int(self.rows)]

    def standardised(self, i: int, std):
        """Chunk ``i`` standardised by ``std`` (:func:`_standardised`)."""
        X, y = self.load(i)
        return _standardised(X, y, std)

    def take(self, rows):
        """Rows at the sorted positions ``rows`` (None: all rows, no copy)."""
        if rows is None:
            return self.X, self.y
        return self.X[rows], self.y[rows]

    def map(self, fn, state) -> list:
        """``mapper(fn, [(self, i, state) ...])`` over every chunk, results in chunk order."""
        items = [(self, i, state) for i in range(self.n_chunks)]
        return (self.mapper or _serial_map)(fn, items)


def _serial_map(fn, items) -> list:
    from dpcore.runtime.chunks import serial_map

    return serial_map(fn, items)


def _standardised(X: np.ndarray, y: np.ndarray, std) -> tuple[np.ndarray, np.ndarray]:
    """The design ``Z`` (intercept first) and standardised ``y`` of raw rows; ``std=None``: already standardised.

    ``std = (active, x_loc, x_scale, y_loc, y_scale[, layout])``; with a
    :class:`~dpcore.detect.level_design.LevelLayout`, ``Z`` comes in its
    factored form (:class:`~dpcore.detect.level_design.FactoredDesign`).
    """
    if std is None:
        return X, y
    active, x_loc, x_scale, y_loc, y_scale, *layout = std
    if layout and layout[0] is not None:  # the factored form, straight from X (dpcore.detect.level_design)
        Z = layout[0].standardise(X, active, x_loc, x_scale)
    else:
        Z = _design_of(X, active, x_loc, x_scale)
    return Z, np.clip((y - y_loc) / y_scale, -_Y_CLIP, _Y_CLIP)


def _column_moments(X: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each active column, without a copy of the active columns.

    Bit for bit ``X[:, active].mean(axis=0)`` and ``X[:, active].std(axis=0)``:
    that copy is Fortran-ordered, so numpy reduces each column as one
    contiguous run (pairwise summation), which is what a contiguous copy of one
    column gives too; a reduction over a C-ordered ``X`` adds the rows in
    another order (different last bits). One column is copied at a time
    instead of all: on the detector's start sample (500,000 rows, 16 columns
    for the demo's widest template) 4 MiB instead of 61 MiB, held beside ``X``
    and the design until the fit ended under a small ``DPR_MEMORY_LIMIT``
    (issue 29, goal 4).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Float64.
    active : ndarray of bool, shape (d,)

    Returns
    -------
    mean, std : ndarray of shape (active.sum(),)
    """
    cols = np.flatnonzero(active)
    mean = np.empty(cols.size)
    std = np.empty(cols.size)
    for k, j in enumerate(cols):
        col = np.ascontiguousarray(X[:, j])
        mean[k] = col.mean()
        std[k] = col.std()
    return mean, std


def _design_of(X: np.ndarray, active: np.ndarray, x_loc: np.ndarray, x_scale: np.ndarray) -> np.ndarray:
    """Standardised design of raw rows: the intercept, then the active columns centred and scaled (row-wise).

    Element by element, so ``X`` itself is read when every column is active
    (no copy of the active columns: the same values, issue 29 goal 4).
    """
    Xa = X if bool(np.all(active)) else X[:, active]
    Z = np.empty((X.shape[0], Xa.shape[1] + 1))
    Z[:, 0] = 1.0
    np.subtract(Xa, x_loc, out=Z[:, 1:])
    Z[:, 1:] /= x_scale
    return Z


def chunk_pass(item):
    """One chunk's share of a pass of the streamed fit: a module-level function a mapper can ship.

    ``item = (source, i, state)``; ``state["kind"]`` says which pass:

    * ``"scan"``: column minima and maxima, whether each column is 0/1, the
      minimum and maximum of ``y`` (checks finiteness: errors as :meth:`RobustRegressionDetector.fit`),
      :func:`~dpcore.detect.level_design.previous_one` (which 0/1 columns are exclusive); from a source's
      encoded columns when it has them (``encoded(i)``: :func:`~dpcore.detect.level_design.encoded_scan`,
      the same values without the dense design);
    * ``"estep"``: the E-step at ``state``'s parameters (log-likelihood) and the
      M-step's sufficient statistics :func:`_mstats`;
    * ``"ru"``: :func:`_ru` with the posteriors at the old parameters and the new coefficients.

    Everything returned adds (or takes extremes) over chunks; the caller combines. BLAS runs on one
    thread (:func:`dpcore.runtime.blas_threads.one_blas_thread`).
    """
    src, i, state = item
    kind = state["kind"]
    with np.errstate(all="ignore"), one_blas_thread():  # also on a Dask worker: dpcore.runtime.blas_threads
        if kind == "scan":
            if hasattr(src, "encoded"):  # a warehouse export: from the encoded columns (level_design.encoded_scan)
                cols, y = src.encoded(i)
                xmin, xmax, binary, prev = encoded_scan(cols)
                y = _check_y(y, cols.n)
                return (xmin, xmax, binary, float(y.min()), float(y.max()), prev)
            X, y = src.load(i)
            X = _check_X(X)
            y = _check_y(y, X.shape[0])
            return (X.min(axis=0), X.max(axis=0), np.all((X == 0.0) | (X == 1.0), axis=0), float(y.min()),
                    float(y.max()), previous_one(X))
        Z, ys = src.standardised(i, state["std"])
        beta, s2, p, b = state["theta"]
        r = ys - Z @ beta
        if kind == "estep":
            t, etau, ll = _estep(r, s2, p, b)
            return (ll, *_mstats(Z, ys, t, etau, s2, state["ow"]))
        if kind == "ru":
            return _ru(Z, ys, _posterior(_log_odds(r, s2, p, b)), state["beta_new"])
    raise ValueError(f"unknown chunk pass kind {kind!r}")


def _estep_pass(src, std, beta, s2, p, b, ow):
    """E-step over every chunk: the state ``(beta, s2, p, b, ll, (st, su, te, G, rhs))``."""
    parts = src.map(chunk_pass, {"kind": "estep", "std": std, "theta": (beta, s2, p, b), "ow": ow})
    ll, st, su, te, G, rhs = (_fsum([x[k] for x in parts]) for k in range(6))
    return (beta, s2, p, b, ll, (st, su, te, G, rhs))


def _fsum(parts: list):
    """The chunks' partial sums added with one rounding (:func:`math.fsum`, element-wise for arrays).

    The order of the chunks then does not matter and the combined sums carry
    only the chunks' own round-off (one chunk: the partial sum itself, bit for
    bit). On a flat likelihood ridge, where SQUAREM amplifies last-bit
    differences, this halves the streamed fit's distance from the in-memory
    one against adding the partial sums in turn (tests/test_detect_stream.py).
    """
    if len(parts) == 1:
        return parts[0]
    if np.ndim(parts[0]) == 0:
        return math.fsum(parts)
    stacked = np.stack(parts).reshape(len(parts), -1)
    return np.array([math.fsum(col) for col in stacked.T]).reshape(np.shape(parts[0]))


def _em_chunks(
    src, std, beta, s2, p, b, max_iter: int, tol: float, accelerate: bool = True, floor: float = _SIGMA2_FLOOR,
    outlier_weight: float = 1.0,
):
    """EM over a chunk source: :func:`_em`'s iteration with every row-wise sum taken chunk by chunk.

    Each M-step is two passes over the chunks: the E-step at the current
    parameters with the statistics :func:`_mstats` (they add over chunks),
    then, once the new coefficients are solved, :func:`_ru`; the E-step of the
    next parameters is the next pass. Nothing per row is kept between passes,
    so memory does not grow with the rows. ``std``: the standardisation
    ``(active, x_loc, x_scale, y_loc, y_scale, layout)`` applied to each raw
    chunk (:func:`_standardised`), or None for chunks that are already
    ``(Z, y)``. The iteration itself is :func:`~dpcore.detect.mixture_em._em_loop`.
    """
    ow = outlier_weight

    def estep(beta_, s2_, p_, b_):
        return _estep_pass(src, std, beta_, s2_, p_, b_, ow)

    def ru(theta, beta_new):
        return _fsum(src.map(chunk_pass, {"kind": "ru", "std": std, "theta": theta, "beta_new": beta_new}))

    return _em_loop(estep, ru, int(src.n_rows), beta, s2, p, b, max_iter, tol, accelerate, floor)


def _em(
    Z, y, beta, s2, p, b, max_iter: int, tol: float, accelerate: bool = True, floor: float = _SIGMA2_FLOOR,
    outlier_weight: float = 1.0,
):
    """Run EM from the given parameters on in-memory ``(Z, y)``; returns a dict with the final state.

    With ``accelerate`` the EM map is extrapolated by SQUAREM (Varadhan and
    Roland 2008, step length ``-||r|| / ||v||`` clipped to [-100, -1]) on
    :math:`(\\vec w, b_0, \\log\\sigma^2, \\operatorname{logit} p, \\log b)`: two EM steps,
    one extrapolated point, one stabilising EM step from it; the result is kept
    only if its log-likelihood is at least that of the two plain steps, so
    :math:`\\ell` still never decreases. ``n_iter`` counts M-steps (EM-map
    evaluations, 3 per accelerated cycle); plain steps finish the budget.
    ``floor``: lower bound of sigma^2 in standardised units (>= ``_SIGMA2_FLOOR``);
    ``outlier_weight``: see :func:`_mstep` (1 = the exact ECM).

    The one-chunk case of :func:`_em_chunks` (the same code streams a table in chunks).
    """
    return _em_chunks(ArrayChunks(Z, y), None, beta, s2, p, b, max_iter, tol, accelerate, floor, outlier_weight)
