"""BENCHMARKS.md holds the current figure of each benchmark with its provenance (issue 49 §3).

One ``## <benchmark>`` section per script-written section, each with the line "Current figure:" (command, date,
commit, load) under its heading, written by :func:`benchmarks._record.record`; the scale plot is drawn from the
recorded scale tables by ``benchmarks/plot_scale.py``, not from typed-in numbers.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = re.compile(r"<!-- BEGIN (\S+) -->\n(.*?)<!-- END \1 -->", re.S)


def test_record_writes_the_provenance_line_under_one_level_two_heading(tmp_path, monkeypatch):
    from benchmarks import _record

    path = tmp_path / "B.md"
    path.write_text("# Benchmarks\n")
    monkeypatch.setattr(_record.sys, "argv", [str(ROOT / "benchmarks" / "noise.py"), "--quick"])
    _record.record("noise", "### Noise\n\n| a |\n|---|\n| 1 |\n", path)
    _record.record("noise", "## Noise\n\nCurrent figure: old\n\n| a |\n|---|\n| 2 |\n", path)  # re-run replaces
    (name, body), = SECTION.findall(path.read_text())
    lines = body.splitlines()
    assert lines[0] == "## Noise" and lines[1] == ""
    assert lines[2].startswith("Current figure: `.venv/bin/python -m benchmarks.noise --quick` · 20")
    assert " · commit " in lines[2] and " · load " in lines[2]
    assert body.count("Current figure:") == 1 and "| 2 |" in body and "| 1 |" not in body


def test_every_recorded_section_has_one_heading_and_its_provenance():
    text = (ROOT / "BENCHMARKS.md").read_text()
    sections = SECTION.findall(text)
    assert len(sections) >= 30
    for name, body in sections:
        lines = body.strip().splitlines()
        assert lines[0].startswith("## "), f"section {name}: its first line is not a `## ` heading"
        assert sum(ln.startswith("## ") for ln in lines) == 1, f"section {name}: more than one `## ` heading"
        assert any(ln.startswith("Current figure:") for ln in lines[:4]), f"section {name}: no provenance line"


def test_the_scale_plot_is_drawn_from_the_recorded_tables(tmp_path):
    from benchmarks import plot_scale

    runs = plot_scale.recorded_runs((ROOT / "BENCHMARKS.md").read_text())
    assert {"2GiB (default)", "1GiB", "4GiB", "512MiB"} <= set(runs)
    assert [p["factor"] for p in runs["2GiB (default)"]] == [1, 10, 100]
    section = dict(SECTION.findall((ROOT / "BENCHMARKS.md").read_text()))["scale_plot"]
    for cap, points in runs.items():  # the recorded plot section lists what the tables hold today
        for p in points:
            assert f"| {cap} | {p['factor']}x | {p['rows']:,} | {p['wall_s']:g} |" in section
    plot_scale.draw(runs, tmp_path / "scale.png")
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"
    assert (ROOT / "docs" / "img" / "scale.png").is_file()
