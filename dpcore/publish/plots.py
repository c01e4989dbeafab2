"""PNG plots for the release report (matplotlib, headless).

Only public or privacy-protected quantities are plotted: budget caps and
charges are data-independent; private tables are noisy outputs.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def _draw_privately(job: tuple) -> object:
    """``fn(*args)`` under the private umask (0700 folders, 0600 files): the unit of :func:`draw_privately`."""
    from dpcore.storage.private_files import private_umask

    fn, args = job
    with private_umask():  # under the owner's private data folder; the bundle's copy is public
        return fn(*args)


def draw_privately(fn, *args):
    """``fn(*args)`` (a drawing function of this module) with private file modes, in this process or, under a
    small memory cap, in a short-lived child process.

    matplotlib, once imported, holds about 45 MiB for the rest of a process's life. Under a cap below
    1 GiB (:attr:`dpcore.runtime.chunks.MemoryBudget.favours_memory`) the drawing runs in a child process that ends
    when it is drawn (:func:`dpcore.runtime.child_map.child_map`: the same function on the same values, so the same
    bytes; its errors raised here), and the flow process never loads matplotlib (issue 29, goal 4).

    Returns
    -------
    What ``fn`` returns (the files' paths).
    """
    from dpcore.runtime.chunks import MemoryBudget

    if MemoryBudget.from_env().favours_memory:
        from dpcore.runtime.child_map import child_map

        return child_map(_draw_privately, [(fn, args)])[0]
    return _draw_privately((fn, args))


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend, imported on first use (a ~1-2 s import that
    commands drawing no plot, ``dpr spec check`` and ``dpr plan``, skip)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(**kwargs):
    """A headless :class:`matplotlib.figure.Figure` (Agg) without importing pyplot (which loads the GUI
    backends' machinery: a second of every operator query's bundle; issue 32, section 2)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def budget_bars(charges: pd.DataFrame, cap_epsilon: float,
                spent_epsilon: float | None = None) -> list[tuple[str, str, float]]:
    """The segments of the budget picture: ``(bar, label, epsilon)``, bottom to top.

    The ``spent`` bar stacks what the charges drew, per step and notion, then
    (when ``spent_epsilon`` is given: the ledger's spent total, which counts
    every reservation whole) the part reserved and not drawn, so that the bar
    reaches exactly the table's "spent in total"; the ``remaining`` bar is
    ``cap - spent``, the table's "remaining". Issue 48.1: a picture that summed
    the charges only showed a gate-stopped release's undrawn reservation as
    left.

    Parameters
    ----------
    charges : DataFrame
        Ledger charges with columns ``step``, ``notion``, ``epsilon``.
    cap_epsilon : float
    spent_epsilon : float, optional
        The ledger's spent epsilon (``BudgetStatus.spent``); default the charges' sum.

    Returns
    -------
    list of (str, str, float)
    """
    out: list[tuple[str, str, float]] = []
    drawn = 0.0
    if len(charges):
        per = charges.groupby(["step", "notion"], sort=False)["epsilon"].sum().reset_index()
        for row in per.itertuples(index=False):
            out.append(("spent", f"{row.step} ({row.notion})", float(row.epsilon)))
            drawn += float(row.epsilon)
    spent = drawn if spent_epsilon is None else float(spent_epsilon)
    if spent > drawn:
        out.append(("spent", "reserved, not drawn", spent - drawn))
    out.append(("remaining", "remaining", max(cap_epsilon - spent, 0.0)))
    return out


def budget_plot(charges: pd.DataFrame, cap_epsilon: float, path: Path, title: str,
                spent_epsilon: float | None = None) -> Path:
    """Stacked bar of epsilon spent per step (and notion) against the dataset's cap (:func:`budget_bars`).

    Parameters
    ----------
    charges : DataFrame
        Ledger charges with columns ``step``, ``notion``, ``epsilon``.
    cap_epsilon : float
        The dataset's epsilon cap (a horizontal line).
    path : Path
        Output PNG file.
    spent_epsilon : float, optional
        The ledger's spent epsilon: the bars then show the same spent and remaining as the report's table
        (each written on its bar).
    """
    from matplotlib import colormaps

    fig = _figure(figsize=(6.5, 3.6), dpi=110)
    ax = fig.subplots()
    cmap = colormaps["tab10"]
    bottom = {"spent": 0.0, "remaining": 0.0}
    for i, (bar, label, value) in enumerate(budget_bars(charges, cap_epsilon, spent_epsilon)):
        color = "#dddddd" if bar == "remaining" else ("#ffffff" if label == "reserved, not drawn" else cmap(i % 10))
        ax.bar([bar], [value], bottom=bottom[bar], color=color, label=_label(label),
               edgecolor="#888888" if label == "reserved, not drawn" else None,
               hatch="//" if label == "reserved, not drawn" else None)
        bottom[bar] += value
    for bar, total in bottom.items():
        ax.text(bar, total, f"ε={total:.6g}", ha="center", va="bottom", fontsize=8)
    ax.axhline(cap_epsilon, color="black", linestyle="--", linewidth=1)
    ax.text(1.45, cap_epsilon, f" cap ε={cap_epsilon:g}", va="bottom", ha="right", fontsize=8)
    ax.set_ylabel("epsilon")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _label(text: str) -> str:
    """Text shown as is by matplotlib: ``$`` would start math mode, so it is escaped."""
    return str(text).replace("$", r"\$")


_PLAIN_NODE = re.compile(r"[A-Za-z0-9_.+-]+=[A-Za-z0-9_.+-]+")


def _node_file_names(nodes: list[str]) -> list[str]:
    """A distinct, portable PNG file name per top-level node id.

    A plain id (``carrier=AA``) keeps its readable name (``coco_carrier-AA.png``);
    any other (a value with spaces, commas, quotes, slashes, unicode, ...) gets
    a slug of its letters and digits plus a short digest of the id (a public
    node id, not data), so no two nodes share a file and a Markdown link to it
    needs no escaping.
    """
    names, used = [], set()
    for node in nodes:
        if _PLAIN_NODE.fullmatch(node):
            name = f"coco_{node.replace('=', '-')}"
        else:
            slug = re.sub(r"[^A-Za-z0-9]+", "-", node).strip("-")[:40]
            name = f"coco_{slug}-{hashlib.sha256(node.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
        base, k = name, 1
        while name in used:
            k += 1
            name = f"{base}-{k}"
        used.add(name)
        names.append(name + ".png")
    return names


def _binned(h: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum a count-of-counts histogram into at most ``bins`` bins of group size: the bin edges (one more
    than the sums) and the sums."""
    edges = np.unique(np.linspace(0, len(h), bins + 1).astype(int))
    return edges, np.add.reduceat(np.asarray(h, dtype=float), edges[:-1])


def _top_nodes(hierarchy) -> list[str]:
    """The nodes that get a picture each: level 1 (level 0 for a root-only hierarchy)."""
    return hierarchy.nodes_at(1) if hierarchy.levels > 1 else hierarchy.nodes_at(0)


def _stacked(hierarchy, node: str) -> list[str]:
    """The nodes stacked in ``node``'s picture: its children (a hierarchy of three levels or more), else itself."""
    return (hierarchy.children(node) if hierarchy.levels > 2 else []) or [node]


def drawn_nodes(hierarchy) -> list[str]:
    """Every node whose histogram :func:`coco_plots` draws (the top nodes and the nodes stacked in them)."""
    top = _top_nodes(hierarchy)
    return list(dict.fromkeys(top + [n for node in top for n in _stacked(hierarchy, node)]))


def coco_plot_paths(hierarchy, out_dir: Path) -> list[Path]:
    """The files :func:`coco_plots` writes, in its order: the overview, then one per top node."""
    return [out_dir / "coco_overview.png", *(out_dir / n for n in _node_file_names(_top_nodes(hierarchy)))]


def _save(fig, path: Path) -> None:
    """Write ``fig`` to ``path`` as a PNG through a temporary name and a rename (a killed drawing never leaves a
    half-written picture under its name)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _num(x: float) -> str:
    """Shortest decimal text of ``x`` (``11``, ``3.5``)."""
    return np.format_float_positional(float(x), trim="-")


def coco_accuracy_labels(accuracy: dict) -> dict[int, str]:
    """Per hierarchy level, the stated accuracy of a released cell as the pictures print it (issue 48).

    Parameters
    ----------
    accuracy : dict
        :func:`dpcore.steps.coco.coco_accuracy`'s statements (``histograms.level{l}`` and
        ``histograms.level{l}.measurement``, each with ``bound``, ``level`` and ``kind``).

    Returns
    -------
    dict of int to str
        ``level -> "each released cell ± 11 (95%, empirical)"``: the released cells' empirical half-width when
        computed, else the measured cells' exact one (before post-processing), else that there is no figure.
        Public: functions of public parameters and the release.
    """
    out: dict[int, str] = {}
    levels = sorted({int(k.split(".")[1].removeprefix("level")) for k in accuracy if k.startswith("histograms.level")})
    for lv in levels:
        rel, meas = accuracy.get(f"histograms.level{lv}") or {}, accuracy.get(f"histograms.level{lv}.measurement")
        if rel.get("bound") is not None:
            out[lv] = f"each released cell ± {_num(rel['bound'])} ({rel['level']:.0%}, empirical)"
        elif meas and meas.get("bound") is not None:
            out[lv] = (f"each measured cell ± {_num(meas['bound'])} ({meas['level']:.0%}, before "
                       "post-processing)")
        else:
            out[lv] = "no accuracy figure (steps.coco.accuracy_replicates is 0)"
    return out


def _cell_bars(ax, h: np.ndarray, edges: np.ndarray, half_width: float | None) -> None:
    """Error bars ``± half_width`` (clipped at 0) on each drawn bin that is one group size (not a sum of sizes)."""
    if half_width is None:
        return
    one = np.diff(edges) == 1
    if not one.any():
        return
    x = edges[:-1][one] + 0.5
    y = np.asarray(h, dtype=float)[edges[:-1][one]]
    ax.errorbar(x, y, yerr=[np.clip(np.minimum(half_width, y), 0, None), np.full(len(y), float(half_width))],
                fmt="none", ecolor="#333333", elinewidth=0.6, capsize=1.5)


def coco_plots(est: dict, hierarchy, out_dir: Path, K: int, bins: int = 40,
               accuracy: dict | None = None) -> list[Path]:
    """PNG plots of released count-of-counts histograms.

    One PNG per top-level node (its histogram, with its children stacked in
    colour) and one small-multiples overview of all top-level nodes. The
    histograms are binned by group size for readability; the exact released
    counts are in the bundle's tables. With ``accuracy`` (issue 48) every
    picture states the accuracy of a released cell of the levels it draws
    (:func:`coco_accuracy_labels`), and a bin that is one group size gets
    its ``±`` as an error bar (clipped at 0, as the tables state).

    Parameters
    ----------
    est : dict of str to array
        Released histograms per node id (length K+1).
    hierarchy : Hierarchy
        Provides ``nodes_at``, ``children``, ``levels``.
    out_dir : Path
    K : int
        Public maximum group size (x-axis range).
    accuracy : dict, optional
        :func:`dpcore.steps.coco.coco_accuracy`'s statements; None: no accuracy drawn.

    Returns
    -------
    list of Path
        The overview first, then one file per top-level node.
    """
    labels = coco_accuracy_labels(accuracy) if accuracy else {}

    def bound(level: int) -> float | None:
        for key in (f"histograms.level{level}", f"histograms.level{level}.measurement"):
            b = ((accuracy or {}).get(key) or {}).get("bound")
            if b is not None:
                return float(b)
        return None

    out_dir.mkdir(parents=True, exist_ok=True)
    top = _top_nodes(hierarchy)
    paths = coco_plot_paths(hierarchy, out_dir)
    cols = min(4, len(top))
    rows = int(np.ceil(len(top) / cols))
    plt = pyplot()
    # one filled step outline per histogram (``stairs``: one artist, not one rectangle per bin) and fixed
    # margins instead of ``tight_layout`` (which draws every figure twice): BENCHMARKS.md, "plots"
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), dpi=90, squeeze=False)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.05, top=1 - 0.45 / (2.4 * rows), hspace=0.45, wspace=0.3)
    for ax, node in zip(axes.ravel(), top):
        edges, y = _binned(est[node], bins)
        ax.stairs(y, edges, fill=True, color="#4c72b0")
        _cell_bars(ax, est[node], edges, bound(hierarchy.level_of(node)))
        ax.set_title(_label(node), fontsize=8, y=1.0)  # y given: no search for overlapping tick labels (same pixels)
        ax.tick_params(labelsize=6)
    for ax in axes.ravel()[len(top):]:
        ax.axis("off")
    top_level = hierarchy.level_of(top[0]) if top else 0
    fig.suptitle("Released count-of-counts: groups per size (binned)"
                 + (f"; {labels[top_level]}" if top_level in labels else ""), fontsize=9)
    _save(fig, paths[0])
    plt.close(fig)
    cmap = plt.get_cmap("tab20")
    # one figure for every node: its histograms and legend are replaced between files, its axes and their
    # ticks kept (building a figure's ticks was about half of each file's time; the pixels are the same as
    # with a new figure per node: tests/test_plots.py)
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=100)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.15, top=0.9)
    note = ax.text(0.99, 0.98, "", transform=ax.transAxes, ha="right", va="top", fontsize=7)
    ax.set_xlabel("group size (binned)")
    ax.set_ylabel("number of groups")
    for node, path in zip(top, paths[1:]):
        for patch in list(ax.patches):
            patch.remove()
        for bars in list(ax.containers):
            bars.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        bottom = None
        children = hierarchy.children(node) if hierarchy.levels > 2 else []
        for i, child in enumerate(_stacked(hierarchy, node)):
            edges, y = _binned(est[child], bins)
            top_y = y if bottom is None else bottom + y
            ax.stairs(top_y, edges, baseline=0 if bottom is None else bottom, fill=True, color=cmap(i % 20),
                      label=_label(child[len(node) + 1:] if children else node))
            bottom = top_y
        if not children:
            _cell_bars(ax, est[node], edges, bound(hierarchy.level_of(node)))
        shown = [hierarchy.level_of(node)] + ([hierarchy.level_of(children[0])] if children else [])
        note.set_text("\n".join(f"level {lv}: {labels[lv]}" for lv in shown if lv in labels))
        ax.relim()
        ax.autoscale_view()
        ax.set_title(_label(f"{node}: released histogram"), fontsize=9, y=1.0)
        if children:
            ax.legend(fontsize=6, ncol=2)
        _save(fig, path)
    plt.close(fig)
    return paths


def rank_size_plot(sizes: np.ndarray, path: Path, title: str) -> Path:
    """Log-log rank/size plot of a released unattributed histogram (sizes sorted non-increasing).

    Only the released (noisy, charged) vector is drawn; zero sizes cannot be shown on a log axis and are
    left out (the caption says how many).

    Parameters
    ----------
    sizes : ndarray
        The released sorted sizes.
    path : Path
        Output PNG file.
    title : str
    """
    s = np.asarray(sizes, dtype=np.int64)
    rank = np.arange(1, len(s) + 1)
    pos = s > 0
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8), dpi=110)
    if pos.any():
        ax.loglog(rank[pos], s[pos], marker=".", markersize=2, linewidth=0.8)
    ax.set_xlabel("rank (largest group first)")
    ax.set_ylabel("released size")
    ax.set_title(_label(title), fontsize=9)
    n_zero = int((~pos).sum())
    if n_zero:
        ax.text(0.99, 0.98, f"{n_zero:,} groups of size 0 not shown", transform=ax.transAxes, ha="right",
                va="top", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
