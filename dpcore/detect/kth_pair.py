"""The K-th largest ``(score, _row)`` pair of a score file, exact, in a few streamed passes (issue 29).

Seed 004, slide "Parameters Learning": a filter labels its top ``K`` records,
ties by lower row (:class:`~dpcore.detect.robust_em.RobustRegressionDetector`).
The streamed detector writes every row's score to a private Parquet file
(:func:`dpcore.detect.streaming.fit_partitions`), and the detect step labels a
row when its pair is at or above the ``K``-th pair in descending score,
ascending row (:func:`dpcore.steps.detect.store_streamed_detection`). DuckDB's
``ORDER BY score DESC, _row LIMIT 1 OFFSET K - 1`` finds that pair with a heap
of ``K`` rows (at 100x the demo: 1.5 and 2.3 million rows, the largest part of
the store). :func:`kth_pair` finds the same pair by radix selection:

1. each score ``s`` (``-0.0`` read as ``0.0``, as SQL compares them) maps to a
   64-bit key whose unsigned order is the order of ``-s`` (:func:`_descending_keys`);
2. the ``j``-th smallest key is found 16 bits at a time: one pass counts the
   next 16 bits of the keys that share the bits found so far
   (``np.bincount`` over 65,536 buckets), the bucket holding the ``j``-th key is
   kept; once that bucket holds at most ``cap`` keys, one more pass collects
   them and sorts them (usually after the first pass);
3. the candidates are collected with their rows and sorted by (key, row), so
   ties need no pass of their own; only when more than ``cap`` rows share the
   ``K``-th score itself is the row at the rank left found the same way on
   the row numbers.

Memory: one chunk of the file and at most ``cap`` candidates; passes: usually
two (the score column, then the score and ``_row`` columns). Exact: the same pair as the
SQL (tests/test_kth_pair.py compares them on ties, signed zeros and random
scores). A score file with a NaN is not handled here (None: the caller asks
DuckDB). Internal: scores and rows are private and never leave this function
but as its answer; nothing is logged.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np

__all__ = ["kth_pair"]

_DIGIT = 16
_BUCKETS = 1 << _DIGIT
#: Most candidates collected and sorted in memory (16 MiB of keys and rows).
CAP = 1 << 20
_SIGN = np.uint64(1 << 63)


class _NaNScore(Exception):
    """A score file holds a NaN (not ordered here)."""


def _descending_keys(scores: np.ndarray) -> np.ndarray:
    """Unsigned 64-bit keys in the order of descending score (``-0.0`` and ``0.0`` equal).

    The float's bits with every bit flipped for a negative score and the sign
    bit flipped for a positive one give keys in ascending score; their
    complement, in descending score.
    """
    bits = (np.asarray(scores, dtype=np.float64) + 0.0).view(np.uint64)  # + 0.0: -0.0 becomes 0.0
    flip = np.uint64(0) - (bits >> np.uint64(63))  # all ones for a negative score, else 0
    flip |= _SIGN
    np.invert(flip, out=flip)
    flip ^= bits
    return flip


def _in_bucket(v: np.ndarray, prefix: int, bits: int) -> np.ndarray:
    """Whether each key's top ``bits`` bits are ``prefix`` (``bits`` >= 1)."""
    return (v >> np.uint64(64 - bits)) == np.uint64(prefix)


def _narrow(stream: Callable[[], Iterator[np.ndarray]], j: int, cap: int) -> tuple[int, int, int, int]:
    """Histogram passes: the bucket of keys holding the ``j``-th smallest (1-based) key ``stream()`` yields.

    Each pass counts the next 16 bits of the keys in the bucket found so far
    (65,536 buckets) and keeps the one where the rank falls, until it holds at
    most ``cap`` keys or every bit is fixed. ``stream`` is called once per pass
    and must yield the same keys each time; requires ``1 <= j <=`` their number.

    Returns
    -------
    prefix, bits : int
        The bucket: the keys whose top ``bits`` bits are ``prefix``.
    below : int
        How many keys are smaller than every key of the bucket.
    n : int
        How many keys the bucket holds.
    """
    prefix, bits, below = 0, 0, 0
    while True:
        shift = np.uint64(64 - bits - _DIGIT)
        counts = np.zeros(_BUCKETS, dtype=np.int64)
        for v in stream():
            if bits:
                v = v[_in_bucket(v, prefix, bits)]
            counts += np.bincount(((v >> shift) & np.uint64(_BUCKETS - 1)).astype(np.intp), minlength=_BUCKETS)
        cum = np.cumsum(counts)
        d = int(np.searchsorted(cum, j - below))  # first bucket whose cumulative count reaches the rank
        below += int(cum[d - 1]) if d else 0
        prefix, bits = (prefix << _DIGIT) | d, bits + _DIGIT
        if counts[d] <= cap or bits == 64:
            return prefix, bits, below, int(counts[d])


def _select(stream: Callable[[], Iterator[np.ndarray]], j: int, cap: int) -> tuple[int, int]:
    """The ``j``-th smallest (1-based) of the uint64 values ``stream()`` yields, and how many are smaller.

    :func:`_narrow`, then the bucket's values collected and sorted (unless every bit is fixed: one value).
    """
    prefix, bits, below, _n = _narrow(stream, j, cap)
    if bits == 64:
        return prefix, below
    cand = np.sort(np.concatenate([v[_in_bucket(v, prefix, bits)] for v in stream()]))
    value = int(cand[j - below - 1])
    return value, below + int(np.searchsorted(cand, np.uint64(value), side="left"))


def _score_of_key(key: int) -> float:
    """The score whose :func:`_descending_keys` key is ``key``."""
    asc = ~np.array([key], dtype=np.uint64)
    return float(np.where(asc & _SIGN, asc & ~_SIGN, ~asc).view(np.float64)[0])


def kth_pair(path: str | Path, K: int, cap: int = CAP) -> tuple[float, int] | None:
    """The ``K``-th ``(score, _row)`` of a score file in descending score, ascending row.

    Parameters
    ----------
    path : path
        Parquet file with float64 ``score`` and int64 ``_row`` (non-negative) columns.
    K : int
        ``1 <= K <=`` the file's rows.
    cap : int
        Most candidates sorted in memory.

    Returns
    -------
    (float, int) or None
        The pair ``ORDER BY score DESC, _row LIMIT 1 OFFSET K - 1`` returns
        (``0.0`` for a zero score); None when a score is NaN.

    Raises
    ------
    ValueError
        ``K`` outside ``1..rows`` or a negative ``_row``.
    """
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    n = pf.metadata.num_rows
    if not 1 <= int(K) <= n:
        raise ValueError("K must be between 1 and the score file's number of rows")  # K and rows are private

    def keys() -> Iterator[np.ndarray]:
        for g in range(pf.num_row_groups):
            s = pf.read_row_group(g, columns=["score"]).column(0).to_numpy()
            if np.isnan(s).any():
                raise _NaNScore
            yield _descending_keys(s)

    pairs = _pair_select(pf, keys, int(K), cap)
    if pairs is None:
        return None
    key, row, above = pairs
    if row is None:  # more than ``cap`` rows share the K-th score: its rows selected by number

        def tied_rows() -> Iterator[np.ndarray]:
            for g in range(pf.num_row_groups):
                t = pf.read_row_group(g, columns=["score", "_row"])
                rows = t.column("_row").to_numpy()
                if rows.size and rows.min() < 0:
                    raise ValueError("_row must be non-negative")
                yield rows[_descending_keys(t.column("score").to_numpy()) == np.uint64(key)].astype(np.uint64)

        row, _ = _select(tied_rows, int(K) - above, cap)
    return _score_of_key(key), int(row)


def _pair_select(pf, keys, K: int, cap: int):
    """The ``K``-th (key, row) in ascending key, ascending row: ``(key, row, above)``, or ``(key, None, above)``.

    ``above`` counts the keys smaller than the K-th. Histogram passes over
    the keys narrow 16 bits at a time to the bucket holding the K-th
    (:func:`_narrow`); once it holds at most ``cap`` rows, one pass collects their keys and rows and
    sorts them (ties by row), so ties need no pass of their own. ``row`` is
    None when more than ``cap`` rows share the K-th key itself. None: a NaN score.
    """
    try:
        prefix, bits, below, n = _narrow(keys, K, cap)
    except _NaNScore:
        return None
    if n > cap:
        return prefix, None, below
    ks, rs = [], []
    for g in range(pf.num_row_groups):
        t = pf.read_row_group(g, columns=["score", "_row"])
        v = _descending_keys(t.column("score").to_numpy())
        sel = _in_bucket(v, prefix, bits)
        ks.append(v[sel])
        rs.append(t.column("_row").to_numpy()[sel])
    k, r = np.concatenate(ks), np.concatenate(rs)
    if r.size and r.min() < 0:
        raise ValueError("_row must be non-negative")
    order = np.lexsort((r, k))
    i = order[K - below - 1]
    key = int(k[i])
    return key, int(r[i]), below + int(np.count_nonzero(k < np.uint64(key)))
