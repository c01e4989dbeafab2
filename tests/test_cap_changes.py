"""Issue 32 §3: the owner changes a cap through the ledger (recorded with time and reason), and the ledger's
refusals say what to do in the owner's words, with the ledger's own numbers."""
from __future__ import annotations

from fractions import Fraction

import pytest

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.budget.ledger import ChargeRequest, LedgerError, PrivacyLedger
from dpcore.storage.warehouse import Warehouse


def _req(step="s", eps=0.1, release="r1", dataset="ds"):
    return ChargeRequest(dataset=dataset, release_id=release, step=step, mechanism="m",
                         cost=PrivacyCost(eps, 0), notion="dp", params={})


@pytest.fixture
def ledger(tmp_path):
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("ds", PrivacyCost(1, Fraction(1, 10**5)))
    return led


def test_set_cap_is_recorded_with_time_old_and_new_cap_and_reason(ledger):
    ledger.reserve(_req(eps=0.5))
    assert ledger.cap_changes("ds") == []
    ledger.set_cap("ds", PrivacyCost(2, Fraction(1, 10**5)), reason="board approved")
    (change,) = ledger.cap_changes("ds")
    assert change["old_cap"] == PrivacyCost(1, Fraction(1, 10**5))
    assert change["new_cap"] == PrivacyCost(2, Fraction(1, 10**5)) == ledger.status("ds").cap
    assert change["reason"] == "board approved" and change["time"] is not None
    assert ledger.cap_changes() == [change]


def test_lowering_below_what_is_spent_is_refused_with_requested_and_spent(ledger):
    ledger.reserve(_req(eps=0.5))
    spent = ledger.status("ds").spent
    with pytest.raises(LedgerError) as err:
        ledger.set_cap("ds", PrivacyCost(Fraction(2, 5), 0), reason="too low")
    msg = str(err.value)
    assert f"requested cap {PrivacyCost(Fraction(2, 5), 0)}" in msg and f"already spent: {spent}" in msg, msg
    assert f"the cap stays {ledger.status('ds').cap}" in msg
    assert ledger.status("ds").cap == PrivacyCost(1, Fraction(1, 10**5)) and ledger.cap_changes("ds") == []


def test_over_budget_points_to_set_cap_not_to_the_spec(ledger):
    ledger.reserve(_req(step="a", eps=0.7))
    with pytest.raises(BudgetExceededError) as err:
        ledger.reserve(_req(step="b", eps=0.5))
    msg = str(err.value)
    st = ledger.status("ds")
    assert f"remaining {st.remaining}" in msg and f"spent {st.spent} of cap {st.cap}" in msg
    assert "dpr budget set-cap ds EPSILON [DELTA] --reason" in msg and "(budget in the spec" not in msg, msg


def test_cap_mismatch_points_to_the_command_with_the_registered_cap(ledger):
    with pytest.raises(LedgerError) as err:
        ledger.ensure_budget("ds", PrivacyCost(2, 0))
    msg = str(err.value)
    assert f"registered with cap {ledger.status('ds').cap}" in msg and "the spec asks for (epsilon=2" in msg
    assert "dpr budget set-cap ds" in msg and "PrivacyLedger" not in msg, msg


def test_unknown_dataset_says_what_to_do_not_an_internal_name(ledger):
    for call in (lambda: ledger.status("nope"), lambda: ledger.set_cap("nope", PrivacyCost(1, 0)),
                 lambda: ledger.reserve(_req(dataset="nope"))):
        with pytest.raises(LedgerError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith("unknown dataset 'nope'") and "ensure_budget" not in msg and "dpr dataset add nope --spec SPEC" in msg


def test_the_plan_over_budget_problem_points_to_set_cap(tmp_path):
    import yaml

    from dpcore.run.cost_plan import plan_release
    from dpcore.release.spec import load_spec
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = yaml.safe_load((root / "specs" / "demo.yaml").read_text())
    spec["budget"]["epsilon"] = 0.05
    spec["steps"]["coco"]["groups_file"] = str(root / "specs" / "demo_fleet.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(root / "specs" / "demo_fleet.csv")
    spec["dataset"]["roster"] = {"file": str(root / "specs" / "demo_roster.csv"), "column": "flight_id"}
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(spec))
    plan = plan_release(load_spec(path), None)
    (problem,) = [p for p in plan.problems if p.startswith("budget:")]
    assert "dpr budget set-cap nycflights13 EPSILON [DELTA] --reason" in problem and "(budget in the spec" not in problem
