"""Cells of the validator's frames: as text, as parsed numbers, as typed validated rows, as JSON.

Every declared column is checked as text (:func:`_as_text`; Parquet inputs
may be typed), numeric columns also as parsed float64 (:func:`_parse_numbers`,
the derived columns); rows passing every rule are typed for the ``validated``
table (:func:`_typed`); quarantined rows keep their raw cells as JSON text
(:func:`_cells_json`) and great-expectations' result is made plain JSON
(:func:`_json_clean`).
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import numpy as np

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .rules import _NUMBER_BODY, _num_col
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def _int_domain(values: list) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _as_text(s: pd.Series) -> pd.Series:
    """Cells as text (pandas ``str`` dtype); null and ``""`` become missing.

    Parquet inputs may be typed: whole floats are written without ``.0`` (so a
    float month 1.0 reads "1"), other numbers with ``repr``.
    """
    if pd.api.types.is_bool_dtype(s.dtype):
        out = s.astype(object).where(s.notna(), None).map(lambda v: None if v is None else str(bool(v)))
        out = out.astype("str")
    elif pd.api.types.is_integer_dtype(s.dtype):
        out = s.astype("Int64").astype("str")
    elif pd.api.types.is_float_dtype(s.dtype):
        v = s.astype("float64")
        whole = np.isfinite(v) & (v == np.round(v)) & (v.abs() < 2.0**53)
        out = v.astype("str")
        out = out.where(~whole, v.where(whole, 0).astype("int64").astype("str"))
        out = out.where(v.notna())
    else:
        out = s.astype("str")
    out = out.where(out.notna() & (out != ""))
    return out.astype("str")


def _parse_numbers(text: pd.Series) -> pd.Series:
    """float64 of cells matching :data:`NUMBER_PATTERN` (overflow gives ±inf), else NaN."""
    ok = text.str.fullmatch(_NUMBER_BODY).fillna(False).astype(bool)
    return pd.to_numeric(text.where(ok), errors="coerce").astype("float64")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (pd.Timestamp, datetime)):
        return obj.isoformat()
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def _json_clean(obj: Any) -> Any:
    """Round-trip through JSON so the result holds plain types (NaN/inf as strings)."""

    def fix(o):
        if isinstance(o, float) and not math.isfinite(o):
            return str(o)
        if isinstance(o, dict):
            return {str(k): fix(v) for k, v in o.items()}
        if isinstance(o, list):
            return [fix(v) for v in o]
        return o

    return fix(json.loads(json.dumps(obj, default=_jsonable)))


#: Characters ``json.dumps(..., ensure_ascii=False)`` escapes in a string: the quote, the backslash, controls.
_JSON_ESCAPED = r'[\x00-\x1f"\\]'


def _json_cells_of(s: pd.Series):
    """Each cell of one column as ``json.dumps(cell, default=_jsonable, ensure_ascii=False)`` writes it.

    Returns a :class:`pyarrow.StringArray` without nulls: a missing cell is ``null``. Text cells are
    quoted by Arrow as they are unless they hold a character JSON escapes (:data:`_JSON_ESCAPED`; those
    few go through :func:`json.dumps`); cells of other types (a typed Parquet column) are each written
    by :func:`json.dumps`.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    present = s.notna().to_numpy(dtype=bool)
    if present.any() and pd.api.types.infer_dtype(s[present], skipna=False) == "string":
        text = pa.array(s, type=pa.string(), from_pandas=True)  # missing cells (None, NaN) are nulls
        enc = pc.binary_join_element_wise('"', text, '"', "")
        odd = pc.fill_null(pc.match_substring_regex(text, _JSON_ESCAPED), False)
        if pc.any(odd).as_py():
            fixed = [json.dumps(v, ensure_ascii=False) for v in pc.filter(text, odd).to_pylist()]
            enc = pc.replace_with_mask(enc, odd, pa.array(fixed, type=pa.string()))
    else:
        values = s.astype(object).to_numpy(dtype=object)
        enc = pa.array([json.dumps(v, default=_jsonable, ensure_ascii=False) if ok else None
                        for v, ok in zip(values, present)], type=pa.string())
    return pc.fill_null(enc, "null")


def _cells_json(raw: pd.DataFrame, positions: np.ndarray) -> list[str]:
    """JSON text of the raw cells of the given row positions (quarantined rows only).

    Byte for byte ``json.dumps(record, default=_jsonable, ensure_ascii=False)`` of each row as a dict
    of column to cell (missing cells ``null``), built a column at a time: one JSON text per cell
    (:func:`_json_cells_of`), joined with the column names by Arrow's element-wise string join
    (tests/test_validation_cells.py holds the per-row reference).
    """
    return _cells_json_array(raw, positions).to_pylist()


def _cells_json_array(raw: pd.DataFrame, positions: np.ndarray):
    """:func:`_cells_json` as a :class:`pyarrow.StringArray` (no Python string per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sub = raw.iloc[positions].drop(columns=[ROW])
    if not len(sub):
        return pa.array([], type=pa.string())
    if not sub.columns.size:
        return pa.array(["{}"] * len(sub), type=pa.string())
    parts: list = ["{"]
    for k, col in enumerate(sub.columns):
        parts.append(("" if k == 0 else ", ") + json.dumps({col: 0}, ensure_ascii=False)[1:-2])  # '"name": '
        parts.append(_json_cells_of(sub.iloc[:, k]))
    parts.append("}")
    return pc.binary_join_element_wise(*parts, "")


def _typed_column(work: pd.DataFrame, col: str, spec: ReleaseSpec) -> pd.Series:
    """One declared attribute of the ``validated`` table, typed, from the validator's working frame.

    Parameters
    ----------
    work : pandas.DataFrame
        Rows that pass every rule on ``col`` (the working frame of :func:`~dpcore.validation.check._work_frame`).
    col : str
        A categorical or numeric attribute of the spec.
    spec : ReleaseSpec

    Returns
    -------
    pandas.Series
        Categorical: ``int64`` (``Int64`` when nullable) for an integer domain, else text; numeric: the
        parsed ``float64``.
    """
    schema = spec.public_schema
    if col in schema.categorical:
        attr = schema.categorical[col]
        text = work[col] if col in work.columns else pd.Series([], dtype="str")
        if _int_domain(attr.domain):
            return pd.to_numeric(text, errors="raise").astype("Int64" if attr.nullable else "int64")
        return text.astype("str")
    num = work[_num_col(col)] if _num_col(col) in work.columns else pd.Series([], dtype="float64")
    return num.astype("float64")


def _typed(work: pd.DataFrame, spec: ReleaseSpec) -> pd.DataFrame:
    """The ``validated`` rows, typed: ``_row``, the record id as text, then every attribute (:func:`_typed_column`)."""
    rid = spec.dataset.record_id
    schema = spec.public_schema
    out: dict[str, pd.Series] = {ROW: work[ROW].astype("int64")}
    out[rid] = (work[rid] if rid in work.columns else pd.Series([], dtype="str")).astype("str")
    for col in [*schema.categorical, *schema.numeric]:
        out[col] = _typed_column(work, col, spec)
    return pd.DataFrame(out).reset_index(drop=True)
