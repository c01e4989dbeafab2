"""A crash never loses a release (issue 33 §3; DESIGN.md rule 10).

One release is stopped at every task boundary (``after:<task>``; ``before:<next task>`` is the same
moment) and inside every step between its charge and its draw (``charged:<step>``) and between its draw
and its store (``computed:<step>``), through the deterministic hook of :mod:`dpcore.runtime.fault_injection` in its
``raise`` mode (a real ``SIGKILL`` at a charge is covered by ``tests/test_operations.py``), one point
after the other: each run resumes the stopped one and stops at the next point. The points are cut into two
halves, each its own release id and module (this one and ``tests/test_crash_resume_late.py``), so that the
two test workers run them at once. Then each release id runs to the end: it holds exactly its plan (nothing charged twice, nothing lost), every charge has exactly one
stored answer, and the published numbers are the stored ones; a further run returns the stored release.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dpcore.run.cost_plan import plan_release
from dpcore.runtime.fault_injection import InjectedFault
from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.storage.warehouse import Warehouse
from owner_registration import register_spec

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]  # registers its own cap


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse))


@pytest.fixture
def crash_spec(dpr_home: Path, small_spec_path: Path, tmp_path: Path) -> Path:
    """Every charging step on the small table's first 1,000 rows, small enough to run many times (the size is
    not what is tested: a whole release takes about two thirds of the 3,000 rows' time; the detector off: it
    charges nothing; its tasks' boundaries are covered by the detect flow's own tests; coco over the 3 origins
    only: two measured levels, four pictures, the same tasks and charge points)."""
    spec = yaml.safe_load(small_spec_path.read_text())
    rows = Path(spec["dataset"]["source"]["path"]).read_text().splitlines()[:1001]  # the header and 1,000 flights
    source = tmp_path / "flights_1000.csv"
    source.write_text("\n".join(rows) + "\n")
    spec["dataset"]["source"]["path"] = str(source)
    steps = spec["steps"]
    steps["detect"]["enabled"] = False
    steps["rules"]["enabled"] = False
    steps["aiq"].update({"enabled": True, "record_ids": ["F000001", "F000002"], "from_detector": 0})
    steps["outlier_counts"]["enabled"] = True
    steps["coco"].update({"enabled": True, "max_group_size": 60, "levels": ["origin"]})
    steps["unattributed"].update({"enabled": True, "max_group_size": 60})
    steps["pcor"].update({"enabled": True, "record_ids": ["F000010"], "from_detector": 0, "n_samples": 5})
    spec["budget"]["epsilon"] = 1000
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(spec))
    register_spec(path)  # the data owner, with this spec's cap
    return path


def _points(spec: Path, tmp_path: Path, monkeypatch) -> list[str]:
    """Every fault point one release passes, in order (``before:`` points are the previous ``after:``)."""
    from flows.release_pipeline import release_pipeline

    log = tmp_path / "points.log"
    monkeypatch.setenv("DPR_FAULT_LOG", str(log))
    release_pipeline(spec_path=str(spec), release_id="probe")
    monkeypatch.delenv("DPR_FAULT_LOG")
    seen = list(dict.fromkeys(log.read_text().split()))
    # after the run's outcome is stored the release is finished: a stop there is a finished release
    return [p for p in seen if not p.startswith("before:") and p != "after:finish-release-run"]


def _published_equals_stored(led: PrivacyLedger, rid: str, bundle: Path) -> None:
    rows = led.wh.query(
        "SELECT c.key, c.status, o.payload FROM ledger.charges c LEFT JOIN releases.outputs o USING (key) "
        "WHERE c.release_id = ?", [rid])
    assert rows and all(status == "released" and payload is not None for _, status, payload in rows), rows
    stored = {json.loads(p)["noisy_count"] for _, _, p in rows if "noisy_count" in json.loads(p)}
    table = pd.read_csv(bundle / "tables" / "outlier_counts__counts.csv")
    assert set(table["noisy_count"]) <= stored | {float(v) for v in stored}
    counts = [json.loads(p) for _, _, p in rows if "accepted_rows" in json.loads(p)]
    published = pd.read_csv(bundle / "tables" / "record_counts__counts.csv")
    assert counts == [dict(zip(published["cell"], published["noisy_count"]))]


def run_chain(spec: Path, tmp_path: Path, monkeypatch, part: int, parts: int = 2) -> None:
    """Stop one release id at each point of the ``part``-th of ``parts`` consecutive slices of the fault points
    in turn (the first stop of a later slice is a fresh release stopped there), then run it to the end: after
    every stop the ledger is consistent and the release holds all of its plan or nothing; at the end it holds
    exactly its plan, every charge has exactly one stored answer, the published numbers are the stored ones,
    and a further run is the stored release. The slices run in two modules (two test workers)."""
    from flows.release_pipeline import release_pipeline

    points = _points(spec, tmp_path, monkeypatch)
    steps = {p.split(":", 1)[1] for p in points if p.startswith("charged:")}
    assert {"record_counts", "aiq", "outlier_subspaces", "outlier_count", "coco_level0", "unattributed"} <= steps
    assert {"after:ingest", "after:cost-preflight", "after:pcor-reserve", "after:bundle"} <= set(points)
    size = -(-len(points) // parts)
    mine = points[part * size:(part + 1) * size]
    assert mine, (part, parts, len(points))
    rid = f"crash-chain-{part}"
    led = _ledger()
    plan = plan_release(load_spec(spec, release_id=rid), led)
    spent = led.status("nycflights13").spent
    monkeypatch.setenv("DPR_FAULT_MODE", "raise")
    for point in mine:
        monkeypatch.setenv("DPR_FAULT_AT", point)
        with pytest.raises(InjectedFault):
            release_pipeline(spec_path=str(spec), release_id=rid)
        led = _ledger()
        assert led.spent_exact("nycflights13") == led.status("nycflights13").spent, point
        held = led.release_holds("nycflights13", rid)[0]
        assert held in (plan.total, type(held)(0)), point  # all of the plan, or nothing yet
        assert led.status("nycflights13").spent == spent + held, point
        done = led.wh.query("SELECT count(*) FROM ledger.charges c JOIN releases.outputs o USING (key) "
                            "WHERE c.release_id = ? GROUP BY c.key HAVING count(*) > 1", [rid])
        assert done == [], point  # never two answers for one charge
    monkeypatch.delenv("DPR_FAULT_AT")
    out = release_pipeline(spec_path=str(spec), release_id=rid)
    assert not out["stored_release"]
    led = _ledger()
    assert led.release_holds("nycflights13", rid)[0] == plan.total  # nothing twice, nothing lost
    assert led.status("nycflights13").spent == spent + plan.total
    _published_equals_stored(led, rid, Path(out["bundle"]))
    again = release_pipeline(spec_path=str(spec), release_id=rid)
    assert again["stored_release"] and again["bundle"] == out["bundle"]


@pytest.mark.timeout(1800)
def test_a_release_stopped_at_every_early_point_in_turn_completes_within_its_plan(dpr_home, crash_spec, tmp_path,
                                                                                 monkeypatch):
    """The first half of the fault points (ingest to the middle of the steps); the second half is
    ``tests/test_crash_resume_late.py``."""
    run_chain(crash_spec, tmp_path, monkeypatch, part=0)
