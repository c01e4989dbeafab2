"""dpcore.storage.row_sample: a uniform sample of a table's rows drawn from its row numbers, without a sort."""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

from dpcore.storage import row_sample
from dpcore.storage.row_sample import draw_size, sample_row_numbers


@pytest.fixture(scope="module")
def gappy():
    """A table of 1,400 distinct row numbers in [7, 3,006]: a third of the numbers are gaps, clustered at the end."""
    rng = np.random.default_rng(11)
    numbers = np.arange(7, 3007)
    keep = np.sort(np.concatenate([rng.choice(numbers[:2000], 1300, replace=False), numbers[2000::10]]))
    con = duckdb.connect()
    con.register("k", pd.DataFrame({"_row": keep.astype(np.int64), "x": np.arange(len(keep))}))
    con.execute('CREATE TABLE "t" AS SELECT * FROM k')
    con.unregister("k")
    yield con, keep
    con.close()


def _sample(con, keep, m, seed, max_draw=10**6):
    return sample_row_numbers(con, '"t"', len(keep), int(keep[0]), int(keep[-1]), m, seed, max_draw=max_draw)


def test_a_sample_is_m_distinct_rows_of_the_table_in_order_and_reproducible(gappy):
    con, keep = gappy
    a = _sample(con, keep, 300, 5)
    assert a.dtype == np.int64 and len(a) == 300 and np.all(np.diff(a) > 0) and np.isin(a, keep).all()
    assert np.array_equal(a, _sample(con, keep, 300, 5))
    assert not np.array_equal(a, _sample(con, keep, 300, 6))


def test_every_row_is_drawn_alike_gaps_or_not(gappy):
    """Inclusion counts over 400 seeds: a chi-square on 1,400 rows (1,399 degrees of freedom) far below what a
    bias towards low row numbers or towards rows beside gaps gives; rows in the sparse tail are drawn as often."""
    con, keep = gappy
    m, seeds = 200, 400
    counts = np.zeros(keep[-1] + 1)
    for seed in range(seeds):
        counts[_sample(con, keep, m, seed)] += 1
    got = counts[keep]
    expected = seeds * m / len(keep)
    chi2 = float(((got - expected) ** 2 / expected).sum())
    assert chi2 < len(keep) + 6 * np.sqrt(2 * len(keep)), chi2
    tail = keep >= 2007
    assert abs(got[tail].mean() - expected) < 0.1 * expected and abs(got[~tail].mean() - expected) < 0.1 * expected


def test_a_short_draw_is_drawn_again_and_stays_a_sample(gappy, monkeypatch):
    """A first draw holding fewer than m rows (forced: the margin made negative) is followed by a larger one."""
    con, keep = gappy
    monkeypatch.setattr(row_sample, "MARGIN_SD", -30.0)
    k = draw_size(len(keep), int(keep[0]), int(keep[-1]), 600)
    assert k * len(keep) / (keep[-1] - keep[0] + 1) < 600  # the first draw cannot be enough on average
    a = _sample(con, keep, 600, 1)
    assert len(a) == 600 and len(np.unique(a)) == 600 and np.isin(a, keep).all()


def test_a_draw_over_the_memory_returns_none_and_bad_arguments_are_refused(gappy):
    con, keep = gappy
    k = draw_size(len(keep), int(keep[0]), int(keep[-1]), 300)
    assert _sample(con, keep, 300, 1, max_draw=k - 1) is None
    assert _sample(con, keep, 300, 1, max_draw=k) is not None
    for m in (0, len(keep)):
        with pytest.raises(ValueError, match=r"m must lie in \[1, n\)"):
            _sample(con, keep, m, 1)
    with pytest.raises(ValueError, match="cannot lie within"):
        sample_row_numbers(con, '"t"', len(keep), 0, 10, 3, 1, max_draw=10**6)
