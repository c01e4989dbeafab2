"""Isotonic regression under L1 and L2 (post-processing, no privacy cost).

Slides "Unattributed Histogram H_g" and "Cumulative Sum Histograms H_c",
step 3: ``argmin ||ỹ - x||_p^p`` subject to ``x`` non-decreasing (and bounds),
for ``p = 1`` or ``p = 2``; solver "pool-adjacent violators (PAV)
[BBBB, RW+68]".

* **L2**: ``scipy.optimize.isotonic_regression`` (PAV with block means).
* **L1**: a pool-adjacent-violators algorithm whose pooled value is the block
  *median* (lower median), implemented here with two heaps per block and
  small-into-large merging (``O(n log^2 n)`` worst case).

Bounds ``lo <= x <= hi`` are imposed by clipping the unbounded solution: for
a separable convex loss the box-constrained isotonic regression equals the
clipped unconstrained one (the clipped vector is still monotone, and on every
block the clipped value is the constrained minimiser of that block's loss).

These functions see only noisy measurements: they are post-processing.
"""
from __future__ import annotations

import heapq

import numpy as np
from dpcore.runtime.lazy_modules import lazy_module

_optimize = lazy_module("scipy.optimize")  # imported on first use (dpr spec check / plan never load scipy)

__all__ = ["isotonic_l1", "isotonic_l2", "isotonic", "blocks_to_sizes"]


def isotonic_l2(y, lo: float | None = None, hi: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares non-decreasing fit (block means), optionally clipped.

    Parameters
    ----------
    y : array_like of float
        Noisy values.
    lo, hi : float, optional
        Bounds on the fit.

    Returns
    -------
    x : numpy.ndarray
        Fitted float values.
    blocks : numpy.ndarray
        Block boundaries ``[0, b1, ..., n]``: the PAV partition (slide
        "Initial Variance Estimation": S_i is the block containing i).
    """
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        return y.copy(), np.zeros(1, dtype=np.int64)
    res = _optimize.isotonic_regression(y, increasing=True)
    x = np.clip(res.x, lo, hi) if (lo is not None or hi is not None) else res.x
    return x, np.asarray(res.blocks, dtype=np.int64)


def isotonic_l1(y, lo: float | None = None, hi: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Least-absolute-deviations non-decreasing fit by median-based PAV.

    Scan left to right keeping a stack of blocks, each with its lower median;
    while the last block's median is below the previous block's median, merge
    the two (their median is recomputed from two heaps: a max-heap holding the
    lower half and a min-heap the upper half; the smaller block's values are
    pushed into the larger one's heaps).  Every block value is a median of its
    block's data, i.e. a minimiser of the block's L1 loss, and the final block
    values are non-decreasing: the standard PAV optimality argument
    (Robertson, Wright & Dykstra) gives an L1-optimal fit.

    Parameters
    ----------
    y : array_like of float
        Noisy values.
    lo, hi : float, optional
        Bounds on the fit (applied by clipping).

    Returns
    -------
    x : numpy.ndarray
        Fitted float values (each a data value or a bound).
    blocks : numpy.ndarray
        Block boundaries ``[0, b1, ..., n]``.
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n == 0:
        return y.copy(), np.zeros(1, dtype=np.int64)
    vals = y.tolist()
    starts: list[int] = []
    meds: list[float] = []
    los: list[list[float]] = []   # max-heaps (negated): lower half, len(lo) in {len(hi), len(hi)+1}
    his: list[list[float]] = []   # min-heaps: upper half
    push, pop = heapq.heappush, heapq.heappop
    for i, v in enumerate(vals):
        lo_h, hi_h, med = [-v], [], v
        start = i
        while meds and meds[-1] > med:
            plo, phi = los.pop(), his.pop()
            meds.pop()
            start = starts.pop()
            # merge the smaller block into the larger one
            if len(plo) + len(phi) < len(lo_h) + len(hi_h):
                src_lo, src_hi = plo, phi
            else:
                src_lo, src_hi, lo_h, hi_h = lo_h, hi_h, plo, phi
            for w in [-a for a in src_lo] + src_hi:
                if w <= -lo_h[0]:
                    push(lo_h, -w)
                else:
                    push(hi_h, w)
                if len(lo_h) > len(hi_h) + 1:
                    push(hi_h, -pop(lo_h))
                elif len(hi_h) > len(lo_h):
                    push(lo_h, -pop(hi_h))
            med = -lo_h[0]
        starts.append(start)
        meds.append(med)
        los.append(lo_h)
        his.append(hi_h)
    bounds = np.array(starts + [n], dtype=np.int64)
    x = np.repeat(np.array(meds, dtype=np.float64), np.diff(bounds))
    if lo is not None or hi is not None:
        x = np.clip(x, lo, hi)
    return x, bounds


def isotonic(y, loss: str, lo: float | None = None, hi: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Dispatch to :func:`isotonic_l1` (``loss="l1"``) or :func:`isotonic_l2` (``"l2"``)."""
    if loss == "l1":
        return isotonic_l1(y, lo, hi)
    if loss == "l2":
        return isotonic_l2(y, lo, hi)
    raise ValueError(f"loss must be 'l1' or 'l2', got {loss!r}")


def blocks_to_sizes(blocks: np.ndarray) -> np.ndarray:
    """Per position, the size ``|S_i|`` of the PAV block containing it."""
    lens = np.diff(np.asarray(blocks, dtype=np.int64))
    return np.repeat(lens, lens)
