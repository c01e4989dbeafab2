"""Bounded memory: the owner's memory cap and the size of the chunks stages read.

Tables larger than memory (issue 21; DESIGN.md "Scale") are read in chunks of
rows, never whole. One setting sizes everything:

``DPR_MEMORY_LIMIT``
    The memory the pipeline may use, e.g. ``4GB``, ``512MiB``, ``1.5 GiB`` or a
    number of bytes. A quarter of it is DuckDB's ``memory_limit`` (DuckDB
    spills to ``<warehouse file>.tmp/`` beyond it; :data:`DUCKDB_SHARE`) and it sizes the chunks of rows the
    Python stages hold at once (:meth:`MemoryBudget.chunk_rows`: one chunk's
    columns take at most :data:`CHUNK_SHARE` of the cap). Unset: the cap is
    :data:`DEFAULT_LIMIT` (2 GiB) for both, so memory stays bounded on any
    table; set it higher on a large machine for fewer, larger chunks and less
    spilling.

Chunk sizes are a function of the cap and the columns read only, never of
the data, so they are public (and results never depend on them: every
chunked stage is tested equal to its one-chunk run).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: Chunk sizing when ``DPR_MEMORY_LIMIT`` is unset (bytes).
DEFAULT_LIMIT = 2 * 1024**3
#: Share of the cap one chunk's columns may take (the rest: DuckDB, copies made while working on the chunk,
#: the interpreter and libraries).
CHUNK_SHARE = 1 / 32
#: Share of the cap given to DuckDB's ``memory_limit``: DuckDB keeps pages cached up to its limit, so at
#: scale its share is held for the whole run, on top of the interpreter and the chunk being worked on.
DUCKDB_SHARE = 1 / 4
#: DuckDB's share under a small cap (:attr:`MemoryBudget.favours_memory`): the flow process's floor is most of
#: such a cap, so DuckDB spills sooner; never below :data:`HELD_DUCKDB_MIN` unless :data:`DUCKDB_SHARE` of the cap
#: is smaller (64 MiB from 256 to 512 MiB, cap/8 above; a 64 MiB cap keeps its 16 MiB: 8 MiB ran out of memory).
SMALL_CAP_DUCKDB_SHARE = 1 / 8
#: Share of the cap DuckDB gets for a query a stage runs while it holds a large part of its work in Python (the
#: rules step's sample frame, PCOR's index): :meth:`MemoryBudget.held_duckdb_bytes`.
HELD_DUCKDB_SHARE = 1 / 16
#: ... never below this (bytes): 32 MiB ran out of memory fetching the rules step's frame on 10x the demo.
HELD_DUCKDB_MIN = 64 * 1024**2
#: Below this cap a run favours memory over speed (:attr:`MemoryBudget.favours_memory`: DuckDB's smaller share
#: and evictions, great-expectations and matplotlib in short-lived child processes, one fit at a time, nothing
#: started ahead): the process's own floor then leaves no room for more.
EVICT_BELOW = 1024**3
#: DuckDB's ``memory_limit`` for a moment after an operation, when evicting: it evicts unpinned pages down to this.
EVICT_TO = 8 * 1024**2
#: Chunks never get smaller than this many rows (per-chunk overhead would dominate), unless asked for explicitly.
MIN_CHUNK_ROWS = 4096

_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
}


class MemoryLimitError(ValueError):
    """``DPR_MEMORY_LIMIT`` (or a ``memory_limit`` argument) cannot be read."""


def parse_memory(text: str | int) -> int:
    """Bytes of a memory size such as ``"4GB"``, ``"512 MiB"``, ``"1.5G"`` or ``2000000000``.

    Decimal units (kB, MB, GB, TB) are powers of 1000, binary ones (KiB, MiB,
    GiB, TiB, and the bare K, M, G, T that DuckDB also reads) powers of 1024.

    Raises
    ------
    MemoryLimitError
        Not a size, or below 64 MiB (too small to run anything).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise MemoryLimitError(
                f"DPR_MEMORY_LIMIT={text!r} is not a memory size: write a number with an optional unit, "
                "e.g. 4GB, 512MiB or 2000000000 (bytes)"
            )
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 64 * 1024**2:
        raise MemoryLimitError(f"DPR_MEMORY_LIMIT={text!r} is below 64 MiB; give the pipeline at least 64MiB")
    return value


@dataclass(frozen=True)
class MemoryBudget:
    """The owner's memory cap (bytes, or None for DuckDB's default) and the chunk sizes it implies.

    Parameters
    ----------
    limit : int or None
        Bytes; None = no cap set (chunks sized as for :data:`DEFAULT_LIMIT`).
    """

    limit: int | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "MemoryBudget":
        """The cap of ``DPR_MEMORY_LIMIT`` (unset or empty: no cap)."""
        text = ((env if env is not None else os.environ).get("DPR_MEMORY_LIMIT") or "").strip()
        return cls(parse_memory(text) if text else None)

    @property
    def effective_limit(self) -> int:
        """The cap in bytes (:data:`DEFAULT_LIMIT` when none is set)."""
        return self.limit if self.limit is not None else DEFAULT_LIMIT

    @property
    def favours_memory(self) -> bool:
        """Whether the cap is small (below :data:`EVICT_BELOW`, 1 GiB): the run trades speed for memory.

        The flow process's floor (its imports, library pages and Python objects: about 250 MiB before
        validation, 430-500 MiB late in a run of 10x the demo; docs/scale.md, "Under a cap below 1 GiB: memory before speed") and the temporary
        Prefect server's (about 200 MiB) are most of such a cap, so a run under it (issue 29, goal 4):

        * gives DuckDB :data:`SMALL_CAP_DUCKDB_SHARE` of the cap, not :data:`DUCKDB_SHARE`
          (:attr:`duckdb_bytes`), and evicts its cached pages after every operation
          (:attr:`evicts_between_operations`);
        * validates in a short-lived child process (:attr:`validates_in_child`), so great-expectations and what
          it loads never stay in the flow process, and draws its pictures in another
          (:func:`dpcore.publish.plots.draw_privately`), so matplotlib does not either;
        * fits the detector's templates one at a time (:attr:`concurrent_fits`);
        * starts nothing early or beside the release (:attr:`works_ahead`).

        At or above 1 GiB (the 2 GiB default included) none of this applies. On 10x the demo under 512 MiB
        the run took 40 s against 22 s at the default cap (BENCHMARKS "Scale under DPR_MEMORY_LIMIT=512MiB").
        """
        return self.effective_limit < EVICT_BELOW

    @property
    def works_ahead(self) -> bool:
        """Whether a run may start work early or beside the release to save time (not under a small cap).

        The later steps' libraries imported on a thread at start (:mod:`flows.preload`: great-expectations,
        pint and matplotlib, held from then on) and the count-of-counts pictures drawn by a second Python
        process started before they are needed (:mod:`dpcore.publish.background_plots`, 65-87 MiB from the outlier
        counts to the bundle) save 1-3 s of a run; under a small cap (:attr:`favours_memory`) the libraries
        are imported where they are needed (great-expectations and matplotlib in short-lived child
        processes) and nothing is started ahead.
        """
        return not self.favours_memory

    @property
    def validates_in_child(self) -> bool:
        """Whether validation's great-expectations work runs in a child process (under a small cap, :attr:`favours_memory`).

        Imported, great-expectations and its imports (pandas, pyarrow, sqlalchemy, pydantic) take about
        190 MiB that a process keeps until it exits (the child measured 251 MiB at its peak on 10x the
        demo); validation is the only step that needs them. Under a
        small cap the chunks of distinct values go to one child process that ends with validation
        (:func:`dpcore.runtime.child_map.child_map`: the same function on the same files, the same verdicts), so the
        flow process's floor through the detector, the rules and the private steps is about 160 MiB lower;
        the child's start and imports cost about 3 s (validation of 10x the demo: 9.8 s under 512 MiB,
        3.7 s at the default cap, BENCHMARKS "Scale").
        """
        return self.favours_memory

    @property
    def concurrent_fits(self) -> int | None:
        """How many detector templates may be fitted at once: 1 under a small cap (:attr:`favours_memory`), else
        None (as many as the task runner runs: each fit's start sample and first passes hold 80-90 MiB
        of arrays on 10x the demo)."""
        return 1 if self.favours_memory else None

    @property
    def duckdb_bytes(self) -> int:
        """DuckDB's ``memory_limit`` in bytes: :data:`DUCKDB_SHARE` of the cap (under a small cap,
        :attr:`favours_memory`, :data:`SMALL_CAP_DUCKDB_SHARE` of it but at least :data:`HELD_DUCKDB_MIN`, at most
        the quarter).

        The rest is for the interpreter and its libraries and the Python side
        of a stage (its chunk, the arrays it builds).
        """
        quarter = int(self.effective_limit * DUCKDB_SHARE)
        if not self.favours_memory:
            return quarter
        return min(quarter, max(int(self.effective_limit * SMALL_CAP_DUCKDB_SHARE), HELD_DUCKDB_MIN))

    @property
    def held_duckdb_bytes(self) -> int:
        """DuckDB's ``memory_limit`` (bytes) for a query run while the stage holds much in Python.

        :data:`HELD_DUCKDB_SHARE` of the cap, at least :data:`HELD_DUCKDB_MIN`
        (:meth:`dpcore.storage.warehouse.Warehouse.run`'s ``memory_limit``,
        :meth:`~dpcore.storage.warehouse.Warehouse.memory_limited`): DuckDB spills
        beyond it rather than growing beside the Python side (issue 29, goal 4).
        """
        return max(HELD_DUCKDB_MIN, int(self.effective_limit * HELD_DUCKDB_SHARE))

    @property
    def evicts_between_operations(self) -> bool:
        """Whether DuckDB's cached pages are given back after every warehouse operation (cap below :data:`EVICT_BELOW`).

        DuckDB keeps the pages it read or built, up to its ``memory_limit``
        (:attr:`duckdb_bytes`), for the next query; between operations the
        stages work in Python beside them. Under a small cap the process's own
        floor (its imports, library pages and Python objects: about 560 MiB
        of a run's flow process, docs/scale.md, "Under a cap below 1 GiB: memory before speed") is most of the cap,
        so :meth:`dpcore.storage.warehouse.Warehouse.run` evicts them when an operation
        ends (the limit lowered to :data:`EVICT_TO` and set back; about 2.6 ms
        per operation): on 10x the demo under 512 MiB the flow process's
        peaks in the stages after the detector fell by 30-90 MiB (the bundle
        573-603 against 646-670 MiB, three runs against two), for 1-3% more
        CPU (issue 29, goal 4). At or above the threshold (the 2 GiB default)
        nothing changes.
        """
        return self.favours_memory

    @property
    def duckdb_setting(self) -> str:
        """The value for DuckDB's ``memory_limit``: :attr:`duckdb_bytes` as ``"<n>B"``."""
        return f"{self.duckdb_bytes}B"

    def chunk_rows(self, bytes_per_row: int, minimum: int = MIN_CHUNK_ROWS) -> int:
        """Rows per chunk so that one chunk of ``bytes_per_row`` takes at most :data:`CHUNK_SHARE` of the cap.

        Parameters
        ----------
        bytes_per_row : int
            The in-memory size of one row of what the stage holds per chunk
            (8 per float64 column; ~60 per short text column as a Python str).
        minimum : int
            Never fewer rows than this.

        Returns
        -------
        int
        """
        if bytes_per_row <= 0:
            raise ValueError(f"bytes_per_row must be > 0, got {bytes_per_row}")
        return max(int(minimum), int(self.effective_limit * CHUNK_SHARE) // int(bytes_per_row))


def chunk_bounds(n: int, rows: int):
    """``(start, stop)`` of consecutive chunks of ``rows`` covering ``range(n)`` (none when ``n == 0``)."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def serial_map(fn, items) -> list:
    """``[fn(x) for x in items]``: the default *mapper* of chunked stages.

    A chunked stage takes ``mapper=serial_map`` and calls
    ``mapper(fn, items)`` with a module-level ``fn`` and picklable items
    (e.g. ``(Partitions, chunk index)``), so the flow layer can pass a mapper
    that runs the chunks on Dask workers instead; results come back in the
    order of ``items`` either way, and are combined in the calling process.
    """
    return [fn(x) for x in items]
