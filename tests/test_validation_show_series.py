"""``dpr validation show`` on a series spec and on other source kinds (issue 48, item 5).

The latest stored result is of a period other than the series' first: it was made under the spec's current
rules, and ``--spec`` must say so (before, the spec read as its first period hashed another input path and
the command said the spec had changed). Row numbers are explained for the input's kind.
"""
from __future__ import annotations

import yaml

from owner_registration import register_spec
from test_dpr_validation_show import dpr


def _series(folder, wage_max=5000):
    spec = {
        "release_id": "{dataset}-{period}",
        "dataset": {"name": "wages", "source": {"kind": "csv", "path": "wages_{period}.csv"}, "record_id": "id"},
        "series": {"period": "yearly", "first": 2013},
        "schema": {"numeric": {"wage": {"min": 0, "max": wage_max}}},
        "budget": {"epsilon": 1.0},
        "steps": {"record_counts": {"epsilon": 0.1}},
    }
    path = folder / "wages.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_later_period_is_under_the_current_rules(tmp_path, monkeypatch):
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    home = tmp_path / "home"
    monkeypatch.setenv("DPR_HOME", str(home))
    for v in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE"):
        monkeypatch.delenv(v, raising=False)
    for year in (2013, 2014):
        rows = ["id,wage"] + [f"y{year}p{i},{1000 + i if i != 3 else 99999}" for i in range(1, 11)]
        (tmp_path / f"wages_{year}.csv").write_text("\n".join(rows) + "\n")
    path = _series(tmp_path)
    register_spec(path)
    spec, settings = load_spec(path, period="2014"), Settings.from_env()
    validate_stage(spec, settings, ingest_stage(spec, settings))
    res = dpr("validation", "show", "--spec", str(path), home=home)
    assert res.returncode == 0, res.stderr
    assert "made under this spec's current rules" in res.stdout and "other rules" not in res.stdout
    assert "1 = the first row after the header" in " ".join(res.stdout.split())
    # a rule that did change is still reported as changed
    _series(tmp_path, wage_max=100000)
    res = dpr("validation", "show", "--spec", str(path), home=home)
    assert res.returncode == 0, res.stderr
    assert "made under other rules than this spec's current ones" in res.stdout


def test_row_numbers_are_explained_per_source_kind():
    from dpcore.validation.results import row_numbers_text

    assert "after the header" in row_numbers_text("csv")
    for kind in ("postgres", "duckdb", "parquet"):
        assert "header" not in row_numbers_text(kind)
    assert "ORDER BY" in row_numbers_text("postgres")


def test_spec_check_data_explains_rows_for_the_source_kind():
    from dpcore.validation.outcome import summary_lines

    s = {"n_rows": 3, "n_valid": 2, "n_rejected": 1, "rejected_fraction": 1 / 3, "table_failures": [],
         "ignored_columns": [], "row_failures": [{"rule": "in_bounds", "column": "wage", "count": 1, "example_rows": [2]}]}
    from dpcore.validation.results import row_numbers_text

    text = "\n".join(summary_lines(s, row_numbers_text("postgres")))
    assert "the first row the server sent" in text and "header" not in text
