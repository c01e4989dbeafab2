"""Run units of a release id: one live run at a time, and a finished run answered from the ledger.

DESIGN.md rules 2 and 10, issue 28 §1 and issue 33 §2:

* **One live run per run unit.** A run unit is the whole release pipeline of
  a release id, or one operator query (:func:`dpcore.budget.charge_keys.run_key`).
  :func:`open_run` takes an exclusive, non-blocking OS lock (``flock``) on a
  file named by the run key, next to the warehouse, for the whole run. A
  second run of the same unit while the first is alive is refused at once
  (:class:`ReleaseInProgressError`, charging nothing) instead of reading the
  first run's reservation as a crash. The OS drops the lock when the process
  dies, so a crashed run never blocks the re-run that completes it.
* **A finished release is the stored release.** When a run unit finishes,
  its public outcome (what the flow returns: bundle path, budget figures or
  the released rows) is stored in ``ledger.release_runs``. A re-run of the
  same unit returns that outcome before reading any data: no ingest, no
  validation, no detector, no charge, no draw. So nothing public about a
  re-run (its logs, its state, its result) depends on whether the data
  changed since; new data needs a new release id. A finished release
  pipeline re-run with a spec whose planned lines differ is refused: a
  release id names one release. A release finished before the upgrade to
  schema 3 (:mod:`dpcore.budget.ledger_upgrade`) recorded no planned lines: it
  returns its stored release whatever spec asks for it.

Privacy: the outcome stored is the public outcome already published; the run
key is a function of public names only. Nothing here reads the data.
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcore.budget.charge_keys import PIPELINE, run_key
from dpcore.budget.ledger_upgrade import MIGRATED_LINES
from dpcore.storage.warehouse import Warehouse
from dpcore.storage.warehouse_lease import clear_leftovers

if TYPE_CHECKING:
    from dpcore.storage.settings import Settings

_DDL = """CREATE TABLE IF NOT EXISTS ledger.release_runs (
    run_key VARCHAR PRIMARY KEY, dataset VARCHAR NOT NULL, release_id VARCHAR NOT NULL, unit VARCHAR NOT NULL,
    lines VARCHAR NOT NULL, outcome VARCHAR NOT NULL, finished_at TIMESTAMPTZ NOT NULL, flow_run_id VARCHAR)"""

#: The process's open run locks: run key -> file descriptor (dropped by :func:`close_run` or by process exit).
_HELD: dict[str, int] = {}


class ReleaseInProgressError(RuntimeError):
    """Another live process is running the same release id (or the same operator query) right now."""


class ReleaseIdTakenError(ValueError):
    """A finished release id was asked to release something else (a release id names one release)."""


@dataclass(frozen=True)
class RunHandle:
    """An open run unit (its lock held by this process) or a finished one.

    Attributes
    ----------
    key : str
        :func:`dpcore.budget.charge_keys.run_key`.
    dataset, release_id, unit : str
    lines : list of str
        The run's planned line keys (sorted).
    stored : dict or None
        The finished run's public outcome (then no lock is held and the flow
        returns it as is), or None for a run to do now.
    """

    key: str
    dataset: str
    release_id: str
    unit: str
    lines: list[str] = field(default_factory=list)
    stored: dict[str, Any] | None = None


def _lock_dir(warehouse: Path) -> Path:
    d = Path(str(warehouse) + ".locks")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def _refuse_unknown_bundle(settings: "Settings", wh: Warehouse, dataset: str, release_id: str) -> None:
    """Refuse, before any charge, a release id whose bundle is published but not a run of this ledger.

    A bundle whose charges this ledger holds for the release id is a run that crashed after publishing (its
    re-run keeps that bundle: :func:`dpcore.publish.bundle.write_bundle`). Any other bundle in the release id's folder
    would be rewritten with fresh noise: two answers to one release (issue 47 §1), so it is refused.
    """
    from dpcore.publish.bundle import BundleExistsError, published_refs

    path = Path(settings.bundles) / dataset / release_id
    refs = published_refs(path)
    if refs is None:
        return
    held = {r[0] for r in wh.query("SELECT public_ref FROM ledger.charges WHERE dataset = ? AND release_id = ?",
                                   [dataset, release_id])}
    if not refs <= held:
        raise BundleExistsError(
            f"release {release_id!r} of dataset {dataset!r} is already published at {path}, but this warehouse's "
            "ledger does not hold that bundle's charges; a published bundle is never rewritten, so nothing was "
            "charged: give this release a new release id (--release-id), or restore the warehouse that made it "
            "(docs/backups.md, 'What, when and how')")


def _ensure(wh: Warehouse) -> None:
    wh.run(lambda con: con.execute(_DDL))


def _finished(wh: Warehouse, key: str) -> tuple[list[str], dict[str, Any]] | None:
    rows = wh.query("SELECT lines, outcome FROM ledger.release_runs WHERE run_key = ?", [key])
    return (json.loads(rows[0][0]), json.loads(rows[0][1])) if rows else None


def _open_warehouse(warehouse: Path, dataset: str, settings: "Settings | None") -> Warehouse:
    """The warehouse a run unit opens, creating nothing before the checks that can refuse (issue 47 §3).

    With the home's ``settings``, the home's checks run first (:func:`dpcore.budget.ledger_home.open_home_warehouse`:
    upgrade, marker, bundles); a home without a warehouse is refused as it stands: "is missing" when its
    marker or bundles name a ledger, else its dataset is not registered (nothing is registered without a
    warehouse). Without settings (library use) a missing file is refused likewise.
    """
    from dpcore.budget.ledger import DatasetNotRegisteredError
    from dpcore.budget.ledger_home import LedgerMissingError, open_home_warehouse

    if settings is not None and Path(settings.warehouse).resolve() == Path(warehouse).resolve():
        wh = open_home_warehouse(settings, create=False)
        if wh is None:
            raise DatasetNotRegisteredError(dataset)
        return wh
    if not Path(warehouse).exists():
        raise LedgerMissingError(
            f"the warehouse {warehouse} is missing: nothing was created or charged; restore it from your latest "
            "backup (docs/backups.md, 'What, when and how'), or register the dataset in a new home (`dpr dataset add`)")
    return Warehouse(warehouse)


def open_run(warehouse: Path, dataset: str, release_id: str, unit: str, lines: list[str],
             settings: "Settings | None" = None) -> RunHandle:
    """Take the run unit's lock, or return its stored outcome if it finished before.

    Parameters
    ----------
    warehouse : Path
        The warehouse file (the lock files live in ``<warehouse>.locks/``, 0700).
    dataset, release_id : str
    unit : str
        :data:`dpcore.budget.charge_keys.PIPELINE`, or the operator flow's name.
    lines : list of str
        The run's planned line keys (:attr:`dpcore.run.cost_plan.PlanLine.key`).
    settings : Settings, optional
        The home: its checks run before anything is opened or created (:func:`_open_warehouse`).

    Returns
    -------
    RunHandle
        ``stored`` set: the run finished before (no lock held). Otherwise the
        lock is held until :func:`close_run` or the process ends, and what
        crashed runs left in the warehouse's scratch folder is removed
        (:func:`dpcore.storage.warehouse_lease.clear_leftovers`: private rows, deleted
        unread; nothing a live process may hold).

    Raises
    ------
    ReleaseInProgressError
        Another live process holds the unit's lock; nothing was charged.
    ReleaseIdTakenError
        The release pipeline of ``release_id`` finished with other planned
        lines (another spec); nothing was charged.
    LedgerMissingError, DatasetNotRegisteredError, WarehouseVersionError
        The home's checks refused (:func:`_open_warehouse`); nothing was created or charged.
    BundleExistsError
        The release id's bundle is published but this ledger does not hold
        its charges (:func:`_refuse_unknown_bundle`); nothing was charged.
    """
    lines = sorted(lines)
    key = run_key(dataset, release_id, unit, lines)
    wh = _open_warehouse(Path(warehouse), dataset, settings)
    _ensure(wh)
    if key in _HELD:
        raise ReleaseInProgressError(_in_progress(dataset, release_id, unit))
    fd = os.open(_lock_dir(Path(warehouse)) / f"{key[:32]}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ReleaseInProgressError(_in_progress(dataset, release_id, unit)) from None
    try:
        done = _finished(wh, key)
    except BaseException:
        os.close(fd)
        raise
    if done is not None:
        os.close(fd)
        stored_lines, outcome = done
        if unit == PIPELINE and stored_lines != lines and stored_lines != MIGRATED_LINES:
            raise ReleaseIdTakenError(
                f"release {release_id!r} of dataset {dataset!r} was published with other parameters (its planned "
                "charges differ from this spec's); a release id names one release. Give this release a new "
                "release id (--release-id, or release_id in the spec). Nothing was charged."
            )
        return RunHandle(key, dataset, release_id, unit, lines, outcome)
    if unit == PIPELINE and settings is not None:
        try:
            _refuse_unknown_bundle(settings, wh, dataset, release_id)
        except BaseException:
            os.close(fd)
            raise
    _HELD[key] = fd
    clear_leftovers(wh.path)  # what crashed runs left in the scratch folder; nothing a live process holds
    return RunHandle(key, dataset, release_id, unit, lines)


def finish_run(warehouse: Path, run: RunHandle, outcome: dict[str, Any], flow_run_id: str | None = None) -> None:
    """Store the run's public outcome (a re-run returns it) and release the lock."""
    text = json.dumps(outcome, sort_keys=True, default=str)
    Warehouse(warehouse).run(
        lambda con: con.execute(
            "INSERT OR REPLACE INTO ledger.release_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [run.key, run.dataset, run.release_id, run.unit, json.dumps(run.lines), text,
             datetime.now(timezone.utc), flow_run_id],
        ),
        transaction=True,
    )
    close_run(run)


def close_run(run: RunHandle) -> None:
    """Release the run's lock if this process holds it (idempotent)."""
    fd = _HELD.pop(run.key, None)
    if fd is not None:
        os.close(fd)


def pipeline_finished(warehouse: Path, dataset: str, release_id: str) -> list[str] | None:
    """The planned line keys of the finished release pipeline of ``release_id``, or None (the cost plan)."""
    wh = Warehouse(warehouse)
    _ensure(wh)
    done = _finished(wh, run_key(dataset, release_id, PIPELINE))
    return None if done is None else done[0]


def stored_outcome(warehouse: Path, dataset: str, release_id: str) -> dict[str, Any] | None:
    """What a re-run of the finished release pipeline of ``release_id`` returns, or None if it did not finish.

    Takes no lock and reads no data: a finished release's stored outcome never changes, so ``dpr run``
    answers a stored re-run from it before Prefect starts (issue 48 §6). The caller has checked, as
    :func:`dpcore.run.cost_plan.plan_release` does (``CostPlan.finished``), that the release was published with
    this spec's planned lines.

    Returns
    -------
    dict or None
        The release's public outcome marked as stored (:func:`as_stored`).
    """
    wh = Warehouse(warehouse)
    _ensure(wh)
    done = _finished(wh, run_key(dataset, release_id, PIPELINE))
    return None if done is None else as_stored(done[1]["result"])


def as_stored(result: dict[str, Any]) -> dict[str, Any]:
    """A finished release's stored outcome, as a re-run returns it (that run charged nothing)."""
    return {**result, "stored_release": True, "charged_by_this_run": {"epsilon": 0.0, "delta": 0.0}}


def _in_progress(dataset: str, release_id: str, unit: str) -> str:
    what = "release" if unit == PIPELINE else f"the same {unit} query of release"
    return (f"{what} {release_id!r} of dataset {dataset!r} is being run by another live process right now; "
            "nothing was charged by this run. Wait for that run to finish, then run again: a finished release "
            "id returns its stored release.")
