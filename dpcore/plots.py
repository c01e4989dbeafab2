"""PNG plots for the release report (matplotlib, headless).

Only public or privacy-protected quantities are plotted: budget caps and
charges are data-independent; private tables are noisy outputs.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def budget_plot(charges: pd.DataFrame, cap_epsilon: float, path: Path, title: str) -> Path:
    """Stacked bar of epsilon spent per step (and notion) against the dataset's cap.

    Parameters
    ----------
    charges : DataFrame
        Ledger charges with columns ``step``, ``notion``, ``epsilon``.
    cap_epsilon : float
        The dataset's epsilon cap (a horizontal line).
    path : Path
        Output PNG file.
    """
    fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=110)
    bottom = 0.0
    if len(charges):
        per = charges.groupby(["step", "notion"], sort=False)["epsilon"].sum().reset_index()
        cmap = plt.get_cmap("tab10")
        for i, row in enumerate(per.itertuples(index=False)):
            ax.bar(["spent"], [row.epsilon], bottom=bottom, color=cmap(i % 10), label=f"{row.step} ({row.notion})")
            bottom += row.epsilon
    ax.bar(["remaining"], [max(cap_epsilon - bottom, 0.0)], color="#dddddd", label="remaining")
    ax.axhline(cap_epsilon, color="black", linestyle="--", linewidth=1)
    ax.text(1.45, cap_epsilon, f" cap ε={cap_epsilon:g}", va="bottom", ha="right", fontsize=8)
    ax.set_ylabel("epsilon")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
