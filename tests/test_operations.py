"""Operations: no budget or data is lost under concurrency, crashes and retries;
nothing internal leaks into Prefect; Dask scale-out gives the same results.

Real processes throughout: flow runs in separate OS processes (``python -c``)
talk to the session's Prefect test server (``prefect_harness``) through
``PREFECT_API_URL``, each with a temporary ``PREFECT_HOME`` and ``DPR_HOME``,
on one real DuckDB warehouse file.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from fractions import Fraction
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from child_runs import child_env, finish, prefect_texts, read_runs, spawn
from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.storage.warehouse import Warehouse
from masking import Masker

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("prefect_harness")
LOCK_CRASH = re.compile(r"IOException|Could not set lock|Conflicting lock|WarehouseBusyError")


# ----------------------------------------------------------------------------- helpers
def _write_spec(tmp_path: Path, base: Path, name: str, **steps) -> Path:
    spec = yaml.safe_load(base.read_text())
    for step, update in steps.items():
        spec["steps"][step].update(update)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def _ledger(dpr_home: Path) -> PrivacyLedger:
    return PrivacyLedger(Warehouse(dpr_home / "warehouse.duckdb"))


def _assert_ledger_consistent(led: PrivacyLedger, dataset: str) -> None:
    """Running total = sum of charges <= cap; every released charge has its stored release."""
    status = led.status(dataset)
    assert led.spent_exact(dataset) == status.spent
    assert status.spent.epsilon <= status.cap.epsilon and status.spent.delta <= status.cap.delta
    orphans = led.wh.query(
        "SELECT c.key, c.status FROM ledger.charges c LEFT JOIN releases.outputs o USING (key) "
        "WHERE c.dataset = ? AND (c.status = 'released') <> (o.key IS NOT NULL)",
        [dataset],
    )
    assert orphans == []


# ----------------------------------------------------------------------------- the runner setting
def test_task_runner_setting():
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from flows.runner import RunnerSettingError, task_runner_from_env

    assert isinstance(task_runner_from_env({}), ThreadPoolTaskRunner)
    assert isinstance(task_runner_from_env({"DPR_TASK_RUNNER": "default"}), ThreadPoolTaskRunner)
    local = task_runner_from_env({"DPR_TASK_RUNNER": "dask-local"})
    assert isinstance(local, DaskTaskRunner) and local.address is None
    assert type(local.duplicate()) is type(local)  # Prefect duplicates the runner per flow run
    assert local.cluster_kwargs == {"n_workers": 2, "processes": True, "dashboard_address": None}
    remote = task_runner_from_env({"DPR_TASK_RUNNER": "default", "DPR_DASK_ADDRESS": "tcp://10.0.0.5:8786"})
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://10.0.0.5:8786"
    with pytest.raises(RunnerSettingError, match="DPR_TASK_RUNNER='threads'"):
        task_runner_from_env({"DPR_TASK_RUNNER": "threads"})
    with pytest.raises(RunnerSettingError, match="not a Dask scheduler address"):
        task_runner_from_env({"DPR_DASK_ADDRESS": "10.0.0.5"})


def test_private_tasks_never_persist_or_cache_and_noise_tasks_retry_once():
    from prefect.cache_policies import NO_CACHE
    from prefect.states import Failed

    from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
    from dpcore.runtime.fault_injection import InjectedFault
    from dpcore.budget.ledger import PlanMismatchError
    from dpcore.steps.common import StepInputError
    from prefect import Task

    from tasks import coco, detect, outlier_counts, pcor, release_run, rules, stages
    from tasks.common import _no_retry_for_user_errors

    every = [t for m in (stages, detect, pcor, outlier_counts, coco, rules, release_run) for t in vars(m).values()
             if isinstance(t, Task)]
    assert len(every) == 26  # every task of the project: a new one must be declared with private_task
    for t in every:
        assert t.persist_result is False and t.cache_policy is NO_CACHE, t.name
    noise = {stages.record_counts_task, stages.aiq_task, coco.coco_measure_task, outlier_counts.outlier_counts_release_task}
    for t in every:
        assert t.retries == (1 if t in noise else 0), t.name
    # a retry cannot cure bad input, an exhausted budget or an orphaned charge
    over = BudgetExceededError("d", PrivacyCost(1, 0), PrivacyCost(0, 0), PrivacyCost(Fraction(1, 2), 0))
    for exc in (StepInputError("bad"), over, PlanMismatchError("plan"), InjectedFault("test")):
        assert _no_retry_for_user_errors(None, None, Failed(data=exc)) is False
    assert _no_retry_for_user_errors(None, None, Failed(data=RuntimeError("transient"))) is True


# ----------------------------------------------------------------------------- concurrency
@pytest.mark.timeout(600)
@pytest.mark.unregistered
def test_concurrent_release_runs_and_operator_run_share_one_warehouse(tmp_path, dpr_home, small_spec_path,
                                                                       small_flights_csv, register_dataset):
    """Two release runs (different ids), one AIQ and one PCOR operator run at the same moment,
    one warehouse, a cap that fits only five of the six charges: exactly one charge is refused,
    cleanly; the total never exceeds the cap; every charge has its stored release."""
    flights = pd.read_csv(small_flights_csv).dropna(subset=["arr_delay", "air_time"])
    most_delayed = str(flights.loc[flights["arr_delay"].idxmax(), "flight_id"])
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["budget"]["epsilon"] = 1.1  # replace-one cap: each add/remove charge of 0.1 counts 0.2
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False  # the owner-only rules explain the detector's flags
    spec["steps"]["aiq"].update({"enabled": True, "record_ids": ["F000001"], "from_detector": 0, "points": []})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    register_dataset(path)  # the data owner, before the runs (with this test's cap)
    sync = tmp_path / "sync"
    sync.mkdir()
    env = child_env(tmp_path, dpr_home, OPS_SYNC=str(sync))
    release = """
        from flows.release_pipeline import release_pipeline
        wait_go({rid!r})
        report({rid!r}, lambda **kw: release_pipeline(spec_path={path!r}, release_id={rid!r}, **kw))
    """
    operator = f"""
        from flows.aiq_query import aiq_query
        wait_go("operator")
        report("operator", lambda **kw: aiq_query(record_ids=["F000002"], epsilon=0.1, spec_path={str(path)!r},
                                                   release_id="ops-q1", **kw))
    """
    explain = f"""
        from flows.explain_outlier import explain_outlier
        wait_go("explain")
        report("explain", lambda **kw: explain_outlier(record_id={most_delayed!r}, epsilon=0.1, n_samples=10,
                                                       spec_path={str(path)!r}, release_id="ops-q1", **kw))
    """
    procs = [spawn(release.format(rid=rid, path=str(path)), env) for rid in ("conc-a", "conc-b")]
    procs += [spawn(operator, env), spawn(explain, env)]
    deadline = time.monotonic() + 120
    while len(list(sync.glob("ready-*"))) < 4:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a child died before the start"
        time.sleep(0.05)
    (sync / "go").touch()  # all four start their flows together
    finished = [finish(p) for p in procs]
    results = [r for res, _ in finished for r in res]
    text = "\n".join(t for _, t in finished)
    assert len(results) == 4, text[-3000:]
    assert not LOCK_CRASH.search(text), text[-3000:]

    # 6 add/remove charges of 0.1 (2 per release run, 1 per operator run), each 0.2 against the
    # replace-one cap 1.1: exactly one run is refused, at its reservation, having charged nothing (issue 33)
    failed = [r for r in results if not r["ok"]]
    assert len(failed) == 1, (results, text[-6000:])
    # refused at its reservation (the others' charges landed while it ran) or, when they landed before it
    # started, by the release flow's blockers check before ingest (issue 48 §6): both before any charge of its own
    if failed[0]["error"] == "ReleaseBlockedError":
        assert failed[0]["message"].startswith("budget: this release would charge"), failed
    else:
        assert failed[0]["error"] == "BudgetExceededError" and "exceed" in failed[0]["message"].lower(), failed
        assert "Nothing was charged by this run" in failed[0]["message"], failed
    led = _ledger(dpr_home)
    _assert_ledger_consistent(led, "nycflights13")
    charges = led.charges("nycflights13")
    made = 4 if failed[0]["name"].startswith("conc-") else 5
    assert len(charges) == made and set(charges["status"]) == {"released"}
    assert led.status("nycflights13").spent.epsilon == made * Fraction(2, 10)
    assert set(charges["release_id"]) <= {"conc-a", "conc-b", "ops-q1"}
    if failed[0]["name"].startswith("conc-"):
        assert failed[0]["name"] not in set(charges["release_id"])
    # raw and validated data were stored once per release id (the registration's and the runs'), not once per
    # run: the two operator runs of ops-q1 share theirs; other release ids do not reuse it (issue 46.4)
    releases = [r[0].split(";release=")[1] for r in led.wh.query("SELECT content_hash FROM raw.ingests")]
    assert len(releases) == len(set(releases)) and "ops-q1" in releases
    n_valid_tables = led.wh.query("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'validated'")
    assert 1 <= n_valid_tables[0][0] <= len(releases)


# ----------------------------------------------------------------------------- crash
@pytest.mark.timeout(600)
def test_sigkill_after_the_charge_then_the_rerun_completes_within_the_same_charge(tmp_path, dpr_home, small_spec_path, monkeypatch):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False  # the owner-only rules explain the detector's flags
    spec["steps"]["aiq"]["from_detector"] = 0
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    marker = tmp_path / "reserved"
    code = f"""
        from dpcore.mechanisms.row_counts import InputRowCounts
        def blocked_release(self, accepted, input_rows, noise):  # inside compute(), i.e. after the reservation
            Path({str(marker)!r}).write_text(str(os.getpid()))
            time.sleep(600)
        InputRowCounts.release = blocked_release
        from flows.release_pipeline import release_pipeline
        report("crash", lambda **kw: release_pipeline(spec_path={str(path)!r}, release_id="crash-r1", **kw))
    """
    proc = spawn(code, child_env(tmp_path, dpr_home))
    deadline = time.monotonic() + 180
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the child never reached the mechanism"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # the warehouse file opens cleanly and the ledger shows the reserved charge
    con = duckdb.connect(str(dpr_home / "warehouse.duckdb"))
    assert con.execute("SELECT count(*) FROM ledger.charges").fetchone()[0] == 1
    con.execute("CHECKPOINT")
    con.close()
    led = _ledger(dpr_home)
    (charge,) = led.charges("nycflights13").itertuples()
    assert (charge.status, charge.release_id, charge.step, charge.stated_epsilon, charge.epsilon) == (
        "reserved", "crash-r1", "record_counts", 0.1, 0.2)  # add/remove 0.1 on the demo's replace-one cap
    assert led.wh.query("SELECT count(*) FROM releases.outputs")[0][0] == 0
    spent = led.status("nycflights13").spent

    # re-run the same release id: the answer was never stored, so never revealed: it is computed once more
    # within the same charge (issue 33 §3); nothing is charged again, the release completes
    from dpcore.mechanisms.row_counts import InputRowCounts
    from flows.release_pipeline import release_pipeline

    draws = []
    real_release = InputRowCounts.release
    monkeypatch.setattr(InputRowCounts, "release",
                        lambda self, a, i, n: draws.append(1) or real_release(self, a, i, n))
    monkeypatch.setenv("DPR_HOME", str(dpr_home))
    out = release_pipeline(spec_path=str(path), release_id="crash-r1")
    assert draws == [1] and not out["stored_release"]
    assert led.status("nycflights13").spent == spent  # the crashed run's reservation is the whole charge
    assert out["charged_by_this_run"]["epsilon"] == 0 and out["spent_total"]["epsilon"] == float(spent.epsilon)
    (again,) = led.charges("nycflights13").itertuples()
    assert (again.key, again.status) == (charge.key, "released")
    stored = json.loads(led.wh.query("SELECT payload FROM releases.outputs")[0][0])
    bundle = pd.read_csv(Path(out["bundle"]) / "tables" / "record_counts__counts.csv")
    assert dict(zip(bundle["cell"], bundle["noisy_count"])) == stored  # the published numbers are the stored ones
    _assert_ledger_consistent(led, "nycflights13")

    # and from now on the release id is the stored release: no data read, no draw, nothing charged
    again_out = release_pipeline(spec_path=str(path), release_id="crash-r1")
    assert again_out["stored_release"] and draws == [1] and again_out["bundle"] == out["bundle"]
    assert led.status("nycflights13").spent == spent


# ----------------------------------------------------------------------------- retry
def test_prefect_retry_after_the_draw_returns_the_first_stored_draw(dpr_home, small_spec_path, monkeypatch):
    from prefect import flow

    from dpcore.mechanisms.row_counts import InputRowCounts
    from dpcore.steps.record_counts import record_counts_step
    from tasks.common import NOISE_RETRIES, flow_run_id, private_task, resolve
    from tasks.stages import ingest_task, validate_task

    draws: list[dict] = []
    real_release = InputRowCounts.release

    def counting_release(self, accepted, input_rows, noise):
        out = real_release(self, accepted, input_rows, noise)
        draws.append(out)
        return out

    monkeypatch.setattr(InputRowCounts, "release", counting_release)
    attempts: list[dict] = []

    @private_task(name="record-counts-flaky", **NOISE_RETRIES)
    def flaky_record_counts(spec, settings, ingested):
        out = record_counts_step(spec, settings, ingested, flow_run_id())  # charges, draws, stores
        attempts.append(dict(zip(out.tables["counts"]["cell"], out.tables["counts"]["noisy_count"])))
        if len(attempts) == 1:
            raise RuntimeError("transient failure after the draw was stored")
        return out

    @flow(name="retry-probe")
    def probe(spec_path: str):
        spec, settings = resolve(spec_path, "retry-r1")
        ingested = ingest_task(spec, settings)
        validate_task(spec, settings, ingested)
        return flaky_record_counts(spec, settings, ingested)

    out = probe(str(small_spec_path))
    assert len(attempts) == 2 and len(draws) == 1  # Prefect retried; the mechanism ran once
    assert attempts[0] == attempts[1] == draws[0]
    led = _ledger(dpr_home)
    charges = led.charges("nycflights13")
    assert len(charges) == 1 and charges["status"].iloc[0] == "released" and charges["stated_epsilon"].iloc[0] == 0.1
    assert charges["epsilon"].iloc[0] == 0.2  # add/remove record counts on the demo's replace-one cap
    stored = json.loads(led.wh.query("SELECT payload FROM releases.outputs")[0][0])
    assert stored == draws[0] == dict(zip(out.tables["counts"]["cell"], out.tables["counts"]["noisy_count"]))


# ----------------------------------------------------------------------------- leakage
def _number(n: int) -> re.Pattern:
    # not the tail of a thousands-grouped number ("2,820" does not contain the count 820)
    return re.compile(rf"(?<![0-9A-Za-z.])(?<![0-9],){n}(?![0-9A-Za-z]|\.[0-9]|,[0-9]{{3}})"
                      rf"|(?<![0-9A-Za-z.])(?<![0-9],){n:,}(?![0-9]|,[0-9]{{3}})")


@pytest.mark.timeout(600)
def test_no_internal_value_leaves_the_warehouse(tmp_path, dpr_home, small_spec_path, small_flights_csv):
    """After a pipeline run with detect + AIQ (from_detector) + coco + PCOR (from_detector) +
    record_counts and two failed operator runs, search the Prefect logs (API), artifacts (API),
    run/task state messages (exception texts), the child's output, every file under PREFECT_HOME
    and the public part of the bundle for true counts, detector scores, raw outlier rows, AIQ ball
    counts and PCOR population sizes.

    The explicitly queried ids are left out of the id search (their scores and raw rows are not);
    the ids ``from_detector`` chose are owner-only by default (issue 28), so they are searched for too.
    """
    # distinctive true counts: blank arr_delay in ~150 more rows, so ~190 rows are quarantined
    lines = small_flights_csv.read_text().splitlines()
    col = lines[0].split(",").index("arr_delay")
    for i in range(5, len(lines), 19):
        cells = lines[i].split(",")
        cells[col] = ""
        lines[i] = ",".join(cells)
    csv = tmp_path / "flights_leak.csv"
    csv.write_text("\n".join(lines) + "\n")
    path = _write_spec(
        tmp_path, small_spec_path, "leak.yaml",
        aiq={"enabled": True, "record_ids": ["F000001", "F000002"], "from_detector": 3},
        coco={"enabled": True, "max_group_size": 60},
        unattributed={"enabled": True, "max_group_size": 60},
        pcor={"enabled": True, "from_detector": 3, "n_samples": 10, "epsilon": 0.1},
        validation={"max_rejected_fraction": 0.25},  # ~6.3% true: far from the gate whatever the noise
    )
    spec = yaml.safe_load(path.read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(csv)}
    path.write_text(yaml.safe_dump(spec))
    code = f"""
        from flows.release_pipeline import release_pipeline
        from flows.aiq_query import aiq_query
        report("pipeline", lambda **kw: release_pipeline(spec_path={str(path)!r}, release_id="leak-r1", **kw))
        # failures: an unknown record id and an over-budget batch (their exception texts are searched too)
        report("unknown-id", lambda **kw: aiq_query(record_ids=["F999999"], spec_path={str(path)!r}, release_id="leak-q", **kw))
        report("over-budget", lambda **kw: aiq_query(record_ids=["F000003"], epsilon=10, spec_path={str(path)!r}, release_id="leak-q", **kw))
    """
    results, output = finish(spawn(code, child_env(tmp_path, dpr_home)))
    by = {r["name"]: r for r in results}
    assert by["pipeline"]["ok"], output[-3000:]
    assert not by["unknown-id"]["ok"] and not by["over-budget"]["ok"], results
    assert by["over-budget"]["error"] == "BudgetExceededError"

    run_ids = [r["run"] for r in results]
    assert all(run_ids), results
    progress: dict = {}
    texts = asyncio.run(prefect_texts(run_ids, progress)) + [output]
    # long loops reported progress, and finished
    assert progress == {
        "progress-detect-templates-nycflights13": (100.0, "detector templates fitted: 2 of 2 done"),
        "progress-coco-levels-nycflights13": (100.0, "coco levels measured: 3 of 3 done"),
        "progress-coco-nodes-nycflights13": (100.0, "coco node chunks estimated: 3 of 3 done"),
        "progress-coco-accuracy-nycflights13": (100.0, "coco accuracy replicates: 20 of 20 done"),
        "progress-pcor-searches-nycflights13": (100.0, "PCOR searches finished: 3 of 3 done"),
    }, progress
    for f in (tmp_path / "prefect_home").rglob("*"):
        if f.is_file():
            texts.append(f.read_bytes().decode("latin-1"))
    bundle = Path(by["pipeline"]["out"]["bundle"])
    public = [f for f in bundle.rglob("*") if f.is_file() and "owner" not in f.relative_to(bundle).parts]
    assert any(f.name == "report.md" for f in public) and any(f.suffix == ".csv" for f in public)
    # PNG pixels and Parquet's binary encodings cannot carry a number as text, but their compressed
    # bytes contain random digit runs ("366" once matched a true count); every released table is
    # also searched as its CSV twin, so only the binary formats are left out of the text search
    assert all((f.with_suffix(".csv")).is_file() for f in public if f.suffix == ".parquet")
    texts += [f.read_bytes().decode("latin-1") for f in public if f.suffix not in {".png", ".parquet"}]
    haystack = "\n".join(texts)

    # the internal true values, read from the warehouse
    wh = Warehouse(dpr_home / "warehouse.duckdb")
    # one validated table per release id (issue 46.4: the operator runs' release ids validate the same bytes
    # again); the pipeline's is the one its detect step keyed its tables on
    (vt,) = [r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")
             if wh.table_exists("internal", f"detect_flags__{r[0]}")]
    n_valid = wh.query(f'SELECT count(*) FROM validated."{vt}"')[0][0]
    n_quar = wh.query(f'SELECT count(DISTINCT _row) FROM quarantine."{vt}"')[0][0]
    flags = wh.query_df(f'SELECT f.*, v.flight_id FROM internal."detect_flags__{vt}" f JOIN validated."{vt}" v '
                        "USING (_row) WHERE f.flagged ORDER BY f.max_score DESC LIMIT 20")
    scores = wh.query_df(f'SELECT * FROM internal."detect_scores__{vt}" WHERE _row IN (SELECT unnest(?::BIGINT[]))',
                         [[int(r) for r in flags["_row"]]])
    diag = wh.query_df("SELECT * FROM internal.aiq_diagnostics")
    emd = wh.query_df("SELECT emd FROM internal.coco_emd WHERE emd > 0")
    pcor = wh.query_df("SELECT * FROM internal.pcor_diagnostics")
    explained = set(pd.read_csv(bundle / "tables" / "pcor__explanations.csv")["record_id"])
    assert explained == set()  # PCOR explains only the detector's choice here: owner-only by default (issue 28)
    owner_pcor = pd.read_csv(bundle / "owner" / "pcor__detector_explanations.csv", dtype=str, keep_default_na=False)
    assert len(owner_pcor) == 3 and len(pcor) == 3  # three slots, filled or not: three charges
    answers = (bundle / "tables" / "aiq__answers.csv").read_text()
    published_ids = set(re.findall(r"record:(F\d+)", answers))
    assert published_ids == {"F000001", "F000002"}  # the listed ids; the detector's top 3 are in owner/ only
    owner_aiq = (bundle / "owner" / "aiq__detector_answers.csv").read_text()
    assert len(set(re.findall(r"record:(F\d+)", owner_aiq)) - published_ids) == 3
    numbers_pcor = {int(n) for n in pcor["population"].dropna() if n >= 100}

    n_raw = wh.query("SELECT n_rows FROM raw.ingests")[0][0]
    assert n_raw == 3000
    numbers = {n for n in (n_raw, n_valid, n_quar, *diag["ball_count"], *numbers_pcor) if n >= 100}
    assert n_valid >= 100 and n_quar >= 100, (n_valid, n_quar)
    # A released noisy count can equal the true count by chance (the geometric mechanism at
    # epsilon = 0.1 adds exactly 0 with probability ~5%); such a coincidence is a privacy-protected
    # output, not a leak, so a true row count (raw, valid, quarantined) equal to a released noisy count is not
    # searched for.
    released_counts = {
        int(v) for (payload,) in wh.query("SELECT payload FROM releases.outputs WHERE step = 'record_counts'")
        for v in json.loads(payload).values()
    }
    numbers -= released_counts & {n_raw, n_valid, n_quar}
    floats = [float(s) for s in [*flags["max_score"], *scores["score"], *emd["emd"]] if abs(s) >= 1e-3]
    float_forms = {form for s in floats for form in (repr(s), f"{s:.6f}", f"{s:.5f}", f"{s:.4f}", f"{s:.6g}", f"{s:.5g}")}
    float_forms = {f for f in float_forms if len(f.strip("-0.")) >= 4}
    ids = set(flags["flight_id"]) - published_ids
    csv_lines = csv.read_text().splitlines()
    header = csv_lines[0].split(",")
    id_col = header.index("flight_id")
    raw_rows = []
    for line in csv_lines[1:]:
        cells = line.split(",")
        if cells[id_col] in set(flags["flight_id"].head(10)):
            raw_rows.append(line)  # the raw row as it appears in the CSV
            rest = [c for i, c in enumerate(cells) if i != id_col]
            raw_rows += [",".join(rest), ", ".join(rest), "|".join(rest), " | ".join(rest), "\t".join(rest)]
    assert len(raw_rows) == 60

    # random tokens can look like a count: UUIDs' 4-hex-digit groups ("-2804-"), 16-hex-digit nonces (ingest ids,
    # charges' public refs), task-run names' random 3-hex suffix ("bundle-837"), pytest's numbered temporary
    # folder, ports, clock readings (tests/masking.py lists every kind)
    flow_run_names = [r.name for r in asyncio.run(read_runs(run_ids))[2]]
    no_uuids = Masker(flow_run_names)(haystack)
    # so can the source line numbers in the tracebacks of the expected failures ('File "...", line 1330')
    no_uuids = re.sub(r'(File "[^"\n]*", line )\d+', r"\1<n>", no_uuids)
    leaked = [f"count {n}" for n in numbers if _number(n).search(no_uuids)]
    leaked += [f"score {f}" for f in float_forms if f in haystack]
    leaked += [f"id {i}" for i in ids if re.search(rf"(?<![0-9A-Za-z]){i}(?![0-9])", haystack)]
    leaked += [f"raw row {r}" for r in raw_rows if r in haystack]
    for item in leaked[:5]:
        needle = item.split(" ", 1)[1]
        pos = haystack.find(needle)
        print(item, "…", haystack[max(pos - 120, 0): pos + 80].replace("\n", " "))
    assert leaked == []


# ----------------------------------------------------------------------------- dask
@pytest.mark.timeout(600)
def test_dask_local_cluster_gives_the_same_detection_as_the_default_runner(tmp_path, small_spec_path, register_dataset):
    """The detect flow, then the release pipeline with PCOR explaining the detector's top 2
    outliers, with ``DPR_TASK_RUNNER=dask-local`` (2 worker processes) and with the default
    runner, as two processes on two warehouses: the fits and the PCOR searches run on worker
    processes, every warehouse/ledger task stays in the flow process (and refuses a worker), the
    internal scores, flags and fitted models are bit-for-bit identical, and so are the released
    contexts (test noise seed: each search's draws depend only on its record).

    Dask's nanny runs workers with OMP/OpenBLAS/MKL_NUM_THREADS=1; the default-runner process
    gets the same setting, otherwise multi-threaded BLAS sums differ in the last bits (~1e-13).
    """
    pids = tmp_path / "pids"
    pids.mkdir()
    pcor_spec = _write_spec(tmp_path, small_spec_path, "pcor.yaml",
                            pcor={"enabled": True, "from_detector": 2, "n_samples": 10, "epsilon": 0.1},
                            outlier_counts={"enabled": True})
    code = """
        import os
        import flows.detect, flows.outlier_counts, flows.pcor, flows.release_pipeline
        from dpcore.steps.detect import fit_streamed
        from dpcore.steps.outlier_counts import subspace_utility
        from dpcore.steps.pcor import compute_explanation
        from tasks.common import private_task

        @private_task(name="subspace-utility-probe", worker_safe=True)
        def probe_utility(plan, subspace):
            Path({pids!r}, f"{{os.environ['DPR_TASK_RUNNER']}}-subspace-{{subspace}}").write_text(str(os.getpid()))
            return subspace_utility(plan, subspace)

        flows.outlier_counts.subspace_utility_task = probe_utility

        @private_task(name="pcor-search-probe", worker_safe=True)
        def probe_search(job, row):
            Path({pids!r}, f"{{os.environ['DPR_TASK_RUNNER']}}-pcor-{{row}}").write_text(str(os.getpid()))
            return compute_explanation(job, row)

        flows.pcor.pcor_search_task = probe_search

        @private_task(name="fit-template-probe", worker_safe=True)
        def probe_fit(parts, template, spec):
            Path({pids!r}, f"{{os.environ['DPR_TASK_RUNNER']}}-fit-{{template.name}}").write_text(str(os.getpid()))
            return fit_streamed(parts, template, spec)

        flows.detect.fit_streamed_task = probe_fit   # the same work; records which process ran it
        Path({pids!r}, os.environ["DPR_TASK_RUNNER"] + "-flow").write_text(str(os.getpid()))
        print("OPS-RUNNER", type(flows.detect.detect_flow.task_runner).__name__, flush=True)
        report("detect", lambda **kw: flows.detect.detect_flow(spec_path={spec!r}, **kw))
        report("pipeline", lambda **kw: flows.release_pipeline.release_pipeline(spec_path={pcor!r}, **kw))
    """.format(pids=str(pids), spec=str(small_spec_path), pcor=str(pcor_spec))
    single = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", DPR_TEST_NOISE_SEED="7", DPR_ALLOW_TEST_NOISE="1")
    envs = {name: child_env(tmp_path, tmp_path / f"dpr_{name}", DPR_TASK_RUNNER=name, **single)
            for name in ("dask-local", "default")}
    for name in envs:
        register_dataset(small_spec_path, home=tmp_path / f"dpr_{name}")
    # the Dask run as the demo does it: no PREFECT_API_URL, Prefect's ephemeral server in the flow
    # process (the workers must be told its address), with its own PREFECT_HOME
    del envs["dask-local"]["PREFECT_API_URL"]
    envs["dask-local"]["PREFECT_HOME"] = str(tmp_path / "prefect_home_ephemeral")
    envs["dask-local"]["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"  # a loaded CI machine
    procs = {name: spawn(code, env) for name, env in envs.items()}
    # meanwhile: a task that writes the warehouse, wrongly submitted to a Dask worker, refuses to run
    from prefect import flow
    from prefect_dask import DaskTaskRunner

    from tasks.common import FlowProcessOnlyError, resolve
    from tasks.stages import ingest_task

    @flow(name="guard-probe", task_runner=DaskTaskRunner(cluster_kwargs={"n_workers": 1, "processes": False,
                                                                          "dashboard_address": None}))
    def guard_probe():
        spec, settings = resolve(str(small_spec_path), None)
        return ingest_task.submit(spec, settings).result()

    with pytest.raises(FlowProcessOnlyError, match="must run in the flow process"):
        guard_probe()

    finished = {name: finish(p) for name, p in procs.items()}
    for name, (results, output) in finished.items():
        assert [r["ok"] for r in results] == [True, True], output[-3000:]
        assert results[0]["out"] == ["air_time_by_distance_origin", "arr_delay_by_dep_delay_carrier"]
        assert not LOCK_CRASH.search(output)
    assert "OPS-RUNNER LocalDaskTaskRunner" in finished["dask-local"][1]
    assert "OPS-RUNNER ThreadPoolTaskRunner" in finished["default"][1]
    pid = {p.name: p.read_text() for p in pids.iterdir()}
    assert len(pid) == 6 + 4 + 8  # flow + 2 fits, 2 PCOR searches, 4 candidate subspaces per runner
    assert pid["default-fit-air_time_by_distance_origin"] == pid["default-flow"]  # threads in the flow process
    assert {v for k, v in pid.items() if k.startswith("default-pcor-")} == {pid["default-flow"]}
    dask_fits = {v for k, v in pid.items() if k.startswith("dask-local-fit-")}
    assert pid["dask-local-flow"] not in dask_fits  # fits ran on worker processes
    dask_searches = {v for k, v in pid.items() if k.startswith("dask-local-pcor-")}
    assert dask_searches and pid["dask-local-flow"] not in dask_searches  # so did the PCOR searches
    dask_subspaces = {v for k, v in pid.items() if k.startswith("dask-local-subspace-")}
    assert dask_subspaces and pid["dask-local-flow"] not in dask_subspaces  # and the subspace counts
    assert {v for k, v in pid.items() if k.startswith("default-subspace-")} == {pid["default-flow"]}
    counts = {
        name: pd.read_csv(Path(results[1]["out"]["bundle"]) / "tables" / "outlier_counts__counts.csv")
        for name, (results, _) in finished.items()
    }
    assert len(counts["default"]) == 2
    pd.testing.assert_frame_equal(counts["dask-local"], counts["default"], check_exact=True)
    # the detector chose the records: their explanations are the owner's (issue 28 §4), the public table is empty
    released = {
        name: pd.read_csv(Path(results[1]["out"]["bundle"]) / "owner" / "pcor__detector_explanations.csv")
        for name, (results, _) in finished.items()
    }
    assert len(released["default"]) == 2
    assert all(pd.read_csv(Path(results[1]["out"]["bundle"]) / "tables" / "pcor__explanations.csv").empty
               for results, _ in finished.values())
    pd.testing.assert_frame_equal(released["dask-local"], released["default"], check_exact=True)
    for name in finished:
        _assert_ledger_consistent(_ledger(tmp_path / f"dpr_{name}"), "nycflights13")

    def tables(home: Path):
        wh = Warehouse(home / "warehouse.duckdb")
        (vt,) = [r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")]
        return (
            wh.query_df(f'SELECT * FROM internal."detect_scores__{vt}" ORDER BY template, _row'),
            wh.query_df(f'SELECT * FROM internal."detect_flags__{vt}" ORDER BY _row'),
            # table_suffix names the input by its random ingest id (issue 15, hole 1): it differs per home
            wh.query_df("SELECT template, params FROM internal.detect_models ORDER BY template"),
        )

    for a, b in zip(tables(tmp_path / "dpr_dask-local"), tables(tmp_path / "dpr_default")):
        assert len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_exact=True)
