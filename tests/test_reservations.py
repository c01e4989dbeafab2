"""Release reservations (issue 33 §1, DESIGN.md rule 10): a run reserves its whole plan at once or nothing,
its charges draw from the reservation, and concurrent runs never spend each other's budget."""
from __future__ import annotations

import multiprocessing as mp
from fractions import Fraction

import pytest

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.budget.charge_keys import line_key
from dpcore.budget.ledger import ChargeRequest, LineRequest, PlanMismatchError, PrivacyLedger
from dpcore.storage.warehouse import Warehouse

STEPS = ("record_counts", "aiq", "pcor")


def _lines(dataset: str, release: str, eps=Fraction(1, 10), counts=(1, 1, 2)) -> list[LineRequest]:
    return [LineRequest(line_key(dataset, release, s, {"v": 1}), s, "m", "dp", {"v": 1}, n, PrivacyCost(eps))
            for s, n in zip(STEPS, counts)]


def _charge(dataset: str, release: str, step: str, i: int = 0, eps=Fraction(1, 10)) -> ChargeRequest:
    return ChargeRequest(dataset=dataset, release_id=release, step=step, mechanism="m", cost=PrivacyCost(eps),
                         notion="dp", params={"v": 1, "target": i})


@pytest.fixture
def ledger(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("ds", PrivacyCost(1))
    return led


def test_a_run_reserves_its_whole_plan_at_once_and_its_charges_add_nothing(ledger):
    res = ledger.reserve_lines("ds", "r1", _lines("ds", "r1"))
    assert res.new == PrivacyCost(Fraction(4, 10)) and res.held_before == PrivacyCost(0)
    assert ledger.status("ds").spent == PrivacyCost(Fraction(4, 10))
    for step, n in zip(STEPS, (1, 1, 2)):
        for i in range(n):
            ledger.release_once(_charge("ds", "r1", step, i), lambda: {"x": 1})
    assert ledger.status("ds").spent == PrivacyCost(Fraction(4, 10)) == ledger.spent_exact("ds")
    assert ledger.release_holds("ds", "r1") == (PrivacyCost(Fraction(4, 10)), list(STEPS))
    # the same lines again (a re-run, a resumed run): nothing new is reserved
    again = ledger.reserve_lines("ds", "r1", _lines("ds", "r1"))
    assert again.new == PrivacyCost(0) and again.held_before == PrivacyCost(Fraction(4, 10))
    assert ledger.status("ds").spent == PrivacyCost(Fraction(4, 10))


def test_an_upper_bound_line_stays_spent_whole_so_the_spend_never_depends_on_the_data(ledger):
    ledger.reserve_lines("ds", "r1", _lines("ds", "r1", counts=(1, 1, 5)))
    ledger.release_once(_charge("ds", "r1", "pcor"), lambda: {"x": 1})  # the data gave one target of five
    assert ledger.status("ds").spent == PrivacyCost(Fraction(7, 10)) == ledger.spent_exact("ds")


def test_a_run_over_the_cap_reserves_nothing_and_says_what_its_release_holds(ledger):
    ledger.reserve_lines("ds", "r1", _lines("ds", "r1"))
    before = ledger.status("ds").spent
    bigger = _lines("ds", "r1") + [LineRequest(line_key("ds", "r1", "coco", {}), "coco", "m", "dp", {}, 7,
                                               PrivacyCost(Fraction(1, 10)))]
    with pytest.raises(BudgetExceededError) as err:
        ledger.reserve_lines("ds", "r1", bigger)
    msg = str(err.value)
    assert "requested (epsilon=0.7" in msg and "for the whole run" in msg and "Nothing was charged by this run" in msg
    assert "Release 'r1' already holds (epsilon=0.4" in msg and "set-cap ds" in msg
    assert ledger.status("ds").spent == before
    assert set(ledger.reserved_counts("ds", "r1")) == {ln.line_key for ln in _lines("ds", "r1")}


def test_a_charge_outside_the_reserved_lines_is_refused_as_a_bug_and_records_nothing(ledger):
    ledger.reserve_lines("ds", "r1", _lines("ds", "r1"))
    with pytest.raises(PlanMismatchError, match="cost plan and the step disagree"):
        ledger.reserve(_charge("ds", "r1", "coco"))  # no line for the step
    ledger.reserve(_charge("ds", "r1", "aiq", 0))
    with pytest.raises(PlanMismatchError):
        ledger.reserve(_charge("ds", "r1", "aiq", 1))  # the line's one charge is used
    with pytest.raises(PlanMismatchError):
        ledger.reserve(_charge("ds", "r1", "pcor", 0, eps=Fraction(2, 10)))  # not the reserved amount
    assert len(ledger.charges("ds")) == 1 and ledger.status("ds").spent == PrivacyCost(Fraction(4, 10))


# --------------------------------------------------------------------------------------------- processes
_OPEN: dict[str, PrivacyLedger] = {}  # per pool process: the ledger of each warehouse file, opened once


def _run_release(path: str, ds: str, release: str, barrier) -> tuple[str, str, str]:
    """One release in its own process: reserve the plan, then charge, compute and store every line."""
    from dpcore.budget.amounts import BudgetExceededError

    led = _OPEN.get(path) or _OPEN.setdefault(path, PrivacyLedger(Warehouse(path, timeout=120)))
    barrier.wait(timeout=120)
    try:
        led.reserve_lines(ds, release, _lines(ds, release))
    except BudgetExceededError as exc:
        return release, "refused", str(exc)
    for step, n in zip(STEPS, (1, 1, 2)):
        for i in range(n):
            led.release_once(_charge(ds, release, step, i), lambda: {"release": release})
    return release, "published", ""


@pytest.fixture(scope="module")
def pool():
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(8) as p:
        yield p, manager


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_n_concurrent_releases_against_a_cap_for_k_exactly_k_publish_and_the_rest_charge_nothing(tmp_path, pool, n):
    p, manager = pool
    each = Fraction(4, 10)  # every release plans 0.1 + 0.1 + 2 x 0.1
    path = str(tmp_path / "w.duckdb")  # one file, a fresh budget (dataset) per round
    led = PrivacyLedger(Warehouse(path))
    for k in range(n + 1):
        for attempt in range(2 if n == 8 else 1):  # repeated where the race is widest
            ds = f"ds-{k}-{attempt}"
            led.ensure_budget(ds, PrivacyCost(each * k))
            barrier = manager.Barrier(n)
            results = p.starmap(_run_release, [(path, ds, f"r{i}", barrier) for i in range(n)])
            published = sorted(r for r, what, _ in results if what == "published")
            refused = [(r, msg) for r, what, msg in results if what == "refused"]
            assert len(published) == k and len(refused) == n - k, (n, k, results)
            for r, msg in refused:
                assert "Nothing was charged by this run" in msg and f"Release {r!r} holds nothing" in msg
            charges = led.charges(ds)
            assert sorted(set(charges["release_id"])) == published  # the refused charged exactly nothing
            assert len(charges) == 4 * k and set(charges["status"]) <= {"released"}
            assert led.status(ds).spent == PrivacyCost(each * k) == led.spent_exact(ds)
            for r in published:
                assert led.release_holds(ds, r)[0] == PrivacyCost(each)
