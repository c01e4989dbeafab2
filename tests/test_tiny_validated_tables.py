"""A release over a validated table with no record, or fewer records than the detector has parameters.

How many records pass validation is a private fact. A release must not abort
after its first charges because of it (DESIGN.md, rule 8: an answer that
differs for free depending on private facts is a leak): the detector's fit
becomes an unfitted filter that labels nothing, the rules miner notes that
no record was flagged, and PCOR answers every target with the
data-independent ``no_valid_context``. The release charges the same steps
and publishes the same tables as on a table with enough records.
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.detect.combine import Template
from dpcore.detect.streaming import fit_partitions
from dpcore.storage.partitions import export_partitions, scratch_dir
from dpcore.release.spec import load_spec
from owner_registration import register_spec

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("prefect_harness")


#: Rows of the small sample used (the rest of the 3,000 would only add quarantined rows: the size is not tested).
ROWS = 1000


def _spec_with_valid_rows(tmp_path: Path, small_flights_csv: Path, valid: int) -> Path:
    """The demo spec on the small sample's first :data:`ROWS` rows with only its first ``valid`` rows inside the
    origin's public domain."""
    df = pd.read_csv(small_flights_csv, dtype=str, keep_default_na=False, nrows=ROWS)
    df.loc[df.index[valid:], "origin"] = "XXX"  # out of the public domain: quarantined
    csv = tmp_path / "flights.csv"
    df.to_csv(csv, index=False)
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(csv)}
    roster = pd.read_csv(ROOT / "specs" / "demo_roster.csv", dtype=str)["flight_id"].tolist()
    spec["dataset"]["roster"] = {"ids": list(dict.fromkeys(roster + df["flight_id"].tolist()))}
    spec["release_id"] = f"tiny-{valid}"
    spec["steps"]["validation"]["max_rejected_fraction"] = 1.0  # the gate has its own tests; here every step runs
    # two listed records (the first, valid when any is; the last, always quarantined) and no detector-chosen one,
    # so the charges do not depend on how many records the detector flags (that count is rule 9's statement)
    spec["steps"]["pcor"].update({"record_ids": [df["flight_id"].iloc[0], df["flight_id"].iloc[-1]],
                                  "from_detector": 0})
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = fleet
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _charges(bundle: Path) -> list[tuple]:
    ch = pd.read_csv(bundle / "tables" / "ledger_charges.csv")
    return sorted(zip(ch["step"], ch["mechanism"], ch["epsilon"], ch["delta"], ch["status"]))


def _run(tmp_path: Path, small_flights_csv: Path, valid: int, monkeypatch) -> tuple[dict, Path]:
    from flows.release_pipeline import release_pipeline

    monkeypatch.setenv("DPR_HOME", str(tmp_path / f"home-{valid}"))
    spec_path = _spec_with_valid_rows(tmp_path, small_flights_csv, valid)
    register_spec(spec_path)  # the data owner registers the name in this fresh home
    out = release_pipeline(spec_path=str(spec_path))
    return out, Path(out["bundle"])


@pytest.fixture(scope="module")
def reference(prefect_harness, tmp_path_factory, small_flights_csv) -> Path:
    """The bundle of the release over enough validated records (40), run once for the module's cases."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _, bundle = _run(tmp_path_factory.mktemp("reference"), small_flights_csv, 40, monkeypatch)
    return bundle


@pytest.mark.parametrize("valid", [0, 5])
def test_a_release_over_too_few_validated_records_completes_like_one_over_enough(
        tmp_path, small_flights_csv, monkeypatch, valid, reference):
    out, bundle = _run(tmp_path, small_flights_csv, valid, monkeypatch)
    # the same steps charged the same amounts, the same tables are published
    assert _charges(bundle) == _charges(reference)
    assert sorted(p.name for p in (bundle / "tables").iterdir()) == sorted(
        p.name for p in (reference / "tables").iterdir())
    assert json.loads((bundle / "manifest.json").read_text())["stopped"] is None
    # the detector's filters are unfitted (internal only), every PCOR target has the data-independent outcome
    con = duckdb.connect(out["warehouse"], read_only=True)
    try:
        params = [json.loads(p) for (p,) in con.execute("SELECT params FROM internal.detect_models").fetchall()]
    finally:
        con.close()
    assert params and all(p["K"] == 0 and p["diagnostics"][0]["code"] == "too_few_rows" for p in params)
    pcor = pd.read_csv(bundle / "tables" / "pcor__explanations.csv")
    assert len(pcor) == 2 and set(pcor["status"]) == {"no_valid_context"}


def test_the_unfitted_filter_scores_every_row_as_missing_and_labels_none(tmp_path):
    """:func:`fit_partitions` on fewer rows than the model's parameters: NaN scores, K = 0, no error."""
    spec = load_spec(ROOT / "specs" / "demo.yaml")
    template = Template("t", "arr_delay", ("dep_delay", "distance"), ())
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("CREATE TABLE v AS SELECT range AS _row, range * 1.0 AS arr_delay, range * 2.0 AS dep_delay, "
                "100.0 + range AS distance FROM range(4)")
    con.close()
    from dpcore.storage.warehouse import Warehouse

    wh = Warehouse(tmp_path / "w.duckdb")
    folder = scratch_dir(wh) / "t"
    folder.mkdir(mode=0o700)
    parts = export_partitions(wh, "SELECT * FROM v ORDER BY _row", None, 3, folder)
    fit = fit_partitions(parts, template, spec.public_schema)
    scores = pd.read_parquet(fit.scores_path)
    assert fit.K == 0 and fit.params["diagnostics"] == [{"code": "too_few_rows", "n_params": 6}]
    assert scores["_row"].tolist() == [0, 1, 2, 3] and np.isnan(scores["score"]).all()
