"""The memory cap (DPR_MEMORY_LIMIT) and chunked reads from the warehouse (issue 21)."""
import duckdb
import numpy as np
import pandas as pd
import pytest

from dpcore.runtime.chunks import DEFAULT_LIMIT, MemoryBudget, MemoryLimitError, chunk_bounds, parse_memory
from dpcore.storage.warehouse import Warehouse


@pytest.mark.parametrize("text, expected", [
    ("4GB", 4 * 1000**3), ("512MiB", 512 * 1024**2), ("1.5 GiB", int(1.5 * 1024**3)), ("2000000000", 2_000_000_000),
    ("1G", 1024**3), (3 * 1024**3, 3 * 1024**3),
])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["lots", "4 parsecs", "-1GB", "10MB", ""])
def test_parse_memory_refuses_with_the_fix(text):
    with pytest.raises(MemoryLimitError, match="DPR_MEMORY_LIMIT"):
        parse_memory(text)


def test_budget_from_env_and_chunk_rows():
    assert MemoryBudget.from_env({}).limit is None
    assert MemoryBudget.from_env({"DPR_MEMORY_LIMIT": " "}).limit is None
    b = MemoryBudget.from_env({"DPR_MEMORY_LIMIT": "1GiB"})
    assert b.limit == 1024**3 and b.duckdb_setting == f"{1024**3 // 4}B"
    assert b.chunk_rows(8) == 1024**3 // 32 // 8
    assert MemoryBudget().chunk_rows(8) == DEFAULT_LIMIT // 32 // 8
    assert MemoryBudget().duckdb_setting == f"{DEFAULT_LIMIT // 4}B"
    assert MemoryBudget(64 * 1024**2).chunk_rows(10**9) == 4096  # the floor
    assert MemoryBudget(64 * 1024**2).chunk_rows(10**9, minimum=1) == 1
    with pytest.raises(ValueError, match="bytes_per_row"):
        b.chunk_rows(0)


def test_chunk_bounds_cover_every_row_once():
    for n in (0, 1, 7, 10):
        for rows in (1, 3, 7, 100):
            covered = [i for a, b in chunk_bounds(n, rows) for i in range(a, b)]
            assert covered == list(range(n))


@pytest.mark.parametrize("cap, expected", [(512 * 1024**2, {"64.0MIB", "64MIB"}),  # small cap: 1/8
                                           (1024**3, {"256.0MIB", "256MIB"})])       # 1 GiB and up: 1/4
def test_warehouse_sets_duckdb_memory_limit(tmp_path, cap, expected):
    wh = Warehouse(tmp_path / "w.duckdb", memory=MemoryBudget(cap))
    setting = wh.query("SELECT current_setting('memory_limit')")[0][0]
    assert setting.replace(" ", "").upper() in expected


def test_a_small_cap_favours_memory_and_a_larger_one_does_not():
    """Below 1 GiB (issue 29, goal 4): DuckDB 1/8, evictions, validation in a child, one fit at a time,
    nothing started ahead; at 1 GiB and the 2 GiB default none of it."""
    from dpcore.runtime.chunks import EVICT_BELOW, SMALL_CAP_DUCKDB_SHARE

    small = MemoryBudget(512 * 1024**2)
    assert small.favours_memory and small.evicts_between_operations and small.validates_in_child
    assert small.concurrent_fits == 1 and not small.works_ahead
    assert small.duckdb_bytes == int(512 * 1024**2 * SMALL_CAP_DUCKDB_SHARE) == 64 * 1024**2
    assert MemoryBudget(768 * 1024**2).duckdb_bytes == 96 * 1024**2  # cap/8 above 512 MiB
    assert MemoryBudget(256 * 1024**2).duckdb_bytes == 64 * 1024**2  # never below 64 MiB (HELD_DUCKDB_MIN) ...
    assert MemoryBudget(64 * 1024**2).duckdb_bytes == 16 * 1024**2  # ... unless the quarter is smaller
    for big in (MemoryBudget(EVICT_BELOW), MemoryBudget(), MemoryBudget(4 * 1024**3)):
        assert not big.favours_memory and not big.evicts_between_operations and not big.validates_in_child
        assert big.concurrent_fits is None and big.works_ahead
        assert big.duckdb_bytes == big.effective_limit // 4


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 2048, 5000, 10**6])
def test_iter_chunks_equals_one_read(tmp_path, rows):
    wh = Warehouse(tmp_path / "w.duckdb")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"_row": np.arange(1, 4998), "x": rng.normal(size=4997), "s": [f"r{i}" for i in range(4997)]})
    wh.write_df("internal", "t", df)
    chunks = list(wh.iter_chunks('SELECT * FROM internal."t" ORDER BY _row', rows=rows))
    assert all(len(c) == rows for c in chunks[:-1]) and 1 <= len(chunks[-1]) <= rows
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), wh.query_df('SELECT * FROM internal."t" ORDER BY _row'))
    assert list(wh.iter_chunks('SELECT * FROM internal."t" WHERE false', rows=rows)) == []


def test_iter_chunks_allows_writes_from_the_same_thread(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("internal", "t", pd.DataFrame({"x": np.arange(10)}))
    wh.run(lambda con: con.execute("CREATE TABLE internal.out (x BIGINT)"))
    for chunk in wh.iter_chunks("SELECT x FROM internal.t ORDER BY x", rows=3):
        wh.run(lambda con: (con.register("_c", chunk), con.execute("INSERT INTO internal.out SELECT x * 2 FROM _c")))
    assert [r[0] for r in wh.query("SELECT x FROM internal.out ORDER BY x")] == list(range(0, 20, 2))


def test_a_small_duckdb_limit_refuses_a_whole_table_sort(tmp_path):
    """The cap is real: DuckDB itself refuses work that needs more than it (spilling disabled)."""
    wh = Warehouse(tmp_path / "w.duckdb", memory=MemoryBudget(128 * 1024**2))
    with pytest.raises(duckdb.OutOfMemoryException):
        wh.run(lambda con: (con.execute("SET temp_directory = ''"),
                            con.execute("SELECT list(range) FROM range(20000000)").fetchall()))


@pytest.mark.parametrize("rows", [1, 7, 4997, 10**5])
def test_exported_partitions_equal_the_query_and_are_removed(tmp_path, rows):
    import pickle
    import stat

    from dpcore.storage.partitions import exported, scratch_dir

    wh = Warehouse(tmp_path / "w.duckdb")
    rng = np.random.default_rng(1)
    n = 97 if rows == 1 else 4997  # a row group per row makes every read parse n groups' metadata
    df = pd.DataFrame({"_row": np.arange(1, n + 1), "x": rng.normal(size=n), "s": [f"r{i}" for i in range(n)]})
    wh.write_df("internal", "t", df)
    whole = wh.query_df('SELECT x, s FROM internal."t" ORDER BY _row')
    with exported(wh, 'SELECT x, s FROM internal."t" ORDER BY _row', rows=rows) as parts:
        assert parts.n_chunks == -(-n // rows) and parts.columns == ("x", "s")
        assert stat.S_IMODE(parts.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(scratch_dir(wh).stat().st_mode) == 0o700
        again = pickle.loads(pickle.dumps(parts))  # what a Dask worker receives
        pd.testing.assert_frame_equal(pd.concat([again.read(i) for i in range(len(again))], ignore_index=True), whole)
        pd.testing.assert_frame_equal(pd.concat(list(parts), ignore_index=True), whole)
        assert list(parts.read(0, ["x"]).columns) == ["x"]
        with pytest.raises(IndexError, match="chunks"):
            parts.read(parts.n_chunks)
        path = parts.path
    assert not path.exists() and list(scratch_dir(wh).iterdir()) == []


def test_exported_empty_result_and_cleanup_on_error(tmp_path):
    from dpcore.storage.partitions import exported, scratch_dir

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("internal", "t", pd.DataFrame({"x": [1.0]}))
    with exported(wh, "SELECT x FROM internal.t WHERE false", rows=5) as parts:
        assert parts.n_chunks == 0 and list(parts) == []
    with pytest.raises(RuntimeError, match="boom"):
        with exported(wh, "SELECT x FROM internal.t", rows=5):
            raise RuntimeError("boom")
    assert list(scratch_dir(wh).iterdir()) == []


def test_fetch_guard_catches_whole_reads_and_lets_chunks_through(tmp_path, monkeypatch):
    from fetch_guard import fetch_guard

    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("internal", "t", pd.DataFrame({"x": np.arange(5000)}))
    with fetch_guard(monkeypatch, 1000) as seen:
        assert sum(len(c) for c in wh.iter_chunks("SELECT x FROM internal.t", rows=1000)) == 5000
        assert wh.query("SELECT count(*) FROM internal.t") == [(5000,)]
        for read in (lambda: wh.query_df("SELECT x FROM internal.t"), lambda: wh.query("SELECT x FROM internal.t"),
                     lambda: wh.run(lambda con: con.execute("SELECT x FROM internal.t").fetchnumpy())):
            with pytest.raises(AssertionError, match="5000 rows"):
                read()
    assert any(how == "to_arrow_reader batch" for _, how, _ in seen)


def test_iter_chunks_waits_for_another_process_holding_the_file(tmp_path):
    """A streamed read retries on another process's file lock, as Warehouse.run does (no IOException)."""
    import subprocess
    import sys
    import time

    wh = Warehouse(tmp_path / "w.duckdb", timeout=30)
    wh.write_df("internal", "t", pd.DataFrame({"x": np.arange(10)}))
    wh.let_go()  # this process is idle: a program that does not queue (the DuckDB CLI) may take the file
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(1.5); c.close()"
    ), str(wh.path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    assert sum(len(c) for c in wh.iter_chunks("SELECT x FROM internal.t", rows=3)) == 10
    assert time.monotonic() - t0 > 0.5  # it waited for the lock instead of failing
    holder.wait()
