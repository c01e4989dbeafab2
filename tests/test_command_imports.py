"""`dpr spec check` and `dpr plan` stay light (issue 32, section 2: at most 2 s each on the demo).

They read a spec, its public files and the ledger: no Prefect, no data. What made them slow was what they
imported (Prefect, pandas, scipy, pint, great-expectations), not what they did. The test runs each command
in a fresh interpreter, exactly as the ``dpr`` console script does, and reads ``sys.modules`` at its end:
deterministic, not timed. It fails as soon as a change makes either command load one of those packages
again (a top-level ``import pandas as pd`` in a module the planners import, a planner that calls scipy).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "specs" / "demo.yaml")

#: Packages the two commands must not load (Prefect and great-expectations load in seconds; pandas and
#: scipy in about a second each; pint loads scipy and dask).
HEAVY = ("prefect", "great_expectations", "pandas", "scipy", "pint", "opendp", "numba", "matplotlib", "dask")

_PROBE = """
import json, sys
args, watched = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["dpr", *args]
from dpr.main import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
loaded = sorted(m for m in watched if m in sys.modules)
print("\\nPROBE " + json.dumps({"exit": code, "loaded": loaded}))
"""


def _env(home: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPR_", "PREFECT_"))}
    env.update(DPR_HOME=str(home), XDG_CACHE_HOME=str(cache), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               COLUMNS="200")
    return env


def _probe(args: list[str], env: dict[str, str]) -> dict:
    """Run ``dpr ARGS`` in a fresh interpreter; its exit code and which of :data:`HEAVY` it loaded."""
    res = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(HEAVY)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("PROBE ")]
    assert line, f"dpr {' '.join(args)} did not finish:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return {**json.loads(line[-1][len("PROBE "):]), "out": res.stdout, "err": res.stderr}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """A fresh home with the demo registered, and a unit memo filled by one first `dpr spec check`.

    The first check of a spec's units on a machine asks pint (:mod:`dpcore.explain.unit_memo`); every later
    one reads the memo. The commands under test are the later ones, as an owner runs them.
    """
    base = tmp_path_factory.mktemp("imports")
    e = _env(base / "home", base / "cache")
    first = _probe(["spec", "check", DEMO], e)
    assert first["exit"] == 0, first["err"]
    reg = subprocess.run([sys.executable, "-m", "dpr", "dataset", "add", "nycflights13", "--spec", DEMO],
                         cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)
    assert reg.returncode == 0, reg.stderr
    return e


@pytest.mark.parametrize("args", [
    ["spec", "check", DEMO],
    ["plan", DEMO],
    ["plan", DEMO, "--json"],
], ids=["spec-check", "plan", "plan-json"])
def test_spec_check_and_plan_load_no_heavy_package(env, args):
    got = _probe(args, env)
    assert got["exit"] == 0, got["err"]  # the demo is valid and fits its budget: the whole path ran
    assert got["loaded"] == [], f"dpr {' '.join(args)} loaded {got['loaded']}"


def test_the_plan_still_covers_every_step(env):
    """The light path plans what it planned before: every enabled step of the demo, with its charges."""
    got = _probe(["plan", DEMO, "--json"], env)
    plan = json.loads(got["out"].split("\nPROBE ")[0])
    sections = {ln["section"] for ln in plan["lines"]}
    assert sections == {"steps.record_counts", "steps.aiq", "steps.outlier_counts", "steps.coco",
                        "steps.unattributed", "steps.pcor"}
    assert plan["problems"] == [] and plan["registered"] is True


def test_operator_flows_load_no_great_expectations_until_they_validate(tmp_path):
    """`dpr aiq` (any operator query) imports its flow before it runs: great-expectations (seconds to import)
    loads only when an input is validated for the first time, and the bundle's budget picture needs no
    pyplot."""
    code = ("import json, sys\n"
            "import flows.aiq_query, flows.explain_outlier, flows.coco_publish, flows.release_pipeline\n"
            "from dpcore.run.pipeline import validate_stage\n"
            "from dpcore.validation import public_rule_set\n"
            "print(json.dumps(sorted(m for m in ('great_expectations', 'matplotlib.pyplot') if m in sys.modules)))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=_env(tmp_path / "home", tmp_path / "cache"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []
