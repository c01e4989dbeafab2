"""The DuckDB warehouse: one file, six schemas, short connections.

Schemas (DESIGN.md, "The ledger and the warehouse"):

``raw``
    Inputs as ingested, one table per distinct input content (never modified),
    catalogued in ``raw.ingests`` with the SHA-256 of the input bytes.
``validated``
    Typed rows that passed every row-level rule.
``quarantine``
    Rejected rows: each violation with its rule and column and the row's cells.
``internal``
    Non-private diagnostics (validation results, scores, labels). Never exported.
``releases``
    Private outputs (JSON payloads) keyed by the ledger's idempotency key.
``ledger``
    Budgets and charges (see :mod:`dpcore.budget.ledger`).

DuckDB allows one read-write *process* per file. Every operation opens a
connection, does its work and closes it. Processes queue for the file on an
advisory lock (``flock`` on ``<file>.lock``, taken before DuckDB's own lock and
held until the connection closes): a waiting process tries again every few
milliseconds instead of re-opening the database, so eight concurrent releases
take turns in order rather than backing off for half-seconds. The wait is
bounded by ``timeout`` seconds, then reported as :class:`WarehouseBusyError`. A
DuckDB lock error (a process that does not take the advisory lock) or a write
conflict inside this process is still retried with exponential backoff and jitter.

The file holds private rows: it, its write-ahead log (``.wal``) and DuckDB's
spill folder (``.tmp``) are created readable by the owner only (0600 / 0700)
whatever the umask (DESIGN.md rule 11): DuckDB takes no file mode, so every
connection lives inside :func:`dpcore.storage.private_files.private_umask`. A file
that is not a DuckDB database (truncated, overwritten) is reported as
:class:`WarehouseCorruptError`, one line naming the file and the backup.
"""
from __future__ import annotations

import fcntl
import os
import random
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import duckdb

from . import warehouse_lease as lease
from .warehouse_lease import let_go  # noqa: F401  (callers import it from here)
from dpcore.runtime.chunks import EVICT_TO, MemoryBudget
from dpcore.runtime.faults import EnvironmentFault
from .private_files import private_umask, public_mkdir, tighten
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

SCHEMAS = ("raw", "validated", "quarantine", "internal", "releases", "ledger")
T = TypeVar("T")

#: (file, set-up, pid) -> (device, inode) of the file the set-up last ran on (:meth:`Warehouse.setup_once`)
_SET_UP: dict[tuple[str, str, int], tuple[int, int]] = {}


def _joined(batches: list):
    """One record batch of ``batches`` (the batch itself when there is one: no copy)."""
    import pyarrow as pa

    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _recut(batches, rows: int):
    """Record batches of exactly ``rows`` rows (the last one shorter) with the rows of ``batches``, in order.

    A batch handed out is a zero-copy slice of one input batch when it lies
    inside one, else one copy of just its own rows (:func:`_joined`): one
    input batch and the rows being gathered are held, not a copy of the
    pending rows joined to the whole next batch, which the slice handed out
    used to keep alive (issue 29 goal 4; within the sampling noise of a
    10x stream, 94 -> 89 MiB over its start for six numeric columns in
    138,654-row chunks). ``tests/test_frame_memory.py``.
    """
    pending: list = []  # slices of input batches, fewer than ``rows`` rows in all
    have = 0
    for batch in batches:
        while batch.num_rows:
            need = rows - have
            if batch.num_rows < need:
                pending.append(batch)
                have += batch.num_rows
                break
            yield _joined(pending + [batch.slice(0, need)])
            batch = batch.slice(need)
            pending, have = [], 0
    if have:
        yield _joined(pending)


class WarehouseBusyError(RuntimeError):
    """The warehouse file stayed locked by another process for the whole wait."""


class WarehouseCorruptError(EnvironmentFault):
    """The warehouse file cannot be read as a DuckDB database (truncated, overwritten, damaged)."""

    def __init__(self, path: Path):
        import errno

        super().__init__(
            f"the warehouse {path} is not a readable DuckDB database (truncated, overwritten or damaged): restore "
            "it together with the owner key from your latest backup (docs/backups.md, 'What, when and how'); without a backup, move it "
            "aside and run `dpr budget recover --from-bundles`",
            errno.EIO,
        )


#: Texts of DuckDB errors that mean the file itself is damaged (duckdb 2.0)
_CORRUPT_TEXTS = (
    "not a valid DuckDB database file", "Could not read enough bytes from file", "Corrupt database file",
    "database has been invalidated",
)


def _is_corrupt(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.Error) and any(t in str(exc) for t in _CORRUPT_TEXTS)


def _is_retryable(exc: BaseException) -> bool:
    text = str(exc)
    if isinstance(exc, duckdb.IOException) and ("lock" in text.lower()):
        return True
    if isinstance(exc, duckdb.TransactionException) and "conflict" in text.lower():
        return True
    return False


class Warehouse:
    """Handle on one DuckDB warehouse file.

    Parameters
    ----------
    path : str or Path
        The DuckDB file; created with its schemas on first use.
    timeout : float
        Seconds to keep retrying while another process holds the file lock.
    memory : MemoryBudget, optional
        The owner's memory cap (``DPR_MEMORY_LIMIT``, :mod:`dpcore.runtime.chunks`):
        every connection sets DuckDB's ``memory_limit`` from it. Default: read
        from the environment.
    """

    def __init__(self, path: str | Path, timeout: float = 60.0, memory: MemoryBudget | None = None):
        self.path = Path(path).resolve()
        self.timeout = timeout
        self.memory = memory if memory is not None else MemoryBudget.from_env()
        self._lock = lease.process_lock(self.path)
        self._scoped = threading.local()  # this thread's memory_limited() limit (``limit``), if any
        public_mkdir(self.path.parent)  # the home: the usual mode, whatever umask a connection holds
        for made_before in (self.path, self.wal, self.spill):  # by an older version, with the umask's mode
            tighten(made_before)
        self.setup_once("schemas", self._create_schemas)

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino) if st.st_size else None

    def setup_once(self, what: str, op: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
        """Run the idempotent set-up ``op`` (``CREATE … IF NOT EXISTS``, migrations) once per process and file.

        Every task opens the warehouse and the ledger, and each connection costs about 40 ms (DuckDB 2.0):
        a set-up this process already ran on this very file (same device and inode, not empty) is skipped.
        A missing, empty or replaced file (a new inode) runs it again.
        """
        key = (str(self.path), what, os.getpid())
        ident = self._identity()
        if ident is None:  # no file yet (or deleted): whatever was set up before was on another file
            for k in [k for k in _SET_UP if k[0] == key[0]]:
                del _SET_UP[k]
        elif _SET_UP.get(key) == ident:
            return
        self.run(op, transaction=True)
        after = self._identity()
        if after is not None:
            _SET_UP[key] = after

    @property
    def wal(self) -> Path:
        """DuckDB's write-ahead log next to the file."""
        return self.path.with_name(self.path.name + ".wal")

    @property
    def spill(self) -> Path:
        """DuckDB's spill folder next to the file (its default ``temp_directory``)."""
        return self.path.with_name(self.path.name + ".tmp")

    @property
    def lock_file(self) -> Path:
        """The advisory lock processes queue on (empty, 0600)."""
        return self.path.with_name(self.path.name + ".lock")

    def _busy(self, attempts: int) -> WarehouseBusyError:
        return WarehouseBusyError(
            f"warehouse {self.path} stayed locked by another process for {self.timeout:.0f} s "
            f"({attempts} attempts). Another pipeline run is writing to it; retry when it has "
            "finished, or raise the timeout."
        )

    @contextmanager
    def _queued(self, deadline: float) -> Iterator[None]:
        """Hold the cross-process advisory lock (re-entrant in this process; call under ``self._lock``)."""
        key = str(self.lock_file)
        hold = lease.HOLDS.get(key)
        if hold is not None and hold[0] == os.getpid():
            hold[2] += 1
        else:  # first hold in this process (a forked child does not inherit its parent's hold)
            fd = os.open(key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            delay, attempts = 0.001, 0
            with lease.announce_waiting(self.path) as waiting:  # a holder with an idle lease lets go
                while True:
                    attempts += 1
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        waiting.now()
                        if time.monotonic() >= deadline:
                            os.close(fd)
                            raise self._busy(attempts) from None
                        time.sleep(delay)
                        delay = min(delay * 1.5, 0.02)
                    except BaseException:
                        os.close(fd)
                        raise
            hold = lease.HOLDS[key] = [os.getpid(), fd, 1]
        try:
            yield
        finally:
            hold[2] -= 1
            if hold[2] == 0:
                del lease.HOLDS[key]
                os.close(hold[1])  # closing the descriptor releases the flock

    @staticmethod
    def _create_schemas(con: duckdb.DuckDBPyConnection) -> None:
        for schema in SCHEMAS:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")

    def _open(self) -> duckdb.DuckDBPyConnection:
        """A connection; call it inside :func:`private_umask` (held until the connection is closed)."""
        try:
            con = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            if _is_corrupt(exc):
                raise WarehouseCorruptError(self.path) from None
            raise
        try:
            con.execute(f"SET memory_limit = '{self.memory.duckdb_setting}'")
        except BaseException:
            con.close()
            raise
        return con

    def _leased(self) -> duckdb.DuckDBPyConnection:
        """A connection to the file for one operation (call under ``self._lock``).

        A fresh cursor of this process's leased database (:mod:`dpcore.storage.warehouse_lease`): its own
        transaction context, temporary tables, registered frames and pending results, closed when the
        operation ends, as a connection of its own was before leases; about 0.5 ms where opening the file
        costs 35 ms. A new lease (queue, private umask, connection) when there is none or the file changed
        since.
        """
        key = str(self.path)
        held = lease.get(key)
        if held is not None and held.depth == 0 and held.stamp != lease.stamp(self.path):
            lease.close(key)  # replaced, truncated or written by someone else since: open it afresh
            held = None
        if held is None:
            stack = ExitStack()
            try:
                stack.enter_context(self._queued(time.monotonic() + self.timeout))
                stack.enter_context(private_umask())  # the file, its .wal and .tmp: 0600/0700 while it is open
                con = self._open()
                lease.announce_presence(self.path)  # alive while it runs: its scratch is not a leftover
                wait_fd = lease.open_wait_fd(self.path)
            except BaseException:
                stack.close()
                raise
            held = lease.Lease(os.getpid(), con, None, self.memory.duckdb_setting, stack, wait_fd)
            lease.put(key, held)
        elif held.memory != self.memory.duckdb_setting and held.depth == 0:
            held.con.execute(f"SET memory_limit = '{self.memory.duckdb_setting}'")
            held.memory = self.memory.duckdb_setting
        held.depth += 1
        try:
            return held.con.cursor()
        except BaseException:
            held.depth -= 1
            raise

    def _unleased(self, con: duckdb.DuckDBPyConnection, ok: bool) -> None:
        """End one operation begun by :meth:`_leased`; keep the lease unless it failed, is off, or another waits."""
        key = str(self.path)
        held = lease.get(key)
        con.close()
        if held is None:
            return
        if held.depth == 1 and ok:  # the outermost operation ends (no stream of this file is open)
            try:
                self._evict_cache(held.con)
            except duckdb.Error:  # the budget's limit could not be set back: the lease is closed below
                ok = False
        held.depth -= 1
        if held.depth:
            return
        if not ok or lease.IDLE_S <= 0 or lease.exiting() or lease.someone_waits(held.wait_fd):
            lease.close(key)
        else:
            held.stamp = lease.stamp(self.path)
            held.last = time.monotonic()

    def _evict_cache(self, con: duckdb.DuckDBPyConnection) -> None:
        """Make DuckDB give back its cached pages, under a small cap (:attr:`MemoryBudget.evicts_between_operations`).

        ``memory_limit`` is lowered to :data:`dpcore.runtime.chunks.EVICT_TO` (DuckDB
        evicts unpinned pages to meet it; where it cannot, it keeps the old
        limit and raises, having evicted what it could) and set back to
        the budget's. Called when the outermost operation on the lease ends, so
        no query of this process is running on the file; results never depend
        on it (the pages are read again when needed).
        """
        if not self.memory.evicts_between_operations:
            return
        try:
            con.execute(f"SET memory_limit = '{EVICT_TO}B'")
        except duckdb.Error:
            pass
        finally:
            con.execute(f"SET memory_limit = '{self.memory.duckdb_setting}'")

    def let_go(self) -> None:
        """Close this process's kept connection to the file now (DuckDB folds its write-ahead log into the file).

        After it, a copy of the file alone holds everything committed so far (docs/backups.md, "What, when and how").
        """
        let_go(self.path)

    def run(self, op: Callable[[duckdb.DuckDBPyConnection], T], *, transaction: bool = False,
            memory_limit: int | None = None) -> T:
        """Run ``op(con)`` on this process's connection to the file, retrying on lock errors.

        With ``transaction=True`` the operation runs between ``BEGIN`` and
        ``COMMIT`` and is rolled back if it raises. Within this process, calls
        are serialised by a lock per file; across processes, they queue on the
        file's advisory lock, and a DuckDB lock error is retried with
        exponential backoff and jitter until ``timeout``. The connection is
        kept for this process's next operation while no other process waits
        (:mod:`dpcore.storage.warehouse_lease`); an operation that fails closes it.

        Parameters
        ----------
        op : callable
            ``op(con)`` with a cursor of the kept connection.
        transaction : bool
            Run ``op`` in a transaction.
        memory_limit : int, optional
            Bytes: DuckDB's ``memory_limit`` while ``op`` runs, when below the
            budget's (:attr:`dpcore.runtime.chunks.MemoryBudget.duckdb_setting`); the
            budget's is set back afterwards, whatever ``op`` did. For an
            operation whose result is held in Python while DuckDB works (a
            frame fetched whole): DuckDB then keeps fewer pages of its own
            (cached pages, sorts and hash tables spill beyond the lower limit)
            beside the rows Python builds. Lowering and restoring the setting
            also makes DuckDB evict and return memory it keeps cached. An
            operation that needs more raises ``duckdb.OutOfMemoryException``.

        Raises
        ------
        WarehouseBusyError
            The file stayed locked for ``timeout`` seconds.
        """
        memory_limit = self._lowest(memory_limit)
        lowered = memory_limit is not None and int(memory_limit) < self.memory.duckdb_bytes

        def attempt() -> T:
            with self._lock:
                con = self._leased()
                ok = False
                try:
                    if lowered:
                        con.execute(f"SET memory_limit = '{int(memory_limit)}B'")
                    try:
                        if not transaction:
                            out = op(con)
                        else:
                            con.execute("BEGIN TRANSACTION")
                            try:
                                out = op(con)
                            except BaseException:
                                con.execute("ROLLBACK")
                                raise
                            con.execute("COMMIT")
                    finally:
                        if lowered:
                            con.execute(f"SET memory_limit = '{self.memory.duckdb_setting}'")
                    ok = True
                    return out
                finally:
                    self._unleased(con, ok)

        return self._retrying(attempt)

    def _lowest(self, memory_limit: int | None) -> int | None:
        """The lower of ``memory_limit`` and this thread's :meth:`memory_limited` limit (None: neither)."""
        scoped = getattr(getattr(self, "_scoped", None), "limit", None)
        if scoped is None or (memory_limit is not None and int(memory_limit) <= scoped):
            return memory_limit
        return scoped

    @contextmanager
    def memory_limited(self, limit: int) -> Iterator["Warehouse"]:
        """Run this thread's operations on this handle inside the block under DuckDB ``memory_limit`` ``limit``.

        Each :meth:`run` (so :meth:`query` and :meth:`query_df`) inside it
        behaves as ``run(..., memory_limit=limit)`` (not :meth:`iter_batches`): the limit is lowered for the
        operation and the budget's set back after it, so other threads'
        operations and other handles are not affected, and nested blocks keep
        the lowest limit. For queries a stage runs while it holds a large
        structure in Python (PCOR's index while the detector's candidates are
        ranked and looked up): DuckDB spills beyond the lower limit instead of
        growing beside the structure. A query that cannot spill enough raises
        ``duckdb.OutOfMemoryException``.

        Parameters
        ----------
        limit : int
            Bytes (no effect at or above the budget's :attr:`dpcore.runtime.chunks.MemoryBudget.duckdb_bytes`).
        """
        prev = getattr(self._scoped, "limit", None)
        self._scoped.limit = int(limit) if prev is None else min(prev, int(limit))
        try:
            yield self
        finally:
            self._scoped.limit = prev

    def _retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, retried on the file lock (and write conflicts) with backoff and jitter until ``timeout``."""
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        attempts = 0
        while True:
            attempts += 1
            try:
                return attempt()
            except duckdb.Error as exc:
                if _is_corrupt(exc):
                    raise WarehouseCorruptError(self.path) from None
                if not _is_retryable(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise self._busy(attempts) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.5)

    def iter_batches(self, sql: str, params: list | None = None, *, rows: int):
        """Stream a query's result as Arrow record batches of exactly ``rows`` rows (the last one shorter).

        Holds this file's in-process lock and one connection until the
        iteration ends (exhaust or close the generator promptly); other
        warehouse calls from the same thread still work, other threads wait.
        Opening the connection retries on another process's file lock, as
        :meth:`run` does.
        Only the batch being handed out is in memory (DuckDB's Arrow reader).
        A query with no row yields nothing.

        Parameters
        ----------
        sql : str
            A read query; give it an ``ORDER BY`` when the order matters.
        params : list, optional
        rows : int
            Rows per batch, >= 1 (:meth:`dpcore.runtime.chunks.MemoryBudget.chunk_rows`).
        """
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        with self._lock:
            con = self._retrying(self._leased)
            ok = False
            try:
                # con.sql(...) streams; the DB-API execute(...) path would copy the whole result first
                reader = con.sql(sql, params=params or None).to_arrow_reader(int(rows))
                # DuckDB hands out batches of at most a row group (122,880 rows), often fewer: re-cut them to
                # exactly ``rows`` (:func:`_recut`)
                yield from _recut(reader, int(rows))
                ok = True
            except GeneratorExit:  # the caller stopped early: the connection is fine
                ok = True
                raise
            finally:
                self._unleased(con, ok)

    def iter_chunks(self, sql: str, params: list | None = None, *, rows: int) -> Iterator[pd.DataFrame]:
        """:meth:`iter_batches` as pandas DataFrames."""
        for batch in self.iter_batches(sql, params, rows=rows):
            yield batch.to_pandas()

    def query_df(self, sql: str, params: list | None = None):
        """Run a read query and return a pandas DataFrame."""
        return self.run(lambda con: con.execute(sql, params or []).df())

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        """Run a query and return all rows as tuples."""
        return self.run(lambda con: con.execute(sql, params or []).fetchall())

    def table_exists(self, schema: str, table: str) -> bool:
        """True when ``schema.table`` exists."""
        rows = self.query(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
        )
        return bool(rows)

    def write_df(self, schema: str, table: str, df, *, replace: bool = False) -> None:
        """Store a DataFrame as ``schema.table`` (refuses to overwrite unless ``replace``)."""
        if schema not in SCHEMAS:
            raise ValueError(f"schema must be one of {SCHEMAS}, got {schema!r}")

        def op(con: duckdb.DuckDBPyConnection) -> None:
            con.register("_incoming", df)
            verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE"
            con.execute(f'{verb} {schema}."{table}" AS SELECT * FROM _incoming')
            con.unregister("_incoming")

        self.run(op, transaction=True)
