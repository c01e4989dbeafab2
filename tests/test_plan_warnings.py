"""Plan-time warnings from public parameters only (issue 32, section 4), unit and through the installed ``dpr``."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpcore.mechanisms.aiq import AnomalyIdentification
from dpcore.run.plan_warnings import (
    AIQ_COIN_FLIP, aiq_coin_flip_warnings, outlier_radius_grid_warnings, parameter_warnings, pcor_utility_warnings,
)
from dpcore.release.spec import PcorSpec, load_spec

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")


def _spec(small_spec_path: Path, tmp_path: Path, edit) -> Path:
    spec = yaml.safe_load(small_spec_path.read_text())
    edit(spec["steps"])
    path = tmp_path / "warn.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_aiq_warning_uses_the_mechanism_s_own_error_bound(small_spec_path, tmp_path):
    def edit(steps):
        steps["aiq"].update(enabled=True, epsilon=0.1, mechanism="sp")

    (w,) = aiq_coin_flip_warnings(load_spec(_spec(small_spec_path, tmp_path, edit)))
    p = AnomalyIdentification(5, 0.02, 0.1).max_error_probability()
    assert f"{p:.3f}" == "0.475" and "0.475" in w and "steps.aiq.epsilon = 0.1" in w
    assert f"{math.log(9):.2f}" in w  # the epsilon that brings the worst case to 0.1

    def fine(steps):
        steps["aiq"].update(enabled=True, epsilon=2.5)

    assert AnomalyIdentification(5, 0.02, 2.5).max_error_probability() < AIQ_COIN_FLIP
    assert aiq_coin_flip_warnings(load_spec(_spec(small_spec_path, tmp_path, fine))) == []


def test_outlier_radius_below_one_grid_step_warns(small_spec_path, tmp_path):
    # integers: distance in [0, 5000] (one mile = 1/5000 = 0.0002 in 1-D dist_S units), air_time in [0, 720]
    # (one minute = 0.00139)
    def small_r(steps):
        steps["outlier_counts"].update(enabled=True, attributes=["distance", "air_time"], r=0.0001, subspace_dim=1)

    ws = outlier_radius_grid_warnings(load_spec(_spec(small_spec_path, tmp_path, small_r)))
    assert len(ws) == 2 and "'distance'" in ws[0] and "0.0002" in ws[0] and "k = 3" in ws[0]
    assert "'air_time'" in ws[1] and "0.00139" in ws[1]

    def mid_r(steps):  # spans a mile, not a minute
        steps["outlier_counts"].update(enabled=True, attributes=["distance", "air_time"], r=0.001, subspace_dim=1)

    (w,) = outlier_radius_grid_warnings(load_spec(_spec(small_spec_path, tmp_path, mid_r)))
    assert "'air_time'" in w

    def in_2d(steps):  # in a 2-D subspace one minute is 0.00139 / sqrt(2) = 0.00098 apart: r = 0.001 spans it
        steps["outlier_counts"].update(enabled=True, attributes=["distance", "air_time"], r=0.001,
                                       subspace_dim=2, h=1)

    assert outlier_radius_grid_warnings(load_spec(_spec(small_spec_path, tmp_path, in_2d))) == []

    def demo_r(steps):
        steps["outlier_counts"].update(enabled=True)  # the demo's r = 0.002 spans a step of every attribute

    assert outlier_radius_grid_warnings(load_spec(_spec(small_spec_path, tmp_path, demo_r))) == []


def test_pcor_population_utility_warns_and_overlap_is_the_default(small_spec_path, tmp_path):
    assert PcorSpec().utility == "overlap"  # chosen by benchmarks/pcor_default.py (BENCHMARKS.md)

    def pop(steps):
        steps["pcor"].update(enabled=True, utility="population")

    (w,) = pcor_utility_warnings(load_spec(_spec(small_spec_path, tmp_path, pop)))
    assert "all-'any'" in w and "steps.pcor.utility = population" in w

    def overlap(steps):
        steps["pcor"].update(enabled=True, utility="overlap")

    assert pcor_utility_warnings(load_spec(_spec(small_spec_path, tmp_path, overlap))) == []


def test_the_demo_spec_uses_the_chosen_pcor_utility():
    demo = load_spec(ROOT / "specs" / "demo.yaml")
    assert demo.steps.pcor.utility == "overlap" and pcor_utility_warnings(demo) == []


def test_dpr_plan_prints_the_warnings_and_lists_them_in_json(small_spec_path, tmp_path):
    def edit(steps):
        steps["aiq"].update(enabled=True, epsilon=0.1)
        steps["outlier_counts"].update(enabled=True, attributes=["distance", "air_time"], r=0.0001)
        steps["pcor"].update(enabled=True, utility="population")

    spec = _spec(small_spec_path, tmp_path, edit)
    expected = parameter_warnings(load_spec(spec))
    assert len(expected) == 4  # aiq, two integer attributes, pcor
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_")}
    env.update(DPR_HOME=str(tmp_path / "home"), COLUMNS="400")
    # a fresh home: the dataset is not registered, so the plan is refused (exit 2), and still warns
    res = subprocess.run([DPR, "plan", str(spec), "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2, res.stderr
    assert json.loads(res.stdout)["warnings"] == expected
    res = subprocess.run([DPR, "plan", str(spec)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "is not registered" in res.stderr, res.stderr
    text = " ".join(res.stdout.split())
    for w in expected:
        assert f"warning: {' '.join(w.split())}" in text
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()  # the plan created no warehouse
