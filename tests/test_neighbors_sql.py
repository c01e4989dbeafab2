"""The AIQ counts without a KD-tree equal today's KD-tree counts exactly (issue 29).

Two new paths, both against :func:`dpcore.mechanisms.neighbors.ball_counts` (KD-tree,
saturated or not) and :func:`dpcore.mechanisms.neighbors.multiplicities` over the rows
scaled by :func:`dpcore.mechanisms.neighbors.scale_by_bounds` (seed 001, Section 2):

* :func:`dpcore.mechanisms.neighbors.few_query_counts` (brute force per query, numpy);
* :func:`dpcore.mechanisms.neighbors_sql.table_ball_counts` (one DuckDB aggregate over
  the unscaled table, scaling and distances in SQL).

On random data, and on tie-heavy integer data where many pairs lie exactly at
distance ``r`` and the radius is also moved one ulp either side, d = 1..6,
with and without the saturation cap.
"""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.mechanisms.neighbors import (
    _sqdist_ckdtree, ArrayChunks, ball_counts, chunked_ball_counts, few_query_counts, multiplicities, scale_by_bounds,
)
from dpcore.mechanisms.neighbors_sql import ckdtree_sqdist_sql, sql_countable, table_ball_counts


def kdtree_counts(raw, queries_raw, lows, highs, r, cap):
    """Today's path: scale in numpy, count with the KD-tree (saturated at cap), multiplicities by equality."""
    X = scale_by_bounds(raw, lows, highs)
    Q = scale_by_bounds(queries_raw, lows, highs)
    return ball_counts(X, Q, r, cap=cap, method="kdtree"), multiplicities(X, Q), X, Q


def sql_counts(raw, Q, lows, highs, r, cap, dtype="DOUBLE"):
    """The SQL path over a DuckDB table holding the unscaled rows (columns of ``dtype``)."""
    d = raw.shape[1]
    cols = [f"a{j}" for j in range(d)]
    con = duckdb.connect()
    con.register("_raw", pd.DataFrame(raw, columns=cols))
    con.execute(f"CREATE TABLE t AS SELECT {', '.join(f'CAST({c} AS {dtype}) AS {c}' for c in cols)} FROM _raw")
    b, xi, exact = table_ball_counts(lambda sql, p: con.execute(sql, p).fetchall(), "t", cols, lows, highs, Q, r,
                                     cap=cap)
    con.close()
    return b, xi, exact


def check_all_paths(raw, queries_raw, lows, highs, r, cap, dtype="DOUBLE"):
    want_b, want_xi, X, Q = kdtree_counts(raw, queries_raw, lows, highs, r, cap)
    fb, fxi = few_query_counts(X, Q, r)
    np.testing.assert_array_equal(fb if cap is None else np.minimum(fb, cap), want_b)
    np.testing.assert_array_equal(fxi, want_xi)
    np.testing.assert_array_equal(fb, ball_counts(X, Q, r, method="kdtree"))  # exact, unsaturated
    cb, cxi = chunked_ball_counts(ArrayChunks.of(X, max(1, len(X) // 3)), Q, r, cap=cap)
    np.testing.assert_array_equal(cb, want_b)
    np.testing.assert_array_equal(cxi, want_xi)
    sb, sxi, sexact = sql_counts(raw, Q, lows, highs, r, cap, dtype)
    np.testing.assert_array_equal(sb, want_b)
    np.testing.assert_array_equal(sxi, want_xi)
    np.testing.assert_array_equal(sexact, fb)
    return fb


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 6), n=st.integers(1, 300), nq=st.integers(1, 8), seed=st.integers(0, 2**32 - 1),
       r=st.floats(0.0, 0.6), capped=st.booleans())
def test_random_data_all_paths_equal_the_kdtree(d, n, nq, seed, r, capped):
    rng = np.random.default_rng(seed)
    lows = rng.uniform(-50, 0, size=d)
    highs = lows + rng.uniform(0.3, 80, size=d)
    raw = lows + (highs - lows) * rng.random((n, d))
    queries_raw = np.vstack([raw[rng.integers(0, n, size=nq)], lows + (highs - lows) * rng.random((2, d))])
    check_all_paths(raw, queries_raw, lows, highs, r, 7 if capped else None)


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("capped", [False, True])
@pytest.mark.parametrize("bounds", ["unit", "dyadic", "decimal"])
def test_tie_heavy_integer_data_at_r_and_one_ulp_either_side(d, capped, bounds):
    rng = np.random.default_rng(100 + d)
    m = 4 if d <= 2 else 2 if d <= 4 else 1  # a dense grid in every d: many duplicates, many pairs at distance r
    raw = rng.integers(-m, m + 1, size=(800, d)).astype(float)
    queries_raw = np.vstack([raw[:5], np.zeros((1, d)), np.full((1, d), 9.0)])
    lows, highs = {"unit": (np.zeros(d), np.ones(d)),              # scaling is the identity: distances exact
                   "dyadic": (np.full(d, -8.0), np.full(d, 8.0)),  # exact scaling by 1/16
                   "decimal": (np.full(d, -5.0), np.full(d, 5.0))}[bounds]  # rounded scaling by 1/10
    unit = 1.0 / float(highs[0] - lows[0])
    at_r = 0
    for k in (1, 2, 3, 5):  # 3-4-5 and the axis-aligned neighbours lie exactly at these radii (in units)
        r0 = k * unit
        for r in (r0, np.nextafter(r0, 0.0), np.nextafter(r0, np.inf)):
            fb = check_all_paths(raw, queries_raw, lows, highs, float(r), 9 if capped else None)
            at_r += int(fb.sum())
    X = scale_by_bounds(raw, lows, highs)
    Q = scale_by_bounds(queries_raw, lows, highs)
    d2 = np.stack([_sqdist_ckdtree(np.repeat(q[None], len(X), 0), X) for q in Q])
    ties = sum(int(np.count_nonzero(d2 == (k * unit) * (k * unit))) for k in (1, 2, 3, 5))
    assert at_r > 0 and (ties > 20 or bounds == "decimal")  # the pairs exactly at r the test is about


def test_minus_zero_and_integer_columns():
    raw = np.array([[-0.0, 1.0], [0.0, 1.0], [0.0, 2.0], [3.0, 1.0]])
    lows, highs = np.zeros(2), np.array([4.0, 4.0])
    q = np.array([[0.0, 1.0], [-0.0, 1.0]])
    check_all_paths(raw, q, lows, highs, 0.25, None)
    raw_i = np.array([[0, 1], [0, 1], [0, 2], [3, 1], [2**40 + 1, 5]], dtype=float)
    b, xi, _ = sql_counts(raw_i, scale_by_bounds(np.array([[0.0, 1.0]]), lows, highs), lows, highs, 0.25, None,
                          dtype="BIGINT")
    want_b, want_xi, _, _ = kdtree_counts(raw_i, np.array([[0.0, 1.0]]), lows, highs, 0.25, None)
    np.testing.assert_array_equal(b, want_b)
    np.testing.assert_array_equal(xi, want_xi)


def test_sql_sum_order_is_ckdtree_order():
    rng = np.random.default_rng(5)
    for d in range(1, 10):
        A = rng.normal(size=(2000, d)) * rng.choice([1e-3, 1.0, 1e3], size=(2000, d))
        B = rng.normal(size=(1, d))
        con = duckdb.connect()
        con.register("t", pd.DataFrame(A, columns=[f"a{j}" for j in range(d)]))
        expr = ckdtree_sqdist_sql([f"a{j} - {float(B[0, j])!r}::DOUBLE" for j in range(d)])
        got = con.execute(f"SELECT {expr} FROM t").fetchnumpy()
        np.testing.assert_array_equal(next(iter(got.values())), _sqdist_ckdtree(A, np.repeat(B, len(A), 0)))
        con.close()


def test_refusals():
    assert sql_countable({"a": "DOUBLE", "b": "BIGINT", "c": "INTEGER"})
    assert not sql_countable({"a": "DOUBLE", "b": "DECIMAL(18,3)"})
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1.0::DOUBLE), ('nan'::DOUBLE)) v(a)")
    with pytest.raises(ValueError, match="NULL, NaN or infinite"):
        table_ball_counts(lambda s, p: con.execute(s, p).fetchall(), "t", ["a"], [0.0], [2.0], [[0.5]], 0.1)
    b, xi, exact = table_ball_counts(lambda s, p: con.execute(s, p).fetchall(), "t", ["a"], [0.0], [2.0],
                                     np.zeros((0, 1)), 0.1)
    assert b.shape == xi.shape == exact.shape == (0,)
