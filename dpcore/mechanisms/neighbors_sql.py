"""Ball counts and multiplicities of a few query points as one SQL aggregate in the warehouse.

Seed 001 (Asif et al., CCS'19), Section 2: for a query point ``q`` the
(beta, r)-anomaly query needs ``B_x(q, r)``, the number of records within
distance ``r`` of ``q`` (closed ball, duplicates and the query itself
counted), and ``x_q``, the number of records equal to ``q``. For the few query
points of an AIQ batch these are ``2 q`` filtered counts of ONE scan of the
validated table (:func:`table_ball_counts`): DuckDB evaluates them on its own
threads, next to the data, with no export, no Parquet file and no pandas
frame; memory is DuckDB's vector size, not the table.

Exactness
---------
The counts are the same numbers as :func:`dpcore.mechanisms.neighbors.ball_counts`
(KD-tree) and :func:`dpcore.mechanisms.neighbors.multiplicities` over the rows scaled by
:func:`dpcore.mechanisms.neighbors.scale_by_bounds`, because every floating-point value
that decides a pair is computed by the same IEEE-754 double operations, in the
same order:

* *Scaling.* ``(x - lo) / span`` with ``span = hi - lo`` computed in numpy
  (one subtraction, as ``scale_by_bounds`` does) and bound as a DOUBLE
  parameter; the column is cast to DOUBLE first (exact for the integer columns
  of the warehouse below 2^53, and the identity on DOUBLE columns: the same
  conversion as ``to_numpy(dtype=float)``). Columns of any other type
  (DECIMAL, ...) are refused (:func:`sql_countable`), so that no conversion
  whose rounding could differ is ever used.
* *Squared distance.* ``sum (s_j - q_j)^2`` in the order of scipy's
  ``sqeuclidean_distance_double`` (the point-to-point distance of ``cKDTree``
  for ``p = 2``, replicated by :func:`dpcore.mechanisms.neighbors._sqdist_ckdtree`):
  four partial sums over the coordinates ``j = k, k + 4, ...`` for the first
  ``4 floor(d / 4)`` coordinates, added left to right, then the remaining
  coordinates one by one (:func:`ckdtree_sqdist_sql`). A leading ``0 +`` of
  scipy's accumulators is dropped: adding ``+0.0`` to a square (never ``-0``)
  is exact.
* *Comparison.* ``d2 <= r * r`` with ``r * r`` computed in numpy, as cKDTree
  compares ``d^2`` with ``r^2`` (``p = 2``).
* *Multiplicities.* Equality of every scaled coordinate with the query's
  (``-0.0 = 0.0``, as numpy's ``==``).

DuckDB evaluates each arithmetic operator as one vectorised IEEE operation
and does not reassociate floating-point sums (checked in
``tests/test_neighbors_sql.py`` against numpy on random data, and by
``EXPLAIN``), and its builds use no fused multiply-add for separate operators.
So each pair is decided exactly as the KD-tree decides every pair it checks
by its point-to-point distance -- the standard the ``"blocked"`` method of
:func:`~dpcore.mechanisms.neighbors.ball_counts` meets (its Notes) -- and the tests
compare both paths on random data and on tie-heavy integer data with many
points exactly at ``r`` and at ``r`` plus or minus one ulp.

Nothing here is private: the counts are exact statistics of the data and stay
internal (DESIGN.md rule 6); :class:`dpcore.mechanisms.aiq.AnomalyIdentification`
turns them into private answers.
"""
from __future__ import annotations

import numpy as np

from .neighbors import _as_matrix, _check_radius

__all__ = ["ckdtree_sqdist_sql", "sql_countable", "table_ball_counts"]

#: Column types whose CAST to DOUBLE is the conversion numpy applies (``to_numpy(dtype=float)``):
#: integers (exact below 2^53, round to nearest above, as numpy) and floating-point columns.
_EXACT_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
                "FLOAT", "DOUBLE")


def ckdtree_sqdist_sql(diffs: list[str]) -> str:
    """SQL of ``sum(diff_j ** 2)`` in the summation order of cKDTree's point-to-point distance.

    Parameters
    ----------
    diffs : list of str
        SQL expressions of the coordinate differences ``s_j - q_j`` (``d >= 1``).

    Returns
    -------
    str
        Fully parenthesised: the partial sums ``acc_k = sq_k + sq_{k+4} + ...``
        over the first ``4 floor(d / 4)`` coordinates, ``((acc_0 + acc_1) +
        acc_2) + acc_3``, then ``+ sq_j`` for each remaining coordinate, left to
        right (:func:`dpcore.mechanisms.neighbors._sqdist_ckdtree`; seed 001, Section 2's
        Euclidean ``B_x(i, r)``).
    """
    if not diffs:
        raise ValueError("at least one coordinate is needed")
    sq = [f"({e}) * ({e})" for e in diffs]
    d = len(sq)
    full = 4 * (d // 4)
    s = None
    if full:
        acc = []
        for k in range(4):
            a = f"({sq[k]})"
            for j in range(k + 4, full, 4):
                a = f"({a} + ({sq[j]}))"
            acc.append(a)
        s = f"((({acc[0]} + {acc[1]}) + {acc[2]}) + {acc[3]})"
    for j in range(full, d):
        s = f"({sq[j]})" if s is None else f"({s} + ({sq[j]}))"
    return s


def sql_countable(column_types: dict[str, str]) -> bool:
    """Whether every column's SQL type converts to DOUBLE exactly as numpy converts it (see the module notes)."""
    return all(str(t).upper() in _EXACT_TYPES for t in column_types.values())


def table_ball_counts(query, table: str, columns: list[str], lows, highs, queries, r, *,
                      cap: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``B_x(q, r)`` and ``x_q`` of a few query points over a warehouse table, in one SQL aggregate.

    Seed 001 (Asif et al.), Section 2: the closed ball of radius ``r`` in the
    coordinates scaled by the public bounds, counting duplicates and the
    query itself; the same numbers as :func:`dpcore.mechanisms.neighbors.ball_counts`
    (``cap`` included) and :func:`dpcore.mechanisms.neighbors.multiplicities` over the
    scaled rows (module notes).

    Parameters
    ----------
    query : callable
        ``query(sql, params) -> list of tuples`` (e.g. :meth:`dpcore.storage.warehouse.Warehouse.query`).
    table : str
        Qualified table name (SQL, already quoted).
    columns : list of str
        The numeric attributes, in the order of the query points' coordinates;
        their types must pass :func:`sql_countable` (the caller checks).
    lows, highs : array_like, shape (d,)
        Public bounds (as for :func:`~dpcore.mechanisms.neighbors.scale_by_bounds`).
    queries : array_like, shape (q, d)
        Query points, already scaled by the same bounds.
    r : float
        Radius ``>= 0``.
    cap : int or None
        ``min(B, cap)`` in the first result (the exact counts are the third).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        int64 ``b`` (saturated at ``cap`` when given), ``xi`` and the exact
        (unsaturated) ``b``, shape ``(q,)``. Internal only.

    Raises
    ------
    ValueError
        Malformed arguments, or a row with a NULL, NaN or infinite scaled
        value (the same refusal as the in-memory path's argument check; the
        message says nothing about the data beyond that).
    """
    Q = _as_matrix(queries, "queries", ncols=len(columns))
    r = _check_radius(r)
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1):
        raise ValueError(f"cap must be None or an int >= 1, got {cap!r}")
    lo = np.asarray(lows, dtype=np.float64).reshape(-1)
    hi = np.asarray(highs, dtype=np.float64).reshape(-1)
    d = len(columns)
    if lo.shape != (d,) or hi.shape != (d,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(f"lows and highs must be {d} finite numbers each")
    if not np.all(hi > lo):
        raise ValueError("public bounds need highs > lows")
    nq = Q.shape[0]
    b = np.zeros(nq, dtype=np.int64)
    xi = np.zeros(nq, dtype=np.int64)
    if nq == 0:
        return b, xi, b.copy()
    span = hi - lo  # the same subtraction as scale_by_bounds
    params: list[float] = []

    def param(v: float) -> str:
        params.append(float(v))
        return f"${len(params)}::DOUBLE"

    scaled = [f'(CAST("{c}" AS DOUBLE) - {param(lo[j])}) / {param(span[j])} AS _s{j}' for j, c in enumerate(columns)]
    r2 = param(r * r)  # cKDTree compares d^2 <= r * r (p = 2)
    bad = " OR ".join(f"_s{j} IS NULL OR NOT isfinite(_s{j})" for j in range(d))
    aggs = [f"count(*) FILTER (WHERE {bad})"]
    for i in range(nq):
        qp = [param(Q[i, j]) for j in range(d)]
        d2 = ckdtree_sqdist_sql([f"_s{j} - {qp[j]}" for j in range(d)])
        eq = " AND ".join(f"_s{j} = {qp[j]}" for j in range(d))
        aggs += [f"count(*) FILTER (WHERE {d2} <= {r2})", f"count(*) FILTER (WHERE {eq})"]
    sql = f"SELECT {', '.join(aggs)} FROM (SELECT {', '.join(scaled)} FROM {table})"
    row = query(sql, params)[0]
    if int(row[0]):
        raise ValueError("the table holds a NULL, NaN or infinite value in the counted attributes; "
                         "clean or quarantine them first")
    exact = np.array(row[1::2], dtype=np.int64)
    xi = np.array(row[2::2], dtype=np.int64)
    return (exact if cap is None else np.minimum(exact, int(cap))), xi, exact
