"""The owner's validation summary text (issue 32, section 5).

Row numbers are data rows (1 = the first row after the header), not file lines, and the
text says so; an ``in_bounds`` rule prints the column's public bounds (spec values); a
count of one is "1 row". No cell value appears (DESIGN.md rules 6 and 7).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dpcore.release.spec import parse_spec
from dpcore.validation import validate

SECRET = 7777.25  # an out-of-bounds value: must never be printed


def spec():
    return parse_spec({
        "release_id": "m-r1",
        "dataset": {"name": "m", "source": {"kind": "csv", "path": "/nonexistent.csv"}, "record_id": "id"},
        "schema": {"categorical": {"sector": {"domain": ["A", "B"]}},
                   "numeric": {"wage": {"min": 0, "max": 5000.5}, "age": {"min": 16, "max": 99, "integer": True}}},
        "budget": {"epsilon": 1.0},
        "steps": {"validation": {"examples_per_rule": 3}},
    })


def frame(n: int, bad_wage: list[int], bad_sector: list[int]) -> pd.DataFrame:
    """``n`` text rows numbered 1..n; wages of the rows in ``bad_wage`` over the bounds, sectors of ``bad_sector``
    outside the domain."""
    rows = np.arange(1, n + 1)
    return pd.DataFrame({
        "_row": rows,
        "id": [f"p{i}" for i in rows],
        "sector": ["Z" if i in bad_sector else "A" for i in rows],
        "wage": [str(SECRET) if i in bad_wage else "100" for i in rows],
        "age": ["40"] * n,
    })


def test_rows_are_data_rows_bounds_are_printed_and_one_row_is_singular():
    out = validate(frame(40, bad_wage=[11, 21, 31, 35], bad_sector=[7]), spec())
    text = out.summary_text()
    lines = text.splitlines()
    assert lines[0] == "validation: 40 rows, 35 valid, 5 rejected (12.50%)"
    assert "example data rows: 1 = the first row after the header" in text
    wage = next(ln for ln in lines if "column 'wage'" in ln)
    assert wage == ("  - in_bounds, column 'wage': 4 rows; data rows 11, 21, 31, ... "
                    "(number is outside the public bounds [0, 5000.5])")
    sector = next(ln for ln in lines if "column 'sector'" in ln)
    assert sector == "  - in_domain, column 'sector': 1 row; data row 7 (value is not in the categorical domain)"
    assert "1 rows" not in text
    summary = out.summary()
    assert next(f for f in summary["row_failures"] if f["rule"] == "in_bounds")["bounds"] == [0.0, 5000.5]
    for shown in (text, json.dumps(summary)):
        assert str(SECRET) not in shown and "7777" not in shown


def test_a_table_of_one_row_is_one_row():
    out = validate(frame(1, bad_wage=[], bad_sector=[]), spec())
    assert out.summary_text().splitlines()[0] == "validation: 1 row, 1 valid, 0 rejected (0.00%)"
