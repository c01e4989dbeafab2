"""End-to-end leak test (issue 15, "Also deliver"; DESIGN.md rules 6-9).

The whole release pipeline (``flows/release_pipeline.py``: ingest, great-expectations
validation, record counts and their gate, detect, AIQ, outlier counts, coco, PCOR, bundle)
runs as four real Prefect flow runs, concurrently, each in its own child process with its own
``DPR_HOME`` (warehouse, ledger, owner key, bundles) and ``PREFECT_HOME``, on four raw inputs,
``D`` and three of its neighbours:

* ``D``: the first 3,000 NYC flights (the tests' small table; its cancelled flights are
  quarantined);
* ``D1``: ``D`` with one private cell changed: the ``arr_delay`` of one ordinary, valid flight
  (it stays valid, so it stays in the validated table with another value);
* ``D2``: ``D`` plus one raw row that fails validation (``air_time`` above the public bound:
  quarantined);
* ``D3``: ``D`` plus one raw row that fails validation because its record id is already taken
  (every row sharing an id is quarantined, so a valid record also leaves the validated table).

Same spec, same release id, seeded test noise with the same seed (``DPR_TEST_NOISE_SEED``,
allowed by ``DPR_ALLOW_TEST_NOISE=1``), so every noise draw is the same in the four runs.
Every public surface of each run is collected: every public file of the release bundle
(manifest, report, CSV and Parquet tables, PNG plots), the Prefect artifacts, the flow run
and its task runs (names, parameters, inputs, state names, messages and details, with every
state of their history), the API's log lines and events, the child's console (stdout and
stderr, which includes the flow's return value) and ``PREFECT_HOME``.

After normalisation of what is random per run and not a function of the data (listed in
``_Normaliser``, each with why) and masking of exactly the numbers the ledger charged for
(``CHARGED_*``), each neighbour must show exactly what ``D`` shows, surface by surface;
a difference prints the surface and the differing lines. ``LEAK_TEST_DUMP=<folder>`` writes
every surface of every run, as compared, for investigating a failure.

Not covered: timing (how long a task takes, the interleaving of concurrent tasks' lines,
the number of heartbeat events) is a side channel these comparisons leave out.
"""
from __future__ import annotations

import asyncio
import csv
import difflib
import hashlib
import io
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from child_runs import child_env, finish, spawn
from masking import CONSOLE_TIME, ISO_TIME, UUID, Masker, mask_task_runs, task_label
from owner_registration import register_spec

pytestmark = pytest.mark.usefixtures("prefect_harness")

RELEASE_ID = "leak-e2e"
NOISE_SEED = "6"  # with it both selected outlier counts are above the clamp at 0, so D1's +1 shows

#: D1: one private cell of one valid record changed, and valid after the change (arr_delay is an integer
#: in [-120, 1440]). F001685 (dep_delay 180, arr_delay 176) is an ordinary flight, not among the
#: detector's top flagged records; at 186 it has no other flight within r of its arr_delay, so inside
#: the warehouse the true outlier count of the arr_delay subspace, the detector's scores and the AIQ
#: ball counts change.
CHANGED_RECORD, CHANGED_COLUMN, CHANGED_FROM, CHANGED_TO = "F001685", "arr_delay", "176", "186"
#: D2: one raw row added that fails validation: air_time 9999 is above the public bound 720 (quarantined).
ADDED_ROW = {
    "flight_id": "F003001", "carrier": "UA", "origin": "EWR", "month": "1", "dest": "IAH", "tailnum": "N14228",
    "distance": "1400", "air_time": "9999", "dep_delay": "2", "arr_delay": "11",
}
#: D3: one valid raw row added whose record id is already in the table: every row sharing an id is
#: quarantined, so the added row also removes F000001 from the validated table -- the id that AIQ and
#: PCOR are asked about by id. Before issue 15's holes 2-3 were closed, the steps refused the now
#: quarantined id for free (a failed run naming it, after record_counts was charged); now it is
#: charged and answered like any roster id.
DUPLICATED_ID = "F000001"
#: Differences found by this test whose fix is outside the files this test's author could change:
#: (surface regex, line regex, where the line comes from). Lines matching both are dropped from both
#: runs before comparing. The lead empties this list as the leaks are fixed.
KNOWN_LEAKS_TO_FIX: list[tuple[str, str, str]] = []


# ----------------------------------------------------------------------------- inputs and runs
def _neighbouring_inputs(base_csv: Path) -> dict[str, str]:
    """The CSV texts of D, D1 (one cell changed), D2 (one invalid row added) and D3 (one row added
    that duplicates an existing record id)."""
    text = base_csv.read_text()
    lines = text.splitlines()
    header = lines[0].split(",")
    col, rid = header.index(CHANGED_COLUMN), header.index("flight_id")
    rows = {line.split(",")[rid]: i for i, line in enumerate(lines)}
    changed = lines[rows[CHANGED_RECORD]].split(",")
    assert changed[col] == CHANGED_FROM, changed
    changed[col] = CHANGED_TO
    d1 = lines[:rows[CHANGED_RECORD]] + [",".join(changed)] + lines[rows[CHANGED_RECORD] + 1:]
    assert set(ADDED_ROW) == set(header)
    invalid = ",".join(ADDED_ROW[c] for c in header)
    duplicate = ",".join({**ADDED_ROW, "flight_id": DUPLICATED_ID, "air_time": "227"}[c] for c in header)
    assert DUPLICATED_ID in rows
    return {"D": text, "D1": "\n".join(d1) + "\n", "D2": "\n".join([*lines, invalid]) + "\n",
            "D3": "\n".join([*lines, duplicate]) + "\n"}


#: Flights of the small table in the re-run tests' D (the size is not what they test; each of their eight
#: releases runs in about two thirds of the 3,000 rows' time). The single-run test keeps all 3,000: its D1
#: changes flight 1,685 and its noise seed was chosen on that table.
RERUN_ROWS = 1000


def _rerun_inputs(base_csv: Path) -> dict[str, str]:
    """The CSV texts of D (the first :data:`RERUN_ROWS` flights) and D2 (D plus the invalid raw row of
    :func:`_neighbouring_inputs`)."""
    lines = base_csv.read_text().splitlines()[:RERUN_ROWS + 1]
    header = lines[0].split(",")
    assert set(ADDED_ROW) == set(header) and len(lines) == RERUN_ROWS + 1
    invalid = ",".join(ADDED_ROW[c] for c in header)
    return {"D": "\n".join(lines) + "\n", "D2": "\n".join([*lines, invalid]) + "\n"}


def _spec_text(small_spec_path: Path) -> str:
    """Every step enabled and doing real work on the small table; the input is ``input.csv`` next to
    the spec (relative path: the spec text is the same in every run)."""
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": "input.csv"}
    spec["release_id"] = RELEASE_ID
    steps = spec["steps"]
    steps["validation"]["max_rejected_fraction"] = 0.5  # the gate is tested elsewhere; here it lets all steps run
    # too few EM iterations to converge: every detector fit warns (ConvergenceWarning quoting its relative
    # log-likelihood change, a number computed from the data), and the warning must stay in the warehouse
    steps["detect"]["max_iter"] = 3
    # roster ids (F000001, F000002 are on specs/demo_roster.csv), the detector's top 2, one public point
    steps["aiq"].update({"enabled": True, "record_ids": ["F000001", "F000002"], "from_detector": 2})
    steps["outlier_counts"].update({"enabled": True})
    steps["coco"].update({"enabled": True, "max_group_size": 60})
    steps["unattributed"].update({"enabled": True, "max_group_size": 60})
    steps["pcor"].update({"enabled": True, "record_ids": ["F000001"], "from_detector": 2, "n_samples": 10,
                          "epsilon": 0.1})
    assert all(steps[s]["enabled"] for s in ("detect", "aiq", "outlier_counts", "coco", "unattributed", "pcor", "rules"))
    assert steps["aiq"]["points"] and spec["dataset"]["roster"]
    return yaml.safe_dump(spec)


@dataclass
class Run:
    """One child run: its folder (spec, input, homes) and what it left."""

    name: str
    folder: Path
    console: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    api: dict[str, Any] = field(default_factory=dict)
    #: flow-run names (Prefect's random slugs) of the child's earlier runs, which its console also shows
    earlier_names: list[str] = field(default_factory=list)
    #: the random ingest ids of the child's earlier runs (their console lines name them)
    earlier_inputs: list[str] = field(default_factory=list)

    @property
    def dpr_home(self) -> Path:
        return self.folder / "dpr"

    @property
    def prefect_home(self) -> Path:
        return self.folder / "prefect"

    release: str = RELEASE_ID

    @property
    def bundle(self) -> Path:
        """The bundle folder (where a failed run would have written it)."""
        return self.dpr_home / "bundles" / "nycflights13" / self.release


CHILD = """
    from flows.release_pipeline import release_pipeline
    report("release", lambda **kw: release_pipeline(spec_path={spec!r}, release_id={rid!r}, **kw))
"""


def _run_all(tmp_path: Path, spec: str, inputs: dict[str, str]) -> dict[str, Run]:
    """Release each input with the same spec, release id and noise seed, one child process each,
    concurrently; read each flow run back from the API."""
    runs, procs = {}, {}
    for i, (name, data) in enumerate(inputs.items()):
        folder = tmp_path / f"run{i}"  # same length for every run: the normaliser replaces the folder
        folder.mkdir()
        (folder / "spec.yaml").write_text(spec)
        (folder / "input.csv").write_text(data)
        run = runs[name] = Run(name, folder)
        register_spec(folder / "spec.yaml", home=run.dpr_home)  # the data owner, before the run (no overlap)
        env = child_env(tmp_path, run.dpr_home, run.prefect_home,
                        DPR_TEST_NOISE_SEED=NOISE_SEED, DPR_ALLOW_TEST_NOISE="1")
        procs[name] = spawn(CHILD.format(spec=str(folder / "spec.yaml"), rid=RELEASE_ID), env)
    for name, proc in procs.items():
        results, runs[name].console = finish(proc)
        assert len(results) == 1 and results[0]["run"], f"run {name}:\n{runs[name].console[-4000:]}"
        runs[name].result = results[0]
    for run in runs.values():
        run.api = asyncio.run(_read_api(run.result["run"]))
    return runs


SEQUENCE_CHILD = """
    import subprocess
    from flows.release_pipeline import release_pipeline
    report("first", lambda **kw: release_pipeline(spec_path={spec!r}, release_id={first!r}, **kw))
    Path({input!r}).write_text(Path({second_data!r}).read_text())
    report("release", lambda **kw: release_pipeline(spec_path={spec!r}, release_id={second!r}, **kw))
    for cmd in (["plan", {spec!r}, "--release-id", {second!r}], ["budget"]):
        res = subprocess.run([str(Path(sys.executable).parent / "dpr"), *cmd], capture_output=True, text=True)
        print(f"DPR {{' '.join(cmd[:1])}} exit {{res.returncode}}\\n{{res.stdout}}{{res.stderr}}", flush=True)
"""


def _run_sequences(tmp_path: Path, spec: str, first: str, seconds: dict[str, str], first_id: str,
                   second_id: str) -> dict[str, Run]:
    """Per name: one child that releases ``first`` under ``first_id``, then the input is replaced by
    ``seconds[name]`` and released under ``second_id``; the second run is the one read back and compared.
    Each child then prints ``dpr plan`` and ``dpr budget`` (compared as part of its console)."""
    runs, procs = {}, {}
    for i, (name, data) in enumerate(seconds.items()):
        folder = tmp_path / f"seq{i}"
        folder.mkdir()
        (folder / "spec.yaml").write_text(spec)
        (folder / "input.csv").write_text(first)
        (folder / "second.csv").write_text(data)
        run = runs[name] = Run(name, folder, release=second_id)
        register_spec(folder / "spec.yaml", home=run.dpr_home)  # the data owner, before the runs
        env = child_env(tmp_path, run.dpr_home, run.prefect_home,
                        DPR_TEST_NOISE_SEED=NOISE_SEED, DPR_ALLOW_TEST_NOISE="1")
        procs[name] = spawn(SEQUENCE_CHILD.format(spec=str(folder / "spec.yaml"), first=first_id, second=second_id,
                                                  input=str(folder / "input.csv"),
                                                  second_data=str(folder / "second.csv")), env)
    for name, proc in procs.items():
        results, runs[name].console = finish(proc)
        assert len(results) == 2 and all(r["run"] for r in results), f"run {name}:\n{runs[name].console[-4000:]}"
        assert results[0]["ok"], f"run {name}, first release:\n{runs[name].console[-4000:]}"  # its bundle is read below
        runs[name].result = results[1]
        runs[name].earlier_names = [asyncio.run(_flow_run_name(results[0]["run"]))]
        first_manifest = Path(results[0]["out"]["bundle"]) / "manifest.json"
        runs[name].earlier_inputs = [json.loads(first_manifest.read_text())["input_id"]]
    for run in runs.values():
        run.api = asyncio.run(_read_api(run.result["run"]))
    return runs


def _progress_free(text: str) -> str:
    """``text`` with a progress artifact's count done and percentage replaced: its updates reach the API in
    the background, so how far it had got when the API was read is a matter of timing (the total, ``of N``,
    is public and kept)."""
    text = re.sub(r"(type=progress task_run=[^\n]*\n[^\n]*?: )\d+( of \d+ done\n)[\d.]+", r"\1<k>\2<pct>", text)
    text = re.sub(r'"data": [\d.]+, +"description": "([^"]*?): \d+ of (\d+) done"',
                  r'"data": <pct>, "description": "\1: <k> of \2 done"', text)
    return text


# ----------------------------------------------------------------------------- the Prefect API
async def _flow_run_name(run_id: str) -> str:
    """The name of one flow run (what the comparison needs of a child's earlier run; :func:`_read_api` would
    also wait for its events and read all of its task runs)."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return (await client.read_flow_run(uuid.UUID(run_id))).name


async def _read_api(run_id: str) -> dict[str, Any]:
    """Everything the API holds about one flow run (models dumped as JSON-ready dicts)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId, TaskRunFilter, TaskRunFilterFlowRunId,
    )
    from prefect.client.schemas.sorting import LogSort
    from prefect.events.filters import EventAnyResourceFilter, EventFilter

    rid = uuid.UUID(run_id)

    def dump(models) -> list[dict[str, Any]]:
        return [m.model_dump(mode="json") for m in models]

    async with get_client() as client:
        async def events() -> list[dict[str, Any]]:
            page = await client.read_events(
                filter=EventFilter(any_resource=EventAnyResourceFilter(id=[f"prefect.flow-run.{run_id}"])), limit=50
            )
            out = list(page.events)
            while page.next_page:
                page = await client.read_events_page(page.next_page)
                out += page.events
            return dump(out)

        # the child has exited (its logs and events are sent); the server persists events in batches:
        # wait until the event of the flow run's final state is there and the count is stable
        flow_run = await client.read_flow_run(rid)
        final = f"prefect.flow-run.{flow_run.state.name}"
        deadline, evs, last = time.monotonic() + 60, [], -1
        while time.monotonic() < deadline:
            evs = await events()
            if len(evs) == last and any(e["event"] == final for e in evs):
                break
            last = len(evs)
            await asyncio.sleep(1.5)
        task_runs = await client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[rid])), limit=200
        )
        logs, offset = [], 0
        while True:
            page = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[rid])),
                                          limit=200, offset=offset, sort=LogSort.TIMESTAMP_ASC)
            logs += page
            offset += len(page)
            if len(page) < 200:
                break
        return {
            "flow_run": flow_run.model_dump(mode="json"),
            "flow_run_states": dump(await client.read_flow_run_states(rid)),
            "task_runs": [
                {**t.model_dump(mode="json"), "state_history": dump(await client.read_task_run_states(t.id))}
                for t in task_runs
            ],
            "logs": dump(logs),
            "artifacts": dump(await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[rid])))),
            "events": evs,
        }


# ----------------------------------------------------------------------------- normalisation
#: Fields of Prefect's run, state, log, artifact and event models that are clock readings or
#: durations (when something happened, how long it took), never a function of the data's content.
#: Their presence is compared, their value is not. (Timing is a side channel this test does not
#: control: the run time of a task does depend on the data.)
CLOCK_FIELDS = {
    "created", "updated", "timestamp", "start_time", "end_time", "expected_start_time",
    "next_scheduled_start_time", "total_run_time", "estimated_run_time", "estimated_start_time_delta",
    "occurred", "received", "prefect.state-timestamp", "scheduled_time",
}


class _Normaliser:
    """What differs between runs without being a function of the data, replaced by placeholders.

    * the run's folder (``tmp_path/run<i>``, chosen by this test: spec path parameter, bundle and
      warehouse paths in logs, artifacts and the flow's return value);
    * the manifest's ``input_id``: a random nonce from the OS CSPRNG (``dpcore.storage.lineage.new_nonce``);
    * the manifest's ``ledger.id``: a random nonce made with each fresh ledger (each run has its own home);
    * each charge's ``ref`` / ``public_ref``: a random nonce per charge, numbered here in the
      manifest's charge order (which is the order the steps ran, a public fact);
    * the ``spec_fingerprint``: HMAC of the spec under the data owner's key, a random key created in
      each fresh ``DPR_HOME`` (the spec text is the same in every run);
    * the flow-run name: Prefect's random adjective-animal slug (and those of the child's earlier runs);
    * task-run names: ``<task name>-<first 3 hex digits of a random uuid4>`` (Prefect's dynamic
      key), replaced by the task name in the API's records (mapped tasks share that name and their
      lines are compared as a multiset) and by ``<task name>-<run>`` in text, the form
      :func:`masking.mask_task_runs` gives the task runs of the child's earlier runs (the console
      shows those too): one form for every run, so an earlier run's name that shares this run's 3
      random digits (a 1 in 4,096 chance per task) reads like any other;
    * every other UUID (flow-run, task-run, state, transition, artifact, log and event ids, the
      flow's id): random uuid4/uuid7 from Prefect;
    * the other random tokens of ``tests/masking.py`` (task-run names in free text, temporary folder
      names, local ports), through its :class:`~masking.Masker`; 16-hex tokens are NOT masked there
      (only the known nonces above are): a data-derived hex token must stay visible;
    * clock readings and durations (``CLOCK_FIELDS``, ISO timestamps in the bundle, the console's
      ``HH:MM:SS.mmm`` prefix, the manifest's ``created_at``, the ledger's ``reserved_at``).
    """

    def __init__(self, run: Run):
        exact = {str(run.folder): "<RUN>", run.api["flow_run"]["name"]: "<flow-run-name>",
                 **{n: f"<earlier-flow-run-name-{i}>" for i, n in enumerate(run.earlier_names)},
                 **{n: f"<earlier-ingest-id-{i}>" for i, n in enumerate(run.earlier_inputs)}}
        self.refs: dict[str, str] = {}
        path = run.bundle / "manifest.json"
        if path.exists():  # (a run that failed before its bundle has none)
            manifest = json.loads(path.read_text())
            self.refs = {r["ref"]: f"<charge-ref-{i}>" for i, r in enumerate(manifest["releases"])}
            fp = manifest["spec_fingerprint"]
            exact.update({manifest["input_id"]: "<ingest-id>", manifest["ledger"]["id"]: "<ledger-id>",
                          fp: "<spec-fingerprint>",
                          fp[:12]: "<spec-fingerprint-12>", **self.refs})
        self.task_label = {t["id"]: task_label(t["name"]) for t in run.api["task_runs"]}
        names = {t["name"]: mask_task_runs(t["name"]) for t in run.api["task_runs"]}
        exact.update(names)
        assert all(len(k) >= 3 for k in exact), exact
        # longest first, on token boundaries, so a short name never replaces part of a longer one
        self._exact = re.compile("|".join(
            rf"(?<![\w-]){re.escape(k)}(?![\w-])" for k in sorted(exact, key=len, reverse=True)))
        self._exact_map = exact
        self._ids = {run.result["run"]: "<flow-run-id>", **{k: f"<task-run:{v}>" for k, v in self.task_label.items()}}
        self._random = Masker(nonces=False)

    def text(self, s: str) -> str:
        s = self._exact.sub(lambda m: self._exact_map[m.group(0)], s)
        s = UUID.sub(lambda m: self._ids.get(m.group(0), "<uuid>"), s)
        s = ISO_TIME.sub("<time>", s)
        s = CONSOLE_TIME.sub("<HH:MM:SS.mmm> |", s)
        return self._random(s)  # task-run names in free text, temporary folder names, ports

    def obj(self, o: Any, mask: bool = False) -> str:
        """A dumped model as sorted JSON (not yet through :meth:`text`).

        Clock fields are blanked; ``task_inputs`` is reduced to its parameter names: Prefect links a
        task's inputs to upstream task runs by object identity, and for plain ``dict``/``list``/
        ``str``/``tuple`` values by ``id()`` alone, so a recycled memory address inherits an earlier
        task's run (Prefect's documented stale-id limitation, ``get_state_for_result``) and the links
        (and their order, a set's) change between two runs on the same input; which task feeds which
        is the flow's code. An artifact-collection event is ``created`` for the first artifact with
        its key on the server and ``updated`` after: which of the concurrent runs came first.
        With ``mask``, Markdown strings (the report in the release artifact and in its events) go
        through :func:`mask_report`.
        """
        def walk(x: Any, key: str | None = None) -> Any:
            if isinstance(x, dict):
                return {k: ("<clock>" if k in CLOCK_FIELDS and v is not None
                            else sorted(v) if k == "task_inputs" and isinstance(v, dict) else walk(v, k))
                        for k, v in x.items()}
            if isinstance(x, list):
                return [walk(v) for v in x]
            if key == "event" and x in ("prefect.artifact-collection.created", "prefect.artifact-collection.updated"):
                return "prefect.artifact-collection.created-or-updated"
            if mask and isinstance(x, str) and "\n## " in x:
                return mask_report(x)
            return x

        return json.dumps(walk(o), indent=1, sort_keys=True, ensure_ascii=False)


# ----------------------------------------------------------------------------- charged numbers
CHARGED = "<charged>"

#: Report sections (Markdown, ``report.md`` and the release artifact) and, in each, the pattern of
#: the lines carrying a value the ledger charged for, with what stays visible. Nothing else is masked.
CHARGED_REPORT_LINES: dict[str, list[tuple[re.Pattern, str]]] = {
    # record_counts: the noisy (accepted, input) counts and their difference (post-processing)
    # (the interval's level is public and stays visible; its clipped ends and the note on whether 0 is
    # inside are functions of the charged count, masked with it; the half-width is in the manifest)
    "## Record counts": [(re.compile(r"^\| (accepted_rows|input_rows|quarantined_rows) \| [\d,]+ \((\d+%): "
                                     r"[\d,]+ to [\d,]+(?:; [^|]*)?\) \|$"),
                          rf"| \1 | {CHARGED} (\2: {CHARGED}) |")],
    # aiq: one answer per query (the queries are public: roster ids, detector choice, public points)
    # (the public worst-case error probability after each answer stays visible)
    "## Anomaly identification queries": [(re.compile(r"^\| ((?:record|point):[^|]*) \| (?:yes|no) \|( [^|]+ \|)$"),
                                           rf"| \1 | {CHARGED} |\2")],
    # outlier_counts: the subspace chosen at each rank (exponential mechanism) and its noisy count (an
    # integer for the discrete Laplace, 2 decimals for the Gaussians) with its clipped 95% interval (ends
    # and the note on 0 are functions of the count; the public half-width is in the manifest)
    "## Outlier subspaces and counts": [(re.compile(r"^\| (\d+) \| [^|]+ \| [\d,]+(?:\.\d\d)? \((95%): "
                                                    r"[\d.,]+ to [\d.,]+(?:; [^|]*)?\) \|$"),
                                         rf"| \1 | {CHARGED} | {CHARGED} (\2: {CHARGED}) |")],
    # coco: the number of non-zero cells of the released (noisy, post-processed) histograms, and the
    # empirical accuracy of each level (a parametric bootstrap from the release: post-processing of it)
    "## Count-of-counts histograms": [
        (re.compile(r"\([\d,]+ non-zero cells\)"), f"({CHARGED} non-zero cells)"),
        (re.compile(r"^\| (\d+) \| \d+ \| [-+.\de]+ \| ([^|]+) \|$"), rf"| \1 | {CHARGED} | {CHARGED} | \2 |")],
    # pcor: the released context of each explained record and its status (released / no valid context)
    # unattributed: the largest released sizes quoted in the text (charged values)
    "## Group sizes, largest first": [(re.compile(r"Largest ten: [\d, ]+\."), f"Largest ten: {CHARGED}.")],
    "## Private contextual outlier explanations": [
        (re.compile(r"^\| ([^|]+) \| [^|]+ \| (?:released|no_valid_context) \|$"), rf"| \1 | {CHARGED} | {CHARGED} |")],
}

#: Released tables (``tables/<step>__<name>.csv|.parquet``): the columns holding charged values.
#: ``None`` for coco: every cell (group size, groups) of the non-zero histogram cells is charged, and so
#: is how many cells each node has; its public part is the nodes and levels, in order.
CHARGED_COLUMNS: dict[str, list[str] | None] = {
    "record_counts__counts": ["noisy_count"],
    "aiq__answers": ["anomaly"],
    "outlier_counts__counts": ["subspace", "noisy_count"],
    "coco__histograms": None,
    "unattributed__sorted_sizes": ["size"],
    "pcor__explanations": ["status", "context", "bits"],
}
COCO_PLOTS = re.compile(r"^coco_.*\.png$")  # pictures of the released coco histograms (dpcore.publish.plots.coco_plots)
#: picture of the released (charged) sorted group sizes (dpcore.publish.plots.rank_size_plot)
UNATTRIBUTED_PLOT = "unattributed.png"


def mask_report(md: str) -> str:
    """The report with the charged values of :data:`CHARGED_REPORT_LINES` replaced, nothing else."""
    section, out = "", []
    for line in md.splitlines():
        if line.startswith("## "):
            section = line
        for head, rules in CHARGED_REPORT_LINES.items():
            if section.startswith(head):
                for pattern, repl in rules:
                    line = pattern.sub(repl, line)
        out.append(line)
    return "\n".join(out) + ("\n" if md.endswith("\n") else "")


def mask_manifest(text: str) -> str:
    """A JSON file of the bundle with the empirical accuracy figures (``kind == "empirical"``: computed from the
    released, charged values) replaced; every other statement comes from the spec only and stays."""
    doc = json.loads(text)
    for prot in doc.get("protection", []) if isinstance(doc, dict) else []:
        for a in (prot.get("accuracy") or {}).values():
            if a.get("kind") == "empirical":
                a["bound"] = a["statement"] = CHARGED
    return json.dumps(doc, indent=1, sort_keys=True)


def mask_table(name: str, text: str) -> str:
    """A released table (CSV text) with its charged columns (:data:`CHARGED_COLUMNS`) replaced."""
    if name not in CHARGED_COLUMNS:
        return text
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    cols = CHARGED_COLUMNS[name]
    if cols is None:  # coco: keep (node, level) of each run of cells, in order
        # the measurement accuracy columns (public: from the spec only) are kept and compared; the
        # empirical half-width is a bootstrap from the release (post-processing of charged values)
        assert header == ["node", "level", "group_size", "groups", "ci_level", "measurement_half_width",
                          "empirical_half_width"], header
        kept = []
        for r in body:
            r = [r[0], r[1], CHARGED, CHARGED, r[4], r[5], CHARGED]
            if not kept or kept[-1] != r:
                kept.append(r)
        body = kept
    else:
        idx = [header.index(c) for c in cols]
        body = [[CHARGED if i in idx else v for i, v in enumerate(r)] for r in body]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([header, *body])
    return buf.getvalue()


# ----------------------------------------------------------------------------- the surfaces
def _parquet_text(path: Path) -> tuple[str, str]:
    """(schema with its metadata, the rows as CSV) of a Parquet file."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table.schema.to_string(show_schema_metadata=True), table.to_pandas().to_csv(index=False)


def surfaces(run: Run) -> tuple[dict[str, str], dict[str, str]]:
    """Every public surface of a run: (normalised and masked, normalised only), by surface name.

    Unordered surfaces (lines of concurrently running tasks, whose interleaving follows thread
    scheduling) are returned with their lines sorted: content and multiplicity are compared, order not.
    """
    n = _Normaliser(run)
    out: dict[str, str] = {}
    raw: dict[str, str] = {}

    def put(name: str, text: str, mask: Callable[[str], str] = lambda s: s, unordered: bool = False,
            masked_text: str | None = None) -> None:
        def norm(t: str) -> str:
            t = n.text(t)
            return "\n".join(sorted(t.splitlines())) if unordered else t

        raw[name] = norm(text)
        out[name] = norm(masked_text) if masked_text is not None else mask(raw[name])

    # the bundle: every file except owner/ (the data owner's validation summary, documented as not
    # privacy-protected and never to be published)
    files = sorted(str(p.relative_to(run.bundle)) for p in run.bundle.rglob("*") if p.is_file())  # none if it failed
    put("bundle: file list", "\n".join(files))
    for rel in files:
        path = run.bundle / rel
        if rel.startswith("owner/"):
            continue
        if path.suffix == ".md":
            put(f"bundle: {rel}", path.read_text(), mask_report)
        elif path.suffix == ".json":
            put(f"bundle: {rel}", json.dumps(json.loads(path.read_text()), indent=1, sort_keys=True), mask_manifest)
        elif path.suffix == ".csv":
            put(f"bundle: {rel}", path.read_text(), lambda s, t=path.stem: mask_table(t, s))
        elif path.suffix == ".parquet":
            schema, rows = _parquet_text(path)
            put(f"bundle: {rel} (schema)", schema)
            put(f"bundle: {rel} (rows)", rows, lambda s, t=path.stem: mask_table(t, s))
        elif path.suffix == ".png":
            put(f"bundle: {rel}", f"png sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}")
        else:
            put(f"bundle: {rel}", path.read_bytes().decode("latin-1"))

    api = run.api
    put("api: flow run", n.obj(api["flow_run"]))
    put("api: flow run states", n.obj(api["flow_run_states"]))
    by_label: dict[str, list[str]] = {}
    for t in api["task_runs"]:  # name, task key, inputs, policy, state and state history of each task run
        by_label.setdefault(n.task_label[t["id"]], []).append(n.obj(t))
    for label, dumps in by_label.items():  # a mapped task's runs share a label: compared as a multiset
        put(f"api: task runs {label}", "\n-----\n".join(sorted(dumps)))
    put("api: logs", "\n".join(
        f"{log['level']} {log['name']} [{n.task_label.get(log['task_run_id'], 'flow')}] {log['message']}"
        for log in api["logs"]), unordered=True)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for a in sorted(api["artifacts"], key=lambda a: a["created"]):  # every version, in the order created
        by_key.setdefault(str(a["key"]), []).append(a)
    for key, versions in by_key.items():
        text = "\n-----\n".join(
            _progress_free(f"type={a['type']} task_run={n.task_label.get(a['task_run_id'], 'flow')}\n"
                           f"{a['description']}\n" + (a["data"] if isinstance(a["data"], str) else json.dumps(a["data"])))
            for a in versions)
        put(f"api: artifact {key}", text, mask_report if versions[0]["type"] == "markdown" else lambda s: s)
    # heartbeats are emitted on a clock while the flow runs: their number is a duration
    events = [e for e in api["events"] if e["event"] != "prefect.flow-run.heartbeat"]
    put("api: events", "\n".join(_progress_free(n.obj(e).replace("\n", " ")) for e in events), unordered=True,
        masked_text="\n".join(_progress_free(n.obj(e, mask=True).replace("\n", " ")) for e in events))
    put("console (stdout + stderr)", run.console, unordered=True)
    put("PREFECT_HOME", "\n".join(
        f"{p.relative_to(run.prefect_home)} {hashlib.sha256(p.read_bytes()).hexdigest()}"
        for p in sorted(run.prefect_home.rglob("*")) if p.is_file()))
    return out, raw


def _allowed(surface: str, line: str) -> bool:
    return any(re.search(s, surface) and re.search(pat, line) for s, pat, _ in KNOWN_LEAKS_TO_FIX)


def differences(base: tuple[dict, dict], other: tuple[dict, dict], name: str) -> list[str]:
    """Unified diffs of every surface that differs between D and ``name`` after masking."""
    (a, a_raw), (b, b_raw) = base, other
    report = []
    for surface in sorted(set(a) | set(b)):
        if surface not in a or surface not in b:
            report.append(f"surface {surface!r} only in {'D' if surface in a else name}")
            continue
        x, y = a[surface], b[surface]
        png = re.match(r"bundle: (.*\.png)$", surface)
        if png and COCO_PLOTS.match(png.group(1)) and a_raw["bundle: tables/coco__histograms.csv"] != \
                b_raw["bundle: tables/coco__histograms.csv"]:
            continue  # a picture of the released (charged) coco histograms, and those differ
        if png and png.group(1) == UNATTRIBUTED_PLOT and a_raw["bundle: tables/unattributed__sorted_sizes.csv"] != \
                b_raw["bundle: tables/unattributed__sorted_sizes.csv"]:
            continue  # a picture of the released (charged) sorted sizes, and those differ
        xl = [line for line in x.splitlines() if not _allowed(surface, line)]
        yl = [line for line in y.splitlines() if not _allowed(surface, line)]
        if xl != yl:
            diff = difflib.unified_diff(xl, yl, f"{surface} [D]", f"{surface} [{name}]", lineterm="", n=1)
            report.append("\n".join(list(diff)[:60]))
    return report


# ----------------------------------------------------------------------------- the test
def _warehouse_facts(run: Run) -> dict[str, Any]:
    """Internal (non-public) facts of a run, to show the inputs really differ inside the warehouse."""
    from dpcore.storage.warehouse import Warehouse

    wh = Warehouse(run.dpr_home / "warehouse.duckdb")
    (vt,) = [r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")]
    top = wh.query(f'SELECT v.flight_id FROM internal."detect_flags__{vt}" f JOIN validated."{vt}" v USING (_row) '
                   "WHERE f.flagged ORDER BY f.max_score DESC LIMIT 2")
    return {
        "n_raw": wh.query("SELECT n_rows FROM raw.ingests")[0][0],
        "n_valid": wh.query(f'SELECT count(*) FROM validated."{vt}"')[0][0],
        "valid_ids": {r[0] for r in wh.query(f'SELECT flight_id FROM validated."{vt}"')},
        "scores": wh.query_df(f'SELECT v.flight_id, s.template, s.score FROM internal."detect_scores__{vt}" s '
                              f'JOIN validated."{vt}" v USING (_row) ORDER BY ALL'),
        "top2": sorted(r[0] for r in top),
        "outlier_true_counts": dict(wh.query("SELECT subspace, true_count FROM internal.outlier_count_diagnostics")),
        # the owner-only outlier rules (issue 18): texts and scores that must reach no public surface
        "rules": wh.query_df("SELECT rule, precision, recall, f1 FROM internal.outlier_rules WHERE rule IS NOT NULL"),
    }


@pytest.mark.timeout(600)
def test_neighbouring_inputs_leave_identical_public_traces_except_charged_noise(
    tmp_path, small_spec_path, small_flights_csv
):
    """Four real Prefect flow runs of the release pipeline on D and its neighbours D1 (one private
    cell changed), D2 (one invalid raw row added) and D3 (one raw row added that duplicates a record
    id), seeded noise: every public surface of D1, D2 and D3 is identical to D's after normalising
    random ids and clocks and masking the values the ledger charged for; no Python warning raised
    by a private computation reaches the console or the API's logs."""
    runs = _run_all(tmp_path, _spec_text(small_spec_path), _neighbouring_inputs(small_flights_csv))
    assert runs["D"].result["ok"], runs["D"].console[-4000:]
    ok = {name for name, run in runs.items() if run.result["ok"]}
    for name in ok:
        assert Path(runs[name].result["out"]["bundle"]) == runs[name].bundle
    # a neighbour whose release fails (D's did not) is a leak in itself; the surface diffs below show where
    problems = [f"--- {name}: the release failed, D's did not: {runs[name].result['error']}: "
                f"{runs[name].result['message']}" for name in sorted(set(runs) - ok)]

    # the neighbours differ where they should, inside the warehouse
    facts = {name: _warehouse_facts(runs[name]) for name in ok}
    counts = {name: {r["cell"]: int(r["noisy_count"]) for r in csv.DictReader(io.StringIO(
        (runs[name].bundle / "tables" / "record_counts__counts.csv").read_text()))} for name in ok}
    d, c = facts["D"], counts["D"]
    # the detector's choice (published by design, a stated non-goal) is the same, so the queried ids are
    for name in ok - {"D"}:
        assert facts[name]["top2"] == d["top2"] and not {CHANGED_RECORD, DUPLICATED_ID} & set(d["top2"]), name
    # the same seed gives the same draws: each noisy count moves by exactly its true count's change
    if "D1" in ok:
        d1 = facts["D1"]
        assert (d1["n_raw"], d1["n_valid"]) == (d["n_raw"], d["n_valid"])
        assert not d["scores"].equals(d1["scores"])  # the changed cell moved the detector's internal scores
        assert d1["outlier_true_counts"]["arr_delay"] == d["outlier_true_counts"]["arr_delay"] + 1
        assert counts["D1"] == c
    if "D2" in ok:  # the added row is quarantined
        assert (facts["D2"]["n_raw"], facts["D2"]["valid_ids"]) == (d["n_raw"] + 1, d["valid_ids"])
        assert counts["D2"] == {**c, "input_rows": c["input_rows"] + 1, "quarantined_rows": c["quarantined_rows"] + 1}
    if "D3" in ok:  # the added row and the row whose id it shares are quarantined
        assert (facts["D3"]["n_raw"], facts["D3"]["valid_ids"]) == (d["n_raw"] + 1, d["valid_ids"] - {DUPLICATED_ID})
        assert counts["D3"] == {"accepted_rows": c["accepted_rows"] - 1, "input_rows": c["input_rows"] + 1,
                                "quarantined_rows": c["quarantined_rows"] + 2}

    found = {name: surfaces(run) for name, run in runs.items()}
    if os.environ.get("LEAK_TEST_DUMP"):  # for investigating a failure: every surface of every run, as compared
        for name, (masked, _) in found.items():
            folder = Path(os.environ["LEAK_TEST_DUMP"]) / name
            folder.mkdir(parents=True, exist_ok=True)
            for surface, text in masked.items():
                (folder / re.sub(r"[^\w.-]+", "_", surface)).write_text(text)
    base = found["D"][0]
    # every kind of surface was collected and is not empty
    assert {"bundle: report.md", "bundle: manifest.json", "api: flow run", "api: logs", "api: events",
            "console (stdout + stderr)", "api: artifact release-nycflights13"} <= set(base)
    assert any(s.startswith("bundle: tables/") and s.endswith(".csv") for s in base)
    assert any(s.startswith("bundle: coco_") for s in base) and "bundle: budget.png" in base
    assert sum(s.startswith("api: task runs ") for s in base) >= 20
    assert len(base["api: logs"].splitlines()) >= 30 and len(base["api: events"].splitlines()) >= 60
    # the masks matter: the released counts differ between D and D2 before masking, not after
    if "D2" in ok:
        assert found["D"][1]["bundle: tables/record_counts__counts.csv"] != found["D2"][1]["bundle: tables/record_counts__counts.csv"]

    # the owner-only outlier rules reach no public surface: neither a rule's text nor its thresholds or scores
    rules = d["rules"]
    assert len(rules) > 0
    secrets = set(rules["rule"]) | {n for r in rules["rule"] for n in re.findall(r"\d+\.\d+", r)}
    secrets |= {f"{v:.6f}" for col in ("precision", "recall", "f1") for v in rules[col] if 0 < v < 1}
    for surface, text in found["D"][1].items():
        hit = sorted(x for x in secrets if len(x) >= 5 and x in text)
        if hit:
            problems.append(f"--- D: owner-only rule text or score in {surface}: {hit[:5]}")

    # every fit warned (max_iter = 3); such a warning carries data-derived numbers and whether it fires is
    # private: none may reach a handler (the detector keeps them in internal.detect_models)
    for name, (masked, _) in found.items():
        for surface in ("console (stdout + stderr)", "api: logs"):
            warned = [line for line in masked[surface].splitlines() if re.search(r"py\.warnings|Warning\b", line)]
            if warned:
                problems.append(f"--- {name}: Python warnings reached {surface} ---\n" + "\n".join(warned[:10]))
    for name in ("D1", "D2", "D3"):
        problems += [f"--- {name} vs D ---\n{p}" for p in differences(found["D"], found[name], name)]
    if problems:
        pytest.fail(f"{len(problems)} public surface(s) differ or leak:\n\n" + "\n\n".join(problems), pytrace=False)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("same_id", [True, False], ids=["one-release-id", "two-release-ids"])
def test_a_rerun_on_changed_data_leaves_the_trace_of_a_rerun_on_unchanged_data(
    tmp_path, small_spec_path, small_flights_csv, same_id
):
    """Issue 28 §1-2: the snapshots (D, D) and (D, D + one record) released in sequence. Under one release
    id, the second run is the stored release in both cases: every public surface of the second run
    (bundle, manifest, report, Prefect run, task runs, logs, artifacts, events, the flow's result, the
    console, ``dpr plan`` and ``dpr budget``) is identical, with nothing masked but random ids and clocks.
    Under two release ids, the second run is a new release of each snapshot and differs only in the
    values the ledger charged for (as for the single-run neighbours above). D is the small table's first
    :data:`RERUN_ROWS` flights."""
    inputs = _rerun_inputs(small_flights_csv)
    second = RELEASE_ID if same_id else RELEASE_ID + "-2"
    runs = _run_sequences(tmp_path, _spec_text(small_spec_path), inputs["D"], {"D": inputs["D"], "D2": inputs["D2"]},
                          RELEASE_ID, second)
    for name, run in runs.items():
        assert run.result["ok"], f"{name}: {run.console[-4000:]}"
        assert run.result["out"]["stored_release"] is same_id, name
    found = {name: surfaces(run) for name, run in runs.items()}
    if same_id:  # nothing masked: the stored release is the stored release
        problems = differences((found["D"][1], found["D"][1]), (found["D2"][1], found["D2"][1]), "D2")
    else:
        problems = differences(found["D"], found["D2"], "D2")
    assert "DPR plan exit 0" in found["D"][0]["console (stdout + stderr)"]
    if problems:
        pytest.fail(f"{len(problems)} public surface(s) differ:\n\n" + "\n\n".join(problems), pytrace=False)


GUARD_PROBE = """
import logging, sys, threading, warnings
logging.basicConfig(stream=sys.stdout, format="LOGGED %(name)s: %(message)s")
import tasks.common as common

@common._private_warnings
def private(text, enter=None, leave=None):
    # a step's own catch_warnings(record=True) block, as dpcore.steps.detect.fit_one has
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        if enter:
            enter()
    if leave:
        leave()
    warnings.warn(text)

warnings.simplefilter("always")
private("private 1 (stderr route)")
warnings.warn("public 1")
logging.captureWarnings(True)  # what importing great-expectations does
private("private 2 (logging route)")
warnings.warn("public 2")

# two private tasks in threads with overlapping catch_warnings blocks: B enters its block while A is in
# its own; A leaves first, restoring the process-wide handler while B's block is still open, and warns:
# without the guard that warning goes out through the restored handler
a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
def task_a():
    private("private 3 (thread A, while B's block is open)", enter=lambda: (a_in.set(), b_in.wait()), leave=a_out.set)
def task_b():
    a_in.wait()
    private("private 4 (thread B)", enter=lambda: (b_in.set(), a_out.wait()))
threads = [threading.Thread(target=task_a), threading.Thread(target=task_b)]
[t.start() for t in threads]
[t.join() for t in threads]
print("DONE", flush=True)
"""


def test_warnings_raised_in_private_tasks_reach_no_handler(tmp_path):
    """``tasks.common.private_task`` bodies: a warning they raise reaches neither stderr nor a
    ``py.warnings`` log handler, through either route and across threads whose
    ``warnings.catch_warnings`` blocks overlap (what happened to the detector's ConvergenceWarning
    with its data-derived relative change, found by the end-to-end test); warnings outside private
    tasks still do."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", GUARD_PROBE], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "DONE" in out.stdout, text
    assert "public 1" in out.stderr and "LOGGED py.warnings:" in out.stdout and "public 2" in out.stdout, text
    assert "private" not in text, text
