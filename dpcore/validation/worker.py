"""What a mapper runs on other processes for :func:`~dpcore.validation.validate_table`.

:class:`ChunkTask` (picklable: the spec, the chunk's private Parquet file and
the scratch folder) and :func:`_validate_chunk` (module level, so any mapper,
a process pool or Dask workers, imports it from here). A chunk's validated
and quarantined rows and its complete great-expectations result go to files
in the export's private scratch folder; only the small
:class:`~dpcore.validation.ChunkVerdict` travels back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpcore.storage.private_files import private_open, write_private_text
from dpcore.release.spec import ReleaseSpec
from .check import ChunkVerdict, _check
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


@dataclass(frozen=True)
class ChunkTask:
    """A picklable unit of work of :func:`validate_table`: one chunk exported to a private Parquet file.

    Attributes
    ----------
    spec : ReleaseSpec
    path : str or None
        The chunk's rows (the raw columns and ``flag``); None: validate ``header`` (an empty table).
    index : int
    flag : str
        The duplicate-flag column (the row's record id is shared with another row of the table).
    out_dir : str
        Private scratch folder for the chunk's outputs.
    header : pandas.DataFrame, optional
        Zero rows with the raw table's columns (only when the table is empty).
    """

    spec: ReleaseSpec
    path: str | None
    index: int
    flag: str
    out_dir: str
    header: pd.DataFrame | None = None

    def read(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The chunk as ``load_raw`` types it (DuckDB's pandas conversion) and its duplicate flags."""
        if self.path is None:
            return self.header, np.zeros(len(self.header), dtype=bool)
        df = read_rows(self.path)
        return df.drop(columns=[self.flag]), df[self.flag].to_numpy(dtype=bool)


def read_rows(path: str | Path) -> pd.DataFrame:
    """A private Parquet file of raw rows as ``load_raw`` types them (DuckDB's pandas conversion)."""
    import duckdb
    import pyarrow.parquet as pq

    con = duckdb.connect()
    try:
        return con.from_arrow(pq.read_table(path)).df()
    finally:
        con.close()


def _validate_chunk(task: ChunkTask) -> ChunkVerdict:
    """Validate one chunk and write its rows and complete result to the scratch folder (module level: any mapper).

    Returns the small verdict; the rows (validated, quarantine) and great-expectations'
    complete result go to Parquet/JSON files next to the chunk (private, removed with the folder).
    """
    raw, dup = task.read()
    verdict, validated, quarantine, result = _check(raw, dup, task.spec)
    out = Path(task.out_dir)
    files = {
        "validated": out / f"validated-{task.index:08d}.parquet",
        "quarantine": out / f"quarantine-{task.index:08d}.parquet",
        "result": out / f"result-{task.index:08d}.json",
    }
    with private_open(files["validated"], "wb") as fh:
        validated.to_parquet(fh, index=False)
    if len(quarantine):
        with private_open(files["quarantine"], "wb") as fh:
            quarantine.to_parquet(fh, index=False)
    write_private_text(files["result"], json.dumps(result))
    verdict.files = {key: str(path) for key, path in files.items()}
    return verdict
