"""Under a small cap DuckDB's cached pages are given back after every warehouse operation (issue 29, goal 4).

Real DuckDB files: after a query that scans a table of about 48 MiB, the pages DuckDB keeps
(``duckdb_memory()``'s ``BASE_TABLE``) are gone before the next operation under ``DPR_MEMORY_LIMIT=512MiB``
and kept under the 2 GiB default; query results are the same either way; an operation run inside a
stream of the same file (:meth:`~dpcore.storage.warehouse.Warehouse.iter_batches`) does not evict under the stream,
which still yields every row.
"""
from __future__ import annotations

import pytest

from dpcore.runtime.chunks import DEFAULT_LIMIT, EVICT_BELOW, EVICT_TO, MemoryBudget
from dpcore.storage.warehouse import Warehouse

MiB = 2**20
ROWS = 2_000_000


def _cached(wh: Warehouse) -> int:
    return int(wh.query("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                        "WHERE tag = 'BASE_TABLE'")[0][0])


def _warehouse(tmp_path, limit: int | None) -> Warehouse:
    wh = Warehouse(tmp_path / f"wh-{limit}.duckdb", memory=MemoryBudget(limit))
    wh.run(lambda con: con.execute(
        f"CREATE TABLE internal.t AS SELECT i, i * 0.5 AS x, hash(i) AS h FROM range({ROWS}) r(i)"), transaction=True)
    wh.let_go()  # a fresh database instance: nothing cached yet
    return wh


def test_the_policy_follows_the_cap():
    assert MemoryBudget(512 * MiB).evicts_between_operations
    assert not MemoryBudget(EVICT_BELOW).evicts_between_operations
    assert not MemoryBudget(None).evicts_between_operations and MemoryBudget(None).effective_limit == DEFAULT_LIMIT


@pytest.mark.parametrize("limit, evicts", [(512 * MiB, True), (None, False)])
def test_cached_pages_are_given_back_after_an_operation_under_a_small_cap(tmp_path, limit, evicts):
    wh = _warehouse(tmp_path, limit)
    total = wh.query("SELECT sum(i), sum(x), count(DISTINCT h % 1000) FROM internal.t")[0]
    assert total == (ROWS * (ROWS - 1) // 2, ROWS * (ROWS - 1) / 4, 1000)
    cached = _cached(wh)
    if evicts:
        assert cached <= EVICT_TO, cached / MiB
    else:
        assert cached > 16 * MiB, cached / MiB
    setting = wh.query("SELECT value FROM duckdb_settings() WHERE name = 'memory_limit'")[0][0]
    assert setting == f"{wh.memory.duckdb_bytes / MiB:.1f} MiB", setting  # the budget's limit is back
    wh.let_go()


def test_no_eviction_under_an_open_stream_and_the_stream_is_whole(tmp_path):
    wh = _warehouse(tmp_path, 512 * MiB)
    seen = inner = 0
    for batch in wh.iter_batches("SELECT i FROM internal.t ORDER BY i", rows=250_000):
        seen += batch.num_rows
        inner += wh.query("SELECT count(*) FROM internal.t WHERE i < 10")[0][0]  # nested: the stream stays open
    assert seen == ROWS and inner == 10 * (ROWS // 250_000)
    assert _cached(wh) <= EVICT_TO  # the stream's end is the outermost operation's: evicted then
    wh.let_go()
