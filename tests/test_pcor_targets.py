"""Issue 16, part 3: which detector-flagged records PCOR explains.

``steps.pcor.from_detector`` chooses among the records flagged by the templates whose behavioural
attribute is the PCOR metric (or the one named by ``steps.pcor.from_template``, checked when the spec
loads), optionally only own-cell outliers of the verifier; ``flagged_records`` gains the template filter
and still publishes record-id order, never score order.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from dpcore.ingest.raw import IngestResult
from dpcore.release.spec import SpecError, load_spec, parse_spec, pcor_source_templates
from dpcore.steps.common import StepInputError
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]


def _demo(tmp_path: Path, edit=lambda s: None) -> Path:
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["dataset"]["roster"]["file"] = str(ROOT / "specs" / "demo_roster.csv")
    edit(spec)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))  # keep the schema's order: it sets the default metric
    return path


# --------------------------------------------------------------------------- spec: steps.pcor.from_template


def test_demo_defaults_to_the_templates_of_the_metric(tmp_path):
    spec = load_spec(_demo(tmp_path))
    assert spec.steps.pcor.from_template is None and spec.steps.pcor.from_detector_own_cell
    assert pcor_source_templates(spec) == ["arr_delay_by_dep_delay_carrier"]


def test_every_template_of_the_metric_in_spec_order(tmp_path):
    def two(s):
        s["steps"]["detect"]["templates"].insert(
            0, {"name": "arr_delay_by_carrier", "behavioural": "arr_delay", "contextual": ["carrier"]})

    spec = load_spec(_demo(tmp_path, two))
    assert pcor_source_templates(spec) == ["arr_delay_by_carrier", "arr_delay_by_dep_delay_carrier"]


def test_a_named_template_is_used_as_given(tmp_path):
    def named(s):
        s["steps"]["pcor"]["from_template"] = "air_time_by_distance_origin"  # the owner's choice, stated

    assert pcor_source_templates(load_spec(_demo(tmp_path, named))) == ["air_time_by_distance_origin"]


def _unknown_template(s):
    s["steps"]["pcor"]["from_template"] = "no_such_template"


def _unknown_template_pcor_disabled(s):
    s["steps"]["pcor"].update({"enabled": False, "from_template": "no_such_template"})


def _no_template_of_the_metric(s):
    s["steps"]["pcor"]["metric"] = "dep_delay"


def _default_metric_without_template(s):
    s["schema"]["numeric"] = {"distance": s["schema"]["numeric"].pop("distance"), **s["schema"]["numeric"]}
    del s["steps"]["pcor"]["metric"]  # default: the first numeric attribute, distance


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (_unknown_template, r"steps\.pcor\.from_template 'no_such_template' is not a template of steps\.detect\.templates"),
        (_unknown_template_pcor_disabled, r"steps\.pcor\.from_template 'no_such_template' is not a template"),
        (_no_template_of_the_metric, r"steps\.pcor\.from_detector: no template .* PCOR metric 'dep_delay'.*from_template"),
        (_default_metric_without_template, r"steps\.pcor\.from_detector: no template .* PCOR metric 'distance'"),
    ],
)
def test_bad_sources_are_refused_when_the_spec_loads(tmp_path, edit, fragment):
    with pytest.raises(SpecError, match=fragment):
        load_spec(_demo(tmp_path, edit))


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s["steps"]["pcor"].update({"metric": "dep_delay", "from_detector": 0, "record_ids": ["F000001"]}),
        lambda s: s["steps"]["pcor"].update({"metric": "dep_delay", "enabled": False}),
        lambda s: s["steps"]["pcor"].update({"metric": "dep_delay", "from_template": "arr_delay_by_dep_delay_carrier"}),
    ],
)
def test_no_template_of_the_metric_is_fine_when_nothing_is_chosen_from_it(tmp_path, edit):
    load_spec(_demo(tmp_path, edit))


# --------------------------------------------------------------------------- flagged_records with a template filter


def _two_template_spec():
    return parse_spec({
        "release_id": "t-r1",
        "dataset": {"name": "t", "source": {"kind": "csv", "path": "/nonexistent.csv"}, "record_id": "id"},
        "schema": {"numeric": {"x": {"min": 0, "max": 10}, "y": {"min": 0, "max": 10}}},
        "budget": {"epsilon": 1.0},
        "steps": {"detect": {"enabled": True, "templates": [
            {"name": "x_by_y", "behavioural": "x", "contextual": ["y"]},
            {"name": "y_by_x", "behavioural": "y", "contextual": ["x"]},
        ]}},
    })


@pytest.fixture
def scored(tmp_path):
    """Detector tables: x_by_y flags r4 (score 7), r1 (5), r3 (2); y_by_x flags r2 (99) and r5 (50)."""
    from dpcore.validation import validated_table_name

    spec = _two_template_spec()
    ing = IngestResult("t", "0123456789abcdef", "t__0123456789abcdef", "x" * 64)
    wh = Warehouse(tmp_path / "w.duckdb")
    ids = ["r1", "r2", "r3", "r4", "r5"]
    scores = pd.DataFrame({
        "id": ids * 2,
        "template": ["x_by_y"] * 5 + ["y_by_x"] * 5,
        "score": [5.0, 80.0, 2.0, 7.0, 1.0] + [0.5, 99.0, 90.0, 0.1, 50.0],
        "label": [1, 0, 1, 1, 0] + [0, 1, 0, 0, 1],  # r2: high x_by_y score but not labelled by it
    })
    flags = scores.groupby("id").agg(flagged=("label", "max"), max_score=("score", "max")).reset_index()
    flags["flagged"] = flags["flagged"].astype(bool)
    suffix = validated_table_name(ing, spec)
    # the tables are keyed by the validated table's _row (here the rows of r1.. r5 in reverse: not id order)
    rows = {i: 10 * (5 - k) for k, i in enumerate(ids)}
    wh.write_df("validated", suffix, pd.DataFrame({"_row": [rows[i] for i in ids], "id": ids}))
    wh.write_df("internal", f"detect_scores__{suffix}", scores.assign(id=scores["id"].map(rows)).rename(columns={"id": "_row"}))
    wh.write_df("internal", f"detect_flags__{suffix}", flags.assign(id=flags["id"].map(rows)).rename(columns={"id": "_row"}))
    return wh, spec, ing


def test_template_filter_keeps_that_templates_flags_in_id_order(scored):
    from dpcore.steps.detect import flagged_by_score, flagged_records

    wh, spec, ing = scored
    assert flagged_by_score(wh, spec, ing, ["x_by_y"]) == ["r4", "r1", "r3"]  # internal: score order
    assert flagged_records(wh, spec, ing, 2, ["x_by_y"]) == ["r1", "r4"]  # top two (7, 5), published by id
    assert flagged_records(wh, spec, ing, 10, ["x_by_y"]) == ["r1", "r3", "r4"]  # score order would be r4, r1, r3
    assert flagged_records(wh, spec, ing, 1, ["y_by_x"]) == ["r2"]
    # both templates: ranked by the highest score among the templates that flag the record
    assert flagged_by_score(wh, spec, ing, ["x_by_y", "y_by_x"]) == ["r2", "r5", "r4", "r1", "r3"]
    # no filter: the combined flags ranked by the max score over ALL templates, as before: r3 ranks second
    # on y_by_x's 90 although only x_by_y (score 2) flags it -- why PCOR filters by its metric's template
    assert flagged_records(wh, spec, ing, 2) == ["r2", "r3"]
    assert flagged_by_score(wh, spec, ing) == ["r2", "r3", "r5", "r4", "r1"]


def test_template_filter_refuses_names_not_in_the_spec(scored):
    from dpcore.steps.detect import flagged_records

    wh, spec, ing = scored
    with pytest.raises(StepInputError, match=r"\['nope'\] are not in steps\.detect\.templates"):
        flagged_records(wh, spec, ing, 2, ["nope"])


def test_no_detection_results_is_a_clear_error(tmp_path):
    from dpcore.steps.detect import flagged_records

    spec = _two_template_spec()
    ing = IngestResult("t", "0123456789abcdef", "t__0123456789abcdef", "x" * 64)
    with pytest.raises(StepInputError, match="run steps.detect first"):
        flagged_records(Warehouse(tmp_path / "w.duckdb"), spec, ing, 2, ["x_by_y"])


def test_the_choice_statement_names_templates_and_score():
    from dpcore.steps.detect import detector_choice_not_protected

    one = detector_choice_not_protected(3, ["arr_delay_by_dep_delay_carrier"], "that pass a check",
                                        "It reveals more.")
    assert ("the top 3, by the detector's own non-private score, of the records flagged by the template "
            "arr_delay_by_dep_delay_carrier that pass a check. It reveals more.") in one
    assert "record-id order" in one
    assert "of the records flagged by any template. Appearing" in detector_choice_not_protected(2)
    assert "templates a, b." in detector_choice_not_protected(2, ["a", "b"])
