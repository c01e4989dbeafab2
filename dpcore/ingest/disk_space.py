"""Enough free disk for a registration or a release, checked before the input is read or anything is charged.

Issue 51: a national table (hundreds of millions of rows) fills the warehouse's disk with its raw copy, the
validated table, the detector's scratch exports and DuckDB's spill folder (``<warehouse>.tmp/``). A disk that
cannot hold them used to fail in the middle of validation or detection with ``ENOSPC``; now the registration
(:func:`dpcore.run.registration.register`) and the release's ingest stage (:func:`dpcore.run.pipeline.ingest_stage`,
before the cost preflight reserves the first charge) compare an estimate of what they will write with the free
space of the warehouse's file system and stop in one line (:class:`NotEnoughDiskError`, an environment
failure: exit code 1, like a full disk met later).

The estimate is :data:`NEED_PER_INPUT_BYTE` times the input's size on disk (the bytes of its files as the file
system lists them; no row is read). The size grows with the rows, so it is a data-dependent figure (issue 46):
it appears only where the data owner alone reads it -- the registration's refusal (``dpr dataset add``, the
owner's command on the owner's terminal) and :func:`disk_outlook`, printed by ``dpr spec check SPEC --data``.
A release's refusal, which an operator sees (a deployment run's state message and logs), names no figure: only
that free disk is short, where, and the owner's command that shows the figures (:func:`require_disk`). Whether
the refusal happens at all depends on the input's size only near the threshold (free space = the estimate):
it is decided before the first charge, from the whole input's size, so one record moves it only when the free
space lies within that record's bytes (times the factor) of the estimate. Inputs without files of their own (a
PostgreSQL table, the bundled demo) are not checked here: a full disk met later still stops the run with
``ENOSPC``.
"""
from __future__ import annotations

import errno
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dpcore.runtime.faults import EnvironmentFault

if TYPE_CHECKING:
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import ReleaseSpec

#: Bytes of warehouse and scratch (DuckDB's spill folder, the scratch exports, the warehouse file's growth and
#: its WAL) a registration or a release may add per byte of input, by the input's format. Measured by
#: ``benchmarks.scale --source parquet --factors 100 1000`` (BENCHMARKS "Scale: national size ...", 2026-12-08
#: 02:09-02:42 UTC, 33.7 and 337 million rows, 0.303 and 3.01 GB of snappy Parquet), which prints whether this
#: factor covered each command: the registration grew the home by 4.8 x the input at its peak at 100x and 6.1 x
#: at 1000x (the raw copy, the ids' fingerprints, DuckDB's spill); the release by 7.6 x and 8.3 x more (the
#: validated table, the detector's export, chunk caches and score tables, the spill, which grows faster than
#: the rows: DuckDB's share of the cap does not). The larger times 1.25 (the spill varies with the load and the
#: cap), rounded up: 11. The run before issue 51's rules and detector changes (2026-12-07, bd41557) grew it by
#: 12.3 x in the release at 1000x, over the factor 10 then in force: its rules step joined the labels with hash
#: tables that spilled. The same rows take 44.3 bytes each as CSV and 9.0 as this Parquet (4.9 x), so a CSV's
#: factor is 11 / 4.9 = 2.2; a DuckDB source stores them about as the warehouse's raw table does (14.4 bytes a
#: row): 11 x 9.0 / 14.4 = 6.9.
NEED_PER_INPUT_BYTE = {"parquet": 11.0, "csv": 2.2, "duckdb": 6.9}


class NotEnoughDiskError(EnvironmentFault):
    """The warehouse's disk has less free space than the command will write (one line; nothing read or charged)."""

    def __init__(self, line: str):
        super().__init__(line, errno.ENOSPC)


def free_bytes(path: Path) -> int:
    """Free bytes for this user on the file system holding ``path`` (its nearest existing folder).

    The one place the check reads the file system (tests replace it to fake a small disk).
    """
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def input_bytes(spec: "ReleaseSpec") -> int | None:
    """The input's size on disk in bytes, or None when it has no files of its own to measure.

    A CSV or Parquet file: its size; a Parquet dataset folder (hive-partitioned or not): the sum over its
    ``*.parquet`` files (:func:`dpcore.ingest.sources.parquet_dataset.files`); a DuckDB source: its database file. A
    missing file gives None (the ingest then refuses it with its own message).
    """
    src = spec.dataset.source
    kind = src.kind
    if kind not in NEED_PER_INPUT_BYTE:  # the demo (bundled, small) and database servers: nothing to measure
        return None
    path = Path(src.path)
    try:
        if kind == "parquet" and path.is_dir():
            from dpcore.ingest.sources.errors import SourceError
            from dpcore.ingest.sources.parquet_dataset import files

            try:
                return sum(p.stat().st_size for p in files(src))
            except SourceError:  # no file: the ingest says so
                return None
        return path.stat().st_size
    except FileNotFoundError:
        return None


def needed_bytes(spec: "ReleaseSpec") -> int | None:
    """What a registration or a release of ``spec`` may write: :data:`NEED_PER_INPUT_BYTE` x :func:`input_bytes`."""
    size = input_bytes(spec)
    if size is None:
        return None
    return int(math.ceil(NEED_PER_INPUT_BYTE[spec.dataset.source.kind] * size))


def _gb(n: float, up: bool) -> str:
    tenths = math.ceil(n / 1e8) if up else math.floor(n / 1e8)
    return f"{tenths / 10:.1f} GB"


#: What each command writes, as its refusal names it
_WRITES = {
    "the registration": "the raw copy, the record ids' fingerprints and DuckDB's spill folder",
    "the release": "the raw copy, the validated table, the detector's scratch exports and DuckDB's spill folder",
}


def disk_outlook(spec: "ReleaseSpec", settings: "Settings") -> str | None:
    """The owner's line on disk: what a release of ``spec`` needs and what is free (None: nothing to measure).

    Printed by ``dpr spec check SPEC --data`` (the data owner's command, on the owner's terminal): the figures a
    release's refusal leaves out (:func:`require_disk`), rounded to a tenth of a GB.
    """
    need = needed_bytes(spec)
    if need is None:
        return None
    folder = settings.warehouse.parent
    free = free_bytes(folder)
    verdict = "enough" if need <= free else "NOT enough: a release would stop before its first charge"
    return (f"disk: a release of dataset {spec.dataset.name} needs about {_gb(need, True)} on {folder} "
            f"({NEED_PER_INPUT_BYTE[spec.dataset.source.kind]:g} x the input's {(input_bytes(spec) or 0) / 1e9:.1f} GB "
            f"of {spec.dataset.source.kind}), {_gb(free, False)} is free there: {verdict}")


def require_disk(spec: "ReleaseSpec", settings: "Settings", what: str) -> None:
    """Stop ``what`` (``"the registration"``, ``"the release"``) when the warehouse's disk is too small for it.

    Called before the input is read and before the first charge. Compares :func:`needed_bytes` with
    :func:`free_bytes` of the warehouse's folder (the spill folder and the scratch exports lie next to the
    warehouse file, on the same file system).

    Raises
    ------
    NotEnoughDiskError
        One line, nothing read or charged. The registration (the owner's ``dpr dataset add``): what is needed,
        what is free, where, and what to do. A release (which an operator may start and watch): only that free
        disk is short, where, and that the data owner sees the figures with ``dpr spec check SPEC --data``; no
        figure, since the input's size is data-dependent (issue 46, rule 6).
    """
    need = needed_bytes(spec)
    if need is None:
        return
    folder = settings.warehouse.parent
    free = free_bytes(folder)
    if need <= free:
        return
    parts = _WRITES.get(what, _WRITES["the release"])
    if what != "the registration":  # a run's refusal: no data-dependent figure (the owner's command has them)
        raise NotEnoughDiskError(
            f"not enough free disk for {what} of dataset {spec.dataset.name} on {folder}: {parts} do not fit in "
            "its free space; nothing was read or charged. The data owner sees the figures with `dpr spec check "
            "SPEC --data`; free space on that disk or point DPR_HOME (or DPR_WAREHOUSE) at a larger one, then run "
            "the same release again")
    raise NotEnoughDiskError(
        f"not enough free disk for {what} of dataset {spec.dataset.name}: {parts} need about {_gb(need, True)} on "
        f"{folder} ({NEED_PER_INPUT_BYTE[spec.dataset.source.kind]:g} x the input's "
        f"{(input_bytes(spec) or 0) / 1e9:.1f} GB of "
        f"{spec.dataset.source.kind}), {_gb(free, False)} is free there; nothing was read or charged: free space "
        "on that disk or point DPR_HOME (or DPR_WAREHOUSE) at a larger one, then run the same command again")
