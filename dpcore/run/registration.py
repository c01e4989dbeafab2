"""The data owner's registration of a dataset name (the registration rule, DESIGN.md rule 12).

A dataset name must be registered before any run can use it
(:func:`dpcore.run.pipeline.require_registered` refuses the others before ingest,
for a reason that does not depend on the data). Registering is the data
owner's act (``dpr dataset add NAME --spec S``): it reads the spec's input,
fingerprints its record ids (HMAC under the owner's key), shows the owner
which budgets' records they overlap and how many, and records the owner's
choice (:meth:`dpcore.budget.ledger.PrivacyLedger.register_dataset`). The overlap is
owner-only: it is returned to the owner's terminal, never logged, stored or
published.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from dpcore.budget.amounts import PrivacyCost
from dpcore.ingest.raw import ingest
from dpcore.budget.ledger import LedgerError, Registration
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from dpcore.steps.common import open_stores
from dpcore.ingest.disk_space import require_disk


@dataclass(frozen=True)
class RegistrationOutcome:
    """What ``dpr dataset add`` tells the data owner.

    Attributes
    ----------
    registration : Registration
        The recorded registration (public).
    already : bool
        The name was already registered identically (nothing new recorded, no data read).
    overlaps : dict of str to int
        Private, the owner's eyes only: budget -> how many of the input's record
        ids its records already hold (empty when ``already``).
    ids : int
        Private: the number of distinct record ids in the input (0 when ``already``).
    """

    registration: Registration
    already: bool
    overlaps: dict[str, int] = field(default_factory=dict, repr=False)
    ids: int = field(default=0, repr=False)


def _wanted_separations(spec: ReleaseSpec, separate_from: list[str], reason: str | None) -> dict[str, str]:
    """The owner's separations: ``budget.separate_from`` of the spec, then ``--separate-from`` (with ``--reason``)."""
    seps = dict(spec.budget.separate_from)
    for other in separate_from:
        if not (reason or "").strip():
            raise LedgerError(f"--separate-from {other}: a separation needs the owner's reason (--reason TEXT)")
        seps[other] = reason
    return seps


def register(
    spec: ReleaseSpec, settings: Settings, share: str | None = None, separate_from: list[str] | tuple = (),
    reason: str | None = None,
) -> RegistrationOutcome:
    """Register ``spec.dataset.name`` as the data owner (owner-only: reads the data).

    An identical re-registration returns at once without reading the data; a
    different one is refused (a registration does not change). Otherwise the
    input is ingested into ``raw`` (as a run would), its record ids are
    fingerprinted, and the registration is recorded with the owner's choice.

    Parameters
    ----------
    spec : ReleaseSpec
        Gives the name, the input, the record-id column and the cap; its
        ``budget.separate_from`` entries count as separations chosen by the owner.
    settings : Settings
    share : str, optional
        A budget the name charges (``--share``).
    separate_from : list of str
        Budgets kept separate on purpose (``--separate-from``, with ``reason``).
    reason : str, optional
        The owner's reason (required with ``separate_from``), recorded.

    Returns
    -------
    RegistrationOutcome
        Its ``overlaps`` and ``ids`` are private: for the owner's terminal only.

    Raises
    ------
    OverlapDecisionRequired
        The ids overlap a budget the owner neither shared nor separated
        (``overlaps`` attached, for the owner); nothing was recorded.
    LedgerError
        A different registration exists, a named budget is unknown, a reason
        is missing, a shared budget's cap differs from the spec's, or DuckDB
        ran out of its memory matching the ids (the message says to register
        with a larger ``DPR_MEMORY_LIMIT``).
    IngestError
        The input cannot be read.
    NotEnoughDiskError
        The warehouse's disk has less free space than the ingest, the fingerprints and DuckDB's spill may take
        (:func:`dpcore.ingest.disk_space.require_disk`, issue 51); nothing was read or recorded.
    """
    stores = open_stores(settings)
    ledger = stores.ledger
    name = spec.dataset.name
    cap = PrivacyCost(spec.budget.epsilon_exact, spec.budget.delta_exact)
    seps = _wanted_separations(spec, list(separate_from), reason)
    existing = ledger.repeat_registration(name, cap, spec.budget.neighbour, share, seps, reason)
    if existing is not None:  # identical to the recorded one (a different one was refused): no data read
        return RegistrationOutcome(existing, True)
    require_disk(spec, settings, "the registration")  # before the input is read (issue 51)
    ingested = ingest(spec, stores.warehouse, settings.data)
    rid = spec.dataset.record_id
    if not stores.warehouse.query(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = 'raw' AND table_name = ? AND column_name = ?",
        [ingested.table, rid],
    ):
        raise LedgerError(
            f"dataset.record_id {rid!r}: the input has no such column, so its records cannot be fingerprinted; "
            "fix dataset.record_id in the spec (or the input's header) and register again"
        )
    seen: list[tuple[dict[str, int], int]] = []  # (overlaps, distinct ids): the owner's eyes only
    try:
        reg, already = ledger.register_dataset(
            name, ingested.qualified_table, rid, settings.owner_secret(), cap, spec.budget.neighbour, share=share,
            separate_from=seps, reason=reason, on_fingerprinted=lambda found, n: seen.append((found, n)),
        )
    except LedgerError as exc:
        if seen:
            exc.overlaps_seen = seen[-1]  # the owner's terminal shows them with the refusal
        raise
    except duckdb.OutOfMemoryException:
        raise LedgerError(
            f"dataset {name!r}: DuckDB ran out of its {stores.warehouse.memory.duckdb_bytes / 2**20:.0f} MiB "
            "fingerprinting the input's record ids or matching them with the budgets' records; nothing was "
            "registered. Register with a "
            "larger DPR_MEMORY_LIMIT (it applies to this command only; the runs keep theirs)"
        ) from None
    overlaps, ids = seen[-1] if seen else ({}, 0)
    return RegistrationOutcome(reg, already, overlaps, ids)
