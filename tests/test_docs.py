"""The docs site builds strictly and follows the code (issue 49 §3).

``mkdocs build --strict`` runs here, so CI (``.ci/run`` runs the README's test command) fails on a broken link,
a missing anchor, a page left out of the navigation or a docstring mkdocstrings cannot render. The hook that
generates the API pages and the architecture page's package list is checked on a made-up package tree: it
finds packages by walking ``dpcore/`` (another engineer moves modules into packages), and a package missing
from ``docs/packages.yml`` fails the strict build.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _hooks():
    spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "docs" / "hooks" / "site_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_build_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started/index.html", "privacy/index.html", "benchmarks/index.html",
                 "api/index.html", "architecture/index.html"):
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    assert "./scripts/test.sh" in home  # the home page is the README
    api = sorted(p.parent.name for p in (site / "api").glob("*/index.html"))
    expected = sorted(f"dpcore.{p.parent.name}" for p in (ROOT / "dpcore").glob("*/__init__.py"))
    assert set(expected) <= set(api), (expected, api)
    assert "<svg" in (site / "architecture" / "index.html").read_text()  # the package picture


def test_api_pages_follow_the_package_tree(tmp_path):
    """A package added under dpcore/ gets its API page; modules left at the root get the root page."""
    hooks = _hooks()
    for pkg in ("pkg_one", "pkg_two"):  # made-up names (a module-moving script rewrites real ones)
        (tmp_path / "dpcore" / pkg).mkdir(parents=True)
        (tmp_path / "dpcore" / pkg / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "dpcore" / "__init__.py").write_text("")
    (tmp_path / "dpcore" / "left_at_root.py").write_text("")
    pages = {title: (path, text) for title, path, text in hooks.api_pages(tmp_path)}
    assert set(pages) == {"dpcore.pkg_one", "dpcore.pkg_two", "dpcore (root modules)"}
    assert "::: dpcore.pkg_one" in pages["dpcore.pkg_one"][1]
    assert "::: dpcore.left_at_root" in pages["dpcore (root modules)"][1]


def test_a_package_missing_from_packages_yml_is_a_warning(tmp_path, caplog):
    """docs/packages.yml is the one list of packages: a package it leaves out (or names wrongly) fails --strict."""
    hooks = _hooks()
    (tmp_path / "dpcore" / "pkg_new").mkdir(parents=True)
    (tmp_path / "dpcore" / "pkg_new" / "__init__.py").write_text("")
    (tmp_path / "dpcore" / "__init__.py").write_text("")
    spec = {"layers": [{"name": "base", "packages": ["dpcore", "dpcore.pkg_gone"]}],
            "packages": {"dpcore": {"owns": "root"}, "dpcore.pkg_gone": {"owns": "gone"}}}
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.dpr_site"):
        hooks._check_packages(spec, tmp_path)
    text = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "dpcore/pkg_new is a package that docs/packages.yml does not list" in text
    assert "lists package dpcore.pkg_gone, which does not exist" in text
    real = yaml.safe_load((ROOT / "docs" / "packages.yml").read_text())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.dpr_site"):
        hooks._check_packages(real, ROOT)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_the_readme_is_short_and_keeps_the_two_commands():
    """README ≤ 300 lines (issue 49 §3); its two commands stay as tests and .ci/run use them."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300, len(text.splitlines())
    assert "./scripts/demo.sh     # run the whole release pipeline on the bundled demo (NYC flights 2013)\n" in text
    assert "./scripts/test.sh     # run the tests\n" in text
    assert "./scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
