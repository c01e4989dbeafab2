"""Privacy ledger: reservation, refusal over the cap, idempotent re-release,
orphaned charges, exact arithmetic, and a multi-process race on one DuckDB file."""
from __future__ import annotations

import multiprocessing as mp
from fractions import Fraction

import pytest

from dpcore.budget import BudgetExceededError, PrivacyCost
from dpcore.ledger import ChargeRequest, LedgerError, OrphanedChargeError, PrivacyLedger
from dpcore.warehouse import Warehouse


def _req(step="s", eps=0.1, delta=0, release="r1", params=None, dataset="ds"):
    return ChargeRequest(
        dataset=dataset, dataset_hash="h", release_id=release, step=step, mechanism="m",
        cost=PrivacyCost(eps, delta), notion="dp", params=params or {},
    )


@pytest.fixture
def ledger(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("ds", PrivacyCost(1, Fraction(1, 10**5)))
    return led


def test_exact_arithmetic_no_float_drift(ledger):
    for i in range(10):
        ledger.reserve(_req(step=f"s{i}", eps=0.1))
    st = ledger.status("ds")
    assert st.spent.epsilon == Fraction(1)  # 10 x 0.1 is exactly 1, not 0.9999999999999999
    assert st.remaining.epsilon == 0
    assert ledger.spent_exact("ds") == st.spent
    with pytest.raises(BudgetExceededError):
        ledger.reserve(_req(step="one-more", eps=1e-18))


def test_refusal_over_cap_reports_requested_and_remaining_and_changes_nothing(ledger):
    ledger.reserve(_req(step="a", eps=0.7))
    before = ledger.charges("ds")
    with pytest.raises(BudgetExceededError) as err:
        ledger.reserve(_req(step="b", eps=0.5))
    msg = str(err.value)
    assert "requested (epsilon=0.5" in msg and "remaining (epsilon=0.3" in msg
    assert err.value.remaining.epsilon == Fraction(3, 10)
    after = ledger.charges("ds")
    assert len(after) == len(before) == 1
    assert ledger.status("ds").spent.epsilon == Fraction(7, 10)


def test_delta_cap_is_enforced(ledger):
    with pytest.raises(BudgetExceededError):
        ledger.reserve(_req(step="d", eps=0.1, delta=2e-5))


def test_release_once_is_idempotent_and_draws_once(ledger):
    calls = []

    def compute():
        calls.append(1)
        return {"noisy": 41 + len(calls)}

    first = ledger.release_once(_req(step="count"), compute)
    second = ledger.release_once(_req(step="count"), compute)
    assert not first.reused and second.reused
    assert first.payload == second.payload == {"noisy": 42}
    assert len(calls) == 1
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)
    # a new release id is a new release: charged again
    third = ledger.release_once(_req(step="count", release="r2"), compute)
    assert not third.reused and len(calls) == 2
    assert ledger.status("ds").spent.epsilon == Fraction(2, 10)
    # different parameters = different key
    assert _req(params={"k": 1}).key != _req(params={"k": 2}).key


def test_failed_compute_keeps_charge_and_is_never_redrawn(ledger):
    def boom():
        raise ZeroDivisionError("inside mechanism")

    with pytest.raises(ZeroDivisionError):
        ledger.release_once(_req(step="x"), boom)
    ch = ledger.charges("ds")
    assert list(ch["status"]) == ["failed"]
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)
    with pytest.raises(OrphanedChargeError, match="new release id"):
        ledger.release_once(_req(step="x"), lambda: {"v": 1})
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)


def test_reserved_without_result_is_orphaned(ledger):
    assert ledger.reserve(_req(step="crash")) is True
    assert ledger.reserve(_req(step="crash")) is False  # same key: no second charge
    with pytest.raises(OrphanedChargeError):
        ledger.lookup(_req(step="crash").key)


def test_unknown_dataset_and_conflicting_cap(ledger):
    with pytest.raises(LedgerError, match="unknown dataset"):
        ledger.reserve(_req(dataset="nope"))
    with pytest.raises(LedgerError, match="set_cap"):
        ledger.ensure_budget("ds", PrivacyCost(2, 0))
    ledger.ensure_budget("ds", PrivacyCost(1, Fraction(1, 10**5)))  # same cap: fine
    ledger.reserve(_req(step="a", eps=0.5))
    with pytest.raises(LedgerError, match="below what"):
        ledger.set_cap("ds", PrivacyCost(0.4, 0))
    assert ledger.set_cap("ds", PrivacyCost(2, Fraction(1, 10**5))).remaining.epsilon == Fraction(3, 2)


def test_bad_request_parameters():
    with pytest.raises(ValueError, match="notion"):
        ChargeRequest("d", "h", "r", "s", "m", PrivacyCost(1), notion="xdp")
    with pytest.raises(ValueError, match=">= 0"):
        PrivacyCost(-1)
    with pytest.raises(ValueError, match="finite"):
        PrivacyCost(float("nan"))


# --------------------------------------------------------------- multi-process
N_PROCS, N_EACH, STEP_EPS, CAP = 4, 60, Fraction(1, 100), Fraction(3, 2)


def _worker(path: str, wid: int, out: "mp.Queue") -> None:
    from dpcore.ledger import PrivacyLedger
    from dpcore.warehouse import Warehouse

    granted = refused = 0
    errors: list[str] = []
    try:
        led = PrivacyLedger(Warehouse(path, timeout=120))
        for i in range(N_EACH):
            try:
                res = led.release_once(_req(step=f"w{wid}-{i}", eps=STEP_EPS), lambda: {"w": wid, "i": i})
                granted += not res.reused
            except BudgetExceededError:
                refused += 1
    except Exception as exc:  # reported to the parent: any crash fails the test
        errors.append(f"{type(exc).__name__}: {exc}")
    out.put((wid, granted, refused, errors))


def test_multiprocess_reservations_never_overspend_or_crash(tmp_path):
    path = str(tmp_path / "race.duckdb")
    led = PrivacyLedger(Warehouse(path))
    led.ensure_budget("ds", PrivacyCost(CAP, 0))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(path, w, q)) for w in range(N_PROCS)]
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    errors = [e for r in results for e in r[3]]
    assert errors == []
    granted = sum(r[1] for r in results)
    refused = sum(r[2] for r in results)
    assert granted + refused == N_PROCS * N_EACH
    assert granted == CAP / STEP_EPS  # exactly the cap is granted, never more
    led2 = PrivacyLedger(Warehouse(path))
    assert led2.spent_exact("ds").epsilon == CAP == led2.status("ds").spent.epsilon
    ch = led2.charges("ds")
    assert len(ch) == granted and set(ch["status"]) == {"released"}
    n_out = led2.wh.query("SELECT count(*) FROM releases.outputs")[0][0]
    assert n_out == granted  # every charge has its stored release
