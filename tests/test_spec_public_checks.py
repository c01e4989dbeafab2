"""Issue 15, hole 9: specs whose steps could abort on a private fact are refused when they load.

A step needing a value in every row must not use a nullable attribute, and a ``log`` transform needs a
public minimum above 0: decided from the spec alone (``dpcore.release.spec.public_completeness_problems``, applied
by the loader to enabled steps and by each step to itself), so no input can make one run abort and its
neighbour succeed.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpcore.release.spec import SpecError, load_spec

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
    s["steps"]["rules"]["enabled"] = False  # the owner-only rules explain the detector's flags
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
        s["steps"]["rules"]["enabled"] = False
        s["steps"]["outlier_counts"]["enabled"] = False

    load_spec(_spec(tmp_path, nullable_but_disabled))


def test_every_detector_transform_has_a_public_domain_rule():
    """A transform the detector knows but the spec cannot check would be refused only by the data."""
    from dpcore.detect.design import TRANSFORMS
    from dpcore.release.spec import TRANSFORM_DOMAINS

    assert set(TRANSFORMS) == set(TRANSFORM_DOMAINS)


def _bypassed(spec, step: str, **nullable_or_min):
    """``spec`` with schema edits and ``steps.<step>`` disabled, built WITHOUT validation (model_copy)."""
    schema = spec.public_schema
    numeric = dict(schema.numeric)
    categorical = dict(schema.categorical)
    for name, update in nullable_or_min.items():
        if name in numeric:
            numeric[name] = numeric[name].model_copy(update=update)
        else:
            categorical[name] = categorical[name].model_copy(update=update)
    schema = schema.model_copy(update={"numeric": numeric, "categorical": categorical})
    section = getattr(spec.steps, step).model_copy(update={"enabled": False})
    steps = spec.steps.model_copy(update={step: section})
    return spec.model_copy(update={"public_schema": schema, "steps": steps})


def _with_log(spec):
    t0 = spec.steps.detect.templates[0].model_copy(update={"transforms": {"distance": "log"}})  # distance: min 0
    detect = spec.steps.detect.model_copy(update={"templates": [t0, *spec.steps.detect.templates[1:]]})
    return spec.model_copy(update={"steps": spec.steps.model_copy(update={"detect": detect})})


@pytest.mark.parametrize(
    "step, build, path",
    [
        ("detect", lambda s: _bypassed(s, "detect", dep_delay={"nullable": True}), "steps.detect.templates[1] attributes"),
        ("detect", lambda s: _bypassed(_with_log(s), "detect"), "steps.detect.templates[0].transforms.distance: log"),
        ("aiq", lambda s: _bypassed(s, "aiq", air_time={"nullable": True}), "steps.aiq.attributes"),
        ("outlier_counts", lambda s: _bypassed(s, "outlier_counts", distance={"nullable": True}),
         "steps.outlier_counts attributes"),
        ("pcor", lambda s: _bypassed(s, "pcor", arr_delay={"nullable": True}), "steps.pcor.metric"),
        ("pcor", lambda s: _bypassed(s, "pcor", carrier={"nullable": True}), "steps.pcor.attributes"),
    ],
)
def test_each_step_applies_the_same_public_rules_to_itself(tmp_path, step, build, path):
    """One place for the rules (``dpcore.release.spec.public_completeness_problems``): a step about to run refuses a
    spec that bypassed the loader with exactly the loader's message, whether or not it is enabled, before any
    data is read (settings and input are not even given)."""
    from dpcore.release.spec import public_completeness_problems
    from dpcore.steps.aiq import check_aiq
    from dpcore.steps.common import StepInputError
    from dpcore.steps.detect import detection_frame
    from dpcore.steps.outlier_counts import check_outlier_counts
    from dpcore.steps.pcor import check_pcor

    run = {
        "detect": lambda s: detection_frame(s, None, None),
        "aiq": check_aiq, "outlier_counts": check_outlier_counts, "pcor": check_pcor,
    }[step]
    spec = build(load_spec(_spec(tmp_path, lambda s: None)))
    # the step is disabled: the loader's rule does not look at it (other enabled steps may share the attribute)
    assert not any(p.startswith(path) for p in public_completeness_problems(spec))
    problems = public_completeness_problems(spec, [step])
    assert any(p.startswith(path) for p in problems)
    with pytest.raises(StepInputError) as err:
        run(spec)
    assert str(err.value) == "; ".join(problems)
