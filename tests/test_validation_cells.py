"""The quarantined rows' JSON cells: built a column at a time, byte for byte the per-row ``json.dumps``."""
from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.ingest.raw import ROW
from dpcore.validation.cells import _cells_json, _jsonable


def _per_row(raw: pd.DataFrame, positions: np.ndarray) -> list[str]:
    """The reference: each row as a dict of column to cell, through ``json.dumps`` (the code before issue 29)."""
    sub = raw.iloc[positions].drop(columns=[ROW])
    sub = sub.astype(object).where(sub.notna(), None)
    return [json.dumps(rec, default=_jsonable, ensure_ascii=False) for rec in sub.to_dict("records")]


cells = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "é", "\u2028",
                                                                   "a\tb", "", " ", "NaN", "null"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(cells, cells, cells), min_size=1, max_size=30), st.sampled_from(["str", "object"]),
       st.data())
def test_text_cells_are_written_as_json_dumps_writes_each_row(rows, dtype, data):
    raw = pd.DataFrame(rows, columns=["a", 'we"ird \\ name', "é"]).astype(dtype)
    raw.insert(0, ROW, np.arange(1, len(raw) + 1))
    pos = np.array(sorted(data.draw(st.sets(st.integers(0, len(raw) - 1), min_size=1))))
    assert _cells_json(raw, pos) == _per_row(raw, pos)


def test_typed_cells_are_written_as_json_dumps_writes_each_row():
    raw = pd.DataFrame({
        ROW: [1, 2, 3],
        "i": pd.array([1, None, -7], dtype="Int64"),
        "f": [1.5, np.nan, float("inf")],
        "b": pd.array([True, None, False], dtype="boolean"),
        "t": [pd.Timestamp("2013-01-01 05:00"), pd.NaT, datetime(2013, 12, 31)],
        "mixed": ["x", 3, None],
        "s": ["a", None, 'q"'],
    })
    pos = np.array([0, 1, 2])
    assert _cells_json(raw, pos) == _per_row(raw, pos)
    assert _cells_json(raw, np.array([], dtype=int)) == []
    assert _cells_json(raw[[ROW]], pos) == _per_row(raw[[ROW]], pos) == ["{}"] * 3
