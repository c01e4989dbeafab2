"""Private Parquet partitions of a warehouse query: chunks any process can read (issue 21).

A stage that passes over a large table several times (the EM fit), or maps
its chunks onto Dask workers, exports the columns it needs once, with
:func:`exported`, to one Parquet file in the warehouse's private scratch
folder (``<warehouse file>.scratch/``, mode 0700; the file 0600), one row
group per chunk. :class:`Partitions` is a small picklable handle (path,
number of chunks): chunk ``i`` is read with :meth:`Partitions.read` without
the warehouse's lock, by this process or a Dask worker on the same machine.
The file holds private rows: it never leaves the scratch folder and is
deleted when the ``with`` block ends, also on error.
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .lineage import new_nonce
from .warehouse import Warehouse
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def scratch_dir(wh: Warehouse) -> Path:
    """The warehouse's private scratch folder (created 0700)."""
    path = wh.path.parent / f"{wh.path.name}.scratch"
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@dataclass(frozen=True)
class Partitions:
    """Handle on an exported query: a Parquet file with one row group per chunk.

    Attributes
    ----------
    path : Path
    n_chunks : int
        Number of chunks (row groups); 0 for an empty result.
    rows : int
        Rows per chunk (the last one may be shorter).
    columns : tuple of str
    """

    path: Path
    n_chunks: int
    rows: int
    columns: tuple[str, ...]

    def read(self, i: int, columns: list[str] | None = None) -> pd.DataFrame:
        """Chunk ``i`` (0-based) as a DataFrame, optionally only ``columns``."""
        import pyarrow.parquet as pq

        if not 0 <= i < self.n_chunks:
            raise IndexError(f"chunk {i} is not one of this export's chunks (their number is private: iterate over the handle)")
        return pq.ParquetFile(self.path).read_row_group(i, columns=columns).to_pandas()

    def __iter__(self) -> Iterator[pd.DataFrame]:
        import pyarrow.parquet as pq

        f = pq.ParquetFile(self.path) if self.n_chunks else None
        for i in range(self.n_chunks):
            yield f.read_row_group(i).to_pandas()

    def __len__(self) -> int:
        return self.n_chunks


class NotInOrder(Exception):
    """Raised by :func:`export_partitions` when the ``increasing`` column does not increase down the result."""


def export_partitions(
    wh: Warehouse, sql: str, params: list | None, rows: int, directory: Path, distinct: tuple[str, ...] = (),
    increasing: str | None = None,
) -> Partitions:
    """Write ``sql``'s result to ``directory`` as one Parquet file with a row group of ``rows`` rows per chunk.

    Streams through :meth:`~dpcore.storage.warehouse.Warehouse.iter_batches`: one
    chunk in memory at a time. The caller deletes the file
    (:func:`exported` does). ``distinct``: columns whose values are all
    distinct (a row number, a record id), written without a dictionary
    encoding (Parquet's writer otherwise builds one per chunk and drops it;
    that was half of the detection export's writing, issue 29). The values
    read back are the same either way.

    ``increasing``: a column whose values must increase strictly down the result (checked batch by batch, with
    numpy, against the previous batch's last value); otherwise :class:`NotInOrder` is raised and the file is
    removed. A caller that needs a table's rows in ``_row`` order reads them without ``ORDER BY`` (in the
    order they were stored, a scan: no sort of the table) and, if that order is not ``_row``'s, exports again
    with the ``ORDER BY`` (:func:`dpcore.steps.detect.open_detection_partitions`).
    """
    import pyarrow.parquet as pq

    path = Path(directory) / f"part-{new_nonce(8)}.parquet"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    writer = None
    n = 0
    columns: tuple[str, ...] = ()
    last = None
    ok = False
    try:
        for batch in wh.iter_batches(sql, params, rows=rows):
            if increasing is not None:
                last = _check_increasing(batch.column(increasing), last)
            if writer is None:
                dictionary = [c for c in batch.schema.names if c not in distinct]
                writer = pq.ParquetWriter(path, batch.schema, use_dictionary=dictionary or False)
                columns = tuple(batch.schema.names)
            writer.write_batch(batch, row_group_size=rows)
            n += 1
        ok = True
    finally:
        if writer is not None:
            writer.close()
        if not ok:
            path.unlink(missing_ok=True)
    return Partitions(path, n, int(rows), columns)


def _check_increasing(column, last):
    """The last value of ``column`` (an Arrow array without nulls) after checking that its values increase
    strictly and exceed ``last``; raises :class:`NotInOrder` otherwise."""
    import numpy as np

    values = column.to_numpy(zero_copy_only=False)
    if len(values) == 0:
        return last
    if (last is not None and values[0] <= last) or np.any(values[1:] <= values[:-1]):
        raise NotInOrder
    return values[-1]


@contextmanager
def exported(wh: Warehouse, sql: str, params: list | None = None, *, rows: int) -> Iterator[Partitions]:
    """:func:`export_partitions` into a fresh folder under :func:`scratch_dir`, removed on exit."""
    folder = scratch_dir(wh) / new_nonce(8)
    folder.mkdir(mode=0o700)
    try:
        yield export_partitions(wh, sql, params, rows, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
