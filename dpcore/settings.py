"""Where the pipeline keeps its files.

Everything lives under one home folder, ``$DPR_HOME`` (default ``./var`` in the
current directory): the DuckDB warehouse, materialised demo data and release
bundles. Paths can be overridden one by one with ``DPR_WAREHOUSE`` and
``DPR_BUNDLES``. The data owner's secret key (:mod:`dpcore.lineage`) lives in
``$DPR_HOME/owner/owner.key`` (``DPR_OWNER_KEY_FILE`` overrides), outside the
bundles. ``DPR_DASK_ADDRESS`` points mapped tasks at an existing Dask
cluster (used by the operations issue).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """Resolved file locations."""

    home: Path
    warehouse: Path
    bundles: Path
    data: Path
    owner_key: Path

    @classmethod
    def from_env(cls) -> "Settings":
        home = Path(os.environ.get("DPR_HOME", "var")).resolve()
        return cls(
            home=home,
            warehouse=Path(os.environ.get("DPR_WAREHOUSE", home / "warehouse.duckdb")).resolve(),
            bundles=Path(os.environ.get("DPR_BUNDLES", home / "bundles")).resolve(),
            data=home / "data",
            owner_key=Path(os.environ.get("DPR_OWNER_KEY_FILE", home / "owner" / "owner.key")).resolve(),
        )

    def owner_secret(self) -> bytes:
        """The owner's HMAC key (created on first use; never logged)."""
        from .lineage import load_owner_key

        return load_owner_key(self.owner_key)
