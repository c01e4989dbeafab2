"""scripts/bootstrap.sh: a few progress lines, pip's output in a log, silent when nothing changed (issue 20, item 5).

Runs the real script on a throw-away project (a copy of the script next to a
minimal pyproject.toml), so the repository's own .venv is never touched.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "bootstrap-probe"
version = "0.0.1"
dependencies = [{deps}]

[project.optional-dependencies]
dev = []

[tool.setuptools]
packages = ["probe"]
"""


def _project(tmp_path: Path, deps: str = "") -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(deps=deps))
    return tmp_path


def _run(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(project / "scripts" / "bootstrap.sh")], capture_output=True, text=True, timeout=600)


def test_first_run_prints_a_few_lines_and_logs_pip(tmp_path):
    project = _project(tmp_path)
    res = _run(project)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert 2 <= len(lines) <= 3 and all(ln.startswith("[bootstrap]") for ln in lines), lines
    assert "environment ready" in lines[-1]
    log = (project / ".venv" / "bootstrap.log").read_text()
    assert "bootstrap-probe" in log  # pip's own output went to the log, not the terminal
    assert (project / ".venv" / "bin" / "python").exists()

    again = _run(project)  # nothing changed: nothing to do, nothing printed
    assert again.returncode == 0 and again.stdout == "" and again.stderr == ""

    (project / "pyproject.toml").write_text(PYPROJECT.format(deps="") + "\n# changed\n")
    changed = _run(project)  # a changed pyproject.toml reinstalls, reusing the venv
    assert changed.returncode == 0
    assert "installing" in changed.stderr and "creating" not in changed.stderr


def test_a_failed_install_shows_the_log_tail_and_fails(tmp_path):
    project = _project(tmp_path, deps='"this-package-does-not-exist-anywhere-dpr==0.0.0"')
    res = _run(project)
    assert res.returncode == 1
    assert "pip install failed; the last lines of .venv/bootstrap.log" in res.stderr
    assert "this-package-does-not-exist-anywhere-dpr" in res.stderr
