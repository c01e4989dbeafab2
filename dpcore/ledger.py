"""The persistent privacy-budget ledger.

Rules enforced here (DESIGN.md, privacy rules 1, 2, 4):

* **Charged before it exists.** :meth:`PrivacyLedger.release_once` reserves the
  cost inside a transaction that refuses to go over the dataset's cap, and only
  then calls the mechanism (which draws the noise).
* **A release id names one release; one key** (rule 2). Every charge carries
  an idempotency key (:func:`dpcore.charge_keys.charge_key`: dataset name +
  release id + step + public parameters; never the input's content). A key
  whose result is stored returns that stored result with no new charge and no
  new draw, whatever the data now holds. The cost plan and the release
  reservations use :func:`dpcore.charge_keys.line_key` from the same module.
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
  relation converted by :func:`dpcore.budget.charge_under` (an add/remove
  cost counts ``(2 epsilon, (1 + e^epsilon) delta)`` against a replace-one
  budget; a replace-one cost cannot be charged to an add/remove budget and is
  refused before anything is charged). A charge row keeps both amounts:
  ``eps_units``/``delta_units`` (charged against the cap; they sum to the
  running total) and ``stated_eps_units``/``stated_delta_units`` (the
  mechanism's own statement).

* **A budget belongs to the people in the data, not to a name** (issue 15,
  hole 6). Every ingest fingerprints the record ids of the raw input with an
  HMAC under the data owner's key (:mod:`dpcore.lineage`; the ids themselves
  are never stored here) and :meth:`PrivacyLedger.register_records` links a
  dataset whose ids overlap another budget's records to that budget: a
  renamed copy spends the same cap. A deliberately separate budget needs the
  owner's explicit override (``budget.separate_from`` in the spec), recorded
  in ``ledger.separations`` and printed in every later report of both datasets.
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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import pandas as pd

from .budget import (
    NOTION_ORDER, BudgetExceededError, Neighbour, NeighbourConversionError, PrivacyCost, charge_under,
    check_neighbour, weakest_notion,
)
from .charge_keys import canonical, charge_key, matches
from .faults import fault_point
from .lineage import hmac_pads, hmac_sql, new_nonce
from .warehouse import Warehouse


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown dataset, conflicting cap, ...)."""


class PlanMismatchError(LedgerError):
    """A charge of a reserved release has no reserved line with room left: the plan and the run disagree (a bug)."""


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
    # release reservations (issue 33): every planned line of a run reserved at once, before its first charge
    """CREATE TABLE IF NOT EXISTS ledger.reservations (
        line_key VARCHAR PRIMARY KEY,
        dataset VARCHAR NOT NULL, budget VARCHAR NOT NULL, release_id VARCHAR NOT NULL,
        step VARCHAR NOT NULL, mechanism VARCHAR NOT NULL, notion VARCHAR NOT NULL,
        match VARCHAR NOT NULL, n_reserved INTEGER NOT NULL, n_used INTEGER NOT NULL DEFAULT 0,
        eps_each HUGEINT NOT NULL, delta_each HUGEINT NOT NULL,
        flow_run_id VARCHAR, reserved_at TIMESTAMPTZ NOT NULL)""",
    "ALTER TABLE ledger.charges ADD COLUMN IF NOT EXISTS line_key VARCHAR",
]


def _budget_of(con, dataset: str) -> str:
    """The budget a dataset name charges: its own, or the one its records were linked to."""
    row = con.execute("SELECT budget FROM ledger.dataset_budgets WHERE dataset = ?", [dataset]).fetchone()
    return row[0] if row else dataset


def _datasets_of(con, budget: str) -> list[str]:
    """Every dataset name that charges ``budget`` (the budget's own name first)."""
    rows = con.execute("SELECT dataset FROM ledger.dataset_budgets WHERE budget = ? ORDER BY dataset", [budget]).fetchall()
    return [budget] + [r[0] for r in rows if r[0] != budget]


_UNKNOWN = ("dataset {dataset!r} has no budget in this warehouse's ledger yet: a release run registers it "
            "(with the cap of its spec's budget section) before its first charge")


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


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class LineRequest:
    """One planned line of a run, as the ledger reserves it (:meth:`PrivacyLedger.reserve_lines`).

    Parameters
    ----------
    line_key : str
        :func:`dpcore.charge_keys.line_key` of (dataset, release id, step, match).
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
        """The idempotency key of this request (:func:`dpcore.charge_keys.charge_key`: no content of the data)."""
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
            shared = "" if budget == dataset else f" (it charges the budget of {budget!r}: their record ids overlap)"
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

    def register_records(
        self, dataset: str, table_sql: str, id_column: str, owner_key: bytes, separate_from: dict[str, str] | None = None
    ) -> str:
        """Fingerprint a raw table's record ids and link the dataset to the budget its records belong to.

        Parameters
        ----------
        dataset : str
        table_sql : str
            Qualified raw table (``raw."<table>"``).
        id_column : str
            The record-id column (every raw row's id counts, valid or not).
        owner_key : bytes
            The data owner's HMAC key; ids are stored only as HMAC-SHA256 fingerprints.
        separate_from : dict of str to str, optional
            The owner's explicit overrides: other dataset (budget) name -> reason.
            Recorded in ``ledger.separations`` (once) and reported for both datasets.

        Returns
        -------
        str
            The budget this dataset charges: its own name, or the budget of the
            dataset whose records its ids overlap.

        Raises
        ------
        LedgerError
            The ids overlap several budgets, or overlap another budget after this
            dataset already spent on its own (say which with ``budget.separate_from``).
        """
        separate_from = dict(separate_from or {})
        pads = hmac_pads(owner_key)

        def op(con):
            con.execute(
                f'CREATE OR REPLACE TEMP TABLE _fp AS SELECT DISTINCT {hmac_sql(chr(34) + id_column + chr(34))} AS fp '
                f'FROM {table_sql} WHERE "{id_column}" IS NOT NULL',
                pads,
            )
            own = _budget_of(con, dataset)
            for other, reason in separate_from.items():
                if other != dataset and not con.execute(
                    "SELECT 1 FROM ledger.separations WHERE dataset = ? AND other = ?", [dataset, other]
                ).fetchone():
                    con.execute("INSERT INTO ledger.separations VALUES (?, ?, ?, ?)", [dataset, other, reason, _now()])
            separated = {r[0] for r in con.execute(
                "SELECT other FROM ledger.separations WHERE dataset = ? UNION SELECT dataset FROM ledger.separations "
                "WHERE other = ?", [dataset, dataset]).fetchall()}
            overlapping = [r[0] for r in con.execute(
                "SELECT DISTINCT f.budget FROM ledger.record_fingerprints f JOIN _fp USING (fp) WHERE f.budget <> ? "
                "ORDER BY 1", [own]).fetchall()]
            linked = [b for b in overlapping if b not in separated and not (set(_datasets_of(con, b)) & separated)]
            if len(linked) > 1:
                raise LedgerError(
                    f"dataset {dataset!r}: its record ids overlap the records of several budgets ({linked}); "
                    "a budget belongs to the people in the data. Declare which are separate on purpose with "
                    "budget.separate_from in the spec (recorded in the ledger and printed in every later report)."
                )
            if linked and linked[0] != own:
                spent = con.execute(
                    "SELECT eps_spent + delta_spent FROM ledger.budgets WHERE dataset = ?", [own]
                ).fetchone()
                if spent and int(spent[0]):
                    raise LedgerError(
                        f"dataset {dataset!r} already spent on its own budget, and its record ids now overlap the "
                        f"records of budget {linked[0]!r}. The data owner decides: declare "
                        f"budget.separate_from: {{{linked[0]}: <reason>}} in the spec (recorded and reported), or "
                        "keep the datasets' records apart."
                    )
                con.execute("DELETE FROM ledger.budgets WHERE dataset = ? AND eps_spent = 0 AND delta_spent = 0", [own])
                con.execute("DELETE FROM ledger.dataset_budgets WHERE dataset = ?", [dataset])
                con.execute("INSERT INTO ledger.dataset_budgets VALUES (?, ?, ?)", [dataset, linked[0], _now()])
                own = linked[0]
            con.execute(
                "INSERT INTO ledger.record_fingerprints SELECT ?, fp FROM _fp WHERE NOT EXISTS "
                "(SELECT 1 FROM ledger.record_fingerprints f WHERE f.budget = ? AND f.fp = _fp.fp)", [own, own])
            con.execute("DROP TABLE _fp")
            return own

        return self.wh.run(op, transaction=True)

    def budget_identity(self, dataset: str) -> dict[str, Any]:
        """Which budget ``dataset`` charges, which datasets share it, and the owner's separations touching them.

        Public (names and the owner's stated reasons only); printed in every report.
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
                raise LedgerError(_UNKNOWN.format(dataset=dataset))
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
            raise LedgerError(_UNKNOWN.format(dataset=dataset))
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
                      flow_run_id: str | None = None) -> Reservation:
        """Reserve every line of a run that is not reserved yet, in one transaction, or nothing (rule 10).

        Parameters
        ----------
        dataset, release_id : str
        lines : list of LineRequest
            The run's planned lines (:func:`dpcore.cost_plan.plan_release`). A
            line already reserved (same line key: the same release id, step
            and public parameters) is not reserved again: a re-run or a
            resumed run spends nothing new for it.
        flow_run_id : str, optional

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
                raise LedgerError(_UNKNOWN.format(dataset=dataset))
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
                raise LedgerError(_UNKNOWN.format(dataset=req.dataset))
            ec, dc, es, ds = (int(v) for v in row[:4])
            try:
                charged = charge_under(req.cost, req.neighbour, row[4])
            except NeighbourConversionError as exc:
                raise NeighbourConversionError(
                    f"step {req.step!r} ({req.mechanism}) on dataset {req.dataset!r}: {exc} Nothing was charged."
                ) from None
            eps_u, delta_u = charged.units
            lines = con.execute(
                "SELECT line_key, step, match, n_reserved, n_used, eps_each, delta_each FROM ledger.reservations "
                "WHERE dataset = ? AND release_id = ? ORDER BY reserved_at, line_key", [req.dataset, req.release_id],
            ).fetchall()
            line = None
            if lines:
                line = next((ln for ln in lines if ln[1] == req.step and int(ln[4]) < int(ln[3])
                             and matches(json.loads(ln[2]), req.params)), None)
                if line is None or (int(line[5]), int(line[6])) != (eps_u, delta_u):
                    raise PlanMismatchError(
                        f"release {req.release_id!r} of dataset {req.dataset!r}: a charge of step {req.step!r} is "
                        "not among the lines its run reserved (the cost plan and the step disagree: a bug). "
                        "Nothing was charged for it; report this with the spec."
                    )
                con.execute("UPDATE ledger.reservations SET n_used = n_used + 1 WHERE line_key = ?", [line[0]])
            else:
                if es + eps_u > ec or ds + delta_u > dc:
                    held, steps = _held(con, req.dataset, req.release_id)
                    raise BudgetExceededError(
                        req.dataset, charged, PrivacyCost.from_units(es, ds), PrivacyCost.from_units(ec, dc),
                        stated=None if charged == req.cost else (req.cost, req.neighbour, row[4]),
                        release=(req.release_id, held, steps),
                    )
                con.execute(
                    "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? "
                    "WHERE dataset = ?", [eps_u, delta_u, budget],
                )
            con.execute(
                "INSERT INTO ledger.charges (key, dataset, release_id, step, mechanism, notion, neighbour, eps_units, "
                "delta_units, status, publishable, flow_run_id, params, reserved_at, stated_eps_units, "
                "stated_delta_units, public_ref, line_key) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    key, req.dataset, req.release_id, req.step, req.mechanism, req.notion, req.neighbour,
                    eps_u, delta_u, req.publishable, req.flow_run_id,
                    json.dumps(req.params, sort_keys=True, default=str), _now(), stated_eps_u, stated_delta_u,
                    new_nonce(8), None if line is None else line[0],
                ],
            )
            return True

        return self.wh.run(op, transaction=True)

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
        found = self.lookup(req.key)
        if found is not None:
            return found
        self.reserve(req)  # False: charged before (a crashed run, or a concurrent one): never charged twice
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
        the data did not need, or a run that stopped: a re-run of the release id draws from it).
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
        out = []
        for rid, he, hd, ue, ud, _ in rows:
            held, drawn = PrivacyCost.from_units(int(he), int(hd)), PrivacyCost.from_units(int(ue), int(ud))
            out.append({"release_id": rid, "held": held, "drawn": drawn, "unused": held - drawn})
        return out

    def spent_exact(self, dataset: str) -> PrivacyCost:
        """What the budget ``dataset`` charges has spent, recomputed from the rows (audit).

        Reserved lines count whole (used or not); charges outside any line count one by one.
        """
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT coalesce(sum(e), 0), coalesce(sum(d), 0) FROM ("
            "SELECT eps_units AS e, delta_units AS d FROM ledger.charges "
            "WHERE dataset IN (SELECT unnest(?::VARCHAR[])) AND line_key IS NULL UNION ALL "
            "SELECT n_reserved * eps_each, n_reserved * delta_each FROM ledger.reservations "
            "WHERE dataset IN (SELECT unnest(?::VARCHAR[])))",
            [names, names],
        )
        return PrivacyCost.from_units(int(rows[0][0]), int(rows[0][1]))

    def weakest_notion(self, dataset: str) -> str | None:
        """Weakest privacy notion among the dataset's charges (rule 4)."""
        names = self.wh.run(lambda con: _datasets_of(con, _budget_of(con, dataset)))
        rows = self.wh.query(
            "SELECT DISTINCT notion FROM ledger.charges WHERE dataset IN (SELECT unnest(?::VARCHAR[]))", [names]
        )
        return weakest_notion({r[0] for r in rows})
