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

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import pandas as pd

from .budget import (
    NOTION_ORDER, BudgetExceededError, Neighbour, NeighbourConversionError, PrivacyCost, charge_under,
    check_neighbour, set_cap_hint, weakest_notion,
)
from .lineage import hmac_pads, hmac_sql, new_nonce
from .warehouse import Warehouse


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown dataset, conflicting cap, ...)."""


class OrphanedChargeError(LedgerError):
    """A key was charged but its result was never stored; it will not be re-drawn."""


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
    # the data owner's cap changes (dpr budget set-cap): when, from what, to what, why
    """CREATE TABLE IF NOT EXISTS ledger.cap_changes (
        budget VARCHAR NOT NULL, changed_at TIMESTAMPTZ NOT NULL,
        old_eps_cap HUGEINT NOT NULL, old_delta_cap HUGEINT NOT NULL,
        new_eps_cap HUGEINT NOT NULL, new_delta_cap HUGEINT NOT NULL,
        reason VARCHAR NOT NULL)""",
]


def unknown_dataset(dataset: str) -> str:
    """The refusal for a dataset the ledger has no budget for, saying how one is registered."""
    return (f"unknown dataset {dataset!r}: the ledger has no budget for it yet. A dataset's budget is registered, "
            "with the cap of its spec's budget section, by its first run: `dpr run SPEC` or an operator command "
            "with --spec SPEC (check the name: `dpr budget` lists every budget).")


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
                    f"the spec asks for {cap}. A cap never changes implicitly: set the spec's budget to the "
                    f"registered cap, or change the cap with {set_cap_hint(budget)}. Nothing was charged."
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
                raise LedgerError(unknown_dataset(req.dataset))
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
