"""The persistent privacy-budget ledger.

Rules enforced here (DESIGN.md, privacy rules 1, 2, 4):

* **Charged before it exists.** :meth:`PrivacyLedger.release_once` reserves the
  cost inside a transaction that refuses to go over the dataset's cap, and only
  then calls the mechanism (which draws the noise).
* **No fresh noise for the same release.** Every charge carries an idempotency
  key (:func:`idempotency_key`: dataset content hash + step + parameters +
  release id). A key whose result is stored returns that stored result with no
  new charge and no new draw.
* **Crash / error rule.** A key that was reserved but whose result was never
  stored (the process died, or the mechanism raised after the reservation)
  stays charged — noise may have been drawn — and is *never* re-drawn: asking
  for it again raises :class:`OrphanedChargeError`, which tells the operator to
  start a new release id (which is charged anew). Budget is never given back.
* **Notions are labelled** (``dp``, ``ocdp``, ``sp``) and every charge records
  mechanism, step, neighbour relation, epsilon, delta, flow-run id and times.
* **Neighbour relations are converted** (rule 5). A dataset's cap is stated
  under one relation (``add-remove`` or ``replace-one``, from the spec's
  ``budget.neighbour``); each charge is the mechanism's cost under *its*
  relation converted by :func:`dpcore.budget.charge_under` (an add/remove
  cost counts ``(2 epsilon, (1 + e^epsilon) delta)`` against a replace-one
  budget; a replace-one cost cannot be charged to an add/remove budget and is
  refused before anything is charged). A charge row keeps both amounts:
  ``eps_units``/``delta_units`` (charged against the cap; they sum to the
  running total) and ``stated_eps_units``/``stated_delta_units`` (the
  mechanism's own statement).

* **A budget belongs to the people in the data, not to a name; the data
  owner decides which budget a name charges** (issue 15 hole 6, issue 28
  hole 3: the registration rule, DESIGN.md rule 12). A dataset name must be
  registered by the data owner (:meth:`PrivacyLedger.register_dataset`, the
  owner-only ``dpr dataset add NAME --spec S``) before any run can use it.
  Registration fingerprints the input's record ids with an HMAC under the
  owner's key (:mod:`dpcore.lineage`; the ids themselves are never stored),
  shows the owner which budgets' records they overlap and how many
  (:meth:`PrivacyLedger.overlaps`), and needs the owner's choice when they
  overlap: share one of those budgets, or keep a separate budget on purpose
  (recorded in ``ledger.separations`` with the owner's reason and printed in
  every later report of both datasets). Without overlap the name gets its
  own budget with the spec's cap. The choice is recorded in
  ``ledger.registrations`` (time, choice, reason) and does not change.
  A run of an unregistered name is refused before ingest
  (:meth:`PrivacyLedger.require_registered`) for a reason that does not
  depend on the data. At run time nothing is linked by overlap:
  :meth:`PrivacyLedger.register_records` only adds the input's fingerprints
  to the budget the registered name charges (internal, so that a later
  registration of a renamed copy sees the overlap). Whoever runs a spec thus
  learns nothing about other datasets' records from any outcome (a probe
  under a new name is refused, identically, whatever its ids), and a renamed
  copy of the data cannot get a fresh budget without the owner's recorded
  decision.
* **Idempotency keys stay inside the ledger** (DESIGN.md rule 7): they are
  built from the input's content hash. Each charge has a random
  ``public_ref`` (a nonce) that the manifest, the report and operator
  sub-bundle names use instead.

Amounts are stored as integer units of 10^-18 (see :mod:`dpcore.budget`) so
sums are exact. The running total per dataset lives in ``ledger.budgets`` and
is updated in the same transaction as the charge insert, so concurrent
reservations (threads or processes) serialise on that row and can never
overspend.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import pandas as pd

from .budget import (
    NOTION_ORDER, BudgetExceededError, Neighbour, NeighbourConversionError, PrivacyCost, charge_under,
    check_neighbour, weakest_notion,
)
from .lineage import hmac_pads, hmac_sql, new_nonce
from .warehouse import Warehouse


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown dataset, conflicting cap, ...)."""


class OrphanedChargeError(LedgerError):
    """A key was charged but its result was never stored; it will not be re-drawn."""


def not_registered_message(dataset: str) -> str:
    """The refusal of a run of an unregistered dataset name: public text that does not depend on any data."""
    return (
        f"dataset {dataset} is not registered: the data owner registers it with "
        f"`dpr dataset add {dataset} --spec SPEC` (nothing was read or charged)"
    )


class DatasetNotRegisteredError(LedgerError):
    """A run names a dataset the data owner has not registered (refused before ingest, whatever the data)."""

    def __init__(self, dataset: str):
        self.dataset = dataset
        super().__init__(not_registered_message(dataset))


class OverlapDecisionRequired(LedgerError):
    """Registration found records shared with other budgets and the owner has not said what to do.

    ``overlaps`` (budget -> number of this input's record ids already in that
    budget's records) is private: the owner-only ``dpr dataset add`` prints
    it on the terminal; the message names the budgets and the choices only.
    Nothing was recorded.
    """

    def __init__(self, dataset: str, undecided: list[str], overlaps: dict[str, int]):
        self.dataset, self.undecided, self.overlaps = dataset, list(undecided), dict(overlaps)
        names = ", ".join(repr(b) for b in undecided)
        super().__init__(
            f"dataset {dataset!r}: its record ids overlap the records of budget(s) {names}; a budget belongs to "
            "the people in the data, so the data owner decides: --share BUDGET (the name charges that budget) or "
            "--separate-from BUDGET --reason TEXT (a separate budget on purpose, recorded and printed in every "
            "later report of both datasets) for each of them. Nothing was registered."
        )


_DDL = [
    """CREATE TABLE IF NOT EXISTS ledger.budgets (
        dataset VARCHAR PRIMARY KEY,
        eps_cap HUGEINT NOT NULL, delta_cap HUGEINT NOT NULL,
        eps_spent HUGEINT NOT NULL DEFAULT 0, delta_spent HUGEINT NOT NULL DEFAULT 0,
        created_at TIMESTAMPTZ NOT NULL,
        neighbour VARCHAR NOT NULL DEFAULT 'add-remove')""",
    """CREATE TABLE IF NOT EXISTS ledger.charges (
        key VARCHAR PRIMARY KEY,
        dataset VARCHAR NOT NULL,
        release_id VARCHAR NOT NULL,
        step VARCHAR NOT NULL,
        mechanism VARCHAR NOT NULL,
        notion VARCHAR NOT NULL,
        neighbour VARCHAR NOT NULL,
        eps_units HUGEINT NOT NULL,
        delta_units HUGEINT NOT NULL,
        status VARCHAR NOT NULL,
        publishable BOOLEAN NOT NULL,
        flow_run_id VARCHAR,
        params VARCHAR NOT NULL,
        reserved_at TIMESTAMPTZ NOT NULL,
        finished_at TIMESTAMPTZ,
        error VARCHAR,
        stated_eps_units HUGEINT,
        stated_delta_units HUGEINT)""",
    """CREATE TABLE IF NOT EXISTS releases.outputs (
        key VARCHAR PRIMARY KEY,
        dataset VARCHAR NOT NULL,
        release_id VARCHAR NOT NULL,
        step VARCHAR NOT NULL,
        payload VARCHAR NOT NULL,
        stored_at TIMESTAMPTZ NOT NULL)""",
    # warehouses made before neighbour relations were converted (their budgets
    # were add/remove in effect; their charges were stated = charged)
    "ALTER TABLE ledger.budgets ADD COLUMN IF NOT EXISTS neighbour VARCHAR DEFAULT 'add-remove'",
    "ALTER TABLE ledger.charges ADD COLUMN IF NOT EXISTS stated_eps_units HUGEINT",
    "ALTER TABLE ledger.charges ADD COLUMN IF NOT EXISTS stated_delta_units HUGEINT",
    # public lineage (rule 7): a random ref per charge; older charges get one on first read
    "ALTER TABLE ledger.charges ADD COLUMN IF NOT EXISTS public_ref VARCHAR",
    "UPDATE ledger.charges SET public_ref = substr(replace(gen_random_uuid()::VARCHAR, '-', ''), 1, 16) "
    "WHERE public_ref IS NULL",
    # budget identity (hole 6): which budget a dataset name charges, owners' separations, id fingerprints
    """CREATE TABLE IF NOT EXISTS ledger.dataset_budgets (
        dataset VARCHAR PRIMARY KEY, budget VARCHAR NOT NULL, linked_at TIMESTAMPTZ NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ledger.separations (
        dataset VARCHAR NOT NULL, other VARCHAR NOT NULL, reason VARCHAR NOT NULL, created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (dataset, other))""",
    # no key: an index over every record's fingerprint would have to fit in DuckDB's memory (issue 21);
    # register_records inserts only fingerprints the budget does not hold yet (an anti-join, which spills)
    """CREATE TABLE IF NOT EXISTS ledger.record_fingerprints (budget VARCHAR NOT NULL, fp VARCHAR NOT NULL)""",
]

#: The owner's registrations (issue 28 hole 3): which budget a dataset name charges, the owner's choice
#: ('own': no overlap; 'share': charges another budget; 'separate': own budget although records overlap),
#: the owner's reason, the separations (JSON: other budget -> reason), the cap it was registered with, and when.
_REGISTRATIONS_DDL = """CREATE TABLE IF NOT EXISTS ledger.registrations (
    dataset VARCHAR PRIMARY KEY, budget VARCHAR NOT NULL, choice VARCHAR NOT NULL, reason VARCHAR,
    separate_from VARCHAR NOT NULL, eps_cap HUGEINT NOT NULL, delta_cap HUGEINT NOT NULL,
    neighbour VARCHAR NOT NULL, registered_at TIMESTAMPTZ NOT NULL)"""

#: Reason recorded for names that had a budget before registration existed (they keep working as they were).
MIGRATED = "charged before dataset registration was required (migrated as it was)"


def _migrate_registrations(con) -> None:
    """Create ``ledger.registrations``; on a warehouse made before it existed, register every name it knew.

    Runs its migration once (when the table is created): each existing budget
    becomes an 'own' registration and each name linked to another budget a
    'share' one, with their separations, so existing deployments keep working.
    """
    existed = con.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = 'ledger' AND table_name = 'registrations'"
    ).fetchone()
    con.execute(_REGISTRATIONS_DDL)
    if existed:
        return
    seps = {}
    for d, o, r in con.execute("SELECT dataset, other, reason FROM ledger.separations").fetchall():
        seps.setdefault(d, {})[o] = r
    rows = con.execute(
        "SELECT b.dataset, b.dataset, b.eps_cap, b.delta_cap, b.neighbour FROM ledger.budgets b UNION ALL "
        "SELECT l.dataset, l.budget, b.eps_cap, b.delta_cap, b.neighbour FROM ledger.dataset_budgets l "
        "JOIN ledger.budgets b ON b.dataset = l.budget WHERE l.dataset <> l.budget"
    ).fetchall()
    for name, budget, ec, dc, nb in rows:
        choice = "share" if budget != name else ("separate" if seps.get(name) else "own")
        con.execute(
            "INSERT OR IGNORE INTO ledger.registrations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [name, budget, choice, MIGRATED, json.dumps(seps.get(name, {}), sort_keys=True), ec, dc, nb, _now()],
        )


def _budget_of(con, dataset: str) -> str:
    """The budget a dataset name charges: its own, or the one its records were linked to."""
    row = con.execute("SELECT budget FROM ledger.dataset_budgets WHERE dataset = ?", [dataset]).fetchone()
    return row[0] if row else dataset


def _datasets_of(con, budget: str) -> list[str]:
    """Every dataset name that charges ``budget`` (the budget's own name first)."""
    rows = con.execute("SELECT dataset FROM ledger.dataset_budgets WHERE budget = ? ORDER BY dataset", [budget]).fetchall()
    return [budget] + [r[0] for r in rows if r[0] != budget]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def idempotency_key(dataset_hash: str, step: str, params: dict[str, Any], release_id: str) -> str:
    """SHA-256 of (dataset content hash, step, canonical parameters, release id).

    Two requests with the same key are the same release: the second gets the
    stored answer (privacy rule 2).
    """
    canon = json.dumps(
        {"data": dataset_hash, "step": step, "params": params, "release": release_id},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canon.encode()).hexdigest()


@dataclass(frozen=True)
class ChargeRequest:
    """Everything the ledger records about one private output.

    Parameters
    ----------
    dataset : str
        Dataset name (the budget is per dataset).
    dataset_hash : str
        Content hash of the ingested input (part of the key).
    release_id, step, mechanism : str
        Where the charge comes from.
    cost : PrivacyCost
        The true total cost of the output under ``notion``.
    notion : {"dp", "ocdp", "sp"}
    params : dict
        The mechanism's public parameters (part of the key; stored).
    neighbour : {"add-remove", "replace-one"}
        The neighbour relation ``cost`` is stated under.
    publishable : bool
        False when noise comes from a seeded test generator.
    flow_run_id : str, optional
    """

    dataset: str
    dataset_hash: str
    release_id: str
    step: str
    mechanism: str
    cost: PrivacyCost
    notion: str
    params: dict[str, Any] = field(default_factory=dict)
    neighbour: Neighbour = "add-remove"
    publishable: bool = True
    flow_run_id: str | None = None

    def __post_init__(self) -> None:
        if self.notion not in NOTION_ORDER:
            raise ValueError(f"notion must be one of {NOTION_ORDER}, got {self.notion!r}")
        check_neighbour(self.neighbour)

    @property
    def key(self) -> str:
        """The idempotency key of this request."""
        return idempotency_key(self.dataset_hash, self.step, self.params, self.release_id)


@dataclass(frozen=True)
class Release:
    """A stored private output."""

    key: str
    payload: dict[str, Any]
    reused: bool


@dataclass(frozen=True)
class BudgetStatus:
    """Cap, spent and remaining budget of a dataset, and the neighbour relation they are stated under."""

    dataset: str
    cap: PrivacyCost
    spent: PrivacyCost
    neighbour: str = "add-remove"
    budget: str = ""

    @property
    def remaining(self) -> PrivacyCost:
        """``cap - spent`` (never negative)."""
        return self.cap - self.spent


@dataclass(frozen=True)
class Registration:
    """The data owner's registration of a dataset name (``ledger.registrations``).

    Public: names, the owner's choice and reason, the cap, the time; never an
    overlap count (that is shown to the owner at registration only).

    Attributes
    ----------
    dataset : str
    budget : str
        The budget the name charges (its own name unless ``choice`` is 'share').
    choice : {"own", "share", "separate"}
        'own': no overlap was found; 'share': the owner chose to charge
        ``budget``; 'separate': its own budget although its records overlap the
        budgets in ``separate_from``.
    reason : str or None
        The owner's reason (required for a separation).
    separate_from : dict of str to str
        Budgets kept separate on purpose -> reason.
    cap : PrivacyCost
    neighbour : str
    registered_at : datetime
    """

    dataset: str
    budget: str
    choice: str
    reason: str | None
    separate_from: dict[str, str]
    cap: PrivacyCost
    neighbour: str
    registered_at: datetime

    def same_as(self, other: "Registration") -> bool:
        """Whether ``other`` registers the name identically (budget, choice, reason, separations, cap, relation)."""
        fields_ = ["dataset", "budget", "choice", "separate_from", "cap", "neighbour"]
        if MIGRATED not in (self.reason, other.reason):  # a migrated name is re-registered by its choice alone
            fields_.append("reason")
        return all(getattr(self, f) == getattr(other, f) for f in fields_)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``dpr dataset list/show --json``)."""
        return {
            "dataset": self.dataset, "budget": self.budget, "choice": self.choice, "reason": self.reason,
            "separate_from": dict(self.separate_from),
            "cap": {"epsilon": float(self.cap.epsilon), "delta": float(self.cap.delta)},
            "neighbour": self.neighbour, "registered_at": self.registered_at.isoformat(),
        }


def _registration_of(con, dataset: str) -> Registration | None:
    row = con.execute(
        "SELECT dataset, budget, choice, reason, separate_from, eps_cap, delta_cap, neighbour, registered_at "
        "FROM ledger.registrations WHERE dataset = ?", [dataset],
    ).fetchone()
    return _registration(row) if row else None


def _registration(row) -> Registration:
    d, b, c, r, sep, ec, dc, nb, t = row
    return Registration(d, b, c, r, json.loads(sep), PrivacyCost.from_units(ec, dc), nb, t)


def _fingerprint_table(con, table_sql: str, id_column: str, pads: list[bytes]) -> None:
    """``_fp``: the distinct HMAC fingerprints of a raw table's non-null record ids (a temp table)."""
    con.execute(
        f'CREATE OR REPLACE TEMP TABLE _fp AS SELECT DISTINCT {hmac_sql(chr(34) + id_column + chr(34))} AS fp '
        f'FROM {table_sql} WHERE "{id_column}" IS NOT NULL',
        pads,
    )


def _overlaps(con) -> dict[str, int]:
    """Budget -> how many of ``_fp``'s fingerprints its records hold (private: the owner's eyes only)."""
    rows = con.execute(
        "SELECT f.budget, count(DISTINCT f.fp) FROM ledger.record_fingerprints f JOIN _fp USING (fp) "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    return {b: int(n) for b, n in rows}


def _add_fingerprints(con, budget: str) -> None:
    """Add ``_fp``'s fingerprints the budget does not hold yet (an anti-join, which spills), then drop ``_fp``."""
    con.execute(
        "INSERT INTO ledger.record_fingerprints SELECT ?, fp FROM _fp WHERE NOT EXISTS "
        "(SELECT 1 FROM ledger.record_fingerprints f WHERE f.budget = ? AND f.fp = _fp.fp)", [budget, budget])
    con.execute("DROP TABLE _fp")


def _resolve_budget(con, name: str, flag: str) -> str:
    """The budget ``name`` designates (a budget, or a registered name's budget); refused if there is none."""
    budget = _budget_of(con, name)
    if not con.execute("SELECT 1 FROM ledger.budgets WHERE dataset = ?", [budget]).fetchone():
        known = [r[0] for r in con.execute("SELECT dataset FROM ledger.budgets ORDER BY 1").fetchall()]
        raise LedgerError(f"{flag} {name}: no budget of that name in the ledger (budgets: {known or 'none'})")
    return budget


def _wanted_registration(con, dataset: str, cap: PrivacyCost, neighbour: str, share: str | None,
                         separate_from: dict[str, str], reason: str | None) -> Registration:
    """The registration the owner asks for (names resolved to budgets, reasons checked); nothing recorded."""
    share_budget = _resolve_budget(con, share, "--share") if share else None
    seps: dict[str, str] = {}
    for other, why in separate_from.items():
        if not (why or "").strip():
            raise LedgerError(f"--separate-from {other}: a separation needs the owner's reason (--reason TEXT)")
        seps[_resolve_budget(con, other, "--separate-from")] = why
    if share_budget is not None and share_budget in seps:
        raise LedgerError(f"--share {share} and --separate-from {share}: choose one for budget {share_budget!r}")
    seps.pop(dataset, None)
    choice = "share" if share_budget else ("separate" if seps else "own")
    eps_cap, delta_cap = cap.units_floor
    return Registration(dataset, share_budget or dataset, choice, reason, seps,
                        PrivacyCost.from_units(eps_cap, delta_cap), neighbour, _now())


def _same_registration(con, wanted: Registration) -> Registration | None:
    """The existing registration if it is ``wanted`` (an identical re-registration); None if there is none.

    Raises
    ------
    LedgerError
        The name is registered differently: a registration does not change.
    """
    existing = _registration_of(con, wanted.dataset)
    if existing is None or existing.same_as(wanted):
        return existing
    raise LedgerError(
        f"dataset {wanted.dataset!r} is already registered ({existing.choice}, budget {existing.budget!r}, "
        f"cap {existing.cap}, {existing.neighbour} neighbours, reason {existing.reason!r}, separate from "
        f"{sorted(existing.separate_from) or 'none'}, on {existing.registered_at.isoformat()}); a registration "
        "does not change. Repeat exactly that registration, or register the data under a new name."
    )


class PrivacyLedger:
    """Budgets and charges in the warehouse's ``ledger`` schema.

    Parameters
    ----------
    warehouse : Warehouse
    """

    def __init__(self, warehouse: Warehouse):
        self.wh = warehouse

        def ddl(con):
            for stmt in _DDL:
                con.execute(stmt)

        self.wh.run(ddl)
        self.wh.run(_migrate_registrations, transaction=True)

    # ------------------------------------------------------------------ budgets
    def ensure_budget(self, dataset: str, cap: PrivacyCost, neighbour: Neighbour = "add-remove") -> BudgetStatus:
        """Register ``dataset`` with ``cap`` stated under ``neighbour`` (idempotent for the same values).

        Parameters
        ----------
        dataset : str
        cap : PrivacyCost
        neighbour : {"add-remove", "replace-one"}
            The neighbour relation the cap is stated under; every charge is
            converted to it (:func:`dpcore.budget.charge_under`).

        Raises
        ------
        LedgerError
            The dataset is already registered with a different cap (changing
            a cap is a deliberate act: :meth:`set_cap`), or with a different
            relation after something was charged (the charges were converted
            to the old one).
        """
        check_neighbour(neighbour)
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            budget = _budget_of(con, dataset)
            shared = "" if budget == dataset else f" (it charges the budget of {budget!r}, as the data owner registered it)"
            row = con.execute(
                "SELECT eps_cap, delta_cap, neighbour, eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?",
                [budget],
            ).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO ledger.budgets (dataset, eps_cap, delta_cap, eps_spent, delta_spent, created_at, "
                    "neighbour) VALUES (?, ?, ?, 0, 0, ?, ?)",
                    [budget, eps_cap, delta_cap, _now(), neighbour],
                )
                return
            if (int(row[0]), int(row[1])) != (eps_cap, delta_cap):
                raise LedgerError(
                    f"dataset {dataset!r}{shared} is registered with cap {PrivacyCost.from_units(row[0], row[1])}, "
                    f"the spec asks for {cap}. A cap changes only through PrivacyLedger.set_cap "
                    "(a decision of the data owner), never implicitly."
                )
            if row[2] != neighbour:
                if int(row[3]) or int(row[4]):
                    raise LedgerError(
                        f"dataset {dataset!r} has a budget stated under {row[2]} neighbours and charges converted "
                        f"to it; the spec asks for {neighbour}. The relation of a budget cannot change once "
                        f"something is charged: set budget.neighbour: {row[2]} in the spec, or start a new "
                        "warehouse or dataset name for the other relation."
                    )
                con.execute("UPDATE ledger.budgets SET neighbour = ? WHERE dataset = ?", [neighbour, budget])

        self.wh.run(op, transaction=True)
        return self.status(dataset)

    def register_records(self, dataset: str, table_sql: str, id_column: str, owner_key: bytes) -> str:
        """Add the fingerprints of a run's raw record ids to the budget ``dataset`` charges (internal only).

        Links nothing and refuses nothing: which budget a name charges was
        decided by the data owner at registration (:meth:`register_dataset`),
        so no public outcome of a run depends on whether its ids overlap
        another dataset's (the registration rule, module docstring). The
        fingerprints let a later registration of a renamed copy see the overlap.

        Parameters
        ----------
        dataset : str
            A registered dataset name (:meth:`require_registered` first).
        table_sql : str
            Qualified raw table (``raw."<table>"``).
        id_column : str
            The record-id column (every raw row's id counts, valid or not).
        owner_key : bytes
            The data owner's HMAC key; ids are stored only as HMAC-SHA256 fingerprints.

        Returns
        -------
        str
            The budget ``dataset`` charges.
        """
        pads = hmac_pads(owner_key)

        def op(con):
            budget = _budget_of(con, dataset)
            _fingerprint_table(con, table_sql, id_column, pads)
            _add_fingerprints(con, budget)
            return budget

        return self.wh.run(op, transaction=True)

    # ------------------------------------------------------------ registrations
    def overlaps(self, table_sql: str, id_column: str, owner_key: bytes) -> dict[str, int]:
        """Which budgets' records a raw table's record ids overlap, and how many of its ids each holds.

        Private (the data owner's eyes only: ``dpr dataset add`` prints it on
        the owner's terminal); never logged, stored or published.

        Parameters
        ----------
        table_sql, id_column, owner_key
            As in :meth:`register_records`.

        Returns
        -------
        dict of str to int
            Budget name -> number of the table's distinct record ids already
            among that budget's records (budgets without overlap are left out).
        """
        pads = hmac_pads(owner_key)

        def op(con):
            _fingerprint_table(con, table_sql, id_column, pads)
            found = _overlaps(con)
            con.execute("DROP TABLE _fp")
            return found

        return self.wh.run(op, transaction=True)

    def register_dataset(
        self, dataset: str, table_sql: str, id_column: str, owner_key: bytes, cap: PrivacyCost,
        neighbour: Neighbour = "add-remove", share: str | None = None,
        separate_from: dict[str, str] | None = None, reason: str | None = None,
    ) -> tuple[Registration, bool]:
        """Register a dataset name: the data owner's decision of which budget it charges (the registration rule).

        In one transaction: fingerprint the input's record ids (HMAC under
        ``owner_key``), find the budgets whose records they overlap, check
        that the owner decided about every one (``share`` it, or keep a budget
        separate from it), then record the registration, the separations and
        the budget (its own with ``cap``, or the shared one), and add the
        fingerprints to that budget.

        Parameters
        ----------
        dataset : str
        table_sql, id_column, owner_key
            The input as ingested (``raw."<table>"``), its record-id column, the owner's HMAC key.
        cap : PrivacyCost
            The spec's cap, stated under ``neighbour``. A shared budget must
            have the same cap and relation (one budget, one cap).
        share : str, optional
            A budget (or a registered dataset name, meaning its budget) this
            name charges.
        separate_from : dict of str to str, optional
            Budgets this name keeps separate from on purpose -> the owner's reason.
        reason : str, optional
            The owner's reason for the choice (recorded).

        Returns
        -------
        (Registration, bool)
            The registration, and whether it already existed (an identical re-registration records nothing).

        Raises
        ------
        OverlapDecisionRequired
            The ids overlap a budget neither shared nor separated; its
            ``overlaps`` are for the owner's terminal only. Nothing is recorded.
        LedgerError
            The name is registered differently (a registration does not change),
            a named budget does not exist, a separation has no reason, or a
            shared budget's cap or relation differs from the spec's.
        """
        check_neighbour(neighbour)
        pads = hmac_pads(owner_key)
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            wanted = _wanted_registration(con, dataset, cap, neighbour, share, separate_from or {}, reason)
            existing = _same_registration(con, wanted)
            if existing is not None:
                return existing, True
            budget, seps = wanted.budget, wanted.separate_from
            _fingerprint_table(con, table_sql, id_column, pads)
            found = _overlaps(con)
            undecided = [b for b in found if b != budget and b != dataset and b not in seps]
            if undecided:
                raise OverlapDecisionRequired(dataset, undecided, found)
            row = con.execute(
                "SELECT eps_cap, delta_cap, neighbour FROM ledger.budgets WHERE dataset = ?", [budget]
            ).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO ledger.budgets (dataset, eps_cap, delta_cap, eps_spent, delta_spent, created_at, "
                    "neighbour) VALUES (?, ?, ?, 0, 0, ?, ?)", [budget, eps_cap, delta_cap, _now(), neighbour],
                )
            elif (int(row[0]), int(row[1]), row[2]) != (eps_cap, delta_cap, neighbour):
                raise LedgerError(
                    f"budget {budget!r} has cap {PrivacyCost.from_units(row[0], row[1])} under {row[2]} neighbours; "
                    f"the spec asks for {cap} under {neighbour}. One budget has one cap: set the spec's budget to "
                    "match (a cap changes only through PrivacyLedger.set_cap, a decision of the data owner)."
                )
            if wanted.choice == "share":
                con.execute("DELETE FROM ledger.dataset_budgets WHERE dataset = ?", [dataset])
                con.execute("INSERT INTO ledger.dataset_budgets VALUES (?, ?, ?)", [dataset, budget, _now()])
            for other, why in seps.items():
                con.execute("INSERT OR IGNORE INTO ledger.separations VALUES (?, ?, ?, ?)", [dataset, other, why, _now()])
            con.execute(
                "INSERT INTO ledger.registrations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [dataset, budget, wanted.choice, reason, json.dumps(seps, sort_keys=True), eps_cap, delta_cap, neighbour,
                 wanted.registered_at],
            )
            _add_fingerprints(con, budget)
            return wanted, False

        return self.wh.run(op, transaction=True)

    def repeat_registration(
        self, dataset: str, cap: PrivacyCost, neighbour: Neighbour = "add-remove", share: str | None = None,
        separate_from: dict[str, str] | None = None, reason: str | None = None,
    ) -> Registration | None:
        """Check a registration request against an existing one without reading any data.

        Returns
        -------
        Registration or None
            The existing registration when the request is identical to it; None
            when ``dataset`` is not registered (then :meth:`register_dataset`).

        Raises
        ------
        LedgerError
            The name is registered differently (a registration does not change),
            or the request itself is malformed (unknown budget, missing reason).
        """
        check_neighbour(neighbour)

        def op(con):
            if _registration_of(con, dataset) is None:
                return None
            wanted = _wanted_registration(con, dataset, cap, neighbour, share, separate_from or {}, reason)
            return _same_registration(con, wanted)

        return self.wh.run(op)

    def registration(self, dataset: str) -> Registration | None:
        """The owner's registration of ``dataset``, or None."""
        return self.wh.run(lambda con: _registration_of(con, dataset))

    def registrations(self) -> list[Registration]:
        """Every registration, by name (``dpr dataset list``)."""
        rows = self.wh.query(
            "SELECT dataset, budget, choice, reason, separate_from, eps_cap, delta_cap, neighbour, registered_at "
            "FROM ledger.registrations ORDER BY dataset"
        )
        return [_registration(r) for r in rows]

    def require_registered(self, dataset: str) -> Registration:
        """The registration of ``dataset``; a run of an unregistered name is refused (before it reads any data).

        Raises
        ------
        DatasetNotRegisteredError
            With :func:`not_registered_message`, which depends on the name only.
        """
        found = self.registration(dataset)
        if found is None:
            raise DatasetNotRegisteredError(dataset)
        return found

    def budget_identity(self, dataset: str) -> dict[str, Any]:
        """Which budget ``dataset`` charges, which datasets share it, and the owner's separations touching them.

        Public (names and the owner's stated reasons only); printed in every report. Every link and
        separation here is a decision the data owner recorded at registration (:meth:`register_dataset`),
        never something a run computed from its record ids, so it reveals nothing about a run's data.
        """

        def op(con):
            budget = _budget_of(con, dataset)
            names = _datasets_of(con, budget)
            seps = con.execute(
                "SELECT dataset, other, reason, created_at FROM ledger.separations WHERE dataset IN "
                "(SELECT unnest(?::VARCHAR[])) OR other IN (SELECT unnest(?::VARCHAR[])) ORDER BY created_at, dataset",
                [names, names],
            ).fetchall()
            return {
                "budget": budget,
                "datasets_sharing_it": names,
                "separations": [
                    {"dataset": d, "separate_from": o, "reason": r, "recorded_at": t.isoformat()} for d, o, r, t in seps
                ],
            }

        return self.wh.run(op)

    def set_cap(self, dataset: str, cap: PrivacyCost) -> BudgetStatus:
        """Change a dataset's cap (it may not go below what is already spent)."""
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            budget = _budget_of(con, dataset)
            row = con.execute("SELECT eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?", [budget]).fetchone()
            if row is None:
                raise LedgerError(f"unknown dataset {dataset!r}: register it with ensure_budget first")
            if eps_cap < row[0] or delta_cap < row[1]:
                raise LedgerError(
                    f"new cap {cap} is below what dataset {dataset!r} already spent "
                    f"{PrivacyCost.from_units(row[0], row[1])}"
                )
            con.execute(
                "UPDATE ledger.budgets SET eps_cap = ?, delta_cap = ? WHERE dataset = ?", [eps_cap, delta_cap, budget]
            )

        self.wh.run(op, transaction=True)
        return self.status(dataset)

    def status(self, dataset: str) -> BudgetStatus:
        """Current cap and spending of the budget ``dataset`` charges."""

        def op(con):
            budget = _budget_of(con, dataset)
            row = con.execute(
                "SELECT eps_cap, delta_cap, eps_spent, delta_spent, neighbour FROM ledger.budgets WHERE dataset = ?",
                [budget],
            ).fetchone()
            return budget, row

        budget, row = self.wh.run(op)
        if row is None:
            raise LedgerError(f"unknown dataset {dataset!r}: the data owner registers it with "
                              f"`dpr dataset add {dataset} --spec SPEC`")
        ec, dc, es, ds, nb = row
        return BudgetStatus(dataset, PrivacyCost.from_units(ec, dc), PrivacyCost.from_units(es, ds), nb, budget)

    def budgets(self) -> list[BudgetStatus]:
        """Every budget in the ledger (``dpr budget``), by name."""
        rows = self.wh.query(
            "SELECT dataset, eps_cap, delta_cap, eps_spent, delta_spent, neighbour FROM ledger.budgets ORDER BY dataset"
        )
        return [BudgetStatus(d, PrivacyCost.from_units(ec, dc), PrivacyCost.from_units(es, ds), nb, d)
                for d, ec, dc, es, ds, nb in rows]

    # ------------------------------------------------------------------ charges
    def reserve(self, req: ChargeRequest) -> bool:
        """Charge ``req.cost``, converted to the budget's neighbour relation, atomically.

        Returns False if the key was already charged (nothing new is charged).

        Raises
        ------
        BudgetExceededError
            The converted charge would exceed the cap; nothing is recorded.
        NeighbourConversionError
            ``req.neighbour`` cannot be converted to the budget's relation;
            nothing is recorded.
        LedgerError
            The dataset has no registered budget.
        """
        key = req.key
        stated_eps_u, stated_delta_u = req.cost.units

        def op(con):
            if con.execute("SELECT 1 FROM ledger.charges WHERE key = ?", [key]).fetchone():
                return False
            budget = _budget_of(con, req.dataset)
            row = con.execute(
                "SELECT eps_cap, delta_cap, eps_spent, delta_spent, neighbour FROM ledger.budgets WHERE dataset = ?",
                [budget],
            ).fetchone()
            if row is None:
                raise LedgerError(f"unknown dataset {req.dataset!r}: register it with ensure_budget first")
            ec, dc, es, ds = (int(v) for v in row[:4])
            try:
                charged = charge_under(req.cost, req.neighbour, row[4])
            except NeighbourConversionError as exc:
                raise NeighbourConversionError(
                    f"step {req.step!r} ({req.mechanism}) on dataset {req.dataset!r}: {exc} Nothing was charged."
                ) from None
            eps_u, delta_u = charged.units
            if es + eps_u > ec or ds + delta_u > dc:
                done = con.execute(
                    "SELECT step, eps_units, delta_units FROM ledger.charges WHERE dataset = ? AND release_id = ? "
                    "ORDER BY reserved_at", [req.dataset, req.release_id],
                ).fetchall()
                so_far = PrivacyCost.from_units(sum(int(r[1]) for r in done), sum(int(r[2]) for r in done))
                raise BudgetExceededError(
                    req.dataset, charged, PrivacyCost.from_units(es, ds), PrivacyCost.from_units(ec, dc),
                    stated=None if charged == req.cost else (req.cost, req.neighbour, row[4]),
                    release=(req.release_id, so_far, list(dict.fromkeys(r[0] for r in done))),
                )
            con.execute(
                "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? WHERE dataset = ?",
                [eps_u, delta_u, budget],
            )
            con.execute(
                "INSERT INTO ledger.charges (key, dataset, release_id, step, mechanism, notion, neighbour, eps_units, "
                "delta_units, status, publishable, flow_run_id, params, reserved_at, stated_eps_units, "
                "stated_delta_units, public_ref) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?, ?, ?)",
                [
                    key, req.dataset, req.release_id, req.step, req.mechanism, req.notion, req.neighbour,
                    eps_u, delta_u, req.publishable, req.flow_run_id,
                    json.dumps(req.params, sort_keys=True, default=str), _now(), stated_eps_u, stated_delta_u,
                    new_nonce(8),
                ],
            )
            return True

        return self.wh.run(op, transaction=True)

    def _charge_state(self, key: str) -> tuple | None:
        rows = self.wh.query(
            "SELECT c.status, o.payload, c.public_ref, c.step FROM ledger.charges c LEFT JOIN releases.outputs o "
            "USING (key) WHERE c.key = ?",
            [key],
        )
        return tuple(rows[0]) if rows else None

    def lookup(self, key: str) -> Release | None:
        """The stored release for ``key``, or None if the key was never charged.

        Raises
        ------
        OrphanedChargeError
            The key was charged but its result was never stored.
        """
        state = self._charge_state(key)
        if state is None:
            return None
        status, payload, ref, step = state
        if status == "released" and payload is not None:
            return Release(key, json.loads(payload), reused=True)
        raise OrphanedChargeError(
            f"charge {ref} (step {step}) has status {status!r}: its budget is spent but no result was stored "
            "(the run crashed or the mechanism failed after the reservation). It is never re-drawn, "
            "because fresh noise for the same release would weaken the guarantee. Start a new release id "
            "to release this output again (it will be charged anew)."
        )

    def store_result(self, req: ChargeRequest, payload: dict[str, Any]) -> None:
        """Store the private ``payload`` for a reserved key and mark it released."""
        text = json.dumps(payload, sort_keys=True, allow_nan=False)
        key = req.key

        def op(con):
            con.execute(
                "INSERT INTO releases.outputs VALUES (?, ?, ?, ?, ?, ?)",
                [key, req.dataset, req.release_id, req.step, text, _now()],
            )
            con.execute(
                "UPDATE ledger.charges SET status = 'released', finished_at = ? WHERE key = ? AND status = 'reserved'",
                [_now(), key],
            )

        self.wh.run(op, transaction=True)

    def mark_failed(self, req: ChargeRequest, error_type: str) -> None:
        """Mark a reserved key failed (it stays charged). Only the error *type* is kept."""
        self.wh.run(
            lambda con: con.execute(
                "UPDATE ledger.charges SET status = 'failed', finished_at = ?, error = ? WHERE key = ? AND status = 'reserved'",
                [_now(), error_type, req.key],
            ),
            transaction=True,
        )

    def release_once(self, req: ChargeRequest, compute: Callable[[], dict[str, Any]]) -> Release:
        """Charge, compute and store a private output exactly once per key.

        1. If the key's result is stored: return it (``reused=True``); no charge, no draw.
        2. Otherwise reserve the cost (refused over the cap), then call
           ``compute()`` — the only place noise may be drawn — and store its
           JSON-serialisable payload before returning it.

        If ``compute`` raises, the charge stays (status ``failed``) and the
        exception propagates; the key is never re-drawn (see module docstring).

        Raises
        ------
        BudgetExceededError, OrphanedChargeError, LedgerError
        """
        found = self.lookup(req.key)
        if found is not None:
            return found
        if not self.reserve(req):  # another run charged the key in between
            found = self.lookup(req.key)
            assert found is not None
            return found
        try:
            payload = compute()
        except BaseException as exc:
            self.mark_failed(req, type(exc).__name__)
            raise
        self.store_result(req, payload)
        return Release(req.key, payload, reused=False)

    # ------------------------------------------------------------------ reports
    def charges(self, dataset: str | None = None) -> pd.DataFrame:
        """All charges (optionally of one dataset) with epsilon/delta as floats for display.

        ``epsilon``/``delta`` are what was charged against the budget (in the
        budget's neighbour relation); ``stated_epsilon``/``stated_delta`` the
        mechanism's own cost under its relation ``neighbour``.
        """
        if dataset:
            names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
            where, params = "WHERE dataset IN (SELECT unnest(?::VARCHAR[]))", [names]
        else:
            where, params = "", []
        df = self.wh.query_df(
            f"SELECT key, public_ref, dataset, release_id, step, mechanism, notion, neighbour, eps_units, delta_units, "
            f"coalesce(stated_eps_units, eps_units) AS stated_eps_units, "
            f"coalesce(stated_delta_units, delta_units) AS stated_delta_units, "
            f"status, publishable, flow_run_id, params, reserved_at, finished_at FROM ledger.charges {where} "
            "ORDER BY reserved_at, key",
            params,
        )
        for col, units in (("epsilon", "eps_units"), ("delta", "delta_units"),
                           ("stated_epsilon", "stated_eps_units"), ("stated_delta", "stated_delta_units")):
            df[col] = [float(PrivacyCost.from_units(int(u), 0).epsilon) for u in df[units]]
        return df

    def spent_exact(self, dataset: str) -> PrivacyCost:
        """Sum of all charges on the budget ``dataset`` charges, recomputed from the charge rows (audit)."""
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT coalesce(sum(eps_units), 0), coalesce(sum(delta_units), 0) FROM ledger.charges "
            "WHERE dataset IN (SELECT unnest(?::VARCHAR[]))",
            [names],
        )
        return PrivacyCost.from_units(int(rows[0][0]), int(rows[0][1]))

    def weakest_notion(self, dataset: str) -> str | None:
        """Weakest privacy notion among the dataset's charges (rule 4)."""
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT DISTINCT notion FROM ledger.charges WHERE dataset IN (SELECT unnest(?::VARCHAR[]))", [names]
        )
        return weakest_notion({r[0] for r in rows})
