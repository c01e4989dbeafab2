"""Where the pipeline keeps its files.

Everything lives under one home folder, ``$DPR_HOME`` (default ``./var`` in the
current directory): the DuckDB warehouse, materialised demo data and release
bundles. Paths can be overridden one by one with ``DPR_WAREHOUSE`` and
``DPR_BUNDLES``. The data owner's secret key (:mod:`dpcore.storage.lineage`) lives in
``$DPR_HOME/owner/owner.key`` (``DPR_OWNER_KEY_FILE`` overrides), outside the
bundles. ``DPR_DASK_ADDRESS`` points mapped tasks at an existing Dask
cluster (used by the operations issue). ``DPR_SCRATCH_URL`` (an fsspec URL such as
``s3://bucket/prefix``, no credentials in it) sends the chunks that go to Dask workers,
and what they send back, through that store instead of the warehouse's scratch folder
(:mod:`dpcore.storage.scratch_store`; issue 50).

``DPR_SPECS_DIR`` lists the folders a flow run may load its release spec from
(``os.pathsep``-separated, so ``:`` on Linux; issue 33 item 7): an operator
types ``spec_path`` into the Prefect UI's form, and without a limit the worker
would read (and quote in its errors) any file of its machine. Unset or empty,
the folders are the project's own ``specs/`` (next to ``dpcore/``) and the
owner's spec folder ``$DPR_HOME/specs`` when it exists. The containment check
itself is :func:`dpcore.release.spec_dirs.allowed_spec_file`.

``DPR_MEMORY_LIMIT`` below :data:`MEMORY_FLOOR` is refused before a run reads
or charges anything (:func:`check_memory_floor`, issue 47 item 5).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

#: The project's own spec folder (``specs/`` of the checkout that holds this code), allowed by default.
PROJECT_SPECS = Path(__file__).resolve().parents[2] / "specs"


def specs_dirs_from_env(env: Mapping[str, str], home: Path) -> tuple[Path, ...]:
    """The folders flow runs may load specs from, each with its links resolved.

    Parameters
    ----------
    env : mapping
        The environment; ``DPR_SPECS_DIR`` is read from it (``os.pathsep``-separated folders, relative
        ones against the working directory; empty entries are skipped).
    home : Path
        ``$DPR_HOME``, whose ``specs`` folder is allowed by default when it exists.

    Returns
    -------
    tuple of Path
        Real (symlink-free, absolute) folder paths. Unset or empty ``DPR_SPECS_DIR``: the project's
        ``specs/`` and ``$DPR_HOME/specs`` if it is a folder.
    """
    given = [p for p in env.get("DPR_SPECS_DIR", "").split(os.pathsep) if p.strip()]
    if given:
        dirs = [Path(p).expanduser() for p in given]
    else:
        dirs = [PROJECT_SPECS] + ([home / "specs"] if (home / "specs").is_dir() else [])
    return tuple(dict.fromkeys(Path(os.path.realpath(d)) for d in dirs))


#: The smallest ``DPR_MEMORY_LIMIT`` a run is allowed (bytes). Measured on 2026-12-07 (2 shared cores), one release
#: per cap and home: the demo spec on its first 1,000 flights (``tests/ops_fixtures.small_spec``) ran out of
#: DuckDB's memory in validation at 96 and 128 MiB (DuckDB's share, a quarter of such a cap: 24 and 32 MiB) and
#: completed at 160, 192 and 256 MiB; the whole demo (336,776 flights) completed at 160, 192 and 256 MiB
#: (about 100 s each). The floor keeps one 32 MiB step above the smallest cap that completed, for specs with
#: more columns than the demo's. docs/scale.md, "`DPR_MEMORY_LIMIT`: the memory a run uses".
MEMORY_FLOOR = 192 * 1024**2


def check_memory_floor(env: Mapping[str, str] | None = None) -> None:
    """Refuse a ``DPR_MEMORY_LIMIT`` below :data:`MEMORY_FLOOR`, before anything is read or charged.

    Under a smaller cap DuckDB's share cannot hold one operation of the pipeline (a run then stopped after
    its reservation, in validation or the rules step).

    Parameters
    ----------
    env : mapping, optional
        The environment (default ``os.environ``); unset or empty ``DPR_MEMORY_LIMIT`` is the 2 GiB default.

    Raises
    ------
    dpcore.runtime.chunks.MemoryLimitError
        One line naming the setting, its value and the floor (a refusal: exit 2).
    """
    from dpcore.runtime.chunks import MemoryLimitError, parse_memory

    text = ((env if env is not None else os.environ).get("DPR_MEMORY_LIMIT") or "").strip()
    if text and parse_memory(text) < MEMORY_FLOOR:
        raise MemoryLimitError(
            f"DPR_MEMORY_LIMIT={text} is below the {MEMORY_FLOOR // 1024**2} MiB a run needs (DuckDB's share of a "
            f"smaller cap cannot hold one step's work): set DPR_MEMORY_LIMIT={MEMORY_FLOOR // 1024**2}MiB or more, "
            "or unset it (2 GiB). Nothing was read or charged.")


@dataclass(frozen=True)
class Settings:
    """Resolved file locations."""

    home: Path
    warehouse: Path
    bundles: Path
    data: Path
    owner_key: Path
    #: Folders flow runs may load a release spec from (``DPR_SPECS_DIR``; see :func:`specs_dirs_from_env`).
    specs_dirs: tuple[Path, ...] = ()
    #: ``DPR_SCRATCH_URL``: the store chunks travel through to and from Dask workers (None: the local scratch folder).
    scratch_url: str | None = None

    @classmethod
    def from_env(cls) -> "Settings":
        home = Path(os.environ.get("DPR_HOME", "var")).resolve()
        return cls(
            home=home,
            warehouse=Path(os.environ.get("DPR_WAREHOUSE", home / "warehouse.duckdb")).resolve(),
            bundles=Path(os.environ.get("DPR_BUNDLES", home / "bundles")).resolve(),
            data=home / "data",
            owner_key=Path(os.environ.get("DPR_OWNER_KEY_FILE", home / "owner" / "owner.key")).resolve(),
            specs_dirs=specs_dirs_from_env(os.environ, home),
            scratch_url=(os.environ.get("DPR_SCRATCH_URL") or "").strip() or None,
        )

    def owner_secret(self) -> bytes:
        """The owner's HMAC key (created on first use; never logged)."""
        from .lineage import load_owner_key

        return load_owner_key(self.owner_key)
