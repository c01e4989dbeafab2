"""The series page of a dataset (issue 30): every released number of a series over its periods.

``bundles/<dataset>/series/index.md`` plus one PNG per kind of number, rebuilt
after each period from the **stored releases only**: the public tables and
manifests of the series' bundles (``bundles/<dataset>/<release id>/``, release
ids matching the series' template). It is post-processing of released values
and public parameters: nothing here reads the warehouse's private tables or
the data, and the owner's ``owner/`` folders are never opened. Rebuilding it
from the same bundles gives the same files, so a re-run of a period changes
nothing.

Shown per period, each with its public (1 - accuracy_alpha) interval half-width
as the bundle states it: the record counts (input, accepted, quarantined), the
noisy outlier count of each subspace selected that period, the largest group
sizes (the unattributed histogram's top ranks), and the budget the period's
release holds.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcore.release.periods import parse_label
from dpcore.storage.private_files import public_mkdir, publish
from dpcore.release.spec import ReleaseSpec
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

#: How many of the largest group sizes the page follows over the periods.
TOP_SIZES = 3


@dataclass
class SeriesPage:
    """The page as written: its folder, the periods drawn, the PNG files and the markdown."""

    folder: Path
    periods: list[str] = field(default_factory=list)
    pngs: list[str] = field(default_factory=list)
    markdown: str = ""


def _period_group(spec: ReleaseSpec) -> re.Pattern:
    """The series' release ids, with the period's label as the group ``period``."""
    from dpcore.release.series import _LABEL_RE

    parts = re.split(r"(\{period\}|\{dataset\})", spec.release_id_template or "")
    out = []
    for part in parts:
        if part == "{period}":
            out.append(f"(?P<period>{_LABEL_RE[spec.series.period]})")
        else:
            out.append(re.escape(spec.dataset.name if part == "{dataset}" else part))
    return re.compile("".join(out))


def _read_csv(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.is_file() else None


def collect(spec: ReleaseSpec, bundles: Path) -> pd.DataFrame:
    """One row per released number of the series: period, what, label, value, half_width, ci_level.

    Reads the public tables of the series' bundles only (``tables/*.csv`` and ``manifest.json``).
    """
    rx = _period_group(spec)
    root = Path(bundles) / spec.dataset.name
    rows: list[dict[str, Any]] = []
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for folder in folders:
        m = rx.fullmatch(folder.name)
        if m is None or not (folder / "manifest.json").is_file():
            continue
        period = m.group("period")
        manifest = json.loads((folder / "manifest.json").read_text())
        base = {"period": period, "start": parse_label(period).start,
                "for_publication": bool(manifest.get("for_publication", True))}
        held = manifest.get("budget", {}).get("spent_by_this_release", {})
        rows.append({**base, "what": "budget", "label": "epsilon held by the period's release",
                     "value": float(held.get("epsilon", 0.0)), "half_width": None, "ci_level": None})
        t = _read_csv(folder / "tables" / "record_counts__counts.csv")
        if t is not None:
            for r in t.itertuples():
                rows.append({**base, "what": "record_counts", "label": r.cell, "value": float(r.noisy_count),
                             "half_width": float(r.ci_half_width), "ci_level": float(r.ci_level)})
        t = _read_csv(folder / "tables" / "outlier_counts__counts.csv")
        if t is not None:
            for r in t.itertuples():
                rows.append({**base, "what": "outlier_counts", "label": str(r.subspace),
                             "value": float(r.noisy_count), "half_width": float(r.ci_half_width),
                             "ci_level": float(r.ci_level)})
        t = _read_csv(folder / "tables" / "unattributed__sorted_sizes.csv")
        if t is not None:
            for rank, r in enumerate(t.head(TOP_SIZES).itertuples(), start=1):
                rows.append({**base, "what": "largest_groups", "label": f"rank {rank}", "value": float(r.size),
                             "half_width": float(r.ci_half_width), "ci_level": float(r.ci_level)})
    cols = ["period", "start", "for_publication", "what", "label", "value", "half_width", "ci_level"]
    return pd.DataFrame(rows, columns=cols).sort_values(["start", "what", "label"], kind="stable")


_TITLES = {
    "record_counts": "Record counts (noisy, differentially private)",
    "outlier_counts": "Noisy outlier counts per subspace (the subspaces selected each period)",
    "largest_groups": f"The {TOP_SIZES} largest group sizes (unattributed histogram)",
    "budget": "Privacy budget held by each period's release (epsilon, under the budget's neighbour relation)",
}


def clipped_errors(values, half_widths) -> list[list[float]]:
    """Error bar lengths (below, above) of ``value ± half_width`` clipped at 0, as the tables state the intervals.

    Every number the page draws with an interval is a count or a group size, never negative, and each
    release's table says its interval is clipped at 0; so the bar below a value stops at 0 (post-processing
    of public numbers).
    """
    import numpy as np

    v = np.asarray(values, dtype=float)
    h = np.nan_to_num(np.asarray(half_widths, dtype=float))
    return [np.clip(np.minimum(h, v), 0, None).tolist(), h.tolist()]


def _plot(df: pd.DataFrame, what: str, path: Path) -> None:
    from .plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    periods = sorted(df["period"].unique(), key=lambda p: parse_label(p).start)
    x = {p: i for i, p in enumerate(periods)}
    for label, g in df.groupby("label", sort=True):
        xs = [x[p] for p in g["period"]]
        if g["half_width"].notna().any():
            ax.errorbar(xs, g["value"], yerr=clipped_errors(g["value"], g["half_width"]), marker="o", capsize=3,
                        label=str(label))
        else:
            ax.plot(xs, g["value"], marker="o", label=str(label))
    ax.set_xticks(range(len(periods)), periods, rotation=45, ha="right")
    ax.set_title(_TITLES[what], fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"


def build_series_page(spec: ReleaseSpec, bundles: Path) -> SeriesPage | None:
    """Rebuild ``bundles/<dataset>/series/`` from the series' stored bundles (None for a spec without series).

    Returns
    -------
    SeriesPage or None
        The folder, the periods drawn, the PNG names and the markdown of ``index.md``.
    """
    if spec.series is None or spec.release_id_template is None:
        return None
    df = collect(spec, bundles)
    folder = Path(bundles) / spec.dataset.name / "series"
    public_mkdir(folder)
    page = SeriesPage(folder, periods=sorted(set(df["period"]), key=lambda p: parse_label(p).start))
    cad = spec.series.cadence()
    lines = [f"# Series of {spec.dataset.name} ({cad.describe()}, from {cad.first.label})", "",
             "Every number released for the periods of this series, rebuilt from the stored releases' public tables "
             "(post-processing: no data is read). Each value is given with its public accuracy interval as its "
             "release states it, clipped at 0 (a count is never negative); the intervals are of the noise, not of "
             "sampling.", ""]
    if cad.listed is not None:
        lines += ["Periods of the series (series.periods): " + ", ".join(p.label for p in cad.listed) + ".", ""]
    if df.empty:
        lines.append("No period of this series has been released yet.")
    if not df.empty and not df["for_publication"].all():
        lines += ["**Some periods were made with the test noise generator and are not for publication.**", ""]
    for what in ("record_counts", "outlier_counts", "largest_groups", "budget"):
        part = df[df["what"] == what]
        if part.empty:
            continue
        png = f"{what}.png"
        _plot(part, what, folder / png)
        page.pngs.append(png)
        lines += [f"## {_TITLES[what]}", "", f"![{what}]({png})", ""]
        labels = sorted(part["label"].unique())
        lines.append("| period | " + " | ".join(labels) + " |")
        lines.append("|---|" + "---|" * len(labels))
        for period in page.periods:
            cells = []
            for label in labels:
                hit = part[(part["period"] == period) & (part["label"] == label)]
                if hit.empty:
                    cells.append("")
                    continue
                r = hit.iloc[0]
                if pd.isna(r["half_width"]):
                    cells.append(_fmt(r["value"]))
                else:
                    cells.append(f"{_fmt(r['value'])} (± {_fmt(r['half_width'])}, {r['ci_level']:.0%})")
            lines.append(f"| {period} | " + " | ".join(cells) + " |")
        lines.append("")
    for old in folder.glob("*.png"):  # a kind of number no stored release holds any more
        if old.name not in page.pngs:
            old.unlink()
    page.markdown = "\n".join(lines)
    tmp = folder / "index.md.tmp"
    tmp.write_text(page.markdown, encoding="utf-8")
    tmp.replace(folder / "index.md")
    publish(folder, private=())  # a public page: the bundle's public modes, whatever the umask
    return page
