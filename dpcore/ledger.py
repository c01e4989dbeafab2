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
from typing import Any, Callable, Literal

import pandas as pd

from .budget import NOTION_ORDER, BudgetExceededError, PrivacyCost, weakest_notion
from .warehouse import Warehouse

Neighbour = Literal["add-remove", "replace-one"]


class LedgerError(RuntimeError):
    """The ledger refused an operation (unknown dataset, conflicting cap, ...)."""


class OrphanedChargeError(LedgerError):
    """A key was charged but its result was never stored; it will not be re-drawn."""


_DDL = [
    """CREATE TABLE IF NOT EXISTS ledger.budgets (
        dataset VARCHAR PRIMARY KEY,
        eps_cap HUGEINT NOT NULL, delta_cap HUGEINT NOT NULL,
        eps_spent HUGEINT NOT NULL DEFAULT 0, delta_spent HUGEINT NOT NULL DEFAULT 0,
        created_at TIMESTAMPTZ NOT NULL)""",
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
        error VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS releases.outputs (
        key VARCHAR PRIMARY KEY,
        dataset VARCHAR NOT NULL,
        release_id VARCHAR NOT NULL,
        step VARCHAR NOT NULL,
        payload VARCHAR NOT NULL,
        stored_at TIMESTAMPTZ NOT NULL)""",
]


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
        if self.neighbour not in ("add-remove", "replace-one"):
            raise ValueError(f"neighbour must be 'add-remove' or 'replace-one', got {self.neighbour!r}")

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
    """Cap, spent and remaining budget of a dataset."""

    dataset: str
    cap: PrivacyCost
    spent: PrivacyCost

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
    def ensure_budget(self, dataset: str, cap: PrivacyCost) -> BudgetStatus:
        """Register ``dataset`` with ``cap`` (idempotent for the same cap).

        Raises
        ------
        LedgerError
            The dataset is already registered with a different cap; changing a
            cap is a deliberate act (:meth:`set_cap`).
        """
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            row = con.execute("SELECT eps_cap, delta_cap FROM ledger.budgets WHERE dataset = ?", [dataset]).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO ledger.budgets VALUES (?, ?, ?, 0, 0, ?)", [dataset, eps_cap, delta_cap, _now()]
                )
            elif (int(row[0]), int(row[1])) != (eps_cap, delta_cap):
                raise LedgerError(
                    f"dataset {dataset!r} is registered with cap {PrivacyCost.from_units(row[0], row[1])}, "
                    f"the spec asks for {cap}. A cap changes only through PrivacyLedger.set_cap "
                    "(a decision of the data owner), never implicitly."
                )

        self.wh.run(op, transaction=True)
        return self.status(dataset)

    def set_cap(self, dataset: str, cap: PrivacyCost) -> BudgetStatus:
        """Change a dataset's cap (it may not go below what is already spent)."""
        eps_cap, delta_cap = cap.units_floor

        def op(con):
            row = con.execute("SELECT eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?", [dataset]).fetchone()
            if row is None:
                raise LedgerError(f"unknown dataset {dataset!r}: register it with ensure_budget first")
            if eps_cap < row[0] or delta_cap < row[1]:
                raise LedgerError(
                    f"new cap {cap} is below what dataset {dataset!r} already spent "
                    f"{PrivacyCost.from_units(row[0], row[1])}"
                )
            con.execute(
                "UPDATE ledger.budgets SET eps_cap = ?, delta_cap = ? WHERE dataset = ?", [eps_cap, delta_cap, dataset]
            )

        self.wh.run(op, transaction=True)
        return self.status(dataset)

    def status(self, dataset: str) -> BudgetStatus:
        """Current cap and spending of ``dataset``."""
        rows = self.wh.query(
            "SELECT eps_cap, delta_cap, eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?", [dataset]
        )
        if not rows:
            raise LedgerError(f"unknown dataset {dataset!r}: register it with ensure_budget first")
        ec, dc, es, ds = rows[0]
        return BudgetStatus(dataset, PrivacyCost.from_units(ec, dc), PrivacyCost.from_units(es, ds))

    # ------------------------------------------------------------------ charges
    def reserve(self, req: ChargeRequest) -> bool:
        """Charge ``req.cost`` atomically; return False if the key was already charged.

        Raises
        ------
        BudgetExceededError
            The charge would exceed the cap; nothing is recorded.
        LedgerError
            The dataset has no registered budget.
        """
        key = req.key
        eps_u, delta_u = req.cost.units

        def op(con):
            if con.execute("SELECT 1 FROM ledger.charges WHERE key = ?", [key]).fetchone():
                return False
            row = con.execute(
                "SELECT eps_cap, delta_cap, eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?",
                [req.dataset],
            ).fetchone()
            if row is None:
                raise LedgerError(f"unknown dataset {req.dataset!r}: register it with ensure_budget first")
            ec, dc, es, ds = (int(v) for v in row)
            if es + eps_u > ec or ds + delta_u > dc:
                raise BudgetExceededError(
                    req.dataset, req.cost, PrivacyCost.from_units(es, ds), PrivacyCost.from_units(ec, dc)
                )
            con.execute(
                "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? WHERE dataset = ?",
                [eps_u, delta_u, req.dataset],
            )
            con.execute(
                "INSERT INTO ledger.charges VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, NULL, NULL)",
                [
                    key, req.dataset, req.release_id, req.step, req.mechanism, req.notion, req.neighbour,
                    eps_u, delta_u, req.publishable, req.flow_run_id,
                    json.dumps(req.params, sort_keys=True, default=str), _now(),
                ],
            )
            return True

        return self.wh.run(op, transaction=True)

    def _charge_state(self, key: str) -> tuple[str, str | None] | None:
        rows = self.wh.query(
            "SELECT c.status, o.payload FROM ledger.charges c LEFT JOIN releases.outputs o USING (key) WHERE c.key = ?",
            [key],
        )
        return (rows[0][0], rows[0][1]) if rows else None

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
        status, payload = state
        if status == "released" and payload is not None:
            return Release(key, json.loads(payload), reused=True)
        raise OrphanedChargeError(
            f"charge {key[:12]}… has status {status!r}: its budget is spent but no result was stored "
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
        """All charges (optionally of one dataset) with epsilon/delta as floats for display."""
        where, params = ("WHERE dataset = ?", [dataset]) if dataset else ("", [])
        df = self.wh.query_df(
            f"SELECT key, dataset, release_id, step, mechanism, notion, neighbour, eps_units, delta_units, "
            f"status, publishable, flow_run_id, params, reserved_at, finished_at FROM ledger.charges {where} "
            "ORDER BY reserved_at, key",
            params,
        )
        df["epsilon"] = [float(PrivacyCost.from_units(int(e), 0).epsilon) for e in df["eps_units"]]
        df["delta"] = [float(PrivacyCost.from_units(0, int(d)).delta) for d in df["delta_units"]]
        return df

    def spent_exact(self, dataset: str) -> PrivacyCost:
        """Sum of all charges of ``dataset`` recomputed from the charge rows (audit)."""
        rows = self.wh.query(
            "SELECT coalesce(sum(eps_units), 0), coalesce(sum(delta_units), 0) FROM ledger.charges WHERE dataset = ?",
            [dataset],
        )
        return PrivacyCost.from_units(int(rows[0][0]), int(rows[0][1]))

    def weakest_notion(self, dataset: str) -> str | None:
        """Weakest privacy notion among the dataset's charges (rule 4)."""
        rows = self.wh.query("SELECT DISTINCT notion FROM ledger.charges WHERE dataset = ?", [dataset])
        return weakest_notion({r[0] for r in rows})
