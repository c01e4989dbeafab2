"""``dpr spec draft`` reading an owner's file (issue 32, section 5), through the installed ``dpr``.

Paths that resolve from the spec's folder, the delimiter (detected, given, written to
``dataset.source.delimiter`` and honoured by ``dpr spec check --data``), a one-column
draft of a many-field header refused, the budget flags checked, ``unit:`` placeholders,
every step that is off listed, and the owner's validation summary in data rows with
the public bounds. No Prefect server is needed: drafting and checking run no flow.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpcore.release.spec import DATA_MARKER, StepsSpec, load_spec

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")


def dpr(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run the installed ``dpr`` with a clean DPR_* environment (``DPR_SPECS_DIR`` from conftest kept)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}
    env.update(DPR_HOME=str(home), COLUMNS="200")
    return subprocess.run([DPR, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def people(sep: str = ",", n: int = 60, bad_wages: int = 0) -> str:
    """A person-level table: id, wage (whole numbers), sector (3 codes), age; the last ``bad_wages`` wages 99999."""
    rows = [sep.join(["person_id", "wage", "sector", "age"])]
    for i in range(n):
        wage = 99999 if i >= n - bad_wages else 1000 + 7 * i
        rows.append(sep.join([f"P{i:04d}", str(wage), "ABC"[i % 3], str(20 + i % 40)]))
    return "\n".join(rows) + "\n"


def public(text: str) -> str:
    """The owner's edit: every marked line confirmed public (marker deleted)."""
    return text.replace(f"  {DATA_MARKER}", "")


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def test_a_draft_on_standard_output_writes_paths_that_resolve_wherever_the_spec_is_saved(home, tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "specs"
    work.mkdir()
    elsewhere.mkdir()
    (work / "people.csv").write_text(people())
    (work / "sectors.csv").write_text("code\nA\nB\nC\nD\n")
    res = dpr("spec", "draft", "people.csv", "--id", "person_id", "--domain-from", "sector=sectors.csv:code",
              home=home, cwd=work)
    assert res.returncode == 0, res.stderr
    assert "paths are absolute" in res.stdout and "read from the spec file's folder" in res.stdout
    spec = elsewhere / "people.yaml"  # the owner saves the printed draft in another folder
    spec.write_text(public(res.stdout))
    loaded = load_spec(spec)
    assert Path(loaded.dataset.source.path) == (work / "people.csv").resolve()
    assert loaded.public_schema.categorical["sector"].domain == ["A", "B", "C", "D"]  # read from work/sectors.csv


def test_a_draft_written_with_o_resolves_from_its_own_folder(home, tmp_path):
    (tmp_path / "people.csv").write_text(people())
    (tmp_path / "sectors.csv").write_text("code\nA\nB\nC\n")
    (tmp_path / "out").mkdir()
    res = dpr("spec", "draft", "people.csv", "--id", "person_id", "--domain-from", "sector=sectors.csv:code",
              "-o", "out/people.yaml", home=home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "out" / "people.yaml").read_text()
    assert f"read from the spec file's folder ({tmp_path / 'out'})" in text
    loaded = load_spec(_published(tmp_path / "out" / "people.yaml"))
    assert Path(loaded.dataset.source.path) == (tmp_path / "people.csv").resolve()
    assert loaded.public_schema.categorical["sector"].domain == ["A", "B", "C"]


def _published(path: Path) -> Path:
    path.write_text(public(path.read_text()))
    return path


def test_a_semicolon_file_is_drafted_with_its_delimiter_and_checked_with_it(home, tmp_path):
    csv = tmp_path / "wages.csv"
    csv.write_text(people(";", bad_wages=3))
    res = dpr("spec", "draft", str(csv), "--id", "person_id", "--bounds", "age=0:120", "-o", str(tmp_path / "w.yaml"),
              home=home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "w.yaml").read_text()
    assert 'delimiter: ";"  # semicolon, detected from the header line' in text
    raw = yaml.safe_load(text)
    assert raw["dataset"]["source"]["delimiter"] == ";"
    assert set(raw["schema"]["numeric"]) == {"wage", "age"} and set(raw["schema"]["categorical"]) == {"sector"}
    # the owner states public bounds for wage (the 99999s lie outside them) and checks the data with the spec
    edited = public(text).replace("wage: {min: 1000, max: 99999, integer: true}", "wage: {min: 0, max: 5000}")
    (tmp_path / "w.yaml").write_text(edited)
    assert load_spec(tmp_path / "w.yaml").dataset.source.delimiter == ";"
    check = dpr("spec", "check", str(tmp_path / "w.yaml"), "--data", home=home, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    out = check.stdout
    assert "validation: 60 rows, 57 valid, 3 rejected" in out, out
    # data rows (not file lines), the public bounds printed, no cell value
    assert "in_bounds, column 'wage': 3 rows; data rows 58, 59, 60 (number is outside the public bounds [0, 5000])" \
        in out, out
    assert "1 = the first row after the header" in out
    assert "99999" not in out


def test_a_one_column_draft_of_a_many_field_header_is_refused_naming_delimiter(home, tmp_path):
    csv = tmp_path / "wages.csv"
    csv.write_text(people(";"))
    res = dpr("spec", "draft", str(csv), "--delimiter", "comma", home=home, cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    assert "reads as one column" in res.stderr and "splits it into 4 fields" in res.stderr
    assert "pass --delimiter semicolon" in res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr


def test_a_tab_file_is_drafted_with_the_given_delimiter(home, tmp_path):
    csv = tmp_path / "wages.tsv"
    csv.write_text(people("\t"))
    res = dpr("spec", "draft", str(csv), "--delimiter", "tab", "--id", "person_id", home=home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert 'delimiter: "\\t"  # tab, given with --delimiter' in res.stdout
    spec = tmp_path / "t.yaml"
    spec.write_text(public(res.stdout))
    loaded = load_spec(spec)
    assert loaded.dataset.source.delimiter == "\t" and set(loaded.public_schema.numeric) == {"wage", "age"}


@pytest.mark.parametrize("flag, value", [("--epsilon", "-1"), ("--epsilon", "0"), ("--epsilon", "nan"),
                                         ("--epsilon", "inf"), ("--delta", "-0.1"), ("--delta", "1"),
                                         ("--delta", "nan")])
def test_a_budget_the_spec_would_refuse_is_refused_by_the_draft_naming_the_flag(home, tmp_path, flag, value):
    csv = tmp_path / "people.csv"
    csv.write_text(people())
    out = tmp_path / "p.yaml"
    res = dpr("spec", "draft", str(csv), flag, value, "-o", str(out), home=home, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    first = res.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {flag} ") and f"budget.{flag[2:]}" in first, res.stderr
    assert not out.exists()


def test_the_draft_writes_unit_placeholders_and_lists_every_step_that_is_off(home, tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text(people())
    res = dpr("spec", "draft", str(csv), "--id", "person_id", home=home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # every numeric attribute is followed by a commented unit placeholder (steps.rules needs units)
    for name in ("wage", "age"):
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(f"{name}: {{min:"))
        assert lines[at + 1].strip() == f"#   unit: ?  ({name})", lines[at:at + 2]
    assert any("steps.rules" in ln and "unit" in ln for ln in lines)
    # the steps that are off by default, every one of them, in the comment and as keys
    off = [n for n in StepsSpec.model_fields if getattr(getattr(StepsSpec(), n), "enabled", True) is False]
    assert {"unattributed", "rules"} <= set(off)
    comment = next(ln for ln in lines if "are off until configured" in ln)
    for name in off:
        assert name in comment, (name, comment)
        assert f"  {name}: {{enabled: false}}" in lines, name
    # the owner fills in a unit as the placeholder says: the spec takes it
    spec = tmp_path / "p.yaml"
    spec.write_text(public(res.stdout).replace("integer: true}\n    #   unit: ?  (wage)", "integer: true, unit: usd}"))
    assert load_spec(spec).public_schema.numeric["wage"].unit == "usd"


def test_numbers_with_a_decimal_comma_are_named_in_the_draft(home, tmp_path):
    csv = tmp_path / "rates.csv"
    csv.write_text("id;rate\n" + "".join(f"r{i};{i % 7},{i % 10}\n" for i in range(30)))
    res = dpr("spec", "draft", str(csv), "--id", "id", home=home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    note = next(ln for ln in res.stdout.splitlines() if "decimal comma" in ln)
    assert note.rstrip().endswith(": rate")
