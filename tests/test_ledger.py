"""Privacy ledger: reservation, refusal over the cap, idempotent re-release,
orphaned charges, exact arithmetic, and a multi-process race on one DuckDB file."""
from __future__ import annotations

import math
import multiprocessing as mp
from fractions import Fraction

import numpy as np
import pytest

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.budget.ledger import ChargeRequest, LedgerError, LineRequest, PlanMismatchError, PrivacyLedger
from dpcore.storage.warehouse import Warehouse


def _req(step="s", eps=0.1, delta=0, release="r1", params=None, dataset="ds"):
    return ChargeRequest(
        dataset=dataset, release_id=release, step=step, mechanism="m",
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
    # the refusal says what this release (r1) charged before it, not "nothing was charged" (issue 20)
    assert "Release 'r1' already holds (epsilon=0.7" in msg and "(steps a)" in msg
    assert "This charge was not made" in msg and "set-cap ds" in msg
    assert err.value.release == ("r1", PrivacyCost(Fraction(7, 10), 0), ["a"])


def test_refusal_of_a_release_that_charged_nothing_says_so(ledger):
    ledger.reserve(_req(step="a", eps=0.7, release="r1"))
    with pytest.raises(BudgetExceededError) as err:
        ledger.reserve(_req(step="b", eps=0.5, release="r2"))
    assert "This charge was not made and nothing was released for it. Release 'r2' holds nothing in the ledger." \
        in str(err.value)
    assert err.value.release == ("r2", PrivacyCost(0, 0), [])


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


def test_failed_compute_keeps_its_charge_and_a_rerun_computes_it_within_that_charge(ledger):
    def boom():
        raise ZeroDivisionError("inside mechanism")

    with pytest.raises(ZeroDivisionError):
        ledger.release_once(_req(step="x"), boom)
    ch = ledger.charges("ds")
    assert list(ch["status"]) == ["failed"]
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)
    # the failed answer was never stored, so never revealed: the re-run computes it, charging nothing more
    again = ledger.release_once(_req(step="x"), lambda: {"v": 1})
    assert again.payload == {"v": 1} and not again.reused
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)
    assert list(ledger.charges("ds")["status"]) == ["released"]
    # and from then on the stored answer comes back, whatever a new compute would say
    assert ledger.release_once(_req(step="x"), lambda: {"v": 2}).payload == {"v": 1}


def test_charged_without_result_is_computed_again_once_and_the_first_stored_answer_wins(ledger):
    assert ledger.reserve(_req(step="crash")) is True
    assert ledger.reserve(_req(step="crash")) is False  # same key: no second charge
    assert ledger.lookup(_req(step="crash").key) is None and ledger.is_charged(_req(step="crash").key)
    # two runs compute the orphan at once: the first store wins, the second answer is discarded unseen
    assert ledger.store_result(_req(step="crash"), {"v": "first"}) == {"v": "first"}
    assert ledger.store_result(_req(step="crash"), {"v": "second"}) == {"v": "first"}
    assert ledger.lookup(_req(step="crash").key).payload == {"v": "first"}
    assert ledger.status("ds").spent.epsilon == Fraction(1, 10)


def test_unknown_dataset_and_conflicting_cap(ledger):
    with pytest.raises(LedgerError, match="no budget"):
        ledger.reserve(_req(dataset="nope"))
    with pytest.raises(LedgerError, match="dpr budget set-cap ds"):
        ledger.ensure_budget("ds", PrivacyCost(2, 0))
    ledger.ensure_budget("ds", PrivacyCost(1, Fraction(1, 10**5)))  # same cap: fine
    ledger.reserve(_req(step="a", eps=0.5))
    with pytest.raises(LedgerError, match="below what"):
        ledger.set_cap("ds", PrivacyCost(0.4, 0))
    assert ledger.set_cap("ds", PrivacyCost(2, Fraction(1, 10**5))).remaining.epsilon == Fraction(3, 2)


def test_bad_request_parameters():
    with pytest.raises(ValueError, match="notion"):
        ChargeRequest("d", "r", "s", "m", PrivacyCost(1), notion="xdp")
    with pytest.raises(ValueError, match=">= 0"):
        PrivacyCost(-1)
    with pytest.raises(ValueError, match="finite"):
        PrivacyCost(float("nan"))


# --------------------------------------------------------------- multi-process
N_PROCS, N_EACH, STEP_EPS, CAP = 4, 60, Fraction(1, 100), Fraction(3, 2)


def _worker(path: str, wid: int, out: "mp.Queue") -> None:
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse

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


# ----------------------------------------------------------------------------- neighbour relations (rule 5)
def _nreq(step, eps, neighbour, delta=0, dataset="nb"):
    return ChargeRequest(
        dataset=dataset, release_id="r1", step=step, mechanism="m",
        cost=PrivacyCost(eps, delta), notion="dp", neighbour=neighbour,
    )


def test_add_remove_cost_counts_twice_against_a_replace_one_budget(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("nb", PrivacyCost(1, Fraction(1, 10**4)), "replace-one")
    assert led.status("nb").neighbour == "replace-one"
    led.reserve(_nreq("ar", 0.1, "add-remove"))
    led.reserve(_nreq("ro", 0.1, "replace-one"))
    assert led.status("nb").spent == PrivacyCost(Fraction(3, 10))  # 2 x 0.1 + 0.1, exactly
    assert led.spent_exact("nb") == led.status("nb").spent
    ch = led.charges("nb").set_index("step")
    assert (ch.loc["ar", "stated_epsilon"], ch.loc["ar", "epsilon"]) == (0.1, 0.2)
    assert (ch.loc["ro", "stated_epsilon"], ch.loc["ro", "epsilon"]) == (0.1, 0.1)
    from dpcore.budget.amounts import charge_under

    assert charge_under(PrivacyCost(Fraction(1, 4)), "add-remove", led.status("nb").neighbour) == PrivacyCost(Fraction(1, 2))


def test_add_remove_delta_converts_by_group_privacy():
    from dpcore.budget.amounts import charge_under

    eps, delta = Fraction(1, 2), Fraction(1, 10**6)
    out = charge_under(PrivacyCost(eps, delta), "add-remove", "replace-one")
    exact_delta = (1 + math.exp(0.5)) * 1e-6  # (1 + e^eps) delta, Dwork & Roth Theorem 2.2 with k = 2
    assert out.epsilon == 1
    assert out.delta >= Fraction(exact_delta) and float(out.delta) <= exact_delta * (1 + 1e-9)
    assert charge_under(PrivacyCost(eps, delta), "replace-one", "replace-one") == PrivacyCost(eps, delta)
    assert charge_under(PrivacyCost(eps, delta), "add-remove", "add-remove") == PrivacyCost(eps, delta)


def test_replace_one_cost_is_refused_by_an_add_remove_budget(tmp_path):
    from dpcore.budget.amounts import NeighbourConversionError

    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("nb", PrivacyCost(1), "add-remove")
    with pytest.raises(NeighbourConversionError) as err:
        led.reserve(_nreq("subspaces", 0.1, "replace-one"))
    msg = str(err.value)
    assert "'subspaces'" in msg and "budget.neighbour: replace-one" in msg and "Nothing was charged" in msg
    assert led.status("nb").spent == PrivacyCost(0) and len(led.charges("nb")) == 0


def test_over_budget_error_shows_the_stated_and_the_converted_cost(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("nb", PrivacyCost(Fraction(3, 10)), "replace-one")
    led.reserve(_nreq("a", 0.1, "add-remove"))
    with pytest.raises(BudgetExceededError) as err:
        led.reserve(_nreq("b", 0.1, "add-remove"))  # 0.2 + 0.2 > 0.3
    assert err.value.requested == PrivacyCost(Fraction(2, 10))
    msg = str(err.value)
    assert "stated under add-remove neighbours, converted to the budget's replace-one" in msg
    assert "remaining (epsilon=0.1" in msg


def test_budget_relation_is_fixed_once_something_is_charged(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("nb", PrivacyCost(1), "add-remove")
    led.ensure_budget("nb", PrivacyCost(1), "replace-one")  # nothing charged yet: the relation may change
    assert led.status("nb").neighbour == "replace-one"
    led.reserve(_nreq("a", 0.1, "add-remove"))
    with pytest.raises(LedgerError, match="cannot change once something is charged"):
        led.ensure_budget("nb", PrivacyCost(1), "add-remove")
    assert led.status("nb").neighbour == "replace-one"
    with pytest.raises(ValueError, match="neighbour must be one of"):
        led.ensure_budget("other", PrivacyCost(1), "swap-two")


def test_warehouse_from_before_the_conversion_is_migrated(tmp_path):
    """A ledger made without the relation columns opens; its budget is add/remove, its charges stated = charged."""
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE SCHEMA ledger")
    con.execute("CREATE SCHEMA releases")
    con.execute("""CREATE TABLE ledger.budgets (dataset VARCHAR PRIMARY KEY, eps_cap HUGEINT NOT NULL,
        delta_cap HUGEINT NOT NULL, eps_spent HUGEINT NOT NULL DEFAULT 0, delta_spent HUGEINT NOT NULL DEFAULT 0,
        created_at TIMESTAMPTZ NOT NULL)""")
    con.execute("""CREATE TABLE ledger.charges (key VARCHAR PRIMARY KEY, dataset VARCHAR NOT NULL,
        release_id VARCHAR NOT NULL, step VARCHAR NOT NULL, mechanism VARCHAR NOT NULL, notion VARCHAR NOT NULL,
        neighbour VARCHAR NOT NULL, eps_units HUGEINT NOT NULL, delta_units HUGEINT NOT NULL, status VARCHAR NOT NULL,
        publishable BOOLEAN NOT NULL, flow_run_id VARCHAR, params VARCHAR NOT NULL, reserved_at TIMESTAMPTZ NOT NULL,
        finished_at TIMESTAMPTZ, error VARCHAR)""")
    unit = 10**17
    con.execute("INSERT INTO ledger.budgets VALUES ('old', ?, 0, ?, 0, now())", [10 * unit, unit])
    con.execute("INSERT INTO ledger.charges VALUES ('k1', 'old', 'r0', 's', 'm', 'dp', 'add-remove', ?, 0, "
                "'released', true, NULL, '{}', now(), now(), NULL)", [unit])
    con.close()
    led = PrivacyLedger(Warehouse(path))
    assert led.status("old").neighbour == "add-remove"
    (row,) = led.charges("old").itertuples()
    assert (row.stated_epsilon, row.epsilon) == (0.1, 0.1)
    led.reserve(_nreq("new", 0.2, "add-remove", dataset="old"))
    assert led.status("old").spent == PrivacyCost(Fraction(3, 10)) == led.spent_exact("old")


def test_replace_one_steps_of_the_spec_match_the_mechanisms():
    """spec.REPLACE_ONE_STEPS (checked when a spec loads) lists exactly the steps whose mechanisms say replace-one."""
    from dpcore.mechanisms.aiq import AnomalyIdentification
    from dpcore.mechanisms.coco.mechanism import CocoMechanism
    from dpcore.mechanisms.row_counts import InputRowCounts
    from dpcore.mechanisms.outlier_count import OutlierCountMechanism
    from dpcore.mechanisms.pcor.mechanism import PCORMechanism
    from dpcore.mechanisms.subspace import TopSubspaceSelection
    from dpcore.mechanisms.unattributed import UnattributedHistogramMechanism
    from dpcore.release.spec import REPLACE_ONE_STEPS, StepsSpec

    by_step = {
        "record_counts": [InputRowCounts], "aiq": [AnomalyIdentification], "coco": [CocoMechanism],
        "outlier_counts": [OutlierCountMechanism, TopSubspaceSelection], "pcor": [PCORMechanism],
        "unattributed": [UnattributedHistogramMechanism],
    }
    # detect and rules are non-private and release nothing (internal / owner-only outputs)
    private_steps = {n for n, f in StepsSpec.model_fields.items() if n not in ("validation", "detect", "rules")}
    assert private_steps == set(by_step)
    replace_one = {s for s, mechs in by_step.items() if any(m.neighbour == "replace-one" for m in mechs)}
    assert set(REPLACE_ONE_STEPS) == replace_one


def test_exact_audit_record_counts_under_replace_one_neighbours(tmp_path):
    """Exact privacy loss of the record-count histogram for one record *replaced* (moved between cells).

    The mechanism states epsilon under add/remove; a replace-one neighbour moves two cells by one, so the true
    loss is 2 epsilon. The ledger (replace-one budget) charges exactly that; charging the stated epsilon would
    under-count, which the audit shows.
    """
    from dpcore.mechanisms.counts import PartitionCounts

    eps = Fraction(3, 10)
    mech = PartitionCounts(eps)
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("nb", PrivacyCost(1), "replace-one")
    req = ChargeRequest(dataset="nb", release_id="r1", step="record_counts",
                        mechanism=mech.name, cost=mech.privacy_map(1), notion=mech.notion, neighbour=mech.neighbour)
    led.reserve(req)
    charged = float(led.charges("nb")["epsilon"].iloc[0])

    # output = (max(c1 + Z1, 0), max(c2 + Z2, 0)) (clamping is post-processing), Z ~ discrete Laplace with
    # scale 1/eps, independent per cell: the joint pmf is the product of the two clamped marginals
    ks = np.arange(-400, 401)  # e^{-0.3 * 400}: the truncated mass is far below float precision
    pmf = np.exp(-float(eps) * np.abs(ks))
    pmf /= pmf.sum()

    def marginal(c):
        vals = ks + c
        out = pmf[vals > 0]
        return np.concatenate([[pmf[vals <= 0].sum()], out])[:150]  # P(0), P(1), ..., P(149)

    worst = 0.0
    for d, d2 in [((3, 5), (2, 6)), ((0, 4), (1, 3)), ((1, 1), (0, 2))]:  # one record moved from one cell to the other
        l1 = np.log(marginal(d[0]) / marginal(d2[0]))
        l2 = np.log(marginal(d[1]) / marginal(d2[1]))
        worst = max(worst, float(np.abs(l1[:, None] + l2[None, :]).max()))
    assert worst <= charged + 1e-9
    assert worst > float(eps) + 0.1  # the stated add/remove epsilon alone would under-count
    assert charged == pytest.approx(2 * float(eps))


def test_a_warehouse_from_before_registration_keeps_its_names_registered_as_they_were(tmp_path):
    """Issue 28 hole 3: names that had a budget (or were linked to one) before registration existed are
    registered once, as they were, so existing deployments keep running; a new name is not."""
    from dpcore.budget.ledger import MIGRATED, DatasetNotRegisteredError

    wh = Warehouse(tmp_path / "old.duckdb")
    led = PrivacyLedger(wh)
    led.ensure_budget("old", PrivacyCost(2), "replace-one")
    led.ensure_budget("apart", PrivacyCost(1))

    def as_before(con):  # what an older warehouse held: budgets, a link, a separation, no registrations
        con.execute("DROP TABLE ledger.registrations")
        con.execute("INSERT INTO ledger.dataset_budgets VALUES ('renamed', 'old', now())")
        con.execute("INSERT INTO ledger.separations VALUES ('apart', 'old', 'another wave', now())")

    wh.run(as_before, transaction=True)
    # the older file as a new process meets it: a copy (this process already set the ledger up on old.duckdb,
    # and skips that for the same file: Warehouse.setup_once)
    import shutil

    shutil.copyfile(wh.path, tmp_path / "older.duckdb")
    if wh.wal.exists():
        shutil.copyfile(wh.wal, tmp_path / "older.duckdb.wal")
    wh = Warehouse(tmp_path / "older.duckdb")
    led = PrivacyLedger(wh)
    regs = {r.dataset: r for r in led.registrations()}
    assert set(regs) == {"old", "renamed", "apart"}
    assert (regs["old"].choice, regs["old"].budget, regs["old"].neighbour) == ("own", "old", "replace-one")
    assert (regs["renamed"].choice, regs["renamed"].budget) == ("share", "old")
    assert (regs["apart"].choice, regs["apart"].separate_from) == ("separate", {"old": "another wave"})
    assert all(r.reason == MIGRATED for r in regs.values())
    led.require_registered("renamed")
    with pytest.raises(DatasetNotRegisteredError, match="dataset new is not registered"):
        led.require_registered("new")
    # the demo script's re-registration of a migrated name (same choice and cap, no reason) is accepted
    assert led.repeat_registration("old", PrivacyCost(2), "replace-one") == regs["old"]
    with pytest.raises(LedgerError, match="a registration does not change"):
        led.repeat_registration("old", PrivacyCost(3), "replace-one")
    again = PrivacyLedger(wh).registrations()  # the migration ran once: nothing re-registered or re-dated
    assert [(r.dataset, r.registered_at) for r in again] == [(d, regs[d].registered_at) for d in sorted(regs)]
