"""Issue 33, section 8 ("Small"): names with a trailing line break, booleans and unrepresentable budgets read as
numbers, a bad ``--release-id`` blamed on the spec file, a NUL in a CSV header name cut in the message."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dpcore.budget.amounts import UNITS_PER_ONE, PrivacyCost
from dpcore.ingest.raw import IngestError, ingest
from dpcore.release.spec import SpecError, load_spec, parse_spec
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")

BASE = {
    "release_id": "r1",
    "dataset": {"name": "small", "source": {"kind": "csv", "path": "/nonexistent.csv"}, "record_id": "id"},
    "schema": {"numeric": {"x": {"min": 0, "max": 10}}, "categorical": {"c": {"domain": ["a", "b"]}}},
    "budget": {"epsilon": 1.0},
    "steps": {"detect": {"templates": [{"name": "t1", "behavioural": "x", "contextual": ["c"]}]}},
}


def _with(path: tuple, value) -> dict:
    spec = copy.deepcopy(BASE)
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return spec


def _refused(spec: dict) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    return str(info.value)


# ----------------------------------------------------------------------------- fullmatch
@pytest.mark.parametrize("path, value, key", [
    (("release_id",), "r1\n", "release_id"),
    (("dataset", "name"), "small\n", "dataset.name"),
    (("dataset", "record_id"), "id\n", "dataset.record_id"),
    (("budget", "separate_from"), {"other\n": "a reason"}, "budget.separate_from"),
    (("steps", "detect", "templates"), [{"name": "t1\n", "behavioural": "x", "contextual": ["c"]}],
     "steps.detect.templates.0.name"),
])
def test_names_with_a_trailing_line_break_are_refused(path, value, key):
    """``re.match("^...$")`` accepted a trailing "\\n" ($ matches before it); the checks use fullmatch."""
    assert parse_spec(BASE)  # the same names without the line break are fine
    assert f"  - {key}" in _refused(_with(path, value))


def test_an_attribute_name_with_a_trailing_line_break_is_refused():
    spec = copy.deepcopy(BASE)
    spec["schema"]["numeric"] = {"x\n": {"min": 0, "max": 10}}
    # refused; the name itself is not echoed, as it is not plausible as a name (spec.py's safe load errors)
    assert "schema: attribute name <not shown> must be a plain column name" in _refused(spec)


def test_a_release_id_flag_with_a_trailing_line_break_is_refused_naming_the_flag():
    from dpcore.release.spec import check_release_id_flag

    with pytest.raises(SpecError, match=r"^--release-id 'r1\\n' is not a valid release id"):
        check_release_id_flag("r1\n")
    assert check_release_id_flag("r1") == "r1" and check_release_id_flag(None) is None


# ----------------------------------------------------------------------------- booleans
@pytest.mark.parametrize("path, value, key", [
    (("budget", "epsilon"), True, "budget.epsilon"),
    (("budget", "delta"), False, "budget.delta"),
    (("steps", "record_counts", "epsilon"), True, "steps.record_counts.epsilon"),
    (("steps", "detect", "max_iter"), True, "steps.detect.max_iter"),
    (("steps", "aiq", "beta"), True, "steps.aiq.beta"),
    (("steps", "aiq", "points"), [{"x": True}], "steps.aiq.points"),
    (("steps", "coco", "epsilon_per_level"), [0.5, True], "steps.coco.epsilon_per_level"),
    (("schema", "numeric", "x", "min"), False, "schema.numeric.x.min"),
    (("accuracy_alpha",), True, "accuracy_alpha"),
])
def test_booleans_are_not_read_as_numbers(path, value, key):
    """Pydantic reads ``epsilon: true`` as 1; a number is required wherever the field holds numbers only."""
    text = _refused(_with(path, value))
    assert f"  - {key}: must be a number, not true/false" in text, text


def test_yaml_yes_as_a_budget_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE).replace("epsilon: 1.0", "epsilon: yes"))
    with pytest.raises(SpecError, match=r"budget\.epsilon: must be a number, not true/false"):
        load_spec(path)


def test_booleans_stay_where_a_boolean_or_text_is_expected():
    spec = _with(("schema", "numeric", "x", "integer"), True)
    assert parse_spec(spec).public_schema.numeric["x"].integer is True
    assert parse_spec(_with(("steps", "detect", "enabled"), True)).steps.detect.enabled is True


def test_operator_flow_parameters_refuse_booleans_as_numbers():
    """The operator flows' typed parameters (the UI form, the API, ``dpr aiq``) are strict numbers too."""
    from prefect.exceptions import ParameterTypeError

    from flows.aiq_query import aiq_query
    from flows.outlier_counts import outlier_counts

    assert aiq_query.validate_parameters({"record_ids": ["F000001"], "epsilon": 1})["epsilon"] == 1
    for flow, params in ((aiq_query, {"record_ids": ["F000001"], "epsilon": True}),
                         (aiq_query, {"record_ids": ["F000001"], "k": True}),
                         (outlier_counts, {"epsilon_total": True})):
        with pytest.raises(ParameterTypeError):
            flow.validate_parameters(params)


# ----------------------------------------------------------------------------- ledger units
@pytest.mark.parametrize("key, value", [
    ("epsilon", 1e308), ("epsilon", 1e-300), ("epsilon", 1.5e-18), ("epsilon", 2e20), ("delta", 1e-20),
    ("delta", 3.3e-19),
])
def test_budgets_the_ledger_cannot_hold_exactly_are_refused_naming_the_key_and_the_range(key, value):
    text = _refused(_with(("budget", key), value))
    assert f"  - budget.{key}: {value!r} cannot be held exactly by the privacy ledger" in text, text
    assert "units of 1e-18" in text
    assert ("from 1e-18 up to 1e+20" if key == "epsilon" else "in [0, 1)") in text


@pytest.mark.parametrize("epsilon, delta", [(1e20, 0.0), (0.1, 1e-6), (1e-18, 1e-18), (12.345, 0.999999)])
def test_budgets_the_ledger_holds_exactly_are_accepted_and_stored_exactly(epsilon, delta):
    b = parse_spec(_with(("budget",), {"epsilon": epsilon, "delta": delta})).budget
    cost = PrivacyCost(b.epsilon_exact, b.delta_exact)
    assert PrivacyCost.from_units(*cost.units_floor) == cost  # no rounding between the spec and the ledger
    assert cost.units_floor[0] < 2**127  # DuckDB HUGEINT
    assert cost.epsilon == Fraction(repr(epsilon)) and cost.units_floor[0] == cost.epsilon * UNITS_PER_ONE


# ----------------------------------------------------------------------------- --release-id
def _spec_file(tmp_path: Path) -> Path:
    data = tmp_path / "d.csv"
    data.write_text("id,x,c\nr1,1,a\n")
    spec = copy.deepcopy(BASE)
    spec["dataset"]["source"]["path"] = str(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPR_", "PREFECT_API"))}
    env.update(DPR_HOME=str(tmp_path / "home"), PREFECT_HOME=str(tmp_path / "prefect"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["plan", "run", "spec check", "aiq", "release_pipeline main"])
def test_a_bad_release_id_flag_is_reported_as_the_flags_fault(command, tmp_path):
    """``dpr run/plan/spec check``, an operator command and ``python -m flows.release_pipeline`` (scripts/demo.sh):
    the message names ``--release-id``, not the spec file; exit code 2, nothing started."""
    spec = str(_spec_file(tmp_path))
    bad = "bad id/.."
    args = {
        "plan": [DPR, "plan", spec, "--release-id", bad],
        "run": [DPR, "run", spec, "--release-id", bad],
        "spec check": [DPR, "spec", "check", spec, "--release-id", bad],
        "aiq": [DPR, "aiq", "--record-id", "r1", "--spec", spec, "--release-id", bad],
        "release_pipeline main": [sys.executable, "-m", "flows.release_pipeline", "--spec", spec, "--release-id", bad],
    }[command]
    res = _run(args, tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"--release-id {bad!r} is not a valid release id" in res.stderr, res.stderr
    assert "not a valid release spec" not in res.stderr and "the spec file is not at fault" in res.stderr
    assert not (tmp_path / "home" / "warehouse.duckdb").exists()


# ----------------------------------------------------------------------------- NUL in a header name
def test_a_header_name_holding_a_nul_is_refused_and_named_in_full(tmp_path):
    """DuckDB cuts an identifier at a NUL: ``bad\\x00name`` was stored as column ``bad`` (and reported so by
    validation; ``x\\x00y`` would even have been validated as the declared ``x``). The ingest refuses it, naming
    it escaped and in full."""
    data = tmp_path / "nul.csv"
    data.write_bytes(b"id,x,bad\x00name\nr1,1,a\n")
    spec = copy.deepcopy(BASE)
    spec["dataset"]["source"]["path"] = str(data)
    spec["dataset"]["extra_columns"] = "ignore"
    with pytest.raises(IngestError) as info:
        ingest(parse_spec(spec), Warehouse(tmp_path / "w.duckdb"), tmp_path)
    assert "'bad\\x00name'" in str(info.value) and "\x00" not in str(info.value)
