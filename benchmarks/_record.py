"""Write a benchmark's Markdown section into BENCHMARKS.md (between markers).

Figures are never typed by hand: each script measures, then calls
:func:`record` which replaces the text between ``<!-- BEGIN name -->`` and
``<!-- END name -->`` (appending the section when it is new). BENCHMARKS.md holds the current figure of each
benchmark, one ``## <benchmark>`` section each; earlier figures are in git's history of the file.
:func:`record` puts the provenance line under the section's heading: the command, the date, the commit and the
machine's load (issue 49 §3).
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def utc_stamp() -> str:
    """Now, as the sections write when they were measured (``2026-11-28 08:58 UTC``)."""
    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"


def machine(measured: str | None = None) -> str:
    """One line describing where the figures were measured (``measured``: when, if not now, as written after it)."""
    when = measured if measured is not None else utc_stamp()
    return (
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, "
        f"{platform.machine()}, measured {when}"
    )


PROVENANCE = "Current figure:"


def command_line(argv: list[str] | None = None) -> str:
    """The command that is running, as one would type it (``.venv/bin/python -m benchmarks.scale --factors 1``)."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]) if argv else Path("?")
    if script.suffix == ".py" and script.resolve().parent == BENCHMARKS.parent / "benchmarks":
        head = f".venv/bin/python -m benchmarks.{script.stem}"
    else:
        head = " ".join(argv[:1])
    return " ".join([head, *argv[1:]])


def git_commit() -> str:
    """The short commit of the checkout (``+dirty`` when files differ from it), or ``unknown``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCHMARKS.parent, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=BENCHMARKS.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def provenance(command: str | None = None) -> str:
    """The line under a section's heading: command, date, commit, load (1/5/15-minute averages when recorded)."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{PROVENANCE} `{command or command_line()}` · {utc_stamp()} · commit {git_commit()} · "
            f"load {load} (1/5/15-min averages when recorded) · {os.cpu_count()} cores")


def with_provenance(markdown: str, line: str | None = None) -> str:
    """``markdown`` with its provenance line right under its first heading (replacing an older one)."""
    lines = [ln for ln in markdown.rstrip().splitlines() if not ln.startswith(PROVENANCE)]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("#")), -1)
    if at >= 0 and lines[at].startswith("### "):
        lines[at] = lines[at][1:]  # one `## <benchmark>` section per benchmark
    lines[at + 1:at + 1] = ["", line or provenance()]
    return "\n".join(lines)


def record(name: str, markdown: str, path: Path = BENCHMARKS) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md with ``markdown`` and its provenance line."""
    markdown = with_provenance(markdown)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"<!-- BEGIN {name} -->\n{markdown.rstrip()}\n<!-- END {name} -->"
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
