"""The cost plan and the all-or-nothing release preflight (issue 20, items 1-2).

The plan is computed from the spec and the ledger only; these tests hold it
against what a real release run charges (real DuckDB ledger, real Prefect
flow runs), and check that a release that cannot run charges nothing.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from dpcore.budget.amounts import PrivacyCost
from dpcore.run.cost_plan import ReleaseBlockedError, plan_release
from dpcore.budget.ledger import PrivacyLedger
from dpcore.run.pipeline import PreflightError
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.storage.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


def _full_spec(small_spec_path: Path, tmp_path: Path, name: str = "full.yaml", **budget) -> Path:
    """The small fixture with every private step enabled (small PCOR search, to stay fast)."""
    spec = yaml.safe_load(small_spec_path.read_text())
    for step in ("aiq", "coco", "outlier_counts", "pcor"):
        spec["steps"][step]["enabled"] = True
    spec["steps"]["pcor"]["n_samples"] = 5
    spec["steps"]["pcor"]["from_detector"] = 2
    spec["steps"]["pcor"]["record_ids"] = ["F000010"]
    spec["budget"].update(budget)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_plan_matches_what_the_release_charges(dpr_home, small_spec_path, tmp_path):
    from flows.release_pipeline import release_pipeline

    path = _full_spec(small_spec_path, tmp_path)
    spec = load_spec(path)
    plan = plan_release(spec, _ledger())
    assert not plan.problems and plan.fits and plan.budget_known and plan.spent == PrivacyCost(0)  # registered
    by_step = {ln.charge.step: ln for ln in plan.lines}
    planned = Counter()
    for ln in plan.lines:
        planned[ln.charge.step] += ln.charge.count
    assert set(by_step) == {"record_counts", "aiq", "outlier_subspaces", "outlier_count", "coco_level0",
                            "coco_level1", "coco_level2", "pcor"}
    # exact: one charge per listed record (each its own line) and per from_detector slot (one shared line),
    # filled or not (issue 28)
    pcor_lines = [ln for ln in plan.lines if ln.charge.step == "pcor"]
    assert not any(ln.charge.upper_bound for ln in pcor_lines) and planned["pcor"] == 3
    assert sorted(ln.charge.count for ln in pcor_lines) == [1, spec.steps.pcor.from_detector]
    assert planned["outlier_count"] == spec.steps.outlier_counts.h

    release_pipeline(spec_path=str(path))
    charges = _ledger().charges("nycflights13")
    made = Counter(charges["step"])
    for step, ln in by_step.items():
        assert made[step] == planned[step], (step, made[step])
        rows = charges[charges["step"] == step]
        for e, d, se, sd in zip(rows["eps_units"], rows["delta_units"], rows["stated_eps_units"],
                                rows["stated_delta_units"]):
            # each charge is exactly the planned one, as stated and as converted to the replace-one budget
            assert PrivacyCost.from_units(int(e), int(d)) == PrivacyCost.from_units(*ln.charged_each.units), step
            assert PrivacyCost.from_units(int(se), int(sd)) == PrivacyCost.from_units(*ln.charge.cost.units), step
            assert rows["mechanism"].iloc[0] == ln.charge.mechanism and rows["notion"].iloc[0] == ln.charge.notion

    # the release spent exactly its plan, whatever number of detector-chosen targets the data gave (issue 28 §2)
    assert _ledger().status("nycflights13").spent == plan.new == plan.total
    after = plan_release(spec, _ledger())  # the same release id again: finished, nothing new
    assert after.budget_known and after.spent == _ledger().status("nycflights13").spent and after.finished
    assert after.new == PrivacyCost(0) and not after.problems
    for ln in after.lines:
        assert ln.already == ln.charge.count and ln.new_count == 0, ln.charge.step


def test_plan_reads_no_data_and_charges_nothing(dpr_home, small_spec_path, tmp_path):
    spec = yaml.safe_load(_full_spec(small_spec_path, tmp_path).read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(tmp_path / "no-such-file.csv")}
    path = tmp_path / "nodata.yaml"
    path.write_text(yaml.safe_dump(spec))
    led = _ledger()
    plan = plan_release(load_spec(path), led)
    assert not plan.problems and plan.new.epsilon > 0
    assert led.charges().empty


@pytest.mark.unregistered
def test_over_cap_release_is_refused_before_any_charge(dpr_home, small_spec_path, tmp_path, register_dataset):
    from flows.release_pipeline import release_pipeline

    path = _full_spec(small_spec_path, tmp_path, epsilon=1.0)  # the release needs about 6.1 of it
    register_dataset(path)
    # refused before ingest with `dpr plan`'s reason (the flow calls release_blockers, issue 48)
    with pytest.raises(ReleaseBlockedError, match=r"^budget: this release would charge \(epsilon=.* but dataset "
                                                  r"'nycflights13' has \(epsilon=1, .* left \(spent \(epsilon=0"):
        release_pipeline(spec_path=str(path))
    led = _ledger()
    assert led.charges().empty and led.status("nycflights13").spent == PrivacyCost(0)
    assert not (dpr_home / "bundles" / "nycflights13" / "test-r1").exists()


def test_bad_requests_are_all_listed_and_nothing_is_charged(dpr_home, small_spec_path, tmp_path):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(_full_spec(small_spec_path, tmp_path).read_text())
    spec["steps"]["aiq"]["record_ids"] = ["F999999"]  # off the public roster
    spec["steps"]["pcor"]["record_ids"] = ["F999998"]  # likewise
    spec["steps"]["coco"]["epsilon_per_level"] = [0.5, 0.5]  # three levels measured
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(PreflightError) as exc:
        release_pipeline(spec_path=str(path))
    problems = exc.value.problems
    assert len(problems) == 3, problems
    assert any(p.startswith("steps.aiq.record_ids") and "F999999" in p for p in problems)
    assert any(p.startswith("steps.pcor.record_ids") and "F999998" in p for p in problems)
    assert any(p.startswith("steps.coco") for p in problems)
    assert "nothing was charged or released" in str(exc.value)
    led = _ledger()
    assert led.charges().empty


@pytest.mark.unregistered
def test_a_rerun_of_a_release_that_used_the_whole_budget_still_runs(dpr_home, small_spec_path, tmp_path,
                                                                    register_dataset):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())  # record counts only: 0.1 add/remove = 0.2 replace-one
    spec["budget"]["epsilon"] = 0.2
    # the detector and its rules charge nothing and are not what the preflight is about (off: a cheaper release)
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False
    path = tmp_path / "exact.yaml"
    path.write_text(yaml.safe_dump(spec))
    register_dataset(path)
    first = release_pipeline(spec_path=str(path))
    again = release_pipeline(spec_path=str(path))  # nothing new to charge: the preflight lets it through
    assert first["spent_total"] == again["spent_total"] and again["remaining"]["epsilon"] == 0
    assert again["stored_release"] and again["charged_by_this_run"]["epsilon"] == 0
    with pytest.raises(ReleaseBlockedError, match="^budget: this release would charge"):
        release_pipeline(spec_path=str(path), release_id="test-r2")
    assert len(_ledger().charges("nycflights13")) == 1
