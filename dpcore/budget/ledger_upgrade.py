"""The warehouse's schema version, and the upgrade of a warehouse written by an earlier version (issue 47 §1).

DESIGN.md rules 2 and 11: an upgrade must not forget what was charged or which releases were published. The
warehouse records its layout as ``ledger.meta`` row ``schema_version``. :func:`upgrade` (run by
:func:`dpcore.budget.ledger_home.open_home_warehouse` before anything else reads the ledger, so before any charge)
brings an older warehouse to :data:`SCHEMA_VERSION` in one transaction, or refuses:

* **version 1** (before ``542fa91``, e.g. ``0dd6c78``): charge keys were built from the input's content hash
  and finished releases were not recorded. Each charge is re-keyed to
  :func:`dpcore.budget.charge_keys.charge_key` of its own stored public names and parameters (the key the current code
  computes for it; a stored answer moves with its charge), and each release id whose bundle
  (``bundles/<dataset>/<release>/manifest.json``) lists only charges of this ledger is recorded as a finished
  release pipeline: a re-run returns the stored release and charges nothing. Its planned lines were never
  recorded, so such a release id answers with its stored release whatever spec asks for it
  (:data:`MIGRATED_LINES`). Two old charges that now get one key (an old release id run again on changed
  data) stay charged under ``legacy:<old key>``.
* **version 2** (``542fa91`` up to ``8cd7745``): already today's keys and release runs; only the version is
  written (and the fingerprints converted, as for version 3).
* **version 3** (up to ``6d31182``): ``ledger.record_fingerprints.fp`` held each record id's HMAC-SHA256 as 64
  hex digits; it is converted in place to the HMAC's first 124 bits
  (:func:`dpcore.budget.ledger.compact_fingerprints`, issue 51), the value today's registration computes for the
  same id under the same key, so every later registration finds the same overlaps as before.
* a **newer** version than this code knows: refused, naming both versions (upgrade the code, or restore a
  backup taken before the newer version ran); nothing is changed.

Only public facts are read: dataset names, release ids, step labels, public parameters, public refs.
"""
from __future__ import annotations

import json
from pathlib import Path

from .charge_keys import PIPELINE, charge_key, run_key
from .ledger import LedgerError, compact_fingerprints
from dpcore.storage.warehouse import Warehouse

#: The layout this code writes.
SCHEMA_VERSION = 4
#: ``ledger.release_runs.lines`` of a release finished before its planned lines were recorded.
MIGRATED_LINES = ["(finished before the upgrade to schema 3; planned lines not recorded)"]

_RELEASE_RUNS_DDL = """CREATE TABLE IF NOT EXISTS ledger.release_runs (
    run_key VARCHAR PRIMARY KEY, dataset VARCHAR NOT NULL, release_id VARCHAR NOT NULL, unit VARCHAR NOT NULL,
    lines VARCHAR NOT NULL, outcome VARCHAR NOT NULL, finished_at TIMESTAMPTZ NOT NULL, flow_run_id VARCHAR)"""


class WarehouseVersionError(LedgerError):
    """The warehouse was written by a version of this project this code cannot read (nothing was changed)."""


def _table(con, name: str) -> bool:
    return con.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = 'ledger' AND table_name = ?",
                       [name]).fetchone() is not None


def schema_version(wh: Warehouse) -> int | None:
    """The version recorded in the warehouse (None: written before versions were recorded, or empty)."""
    def op(con):
        if not _table(con, "meta"):
            return None
        row = con.execute("SELECT value FROM ledger.meta WHERE name = 'schema_version'").fetchone()
        return int(row[0]) if row else None
    return wh.run(op)


def _outcome(manifest: dict, bundle: Path, warehouse: Path) -> dict:
    b = manifest.get("budget") or {}
    zero = {"epsilon": 0.0, "delta": 0.0}
    return {"result": {
        "bundle": str(bundle), "warehouse": str(warehouse), "stored_release": False,
        "spent_by_this_release": b.get("spent_by_this_release", zero),
        "charged_by_this_run": b.get("charged_by_this_run", b.get("spent_by_this_release", zero)),
        "spent_total": b.get("spent_total", zero), "remaining": b.get("remaining", zero),
        "cap": b.get("cap", zero), "neighbour": b.get("neighbour", "add-remove"),
        "upgraded_from_schema": 1,
    }}


def upgrade(wh: Warehouse, bundles: Path) -> int | None:
    """Bring ``wh`` to :data:`SCHEMA_VERSION` in one transaction; returns the version found (None: unversioned).

    Parameters
    ----------
    wh : Warehouse
    bundles : Path
        The home's bundles folder (finished releases of a version-1 warehouse are read from their manifests).

    Raises
    ------
    WarehouseVersionError
        The warehouse is of a newer version than this code; nothing was changed or charged.
    """
    found = schema_version(wh)
    if found == SCHEMA_VERSION:
        return found
    if found is not None and found > SCHEMA_VERSION:
        raise WarehouseVersionError(
            f"the warehouse {wh.path} has schema version {found}, written by a newer version of this project; "
            f"this code reads schema version {SCHEMA_VERSION} and upgrades only older ones, so nothing was read or "
            "charged: run the newer code again, or restore a backup taken before it ran (docs/backups.md, 'Upgrade')")

    def op(con):
        con.execute("CREATE TABLE IF NOT EXISTS ledger.meta (name VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
        if _table(con, "charges") and (found is None or found < 3):
            _rekey(con)
            con.execute(_RELEASE_RUNS_DDL)
            _finished_releases(con, bundles, wh.path)
        compact_fingerprints(con)  # versions up to 3: hex fingerprints (a no-op when there are none)
        con.execute("INSERT OR REPLACE INTO ledger.meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])

    wh.run(op, transaction=True)
    return found


def _rekey(con) -> None:
    """Version 1 -> today's charge keys (each charge's own public names and parameters); answers move along."""
    cols = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE "
                                      "table_schema = 'ledger' AND table_name = 'charges'").fetchall()}
    line = "line_key IS NULL AND " if "line_key" in cols else ""
    rows = con.execute(f"SELECT key, dataset, release_id, step, params, (SELECT count(*) FROM releases.outputs o "
                       f"WHERE o.key = c.key) FROM ledger.charges c WHERE {line}key NOT LIKE 'recovery:%' "
                       "AND key NOT LIKE 'legacy:%' ORDER BY 6 DESC, reserved_at, key").fetchall()
    taken = {r[0] for r in con.execute("SELECT key FROM ledger.charges").fetchall()}
    moves = []
    for old, ds, rid, step, params, _ in rows:
        new = charge_key(ds, rid, step, json.loads(params))
        if new == old:
            continue
        target = new if new not in taken else f"legacy:{old}"
        taken.add(target)
        moves.append((old, target))
    for old, new in moves:
        con.execute("UPDATE ledger.charges SET key = ? WHERE key = ?", [new, old])
        con.execute("UPDATE releases.outputs SET key = ? WHERE key = ?", [new, old])


def _finished_releases(con, bundles: Path, warehouse: Path) -> None:
    """Each release id with a bundle listing only this ledger's released charges: a finished release pipeline."""
    pairs = con.execute("SELECT DISTINCT dataset, release_id FROM ledger.charges WHERE status = 'released' "
                        "AND key NOT LIKE 'recovery:%'").fetchall()
    for ds, rid in pairs:
        key = run_key(ds, rid, PIPELINE)
        if con.execute("SELECT 1 FROM ledger.release_runs WHERE run_key = ?", [key]).fetchone():
            continue
        path = Path(bundles) / ds / rid / "manifest.json"
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError):
            continue  # never published (a crashed run of the old version): its charges stay, nothing to answer
        except (ValueError, UnicodeDecodeError):
            raise WarehouseVersionError(
                f"upgrading the warehouse {warehouse} from schema version 1 to {SCHEMA_VERSION}: the bundle "
                f"manifest {path} cannot be read, so whether release {rid!r} was published is unknown; nothing was "
                "changed or charged: restore that manifest from your backup (docs/backups.md, 'What, when and how')") from None
        refs = {str(r.get("ref")) for r in manifest.get("releases", []) if isinstance(r, dict) and r.get("ref")}
        held = {r[0] for r in con.execute("SELECT public_ref FROM ledger.charges WHERE dataset = ? AND "
                                          "release_id = ?", [ds, rid]).fetchall()}
        if not refs or not refs <= held:
            continue
        con.execute("INSERT INTO ledger.release_runs VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                    [key, ds, rid, PIPELINE, json.dumps(MIGRATED_LINES),
                     json.dumps(_outcome(manifest, path.parent, warehouse), sort_keys=True),
                     manifest.get("created_at") or "1970-01-01T00:00:00+00:00"])
