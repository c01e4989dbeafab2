"""The owner-only ``rules`` step and the ``explain_rules`` operator flow (issue 18): units in the spec, wiring,
owner-only outputs, and no rule text, threshold or score in any public file, artifact, log or state."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from child_runs import flushed_texts, read_runs
from dpcore.storage.settings import Settings
from dpcore.release.spec import SpecError, load_spec
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, spec: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


# ----------------------------------------------------------------------------- spec: units
def test_demo_spec_declares_units_and_enables_rules():
    spec = load_spec(ROOT / "specs" / "demo.yaml")
    assert {a: v.unit for a, v in spec.public_schema.numeric.items()} == {
        "distance": "mile", "air_time": "minute", "dep_delay": "minute", "arr_delay": "minute"}
    assert spec.steps.rules.enabled and spec.steps.rules.max_depth == 2


def test_unknown_unit_and_unit_on_a_categorical_attribute_are_spec_errors(small_spec_path, tmp_path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["schema"]["numeric"]["distance"]["unit"] = "furlongz"
    with pytest.raises(SpecError, match=r"schema\.numeric\.distance\.unit.*furlongz"):
        load_spec(_write(tmp_path, spec))
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["schema"]["categorical"]["origin"]["unit"] = "mile"
    with pytest.raises(SpecError, match=r"schema\.categorical\.origin.*a unit applies to numeric attributes only"):
        load_spec(_write(tmp_path, spec))


def test_rules_need_detection_and_units(small_spec_path, tmp_path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"] = {"enabled": True, "templates": ["nope"]}
    with pytest.raises(SpecError) as exc:
        load_spec(_write(tmp_path, spec))
    assert "steps.rules explains the detector's outliers: it needs steps.detect.enabled" in str(exc.value)
    assert "steps.rules.templates ['nope']" in str(exc.value)
    spec = yaml.safe_load(small_spec_path.read_text())
    for attr in spec["schema"]["numeric"].values():
        attr.pop("unit", None)
    with pytest.raises(SpecError, match="no numeric attribute declares a unit"):
        load_spec(_write(tmp_path, spec))


# ----------------------------------------------------------------------------- flows
def _public_texts(bundle: Path) -> str:
    """Every public file of a bundle as text (the owner/ folder excluded)."""
    parts = []
    for f in sorted(bundle.rglob("*")):
        if f.is_file() and "owner" not in f.relative_to(bundle).parts:
            if f.suffix == ".parquet":
                parts.append(pd.read_parquet(f).to_csv())
            elif f.suffix != ".png":
                parts.append(f.read_text())
    return "\n".join(parts)


def _secrets(rules: pd.DataFrame) -> list[str]:
    """Rule texts, thresholds and scores as they could appear in text."""
    found = []
    for r in rules.itertuples():
        if r.rule:
            found.append(r.rule)
            found += re.findall(r"\d+\.\d+", r.rule)
        for v in (r.precision, r.recall, r.f1):
            if v == v and 0 < v < 1:
                found += [f"{v:.3f}", f"{v:.4g}", repr(float(v))]
    return [s for s in found if len(s) >= 4]


@pytest.mark.usefixtures("prefect_harness")
def test_release_writes_rules_for_the_owner_only(dpr_home, small_spec_path):
    from flows.release_pipeline import release_pipeline

    state = release_pipeline(spec_path=str(small_spec_path), return_state=True)
    assert state.is_completed()
    bundle = Path(state.result()["bundle"])
    rules = pd.read_csv(bundle / "owner" / "outlier_rules.csv")
    spec = load_spec(small_spec_path)
    assert set(rules["template"]) == {t.name for t in spec.steps.detect.templates}
    real = rules[rules["rule"].notna()]
    assert len(real) > 0 and (real["rank"] >= 1).all() and real["f1"].between(0, 1).all()
    assert real.groupby("template")["f1"].apply(lambda f: f.is_monotonic_decreasing).all()  # best F1 first
    stored = Warehouse(Settings.from_env().warehouse).query_df("SELECT * FROM internal.outlier_rules")
    assert len(stored) == len(rules)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "owner/outlier_rules.csv" in manifest["files"]
    report = (bundle / "report.md").read_text()
    assert "## Outlier rules (data owner only)" in report

    secrets = _secrets(real)
    assert secrets
    public = _public_texts(bundle)
    assert [s for s in secrets if s in public] == []
    run_id = str(state.state_details.flow_run_id)
    logs, states = flushed_texts(run_id, "outlier rules mined for templates")
    assert any("outlier rules mined for templates" in m for m in logs)
    import asyncio

    _logs, arts, _runs, _tasks = asyncio.run(read_runs([run_id]))
    texts = logs + states + [json.dumps(a.data, default=str) + str(a.description) for a in arts]
    assert [s for s in secrets if any(s in t for t in texts)] == []


@pytest.mark.usefixtures("prefect_harness")
def test_explain_rules_flow_writes_an_owner_only_folder(dpr_home, small_spec_path):
    from flows.explain_rules import explain_rules

    out = explain_rules(template="air_time_by_distance_origin", max_depth=2, max_rules=5,
                        spec_path=str(small_spec_path))
    assert out["templates"] == ["air_time_by_distance_origin"]
    path = Path(out["owner_file"])
    assert path.parent.name == "owner" and path.is_file()
    rules = pd.read_csv(path)
    assert set(rules["template"]) == {"air_time_by_distance_origin"} and len(rules) <= 5
    assert set(out) == {"templates", "owner_file"}  # the flow's result names files, never a rule
    text = (path.parent.parent / "report.md").read_text()
    assert [s for s in _secrets(rules[rules["rule"].notna()]) if s in text] == []
