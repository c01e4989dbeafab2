"""Issue 46.5 (third point): ``dpr plan`` marks each charge whose output reaches no public file.

With ``from_detector`` and ``publish_detector_chosen_ids`` off (the default) the detector-chosen records'
answers go to the bundle's ``owner/`` folder only: PCOR's detector slots are charged for explanations no
public file shows, and AIQ's batch charge pays partly for such answers. The plan says so, from the spec alone.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from dpcore.run.cost_plan import plan_release
from dpcore.release.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")


def _absolute(node):
    """The demo spec's files (roster, groups, domains) named by absolute paths, so a copy elsewhere reads them."""
    if isinstance(node, dict):
        return {k: _absolute(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_absolute(v) for v in node]
    if isinstance(node, str) and node.endswith(".csv") and (ROOT / "specs" / node).is_file():
        return str(ROOT / "specs" / node)
    return node


def _spec(tmp_path: Path, **steps) -> Path:
    spec = _absolute(yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text()))
    for section, values in steps.items():
        spec["steps"][section].update(values)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_owner_only_lines_are_marked_from_the_spec(tmp_path):
    plan = plan_release(load_spec(_spec(tmp_path, pcor={"record_ids": []}, aiq={})))
    marks = {(ln.section, "record_id" in ln.charge.match): ln.owner_only for ln in plan.lines
             if ln.section in ("steps.pcor", "steps.aiq")}
    assert marks == {("steps.pcor", False): "all", ("steps.aiq", False): "part"}
    pcor = next(ln for ln in plan.lines if ln.section == "steps.pcor")
    assert plan.new_owner_only == pcor.new_cost and pcor.new_cost.epsilon > 0
    assert plan.as_dict()["new_owner_only"]["epsilon"] == float(pcor.new_cost.epsilon)
    # published choice: nothing owner-only; aiq asking only the detector: all of it owner-only
    published = plan_release(load_spec(_spec(tmp_path, pcor={"publish_detector_chosen_ids": True},
                                             aiq={"publish_detector_chosen_ids": True})))
    assert {ln.owner_only for ln in published.lines} == {""} and published.new_owner_only.epsilon == 0
    only = plan_release(load_spec(_spec(tmp_path, aiq={"record_ids": [], "points": []})))
    assert next(ln for ln in only.lines if ln.section == "steps.aiq").owner_only == "all"


def test_dpr_plan_prints_the_output_column_and_the_owner_only_share(tmp_path):
    path = _spec(tmp_path)
    env = {"DPR_HOME": str(tmp_path / "home"), "PATH": str(Path(sys.executable).parent), "COLUMNS": "250"}
    got = subprocess.run([DPR, "plan", str(path)], capture_output=True, text=True, env=env)
    assert "owner only" in got.stdout and "output" in got.stdout
    assert "of which owner-only" in got.stdout and "from_detector: 0" in got.stdout
    got = subprocess.run([DPR, "plan", str(path), "--json"], capture_output=True, text=True, env=env)
    lines = json.loads(got.stdout)["lines"]
    assert {ln["step"]: ln["owner_only"] for ln in lines if ln["step"] in ("pcor", "aiq")} == {"pcor": "all",
                                                                                               "aiq": "part"}
