"""``dpr validation show`` (issue 32, section 5): the data owner reads the stored validation result.

The result a run stores (the ingest and validate stages, as ``dpr run`` calls them) is read
back through the installed ``dpr``: per failed rule its name, column, number of failing rows
and every failing data row (also beyond the summary's examples), with the public bounds of
``in_bounds``; never a cell value or a record id.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from owner_registration import register_spec

DPR = str(Path(sys.executable).parent / "dpr")
SECRET_WAGE = "987654"  # the out-of-bounds cells: never printed
SECRET_ID = "Q-SECRET-"  # record ids of the failing rows: never printed


def dpr(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}
    env.update(DPR_HOME=str(home), COLUMNS="200")
    return subprocess.run([DPR, *args], env=env, capture_output=True, text=True, timeout=300)


def write_spec(folder: Path, wage_max: float = 5000) -> Path:
    spec = {
        "release_id": "v-r1",
        "dataset": {"name": "wages", "source": {"kind": "csv", "path": "wages.csv", "delimiter": ";"},
                    "record_id": "id"},
        "schema": {"categorical": {"sector": {"domain": ["A", "B", "C"]}},
                   "numeric": {"wage": {"min": 0, "max": wage_max}}},
        "budget": {"epsilon": 1.0},
        "steps": {"validation": {"examples_per_rule": 2}, "record_counts": {"epsilon": 0.1}},
    }
    path = folder / "wages.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A home whose warehouse holds the validation of a 30-row file: wage out of bounds on data rows
    4, 5, 6 and 20; sector out of its domain on row 9 (stored by the stages a run uses)."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    home = tmp_path / "home"
    monkeypatch.setenv("DPR_HOME", str(home))
    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    lines = ["id;sector;wage"]
    for i in range(1, 31):
        bad = i in (4, 5, 6, 20)
        lines.append(f"{SECRET_ID + str(i) if bad or i == 9 else f'p{i}'};{'Z' if i == 9 else 'A'};"
                     f"{SECRET_WAGE if bad else 1000 + i}")
    (tmp_path / "wages.csv").write_text("\n".join(lines) + "\n")
    spec_path = write_spec(tmp_path)
    register_spec(spec_path)
    spec, settings = load_spec(spec_path), Settings.from_env()
    validate_stage(spec, settings, ingest_stage(spec, settings))
    return home, spec_path


def test_show_prints_each_failed_rule_with_its_count_and_every_data_row(stored):
    home, spec_path = stored
    res = dpr("validation", "show", "--spec", str(spec_path), home=home)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "dataset wages: latest validation stored" in out and "made under this spec's current rules" in out
    assert "validation: 30 rows, 25 valid, 5 rejected" in out
    assert "1 = the first row after the header" in out
    wage = next(ln for ln in out.splitlines() if "in_bounds" in ln)
    # all four rows (the summary kept 2 examples), as ranges, the count and the public bounds
    for cell in ("wage", "4 rows", "4-6, 20", "outside the public bounds [0, 5000]"):
        assert cell in wage, (cell, wage)
    sector = next(ln for ln in out.splitlines() if "in_domain" in ln)
    assert "sector" in sector and "1 row " in sector and " 9 " in sector
    assert "do not publish" in out
    assert SECRET_WAGE not in out + res.stderr and SECRET_ID not in out + res.stderr


def test_show_as_json_lists_every_row_and_without_spec_every_dataset(stored):
    home, _ = stored
    res = dpr("validation", "show", "--json", home=home)
    assert res.returncode == 0, res.stderr
    (entry,) = json.loads(res.stdout)
    assert entry["dataset"] == "wages" and entry["n_rejected"] == 5
    fails = {(f["rule"], f["column"]): f for f in entry["row_failures"]}
    assert fails[("in_bounds", "wage")]["rows"] == [4, 5, 6, 20] and fails[("in_bounds", "wage")]["count"] == 4
    assert fails[("in_bounds", "wage")]["bounds"] == [0, 5000]
    assert fails[("in_domain", "sector")]["rows"] == [9]
    assert SECRET_WAGE not in res.stdout and SECRET_ID not in res.stdout


def test_show_says_when_the_spec_changed_and_refuses_without_a_result(stored, tmp_path):
    home, spec_path = stored
    changed = write_spec(tmp_path, wage_max=9000)  # the owner widened the bounds since the run
    res = dpr("validation", "show", "--spec", str(changed), home=home)
    assert res.returncode == 0 and "made under other rules than this spec's current ones" in res.stdout, res.stdout
    empty = dpr("validation", "show", home=tmp_path / "fresh")
    assert empty.returncode == 2 and "nothing has been validated" in empty.stderr, empty.stderr
    other = yaml.safe_load(spec_path.read_text())
    other["dataset"]["name"] = "other"
    (tmp_path / "o.yaml").write_text(yaml.safe_dump(other))
    none = dpr("validation", "show", "--spec", str(tmp_path / "o.yaml"), home=home)
    assert none.returncode == 2 and "of dataset 'other'" in none.stderr, none.stderr


def test_help_marks_the_command_owner_only():
    res = dpr("validation", "show", "--help", home=Path("/nonexistent"))
    assert res.returncode == 0 and "data owner only" in res.stdout
