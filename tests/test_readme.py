"""The README and the docs pages match the code (issue 20, item 6; the docs site of issue 49 §3).

Every command line in the shell blocks and inline code of ``README.md`` and ``docs/*.md`` is checked
against what it names: ``dpr`` subcommands and their options (through the
click command itself), the demo's flags, ``prefect deployment run`` targets
and ``-p`` parameters (against prefect.yaml and the flows' signatures),
scripts and files, and ``DPR_*`` settings. A block marked runnable
(``<!-- runnable: tests/test_x.py::test_name -->`` on the line before it) is run as written by the test it
names: the worked example's block here (tests/test_dpr_cli.py covers every subcommand's errors).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: The README and every docs page, by path relative to the repository root (the README's content moved into
#: docs/ in issue 49 §3: the checks below read all of it).
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text()
         for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
README = "\n".join(PAGES.values())
BIN = Path(sys.executable).parent
RUNNABLE = re.compile(r"<!-- runnable: ([\w/.]+)::(\w+) -->\n```bash\n(.*?)```", re.S)


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, re.S)


def runnable_block(test_file: str, test_name: str) -> str:
    """The shell block marked ``<!-- runnable: test_file::test_name -->`` (exactly one, in any page)."""
    found = [block for f, name, block in RUNNABLE.findall(README) if (f, name) == (test_file, test_name)]
    assert len(found) == 1, f"{len(found)} blocks marked runnable by {test_file}::{test_name} in README.md, docs/*.md"
    return found[0]


def _command_lines() -> list[str]:
    """Shell lines of the bash blocks (comments cut, continuations joined) and inline code spans that are commands."""
    lines = []
    for block in _blocks():
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    for span in re.findall(r"`([^`\n]+)`", README):
        if re.match(r"^(\.venv/bin/)?dpr |^\./scripts/", span):
            lines.append(span)
    return lines


def _words(line: str) -> list[str]:
    words = shlex.split(line.replace("[", " ").replace("]", " "))
    while words and re.match(r"^[A-Z_]+=", words[0]):  # leading VAR=value assignments
        words.pop(0)
    return words


def _dpr_lines() -> list[list[str]]:
    out = []
    for line in _command_lines():
        for part in re.split(r"&&|;|\|", line):
            words = _words(part)
            if words and words[0] in ("dpr", ".venv/bin/dpr"):
                out.append(words[1:])
    return out


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The click command a dpr line runs, and the option words of the line."""
    from dpr.main import cli

    cmd: click.Command = cli
    ctx = click.Context(cli)
    rest = list(words)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(ctx, rest[0])
        if sub is None and cmd.name == "budget":  # `dpr budget DATASET`: a dataset name, not a subcommand
            break
        assert sub is not None, f"README names an unknown dpr subcommand: dpr {' '.join(words)}"
        cmd, rest = sub, rest[1:]
    if hasattr(cmd, "_load"):
        cmd._load()  # operator commands build their options from the flow
    return cmd, [w.split("=", 1)[0] for w in rest if w.startswith("-")]


def test_every_runnable_block_names_a_test_that_runs_it():
    """A block marked runnable names a test that exists, and that test reads its block through the marker."""
    import ast

    marked = RUNNABLE.findall(README)
    assert len(marked) >= 2, "the GSS example (docs/own-table.md) and the yearly survey (docs/series.md) are runnable"
    for test_file, test_name, _ in marked:
        path = ROOT / test_file
        assert path.is_file(), f"a runnable block names {test_file}, which does not exist"
        tree = ast.parse(path.read_text())
        funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert test_name in funcs, f"a runnable block names {test_file}::{test_name}, which does not exist"
        src = ast.get_source_segment(path.read_text(), funcs[test_name])
        assert "runnable_block(" in src, f"{test_file}::{test_name} does not run its marked block"


def test_the_readme_names_dpr_commands():
    lines = _dpr_lines()
    named = {" ".join(w for w in line if not w.startswith("-") and w.islower())[:20] for line in lines}
    assert len(lines) >= 12, named
    for sub in ("spec draft", "spec check", "plan", "run", "budget", "aiq", "explain", "counts", "coco"):
        assert any(" ".join(line).startswith(sub) for line in lines), f"the README never shows dpr {sub}"


@pytest.mark.parametrize("words", _dpr_lines(), ids=lambda w: " ".join(w)[:60])
def test_every_dpr_line_names_real_options(words):
    from dpr.main import cli

    cmd, opts = _resolve(words)
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    if cmd is cli:
        known |= {"--home"}
    unknown = [o for o in opts if o not in known]
    assert not unknown, f"dpr {' '.join(words)}: {unknown} are not options of this command ({sorted(known)})"


def test_demo_and_pipeline_flags_exist(capsys):
    from flows.release_pipeline import main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    usage = capsys.readouterr().out
    lines = [ln for ln in _command_lines() if "scripts/demo.sh" in ln or "flows.release_pipeline" in ln]
    assert lines
    for line in lines:
        for flag in [w.split("=", 1)[0] for w in _words(line) if w.startswith("--")]:
            assert re.search(rf"(^|[\s\[]){re.escape(flag)}(?=[\s,=\]]|$)", usage), f"{line}: {flag} is not a flag of the pipeline"


def test_deployment_runs_name_real_deployments_and_parameters():
    import importlib

    deployments = {d["name"]: d["entrypoint"] for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
    runs = [ln for ln in _command_lines() if "prefect deployment run" in ln]
    assert runs
    for line in runs:
        words = _words(line)
        target = words[words.index("run") + 1]
        flow_name, dep = target.split("/")
        assert dep in deployments, f"{line}: no deployment {dep!r} in prefect.yaml"
        path, func = deployments[dep].split(":")
        module = path.removesuffix(".py").replace("/", ".")
        flow = getattr(importlib.import_module(module), func)
        assert flow.name == flow_name, line
        params = [words[i + 1].split("=", 1)[0] for i, w in enumerate(words) if w == "-p"]
        unknown = [p for p in params if p not in flow.parameters.properties]
        assert not unknown, f"{line}: {unknown} are not parameters of {flow_name}"


def test_named_scripts_files_and_settings_exist():
    for line in _command_lines():
        for w in _words(line):
            if re.match(r"^(\./)?(scripts|deployments)/[\w.]+$", w):
                assert (ROOT / w).is_file(), f"{line}: {w} does not exist"
    code = "\n".join(p.read_text() for d in ("dpcore", "flows", "tasks", "dpr", "scripts", "deployments", "benchmarks")
                     for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".sh"))
    code += (ROOT / "tests" / "conftest.py").read_text()  # the suite's own settings (README "Tests")
    for var in sorted(set(re.findall(r"\bDPR_[A-Z_]+\b", README))):
        assert var in code, f"the README names {var}, which no code reads"
    for path in sorted(set(re.findall(r"`(specs/[\w.]+)`", README))):
        assert (ROOT / path).is_file(), path


def test_the_worked_example_runs_as_written(prefect_harness, tmp_path):
    """The GSS block of docs/own-table.md, run line by line in bash from the repository root."""
    from prefect.settings import PREFECT_API_URL

    block = runnable_block("tests/test_readme.py", "test_the_worked_example_runs_as_written")
    assert "export_gss_wages.py" in block
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_")}
    env.update(DPR_HOME=str(tmp_path / "home"), PREFECT_API_URL=str(PREFECT_API_URL.value()),
               PREFECT_LOGGING_LEVEL="WARNING", COLUMNS="200")
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "specs/gss_wages.yaml: the spec is valid" in out and "fits: yes" in out, out[-3000:]
    assert "bundle    :" in out and "budget gss_wages" in out, out[-3000:]
    gss_line = next(ln for ln in PAGES["docs/own-table.md"].splitlines()
                    if ln.startswith("budget    : this run charged"))  # the GSS run's printed budget
    assert gss_line in out.splitlines(), out[-3000:]
    manifest = next((tmp_path / "home" / "bundles" / "gss_wages").glob("*/manifest.json"))
    assert manifest.is_file()
    drafted = (ROOT / "examples" / "my_gss.yaml").read_text()
    assert "Unemployed, Laid Off" in drafted and "from the data" in drafted


def test_the_demo_budget_line_matches_the_demo_specs_cost_plan():
    """The README's printed demo budget is what a first demo release charges (the cost plan of specs/demo.yaml)."""
    from dpcore.run.cost_plan import plan_release
    from dpcore.release.spec import load_spec

    plan = plan_release(load_spec(ROOT / "specs" / "demo.yaml"))
    assert not plan.problems
    lines = [next(ln for ln in PAGES[page].splitlines() if ln.startswith("budget    : this run charged"))
             for page in ("README.md", "docs/getting-started.md")]  # the demo's printed budget, on both pages
    left = plan.cap - plan.total
    t = plan.total
    expected = (f"budget    : this run charged epsilon={float(t.epsilon):.6g} delta={float(t.delta):.3g}; this release "
                f"holds epsilon={float(t.epsilon):.6g} delta={float(t.delta):.3g}; total spent "
                f"epsilon={float(plan.total.epsilon):.6g} of "
                f"{float(plan.cap.epsilon):g}; left epsilon={float(left.epsilon):.6g} delta={float(left.delta):.3g} "
                f"({plan.neighbour} neighbours)")
    assert lines == [expected, expected]
