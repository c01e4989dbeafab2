"""The AIQ step wired into flows: one charge per batch, stored re-runs, clear
errors before any charge, nothing internal in the bundle."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from prefect.exceptions import ParameterTypeError

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.steps.common import StepInputError
from dpcore.storage.warehouse import Warehouse
from owner_registration import register_spec

pytestmark = pytest.mark.usefixtures("prefect_harness")
IDS = ["F000001", "F000002", "F000010"]


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


def _aiq_charges():
    ch = _ledger().charges("nycflights13")
    return ch[ch["step"] == "aiq"]


@pytest.fixture
def aiq_spec_path(small_spec_path: Path, tmp_path: Path) -> Path:
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"] = {
        "enabled": True, "mechanism": "sp", "epsilon": 0.05, "beta": 5, "r": 0.02, "k": 1,
        "record_ids": IDS,
        "points": [{"distance": 4900, "air_time": 700, "dep_delay": 1400, "arr_delay": 1400}],
    }
    # the detector and its owner-only rules: these queries name their records (from_detector 0), and the two
    # charge nothing; off, each release here costs about half the CPU (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False
    path = tmp_path / "aiq.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_pipeline_releases_answers_only_and_charges_once(dpr_home, aiq_spec_path):
    from flows.release_pipeline import release_pipeline

    out = release_pipeline(spec_path=str(aiq_spec_path))
    ch = _aiq_charges()
    assert len(ch) == 1
    row = ch.iloc[0]
    assert row["notion"] == "sp" and row["status"] == "released"
    # 3 record-id queries compose sequentially (Claim 3); the single public point adds 1 x epsilon
    assert Fraction(row["stated_epsilon"]).limit_denominator(1000) == Fraction(4 * 5, 100)
    # stated under add/remove; the demo's cap is replace-one, so it is charged twice
    assert (row["neighbour"], Fraction(row["epsilon"]).limit_denominator(1000)) == ("add-remove", Fraction(2 * 4 * 5, 100))
    bundle = Path(out["bundle"])
    answers = json.loads(json.dumps(list((bundle / "tables" / "aiq__answers.csv").read_text().splitlines())))
    assert answers[0] == "query,anomaly,max_error_probability" and len(answers) == 1 + len(IDS) + 1
    wh = Warehouse(Settings.from_env().warehouse)
    diag = wh.query_df("SELECT * FROM internal.aiq_diagnostics")
    assert len(diag) == 4 and (diag["ball_count"] >= diag["multiplicity"]).all()
    # the far corner point is nobody's neighbour: multiplicity 0
    assert diag["multiplicity"].iloc[-1] == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["weakest_notion_on_dataset"] == "sp"
    public_text = "".join(
        p.read_text(errors="ignore") for p in bundle.rglob("*") if p.is_file() and p.suffix in {".csv", ".md", ".json"}
        and "owner" not in p.parts
    )
    assert "ball_count" not in public_text and "multiplicity" not in public_text


def test_operator_flow_stored_rerun_and_new_parameters(dpr_home, small_spec_path):
    from flows.aiq_query import aiq_query

    first = aiq_query(record_ids=IDS, epsilon=0.2, spec_path=str(small_spec_path))
    assert [r["query"] for r in first] == [f"record:{i}" for i in IDS]
    assert all(isinstance(r["anomaly"], bool) for r in first)
    assert len(_aiq_charges()) == 1
    again = aiq_query(record_ids=IDS, epsilon=0.2, spec_path=str(small_spec_path))
    assert again == first and len(_aiq_charges()) == 1
    aiq_query(record_ids=IDS, epsilon=0.2, mechanism="dp", spec_path=str(small_spec_path))
    ch = _aiq_charges()
    assert len(ch) == 2 and set(ch["notion"]) == {"sp", "dp"}
    assert _ledger().status("nycflights13").spent.epsilon == 2 * Fraction(12, 10)  # add/remove on a replace-one cap
    bundles = list((dpr_home / "bundles" / "nycflights13" / "test-r1").glob("aiq-*/manifest.json"))
    assert len(bundles) == 2


@pytest.fixture(scope="module")
def refusals_home(tmp_path_factory, module_small_spec_path):
    """One registered home shared by the refused queries below (each checks that nothing was ever charged in it;
    a fresh home per case cost a registration, an ingest and a validation each)."""
    home = tmp_path_factory.mktemp("aiq_refusals") / "dpr"
    register_spec(module_small_spec_path, home=home)
    return home, module_small_spec_path


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"record_ids": ["F999999"]}, "not on the public roster"),  # a public fact: refused for free
        ({"record_ids": ["F000001", "F000001"]}, "more than once"),
        ({"record_ids": ["F000001", "=cmd()"]}, "record_id_pattern"),
        ({"record_ids": IDS, "epsilon": 0.0}, "epsilon"),
        ({"record_ids": IDS, "epsilon": -1.0}, "epsilon"),
        ({"record_ids": IDS, "beta": 0}, "beta"),
        ({"record_ids": IDS, "r": -0.1}, "r"),
        ({"record_ids": IDS, "k": 0}, "k"),
        ({"record_ids": []}, "record_ids"),
    ],
)
def test_bad_queries_fail_clearly_without_charge(refusals_home, monkeypatch, kwargs, fragment):
    from flows.aiq_query import aiq_query

    home, spec_path = refusals_home
    monkeypatch.setenv("DPR_HOME", str(home))
    monkeypatch.delenv("DPR_WAREHOUSE", raising=False)
    monkeypatch.delenv("DPR_BUNDLES", raising=False)
    with pytest.raises(Exception) as err:
        aiq_query(spec_path=str(spec_path), **kwargs)
    assert fragment in str(err.value)
    # parameter constraints are enforced by Prefect from the typed signature (as the UI does);
    # query errors by the step, before the ledger is touched
    assert isinstance(err.value, (StepInputError, ParameterTypeError))
    led = _ledger()
    assert led.charges("nycflights13").empty


@pytest.mark.parametrize(
    "point, fragment",
    [
        ({"distance": 6000, "air_time": 100, "dep_delay": 0, "arr_delay": 0}, "outside the public bounds"),
        ({"distance": 100, "air_time": 100}, "exactly the attributes"),
    ],
)
def test_bad_points_fail_before_the_aiq_charge(dpr_home, aiq_spec_path, tmp_path, point, fragment):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(aiq_spec_path.read_text())
    spec["steps"]["aiq"]["points"] = [point]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    with pytest.raises(StepInputError, match=fragment):
        release_pipeline(spec_path=str(bad))
    assert _aiq_charges().empty


def test_roster_ids_are_charged_and_answered_whether_present_quarantined_or_absent(dpr_home, small_spec_path):
    """Issue 15, holes 2-3: no free probe. F000001 is a valid record, F000472 a cancelled flight (quarantined),
    F900000 is on the public roster but not in the data: all three are charged alike and answered through the
    mechanism; the released table has the same form for each."""
    from flows.aiq_query import aiq_query

    ids = ["F000001", "F000472", "F900000"]
    out = aiq_query(record_ids=ids, epsilon=0.2, spec_path=str(small_spec_path))
    ch = _aiq_charges()
    assert len(ch) == 1 and ch.iloc[0]["status"] == "released"
    assert Fraction(ch.iloc[0]["stated_epsilon"]).limit_denominator(1000) == 3 * Fraction(2, 10)
    assert [a["query"] for a in out] == [f"record:{i}" for i in ids]
    (bundle,) = (dpr_home / "bundles" / "nycflights13" / "test-r1").glob("aiq-*")
    table = (bundle / "tables" / "aiq__answers.csv").read_text().splitlines()
    assert table[0] == "query,anomaly,max_error_probability" and [r.split(",")[0] for r in table[1:]] == [f"record:{i}" for i in ids]
    assert all(r.split(",")[1] in {"True", "False"} for r in table[1:])
    # rule 9: the exclusion the exact audit shows is needed (tests/test_aiq_record_queries.py) is stated
    manifest = json.loads((bundle / "manifest.json").read_text())
    (prot,) = [p for p in manifest["protection"] if p["step"] == "aiq"]
    assert any("queried record's own value and presence" in t for t in prot["not_protected"])
    assert "queried record's own value and presence" in (bundle / "report.md").read_text()
    # internally: the absent and the quarantined id were answered from the data-independent input (0, 0)
    diag = Warehouse(Settings.from_env().warehouse).query_df("SELECT * FROM internal.aiq_diagnostics")
    assert diag["ball_count"].tolist()[1:] == [0, 0] and diag["multiplicity"].tolist()[1:] == [0, 0]
    assert diag["ball_count"].iloc[0] >= 1


def test_record_id_requests_without_a_roster_are_refused_before_any_charge(dpr_home, small_spec_path, tmp_path):
    from flows.aiq_query import aiq_query

    spec = yaml.safe_load(small_spec_path.read_text())
    del spec["dataset"]["roster"]
    path = tmp_path / "no_roster.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(StepInputError, match="need a public roster"):
        aiq_query(record_ids=["F000001"], spec_path=str(path))
    assert _ledger().charges("nycflights13").empty
