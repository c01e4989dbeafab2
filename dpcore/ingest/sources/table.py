"""Writing a typed source's rows into the warehouse as text, batch by batch, and naming its content (issue 31).

Every typed source ends as the same table a CSV gives (:mod:`dpcore.ingest`): ``_row`` (1-based, in the
order the source delivered the rows) then every column as ``VARCHAR``, an empty cell for NULL. Rows arrive
as Arrow record batches of bounded size, so memory does not grow with the number of rows.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Iterable, Iterator

from .columns import ROW, Column

#: Rows per Arrow batch read from a DuckDB source (a few MB of text: memory flat in rows).
BATCH_ROWS = 65_536


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write_batches(con, target: str, columns: list[Column], batches: Iterable) -> None:
    """``CREATE TABLE target`` (``_row`` then the columns as text) and append each Arrow batch to it.

    Each batch holds the columns in order (any names), text or null; ``_row`` continues across batches.
    The batch is numbered in Python (a counter, not a per-row loop) before DuckDB copies it.
    """
    import numpy as np
    import pyarrow as pa

    cols = ", ".join(f"{_ident(c.name)} VARCHAR" for c in columns)
    con.execute(f"CREATE TABLE {target} ({ROW} BIGINT, {cols})")
    offset = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        arrays = [pa.array(np.arange(offset + 1, offset + n + 1, dtype=np.int64)), *batch.columns]
        named = pa.Table.from_arrays(arrays, names=[ROW] + [f"c{i}" for i in range(len(columns))])
        cells = ", ".join(f"coalesce(CAST(c{i} AS VARCHAR), '')" for i in range(len(columns)))
        con.register("_dpr_source_batch", named)
        try:
            con.execute(f"INSERT INTO {target} SELECT {ROW}, {cells} FROM _dpr_source_batch")
        finally:
            con.unregister("_dpr_source_batch")
        offset += n


def guarded(batches: Iterable, refusal: Callable[[BaseException], Exception]) -> Iterator:
    """``batches`` with any error raised while producing a batch replaced by ``refusal(error)`` (context dropped).

    A source's own error text may quote a value of the data (a failed conversion); the caller's refusal names
    the source and the fix instead.
    """
    it = iter(batches)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - every error of the source is replaced by its safe refusal
            err = refusal(exc)
        else:
            yield batch
            continue
        raise err from None


def content_key(con, target: str, kind: str) -> str:
    """The private catalogue key of a text table just written: what it holds, not where it came from.

    SHA-256 over the kind, the column names, the number of rows and two DuckDB aggregates of 64-bit row hashes
    (every cell and ``_row``: a changed, added, removed or moved cell changes it, up to hash collisions), as
    :func:`dpcore.ingest.raw.raw_digest` computes them. One aggregate query; no row leaves DuckDB. Private: it is a
    function of the data (DESIGN.md rule 7), kept in ``raw.ingests`` only.
    """
    names = [r[0] for r in con.execute(f"DESCRIBE {target}").fetchall()]
    cells = ", ".join(_ident(n) for n in names)
    n, total, xor = con.execute(
        f"SELECT count(*), coalesce(sum(hash({cells})::HUGEINT), 0), coalesce(bit_xor(hash('dpr-text', {cells})), 0) "
        f"FROM {target}").fetchone()
    return "text:" + hashlib.sha256(repr((kind, names, int(n), int(total), int(xor))).encode("utf-8")).hexdigest()
