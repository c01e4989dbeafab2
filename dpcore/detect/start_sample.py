r"""The start sample of the mixture regression (issue 21): which rows the scaling and the robust start see.

Seed 004 part 1 ("Detecting Outliers with Correlated Measures"), slide
"Parameters Learning": EM is local, so :class:`~dpcore.detect.robust_em.RobustRegressionDetector`
starts it from a robust fit (:mod:`dpcore.detect.robust_start`) and
standardises :math:`y` and the contexts first; both need the rows in memory.
On a table larger than memory they use the *start sample*: all rows when
:math:`n \le` ``start_sample`` (default :data:`START_SAMPLE`), else
``start_sample`` rows drawn uniformly without replacement with the
detector's ``random_state`` (:func:`_start_sample_rows`); EM then runs on all
rows in chunks (:mod:`dpcore.detect.em_passes`; the module docstring of
:mod:`dpcore.detect.robust_em`, section "Chunks").

The draw is a keyed hash of the row positions (SplitMix64, Steele, Lea and
Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): the
chosen rows depend only on :math:`n`, the sample size and the key, never on
the data or the chunk size, and memory is :math:`O(m)`, not :math:`O(n)`.
Split out of :mod:`dpcore.detect.robust_em` (issue 49). The rows are
positions in a private table: internal only, nothing here logs or warns.
"""
from __future__ import annotations

import numpy as np

__all__ = ["START_SAMPLE"]

#: Default rows of the start sample (``start_sample``): the robust start and the scaling see at most this many
#: rows, drawn with ``random_state``; the EM then runs on all rows in chunks (issue 21).
START_SAMPLE = 500_000
#: Row positions hashed per block when drawing the start sample.
_SAMPLE_BLOCK = 1 << 20


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser (Steele, Lea and Flood 2014) on uint64: a bijection that scrambles the bits."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _start_sample_rows(n: int, m: int, key: int) -> np.ndarray:
    """Sorted positions of ``m`` of ``n`` rows, uniformly at random without replacement, in O(m) memory.

    Each position ``i`` gets the pseudo-random key
    ``splitmix64(splitmix64(i XOR k1) XOR k2)`` with ``k1 = splitmix64(key)``,
    ``k2 = splitmix64(k1)`` (distinct for distinct positions: the finaliser is a
    bijection; two keyed rounds, so that samples of nearby keys are not
    translates of one another) and the
    ``m`` smallest keys win: a uniform ``m``-subset for a random ``key``
    (the detector draws it from ``random_state``). The choice depends only
    on ``n``, ``m`` and ``key``, never on the data or the chunk size; positions
    are hashed in blocks of :data:`_SAMPLE_BLOCK`, keeping the best ``m`` so far.

    Parameters
    ----------
    n : int
        Rows of the table.
    m : int
        Rows to draw, ``1 <= m <= n``.
    key : int
        ``0 <= key < 2**64``.

    Returns
    -------
    ndarray of int64, shape (m,)
        The drawn positions, ascending.
    """
    k1 = _splitmix64(np.array([key], dtype=np.uint64))
    k2 = _splitmix64(k1)
    best_keys = np.empty(0, dtype=np.uint64)
    best_rows = np.empty(0, dtype=np.int64)
    for a in range(0, n, _SAMPLE_BLOCK):
        rows = np.arange(a, min(n, a + _SAMPLE_BLOCK), dtype=np.int64)
        keys = _splitmix64(_splitmix64(rows.astype(np.uint64) ^ k1) ^ k2)
        keys = np.concatenate([best_keys, keys])
        rows = np.concatenate([best_rows, rows])
        if keys.size > m:
            keep = np.argpartition(keys, m - 1)[:m]
            keys, rows = keys[keep], rows[keep]
        best_keys, best_rows = keys, rows
    return np.sort(best_rows)
