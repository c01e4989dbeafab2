"""The import rules (issue 49 §1) hold: ``lint-imports`` keeps every contract of ``.importlinter``.

The contracts: the entry points (``dpr``, ``deployments``) over ``flows`` over ``tasks`` over
``dpcore``; ``dpcore`` never imports Prefect; inside ``dpcore`` its packages in layers (``run`` over
``steps`` over ``publish | detect | validation | mechanisms`` over ``ingest`` over ``release`` over
``budget | explain | noise`` over ``storage`` over ``runtime``), every top-level package of ``dpcore``
placed in a layer (``exhaustive``). A function-level import counts like any other.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("dpcore", "tasks", "flows", "dpr", "deployments")


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the checkout at ``root`` (its own packages first on the path; no cache written)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / ".importlinter")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "3 kept, 0 broken" in res.stdout


def test_an_upward_import_breaks_its_contract(tmp_path):
    """A copy of the code with one upward import per contract: each contract is reported broken, naming it."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    # storage (low) reaching up to the run (top), inside a function: still an import
    (tmp_path / "dpcore" / "storage" / "upward.py").write_text(
        "def plan(spec):\n    from dpcore.run.cost_plan import plan_release\n\n    return plan_release(spec)\n")
    # a package at dpcore's root that no layer names
    (tmp_path / "dpcore" / "unplaced").mkdir()
    (tmp_path / "dpcore" / "unplaced" / "__init__.py").write_text('"""Placed in no layer."""\n')
    # a task importing a flow, and dpcore importing Prefect
    (tmp_path / "tasks" / "upward.py").write_text("import flows.release_pipeline  # noqa: F401\n")
    (tmp_path / "dpcore" / "runtime" / "orchestrated.py").write_text("import prefect  # noqa: F401\n")

    res = _lint(tmp_path)
    out = " ".join(res.stdout.split())  # the report wraps long contract names
    assert res.returncode == 1, out
    assert "0 kept, 3 broken" in out, out
    assert "dpcore.storage.upward -> dpcore.run.cost_plan" in out
    assert "dpcore.unplaced" in out
    assert "tasks.upward -> flows.release_pipeline" in out
    assert "dpcore.runtime.orchestrated -> prefect" in out
