"""Small releases answer quickly (issue 48 §6): what needs no data is answered before Prefect starts.

A refusal that needs no data (a spec outside ``DPR_SPECS_DIR``, an unregistered dataset name, a bad
period) and a stored re-run (a finished release id) are answered by ``dpr run`` before any flow run is
created and without importing Prefect. Speed itself is measured in ``benchmarks/commands.py`` only; these
tests check the timing-independent properties: the exit code and message, no ``release_pipeline`` flow run
for the spec in the Prefect database (read through the test harness's client), and no Prefect module loaded
by the command (its ``sys.modules`` at exit).

The release flow itself calls :func:`dpcore.run.cost_plan.release_blockers` before ingest, so a run started by a
deployment's worker (which does not pass through ``dpr run``) is refused for the same reasons, with the same
message, having read nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from owner_registration import register_spec

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROOT = Path(__file__).resolve().parents[1]

_PROBE = """
import atexit, json, sys
sys.argv = ["dpr", *json.loads(sys.argv[1])]

def report():  # at exit: `dpr` leaves a refusal through os._exit after the exit handlers (dpr.main._leave)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "prefect" or m.startswith("flows.release_pipeline"))
    sys.stdout.flush()
    print("\\nPROBE " + json.dumps({"prefect": loaded}), flush=True)

atexit.register(report)


class Teardown:  # its finaliser runs in the interpreter's teardown only (not after os._exit)
    def __del__(self, write=__import__("os").write):
        write(1, b"\\nTEARDOWN\\n")


keep = Teardown()
from dpr.main import main
main()
"""


def _dpr(args: list[str], home: Path, specs_dirs: str | None = None) -> dict:
    """``dpr ARGS`` in a fresh interpreter against the harness's API: exit code, output, Prefect modules loaded."""
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPR_", "PREFECT_"))}
    env.update(DPR_HOME=str(home), PREFECT_API_URL=str(PREFECT_API_URL.value()), PREFECT_LOGGING_LEVEL="WARNING",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", COLUMNS="200",
               DPR_SPECS_DIR=specs_dirs if specs_dirs is not None else os.environ["DPR_SPECS_DIR"])
    res = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("PROBE ")]
    assert line, f"dpr {' '.join(args)} did not finish:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return {**json.loads(line[-1][len("PROBE "):]), "exit": res.returncode, "out": res.stdout, "err": res.stderr}


def _release_runs_of(spec: Path) -> list:
    """The ``release_pipeline`` flow runs in the harness's database whose spec is ``spec`` (by file name or path)."""
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    async def read():  # every release run of the session's harness, page by page (a full suite makes thousands)
        runs: list = []
        async with get_client() as client:
            while True:
                page = await client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=["release_pipeline"])),
                    sort=FlowRunSort.ID_DESC, limit=200, offset=len(runs))
                runs += page
                if len(page) < 200:
                    return runs

    runs = anyio.run(read)
    wanted = {str(spec), os.path.realpath(spec)}
    return [r for r in runs if str(r.parameters.get("spec_path")) in wanted]


def _spec(small_spec_path: Path, folder: Path, name: str = "spec.yaml", **changes) -> Path:
    """The small spec with only the record counts (a quick release), in ``folder``."""
    spec = yaml.safe_load(small_spec_path.read_text())
    for step in ("detect", "rules", "aiq", "coco", "outlier_counts", "pcor", "unattributed"):
        spec["steps"].setdefault(step, {})["enabled"] = False
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            spec[section][field] = value
        else:
            spec[section] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_spec_outside_the_allowed_folders_is_refused_without_a_flow_run(small_spec_path, tmp_path):
    home = tmp_path / "home"
    outside = _spec(small_spec_path, tmp_path / "outside")
    register_spec(outside, home=home)  # registered: only the folder rule refuses it
    got = _dpr(["run", str(outside)], home, specs_dirs=str(ROOT / "specs"))
    assert got["exit"] == 2, got["out"] + got["err"]
    assert "is outside the folders flow runs may load specs from" in got["err"] and "DPR_SPECS_DIR" in got["err"]
    assert _release_runs_of(outside) == []  # before this change: a flow run, refused by the flow after 12 s
    assert got["prefect"] == []


def test_an_unregistered_dataset_name_is_refused_without_a_flow_run(small_spec_path, tmp_path):
    home = tmp_path / "home"
    spec = _spec(small_spec_path, tmp_path / "specs")
    got = _dpr(["run", str(spec)], home)
    assert got["exit"] == 2, got["out"] + got["err"]
    assert "dataset nycflights13 is not registered" in got["err"]
    assert _release_runs_of(spec) == [] and got["prefect"] == []


@pytest.mark.parametrize("period", ["2014-05", "banana"], ids=["outside-the-series", "not-a-period"])
def test_a_bad_period_is_refused_without_a_flow_run(tmp_path, period):
    folder = tmp_path / "series"
    folder.mkdir()
    for f in ("demo_series.yaml", "demo_fleet.csv", "demo_roster.csv"):
        shutil.copyfile(ROOT / "specs" / f, folder / f)
    spec = folder / "demo_series.yaml"
    got = _dpr(["run", str(spec), "--period", period], tmp_path / "home")
    assert got["exit"] == 2, got["out"] + got["err"]
    assert f"period (--period) '{period}'" in got["err"]
    assert _release_runs_of(spec) == [] and got["prefect"] == []


def test_a_stored_rerun_is_answered_from_the_ledger_without_prefect_or_a_flow_run(small_spec_path, tmp_path,
                                                                                  monkeypatch):
    from dpcore.budget.charge_summary import release_budget_line
    from dpcore.budget.amounts import PrivacyCost
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse

    from flows.release_pipeline import release_pipeline

    home = tmp_path / "home"
    spec = _spec(small_spec_path, tmp_path / "specs")
    register_spec(spec, home=home)
    monkeypatch.setenv("DPR_HOME", str(home))
    first = release_pipeline(spec_path=str(spec))  # the release, through the flow
    assert not first["stored_release"] and len(_release_runs_of(spec)) == 1

    again = _dpr(["run", str(spec)], home)
    assert again["exit"] == 0, again["out"] + again["err"]
    assert again["prefect"] == [] and len(_release_runs_of(spec)) == 1  # no new flow run
    lines = again["out"].split("\nPROBE ")[0].strip().splitlines()
    assert lines[0].startswith("stored    : this release id was finished before")
    # the lines the flow's re-run prints: where the release is, and the budget line read from the ledger now
    assert lines[1:4] == [f"warehouse : {first['warehouse']}", f"bundle    : {first['bundle']}",
                          f"report    : {first['bundle']}/report.md"]
    loaded = load_spec(spec)
    ledger = PrivacyLedger(Warehouse(home / "warehouse.duckdb"))
    assert lines[4] == release_budget_line(ledger, loaded.dataset.name, loaded.release_id, PrivacyCost(0))
    assert len(lines) == 5


def test_the_release_flow_refuses_what_release_blockers_blocks_before_reading_data(small_spec_path, tmp_path,
                                                                                  monkeypatch):
    """A deployment's run calls the flow directly: it must be refused as `dpr run` is, before ingest."""
    import anyio
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from dpcore.run.cost_plan import release_blockers
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse
    from flows.release_pipeline import release_pipeline

    home = tmp_path / "home"
    # a cap of 0.05 while the record counts alone charge more (0.1, twice against a replace-one cap)
    spec = _spec(small_spec_path, tmp_path / "specs", budget={"epsilon": 0.05, "delta": 1.0e-5,
                                                              "neighbour": "replace-one"})
    register_spec(spec, home=home)
    monkeypatch.setenv("DPR_HOME", str(home))
    expected = release_blockers(load_spec(spec), PrivacyLedger(Warehouse(home / "warehouse.duckdb"))).reasons
    assert len(expected) == 1 and expected[0].startswith("budget: this release would charge")
    state = release_pipeline(spec_path=str(spec), return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception) as refused:
        state.result()
    # the message `dpr run` and `dpr plan` give (before: the cost preflight's, after ingest and validation)
    assert str(refused.value) == expected[0] and type(refused.value).__name__ == "ReleaseBlockedError"

    async def task_names():
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
            return {r.name.rsplit("-", 1)[0] for r in runs}

    names = anyio.run(task_names)
    assert "release-blockers" in names and not names & {"ingest", "validate", "cost-preflight"}  # nothing read
    assert PrivacyLedger(Warehouse(home / "warehouse.duckdb")).status("nycflights13").spent.epsilon == 0


def test_a_stored_series_period_goes_through_the_flow_only_when_its_page_is_older_than_its_bundle(
        small_spec_path, small_flights_csv, tmp_path, monkeypatch):
    """The flow's re-run of a series period rebuilds the series page; `dpr run` answers it from the ledger only
    when the page is at least as new as the period's bundle (a run that stopped between its release and the
    page is repaired by its re-run, as before)."""
    from series_fixtures import make_series_spec

    from flows.release_pipeline import release_pipeline

    home = tmp_path / "home"
    folder = tmp_path / "series"
    folder.mkdir()
    spec = make_series_spec(folder, small_spec_path, small_flights_csv, series_cap=None)
    register_spec(spec, home=home)
    monkeypatch.setenv("DPR_HOME", str(home))
    first = release_pipeline(spec_path=str(spec), period="2013-01")
    page = home / "bundles" / "nycflights13" / "series" / "index.md"
    assert page.exists() and len(_release_runs_of(spec)) == 1

    again = _dpr(["run", str(spec), "--period", "2013-01"], home)
    assert again["exit"] == 0 and "stored    : this release id was finished before" in again["out"], again["err"]
    assert again["prefect"] == [] and len(_release_runs_of(spec)) == 1

    manifest = Path(first["bundle"]) / "manifest.json"
    old = manifest.stat().st_mtime - 60
    os.utime(page, (old, old))  # as if the run had stopped after its release, before the page
    repaired = _dpr(["run", str(spec), "--period", "2013-01"], home)
    assert repaired["exit"] == 0 and "stored    : this release id was finished before" in repaired["out"]
    assert repaired["prefect"] != [] and len(_release_runs_of(spec)) == 2  # the flow's re-run
    # a command that ran a flow leaves without the interpreter's teardown (seconds of a small release, issue 48 §6)
    assert "TEARDOWN" not in repaired["out"] and again["out"].rstrip().endswith("TEARDOWN")
    assert page.stat().st_mtime >= manifest.stat().st_mtime  # the page rebuilt


def test_a_backfill_answers_its_stored_periods_from_the_ledger_and_runs_only_the_others(
        small_spec_path, small_flights_csv, tmp_path, monkeypatch, capsys):
    """`dpr run --from/--to` (issue 48 §6): a period released before is answered from the ledger like a single
    stored re-run (no flow run, no data read); only the others run the flow; each period's lines say which
    were stored and its budget line is the ledger's."""
    from series_fixtures import make_series_spec

    from dpcore.budget.amounts import PrivacyCost
    from dpcore.budget.charge_summary import release_budget_line
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse
    from flows.release_pipeline import main, release_pipeline

    home = tmp_path / "home"
    folder = tmp_path / "series"
    folder.mkdir()
    spec = make_series_spec(folder, small_spec_path, small_flights_csv, series_cap=None)
    register_spec(spec, home=home)
    monkeypatch.setenv("DPR_HOME", str(home))
    release_pipeline(spec_path=str(spec), period="2013-01")
    assert len(_release_runs_of(spec)) == 1
    capsys.readouterr()

    # 2013-01 stored, 2013-02 new: one flow run more (before: two, the stored period through the flow too). The
    # backfill's flow calls are counted in this process (in a full suite, reading them back from the harness's
    # API missed the backfill's run once in two runs; the cause was not found)
    import flows.release_pipeline as pipeline_module

    real_flow, flow_calls = pipeline_module.release_pipeline, []

    def counted(**params):
        flow_calls.append(params.get("period"))
        return real_flow(**params)

    monkeypatch.setattr(pipeline_module, "release_pipeline", counted)
    assert main(["--spec", str(spec), "--from", "2013-01", "--to", "2013-02"]) == 0
    assert flow_calls == ["2013-02"]
    monkeypatch.setattr(pipeline_module, "release_pipeline", real_flow)
    runs_before = len(_release_runs_of(spec))
    mixed = capsys.readouterr().out
    first, second = mixed.split("\nperiod    : 2013-02\n")
    assert "period    : 2013-01" in first and "stored    : this release id was finished before" in first
    assert "stored    :" not in second and "backfill done: 2 period(s), 2013-01 to 2013-02" in second

    # both stored: `dpr run` answers the whole backfill before Prefect starts
    again = _dpr(["run", str(spec), "--from", "2013-01", "--to", "2013-02"], home)
    assert again["exit"] == 0, again["out"] + again["err"]
    assert again["prefect"] == [] and len(_release_runs_of(spec)) == runs_before
    text = again["out"].split("\nPROBE ")[0]
    ledger = PrivacyLedger(Warehouse(home / "warehouse.duckdb"))
    for p in ("2013-01", "2013-02"):
        block = text.split(f"period    : {p}\n")[1].split("\nperiod    :")[0].strip().splitlines()
        assert block[0].startswith("stored    : this release id was finished before")
        assert block[4] == release_budget_line(ledger, "nycflights13", f"nycflights13-{p}", PrivacyCost(0))
    assert text.rstrip().endswith("backfill done: 2 period(s), 2013-01 to 2013-02")
