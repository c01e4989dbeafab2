"""Write a benchmark's Markdown section into BENCHMARKS.md (between markers).

Figures are never typed by hand: each script measures, then calls
:func:`record` which replaces the text between ``<!-- BEGIN name -->`` and
``<!-- END name -->`` (appending the section when it is new).
"""
from __future__ import annotations

import os
import platform
import re
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


def record(name: str, markdown: str, path: Path = BENCHMARKS) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md with ``markdown``."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"<!-- BEGIN {name} -->\n{markdown.rstrip()}\n<!-- END {name} -->"
    pattern = re.compile(rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
