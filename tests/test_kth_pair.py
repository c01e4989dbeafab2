"""The K-th (score, _row) pair by radix selection equals DuckDB's ORDER BY ... LIMIT 1 OFFSET K - 1 (issue 29)."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from dpcore.detect.kth_pair import kth_pair


def _write(path, rows, scores, group=7):
    t = pa.table({"_row": np.asarray(rows, dtype=np.int64), "score": np.asarray(scores, dtype=np.float64)})
    pq.write_table(t, path, row_group_size=group)


def _sql(path, K):
    got = duckdb.connect().execute(f"SELECT score, _row FROM read_parquet('{path}') ORDER BY score DESC, _row LIMIT 1 OFFSET {K - 1}").fetchone()
    return float(got[0]), int(got[1])


def _labels(path, pair):
    """Rows labelled by the threshold, as the detect step's SQL does."""
    return duckdb.connect().execute(f"SELECT list(_row ORDER BY _row) FROM read_parquet('{path}') "
                                    "WHERE score > ? OR (score = ? AND _row <= ?)", [pair[0], pair[0], pair[1]]).fetchone()[0]


@pytest.mark.parametrize("cap", [1, 3, 1 << 20])
def test_every_rank_of_a_tie_heavy_file_with_signed_zeros(tmp_path, cap):
    scores = [0.0, -0.0, 1.5, -1.5, 0.0, 1.5, -0.0, 2.0, -np.inf, np.inf, 1.5, -0.0, 5e-324, -5e-324, 0.0]
    rows = np.random.default_rng(1).permutation(len(scores)) * 3  # rows not in file order
    path = tmp_path / "s.parquet"
    _write(path, rows, scores, group=4)
    for K in range(1, len(scores) + 1):
        got = kth_pair(path, K, cap=cap)
        assert got == _sql(path, K), K
        assert len(_labels(path, got)) == K


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([-3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 7.25, 1e300, -1e-300]) | st.floats(-1e6, 1e6),
                min_size=1, max_size=60), st.data())
def test_random_files_match_duckdb(tmp_path_factory, scores, data):
    path = tmp_path_factory.mktemp("k") / "s.parquet"
    rows = data.draw(st.permutations(range(len(scores))))
    _write(path, rows, scores, group=data.draw(st.integers(1, 9)))
    K = data.draw(st.integers(1, len(scores)))
    cap = data.draw(st.sampled_from([1, 2, 5, 1 << 20]))
    assert kth_pair(path, K, cap=cap) == _sql(path, K)


def test_many_rows_one_score_selects_by_row_past_the_cap(tmp_path):
    n = 50_000
    rows = np.random.default_rng(2).permutation(n).astype(np.int64) * 5 + 3
    scores = np.where(np.arange(n) % 10 == 0, 2.0, 1.0)
    path = tmp_path / "s.parquet"
    _write(path, rows, scores, group=4096)
    for K in (1, n // 10, n // 10 + 1, 31_337, n):
        assert kth_pair(path, K, cap=100) == _sql(path, K)


def test_continuous_scores_at_scale(tmp_path):
    rng = np.random.default_rng(3)
    n = 300_000
    scores = rng.standard_cauchy(n)
    path = tmp_path / "s.parquet"
    _write(path, np.arange(n), scores, group=65_536)
    for K in (1, 17, 20_000, n):
        assert kth_pair(path, K) == _sql(path, K)


def test_a_nan_score_is_left_to_sql_and_bad_k_is_refused(tmp_path):
    path = tmp_path / "s.parquet"
    _write(path, [0, 1, 2], [1.0, np.nan, 0.5])
    assert kth_pair(path, 1) is None
    with pytest.raises(ValueError, match="K must be between 1"):
        kth_pair(path, 4)
    with pytest.raises(ValueError, match="K must be between 1"):
        kth_pair(path, 0)
