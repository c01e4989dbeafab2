"""Issue 28, section 4: the records the non-private detector chooses are the data owner's by default.

With ``from_detector`` set (AIQ, PCOR; the demo sets both) the public bundle,
the Prefect logs, artifacts and run records name no detector-chosen id, nor
tell how many the detector chose; the answers about those records go to the
bundle's ``owner/`` folder at the same charges. ``publish_detector_chosen_ids:
true`` publishes them, and ``dpr plan`` warns about it.
"""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from dpcore.run.plan_warnings import plan_warnings
from dpcore.release.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("prefect_harness")

LISTED = "F000001"  # on the tests' roster and valid in the small sample


def _spec(small_spec_path: Path, tmp_path: Path, name: str, publish: bool = False) -> Path:
    spec = yaml.safe_load(small_spec_path.read_text())
    steps = spec["steps"]
    steps["rules"]["enabled"] = False  # owner-only step with its own tests; not needed here
    steps["aiq"].update({"enabled": True, "record_ids": [LISTED], "from_detector": 2,
                         "publish_detector_chosen_ids": publish})
    steps["pcor"].update({"enabled": True, "record_ids": [LISTED], "from_detector": 2, "n_samples": 10,
                          "epsilon": 0.1, "publish_detector_chosen_ids": publish})
    spec["release_id"] = f"detowner-{name}"
    path = tmp_path / f"spec-{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(spec_path: Path, home: Path, monkeypatch) -> tuple[Path, str, dict]:
    from flows.release_pipeline import release_pipeline

    monkeypatch.setenv("DPR_HOME", str(home))
    from owner_registration import register_spec

    register_spec(spec_path)  # the data owner, before the run (an identical registration again is accepted)
    state = release_pipeline(spec_path=str(spec_path), return_state=True)
    out = state.result()
    return Path(out["bundle"]), str(state.state_details.flow_run_id), out


def _public_texts(bundle: Path) -> dict[str, str]:
    """Every public file of the bundle as text (Parquet tables as CSV text); ``owner/`` left out."""
    texts = {}
    for p in sorted(bundle.rglob("*")):
        rel = p.relative_to(bundle)
        if p.is_dir() or rel.parts[0] == "owner":
            continue
        if p.suffix == ".parquet":
            texts[str(rel)] = pd.read_parquet(p).to_csv(index=False)
        elif p.suffix == ".png":
            texts[str(rel)] = p.read_bytes().decode("latin-1")
        else:
            texts[str(rel)] = p.read_text()
    return texts


def _prefect_texts(run_id: str) -> str:
    """Logs, artifacts, flow and task run records (names, state messages) of one flow run, as text."""
    from child_runs import read_runs

    logs, arts, runs, tasks = asyncio.run(read_runs([run_id]))
    parts = [str(lg.message) for lg in logs]
    parts += [json.dumps(a.data, default=str) + str(a.description or "") for a in arts]
    for r in [*runs, *tasks]:
        parts += [str(r.name), str(r.state.message if r.state else ""), json.dumps(
            r.state.state_details.model_dump(mode="json") if r.state else {}, default=str)]
    return "\n".join(parts)


def _chosen(bundle: Path) -> tuple[list[str], list[str]]:
    """The detector-chosen ids of the owner files (AIQ queries, PCOR records; empty slots left out)."""
    aiq = pd.read_csv(bundle / "owner" / "aiq__detector_answers.csv", dtype=str)
    pcor = pd.read_csv(bundle / "owner" / "pcor__detector_explanations.csv", dtype=str, keep_default_na=False)
    return ([q.removeprefix("record:") for q in aiq["query"]], [r for r in pcor["record_id"] if r])


def _charges(bundle: Path) -> list[tuple]:
    ch = pd.read_csv(bundle / "tables" / "ledger_charges.csv")
    return sorted(zip(ch["step"], ch["mechanism"], ch["epsilon"], ch["delta"], ch["status"]))


def _shape(bundle: Path) -> dict[str, int]:
    """Public table files and their row counts."""
    return {p.name: len(pd.read_csv(p)) for p in sorted((bundle / "tables").glob("*.csv"))}


def test_detector_chosen_ids_are_owner_only_by_default(small_spec_path, tmp_path, monkeypatch):
    bundle, run_id, out = _run(_spec(small_spec_path, tmp_path, "default"), tmp_path / "home-a", monkeypatch)
    aiq_ids, pcor_ids = _chosen(bundle)
    assert len(aiq_ids) == 2 and len(pcor_ids) >= 1 and LISTED not in aiq_ids + pcor_ids
    owner = pd.read_csv(bundle / "owner" / "aiq__detector_answers.csv")
    assert {"query", "anomaly", "max_error_probability"} <= set(owner.columns)
    # the public bundle: the listed record's answers only, and no detector-chosen id anywhere
    public = _public_texts(bundle)
    aiq = pd.read_csv(bundle / "tables" / "aiq__answers.csv", dtype=str)
    assert [q for q in aiq["query"] if q.startswith("record:")] == [f"record:{LISTED}"]
    pcor = pd.read_csv(bundle / "tables" / "pcor__explanations.csv", dtype=str)
    assert pcor["record_id"].tolist() == [LISTED]
    manifest = json.loads(public["manifest.json"])
    assert "owner/aiq__detector_answers.csv" in manifest["files"]
    assert "owner/pcor__detector_explanations.csv" in manifest["files"]
    assert "owner/pcor__detector_explanations.csv" in public["report.md"]
    texts = "\n".join(public.values()) + _prefect_texts(run_id) + json.dumps(out, default=str)
    leaked = sorted({i for i in aiq_ids + pcor_ids if re.search(rf"\b{i}\b", texts)})
    assert leaked == []
    # the charges are the spec's: AIQ's batch for 1 + 2 ids and the point, PCOR 1 + 2 charges
    steps = [r["step"] for r in manifest["releases"]]
    assert steps.count("pcor") == 3 and steps.count("aiq") == 1


def test_how_many_the_detector_chose_shows_nowhere_public(small_spec_path, tmp_path, monkeypatch):
    """The same release when the detector chooses nobody: the same charges and the same public tables."""
    import dpcore.steps.aiq as aiq_mod
    import dpcore.steps.pcor as pcor_mod

    spec = _spec(small_spec_path, tmp_path, "count")
    full, _, _ = _run(spec, tmp_path / "home-full", monkeypatch)
    assert _chosen(full)[1], "the detector should choose some PCOR record on the small sample"
    monkeypatch.setattr(aiq_mod, "flagged_records", lambda *a, **k: [])
    monkeypatch.setattr(pcor_mod, "detector_targets", lambda *a, **k: [])
    none, run_id, _ = _run(spec, tmp_path / "home-none", monkeypatch)
    assert _chosen(none) == ([], [])
    assert _charges(none) == _charges(full)
    assert _shape(none) == _shape(full)
    assert json.loads((none / "manifest.json").read_text())["files"] == json.loads(
        (full / "manifest.json").read_text())["files"]
    # every unfilled slot is answered like an absent record, for the owner only
    slots = pd.read_csv(none / "owner" / "pcor__detector_explanations.csv", dtype=str, keep_default_na=False)
    assert len(slots) == 2 and set(slots["status"]) == {"no_valid_context"} and set(slots["record_id"]) == {""}
    assert "2 record(s)" not in _prefect_texts(run_id) and "1 record(s)" not in _prefect_texts(run_id)


def test_the_switch_publishes_the_chosen_ids_and_plan_warns(small_spec_path, tmp_path, monkeypatch):
    path = _spec(small_spec_path, tmp_path, "publish", publish=True)
    bundle, _, _ = _run(path, tmp_path / "home-p", monkeypatch)
    assert not (bundle / "owner" / "aiq__detector_answers.csv").exists()
    assert not (bundle / "owner" / "pcor__detector_explanations.csv").exists()
    aiq = pd.read_csv(bundle / "tables" / "aiq__answers.csv", dtype=str)
    assert len([q for q in aiq["query"] if q.startswith("record:")]) == 3  # the listed id and the detector's 2
    pcor = pd.read_csv(bundle / "tables" / "pcor__explanations.csv", dtype=str)
    assert len(pcor) >= 2 and LISTED in set(pcor["record_id"])
    report = (bundle / "report.md").read_text()
    assert "non-private detector" in report and "not protected" in report
    # dpr plan warns, in text and in --json
    from dpr.plan_cmd import plan

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "plan-home"))
    res = CliRunner().invoke(plan, [str(path)])  # a fresh home: not registered (exit 2), the warnings come first
    assert res.exit_code == 2 and "is not registered" in res.output, res.output
    assert "warning: steps.aiq.publish_detector_chosen_ids is on" in res.output
    assert "warning: steps.pcor.publish_detector_chosen_ids is on" in res.output
    res = CliRunner().invoke(plan, [str(path), "--json"])
    warnings = [w for w in json.loads(res.stdout)["warnings"] if "publish_detector_chosen_ids" in w]
    assert len(warnings) == 2 and all("non-private detector" in w for w in warnings)


def test_the_demo_and_the_default_publish_no_detector_choice(small_spec_path, tmp_path, monkeypatch):
    demo = load_spec(ROOT / "specs" / "demo.yaml")
    assert demo.steps.aiq.from_detector and demo.steps.pcor.from_detector
    assert not demo.steps.aiq.publish_detector_chosen_ids and not demo.steps.pcor.publish_detector_chosen_ids
    assert plan_warnings(demo) == []
    from dpr.plan_cmd import plan

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "plan-home"))
    res = CliRunner().invoke(plan, [str(_spec(small_spec_path, tmp_path, "plain"))])
    assert res.exit_code == 2 and "is not registered" in res.output, res.output
    # no warning about publishing the detector's choice (the owner-only share's hint may name the key as an option)
    assert not [ln for ln in res.output.splitlines() if ln.startswith("warning:") and "publish_detector" in ln]
    on = load_spec(_spec(small_spec_path, tmp_path, "on", publish=True))
    assert len(plan_warnings(on)) == 2 and plan_warnings(on, steps=["pcor"])[0].startswith("steps.pcor.")
