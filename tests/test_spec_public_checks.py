"""Issue 15, hole 9: specs whose steps could abort on a private fact are refused when they load.

A step needing a value in every row must not use a nullable attribute, and a ``log`` transform needs a
public minimum above 0: decided from the spec alone (``dpcore.spec._public_completeness_problems``), so
no input can make one run abort and its neighbour succeed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpcore.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1]


def _spec(tmp_path: Path, edit) -> Path:
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["dataset"]["roster"]["file"] = str(ROOT / "specs" / "demo_roster.csv")
    edit(spec)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_demo_spec_passes(tmp_path):
    load_spec(_spec(tmp_path, lambda s: None))


def _log_on_min_zero(s):
    s["steps"]["detect"]["templates"][0]["transforms"] = {"distance": "log"}  # distance: min 0


def _log_on_positive_min(s):
    s["schema"]["numeric"]["distance"]["min"] = 1
    s["steps"]["detect"]["templates"][0]["transforms"] = {"distance": "log"}


def _nullable_metric(s):
    s["steps"]["pcor"]["metric"] = "arr_delay"
    s["schema"]["numeric"]["arr_delay"]["nullable"] = True


def _nullable_pcor_attribute(s):
    s["steps"]["pcor"]["attributes"] = ["carrier", "tailnum"]  # tailnum is nullable


def _nullable_detect(s):
    s["schema"]["numeric"]["dep_delay"]["nullable"] = True  # contextual of the 2nd template


def _nullable_aiq(s):
    s["steps"]["aiq"]["enabled"] = True
    s["schema"]["numeric"]["air_time"]["nullable"] = True


def _nullable_outlier_counts(s):
    s["steps"]["detect"]["enabled"] = False
    s["steps"]["aiq"]["enabled"] = False
    s["steps"]["pcor"]["enabled"] = False
    s["steps"]["outlier_counts"]["enabled"] = True
    s["schema"]["numeric"]["distance"]["nullable"] = True


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (_log_on_min_zero, r"steps\.detect\.templates\[0\]\.transforms\.distance: log needs a public min > 0"),
        (_nullable_metric, r"steps\.pcor\.metric \['arr_delay'\] are nullable"),
        (_nullable_pcor_attribute, r"steps\.pcor\.attributes \['tailnum'\] are nullable"),
        (_nullable_detect, r"steps\.detect\.templates\[1\] attributes \['dep_delay'\] are nullable"),
        (_nullable_aiq, r"steps\.aiq\.attributes \['air_time'\] are nullable"),
        (_nullable_outlier_counts, r"steps\.outlier_counts attributes \['distance'\] are nullable"),
    ],
)
def test_specs_that_could_abort_on_private_facts_are_refused_at_load(tmp_path, edit, fragment):
    with pytest.raises(SpecError, match=fragment):
        load_spec(_spec(tmp_path, edit))


def test_a_log_with_a_positive_public_min_and_disabled_steps_are_fine(tmp_path):
    load_spec(_spec(tmp_path, _log_on_positive_min))

    def nullable_but_disabled(s):
        s["steps"]["pcor"]["enabled"] = False
        s["steps"]["aiq"]["enabled"] = False
        s["steps"]["pcor"]["metric"] = "arr_delay"
        s["schema"]["numeric"]["arr_delay"]["nullable"] = True
        s["steps"]["detect"]["enabled"] = False
        s["steps"]["outlier_counts"]["enabled"] = False

    load_spec(_spec(tmp_path, nullable_but_disabled))
