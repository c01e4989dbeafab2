"""Plot the recorded scale runs: wall time and memory against rows at 1x / 10x / 100x the demo (issue 49 §3).

Reads the figures the scale benchmark recorded in BENCHMARKS.md (the sections ``scale`` and ``scale-<cap>``
written by ``benchmarks/scale.py``: the table of factors with rows, status, wall seconds, peak RSS and the
process tree's peak), never typed-in numbers, and draws one curve per ``DPR_MEMORY_LIMIT``:
``docs/img/scale.png``. Writes the ``scale_plot`` section of BENCHMARKS.md (:func:`benchmarks._record.record`)
with the picture and the points it plots.

Usage: ``.venv/bin/python -m benchmarks.plot_scale [--dry-run]`` (seconds; no pipeline run).
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from benchmarks._record import BENCHMARKS, record

PICTURE = BENCHMARKS.parent / "docs" / "img" / "scale.png"
#: The scale runs of one DPR_MEMORY_LIMIT each (``scale``, ``scale-1GiB``, …; not other scale sections).
SECTION = re.compile(r"<!-- BEGIN (scale(?:-\d+[KMG]i?B)?) -->\n(.*?)<!-- END \1 -->", re.S)
ROW = re.compile(r"^\| (\d+)x \| ([\d,]+) \| (\w+)[^|]* \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", re.M)


def recorded_runs(text: str) -> dict[str, list[dict]]:
    """Per cap (``2GiB (default)``, ``1GiB``, …), the completed runs of its scale section, by rows."""
    runs: dict[str, list[dict]] = {}
    for name, body in SECTION.findall(text):
        if name == "scale_plot":
            continue
        cap = "2GiB (default)" if name == "scale" else name.split("-", 1)[1]
        points = [{"factor": int(f), "rows": int(rows.replace(",", "")), "wall_s": float(wall),
                   "peak_gb": float(peak), "tree_gb": float(tree)}
                  for f, rows, status, wall, peak, tree in ROW.findall(body) if status == "ok"]
        if points:
            runs[cap] = sorted(points, key=lambda p: p["rows"])
    return runs


def draw(runs: dict[str, list[dict]], path: Path) -> None:
    """Two panels, log-log: wall seconds and the process tree's peak GB against rows, one curve per cap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for cap, points in runs.items():
        rows = [p["rows"] for p in points]
        ax_t.plot(rows, [p["wall_s"] for p in points], marker="o", label=f"DPR_MEMORY_LIMIT={cap}")
        ax_m.plot(rows, [p["tree_gb"] for p in points], marker="o", label=f"DPR_MEMORY_LIMIT={cap}")
    for ax, label in ((ax_t, "wall time of the run (s)"), (ax_m, "peak memory of the process tree (GB)")):
        ax.set_xscale("log")
        ax.set_xlabel("rows (1x, 10x, 100x the demo's flights)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax_t.yaxis.set_major_formatter(ScalarFormatter())
    ax_t.yaxis.set_minor_formatter(NullFormatter())
    ax_m.set_ylim(bottom=0)
    ax_m.legend(fontsize=8)
    fig.suptitle("The whole release pipeline against rows (recorded in BENCHMARKS.md by benchmarks/scale.py)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(runs: dict[str, list[dict]]) -> str:
    lines = ["## Scale: time and memory against rows (plot)", "",
             "Drawn by `benchmarks/plot_scale.py` from the tables of the scale sections below and above "
             "(`benchmarks/scale.py`, one section per `DPR_MEMORY_LIMIT`; each states its own date, commit and "
             "load); completed runs only.", "",
             "![wall time and memory against rows](docs/img/scale.png)", "",
             "| DPR_MEMORY_LIMIT | factor | rows | wall s | peak RSS GB | tree GB |", "|---|---|---|---|---|---|"]
    for cap, points in runs.items():
        for p in points:
            lines.append(f"| {cap} | {p['factor']}x | {p['rows']:,} | {p['wall_s']:g} | {p['peak_gb']:.2f} | "
                         f"{p['tree_gb']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the section, write neither it nor the picture")
    args = ap.parse_args(argv)
    runs = recorded_runs(BENCHMARKS.read_text())
    if not runs:
        raise SystemExit("BENCHMARKS.md holds no completed scale run: run benchmarks/scale.py first")
    md = markdown(runs)
    if args.dry_run:
        print(md)
        return 0
    draw(runs, PICTURE)
    record("scale_plot", md)
    print(f"wrote {PICTURE.relative_to(BENCHMARKS.parent)} and section 'scale_plot' of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
