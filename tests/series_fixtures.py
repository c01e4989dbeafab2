"""A small monthly series for tests (issue 30): three input files cut from the small flights sample."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

MONTHS = ["2013-01", "2013-02", "2013-03"]


def make_series_spec(folder: Path, base_spec: Path, flights_csv: Path, series_cap: float | None = 0.5) -> Path:
    """A monthly series over three files of 1,000 flights each (``folder/data/flights_{period}.csv``).

    The small spec with record counts only (0.2 per period against its replace-one cap); with the default
    ``series_cap`` of 0.5 two periods fit and the third is refused.
    """
    rows = pd.read_csv(flights_csv, dtype=str, keep_default_na=False)
    data = folder / "data"
    data.mkdir(exist_ok=True)
    for i, month in enumerate(MONTHS):
        rows.iloc[i * 1000:(i + 1) * 1000].to_csv(data / f"flights_{month}.csv", index=False)
    spec = yaml.safe_load(Path(base_spec).read_text())
    spec["release_id"] = "{dataset}-{period}"
    spec["dataset"]["source"] = {"kind": "csv", "path": str(data / "flights_{period}.csv")}
    spec["series"] = {"period": "monthly", "first": "2013-01"}
    if series_cap is not None:
        spec["budget"]["series_cap"] = {"epsilon": series_cap}
    for step in ("detect", "rules", "aiq", "pcor", "outlier_counts", "coco", "unattributed"):
        spec["steps"].setdefault(step, {})["enabled"] = False
    path = folder / "series.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
