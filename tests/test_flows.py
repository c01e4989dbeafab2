"""Flow wiring under a real Prefect API (prefect_test_harness), real DuckDB file,
real great-expectations validation."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dpcore.run.cost_plan import ReleaseBlockedError
from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.storage.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


def test_release_pipeline_on_small_fixture(dpr_home, small_spec_path):
    from flows.release_pipeline import release_pipeline

    out = release_pipeline(spec_path=str(small_spec_path))
    bundle = Path(out["bundle"])
    assert bundle.is_relative_to(dpr_home)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for f in manifest["files"]:
        assert (bundle / f).is_file(), f
    assert {"report.md", "budget.png", "tables/ledger_charges.csv", "tables/record_counts__counts.parquet",
            "owner/validation_summary.json"} <= set(manifest["files"])
    assert manifest["release_id"] == "test-r1"
    assert [r["step"] for r in manifest["releases"]] == ["record_counts"]
    (prot,) = manifest["protection"]
    assert prot["step"] == "record_counts" and prot["notions"] == ["dp"] and manifest["always_not_protected"]
    assert manifest["budget_identity"]["budget"] == "nycflights13"
    # the demo's cap is stated under replace-one neighbours: the add/remove record counts (0.1) count twice
    assert manifest["budget"]["neighbour"] == "replace-one"
    (rel,) = manifest["releases"]
    assert (rel["neighbour"], rel["stated_epsilon"], rel["epsilon"]) == ("add-remove", 0.1, pytest.approx(0.2))
    assert manifest["budget"]["spent_by_this_release"]["epsilon"] == pytest.approx(0.2)
    assert manifest["budget"]["remaining"]["epsilon"] == pytest.approx(19.8)
    assert manifest["weakest_notion_on_dataset"] == "dp"
    assert manifest["for_publication"] is True

    wh = Warehouse(Settings.from_env().warehouse)
    schemas = {r[0] for r in wh.query("SELECT schema_name FROM information_schema.schemata")}
    assert {"raw", "validated", "quarantine", "internal", "releases", "ledger"} <= schemas
    table = wh.query("SELECT table_name FROM raw.ingests")[0][0]
    (vtable,) = [r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")]
    assert vtable.startswith(table)
    n_raw = wh.query(f'SELECT count(*) FROM raw."{table}"')[0][0]
    n_valid = wh.query(f'SELECT count(*) FROM validated."{vtable}"')[0][0]
    quarantined = wh.query_df(f'SELECT _row, rule, "column" FROM quarantine."{vtable}"')
    assert n_raw == 3000
    # the cancelled flights (empty arr_delay) are quarantined, nothing is lost
    assert (quarantined["column"] == "arr_delay").any()
    assert n_valid + quarantined["_row"].nunique() == n_raw

    summary = json.loads((bundle / "owner" / "validation_summary.json").read_text())
    assert summary["n_rows"] == 3000
    report = (bundle / "report.md").read_text()
    assert "Record counts (differentially private)" in report
    _rerun_same_release_spends_nothing_new_and_new_release_spends(small_spec_path)


def _rerun_same_release_spends_nothing_new_and_new_release_spends(small_spec_path):
    """After a first release of the small spec (the test above; one release run serves both): a rerun of the
    same release id charges nothing new and returns the stored answer; a new release id charges again."""
    from flows.release_pipeline import release_pipeline

    led = _ledger()
    first = led.charges("nycflights13")
    payload1 = led.wh.query("SELECT payload FROM releases.outputs")[0][0]
    release_pipeline(spec_path=str(small_spec_path))
    again = led.charges("nycflights13")
    assert len(again) == len(first) == 1
    assert led.wh.query("SELECT payload FROM releases.outputs")[0][0] == payload1
    assert led.status("nycflights13").spent.epsilon == 2 * Fraction(1, 10)  # add/remove 0.1 on a replace-one cap

    release_pipeline(spec_path=str(small_spec_path), release_id="test-r2")
    assert len(led.charges("nycflights13")) == 2
    assert led.status("nycflights13").spent.epsilon == 2 * Fraction(2, 10)


@pytest.mark.unregistered
def test_over_budget_run_fails_with_budget_message_and_ledger_unchanged(dpr_home, small_spec_path, tmp_path,
                                                                        register_dataset):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["budget"] = {"epsilon": 0.15, "delta": 0.0}
    # the detector and its rules charge nothing and are not what the budget check is about (off: a cheaper release)
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False
    tight = tmp_path / "tight.yaml"
    tight.write_text(yaml.safe_dump(spec))
    register_dataset(tight)
    release_pipeline(spec_path=str(tight))
    led = _ledger()
    before = led.charges("nycflights13")
    # refused before ingest with `dpr plan`'s reason (the flow calls release_blockers, issue 48)
    with pytest.raises(ReleaseBlockedError, match=r"^budget: this release would charge \(epsilon=0.1.* has "
                                                  r"\(epsilon=0.05"):
        release_pipeline(spec_path=str(tight), release_id="test-r2")
    after = led.charges("nycflights13")
    assert len(after) == len(before) == 1
    assert led.status("nycflights13").spent.epsilon == Fraction(1, 10)
    assert not (dpr_home / "bundles" / "nycflights13" / "test-r2").exists()


def test_stage_flows_run_on_their_own(dpr_home, small_spec_path):
    from flows.ingest import ingest_flow
    from flows.validate import validate_flow

    res = ingest_flow(spec_path=str(small_spec_path))
    assert set(res) == {"dataset", "ingest_id"} and len(res["ingest_id"]) == 16  # public ids only
    out = validate_flow(spec_path=str(small_spec_path))
    assert set(out) == {"dataset", "ingest_id"} and out["dataset"] == "nycflights13"  # no count, no verdict
    assert len(out["ingest_id"]) == 16 and out["ingest_id"] != res["ingest_id"]  # a fresh id per ingest (issue 28)
    assert _ledger().charges("nycflights13").empty


def test_stage_flows_persist_nothing_even_when_persistence_is_forced_on(dpr_home, small_spec_path, tmp_path):
    """Issue 15 hole 11b: with PREFECT_RESULTS_PERSIST_BY_DEFAULT=true the old ingest/validate flows pickled
    exact counts and row numbers under the result storage; now no flow or task writes a result."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, PREFECT_RESULTS_PERSIST_BY_DEFAULT, temporary_settings

    from flows.ingest import ingest_flow
    from flows.release_pipeline import release_pipeline
    from flows.validate import validate_flow

    storage = tmp_path / "results"
    with temporary_settings({PREFECT_RESULTS_PERSIST_BY_DEFAULT: True, PREFECT_LOCAL_STORAGE_PATH: storage}):
        ingest_flow(spec_path=str(small_spec_path))
        validate_flow(spec_path=str(small_spec_path))
        release_pipeline(spec_path=str(small_spec_path))
    assert not storage.exists() or not any(p.is_file() for p in storage.rglob("*"))


def test_rejected_fraction_gate_uses_the_noisy_counts_and_keeps_the_charged_counts(dpr_home, small_spec_path, tmp_path):
    """Issue 15 hole 8: the gate stops the release on the *noisy* record counts (already charged and
    released in a bundle), and its message quotes only those noisy numbers."""
    import pandas as pd

    from dpcore.validation import ValidationFailed
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    # every 4th flight gets a distance outside the public bounds: ~25% quarantined (plus the few cancelled
    # flights), far above the 5% gate whatever the noise (scale 2/0.1 = 20 on counts of ~750)
    flights = pd.read_csv(spec["dataset"]["source"]["path"], dtype=str, keep_default_na=False)
    flights.loc[::4, "distance"] = "99999"
    bad_csv = tmp_path / "flights_bad.csv"
    flights.to_csv(bad_csv, index=False)
    spec["dataset"]["source"] = {"kind": "csv", "path": str(bad_csv)}
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.05
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ValidationFailed, match="noisy record counts") as ei:
        release_pipeline(spec_path=str(path))
    bundle = dpr_home / "bundles" / "nycflights13" / "test-r1"
    counts = pd.read_csv(bundle / "tables" / "record_counts__counts.csv")
    noisy = dict(zip(counts["cell"], counts["noisy_count"]))
    msg = str(ei.value)
    assert f"{noisy['quarantined_rows']} of {noisy['input_rows']} rows" in msg
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["stopped"] and [r["step"] for r in manifest["releases"]] == ["record_counts"]
    wh = Warehouse(Settings.from_env().warehouse)
    (table,) = [r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")]
    exact = wh.query(f'SELECT count(*) FROM validated."{table}"')[0][0]
    assert f" {exact} " not in msg or exact == noisy["accepted_rows"]


def _broken_coco_levels(spec):
    spec["steps"]["coco"].update({"enabled": True, "epsilon_per_level": [0.5, 0.5]})  # 3 levels in the fleet file


def _broken_coco_groups(spec, tmp_path):
    fleet = Path(spec["steps"]["coco"]["groups_file"]).read_text().splitlines()
    dup = tmp_path / "fleet_dup.csv"
    dup.write_text("\n".join([*fleet, fleet[1].rsplit(",", 1)[0] + ",JFK"]) + "\n")  # a plane in two leaves
    spec["steps"]["coco"].update({"enabled": True, "groups_file": str(dup)})


def _unreadable_coco_groups(spec, tmp_path):
    empty = tmp_path / "fleet_empty.csv"
    empty.write_bytes(b"")
    spec["steps"]["coco"].update({"enabled": True, "groups_file": str(empty)})


def _repeated_coco_level(spec):
    spec["steps"]["coco"].update({"enabled": True, "levels": ["carrier", "carrier"], "epsilon_per_level": 0.5})


@pytest.mark.parametrize(
    "breaker, fragment",
    [
        (lambda s, p: _broken_coco_levels(s), "steps.coco"),
        (_broken_coco_groups, "more than one leaf"),
        (_unreadable_coco_groups, r"steps\.coco\.groups_file .* not a readable UTF-8 CSV"),
        (lambda s, p: _repeated_coco_level(s), r"steps\.coco\.levels .* repeats a column"),
        (lambda s, p: s["steps"]["aiq"].update({"enabled": True, "record_ids": ["F999999"]}), "not on the public roster"),
    ],
)
def test_preflight_refuses_public_faults_of_any_step_before_the_first_charge(dpr_home, small_spec_path, tmp_path,
                                                                             breaker, fragment):
    """DESIGN rule 8: every enabled step's public checks (coco's groups file and levels included) run before
    record_counts is charged, so bad input never leaves half a release."""
    from dpcore.steps.common import StepInputError
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    breaker(spec, tmp_path)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(StepInputError, match=fragment):
        release_pipeline(spec_path=str(path))
    assert _ledger().charges("nycflights13").empty


@pytest.fixture(scope="module")
def accuracy_bundle(prefect_harness, tmp_path_factory, module_small_spec_path) -> Path:
    """The bundle of one release with every public step on (AIQ, coco with the demo's groups file, which is
    derived from the data, PCOR) at the accuracy level 0.9, run once for the two tests below that read it."""
    from flows.release_pipeline import release_pipeline
    from owner_registration import register_spec

    folder = tmp_path_factory.mktemp("accuracy")
    spec = yaml.safe_load(module_small_spec_path.read_text())
    spec["accuracy_alpha"] = 0.1
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False  # the owner-only rules explain the detector's flags
    spec["steps"]["aiq"].update({"enabled": True, "record_ids": ["F000001", "F900000"], "from_detector": 0})
    spec["steps"]["coco"].update({"enabled": True, "max_group_size": 60, "groups_provenance": "derived_from_data"})
    spec["steps"]["pcor"].update({"enabled": True, "record_ids": ["F000003"], "from_detector": 0, "n_samples": 10})
    path = folder / "acc.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("DPR_HOME", str(folder / "dpr"))
        monkeypatch.delenv("DPR_WAREHOUSE", raising=False)
        monkeypatch.delenv("DPR_BUNDLES", raising=False)
        register_spec(path)
        return Path(release_pipeline(spec_path=str(path))["bundle"])


def test_coco_derived_groups_file_is_stated_as_not_protected(dpr_home, small_spec_path, tmp_path, accuracy_bundle):
    """Issue 15 hole 10: the demo's fleet file is computed from the flights; the spec says so and the
    manifest and report state what that leaves unprotected. A public groups file adds no statement.
    (The derived file's release: ``accuracy_bundle``, which runs coco on it; one release here, the public file.)"""
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    assert spec["steps"]["coco"]["groups_provenance"] == "derived_from_data"  # the demo spec says so
    spec["steps"]["coco"].update({"enabled": True, "max_group_size": 60, "groups_provenance": "public"})
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False  # the owner-only rules explain the detector's flags
    spec["steps"]["pcor"]["enabled"] = spec["steps"]["aiq"]["enabled"] = False
    spec["release_id"] = "r-public"
    path = tmp_path / "public.yaml"
    path.write_text(yaml.safe_dump(spec))
    public = Path(release_pipeline(spec_path=str(path))["bundle"])
    for provenance, bundle in (("derived_from_data", accuracy_bundle), ("public", public)):
        manifest = json.loads((bundle / "manifest.json").read_text())
        (prot,) = [p for p in manifest["protection"] if p["step"] == "coco"]
        stated = any("computed from the protected data" in t for t in prot["not_protected"])
        in_report = "computed from the protected data" in (bundle / "report.md").read_text()
        assert stated == in_report == (provenance == "derived_from_data"), provenance


def test_every_released_number_carries_a_public_accuracy_statement(accuracy_bundle):
    """Issue 16 part 1: manifest (per step), tables (columns) and report (next to the numbers) state the accuracy
    of every output type; the statements depend on the spec only (the leak test compares them across neighbours).
    The release: ``accuracy_bundle`` (every public step on, accuracy level 0.9)."""
    import pandas as pd

    bundle = accuracy_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    acc = {p["step"]: p["accuracy"] for p in manifest["protection"]}
    assert set(acc) == {"record_counts", "aiq", "coco", "pcor"} and all(acc.values())
    for statements in acc.values():
        for a in statements.values():
            assert a["level"] in (0.9, 1.0) and a["kind"] and a["statement"]
    counts = pd.read_csv(bundle / "tables" / "record_counts__counts.csv")
    assert (counts["ci_level"] == 0.9).all() and (counts["ci_half_width"] > 0).all()
    assert {"max_error_probability"} <= set(pd.read_csv(bundle / "tables" / "aiq__answers.csv").columns)
    coco = pd.read_csv(bundle / "tables" / "coco__histograms.csv")
    assert {"ci_level", "measurement_half_width", "empirical_half_width"} <= set(coco.columns)
    # every level's released cells carry the bootstrap's empirical figure (also after rounding and matching)
    assert coco["empirical_half_width"].notna().all() and (coco["empirical_half_width"] >= 0).all()
    for lv in coco["level"].unique():
        assert acc["coco"][f"histograms.level{lv}"]["kind"] == "empirical"
        assert acc["coco"][f"histograms.level{lv}"]["bound"] == coco[coco["level"] == lv]["empirical_half_width"].iloc[0]
        assert acc["coco"][f"histograms.level{lv}.measurement"]["kind"] == "measurement"
    assert {"utility_shortfall_bound"} <= set(pd.read_csv(bundle / "tables" / "pcor__explanations.csv").columns)
    report = (bundle / "report.md").read_text()
    assert " ± " in report and "(90%: " in report and "wrong with probability at most" in report
    assert "parametric bootstrap from the release" in report and "| released cell ± (empirical) |" in report
