"""Record ids validated by their form (issue 29, goal 2) give the row-by-row verdicts.

An id's form replaces each ASCII letter or digit by the representative of the characters the id
pattern cannot tell apart (:mod:`dpcore.validation.id_forms`). Checked here: the pattern's verdict
(Python's ``re`` and the pandas string method great-expectations calls) is the same on an id and on its
form, for generated patterns and adversarial texts; the Arrow byte map equals the Python reference;
patterns outside the safe syntax are refused; and a validation by forms stores exactly what chunk-by-
chunk validation and the whole-table great-expectations run store (quarantined rows by id and rule,
validated table, combined result), on tables with missing, duplicated, badly formed, non-ASCII and
look-alike ids, with patterns that give forms, that are refused, and with too many forms.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcore.ingest.raw import load_raw
from dpcore.validation import by_values as BV
from dpcore.validation import distinct_values as DV
from dpcore.validation import validate_table
from dpcore.validation.id_forms import form_map, forms_of, pattern_atoms, to_form
from test_validation_by_values import assert_equal_results, stored
from test_validation_chunks import assert_same, ingested, random_table, reference_validate

DEFAULT = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


def ge_regex(pattern: str) -> str:
    """The regex great-expectations receives for ``id_pattern`` (dpcore.validation.rule_set)."""
    return f"(?:{pattern})\\Z"


def test_forms_of_the_demo_and_default_patterns():
    m = form_map(ge_regex(r"F[0-9]{8}"))
    assert to_form("F00000001", m) == to_form("F03367760", m) == "F00000000"
    assert to_form("G00000001", m) != "F00000000"  # F is a literal of the pattern: its own class
    m = form_map(ge_regex(DEFAULT))
    assert {to_form(t, m) for t in ("r1", "Z9", "aa")} == {"00"}
    assert to_form("a b", m) == "0 0" and to_form("", m) == "" and to_form(None, m) is None
    assert to_form("é1_", m) == "é0_"  # only ASCII letters and digits are replaced


@pytest.mark.parametrize("pattern", [
    r"(a)\1", r"(?i)abc", r"a(?=b)", r"a(?!b)", r"(?<=a)b", r"a{,3}", r"[[:alpha:]]+", r"a++", r"\x41",
    r"\p{L}", r"]a", r"a}", r"[]a]", r"(?P<n>a)", r"\d\u00e9",
])
def test_patterns_outside_the_safe_syntax_are_refused(pattern):
    assert form_map(ge_regex(pattern)) is None


# patterns of the safe syntax, built from pieces that tell characters apart in different ways
_PIECES = ["a", "F", "0", "7", "x", r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", ".", "[a-f]", "[^0-3]", "[A-Z0-9]",
           r"[\d_]", "[xyz]", r"\.", "-", "_", " ", "é"]
_QUANT = ["", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?", "+?"]


@st.composite
def safe_patterns(draw):
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        piece = draw(st.sampled_from(_PIECES)) + draw(st.sampled_from(_QUANT))
        if draw(st.booleans()):
            piece = f"(?:{piece}|{draw(st.sampled_from(_PIECES))})"
        parts.append(piece)
    anchor = draw(st.sampled_from(["", "^", r"\A", r"\b"]))
    end = draw(st.sampled_from(["", "$", r"\b", r"\B"]))
    return anchor + "".join(parts) + end


_ALPHABET = st.sampled_from(list("aAbFfxyz0123789_-. \n\té\u00a0\u0660ß") + ["Ǆ", "\u212a"])


@settings(max_examples=300, deadline=None)
@given(safe_patterns(), st.lists(st.text(_ALPHABET, max_size=8), min_size=1, max_size=12))
def test_a_pattern_gives_the_same_verdict_on_an_id_and_on_its_form(pattern, texts):
    regex = ge_regex(pattern)
    assert pattern_atoms(regex) is not None, regex
    m = form_map(regex)
    forms = [to_form(t, m) for t in texts]
    assert [len(f) for f in forms] == [len(t) for t in texts]
    assert [re.search(regex, t) is not None for t in texts] == [re.search(regex, f) is not None for f in forms]
    # great-expectations' pandas engine: column.astype(str).str.contains(regex) (pyarrow's RE2 or Python's re)
    got = pd.Series(texts, dtype="str").str.contains(regex).tolist()
    assert got == pd.Series(forms, dtype="str").str.contains(regex).tolist()
    # the Arrow byte map (what validation runs) is the Python reference
    assert forms_of(pa.array(texts + [None], type=pa.string()), m).to_pylist() == forms + [None]
    assert forms_of(pa.array(texts, type=pa.large_string()), m).to_pylist() == forms
    sliced = pa.array(["pad"] + texts + [None], type=pa.string()).slice(1, len(texts))  # as iter_batches cuts
    assert forms_of(sliced, m).to_pylist() == forms


# --------------------------------------------------------------------------- validation by forms


_BAD_IDS = ["", "a b", '=HYPERLINK("x")', "r1\n", "é9", "r" * 70, "-r1", " r2", "r3 "]


def _table(rng: np.random.Generator, n: int, ids: list) -> pd.DataFrame:
    df = random_table(rng, n)
    df["id"] = np.array(ids, dtype=object)[:n]
    return df


@st.composite
def id_columns(draw, n: int = 24):
    """Ids: good ones, their look-alikes (same form), missing, duplicated and badly formed ones."""
    good = [f"r{i}" for i in range(n)]
    ids = []
    for i in range(n):
        kind = draw(st.sampled_from(["good", "good", "good", "alike", "bad", "dup", "missing"]))
        if kind == "alike":
            ids.append(f"Q{i}z")
        elif kind == "bad":
            ids.append(draw(st.sampled_from(_BAD_IDS)))
        elif kind == "dup":
            ids.append(good[draw(st.integers(0, n - 1))])
        elif kind == "missing":
            ids.append("")
        else:
            ids.append(good[i])
    return ids


def _compare(tmp_path, df, pattern, rows=5):
    spec, wh, res = ingested(tmp_path, df, record_id_pattern=pattern)
    columns = {str(d[0]): str(d[1]) for d in wh.query(f"DESCRIBE {res.qualified_table}")}
    assert BV.applies(columns, spec, len(df))
    validate_table(wh, res, spec, rows=rows, by_values=False)
    before = stored(wh, res, spec)
    new = validate_table(wh, res, spec, rows=rows)
    assert_equal_results(stored(wh, res, spec), before)
    assert_same(tmp_path, wh, res, spec, new, reference_validate(load_raw(wh, res), spec), n_chunks=0)
    return before, stored(wh, res, spec)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=id_columns(), pattern=st.sampled_from([DEFAULT, r"r[0-9]+", r"[a-r]\d{1,2}\w?", r"^(.)\1*$"]),
       seed=st.integers(0, 5))
def test_validation_by_forms_stores_what_row_by_row_validation_stores(tmp_path_factory, ids, pattern, seed):
    tmp_path = tmp_path_factory.mktemp("forms")
    _compare(tmp_path, _table(np.random.default_rng(seed), len(ids), ids), pattern)


def test_too_many_forms_fall_back_to_the_id_chunks(tmp_path, monkeypatch):
    """A pattern with many literals makes many forms: past the cap's count, ids are validated row by row."""
    ids = [f"{i:03d}" for i in range(30)]
    ids[4], ids[9], ids[17] = "", "a b", ids[3]
    df = _table(np.random.default_rng(2), 30, ids)
    calls = []
    real = DV.copy_duplicated_rows
    monkeypatch.setattr(DV, "copy_duplicated_rows", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr("dpcore.validation.chunked.validation_chunk_rows", lambda *args: 14)
    before, after = _compare(tmp_path, df, r"0[0-9][0-9]|1[0-9][0-9]|2[0-3]\d")
    assert not calls  # 30 forms > 14: the id column went through the id chunks as before
    assert after["n_results"] < before["n_results"]  # and the attributes by their values
