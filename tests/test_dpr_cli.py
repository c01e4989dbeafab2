"""The ``dpr`` command line through its real console entry point (subprocesses), on temporary homes.

Flow-running subcommands talk to the session's Prefect test server
(``prefect_harness``; its URL is passed as ``PREFECT_API_URL``), so every
release and operator query is a real flow run charged through the real DuckDB
ledger.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.release.spec import DATA_MARKER, SpecError, load_spec
from dpcore.storage.warehouse import Warehouse
from owner_registration import register_spec

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


def dpr(*args: str, home: Path, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``dpr`` with a clean DPR_* environment (but DPR_SPECS_DIR, from conftest) and the test Prefect server."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}
    env.update(DPR_HOME=str(home), PREFECT_API_URL=str(PREFECT_API_URL.value()), PREFECT_LOGGING_LEVEL="WARNING",
               COLUMNS="200")
    return subprocess.run([DPR, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _ledger(home: Path) -> PrivacyLedger:
    return PrivacyLedger(Warehouse(home / "warehouse.duckdb"))


SUBCOMMANDS = [[], ["spec"], ["spec", "draft"], ["spec", "check"], ["plan"], ["run"], ["budget"], ["aiq"],
               ["explain"], ["counts"], ["coco"], ["rules"], ["dataset"], ["dataset", "add"], ["dataset", "list"],
               ["dataset", "show"]]


def register(spec: str | Path, home: Path, name: str = "nycflights13", *choice: str) -> subprocess.CompletedProcess:
    """``dpr dataset add NAME --spec SPEC [choice...]``: the data owner registers the name (checked to succeed)."""
    res = dpr("dataset", "add", name, "--spec", str(spec), *choice, home=home)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_the_console_entry_point_shows_the_help(home):
    """``dpr --help`` through the installed console script (the subcommands' help: in process, below)."""
    res = dpr("--help", home=home)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: dpr "), res.stdout[:200]
    assert "Exit codes: 0 success; 2 refused" in res.stdout


@pytest.mark.parametrize("cmd", SUBCOMMANDS, ids=lambda c: " ".join(c) or "dpr")
def test_every_subcommand_has_help(cmd, home):
    """Each subcommand's help, through the click command the console script calls (``dpr.main.cli``) in this
    process: a ``dpr`` subprocess per subcommand cost an interpreter start and its imports each (issue 49.2)."""
    from click.testing import CliRunner

    from dpr.main import cli

    saved = dict(os.environ)
    try:
        res = CliRunner().invoke(cli, [*cmd, "--help"], prog_name="dpr", env={"DPR_HOME": str(home)},
                                 terminal_width=200)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: dpr {' '.join(cmd)}".rstrip()), res.output[:200]
    if cmd == []:
        assert "Exit codes: 0 success; 2 refused" in res.output


def test_operator_options_come_from_the_flow_parameters(home):
    from flows.aiq_query import aiq_query

    text = dpr("aiq", "--help", home=home).stdout
    for opt in ("--record-id", "--epsilon", "--beta", "--r", "--k", "--mechanism", "--spec", "--release-id"):
        assert opt in text, opt
    assert "Epsilon per query" in text  # the flow's own Args text
    assert set(aiq_query.parameters.properties) == {"record_ids", "epsilon", "beta", "r", "k", "mechanism",
                                                    "spec_path", "release_id"}


AWKWARD = "person,status,place,age,income\n" + "".join(
    f'p{i},"{s}","{c}",{20 + i % 50},{1000 + 37 * i}\n'
    for i, (s, c) in enumerate(
        [("Employed", "Washington, D.C."), ("Unemployed, Laid Off", "Zürich"), ("Employed", "Boston")] * 20)
)


def test_spec_draft_marks_data_values_and_loads_once_the_owner_replaces_them(home, tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text(AWKWARD)
    out = tmp_path / "people.yaml"
    res = dpr("spec", "draft", str(csv), "--id", "person", "--bounds", "age=0:120", "-o", str(out), home=home)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    marked = [ln for ln in text.splitlines() if DATA_MARKER in ln]
    # the domains of status and place and the bounds of income come from the data; age's bounds were given
    assert len(marked) == 3 and not any(ln.strip().startswith("age:") for ln in marked), marked
    assert any("Unemployed, Laid Off" in ln for ln in marked)
    assert "age: {min: 0, max: 120, integer: true}" in text
    with pytest.raises(SpecError, match=r"still holds values read from the data on line\(s\)"):
        load_spec(out)
    check = dpr("spec", "check", str(out), home=home)
    assert check.returncode == 2 and "values read from the data" in check.stderr, check.stderr
    assert dpr("plan", str(out), home=home).returncode == 2
    assert not (home / "warehouse.duckdb").exists()  # refused before anything was opened

    # the owner replaces each marked value with public knowledge and deletes the marker
    public = (text.replace('domain: ["Employed", "Unemployed, Laid Off"]', 'domain: ["Employed", "Unemployed, Laid Off", '
                                                                           '"Not in labour force"]')
              .replace("income: {min: 1000, max: 3183, integer: true}", "income: {min: 0, max: 1000000}")
              .replace(f"  {DATA_MARKER}", ""))
    out.write_text(public)
    spec = load_spec(out)
    assert spec.public_schema.numeric["income"].max == 1_000_000
    assert "Not in labour force" in spec.public_schema.categorical["status"].domain
    ok = dpr("spec", "check", str(out), "--data", home=home)
    assert ok.returncode == 0, ok.stderr
    assert "the spec is valid" in ok.stdout and "60 rows, 60 valid, 0 rejected" in ok.stdout, ok.stdout


def test_spec_draft_refuses_unknown_columns_and_existing_output(home, tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text(AWKWARD)
    res = dpr("spec", "draft", str(csv), "--bounds", "height=0:3", home=home)
    assert res.returncode == 2 and "['height'] are not in people.csv" in res.stderr
    res = dpr("spec", "draft", str(csv), "--bounds", "age=9", home=home)
    assert res.returncode == 2 and "expected COLUMN=A:B" in res.stderr
    (tmp_path / "x.yaml").write_text("x")
    res = dpr("spec", "draft", str(csv), "-o", str(tmp_path / "x.yaml"), home=home)
    assert res.returncode == 2 and "--force" in res.stderr


def test_spec_check_lists_every_problem_with_its_path(home, small_spec_path, tmp_path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"].update(enabled=True, record_ids=["F999999"])
    spec["steps"]["pcor"].update(enabled=True, record_ids=["F999998"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    res = dpr("spec", "check", str(bad), home=home)
    assert res.returncode == 2
    assert "2 problem(s)" in res.stderr and "steps.aiq.record_ids" in res.stderr and "steps.pcor.record_ids" in res.stderr

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"]["attributes"] = ["nope"]
    spec["steps"]["pcor"]["metric"] = "nada"
    bad.write_text(yaml.safe_dump(spec))
    res = dpr("spec", "check", str(bad), home=home)
    assert res.returncode == 2
    assert "steps.aiq.attributes ['nope']" in res.stderr and "steps.pcor.metric 'nada'" in res.stderr, res.stderr


def test_plan_run_budget_and_operator_queries(home, small_spec_path, tmp_path):
    spec = str(small_spec_path)
    # a fresh home: the plan charges nothing and creates no warehouse; the name is not registered yet
    res = dpr("plan", spec, "--json", home=home)
    assert res.returncode == 2, res.stderr
    plan = json.loads(res.stdout)
    assert plan["fits"] and plan["new"]["epsilon"] == pytest.approx(0.2) and not plan["budget_known"]
    assert not plan["registered"] and plan["problems"] == [
        "dataset nycflights13 is not registered: the data owner registers it with "
        "`dpr dataset add nycflights13 --spec SPEC` (nothing was read or charged)"]
    assert not (home / "warehouse.duckdb").exists()
    text = dpr("plan", spec, home=home)
    assert text.returncode == 2 and "the dataset is not registered" in text.stdout
    assert "dataset nycflights13 is not registered" in text.stderr
    res = dpr("run", spec, home=home)
    assert res.returncode == 2 and "dataset nycflights13 is not registered: the data owner registers it" in res.stderr
    assert _ledger(home).charges().empty

    added = register(spec, home)
    assert "registered:\ndataset nycflights13: charges its own budget" in added.stdout, added.stdout
    assert "overlap: none of the input's" in added.stdout
    res = dpr("plan", spec, "--json", home=home)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["registered"] and plan["budget_known"] and not plan["problems"]

    res = dpr("run", spec, home=home)
    assert res.returncode == 0, res.stderr
    assert "bundle    :" in res.stdout, res.stdout
    assert "this run charged epsilon=0.2 delta=0; this release holds epsilon=0.2" in res.stdout, res.stdout
    before = _ledger(home).charges()
    assert len(before) == 1

    res = dpr("plan", spec, "--json", home=home)  # the same release id again: nothing new, nothing charged
    plan = json.loads(res.stdout)
    assert plan["budget_known"] and plan["new"]["epsilon"] == 0 and plan["lines"][0]["already_reserved"] == 1
    table = dpr("plan", spec, home=home)
    assert table.returncode == 0 and "fits: yes" in table.stdout and "steps.record_counts" in table.stdout
    assert len(_ledger(home).charges()) == 1

    res = dpr("aiq", "--spec", spec, "--record-id", "F000001", "--record-id", "F000002", "--json", home=home)
    assert res.returncode == 0, res.stderr
    answers = json.loads(res.stdout)
    assert [a["query"] for a in answers] == ["record:F000001", "record:F000002"]
    assert all(isinstance(a["anomaly"], bool) for a in answers)

    refused = dpr("aiq", "--spec", spec, "--record-id", "F999999", home=home)  # off the public roster
    assert refused.returncode == 2 and "not on the public roster" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout  # a refusal is its message, not a traceback
    bad_param = dpr("aiq", "--spec", spec, "--record-id", "F000001", "--epsilon", "-1", home=home)
    assert bad_param.returncode == 2 and "epsilon" in bad_param.stderr, bad_param.stderr
    assert len(_ledger(home).charges()) == 2

    res = dpr("budget", "--json", home=home)
    assert res.returncode == 0, res.stderr
    (b,) = json.loads(res.stdout)
    assert b["budget"] == "nycflights13" and b["neighbour"] == "replace-one"
    assert [c["step"] for c in b["charges"]] == ["record_counts", "aiq"]
    assert b["spent"]["epsilon"] == pytest.approx(0.2 + 2 * 0.2)
    assert b["left"]["epsilon"] == pytest.approx(b["cap"]["epsilon"] - b["spent"]["epsilon"])
    assert {"release_id", "step", "notion", "stated_epsilon", "stated_delta", "charged_epsilon", "charged_delta",
            "time"} <= set(b["charges"][0])
    text = dpr("budget", "nycflights13", home=home)
    assert text.returncode == 0 and "test-r1" in text.stdout and "record_counts" in text.stdout
    unknown = dpr("budget", "no-such-data", home=home)
    assert unknown.returncode == 2 and "unknown dataset 'no-such-data'" in unknown.stderr


def test_over_cap_plan_and_run_refuse_with_nothing_charged(home, small_spec_path, tmp_path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["budget"]["epsilon"] = 0.1  # the record counts need 0.2 against the replace-one cap
    tight = tmp_path / "tight.yaml"
    tight.write_text(yaml.safe_dump(spec))
    register_spec(tight, home=home)  # set-up in process (`dpr dataset add` itself: the tests above and below)
    res = dpr("plan", str(tight), home=home)
    assert res.returncode == 2, res.stderr
    assert "would charge (epsilon=0.2, delta=0) but dataset 'nycflights13' has (epsilon=0.1" in res.stderr, res.stderr
    res = dpr("run", str(tight), home=home)  # the same reason as the plan's (issue 48.3), before Prefect starts
    assert res.returncode == 2, res.stderr
    assert "would charge (epsilon=0.2, delta=0) but dataset 'nycflights13' has (epsilon=0.1" in res.stderr
    assert _ledger(home).charges().empty


def test_operator_counts_coco_and_explain_run(home, small_spec_path, small_flights_csv):
    import pandas as pd

    ok = pd.read_csv(small_flights_csv).dropna(subset=["arr_delay", "air_time"])
    flights_most_delayed_id = str(ok.loc[ok["arr_delay"].idxmax(), "flight_id"])  # an outlier of its own cell
    spec = str(small_spec_path)
    register_spec(spec, home=home)  # set-up in process (`dpr dataset add` itself: tested above and below)
    res = dpr("counts", "--spec", spec, "--json", home=home)
    assert res.returncode == 0, res.stderr
    counts = json.loads(res.stdout)
    assert len(counts) == 2 and {"subspace", "noisy_count", "ci_half_width"} <= set(counts[0])
    res = dpr("coco", "--spec", spec, "--epsilon-per-level", "1.0", "--json", home=home)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)
    res = dpr("explain", "--spec", spec, "--record-id", flights_most_delayed_id, "--n-samples", "5", "--json",
              home=home)
    assert res.returncode in (0, 2), res.stderr  # no valid context is a stated, charged outcome (exit 2)
    if res.returncode == 0:
        assert json.loads(res.stdout)["record_id"] == flights_most_delayed_id
    else:
        assert "no context was found" in res.stderr
    steps = set(_ledger(home).charges()["step"])
    assert {"outlier_subspaces", "outlier_count", "coco_level0", "pcor"} <= steps


def test_operator_rules_writes_owner_only_rules(home, small_spec_path):
    register_spec(small_spec_path, home=home)  # set-up in process (`dpr dataset add`: tested above and below)
    res = dpr("rules", "--spec", str(small_spec_path), "--template", "air_time_by_distance_origin", "--max-rules", "3",
              "--json", home=home)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["templates"] == ["air_time_by_distance_origin"] and out["owner_file"].endswith("owner/outlier_rules.csv")
    assert Path(out["owner_file"]).is_file()
    assert _ledger(home).charges().empty  # the owner-only rules charge nothing


def _state(home: Path) -> dict:
    """Everything the ledger and the raw store hold (to compare before and after a refused run)."""
    led = _ledger(home)
    q = led.wh.query
    return {
        "charges": q("SELECT key, dataset, step, eps_units, status FROM ledger.charges ORDER BY key"),
        "budgets": q("SELECT dataset, eps_spent, delta_spent FROM ledger.budgets ORDER BY dataset"),
        "links": q("SELECT dataset, budget FROM ledger.dataset_budgets ORDER BY dataset"),
        "registrations": [r.as_dict() for r in led.registrations()],
        "fingerprints": q("SELECT budget, count(*) FROM ledger.record_fingerprints GROUP BY 1 ORDER BY 1"),
        "raw": q("SELECT table_name FROM information_schema.tables WHERE table_schema = 'raw' ORDER BY 1"),
    }


@pytest.mark.timeout(1800)
def test_one_row_probe_under_a_new_name_has_the_same_public_outcome_whether_its_id_is_in_another_dataset(
        home, small_spec_path, small_flights_csv, tmp_path):
    """Issue 28 hole 3: a one-row CSV under a new dataset name, with an id present in a registered dataset
    (F000042) or absent (F777777): every public surface an operator has (plan, run, budget, dataset list and
    show) says the same thing, the run is refused before ingest, and nothing is stored or charged."""
    register(small_spec_path, home)  # the owner's dataset (its record fingerprints are in the ledger)
    rows = small_flights_csv.read_text().splitlines()
    (row,) = [r for r in rows if r.startswith("F000042,")]
    spec = yaml.safe_load(small_spec_path.read_text())
    probe_csv = tmp_path / "probe.csv"
    spec["dataset"]["name"] = "probe"
    spec["dataset"]["source"] = {"kind": "csv", "path": str(probe_csv)}
    probe = tmp_path / "probe.yaml"
    probe.write_text(yaml.safe_dump(spec))
    commands = [["plan", str(probe)], ["plan", str(probe), "--json"], ["run", str(probe)], ["budget", "--json"],
                ["budget", "probe"], ["dataset", "list", "--json"], ["dataset", "show", "probe"]]
    before = _state(home)
    seen = {}
    for rid in ("F000042", "F777777"):
        probe_csv.write_text(rows[0] + "\n" + row.replace("F000042", rid, 1) + "\n")
        outs = []
        for cmd in commands:
            res = dpr(*cmd, home=home)
            # Prefect's own log lines carry random run names and times: the refusal is the last stderr line
            err = res.stderr.strip().splitlines()[-1] if cmd[0] == "run" else res.stderr
            outs.append((cmd[0], res.returncode, res.stdout, err))
        seen[rid] = outs
        assert _state(home) == before  # refused before ingest: no raw table, no fingerprint, no charge, no link
    assert seen["F000042"] == seen["F777777"]
    run = dict((tuple(c), o) for c, o in zip(map(tuple, commands), seen["F000042"]))[("run", str(probe))]
    assert run[1] == 2 and run[3] == ("error: dataset probe is not registered: the data owner registers it with "
                                      "`dpr dataset add probe --spec SPEC` (nothing was read or charged)")


@pytest.mark.timeout(1800)
def test_dataset_add_shows_the_overlap_to_the_owner_and_records_the_choice(home, small_spec_path, tmp_path):
    """Registration with overlap needs the owner's choice; the overlap is printed on the owner's terminal
    (stdout of `dpr dataset add`), never in the refusal itself; shared and separate choices are recorded."""
    register(small_spec_path, home)
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["name"] = "flights_copy"
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump(spec))
    refused = dpr("dataset", "add", "flights_copy", "--spec", str(copy), home=home)
    assert refused.returncode == 2
    assert "overlap with existing budgets" in refused.stdout and "nycflights13" in refused.stdout
    assert "3000" in refused.stdout  # the owner sees how many ids overlap (all 3,000 of the copy)
    assert "--share BUDGET" in refused.stderr and "3000" not in refused.stderr
    assert dpr("dataset", "show", "flights_copy", home=home).returncode == 2
    wrong = dpr("dataset", "add", "other", "--spec", str(copy), home=home)
    assert wrong.returncode == 2 and "dataset.name 'flights_copy'" in wrong.stderr
    sep = dpr("dataset", "add", "flights_copy", "--spec", str(copy), "--separate-from", "nycflights13", home=home)
    assert sep.returncode == 2 and "reason" in sep.stderr

    shared = register(copy, home, "flights_copy", "--share", "nycflights13")
    assert "charges the budget of 'nycflights13' (shared by the owner's choice)" in shared.stdout
    again = register(copy, home, "flights_copy", "--share", "nycflights13")
    assert "already registered, identically (nothing read or recorded)" in again.stdout
    changed = dpr("dataset", "add", "flights_copy", "--spec", str(copy), home=home)
    assert changed.returncode == 2 and "a registration does not change" in changed.stderr

    spec["dataset"]["name"] = "flights_wave2"
    wave = tmp_path / "wave.yaml"
    wave.write_text(yaml.safe_dump(spec))
    register(wave, home, "flights_wave2", "--separate-from", "nycflights13", "--reason", "a new consent round")
    listed = json.loads(dpr("dataset", "list", "--json", home=home).stdout)
    by_name = {r["dataset"]: r for r in listed}
    assert set(by_name) == {"nycflights13", "flights_copy", "flights_wave2"}
    assert (by_name["flights_copy"]["budget"], by_name["flights_copy"]["choice"]) == ("nycflights13", "share")
    w = by_name["flights_wave2"]
    assert (w["budget"], w["choice"], w["reason"]) == ("flights_wave2", "separate", "a new consent round")
    assert w["separate_from"] == {"nycflights13": "a new consent round"} and w["registered_at"]
    assert by_name["nycflights13"]["choice"] == "own"
    # the registrations are what the budgets show: the copy charges the demo's budget, the wave its own
    budgets = {b["budget"]: b for b in json.loads(dpr("budget", "--json", home=home).stdout)}
    assert set(budgets) == {"nycflights13", "flights_wave2"}
    assert budgets["nycflights13"]["datasets"] == ["nycflights13", "flights_copy"]
    shown = dpr("dataset", "show", "flights_wave2", home=home)
    assert shown.returncode == 0 and "separate from 'nycflights13': a new consent round" in shown.stdout
