"""The import rules (issue 49 §1) hold: ``lint-imports`` keeps every contract of ``.importlinter``.

The contracts: the entry points (``dpr``, ``deployments``) over ``flows`` over ``tasks`` over
``dpcore``; ``dpcore`` never imports Prefect; inside ``dpcore`` its packages in layers (``run`` over
``steps`` over ``publish | detect | validation | mechanisms`` over ``ingest`` over ``release`` over
``budget | explain | noise`` over ``storage`` over ``runtime``), every top-level package of ``dpcore``
placed in a layer (``exhaustive``). A function-level import counts like any other.

Beside the contracts, which only see imports *between* packages: no module import cycle anywhere in
``dpcore``, ``flows``, ``tasks``, ``dpr`` and ``deployments`` (no two modules that import each other, directly or
through others, function-level imports included): :func:`import_cycles` on grimp's import graph.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("dpcore", "tasks", "flows", "dpr", "deployments")


def import_cycles(graph) -> list[str]:
    """Every strongly connected component of more than one module in ``graph``, each as one readable cycle.

    Parameters
    ----------
    graph : grimp.ImportGraph
        Built by :func:`grimp.build_graph` (every import statement counts, top-level, function-level and
        ``TYPE_CHECKING`` ones alike).

    Returns
    -------
    list of str
        One line per component: its modules, then one shortest cycle through its first module with the
        line of each import (``a:12 -> b:40 -> a``). Empty when the graph has no cycle.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):  # Tarjan's algorithm, iterative (no recursion limit)
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for nxt in targets:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        components.append(sorted(comp))
    out = []
    for comp in sorted(components):
        first = comp[0]
        members = set(comp)
        back = min((graph.find_shortest_chain(importer=nxt, imported=first) or (nxt, first) for nxt in
                    graph.find_modules_directly_imported_by(first) if nxt in members), key=lambda c: (len(c), c))
        chain = (first,) + tuple(back)
        steps = []
        for a, b in zip(chain, chain[1:]):
            lines = sorted(d["line_number"] for d in graph.get_import_details(importer=a, imported=b))
            steps.append(f"{a}:{lines[0] if lines else '?'}")
        out.append(f"{len(comp)} modules {comp}: " + " -> ".join(steps + [first]))
    return out


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


def test_no_module_import_cycle():
    """No two modules of the project's packages import each other, directly or through others.

    A cycle inside one package is invisible to the layer contracts; it is broken by moving the shared code to
    the module it belongs to (not by hiding an import inside a function, which still counts here).
    """
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 100  # the packages were found (the checkout's, first on the path)
    cycles = import_cycles(graph)
    assert not cycles, "module import cycles (move the shared code to where it belongs):\n" + "\n".join(cycles)


def test_a_module_import_cycle_is_found(tmp_path, monkeypatch):
    """The cycle finder on a tiny package: a three-module cycle through a function-level import and a
    two-module one are each reported with their modules and import lines; a chain without a cycle is not."""
    pkg = tmp_path / "cyc_probe"
    (pkg / "sub").mkdir(parents=True)
    for rel, text in {
        "__init__.py": "",
        "a.py": "from . import b  # noqa: F401\n",
        "b.py": "import cyc_probe.sub.c  # noqa: F401\n",
        "sub/__init__.py": "",
        "sub/c.py": "def f():\n    from cyc_probe import a  # noqa: F401\n",
        "x.py": "from .y import Y  # noqa: F401\n",
        "y.py": "\n\nfrom . import x  # noqa: F401\nY = 1\n",
        "z.py": "from . import a  # noqa: F401\n",
    }.items():
        (pkg / rel).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles(grimp.build_graph("cyc_probe", cache_dir=None))
    assert cycles == [
        "3 modules ['cyc_probe.a', 'cyc_probe.b', 'cyc_probe.sub.c']: "
        "cyc_probe.a:1 -> cyc_probe.b:1 -> cyc_probe.sub.c:2 -> cyc_probe.a",
        "2 modules ['cyc_probe.x', 'cyc_probe.y']: cyc_probe.x:1 -> cyc_probe.y:3 -> cyc_probe.x",
    ], cycles
