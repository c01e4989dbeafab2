"""How long the count-of-counts pictures take (``dpcore.publish.plots.coco_plots``), against the earlier drawing.

Run on a quiet machine::

    .venv/bin/python benchmarks/plots.py [--repeat 3]

The demo's shape: 16 top-level nodes (carriers), each with 3 children (origins), histograms of length
K + 1 for K = 60 (the tests' small spec) and K = 730 (the demo's), 40 bins: 17 PNG files per call. The
baseline, run in the same process on the same histograms, is the drawing before this change (one bar
rectangle per bin and ``tight_layout``, which draws each figure twice); it is kept here only as the
baseline. Figures are wall seconds per call, best of ``--repeat``. The section ``plots`` of BENCHMARKS.md
is rewritten from the measured figures.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._record import machine, record  # noqa: E402
from dpcore.publish import plots  # noqa: E402


class DemoShape:
    """The demo hierarchy's shape: all → 16 carriers → 3 origins each."""

    levels = 3

    def __init__(self) -> None:
        self.top = [f"carrier=C{i:02d}" for i in range(16)]

    def nodes_at(self, level: int) -> list[str]:
        return self.top

    def children(self, node: str) -> list[str]:
        return [f"{node}/origin={o}" for o in ("EWR", "JFK", "LGA")]


def baseline_coco_plots(est: dict, hierarchy: DemoShape, out_dir: Path, K: int, bins: int = 40) -> list[Path]:
    """The earlier drawing (bars and ``tight_layout``), same files and layout as :func:`dpcore.publish.plots.coco_plots`."""
    plt = plots.pyplot()
    top = hierarchy.nodes_at(1)
    width = max(K + 1, 1) / bins

    def binned(h):
        edges = np.linspace(0, len(h), bins + 1).astype(int)
        return edges[:-1], np.add.reduceat(np.asarray(h, dtype=float), edges[:-1])

    paths = []
    cols = min(4, len(top))
    rows = int(np.ceil(len(top) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), dpi=90, squeeze=False)
    for ax, node in zip(axes.ravel(), top):
        x, y = binned(est[node])
        ax.bar(x, y, width=width, align="edge", color="#4c72b0")
        ax.set_title(node, fontsize=8)
        ax.tick_params(labelsize=6)
    fig.suptitle("Released count-of-counts: groups per size (binned)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_dir / "coco_overview.png")
    plt.close(fig)
    paths.append(out_dir / "coco_overview.png")
    cmap = plt.get_cmap("tab20")
    for node in top:
        fig, ax = plt.subplots(figsize=(6, 3.4), dpi=100)
        bottom = None
        for i, child in enumerate(hierarchy.children(node)):
            x, y = binned(est[child])
            ax.bar(x, y, width=width, align="edge", bottom=bottom, color=cmap(i % 20), label=child[len(node) + 1:])
            bottom = y if bottom is None else bottom + y
        ax.set_xlabel("group size (binned)")
        ax.set_ylabel("number of groups")
        ax.set_title(f"{node}: released histogram", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out_dir / f"{node.replace('=', '-')}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            fn(Path(d))
            times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    h = DemoShape()
    rng = np.random.default_rng(0)
    plots.pyplot()  # the import is not part of the figure
    rows = []
    for K in (60, 730):
        est = {}
        for node in h.top:
            est[node] = rng.integers(0, 50, K + 1)
            for child in h.children(node):
                est[child] = rng.integers(0, 20, K + 1)
        base = best(lambda d: baseline_coco_plots(est, h, d, K), args.repeat)
        now = best(lambda d: plots.coco_plots(est, h, d, K), args.repeat)
        rows.append(f"| {K} | 17 | {base:.2f} | {now:.2f} | {now / base:.2f} |")
        print(rows[-1], flush=True)
    md = "\n".join([
        "## Plots: drawing the count-of-counts pictures of a release",
        "",
        "Count-of-counts pictures (`dpcore.publish.plots.coco_plots`), the demo's shape (16 carriers x 3 origins, 40 "
        "bins): wall seconds per call, best of "
        f"{args.repeat}, against the earlier drawing (bars and `tight_layout`) run in the same process. "
        "Now: one filled step outline per histogram and fixed margins (session 15); since issue 29 also one "
        "reused figure for the 16 node pictures (their ticks built once) and titles placed at y = 1.0 (no search "
        "for overlapping tick labels), pixel-identical (tests/test_coco.py). "
        "The papers draw no figures at release time; this is the pipeline's own cost (it ran in every release "
        "and in every run of the crash-resume test). Reproduce: `.venv/bin/python benchmarks/plots.py`.",
        "",
        "| K | PNG files | earlier drawing (s) | now (s) | ratio |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"Machine: {machine()}",
    ])
    record("plots", md)


if __name__ == "__main__":
    main()
