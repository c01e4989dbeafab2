"""MkDocs hooks of the docs site (listed under ``hooks:`` in ``mkdocs.yml``).

What they generate at build time, so no list here goes stale when code moves:

* the API reference: one page per package found by walking ``dpcore/`` (every folder with an
  ``__init__.py`` directly below it), one page for the modules left at ``dpcore/``'s root, and one page each
  for ``dpr``, ``flows`` and ``tasks``; rendered by mkdocstrings from the numpydoc docstrings;
* the home page, from ``README.md`` (one text for both);
* the Benchmarks page, from ``BENCHMARKS.md`` at the repository root (included, never copied into ``docs/``);
* the architecture page's package table and picture, from ``docs/packages.yml`` (the one place to edit
  the list of packages: what each owns and which it may import).

A package of ``dpcore/`` that ``docs/packages.yml`` does not list, or a listed one that does not exist, is a
warning, so ``mkdocs build --strict`` fails until the list follows the code.
"""
from __future__ import annotations

import html
import logging
import re
from pathlib import Path

import yaml
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.dpr_site")

class _DocstringRefsAsInfo(logging.Filter):
    """An unresolved ``[text]`` on an API page is docstring prose (numpydoc, not Markdown: ``[--json]``), not a
    broken link of the site: logged as info, so a docstring cannot fail the strict build. Links on the written
    pages are still checked strictly."""

    def filter(self, record):
        msg = record.getMessage()
        if "Could not find cross-reference target" in msg and " api/" in f" {msg.split(': ', 1)[-1]}":
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


for _name in ("plugin", "references", "backlinks"):
    logging.getLogger(f"mkdocs.plugins.mkdocs_autorefs._internal.{_name}").addFilter(_DocstringRefsAsInfo())

#: Packages outside ``dpcore`` that get one API page each (module by module).
OTHER_PACKAGES = ("flows", "tasks", "dpr")


def _root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _modules(folder: Path, dotted: str) -> list[str]:
    """The dotted names of ``folder``'s modules (not packages), sorted."""
    return [f"{dotted}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__" and p.stem != "__main__"]


def dpcore_packages(root: Path) -> list[str]:
    """The packages directly below ``dpcore/`` (folders holding an ``__init__.py``), sorted."""
    return sorted(p.parent.name for p in (root / "dpcore").glob("*/__init__.py"))


def api_pages(root: Path) -> list[tuple[str, str, str]]:
    """``(title, page path, markdown)`` of every API page, found by walking the package tree."""
    pages = []
    for pkg in dpcore_packages(root):
        pages.append((f"dpcore.{pkg}", f"api/dpcore.{pkg}.md",
                      f"# `dpcore.{pkg}`\n\n::: dpcore.{pkg}\n    options:\n      show_submodules: true\n"))
    root_modules = _modules(root / "dpcore", "dpcore")
    if root_modules:
        body = "\n".join(f"::: {m}\n" for m in root_modules)
        pages.append(("dpcore (root modules)", "api/dpcore.md",
                      "# `dpcore`: the modules at its root\n\n::: dpcore\n    options:\n      members: false\n\n" + body))
    for pkg in OTHER_PACKAGES:
        if (root / pkg / "__init__.py").is_file():
            body = "\n".join(f"::: {m}\n" for m in _modules(root / pkg, pkg))
            pages.append((pkg, f"api/{pkg}.md", f"# `{pkg}`\n\n::: {pkg}\n    options:\n      members: false\n\n{body}"))
    return pages


def _api_index(pages) -> str:
    rows = "\n".join(f"- [`{title}`]({Path(path).name})" for title, path, _ in pages)
    return ("# API reference\n\nGenerated at build time from the numpydoc docstrings, one page per package found "
            "in the source tree (`docs/hooks/site_hooks.py`), so it follows the code as packages move.\n\n"
            f"{rows}\n")


def on_config(config):
    """Put the generated API pages into the navigation, under the entry ``API reference``."""
    pages = api_pages(_root(config))
    entry = [{"Overview": "api/index.md"}] + [{title: path} for title, path, _ in pages]
    nav = config.get("nav") or []
    for i, item in enumerate(nav):
        if isinstance(item, dict) and "API reference" in item:
            nav[i] = {"API reference": entry}
    return config


def _benchmarks_page(root: Path) -> str:
    """BENCHMARKS.md as a page of the site (its links to ``docs/…`` made relative to the site)."""
    text = (root / "BENCHMARKS.md").read_text()
    return re.sub(r"\]\(docs/", "](", text)


def _home_page(root: Path) -> str:
    """README.md as the site's home page (its links into ``docs/`` made relative to the site)."""
    text = (root / "README.md").read_text()
    return re.sub(r"\]\(docs/", "](", text).replace("](BENCHMARKS.md)", "](benchmarks.md)")


def on_files(files, config):
    """Add the home page, the API pages and the Benchmarks page (generated, never written into ``docs/``)."""
    root = _root(config)
    files.append(File.generated(config, "index.md", content=_home_page(root)))
    pages = api_pages(root)
    files.append(File.generated(config, "api/index.md", content=_api_index(pages)))
    for _, path, content in pages:
        files.append(File.generated(config, path, content=content))
    files.append(File.generated(config, "benchmarks.md", content=_benchmarks_page(root)))
    return files


# ---- the architecture page: package table and picture from docs/packages.yml ----

def load_packages(root: Path) -> dict:
    """``docs/packages.yml``: ``layers`` (top to bottom, each a list of package names) and ``packages``."""
    return yaml.safe_load((root / "docs" / "packages.yml").read_text())


def _check_packages(spec: dict, root: Path) -> None:
    """Warn (so ``--strict`` fails) where ``docs/packages.yml`` and the source tree disagree."""
    listed = set(spec["packages"])
    for name in listed:
        if name.startswith("dpcore."):
            exists = (root / "dpcore" / name.split(".", 1)[1] / "__init__.py").is_file()
        else:
            exists = (root / name).is_dir()
        if not exists:
            log.warning("docs/packages.yml lists package %s, which does not exist: edit docs/packages.yml", name)
    for pkg in dpcore_packages(root):
        if f"dpcore.{pkg}" not in listed:
            log.warning("dpcore/%s is a package that docs/packages.yml does not list: add it (what it owns, "
                        "its layer)", pkg)
    in_layers = [n for layer in spec["layers"] for n in layer["packages"]]
    for name in listed - set(in_layers):
        log.warning("docs/packages.yml: package %s is in no layer: add it to one", name)
    for name in set(in_layers) - listed:
        log.warning("docs/packages.yml: layer entry %s is not described under packages: add it", name)


def _picture(spec: dict) -> str:
    """An SVG of the layers: one row of boxes per layer, top to bottom; a layer may import the layers below it."""
    box_w, box_h, gap, row_gap, pad, label_w = 150, 30, 12, 28, 16, 190
    widest = max(len(layer["packages"]) for layer in spec["layers"])
    width = pad * 2 + label_w + widest * (box_w + gap)
    parts = []
    y = pad
    for n, layer in enumerate(spec["layers"]):
        names = layer["packages"]
        parts.append(f'<text x="{pad}" y="{y + box_h / 2 + 5}" font-size="13" font-weight="bold">'
                     f'{html.escape(layer["name"])}</text>')
        for i, name in enumerate(names):
            x = pad + label_w + i * (box_w + gap)
            parts.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="#e8eaf6" '
                         f'stroke="#3f51b5"/><text x="{x + box_w / 2}" y="{y + box_h / 2 + 5}" font-size="12" '
                         f'text-anchor="middle">{html.escape(name)}</text>')
        if n + 1 < len(spec["layers"]):
            ax = pad + label_w + box_w / 2
            parts.append(f'<line x1="{ax}" y1="{y + box_h}" x2="{ax}" y2="{y + box_h + row_gap - 4}" '
                         f'stroke="#555" stroke-width="1.5" marker-end="url(#arrow)"/>')
        y += box_h + row_gap
    height = y - row_gap + box_h // 2 + pad
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" role="img" aria-label="package layers">'
            '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="4" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>' + "".join(parts) + "</svg>")


def _table(spec: dict) -> str:
    """The package table: layer, what each owns, why it sits where it does, what it may import."""
    rows = ["| package | layer | what it owns | why it is there | may import |", "|---|---|---|---|---|"]
    layer_of = {n: layer["name"] for layer in spec["layers"] for n in layer["packages"]}

    def cell(text) -> str:
        return " ".join(str(text or "").split()).replace("|", "\\|") or "—"

    for name, info in spec["packages"].items():
        imports = ", ".join(f"`{i}`" for i in info.get("may_import", [])) or "the packages of the layers below"
        rows.append(f"| `{name}` | {cell(layer_of.get(name, '?'))} | {cell(info.get('owns'))} | "
                    f"{cell(info.get('why'))} | {imports} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    """Fill ``<!-- packages: table -->`` and ``<!-- packages: picture -->`` from ``docs/packages.yml``."""
    if "<!-- packages:" not in markdown:
        return markdown
    root = _root(config)
    spec = load_packages(root)
    _check_packages(spec, root)
    markdown = markdown.replace("<!-- packages: picture -->", _picture(spec))
    return markdown.replace("<!-- packages: table -->", _table(spec))
