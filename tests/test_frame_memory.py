"""Issue 29, goal 4: the rules step's frame fetched with less memory, and the warehouse's helpers for it.

- :func:`dpcore.steps.rules._arrow_frame` returns the frame DuckDB's ``.df()`` returns, whatever the types;
- :meth:`dpcore.storage.warehouse.Warehouse.run` with ``memory_limit`` lowers DuckDB's limit for the operation only;
- :func:`dpcore.storage.warehouse._recut` re-cuts record batches to exactly ``rows`` rows, in order;
- :func:`dpcore.steps.rules._mining_frame` runs again under the budget's limit when the lowered one is too small.
"""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpcore.runtime.chunks import MemoryBudget
from dpcore.storage.warehouse import Warehouse, _recut

_COLUMNS = {
    "i": "range::BIGINT",
    "i_null": "CASE WHEN range % 3 = 0 THEN NULL ELSE range END::BIGINT",
    "i32": "(range % 7)::INTEGER",
    "i32_null": "CASE WHEN range % 5 = 0 THEN NULL ELSE range % 7 END::INTEGER",
    "f": "range / 7.0",
    "f_null": "CASE WHEN range % 4 = 0 THEN NULL ELSE range / 3.0 END::DOUBLE",
    "f32": "(range / 3.0)::FLOAT",
    "s": "'v' || (range % 11)::VARCHAR",
    "s_null": "CASE WHEN range % 6 = 0 THEN NULL ELSE 'w' || (range % 5)::VARCHAR END",
    "b": "range % 2 = 0",
    "b_null": "CASE WHEN range % 9 = 0 THEN NULL ELSE range % 2 = 0 END",
    "dec": "(range / 8)::DECIMAL(9, 3)",
    "d": "DATE '2020-01-01' + (range % 30)::INTEGER",
}


@pytest.mark.parametrize("names", [["i", "f", "s", "b"], ["i_null"], ["i32", "i32_null"], ["f_null", "f32"],
                                   ["s_null"], ["b_null"], ["dec"], ["d"], list(_COLUMNS)])
def test_arrow_frame_equals_duckdb_df(names):
    from dpcore.steps.rules import _arrow_frame

    con = duckdb.connect()
    sql = "SELECT " + ", ".join(f"{_COLUMNS[c]} AS {c}" for c in names) + " FROM range(1000) ORDER BY range"
    expected = con.execute(sql).df()
    got = _arrow_frame(con, con.sql(sql).to_arrow_table())
    assert [repr(t) for t in got.dtypes] == [repr(t) for t in expected.dtypes]
    pd.testing.assert_frame_equal(got, expected, check_exact=True)


def test_run_lowers_duckdb_memory_limit_for_the_operation_only(tmp_path):
    budget = MemoryBudget(1024**3)  # DuckDB's share: 256 MiB
    wh = Warehouse(tmp_path / "w.duckdb", memory=budget)

    def limit(con) -> int:
        return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    base = wh.run(limit)
    inside = wh.run(limit, memory_limit=64 * 2**20)
    assert inside != base and inside.replace(" ", "").upper() in {"64.0MIB", "64MIB"}
    assert wh.run(limit) == base
    assert wh.run(limit, memory_limit=2 * budget.duckdb_bytes) == base  # never raised above the budget's

    def fails(con):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        wh.run(fails, memory_limit=64 * 2**20)
    assert wh.run(limit) == base
    wh.run(lambda con: con.execute("CREATE TABLE internal.t (x BIGINT)"))
    wh.run(lambda con: con.execute("INSERT INTO internal.t VALUES (1), (2)"), transaction=True,
           memory_limit=64 * 2**20)
    assert wh.query("SELECT sum(x) FROM internal.t")[0][0] == 3 and wh.run(limit) == base


def test_memory_limited_lowers_each_operation_of_this_thread_and_keeps_the_lowest(tmp_path):
    import threading

    budget = MemoryBudget(1024**3)
    wh = Warehouse(tmp_path / "w.duckdb", memory=budget)

    def limit(con) -> str:
        return con.execute("SELECT current_setting('memory_limit')").fetchone()[0].replace(" ", "").upper()

    base = wh.run(limit)
    seen = []
    with wh.memory_limited(96 * 2**20):
        assert wh.run(limit) in {"96.0MIB", "96MIB"}
        assert wh.run(limit, memory_limit=64 * 2**20) in {"64.0MIB", "64MIB"}
        with wh.memory_limited(128 * 2**20):  # nested: the lowest stays
            assert wh.run(limit) in {"96.0MIB", "96MIB"}
        other = threading.Thread(target=lambda: seen.append(wh.run(limit)))
        other.start()
        other.join()
    assert seen == [base] and wh.run(limit) == base
    assert budget.held_duckdb_bytes == 64 * 2**20 and MemoryBudget(4 * 1024**3).held_duckdb_bytes == 256 * 2**20
    assert MemoryBudget(256 * 2**20).held_duckdb_bytes == 64 * 2**20


@pytest.mark.parametrize("rows", [1, 3, 7, 10, 64, 1000])
@pytest.mark.parametrize("sizes", [[], [5], [10, 10, 10], [3, 0, 7, 1, 20, 2], [64, 64, 13]])
def test_recut_gives_exact_rows_in_order(sizes, rows):
    start, batches = 0, []
    for n in sizes:
        batches.append(pa.record_batch({"x": np.arange(start, start + n), "s": [f"r{i}" for i in range(start, start + n)]}))
        start += n
    out = list(_recut(iter(batches), rows))
    assert all(b.num_rows == rows for b in out[:-1]) and (not out or 1 <= out[-1].num_rows <= rows)
    got = pa.Table.from_batches(out, schema=batches[0].schema) if out else None
    assert (got.column("x").to_pylist() if out else []) == list(range(start))
    if out:
        assert got.column("s").to_pylist() == [f"r{i}" for i in range(start)]


def test_mining_frame_runs_again_under_the_budget_when_the_lowered_limit_is_too_small(monkeypatch):
    import dpcore.steps.rules as rules

    calls = []

    class Wh:
        def run(self, op, memory_limit=None):
            calls.append(memory_limit)
            if memory_limit is not None:
                raise duckdb.OutOfMemoryException("Out of Memory Error: test")
            con = duckdb.connect()
            con.execute("CREATE TABLE v AS SELECT range AS _row, range * 2.0 AS x FROM range(10)")
            return op(con)

    monkeypatch.setattr(rules, "labelled_query", lambda *a, **k: ("SELECT * FROM v", []))
    frame, sampled = rules._mining_frame(Wh(), None, None, "s", ["t"], ["x"], 10, 100)
    assert calls == [rules._frame_memory_limit(), None] and not sampled
    pd.testing.assert_frame_equal(frame, pd.DataFrame({"_row": np.arange(10), "x": np.arange(10) * 2.0}))


@pytest.mark.parametrize("env, first, expected", [(None, "dpcore", "system"), (None, "pyarrow", "system"),
                                                  ("mimalloc", "dpcore", "mimalloc")])
def test_arrow_allocates_through_the_system_unless_told(env, first, expected):
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env:
        environ["ARROW_DEFAULT_MEMORY_POOL"] = env
    code = f"import {first}, dpcore, pyarrow; print(pyarrow.default_memory_pool().backend_name)"
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected
