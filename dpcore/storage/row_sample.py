"""A uniform random sample of a warehouse table's rows, drawn by row number without sorting the table (issue 51).

The rules step mines a sample of ``m`` of a validated table's ``n`` rows. It used to number the rows in row
order (``row_number() OVER (ORDER BY _row)``) and keep the rows at ``m`` drawn positions: a sort of every row,
which under DuckDB's share of the memory cap spills the whole table (at 1000x the demo, 337 million rows,
the rules stage's disk grew 44-fold against 100x where the rows grew 10-fold).

:func:`sample_row_numbers` draws the sample from the row numbers themselves. The table's ``_row`` values
are distinct integers in ``[lo, hi]`` (a validated table keeps the ingested rows' numbers: the rows that
failed a rule leave gaps). A uniform draw of ``k`` numbers from ``[lo, hi]`` (``numpy``'s
``Generator.choice`` without replacement) meets the table in a uniform random subset of its rows, given
that subset's size; when it holds at least ``m`` rows, ``m`` of them drawn uniformly are a uniform sample of
``m`` of the ``n`` rows. The draw's size ``k`` allows for the gaps (``m (hi - lo + 1) / n`` plus six standard
deviations), so a second round, with a fresh draw and twice the size, is needed with a probability below
one in a billion; a round's acceptance depends on its hit count only, so the sample stays uniform whatever
the rounds. Finding the hits is one pass over the table, a semi-join against the ``k`` drawn numbers (a hash
table of ``k`` entries): no sort, nothing spilled.

When the draw would not fit the memory (a table whose rows are mostly gaps: ``k`` above ``max_draw``), the
caller numbers the rows as before (:func:`dpcore.steps.rules._mining_frame` keeps that path).

The sample depends on ``lo``, ``hi``, which rows exist, ``m`` and the seed (a public constant); it is used
only to search rules the data owner reads, never released.
"""
from __future__ import annotations

import math

import numpy as np

#: Standard deviations of the hit count the first draw allows for (a shortfall has probability < 1e-9).
MARGIN_SD = 6.0

#: Bytes a drawn row number takes while a draw is matched: the numbers, their frame, DuckDB's hash table.
BYTES_PER_DRAWN = 64


def draw_size(n: int, lo: int, hi: int, m: int) -> int:
    """Numbers to draw from ``[lo, hi]`` so that about ``m`` plus six standard deviations fall on the ``n`` rows.

    The hit count of a draw of ``k`` numbers is hypergeometric with mean ``k n / R`` (``R = hi - lo + 1``);
    the draw is ``R`` at most.
    """
    span = hi - lo + 1
    if n < 1 or span < n:
        raise ValueError("the table's distinct row numbers cannot lie within its least and greatest "
                         "(a programming error)")  # no figure: they are private
    want = m * span / n
    return int(min(span, math.ceil(want + MARGIN_SD * math.sqrt(want) + 64)))


def sample_row_numbers(con, table: str, n: int, lo: int, hi: int, m: int, seed: int, *,
                       max_draw: int, column: str = "_row") -> np.ndarray | None:
    """Sorted row numbers of a uniform random sample (without replacement) of ``m`` of ``table``'s ``n`` rows.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        A connection of the warehouse (inside :meth:`~dpcore.storage.warehouse.Warehouse.run`).
    table : str
        Qualified, quoted table name; ``column`` holds distinct integers in ``[lo, hi]``.
    n, lo, hi : int
        The table's row count and its least and greatest row numbers (one aggregate the caller runs anyway).
    m : int
        Rows to draw, ``1 <= m < n``.
    seed : int
        Public seed; the same arguments on the same rows give the same sample.
    max_draw : int
        The most row numbers a draw may hold in memory (8 bytes each); see Returns.

    Returns
    -------
    numpy.ndarray or None
        ``m`` sorted int64 row numbers; None when the first draw would exceed ``max_draw`` (the caller samples
        by numbering the rows instead).

    Raises
    ------
    ValueError
        ``m`` not in ``[1, n)``, or ``n`` rows cannot lie within ``[lo, hi]`` (a programming error).
    """
    import pandas as pd

    if not 1 <= m < n:
        raise ValueError("m must lie in [1, n) (a programming error; n, the table's row count, is private)")
    k = draw_size(n, lo, hi, m)
    if k > max_draw:
        return None
    span = hi - lo + 1
    col = '"' + column.replace('"', '""') + '"'
    for attempt in range(64):
        rng = np.random.default_rng([seed, attempt])
        drawn = pd.DataFrame({"r": lo + rng.choice(span, size=k, replace=False).astype(np.int64)})
        con.register("_dpr_drawn", drawn)
        try:
            hits = con.sql(f"SELECT {col} FROM {table} WHERE {col} IN (SELECT r FROM _dpr_drawn)").fetchnumpy()[column]
        finally:
            con.unregister("_dpr_drawn")
        hits = np.sort(np.asarray(hits, dtype=np.int64))
        if len(hits) >= m:
            return hits[np.sort(rng.choice(len(hits), size=m, replace=False))]
        k = min(span, 2 * k)
    raise RuntimeError("64 draws in a row held fewer than m rows (a programming error: n, lo or hi is wrong)")

