"""The home remembers its ledger: a deleted, replaced or stale warehouse never resets the budget (DESIGN.md rule 11).

The ledger lives in the warehouse file. Were that file deleted, a new
warehouse would start every budget at zero and the data's earlier releases
would be forgotten: a privacy failure, not a fresh start. So the home keeps
three independent records of which ledger it uses and what was spent:

* the ledger's **id**, a random nonce created with the ledger
  (``ledger.meta``), public: it identifies no data;
* a **marker** file in the home, ``$DPR_HOME/ledger.json`` (0600), naming
  that id and, rewritten after every charge (:func:`_after_charge`), the
  ledger's count of charge, reservation and given-back rows (the count
  never goes down: :func:`ledger_progress`) and each budget's spent total;
* every **bundle's manifest** (``manifest.json``, section ``ledger``): the id,
  the budget charged, its cap and what it had spent in total when the bundle
  was written, in the ledger's exact integer units, and the public refs of
  the release's charges (``releases[].ref``).

:func:`open_home_warehouse` (every pipeline stage and ``dpr`` command opens
the home's warehouse through it) refuses, with :class:`LedgerMissingError`
and before anything is charged, to use a home whose records do not match its
warehouse:

* the warehouse file is missing but the marker or a bundle names a ledger;
* the warehouse's ledger is not the one the marker or a bundle names
  (a different or a new file was put in its place);
* a bundle made by this ledger lists a charge the ledger does not hold
  (an older backup was restored, and the releases since are forgotten);
* the ledger holds fewer rows than the marker recorded (an older copy,
  whatever the bundles say: one moved away or damaged cannot hide it);
* a bundle's manifest cannot be read (:class:`BundleUnreadableError`: what
  it published is unknown).

A warehouse of an older layout is upgraded first (:mod:`dpcore.budget.ledger_upgrade`).

The owner then restores the latest backup of the warehouse (docs/backups.md,
"What, when and how"), or says ``dpr budget recover --from-bundles``: :func:`recover_from_bundles`
rebuilds the spent totals from the manifests, never less than they say, as
one ``recovered`` charge per budget and earlier ledger, recorded in
``ledger.recoveries`` and listed by ``dpr budget``. The charges themselves
(their keys) are not in the bundles: a release id published before the
recovery is refused if run again (its bundle is never rewritten:
:mod:`dpcore.run.release_runs`), and record fingerprints (budget identity) come
back when each dataset is ingested again. The marker's spent totals are a
floor of the recovery, like the manifests'.

Only public facts are read or written here: ledger ids, budget names, caps
and totals that every manifest publishes, charge refs (random nonces).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

from .amounts import NOTION_ORDER, PrivacyCost, weakest_notion
from .ledger import CHARGE_LISTENERS, LedgerError, PrivacyLedger
from dpcore.storage.lineage import new_nonce
from dpcore.storage.private_files import public_mkdir, write_private_atomic
from dpcore.storage.settings import Settings
from .ledger_upgrade import upgrade
from dpcore.storage.warehouse import Warehouse

#: The marker file's name in the home.
MARKER = "ledger.json"
#: Ledger id standing for manifests written before ledgers had ids.
UNNAMED = "(unnamed)"
#: The ``step`` / ``mechanism`` / ``status`` of a recovered charge.
RECOVERY_STEP = "recovery"
RECOVERED = "recovered"

_DDL = [
    "CREATE TABLE IF NOT EXISTS ledger.meta (name VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)",
    """CREATE TABLE IF NOT EXISTS ledger.recoveries (
        recovered_at TIMESTAMPTZ NOT NULL, from_ledger VARCHAR NOT NULL, budget VARCHAR,
        eps_units HUGEINT NOT NULL, delta_units HUGEINT NOT NULL, manifests INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS ledger.recovered_refs (ref VARCHAR PRIMARY KEY, recovered_at TIMESTAMPTZ NOT NULL)",
]


class LedgerMissingError(LedgerError):
    """The home's marker or bundles name a ledger its warehouse does not hold (nothing was charged)."""


_ADVICE = ("restore warehouse.duckdb together with owner/owner.key from your latest backup (docs/backups.md, 'What, when and how'), "
           "or run `dpr budget recover --from-bundles` to rebuild the spent totals from the bundles' manifests")


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ---------------------------------------------------------------------------------------------------- ledger id
def ledger_id(wh: Warehouse) -> str:
    """The ledger's id (a random nonce made with the ledger; created here for a ledger that has none yet)."""

    def op(con):
        for stmt in _DDL:
            con.execute(stmt)
        con.execute("INSERT INTO ledger.meta VALUES ('ledger_id', ?) ON CONFLICT DO NOTHING", [new_nonce(8)])
        return con.execute("SELECT value FROM ledger.meta WHERE name = 'ledger_id'").fetchone()[0]

    return wh.run(op, transaction=True)


def known_ledgers(wh: Warehouse) -> set[str]:
    """This ledger's id and the ids of the earlier ledgers recovered into it."""
    own = ledger_id(wh)
    return {own, *(r[0] for r in wh.query("SELECT DISTINCT from_ledger FROM ledger.recoveries"))}


def manifest_section(ledger: PrivacyLedger, dataset: str) -> dict[str, Any]:
    """The manifest's ``ledger`` section: id, budget, cap and total spent in exact units (public)."""
    status = ledger.status(dataset)
    cap, spent = status.cap.units_floor, status.spent.units
    return {
        "id": ledger_id(ledger.wh),
        "budget": status.budget or dataset,
        "neighbour": status.neighbour,
        "cap_units": {"epsilon": str(cap[0]), "delta": str(cap[1])},
        "spent_total_units": {"epsilon": str(spent[0]), "delta": str(spent[1])},
        "units_per_one": "1e18",
        "weakest_notion": ledger.weakest_notion(dataset),
    }


def recoveries(wh: Warehouse) -> list[dict[str, Any]]:
    """Every recovery from bundles (``dpr budget``): when, from which ledger, which budget, how much."""
    ledger_id(wh)
    rows = wh.query("SELECT recovered_at, from_ledger, budget, eps_units, delta_units, manifests FROM ledger.recoveries "
                    "ORDER BY recovered_at, from_ledger, budget")
    return [{"recovered_at": t.isoformat(), "from_ledger": lid, "budget": b,
             "spent": PrivacyCost.from_units(int(e), int(d)), "manifests": int(n)} for t, lid, b, e, d, n in rows]


# ---------------------------------------------------------------------------------------------------- the marker
def marker_path(settings: Settings) -> Path:
    """``$DPR_HOME/ledger.json``."""
    return settings.home / MARKER


def read_marker(settings: Settings) -> str | None:
    """The ledger id the home's marker names (None without a marker; a damaged marker names ``(unreadable)``)."""
    state = read_marker_state(settings)
    if state is None:
        return None
    return str(state["ledger_id"]) if state.get("ledger_id") else "(unreadable)"


def read_marker_state(settings: Settings) -> dict[str, Any] | None:
    """The whole marker: ``ledger_id``, and since issue 47 ``count`` and ``spent_units`` (None without a marker).

    A marker that is not a JSON object gives ``{}`` (its ledger id reads as ``(unreadable)``).
    """
    try:
        data = json.loads(marker_path(settings).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def ledger_progress(wh: Warehouse) -> tuple[int, dict[str, list[str]]]:
    """How far the ledger has come: its count of charge, reservation and given-back rows, and each budget's
    spent total in exact units (public: every manifest states it).

    Charges and reservations are only ever added, except that a release stopped on a public fact gives back
    what it never drew (issue 48.1, :meth:`dpcore.budget.ledger.PrivacyLedger.give_back_unused`): that deletes a
    reservation line only after writing its ``ledger.given_back`` row in the same transaction, so the sum of
    the three counts never goes down.
    """
    def op(con):
        given = ("(SELECT count(*) FROM ledger.given_back)" if con.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'ledger' AND table_name = 'given_back'"
        ).fetchone() else "0")
        count = con.execute("SELECT (SELECT count(*) FROM ledger.charges) + "
                            f"(SELECT count(*) FROM ledger.reservations) + {given}").fetchone()[0]
        spent = {b: [str(int(e)), str(int(d))] for b, e, d in con.execute(
            "SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY dataset").fetchall()}
        return int(count), spent
    return wh.run(op)


def write_marker(settings: Settings, lid: str, wh: Warehouse | None = None) -> None:
    """Write the home's marker (0600, atomically) naming ledger ``lid``, with ``wh``'s progress when given.

    The progress (:func:`ledger_progress`) lets :func:`verify` refuse an older copy of the warehouse whatever
    the bundles say (issue 47 §2); it is written again after every charge (:func:`_after_charge`).
    """
    doc: dict[str, Any] = {"ledger_id": lid, "warehouse": str(settings.warehouse)}
    if wh is not None:
        count, spent = ledger_progress(wh)
        doc.update({"count": count, "spent_units": spent})
    doc["note"] = ("the id of this home's ledger, how many charge and reservation rows it held and each budget's "
                   "spent total (units of 1e-18); a warehouse holding another ledger, none, or fewer rows is refused "
                   "(docs/backups.md, 'What, when and how')")
    public_mkdir(settings.home)
    write_private_atomic(marker_path(settings), json.dumps(doc, indent=2) + "\n")


#: warehouse path -> (settings, ledger id) of the homes this process opened (:func:`open_home_warehouse`)
_HOMES: dict[str, tuple[Settings, str]] = {}


def _after_charge(wh: Warehouse) -> None:
    """After every committed charge on a home's warehouse: the marker records the ledger's new progress."""
    home = _HOMES.get(str(wh.path))
    if home is not None:
        try:
            write_marker(home[0], home[1], wh)
        except OSError:  # a full disk: the charge stands; a marker left behind refuses nothing, the next one catches up
            pass


if _after_charge not in CHARGE_LISTENERS:
    CHARGE_LISTENERS.append(_after_charge)


# ---------------------------------------------------------------------------------------------------- manifests
@dataclass(frozen=True)
class BundleRecord:
    """What one bundle's manifest says about the ledger that charged it (public facts only)."""

    path: Path
    ledger: str
    budget: str
    datasets: tuple[str, ...]
    neighbour: str
    cap: tuple[int, int]
    spent: tuple[int, int]
    refs: tuple[str, ...]
    weakest: str | None
    created_at: str
    separations: tuple[dict, ...] = field(default_factory=tuple)


def _units_up(x: Fraction) -> int:
    return math.ceil(x * 10**18)


def _record(path: Path, m: dict[str, Any]) -> BundleRecord:
    b, ident, led = m.get("budget") or {}, m.get("budget_identity") or {}, m.get("ledger")
    refs = tuple(str(r["ref"]) for r in m.get("releases", []) if isinstance(r, dict) and r.get("ref"))
    if isinstance(led, dict) and led.get("id"):
        cap = (int(led["cap_units"]["epsilon"]), int(led["cap_units"]["delta"]))
        spent = (int(led["spent_total_units"]["epsilon"]), int(led["spent_total_units"]["delta"]))
        lid, budget, weakest = str(led["id"]), str(led["budget"]), led.get("weakest_notion")
    else:  # written before ledgers had ids: the floats (rounded up), the exact epsilon where given
        exact = (b.get("exact") or {}).get("spent_total_epsilon")
        eps = Fraction(exact) if exact else Fraction(b["spent_total"]["epsilon"])
        spent = (_units_up(eps), _units_up(Fraction(b["spent_total"]["delta"])))
        cap = PrivacyCost(Fraction(str(b["cap"]["epsilon"])), Fraction(str(b["cap"]["delta"]))).units_floor
        lid, budget, weakest = UNNAMED, str(ident.get("budget") or m["dataset"]), m.get("weakest_notion_on_dataset")
    return BundleRecord(
        path=path, ledger=lid, budget=budget, datasets=tuple(ident.get("datasets_sharing_it") or [budget]),
        neighbour=str(b.get("neighbour") or "add-remove"), cap=cap, spent=spent, refs=refs,
        weakest=weakest if weakest in NOTION_ORDER else None, created_at=str(m.get("created_at", "")),
        separations=tuple(ident.get("separations") or ()),
    )


class BundleUnreadableError(LedgerMissingError):
    """A bundle's manifest cannot be read: what it published is unknown, so nothing is charged (issue 47 §2)."""


def scan_bundles(bundles: Path, *, strict: bool = True) -> list[BundleRecord]:
    """Every release and operator bundle's manifest under ``bundles`` (``<dataset>/<release>[/<sub>]/``).

    Folders whose name starts with a dot (a bundle being written: ``.<release>.tmp``) are not bundles; a
    manifest removed meanwhile is skipped.

    Raises
    ------
    BundleUnreadableError
        A manifest that cannot be read or is not a manifest of this pipeline (``strict``; otherwise it is
        skipped): a damaged manifest could hide what the ledger spent, so it is a refusal, not a skip.
    """
    found = []
    for pattern in ("*/*/manifest.json", "*/*/*/manifest.json"):
        for path in sorted(Path(bundles).glob(pattern)):
            if any(part.startswith(".") for part in path.relative_to(bundles).parts[:-1]):
                continue
            try:
                found.append(_record(path.parent, json.loads(path.read_text(encoding="utf-8"))))
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
                if strict:
                    raise BundleUnreadableError(
                        f"the bundle manifest {path} cannot be read ({type(exc).__name__}): it states what the "
                        "ledger had spent, so nothing was charged: restore it from your latest backup (docs/backups.md, "
                        f"'What, when and how'), or, if that folder is not a release bundle, move it out of {bundles}"
                    ) from None
    return found


# ---------------------------------------------------------------------------------------------------- the check
#: warehouse path -> the file (inode, device) and bundles folder verified by this process: the check runs once per
#: process and file (every stage opens the warehouse); a file replaced under the same inode while a process runs is
#: noticed by the next process (each ``dpr`` command and flow run)
_VERIFIED: dict[str, tuple[int, int, str]] = {}


def _stamp(settings: Settings) -> tuple[int, int, str]:
    st = os.stat(settings.warehouse)
    return st.st_ino, st.st_dev, str(settings.bundles)


def _refuse_missing(settings: Settings, marker: str | None, records: list[BundleRecord]) -> None:
    named = sorted({r.ledger for r in records} | ({marker} if marker else set()))
    where = []
    if marker:
        where.append(f"the marker {marker_path(settings)}")
    if records:
        where.append(f"{len(records)} bundle manifest(s) under {settings.bundles}")
    raise LedgerMissingError(
        f"the ledger of this home is missing: the warehouse {settings.warehouse} does not exist, but "
        f"{' and '.join(where)} name ledger {', '.join(named)}; a new ledger would start the privacy budget again "
        f"from zero, so nothing was charged: {_ADVICE}"
    )


def verify(settings: Settings, wh: Warehouse) -> str:
    """Check the home's marker and bundles against the ledger in ``wh``; returns the ledger's id.

    Raises
    ------
    LedgerMissingError
        The marker or a bundle names another ledger, or a bundle of this
        ledger lists a charge it does not hold (a stale backup).
    """
    PrivacyLedger(wh)  # its tables, for a warehouse that has none yet
    own = ledger_id(wh)
    known = known_ledgers(wh)
    marker = read_marker(settings)
    records = scan_bundles(settings.bundles)
    foreign = sorted({r.ledger for r in records if r.ledger != UNNAMED} - known)
    if marker is not None and marker not in known:
        foreign = sorted(set(foreign) | {marker})
    if foreign:
        raise LedgerMissingError(
            f"the warehouse {settings.warehouse} holds ledger {own}, but this home's marker or bundles name ledger "
            f"{', '.join(foreign)}: the warehouse was replaced and its budget would start again, so nothing was "
            f"charged: {_ADVICE}"
        )
    mine = [r for r in records if r.ledger in (own, UNNAMED) and r.refs]
    if mine:
        refs = sorted({ref for r in mine for ref in r.refs})
        held = {row[0] for row in wh.query(
            "SELECT public_ref FROM ledger.charges WHERE public_ref IN (SELECT unnest(?::VARCHAR[])) UNION "
            "SELECT ref FROM ledger.recovered_refs WHERE ref IN (SELECT unnest(?::VARCHAR[]))", [refs, refs])}
        stale = [r for r in mine if not set(r.refs) <= held]
        if stale:
            raise LedgerMissingError(
                f"the warehouse {settings.warehouse} misses charges that {len(stale)} bundle(s) published (e.g. "
                f"{stale[-1].path}): it is an older copy (restored from an earlier backup?) and would spend those "
                f"charges again, so nothing was charged: restore your latest backup of warehouse.duckdb, or run "
                "`dpr budget recover --from-bundles` to raise the spent totals to what the bundles say"
            )
    state = read_marker_state(settings) or {}
    if state.get("ledger_id") == own and isinstance(state.get("count"), int):
        count = ledger_progress(wh)[0]
        if count < state["count"]:
            raise LedgerMissingError(
                f"the warehouse {settings.warehouse} is behind this home's marker {marker_path(settings)}: its "
                f"ledger {own} holds {count} charge, reservation and given-back rows, the marker recorded {state['count']}; it "
                "is an older copy (restored from an earlier backup?) and would spend those charges again, so "
                "nothing was charged: restore your latest backup of warehouse.duckdb, or run "
                "`dpr budget recover --from-bundles` to raise the spent totals to what the bundles and the marker say"
            )
    return own


def open_home_warehouse(settings: Settings, *, create: bool = True) -> Warehouse | None:
    """The home's warehouse, checked against the home's marker and bundles (:func:`verify`).

    Parameters
    ----------
    settings : Settings
    create : bool
        Create the warehouse (and a new ledger) when there is none and nothing
        names one; False returns None instead.

    Returns
    -------
    Warehouse or None

    Raises
    ------
    LedgerMissingError
        The warehouse is missing, replaced or stale (see the module docstring); nothing was created.
    WarehouseCorruptError
        The file is not a readable DuckDB database.
    """
    path = settings.warehouse
    if not path.exists():
        marker, records = read_marker(settings), scan_bundles(settings.bundles)
        if marker is not None or records:
            _refuse_missing(settings, marker, records)
        if not create:
            return None
    wh = Warehouse(path)
    stamp = _stamp(settings)
    if _VERIFIED.get(str(path)) != stamp or not marker_path(settings).exists():
        upgrade(wh, settings.bundles)  # an older layout: migrated in one transaction, or refused (issue 47 §1)
        own = verify(settings, wh)
        state = read_marker_state(settings) or {}
        if state.get("ledger_id") != own or "count" not in state:
            write_marker(settings, own, wh)
        _VERIFIED[str(path)] = stamp
        _HOMES[str(wh.path)] = (settings, own)
    return wh


# ---------------------------------------------------------------------------------------------------- recovery
@dataclass(frozen=True)
class Recovered:
    """One budget's recovery: from which earlier ledger, how much was added, from how many manifests."""

    from_ledger: str
    budget: str
    added: PrivacyCost
    manifests: int


def recover_from_bundles(settings: Settings) -> tuple[str, list[Recovered]]:
    """Rebuild the spent totals of the home's ledger from its bundles' manifests (``dpr budget recover``).

    For each earlier ledger the bundles name (a lost warehouse), every budget
    gets at least the largest total spent any of that ledger's manifests
    states, added to what this ledger holds (this ledger started from zero);
    for this ledger's own bundles (an older backup restored), each budget is
    raised to the largest total its manifests state. A missing budget is
    registered with the manifests' cap and neighbour relation, and the
    datasets sharing it and the owner's separations are linked again. Each
    addition is one charge of status ``recovered`` (step ``recovery``; notion:
    the weakest the manifests name), so every sum of charges stays equal to
    the spent total, and a row of ``ledger.recoveries``. Never lowers a
    total; running it again adds nothing.

    Returns
    -------
    (str, list of Recovered)
        This ledger's id and what was added (empty when nothing was missing).

    Raises
    ------
    WarehouseCorruptError
        The warehouse file is not a readable DuckDB database (move it aside first).
    """
    wh = Warehouse(settings.warehouse)
    upgrade(wh, settings.bundles)  # an older layout first (issue 47 §1)
    ledger = PrivacyLedger(wh)
    own = ledger_id(wh)
    known = known_ledgers(wh)
    records = scan_bundles(settings.bundles)
    marker = read_marker(settings)
    present = {r[0] for r in wh.query("SELECT public_ref FROM ledger.charges")}
    groups: dict[str, list[BundleRecord]] = {}
    for r in records:
        groups.setdefault(r.ledger, []).append(r)
    if UNNAMED in groups and any(ref in present for r in groups[UNNAMED] for ref in r.refs):
        groups[own] = groups.get(own, []) + groups.pop(UNNAMED)  # manifests of this ledger before it had an id
    if marker is not None and marker not in known and marker not in groups and marker != "(unreadable)":
        groups[marker] = []  # the marker's ledger left no bundle: nothing to rebuild, acknowledged
    _marker_floor(settings, wh, records, groups)
    done: list[Recovered] = []

    def op(con):
        now = _now()
        for lid, recs in sorted(groups.items()):
            if lid in known and lid != own:
                continue  # recovered before
            by_budget: dict[str, list[BundleRecord]] = {}
            for r in recs:
                by_budget.setdefault(r.budget, []).append(r)
            for budget, rs in sorted(by_budget.items()):
                latest = max(rs, key=lambda r: r.created_at)
                target = (max(r.spent[0] for r in rs), max(r.spent[1] for r in rs))
                row = con.execute("SELECT eps_spent, delta_spent FROM ledger.budgets WHERE dataset = ?",
                                  [budget]).fetchone()
                if row is None:
                    con.execute(
                        "INSERT INTO ledger.budgets (dataset, eps_cap, delta_cap, eps_spent, delta_spent, created_at, "
                        "neighbour) VALUES (?, ?, ?, 0, 0, ?, ?)",
                        [budget, latest.cap[0], latest.cap[1], now, latest.neighbour])
                    row = (0, 0)
                if lid == own:  # a stale copy of this ledger: raise to what its own bundles say
                    add = (max(0, target[0] - int(row[0])), max(0, target[1] - int(row[1])))
                else:  # an earlier ledger: this one started from zero
                    add = target
                _link(con, budget, rs, now)
                if lid == own and add == (0, 0):
                    continue
                if add != (0, 0):
                    notion = weakest_notion({r.weakest for r in rs if r.weakest}) or "dp"
                    con.execute(
                        "UPDATE ledger.budgets SET eps_spent = eps_spent + ?, delta_spent = delta_spent + ? "
                        "WHERE dataset = ?", [add[0], add[1], budget])
                    con.execute(
                        "INSERT INTO ledger.charges (key, dataset, release_id, step, mechanism, notion, neighbour, "
                        "eps_units, delta_units, status, publishable, flow_run_id, params, reserved_at, finished_at, "
                        "stated_eps_units, stated_delta_units, public_ref) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, true, NULL, ?, ?, ?, ?, ?, ?)",
                        [f"recovery:{new_nonce(8)}", budget, f"recovered-from-{lid}", RECOVERY_STEP,
                         "recovered-from-bundles", notion, latest.neighbour, add[0], add[1], RECOVERED,
                         json.dumps({"from_ledger": lid, "manifests": _manifests(rs)}), now, now, add[0], add[1],
                         new_nonce(8)])
                con.execute("INSERT INTO ledger.recoveries VALUES (?, ?, ?, ?, ?, ?)",
                            [now, lid, budget, add[0], add[1], _manifests(rs)])
                done.append(Recovered(lid, budget, PrivacyCost.from_units(*add), _manifests(rs)))
            if not by_budget:
                con.execute("INSERT INTO ledger.recoveries VALUES (?, ?, NULL, 0, 0, 0)", [now, lid])
                done.append(Recovered(lid, "", PrivacyCost(0), 0))
            refs = sorted({ref for r in recs for ref in r.refs} - present)
            if refs:
                con.execute("INSERT INTO ledger.recovered_refs SELECT unnest(?::VARCHAR[]), ? ON CONFLICT DO NOTHING",
                            [refs, now])

    wh.run(op, transaction=True)
    write_marker(settings, own, wh)  # the owner's explicit way out: the marker follows the recovered ledger
    _HOMES[str(wh.path)] = (settings, own)
    _VERIFIED.pop(str(settings.warehouse), None)
    return own, [d for d in done if d.from_ledger != own or d.added != PrivacyCost(0)]


def _manifests(records: list[BundleRecord]) -> int:
    """How many of ``records`` are bundle manifests (not the marker's statement, :func:`_marker_floor`)."""
    return sum(1 for r in records if r.path.name != MARKER)


def _marker_floor(settings: Settings, wh: Warehouse, records: list[BundleRecord],
                  groups: dict[str, list[BundleRecord]]) -> None:
    """The marker's spent totals as one more statement of its ledger (issue 47 §2): a recovery never goes below
    what the marker recorded, even when a bundle's folder was moved away or its manifest had to be set aside."""
    state = read_marker_state(settings) or {}
    lid, spent = state.get("ledger_id"), state.get("spent_units")
    if not lid or not isinstance(spent, dict):
        return
    rows = {b: ((int(ec), int(dc)), nb) for b, ec, dc, nb in
            wh.query("SELECT dataset, eps_cap, delta_cap, neighbour FROM ledger.budgets")}
    caps = {r.budget: (r.cap, r.neighbour) for r in records}
    for budget, units in sorted(spent.items()):
        cap_nb = rows.get(budget) or caps.get(budget)
        try:
            units = (int(units[0]), int(units[1]))
        except (TypeError, ValueError, IndexError):
            continue
        if cap_nb is not None:
            groups.setdefault(lid, []).append(BundleRecord(
                path=marker_path(settings), ledger=lid, budget=budget, datasets=(budget,), neighbour=cap_nb[1],
                cap=cap_nb[0], spent=units, refs=(), weakest=None, created_at=""))


def _link(con, budget: str, records: list[BundleRecord], now: datetime) -> None:
    """The datasets sharing ``budget`` and the owner's separations, as the manifests state them."""
    for r in records:
        for name in r.datasets:
            if name != budget and not con.execute(
                    "SELECT 1 FROM ledger.dataset_budgets WHERE dataset = ?", [name]).fetchone():
                con.execute("INSERT INTO ledger.dataset_budgets VALUES (?, ?, ?)", [name, budget, now])
        for sep in r.separations:
            try:
                d, o, reason = str(sep["dataset"]), str(sep["separate_from"]), str(sep["reason"])
            except (KeyError, TypeError):
                continue
            if not con.execute("SELECT 1 FROM ledger.separations WHERE dataset = ? AND other = ?", [d, o]).fetchone():
                con.execute("INSERT INTO ledger.separations VALUES (?, ?, ?, ?)", [d, o, reason, now])
