"""The detect step under a real Prefect API: internal tables written, nothing of
them in the bundle, the logs or the artifacts; AIQ can query flagged records."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.storage.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _internal_tables(wh: Warehouse) -> set[str]:
    return {r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'internal'")}


async def _artifact_texts(run_id: str) -> list[str]:
    """The artifacts of one flow run (other tests' releases publish detector-chosen ids by design)."""
    from child_runs import read_runs

    _logs, arts, _runs, _tasks = await read_runs([run_id])
    return [json.dumps(a.data, default=str) + str(a.description or "") for a in arts]


def test_detect_flow_writes_internal_tables_only(dpr_home, small_spec_path, caplog):
    from flows.detect import detect_flow

    caplog.set_level("DEBUG")
    state = detect_flow(spec_path=str(small_spec_path), return_state=True)
    names = state.result()
    assert names == ["air_time_by_distance_origin", "arr_delay_by_dep_delay_carrier"]
    wh = Warehouse(Settings.from_env().warehouse)
    tables = _internal_tables(wh)
    scores_t = next(t for t in tables if t.startswith("detect_scores__"))
    flags_t = next(t for t in tables if t.startswith("detect_flags__"))
    vtable = scores_t.removeprefix("detect_scores__")
    n_valid = wh.query(f'SELECT count(*) FROM validated."{vtable}"')[0][0]
    per = dict(wh.query(f'SELECT template, count(*) FROM internal."{scores_t}" GROUP BY template'))
    assert per == {"air_time_by_distance_origin": n_valid, "arr_delay_by_dep_delay_carrier": n_valid}
    flags = wh.query_df(f'SELECT f.*, v.flight_id FROM internal."{flags_t}" f JOIN validated."{vtable}" v USING (_row) '
                        "ORDER BY f.max_score DESC")
    assert len(flags) == n_valid and flags["flagged"].any() and not flags["max_score"].isna().any()
    # a record is flagged iff at least one template labels it
    lab = wh.query_df(f'SELECT _row, max(label) AS any_label FROM internal."{scores_t}" GROUP BY _row')
    merged = flags.merge(lab, on="_row")
    assert len(merged) == n_valid
    assert (merged["flagged"] == (merged["any_label"] == 1)).all()
    models = wh.query_df("SELECT * FROM internal.detect_models")
    assert set(models["template"]) == set(names)
    params = json.loads(models["params"].iloc[0])
    assert {"coef", "intercept", "sigma2", "p", "b"} <= set(params)

    # nothing internal in logs or artifacts: flagged ids and their scores never appear
    top = flags.head(20)
    secrets = [str(i) for i in top["flight_id"]] + [f"{s:.6f}" for s in top["max_score"]]
    texts = caplog.text + "".join(asyncio.run(_artifact_texts(str(state.state_details.flow_run_id))))
    leaked = [s for s in secrets if s in texts]
    assert leaked == []


def test_pipeline_with_detector_feeds_aiq_and_bundle_carries_no_internal_values(dpr_home, small_spec_path, tmp_path):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"].update({"enabled": True, "record_ids": ["F000001"], "from_detector": 2, "points": []})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = release_pipeline(spec_path=str(path))
    bundle = Path(out["bundle"])
    answers = (bundle / "tables" / "aiq__answers.csv").read_text().splitlines()
    assert len(answers) == 1 + 1  # the listed id; the detector's two are the owner's (issue 28)
    owner = (bundle / "owner" / "aiq__detector_answers.csv").read_text().splitlines()
    assert len(owner) == 1 + 2 and not {ln.split(",")[0] for ln in owner[1:]} & {ln.split(",")[0] for ln in answers}
    led = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    ch = led.charges("nycflights13")
    aiq = ch[ch["step"] == "aiq"].iloc[0]
    # charged for the public bound (1 listed + 2 from the detector), not for the data-dependent count
    assert abs(aiq["stated_epsilon"] - 3 * 0.1) < 1e-12
    assert abs(aiq["epsilon"] - 2 * 3 * 0.1) < 1e-12  # add/remove, charged twice against the demo's replace-one cap
    report = (bundle / "report.md").read_text()
    assert "non-private detector" in report
    wh = Warehouse(Settings.from_env().warehouse)
    flags_t = next(t for t in _internal_tables(wh) if t.startswith("detect_flags__"))
    scores = wh.query_df(f'SELECT max_score FROM internal."{flags_t}" ORDER BY max_score DESC LIMIT 20')
    public = "".join(p.read_text(errors="ignore") for p in bundle.rglob("*")
                     if p.is_file() and p.suffix in {".csv", ".md", ".json"} and "owner" not in p.parts)
    assert not [s for s in scores["max_score"] if f"{s:.6f}" in public]


def test_a_template_on_too_few_rows_is_recorded_as_unfitted_not_skipped(dpr_home, small_spec_path, tmp_path):
    """A template the detector cannot fit for lack of rows is neither skipped silently nor an abort (how many
    rows passed validation is private, rule 8): its model row says ``too_few_rows`` and it flags no record."""
    from flows.detect import detect_flow

    spec = yaml.safe_load(small_spec_path.read_text())
    header_and_3_rows = Path(spec["dataset"]["source"]["path"]).read_text().splitlines()[:4]
    (tmp_path / "tiny.csv").write_text("\n".join(header_and_3_rows) + "\n")
    spec["dataset"]["source"]["path"] = str(tmp_path / "tiny.csv")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    names = detect_flow(spec_path=str(path))
    wh = Warehouse(Settings.from_env().warehouse)
    stored = dict(wh.query("SELECT template, params FROM internal.detect_models"))
    assert sorted(stored) == sorted(names) and len(names) == len(spec["steps"]["detect"]["templates"])
    assert all(json.loads(p)["diagnostics"][0]["code"] == "too_few_rows" for p in stored.values())
    flags_t = next(t for t in _internal_tables(wh) if t.startswith("detect_flags__"))
    assert wh.query(f'SELECT count(*) FILTER (WHERE flagged) FROM internal."{flags_t}"')[0][0] == 0


def test_template_transforms_reach_the_fit_and_bad_values_name_the_attribute(dpr_home, small_spec_path, tmp_path):
    """``transforms`` in the spec: the filter models log(air_time) ~ log(distance) + origin (stored in the
    internal model params); a log of an attribute whose public minimum is not above 0 is refused when the
    spec loads, naming the spec path (issue 15, hole 9: never a data-dependent abort)."""
    from dpcore.release.spec import SpecError
    from flows.detect import detect_flow

    spec = yaml.safe_load(small_spec_path.read_text())
    # public bounds above 0 (rows below them are quarantined by validation, so no row can reach log(0))
    spec["schema"]["numeric"]["air_time"]["min"] = 1
    spec["schema"]["numeric"]["distance"]["min"] = 1
    spec["steps"]["detect"]["templates"] = [
        {"name": "log_air_time", "behavioural": "air_time", "contextual": ["distance", "origin"],
         "transforms": {"air_time": "log", "distance": "log"}},
    ]
    path = tmp_path / "log.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert detect_flow(spec_path=str(path)) == ["log_air_time"]
    wh = Warehouse(Settings.from_env().warehouse)
    params = json.loads(wh.query_df("SELECT * FROM internal.detect_models")["params"].iloc[0])
    assert params["transforms"] == {"air_time": "log", "distance": "log"}
    assert params["features"][0] == "log(distance)"
    assert 0.7 < params["coef"][0] < 1.2  # air time grows about proportionally with distance

    spec["steps"]["detect"]["templates"] = [
        {"name": "log_delay", "behavioural": "arr_delay", "contextual": ["dep_delay"], "transforms": {"arr_delay": "log"}},
    ]
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=r"steps\.detect\.templates\[0\]\.transforms\.arr_delay: log needs a public min > 0"):
        detect_flow(spec_path=str(path))
