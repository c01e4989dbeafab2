"""The persistent privacy-budget ledger.

Rules enforced here (DESIGN.md, privacy rules 1, 2, 4):

* **Charged before it exists.** :meth:`PrivacyLedger.release_once` reserves the
  cost inside a transaction that refuses to go over the dataset's cap, and only
  then calls the mechanism (which draws the noise).
* **A release id names one release; one key** (rule 2). Every charge carries
  an idempotency key (:func:`dpcore.budget.charge_keys.charge_key`: dataset name +
  release id + step + public parameters; never the input's content). A key
  whose result is stored returns that stored result with no new charge and no
  new draw, whatever the data now holds. The cost plan and the release
  reservations use :func:`dpcore.budget.charge_keys.line_key` from the same module.
* **A release is all or nothing** (rule 10). :meth:`PrivacyLedger.reserve_lines`
  reserves every planned line of a run (count x cost, converted to the
  budget's relation) in one transaction before the run's first charge, or
  refuses having reserved nothing. The reservation is spent at once: it is
  the release's whole charge, whatever its steps later find in the data (a
  detector that flags fewer targets than the public upper bound leaves part
  of a line unused, and it stays spent, so what a release spends never
  depends on the data). Each charge of the release then draws from its line
  (:meth:`reserve`) and adds nothing to the budget.
* **Crash rule** (rule 10). A key that was charged but whose result was never
  stored (the process died, or the mechanism raised before the store) was
  never revealed to anyone: asking for it again computes it again within the
  same charge (no second charge). :meth:`store_result` stores a key's answer
  once; a second answer for the same key is discarded and the stored one
  returned, so a step never publishes two answers.
* **Notions are labelled** (``dp``, ``ocdp``, ``sp``) and every charge records
  mechanism, step, neighbour relation, epsilon, delta, flow-run id and times.
* **Neighbour relations are converted** (rule 5). A dataset's cap is stated
  under one relation (``add-remove`` or ``replace-one``, from the spec's
  ``budget.neighbour``); each charge is the mechanism's cost under *its*
  relation converted by :func:`dpcore.budget.amounts.charge_under` (an add/remove
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
  owner's key (:mod:`dpcore.storage.lineage`; the ids themselves are never stored; a fingerprint is the
  HMAC's first 124 bits, :data:`FINGERPRINT_TYPE`),
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

import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from .amounts import (
    NOTION_ORDER, BudgetExceededError, Neighbour, NeighbourConversionError, PrivacyCost, charge_under, check_neighbour,
    set_cap_hint, weakest_notion,
)
from .charge_keys import canonical, charge_key, matches
from dpcore.runtime.fault_injection import fault_point
from dpcore.storage.lineage import hmac_pads, hmac_sql, new_nonce, owner_hmac
from dpcore.storage.partitions import scratch_dir
from dpcore.storage.private_files import private_umask
from dpcore.storage.quoting import sql_text
from dpcore.storage.warehouse import Warehouse
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown dataset, conflicting cap, ...)."""


class SeriesCapExceededError(LedgerError):
    """A period's release would take the series over ``budget.series_cap``; nothing was charged.

    Raised inside the reservation's transaction (:func:`_check_series_cap`); defined here, next to the check
    that raises it, so the ledger imports nothing of the release definition (:mod:`dpcore.release.series`
    re-exports it under its old name).
    """


class PlanMismatchError(LedgerError):
    """A charge of a reserved release has no reserved line with room left: the plan and the run disagree (a bug)."""


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
    # register_records inserts only fingerprints the budget does not hold yet (an anti-join, part by part).
    # fp: the HMAC's first 124 bits (FINGERPRINT_TYPE; schema 4: warehouses of schema 3 and before held the
    # HMAC's 64 hex digits and are converted by dpcore.budget.ledger_upgrade, compact_fingerprints)
    """CREATE TABLE IF NOT EXISTS ledger.record_fingerprints (budget VARCHAR NOT NULL, fp HUGEINT NOT NULL)""",
    # raw tables whose record ids are in a budget's fingerprints (a raw table never changes: issue 32, a run
    # over a stored input does not fingerprint it again); key_id: an HMAC label of the owner key used
    """CREATE TABLE IF NOT EXISTS ledger.fingerprinted_tables (
        budget VARCHAR NOT NULL, table_sql VARCHAR NOT NULL, id_column VARCHAR NOT NULL, key_id VARCHAR NOT NULL,
        PRIMARY KEY (budget, table_sql, id_column, key_id))""",
    # release reservations (issue 33): every planned line of a run reserved at once, before its first charge
    """CREATE TABLE IF NOT EXISTS ledger.reservations (
        line_key VARCHAR PRIMARY KEY,
        dataset VARCHAR NOT NULL, budget VARCHAR NOT NULL, release_id VARCHAR NOT NULL,
        step VARCHAR NOT NULL, mechanism VARCHAR NOT NULL, notion VARCHAR NOT NULL,
        match VARCHAR NOT NULL, n_reserved INTEGER NOT NULL, n_used INTEGER NOT NULL DEFAULT 0,
        eps_each HUGEINT NOT NULL, delta_each HUGEINT NOT NULL,
        flow_run_id VARCHAR, reserved_at TIMESTAMPTZ NOT NULL)""",
    "ALTER TABLE ledger.charges ADD COLUMN IF NOT EXISTS line_key VARCHAR",
    # the data owner's cap changes (dpr budget set-cap): when, from what, to what, why
    """CREATE TABLE IF NOT EXISTS ledger.cap_changes (
        budget VARCHAR NOT NULL, changed_at TIMESTAMPTZ NOT NULL,
        old_eps_cap HUGEINT NOT NULL, old_delta_cap HUGEINT NOT NULL,
        new_eps_cap HUGEINT NOT NULL, new_delta_cap HUGEINT NOT NULL,
        reason VARCHAR NOT NULL)""",
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


def unknown_dataset(dataset: str) -> str:
    """The refusal for a dataset the ledger has no budget for, saying how one is registered."""
    return (f"unknown dataset {dataset!r}: this warehouse's ledger has no budget for it. The data owner registers it "
            f"with `dpr dataset add {dataset} --spec SPEC` (check the name: `dpr budget` lists every budget).")


def _budget_of(con, dataset: str) -> str:
    """The budget a dataset name charges: its own, or the one its records were linked to."""
    row = con.execute("SELECT budget FROM ledger.dataset_budgets WHERE dataset = ?", [dataset]).fetchone()
    return row[0] if row else dataset


def _datasets_of(con, budget: str) -> list[str]:
    """Every dataset name that charges ``budget`` (the budget's own name first)."""
    rows = con.execute("SELECT dataset FROM ledger.dataset_budgets WHERE budget = ? ORDER BY dataset", [budget]).fetchall()
    return [budget] + [r[0] for r in rows if r[0] != budget]



def _held(con, dataset: str, release_id: str) -> tuple[PrivacyCost, list[str]]:
    """What a release id holds against the budget: its reserved lines plus its charges outside any line."""
    row = con.execute(
        "SELECT coalesce(sum(n_reserved * eps_each), 0), coalesce(sum(n_reserved * delta_each), 0) "
        "FROM ledger.reservations WHERE dataset = ? AND release_id = ?", [dataset, release_id]).fetchone()
    direct = con.execute(
        "SELECT coalesce(sum(eps_units), 0), coalesce(sum(delta_units), 0) FROM ledger.charges "
        "WHERE dataset = ? AND release_id = ? AND line_key IS NULL", [dataset, release_id]).fetchone()
    steps = [r[0] for r in con.execute(
        "SELECT step FROM (SELECT step, reserved_at FROM ledger.reservations WHERE dataset = ? AND release_id = ? "
        "UNION ALL SELECT step, reserved_at FROM ledger.charges WHERE dataset = ? AND release_id = ? "
        "AND line_key IS NULL) ORDER BY reserved_at", [dataset, release_id, dataset, release_id]).fetchall()]
    return (PrivacyCost.from_units(int(row[0]) + int(direct[0]), int(row[1]) + int(direct[1])),
            list(dict.fromkeys(steps)))


def _check_series_cap(con, dataset: str, release_id: str, series: "tuple[str, PrivacyCost]", eps_u: int,
                      delta_u: int) -> None:
    """Refuse a reservation that would take a series' releases over their cap (issue 30; inside the transaction)."""
    pattern, cap = series
    he, hd = (int(v) for v in con.execute(
        "SELECT coalesce(sum(e), 0), coalesce(sum(d), 0) FROM ("
        "SELECT n_reserved * eps_each AS e, n_reserved * delta_each AS d FROM ledger.reservations "
        "WHERE dataset = ? AND regexp_full_match(release_id, ?) UNION ALL "
        "SELECT eps_units, delta_units FROM ledger.charges WHERE dataset = ? AND line_key IS NULL "
        "AND regexp_full_match(release_id, ?))", [dataset, pattern, dataset, pattern]).fetchone())
    ce, cd = cap.units
    if he + eps_u > ce or hd + delta_u > cd:
        held = PrivacyCost.from_units(he, hd)
        raise SeriesCapExceededError(
            f"budget.series_cap: release {release_id!r} would charge {PrivacyCost.from_units(eps_u, delta_u)}, but "
            f"the series' releases already hold {held} of its cap {cap} (left {cap - held}); nothing was charged. "
            "Raise budget.series_cap in the spec (within the dataset's cap), or lower a step's epsilon/delta")


#: What a release that stopped on a public fact gave back (issue 48.1; DESIGN.md rule 15): one row per reserved
#: line with room left, written in the transaction that records the stop. Created on first use
#: (:func:`_ensure_given_back`), so a ledger that never gave anything back is unchanged.
_GIVEN_BACK_DDL = """CREATE TABLE IF NOT EXISTS ledger.given_back (
    budget VARCHAR NOT NULL, dataset VARCHAR NOT NULL, release_id VARCHAR NOT NULL, line_key VARCHAR NOT NULL,
    step VARCHAR NOT NULL, n_given INTEGER NOT NULL, eps_units HUGEINT NOT NULL, delta_units HUGEINT NOT NULL,
    reason VARCHAR NOT NULL, flow_run_id VARCHAR, given_at TIMESTAMPTZ NOT NULL)"""


def _ensure_given_back(con) -> None:
    con.execute(_GIVEN_BACK_DDL)


def _has_given_back(con) -> bool:
    return con.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = 'ledger' "
                       "AND table_name = 'given_back'").fetchone() is not None


def _given_back_by_release(con, names: list[str]) -> dict[str, tuple[int, int]]:
    """Release id -> (epsilon units, delta units) given back, for the dataset names ``names`` (exact integers)."""
    if not _has_given_back(con):
        return {}
    rows = con.execute(
        "SELECT release_id, sum(eps_units), sum(delta_units) FROM ledger.given_back "
        "WHERE dataset IN (SELECT unnest(?::VARCHAR[])) GROUP BY release_id", [names]).fetchall()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def _cap_mismatch(dataset: str, budget: str, row, cap: PrivacyCost, neighbour: str) -> str | None:
    """Why a spec's cap or relation does not match the budget ``row`` (cap, relation, spent) the name charges.

    The one text of this refusal: raised by :meth:`PrivacyLedger.ensure_budget` at a run's ingest and listed by
    :func:`dpcore.run.cost_plan.release_blockers` (``dpr plan``, ``dpr run``). None when they match (or only the
    relation differs while nothing is charged: the budget then takes the spec's relation).
    """
    eps_cap, delta_cap = cap.units_floor
    shared = "" if budget == dataset else f" (it charges the budget of {budget!r}, as the data owner registered it)"
    if (int(row[0]), int(row[1])) != (eps_cap, delta_cap):
        return (f"dataset {dataset!r}{shared} is registered with cap {PrivacyCost.from_units(row[0], row[1])}, "
                f"the spec asks for {cap}. A cap never changes implicitly: set the spec's budget to the "
                f"registered cap, or change the cap with {set_cap_hint(budget)}. Nothing was charged.")
    if row[2] != neighbour and (int(row[3]) or int(row[4])):
        return (f"dataset {dataset!r} has a budget stated under {row[2]} neighbours and charges converted "
                f"to it; the spec asks for {neighbour}. The relation of a budget cannot change once "
                f"something is charged: set budget.neighbour: {row[2]} in the spec, or start a new "
                "warehouse or dataset name for the other relation.")
    return None


#: Called with the warehouse after every committed charge or reservation (the home's marker, dpcore.budget.ledger_home).
CHARGE_LISTENERS: list[Callable[[Warehouse], None]] = []


def _charged(wh: Warehouse) -> None:
    """Tell :data:`CHARGE_LISTENERS` that ``wh``'s ledger committed a charge (issue 47 §2: the marker follows)."""
    for listener in list(CHARGE_LISTENERS):
        listener(wh)


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class LineRequest:
    """One planned line of a run, as the ledger reserves it (:meth:`PrivacyLedger.reserve_lines`).

    Parameters
    ----------
    line_key : str
        :func:`dpcore.budget.charge_keys.line_key` of (dataset, release id, step, match).
    step, mechanism, notion : str
    match : dict
        The public parameters every charge of the line carries.
    count : int
        How many charges (a public upper bound where the data decides how many are made).
    each : PrivacyCost
        One charge's cost converted to the budget's neighbour relation.
    """

    line_key: str
    step: str
    mechanism: str
    notion: str
    match: dict[str, Any]
    count: int
    each: PrivacyCost


@dataclass(frozen=True)
class Reservation:
    """What :meth:`PrivacyLedger.reserve_lines` did: the new reservation and what the release already held."""

    new: PrivacyCost
    held_before: PrivacyCost
    status: "BudgetStatus"


@dataclass(frozen=True)
class GiveBack:
    """What :meth:`PrivacyLedger.give_back_unused` did for a release that stopped on a public fact (exact).

    Attributes
    ----------
    reserved : PrivacyCost
        What the release id held before the stop (its reserved lines whole, plus charges outside any line).
    drawn : PrivacyCost
        What its charges drew (it keeps holding that: those outputs exist).
    given_back : PrivacyCost
        ``reserved - drawn``, returned to the budget in the transaction that recorded the stop.
    status : BudgetStatus
        The budget right after (read in the same transaction).
    """

    reserved: PrivacyCost
    drawn: PrivacyCost
    given_back: PrivacyCost
    status: "BudgetStatus"

    def text(self) -> str:
        """``reserved epsilon=5 delta=0, drew epsilon=0.2 delta=0, gave back epsilon=4.8 delta=0`` (exact figures)."""
        def c(x: PrivacyCost) -> str:
            return f"epsilon={float(x.epsilon):.6g} delta={float(x.delta):.3g}"

        return f"reserved {c(self.reserved)}, drew {c(self.drawn)}, gave back {c(self.given_back)}"


@dataclass(frozen=True)
class ChargeRequest:
    """Everything the ledger records about one private output.

    Parameters
    ----------
    dataset : str
        Dataset name (the budget is per dataset).
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
        """The idempotency key of this request (:func:`dpcore.budget.charge_keys.charge_key`: no content of the data)."""
        return charge_key(self.dataset, self.release_id, self.step, self.params)


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


#: How ``ledger.record_fingerprints`` stores a record id's fingerprint: the first 124 bits (31 hex digits) of its
#: HMAC-SHA256 under the owner's key (:func:`dpcore.storage.lineage.hmac_sql`) as a (non-negative) 128-bit
#: integer, 16 bytes of fixed width where the 64 hex digits took 64 (and about 80 in DuckDB's memory and spill).
#: A truncated HMAC is a pseudorandom function of the id like the whole one, so two different ids share a
#: fingerprint with probability 2^-124: matching m new ids against n held ones finds on average at most
#: m*n/2^124 false overlaps, 6e-20 for a billion against a billion (a false overlap only adds one to the owner's
#: private overlap count; no overlap is ever missed). Not UHUGEINT (all 128 bits): DuckDB 2.0's hash aggregate
#: (DISTINCT, EXCEPT) over UHUGEINT slows down quadratically (150k values: 35 s; HUGEINT: 1 s at a load of 9).
#: Issue 51: at 1000x the demo the hex fingerprints filled 34 GB of DuckDB's spill folder.
FINGERPRINT_TYPE = "HUGEINT"
_FINGERPRINT_HEX_DIGITS = 31


def fingerprint_sql(column_sql: str) -> str:
    """SQL computing the stored fingerprint (:data:`FINGERPRINT_TYPE`) of ``column_sql``'s text.

    Takes :func:`dpcore.storage.lineage.hmac_sql`'s two BLOB parameters (the pads of
    :func:`dpcore.storage.lineage.hmac_pads`). Equal to :func:`fingerprint_of_hex` of the HMAC's hex digits, so a
    converted old ledger matches the same ids (:func:`compact_fingerprints`).
    """
    return fingerprint_of_hex(hmac_sql(column_sql))


def fingerprint_of_hex(hex_sql: str) -> str:
    """SQL turning a 64-hex-digit HMAC (the layout before schema 4) into the stored fingerprint: its first 31 digits."""
    return f"('0x' || left({hex_sql}, {_FINGERPRINT_HEX_DIGITS}))::{FINGERPRINT_TYPE}"


def compact_fingerprints(con) -> bool:
    """Convert ``ledger.record_fingerprints.fp`` from 64 hex digits to :data:`FINGERPRINT_TYPE`, in place.

    For :func:`dpcore.budget.ledger_upgrade.upgrade` (schema 3 -> 4), inside its transaction: one ``ALTER
    TABLE ... SET DATA TYPE ... USING`` (a column rewrite, streamed by DuckDB; no row passes through Python).
    Each held fingerprint becomes the one :func:`fingerprint_sql` computes for the same id under the same key,
    so a later registration finds the same overlaps. Returns whether anything was converted (False: no table,
    or already converted).
    """
    row = con.execute("SELECT data_type FROM information_schema.columns WHERE table_schema = 'ledger' AND "
                      "table_name = 'record_fingerprints' AND column_name = 'fp'").fetchone()
    if row is None or row[0] == FINGERPRINT_TYPE:
        return False
    con.execute(f"ALTER TABLE ledger.record_fingerprints ALTER COLUMN fp SET DATA TYPE {FINGERPRINT_TYPE} "
                f"USING {fingerprint_of_hex('fp')}")
    return True


#: Bytes of DuckDB's memory a part of the fingerprinting holds per id (the id's text aside when it is longer
#: than :data:`_INLINE_TEXT`, DuckDB's inline string): half of DuckDB's memory over this is a part's ids. Measured
#: here (DuckDB 2.0, 2 threads): a DISTINCT over 850k ten-character ids ran in 16 MiB and one over 1.7M did not
#: (about 20 and 10 bytes per id); a join of 1M and of 2M fingerprints (then 64 hex digits; now 16 bytes, so
#: this is an upper bound) against 33.7M ran in 64 MiB (2.2 s, 3.3 s) and one of 4M did not (about 34 and 17
#: bytes per fingerprint).
_PART_BYTES_PER_ID = 32
_INLINE_TEXT = 12
#: DuckDB's memory a part cannot use (its buffers; bytes): at 16 MiB a join of 50k fingerprints against 33.7M
#: ran and one of 100k did not, so the bytes per row above hold only well above this. DuckDB gets at least
#: :data:`dpcore.runtime.chunks.HELD_DUCKDB_MIN` (64 MiB) under any cap.
_PART_FIXED_BYTES = 16 * 1024**2


def fingerprint_parts(ids: int, mean_length: float, duckdb_bytes: int) -> int:
    """How many parts a table's record ids are fingerprinted and matched in, so that each part fits DuckDB's memory.

    The one DISTINCT over all 33.7M ids of 100x the demo, and the one join of their fingerprints with a
    budget's, ran out of DuckDB's 64 MiB under a 512 MiB cap: DuckDB's hash aggregate and hash join do not
    spill far enough below about 10 and 17 bytes per row. A part holds half of DuckDB's memory beyond
    :data:`_PART_FIXED_BYTES` at :data:`_PART_BYTES_PER_ID` per id (plus the id's text when it is not inline):
    786,432 ids of up to 12 characters in DuckDB's 64 MiB (43 parts for 100x the demo under a 512 MiB cap),
    8.1M in its 512 MiB share of the default 2 GiB (5 parts at 100x, one at 10x).

    Parameters
    ----------
    ids : int
        Non-null record ids of the table (with repeats: an upper bound on the distinct ones).
    mean_length : float
        Their mean length as text (bytes).
    duckdb_bytes : int
        DuckDB's ``memory_limit`` (bytes).

    Returns
    -------
    int
        At least 1.
    """
    per_id = _PART_BYTES_PER_ID + (mean_length if mean_length > _INLINE_TEXT else 0)
    per_part = max(1, int(max(0, duckdb_bytes - _PART_FIXED_BYTES) // 2 // per_id))
    return max(1, -(-int(ids) // per_part))


def _fingerprint_table(con, table_sql: str, id_column: str, pads: list[bytes], duckdb_bytes: int, budget: str,
                       scratch: Path, overlaps: bool = False) -> tuple[int, dict[str, int]]:
    """Add the HMAC fingerprints of a raw table's distinct non-null record ids to ``budget`` (once each).

    The ids are taken as text (what is fingerprinted), made distinct in :func:`fingerprint_parts` parts split
    by DuckDB's hash of that text (parts are disjoint, so each distinct id is fingerprinted once), and each part
    goes through a temporary table ``_fp (fp)`` that holds that part only (it fits DuckDB's memory: no spill):
    with ``overlaps``, it is first matched with every budget's fingerprints (a join whose hash table is the
    part's; only the counts are kept: a table of the matches grew DuckDB's unevictable memory by 0.65 MiB a part
    until 100x the demo ran out of 64 MiB); then its fingerprints the budget does not hold yet are inserted
    into ``ledger.record_fingerprints`` (the only writer; an anti-join with the part as hash table, or a plain
    insert when the budget held none before: the parts are disjoint). Issue 51: the former one temporary table
    of every part's fingerprints, written before the first insert, filled 34 GB of DuckDB's spill folder at
    1000x the demo. Run inside the caller's transaction: a refusal after this (an undecided overlap) rolls the
    insert back.

    With more than one part the table is read once: one ``COPY ... PARTITION_BY`` writes each id's text into
    its part's Parquet files in a fresh private folder under ``scratch`` (the warehouse's scratch folder,
    :func:`dpcore.storage.partitions.scratch_dir`; removed before this returns, also on error; a killed
    process's folder goes with :func:`dpcore.storage.warehouse_lease.clear_leftovers`), and each part reads
    only its own files. (A scan of the whole table per part made the work grow with rows times parts; issue
    51: 42 scans of 337M ids at 1000x the demo under the default cap.)

    Returns
    -------
    (int, dict of str to int)
        The number of distinct ids; with ``overlaps``, budget -> how many of them its records held before
        (budgets without overlap left out; private: the owner's eyes only), else empty.
    """
    text = f'CAST("{id_column}" AS VARCHAR)'
    ids, mean_length = con.execute(
        f"SELECT count(*), coalesce(avg(strlen({text})), 0) FROM {table_sql} WHERE \"{id_column}\" IS NOT NULL"
    ).fetchone()
    parts = fingerprint_parts(int(ids), float(mean_length), duckdb_bytes)
    match = overlaps and con.execute("SELECT 1 FROM ledger.record_fingerprints LIMIT 1").fetchone() is not None
    held = con.execute("SELECT 1 FROM ledger.record_fingerprints WHERE budget = ? LIMIT 1", [budget]).fetchone()
    found: dict[str, int] = {}
    distinct = 0
    folder = None if parts == 1 else Path(scratch) / f"fingerprints-{new_nonce(8)}"
    try:
        if folder is not None:
            _split_ids(con, table_sql, id_column, text, parts, duckdb_bytes, folder)
        for part in range(parts):
            if folder is None:  # one part: the table itself
                source = f'(SELECT DISTINCT {text} AS v FROM {table_sql} WHERE "{id_column}" IS NOT NULL)'
            else:
                files = sorted((folder / f"part={part}").glob("*.parquet"))
                if not files:
                    continue  # no id hashed into this part
                listed = ", ".join(sql_text(f) for f in files)
                source = f"(SELECT DISTINCT v FROM read_parquet([{listed}], hive_partitioning = false))"
            con.execute(f"CREATE OR REPLACE TEMP TABLE _fp AS SELECT {fingerprint_sql('v')} AS fp FROM {source}",
                        pads)
            distinct += int(con.execute("SELECT count(*) FROM _fp").fetchone()[0])
            if match:
                for b, n in con.execute(
                    "SELECT f.budget, count(*) FROM ledger.record_fingerprints f JOIN _fp p USING (fp) GROUP BY 1"
                ).fetchall():
                    found[b] = found.get(b, 0) + int(n)
            if held is None:
                con.execute("INSERT INTO ledger.record_fingerprints SELECT ?, fp FROM _fp", [budget])
            else:
                con.execute(
                    "INSERT INTO ledger.record_fingerprints SELECT ?, fp FROM (SELECT fp FROM _fp EXCEPT "
                    "SELECT f.fp FROM ledger.record_fingerprints f JOIN _fp p USING (fp) WHERE f.budget = ?)",
                    [budget, budget])
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    con.execute("DROP TABLE IF EXISTS _fp")
    return distinct, dict(sorted(found.items()))


def _split_ids(con, table_sql: str, id_column: str, text: str, parts: int, duckdb_bytes: int, folder: Path) -> None:
    """Write each non-null id's text of ``table_sql`` into ``folder/part=<k>/`` (Parquet), k its hash part: one scan.

    It holds raw ids, so it is written under :func:`dpcore.storage.private_files.private_umask` (folders 0700,
    files 0600; its parent, the warehouse's scratch folder, is 0700 too). The partitioned writer keeps a buffer
    per part open: its flush threshold is set so that the buffers of every part fit a quarter of DuckDB's memory
    (at :data:`_PART_BYTES_PER_ID` bytes an id), then put back.
    """
    folder.mkdir(mode=0o700)
    flush = max(2048, int(duckdb_bytes // 4 // (parts * _PART_BYTES_PER_ID)))
    before = con.execute("SELECT current_setting('partitioned_write_flush_threshold')").fetchone()[0]
    con.execute(f"SET partitioned_write_flush_threshold = {min(flush, 524288)}")
    try:
        with private_umask():
            con.execute(
                f"COPY (SELECT hash({text}) % {parts} AS part, {text} AS v FROM {table_sql} "
                f'WHERE "{id_column}" IS NOT NULL) TO {sql_text(folder)} (FORMAT parquet, PARTITION_BY (part))'
            )
    finally:
        con.execute(f"SET partitioned_write_flush_threshold = {int(before)}")


def _fingerprinted_row(budget: str, table_sql: str, id_column: str, owner_key: bytes) -> list[str]:
    """The ``ledger.fingerprinted_tables`` row of a raw table whose ids are in ``budget``'s fingerprints under this key."""
    return [budget, table_sql, id_column, owner_hmac(owner_key, "dpr ledger.fingerprinted_tables")[:16]]


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


def _reserve_in(con, reqs: list[ChargeRequest]) -> list[bool]:
    """The body of :meth:`PrivacyLedger.reserve_many` on an open transaction (its checks done)."""
    first = reqs[0]
    budget = _budget_of(con, first.dataset)
    row = con.execute(
        "SELECT eps_cap, delta_cap, eps_spent, delta_spent, neighbour FROM ledger.budgets WHERE dataset = ?",
        [budget],
    ).fetchone()
    if row is None:
        raise LedgerError(unknown_dataset(first.dataset))
    ec, dc, es, ds = (int(v) for v in row[:4])
    lines = con.execute(
        "SELECT line_key, step, match, n_reserved, n_used, eps_each, delta_each FROM ledger.reservations "
        "WHERE dataset = ? AND release_id = ? ORDER BY reserved_at, line_key", [first.dataset, first.release_id],
    ).fetchall()
    used = {ln[0]: int(ln[4]) for ln in lines}
    todo, fresh, seen = [], [], set()
    for req in reqs:
        new = req.key not in seen and not con.execute(
            "SELECT 1 FROM ledger.charges WHERE key = ?", [req.key]).fetchone()
        seen.add(req.key)
        fresh.append(new)
        if not new:
            continue
        try:
            charged = charge_under(req.cost, req.neighbour, row[4])
        except NeighbourConversionError as exc:
            raise NeighbourConversionError(
                f"step {req.step!r} ({req.mechanism}) on dataset {req.dataset!r}: {exc} Nothing was charged."
            ) from None
        line = None
        if lines:
            # the most specific line with room (a listed record's own line before a shared one)
            line = max((ln for ln in lines if ln[1] == req.step and used[ln[0]] < int(ln[3])
                        and matches(json.loads(ln[2]), req.params)),
                       key=lambda ln: len(json.loads(ln[2])), default=None)
            if line is None or (int(line[5]), int(line[6])) != charged.units:
                raise PlanMismatchError(
                    f"release {req.release_id!r} of dataset {req.dataset!r}: a charge of step {req.step!r} is "
                    "not among the lines its run reserved (the cost plan and the step disagree: a bug). "
                    "Nothing was charged for it; report this with the spec."
                )
            used[line[0]] += 1
        todo.append((req, charged, line))
    if not lines and todo:
        eps_u = sum(c.units[0] for _, c, _ in todo)
        delta_u = sum(c.units[1] for _, c, _ in todo)
        if es + eps_u > ec or ds + delta_u > dc:
            held, steps = _held(con, first.dataset, first.release_id)
            total = PrivacyCost.from_units(eps_u, delta_u)
            stated = PrivacyCost.from_units(sum(r.cost.units[0] for r, _, _ in todo),
                                            sum(r.cost.units[1] for r, _, _ in todo))
            raise BudgetExceededError(
                first.dataset, total, PrivacyCost.from_units(es, ds), PrivacyCost.from_units(ec, dc),
                stated=None if stated == total else (stated, first.neighbour, row[4]),
                release=(first.release_id, held, steps),
            )
        con.execute(
            "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? "
            "WHERE dataset = ?", [eps_u, delta_u, budget],
        )
    for req, charged, line in todo:
        if line is not None:
            con.execute("UPDATE ledger.reservations SET n_used = n_used + 1 WHERE line_key = ?", [line[0]])
        con.execute(
            "INSERT INTO ledger.charges (key, dataset, release_id, step, mechanism, notion, neighbour, "
            "eps_units, delta_units, status, publishable, flow_run_id, params, reserved_at, stated_eps_units, "
            "stated_delta_units, public_ref, line_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                req.key, req.dataset, req.release_id, req.step, req.mechanism, req.notion, req.neighbour,
                *charged.units, req.publishable, req.flow_run_id,
                json.dumps(req.params, sort_keys=True, default=str), _now(), *req.cost.units,
                new_nonce(8), None if line is None else line[0],
            ],
        )
    return fresh


class PrivacyLedger:
    """Budgets and charges in the warehouse's ``ledger`` schema.

    Parameters
    ----------
    warehouse : Warehouse
    """

    def __init__(self, warehouse: Warehouse):
        self.wh = warehouse

        def ddl(con):  # one connection: each costs ~40 ms, and every task opens the ledger
            for stmt in _DDL:
                con.execute(stmt)
            _migrate_registrations(con)

        self.wh.setup_once("ledger", ddl)

    # ------------------------------------------------------------------ budgets
    def ensure_budget(self, dataset: str, cap: PrivacyCost, neighbour: Neighbour = "add-remove") -> BudgetStatus:
        """Register ``dataset`` with ``cap`` stated under ``neighbour`` (idempotent for the same values).

        Parameters
        ----------
        dataset : str
        cap : PrivacyCost
        neighbour : {"add-remove", "replace-one"}
            The neighbour relation the cap is stated under; every charge is
            converted to it (:func:`dpcore.budget.amounts.charge_under`).

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
            problem = _cap_mismatch(dataset, budget, row, cap, neighbour)  # the one text of this refusal
            if problem:
                raise LedgerError(problem)
            if row[2] != neighbour:
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
            done = _fingerprinted_row(budget, table_sql, id_column, owner_key)
            if con.execute("SELECT 1 FROM ledger.fingerprinted_tables WHERE budget = ? AND table_sql = ? AND "
                           "id_column = ? AND key_id = ?", done).fetchone():
                return budget  # this raw table (which never changes) is in the budget's fingerprints already
            _fingerprint_table(con, table_sql, id_column, pads, self.wh.memory.duckdb_bytes, budget,
                               scratch_dir(self.wh))
            con.execute("INSERT INTO ledger.fingerprinted_tables VALUES (?, ?, ?, ?)", done)
            return budget

        return self.wh.run(op, transaction=True)

    # ------------------------------------------------------------ registrations
    def register_dataset(
        self, dataset: str, table_sql: str, id_column: str, owner_key: bytes, cap: PrivacyCost,
        neighbour: Neighbour = "add-remove", share: str | None = None,
        separate_from: dict[str, str] | None = None, reason: str | None = None,
        on_fingerprinted: Callable[[dict[str, int], int], None] | None = None,
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
        on_fingerprinted : callable, optional
            Called with ``(overlaps, ids)`` once the input is fingerprinted, before any refusal: budget -> how
            many of the input's distinct record ids its records hold (budgets without overlap left out), and the
            number of distinct non-null ids. Private, the owner's eyes only (``dpr dataset add`` prints them on
            the owner's terminal); never logged, stored or published. Not called for an identical
            re-registration (no data read).

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
            # the fingerprints go into the budget's now (part by part, nothing kept aside); a refusal below
            # rolls them back with the rest of this transaction
            ids, found = _fingerprint_table(con, table_sql, id_column, pads, self.wh.memory.duckdb_bytes, budget,
                                            scratch_dir(self.wh), overlaps=True)
            if on_fingerprinted is not None:
                on_fingerprinted(dict(found), ids)
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
            # the run that follows a registration reads the same stored raw table: not fingerprinted again
            con.execute("INSERT OR IGNORE INTO ledger.fingerprinted_tables VALUES (?, ?, ?, ?)",
                        _fingerprinted_row(budget, table_sql, id_column, owner_key))
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

    def set_cap(self, dataset: str, cap: PrivacyCost, reason: str = "") -> BudgetStatus:
        """Change the cap of the budget ``dataset`` charges (the data owner's decision; ``dpr budget set-cap``).

        The change is recorded in ``ledger.cap_changes`` with its time, the old and new caps and ``reason``
        (shown by ``dpr budget``). The relation the cap is stated under does not change.

        Raises
        ------
        LedgerError
            The dataset has no budget yet, or the new cap is below what is already spent (both amounts are
            stated; nothing changes).
        """
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            budget = _budget_of(con, dataset)
            row = con.execute("SELECT eps_spent, delta_spent, eps_cap, delta_cap, neighbour FROM ledger.budgets "
                              "WHERE dataset = ?", [budget]).fetchone()
            if row is None:
                raise LedgerError(unknown_dataset(dataset))
            if eps_cap < row[0] or delta_cap < row[1]:
                shared = "" if budget == dataset else f" (the budget of {budget!r}, which dataset {dataset!r} charges)"
                raise LedgerError(
                    f"refused: the requested cap {cap} is below what{shared} is already spent: "
                    f"{PrivacyCost.from_units(row[0], row[1])} ({row[4]} neighbours). Spent budget is never given "
                    f"back, so a cap cannot go below it; the cap stays {PrivacyCost.from_units(row[2], row[3])}."
                )
            con.execute(
                "UPDATE ledger.budgets SET eps_cap = ?, delta_cap = ? WHERE dataset = ?", [eps_cap, delta_cap, budget]
            )
            con.execute("INSERT INTO ledger.cap_changes VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [budget, _now(), int(row[2]), int(row[3]), eps_cap, delta_cap, reason])

        self.wh.run(op, transaction=True)
        return self.status(dataset)

    def cap_changes(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """The recorded cap changes (of the budget ``dataset`` charges, or of every budget), oldest first."""

        def op(con):
            where, args = "", []
            if dataset is not None:
                where, args = "WHERE budget = ?", [_budget_of(con, dataset)]
            return con.execute(
                "SELECT budget, changed_at, old_eps_cap, old_delta_cap, new_eps_cap, new_delta_cap, reason "
                f"FROM ledger.cap_changes {where} ORDER BY changed_at", args).fetchall()

        return [{"budget": b, "time": t, "old_cap": PrivacyCost.from_units(oe, od),
                 "new_cap": PrivacyCost.from_units(ne, nd), "reason": r}
                for b, t, oe, od, ne, nd, r in self.wh.run(op)]

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
            raise LedgerError(unknown_dataset(dataset))
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
    def reserve_lines(self, dataset: str, release_id: str, lines: list[LineRequest],
                      flow_run_id: str | None = None,
                      series: "tuple[str, PrivacyCost] | None" = None) -> Reservation:
        """Reserve every line of a run that is not reserved yet, in one transaction, or nothing (rule 10).

        Parameters
        ----------
        dataset, release_id : str
        lines : list of LineRequest
            The run's planned lines (:func:`dpcore.run.cost_plan.plan_release`). A
            line already reserved (same line key: the same release id, step
            and public parameters) is not reserved again: a re-run or a
            resumed run spends nothing new for it.
        flow_run_id : str, optional
        series : (str, PrivacyCost), optional
            A series spec's ``budget.series_cap`` (issue 30): the regular
            expression matching the series' release ids
            (:func:`dpcore.release.series.series_release_pattern`) and the cap their
            holdings may reach together, checked in the same transaction.

        Returns
        -------
        Reservation
            The new reservation (its total is what this run spends) and what
            the release id held before.

        Raises
        ------
        BudgetExceededError
            The new lines do not fit the budget's remaining cap; nothing was
            reserved or charged, and the message says what the release id
            already holds from earlier runs.
        LedgerError
            The dataset has no registered budget.
        """

        def op(con):
            budget = _budget_of(con, dataset)
            row = con.execute(
                "SELECT eps_cap, delta_cap, eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?", [budget]
            ).fetchone()
            if row is None:
                raise LedgerError(unknown_dataset(dataset))
            ec, dc, es, ds = (int(v) for v in row)
            held = {r[0]: int(r[1]) for r in con.execute(
                "SELECT line_key, n_reserved FROM ledger.reservations WHERE dataset = ? AND release_id = ?",
                [dataset, release_id]).fetchall()}
            held_before = _held(con, dataset, release_id)
            new = [ln for ln in lines if ln.line_key not in held and ln.count > 0]
            eps_u = sum(ln.each.units[0] * ln.count for ln in new)
            delta_u = sum(ln.each.units[1] * ln.count for ln in new)
            if es + eps_u > ec or ds + delta_u > dc:
                raise BudgetExceededError(
                    dataset, PrivacyCost.from_units(eps_u, delta_u), PrivacyCost.from_units(es, ds),
                    PrivacyCost.from_units(ec, dc), release=(release_id, held_before[0], held_before[1]),
                    planned=True,
                )
            if series is not None and new:
                _check_series_cap(con, dataset, release_id, series, eps_u, delta_u)
            if not new:
                return PrivacyCost(0), held_before[0]
            con.execute(
                "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? WHERE dataset = ?",
                [eps_u, delta_u, budget],
            )
            now = _now()
            for ln in new:
                e, d = ln.each.units
                con.execute(
                    "INSERT INTO ledger.reservations (line_key, dataset, budget, release_id, step, mechanism, notion, "
                    "match, n_reserved, n_used, eps_each, delta_each, flow_run_id, reserved_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                    [ln.line_key, dataset, budget, release_id, ln.step, ln.mechanism, ln.notion,
                     json.dumps(canonical(ln.match), sort_keys=True), ln.count, e, d, flow_run_id, now],
                )
            return PrivacyCost.from_units(eps_u, delta_u), held_before[0]

        new, before = self.wh.run(op, transaction=True)
        if new != PrivacyCost(0):
            _charged(self.wh)
        return Reservation(new, before, self.status(dataset))

    def reserved_counts(self, dataset: str, release_id: str) -> dict[str, int]:
        """Line key -> charges reserved, for the lines of ``release_id`` (the plan's "already reserved")."""
        rows = self.wh.query(
            "SELECT line_key, n_reserved FROM ledger.reservations WHERE dataset = ? AND release_id = ?",
            [dataset, release_id],
        )
        return {r[0]: int(r[1]) for r in rows}

    def release_holds(self, dataset: str, release_id: str) -> tuple[PrivacyCost, list[str]]:
        """What ``release_id`` holds against the budget (reserved lines and direct charges) and its steps."""
        return self.wh.run(lambda con: _held(con, dataset, release_id))

    def reserve(self, req: ChargeRequest) -> bool:
        """Record the charge of ``req``: from its release's reserved line, or (no reservation) against the cap.

        A release whose run reserved its lines (:meth:`reserve_lines`) draws
        each charge from the line whose step is ``req.step`` and whose match
        parameters are among ``req.params``: nothing new is added to the
        budget. A release id without any reservation (the library used
        directly) charges the cap at once, atomically.

        Returns False if the key was already charged (nothing new is charged).

        Raises
        ------
        BudgetExceededError
            No reservation, and the converted charge would exceed the cap; nothing is recorded.
        PlanMismatchError
            The release reserved lines but none of them has room for this
            charge (the plan and the run disagree; nothing is recorded).
        NeighbourConversionError
            ``req.neighbour`` cannot be converted to the budget's relation; nothing is recorded.
        LedgerError
            The dataset has no registered budget.
        """
        return self.reserve_many([req])[0]

    def reserve_many(self, reqs: list[ChargeRequest]) -> list[bool]:
        """:meth:`reserve` for a batch of charges of one dataset and release: all of them or none (rule 10).

        Without a reservation (library use of a batch step), the batch's total,
        converted to the budget's relation, must fit the cap as a whole; the
        refusal states that total, and nothing of the batch is recorded.

        Returns
        -------
        list of bool
            Per request, False if its key was already charged (nothing new for it).

        Raises
        ------
        As :meth:`reserve`, for the batch.
        """
        if not reqs:
            return []
        if len({(r.dataset, r.release_id) for r in reqs}) != 1:
            raise ValueError("reserve_many: every request must be of one dataset and one release id")
        done = self.wh.run(lambda con: _reserve_in(con, reqs), transaction=True)
        if any(done):
            _charged(self.wh)
        return done

    def _charge_state(self, key: str) -> tuple | None:
        rows = self.wh.query(
            "SELECT c.status, o.payload FROM ledger.charges c LEFT JOIN releases.outputs o USING (key) "
            "WHERE c.key = ?",
            [key],
        )
        return tuple(rows[0]) if rows else None

    def lookup(self, key: str) -> Release | None:
        """The stored release for ``key``; None if the key was never charged or its answer was never stored.

        A charged key without a stored answer (a crash or a failed mechanism
        after the charge) is computed again by :meth:`release_once` within
        the same charge: its answer was never revealed.
        """
        state = self._charge_state(key)
        if state is None or state[1] is None:
            return None
        return Release(key, json.loads(state[1]), reused=True)

    def is_charged(self, key: str) -> bool:
        """Whether ``key`` holds a charge (stored answer or not)."""
        return self._charge_state(key) is not None

    def store_result(self, req: ChargeRequest, payload: dict[str, Any]) -> dict[str, Any]:
        """Store the private ``payload`` of a charged key once and mark it released; return the stored payload.

        If an answer for the key is stored already (a concurrent or earlier
        run got there first), ``payload`` is discarded unseen and the stored
        answer is returned: one key never publishes two answers.
        """
        text = json.dumps(payload, sort_keys=True, allow_nan=False)
        key = req.key

        def op(con):
            row = con.execute("SELECT payload FROM releases.outputs WHERE key = ?", [key]).fetchone()
            if row is not None:
                return json.loads(row[0])
            con.execute(
                "INSERT INTO releases.outputs VALUES (?, ?, ?, ?, ?, ?)",
                [key, req.dataset, req.release_id, req.step, text, _now()],
            )
            con.execute(
                "UPDATE ledger.charges SET status = 'released', finished_at = ?, error = NULL WHERE key = ?",
                [_now(), key],
            )
            return payload

        return self.wh.run(op, transaction=True)

    def mark_failed(self, req: ChargeRequest, error_type: str) -> None:
        """Mark a charged key whose answer was not stored failed (it stays charged; a re-run computes it again).

        Only the error *type* is kept.
        """
        self.wh.run(
            lambda con: con.execute(
                "UPDATE ledger.charges SET status = 'failed', finished_at = ?, error = ? WHERE key = ? "
                "AND status <> 'released'",
                [_now(), error_type, req.key],
            ),
            transaction=True,
        )

    def release_once(self, req: ChargeRequest, compute: Callable[[], dict[str, Any]]) -> Release:
        """Charge, compute and store a private output exactly once per key.

        1. If the key's result is stored: return it (``reused=True``); no charge, no draw.
        2. Otherwise charge it (from the release's reservation, or the cap),
           unless a crashed run charged it already; then call ``compute()``
           — the only place noise may be drawn — and store its
           JSON-serialisable payload (:meth:`store_result`: the first stored
           answer wins) before returning it.

        If ``compute`` raises, the charge stays (status ``failed``) and the
        exception propagates; a re-run computes the key again within the same
        charge (its answer was never stored, so never revealed).

        Raises
        ------
        BudgetExceededError, PlanMismatchError, LedgerError
        """
        def lookup_or_reserve(con):
            """One transaction: the stored answer if there is one; else the charge (none is added for a key a
            crashed or concurrent run charged already: its answer was never stored, so it is computed again)."""
            row = con.execute("SELECT payload FROM releases.outputs WHERE key = ?", [req.key]).fetchone()
            if row is not None:
                return json.loads(row[0])
            _reserve_in(con, [req])
            return None

        found = self.wh.run(lookup_or_reserve, transaction=True)
        if found is not None:
            return Release(req.key, found, reused=True)
        _charged(self.wh)
        try:
            fault_point(f"charged:{req.step}")
            payload = compute()
            fault_point(f"computed:{req.step}")
        except BaseException as exc:
            self.mark_failed(req, type(exc).__name__)
            raise
        stored = self.store_result(req, payload)
        return Release(req.key, stored, reused=stored is not payload)

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

    def release_totals(self, dataset: str) -> list[dict[str, Any]]:
        """Per release id of the budget ``dataset`` charges: what it holds and how much of it was drawn.

        ``held`` is what the release id spent (its reserved lines, whole, plus charges outside any line);
        ``drawn`` what its charges used so far; ``unused`` the rest of its reservation (an upper-bound line
        the data did not need, or a run that crashed: a re-run of the release id draws from it);
        ``given_back`` what it returned to the budget when it stopped on a public fact
        (:meth:`give_back_unused`), and ``reserved`` = ``held + given_back`` (what it reserved in all).
        """
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT release_id, sum(he), sum(hd), sum(ue), sum(ud), min(t) FROM ("
            "SELECT release_id, n_reserved * eps_each AS he, n_reserved * delta_each AS hd, "
            "n_used * eps_each AS ue, n_used * delta_each AS ud, reserved_at AS t FROM ledger.reservations "
            "WHERE dataset IN (SELECT unnest(?::VARCHAR[])) UNION ALL "
            "SELECT release_id, eps_units, delta_units, eps_units, delta_units, reserved_at FROM ledger.charges "
            "WHERE dataset IN (SELECT unnest(?::VARCHAR[])) AND line_key IS NULL) GROUP BY release_id ORDER BY 6",
            [names, names])
        back = self.wh.run(lambda con: _given_back_by_release(con, names))
        out = []
        for rid, he, hd, ue, ud, _ in rows:
            held, drawn = PrivacyCost.from_units(int(he), int(hd)), PrivacyCost.from_units(int(ue), int(ud))
            given = PrivacyCost.from_units(*back.get(rid, (0, 0)))
            out.append({"release_id": rid, "held": held, "drawn": drawn, "unused": held - drawn,
                        "given_back": given, "reserved": held + given})
        seen = {t["release_id"] for t in out}
        for rid, (ge, gd) in back.items():  # a release that drew nothing and gave its whole reservation back
            if rid not in seen:
                given = PrivacyCost.from_units(ge, gd)
                out.append({"release_id": rid, "held": PrivacyCost(0), "drawn": PrivacyCost(0),
                            "unused": PrivacyCost(0), "given_back": given, "reserved": given})
        return out

    def spent_exact(self, dataset: str) -> PrivacyCost:
        """What the budget ``dataset`` charges has spent, recomputed from the rows (audit).

        The sum of what every release id holds (:meth:`release_totals`: reserved lines whole, charges
        outside any line one by one), not the running total it is checked against.
        """
        return sum((t["held"] for t in self.release_totals(dataset)), PrivacyCost(0))

    def weakest_notion(self, dataset: str) -> str | None:
        """Weakest privacy notion among the dataset's charges (rule 4)."""
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT DISTINCT notion FROM ledger.charges WHERE dataset IN (SELECT unnest(?::VARCHAR[]))", [names]
        )
        return weakest_notion({r[0] for r in rows})

    # ----------------------------------------------------------------- give-back
    def give_back_unused(self, dataset: str, release_id: str, reason: str,
                         flow_run_id: str | None = None, line_keys: list[str] | None = None) -> GiveBack:
        """Give back what a release that stopped on a public fact reserved and never drew (DESIGN.md rule 15).

        For a release whose stop is decided on public facts only (the
        rejected-rows gate reads the published noisy record counts; a refusal
        decided on public parameters), the part of its reservation that no
        step drew is returned to the budget, exactly (integer units), in one
        transaction: each reserved line keeps only what its charges drew (a
        line nothing drew is removed, so a later run of the release id reserves
        it again if it needs it), a ``ledger.given_back`` row records each
        line's return with ``reason`` (the record of the stop), and the
        budget's running total goes down by their sum. What was drawn stays
        spent: those outputs exist. A crashed release does not call this: it
        keeps its reservation to resume. Privacy: the amount returned is a
        function of the spec and of which steps ran before a public decision,
        so it reveals nothing beyond what was published.

        Parameters
        ----------
        dataset, release_id : str
        reason : str
            Public text of the stop (recorded with each returned line).
        flow_run_id : str, optional
            The run that stopped.
        line_keys : list of str, optional
            Only these lines (the stopped run's planned lines): another run unit of the same release id (an
            operator query that crashed) keeps its reservation. Default: every line of the release id.

        Returns
        -------
        GiveBack
            Reserved, drawn and given back (reserved = drawn + given back) and the budget after.

        Raises
        ------
        LedgerError
            The dataset has no registered budget.
        """

        def op(con):
            budget = _budget_of(con, dataset)
            if con.execute("SELECT 1 FROM ledger.budgets WHERE dataset = ?", [budget]).fetchone() is None:
                raise LedgerError(unknown_dataset(dataset))
            _ensure_given_back(con)
            held = _held(con, dataset, release_id)[0]
            lines = con.execute(
                "SELECT line_key, step, n_reserved, n_used, eps_each, delta_each FROM ledger.reservations "
                "WHERE dataset = ? AND release_id = ? AND n_reserved > n_used ORDER BY reserved_at, line_key",
                [dataset, release_id]).fetchall()
            if line_keys is not None:
                lines = [ln for ln in lines if ln[0] in set(line_keys)]
            ge = gd = 0
            now = _now()
            for key, step, n_res, n_used, e, d in lines:
                n = int(n_res) - int(n_used)
                ue, ud = n * int(e), n * int(d)
                ge, gd = ge + ue, gd + ud
                con.execute("INSERT INTO ledger.given_back VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [budget, dataset, release_id, key, step, n, ue, ud, reason, flow_run_id, now])
                if int(n_used) == 0:
                    con.execute("DELETE FROM ledger.reservations WHERE line_key = ?", [key])
                else:
                    con.execute("UPDATE ledger.reservations SET n_reserved = n_used WHERE line_key = ?", [key])
            if ge or gd:
                con.execute("UPDATE ledger.budgets SET eps_spent = eps_spent - ?, delta_spent = delta_spent - ? "
                            "WHERE dataset = ?", [ge, gd, budget])
            row = con.execute("SELECT eps_cap, delta_cap, eps_spent, delta_spent, neighbour FROM ledger.budgets "
                              "WHERE dataset = ?", [budget]).fetchone()
            status = BudgetStatus(dataset, PrivacyCost.from_units(row[0], row[1]),
                                  PrivacyCost.from_units(row[2], row[3]), row[4], budget)
            back = PrivacyCost.from_units(ge, gd)
            return GiveBack(held, held - back, back, status)

        out = self.wh.run(op, transaction=True)
        _charged(self.wh)  # the home's marker follows the lower spent total (issue 47 §2)
        return out

    def given_back(self, dataset: str, release_id: str | None = None) -> PrivacyCost:
        """What was given back to the budget ``dataset`` charges (of one release id, or of all), exactly."""

        def op(con):
            names = _datasets_of(con, _budget_of(con, dataset))
            per = _given_back_by_release(con, names)
            if release_id is not None:
                per = {release_id: per.get(release_id, (0, 0))}
            return PrivacyCost.from_units(sum(v[0] for v in per.values()), sum(v[1] for v in per.values()))

        return self.wh.run(op)

    def cap_mismatch(self, dataset: str, cap: PrivacyCost, neighbour: str) -> str | None:
        """The refusal :meth:`ensure_budget` would raise for a spec stating ``cap`` under ``neighbour``, or None.

        Read only (nothing is created or changed); None too when the name has no budget yet.
        """

        def op(con):
            budget = _budget_of(con, dataset)
            row = con.execute("SELECT eps_cap, delta_cap, neighbour, eps_spent, delta_spent FROM ledger.budgets "
                              "WHERE dataset = ?", [budget]).fetchone()
            return None if row is None else _cap_mismatch(dataset, budget, row, cap, neighbour)

        return self.wh.run(op)
