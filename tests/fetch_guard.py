"""A guard that fails any warehouse read returning more than a given number of rows (issue 21 tests).

``with fetch_guard(monkeypatch, limit) as seen:`` wraps every DuckDB
connection the warehouse opens (and the cursors of it each operation runs on): a result fetched whole (``fetchall``,
``fetchnumpy``, ``df``/``fetchdf``, ``arrow``/``to_arrow_table``, through a
connection or a relation) with more than ``limit`` rows raises
``AssertionError`` naming the query; streamed reads (``to_arrow_reader``,
which is how :meth:`dpcore.storage.warehouse.Warehouse.iter_batches` and
:mod:`dpcore.storage.partitions` read) are checked batch by batch. On a table much
larger than ``limit`` with few distinct values, a stage that loads the
whole table, or all record ids, fails.
"""
from __future__ import annotations

from contextlib import contextmanager

import duckdb

import dpcore.storage.warehouse as warehouse_module
from dpcore.storage.warehouse_lease import close_all

_WHOLE = ("fetchall", "fetchnumpy", "df", "fetchdf", "fetch_df", "arrow", "to_arrow_table", "pl", "fetch_arrow_table")


class _Guarded:
    def __init__(self, inner, limit: int, sql: str, seen: list):
        self._inner, self._limit, self._sql, self._seen = inner, limit, sql, seen

    def _check(self, n: int, how: str) -> None:
        self._seen.append((n, how, self._sql[:200]))
        if n > self._limit:
            raise AssertionError(f"a warehouse read returned {n} rows (> {self._limit}) whole via {how}: {self._sql[:300]}")

    def execute(self, sql, *args, **kwargs):
        self._inner.execute(sql, *args, **kwargs)
        return _Guarded(self._inner, self._limit, str(sql), self._seen)

    def sql(self, sql, *args, **kwargs):
        return _Guarded(self._inner.sql(sql, *args, **kwargs), self._limit, str(sql), self._seen)

    def query(self, sql, *args, **kwargs):
        return self.sql(sql, *args, **kwargs)

    def cursor(self):  # each warehouse operation runs on a cursor of the process's kept connection
        return _Guarded(self._inner.cursor(), self._limit, "<cursor>", self._seen)

    def to_arrow_reader(self, *args, **kwargs):
        reader = self._inner.to_arrow_reader(*args, **kwargs)
        guard = self

        def batches():
            for b in reader:
                guard._check(b.num_rows, "to_arrow_reader batch")
                yield b

        return batches()

    def fetchmany(self, size=1):
        out = self._inner.fetchmany(size)
        self._check(len(out), "fetchmany")
        return out

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in _WHOLE:
            return attr

        def whole(*args, **kwargs):
            out = attr(*args, **kwargs)
            if isinstance(out, dict):
                n = len(next(iter(out.values()))) if out else 0
            elif hasattr(out, "num_rows"):
                n = out.num_rows
            elif out is None:
                n = 0
            else:
                n = len(out)
            self._check(n, name)
            return out

        return whole


@contextmanager
def fetch_guard(monkeypatch, limit: int):
    """Patch the warehouse's connections so every whole read is at most ``limit`` rows; yields the log."""
    seen: list = []
    real = duckdb.connect

    def connect(*args, **kwargs):
        return _Guarded(real(*args, **kwargs), limit, "<connection>", seen)

    close_all()  # a connection kept from before the guard is not guarded: the next operation opens a guarded one
    monkeypatch.setattr(warehouse_module.duckdb, "connect", connect)
    try:
        yield seen
    finally:
        close_all()  # nor does a guarded one outlive the guard
        monkeypatch.setattr(warehouse_module.duckdb, "connect", real)
