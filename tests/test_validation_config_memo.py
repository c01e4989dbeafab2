"""dpcore.validation.config_memo: great-expectations' results are the same with each configuration built once.

The memo replaces ``Expectation.configuration`` only inside its block; every
read there returns what great-expectations would build (a fresh ``kwargs``
dict, equal values). Compared here on random tables where every row rule
fails somewhere, including a domain rule with a value set, against the same
suite run with great-expectations' own property.
"""
from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from great_expectations.expectations.expectation import Expectation

import dpcore.validation.suite as S
from dpcore.validation.config_memo import memoised_configurations
from test_validation_chunks import make_spec, random_table, reference_validate

ORIGINAL = Expectation.__dict__["configuration"]


@pytest.mark.parametrize("seed, n", [(0, 60), (1, 17)])
def test_suite_results_are_the_same_with_the_memo(tmp_path, monkeypatch, seed, n):
    raw = random_table(np.random.default_rng(seed), n).reset_index(names="_row")
    raw["_row"] = raw["_row"].astype(str)
    spec = make_spec(tmp_path / "in.csv")
    with_memo = reference_validate(raw.copy(), spec)
    monkeypatch.setattr(S, "memoised_configurations", contextlib.nullcontext)
    without = reference_validate(raw.copy(), spec)

    def comparable(ref: dict) -> str:
        return json.dumps(ref, sort_keys=True, default=str)

    # the run names carry a random tag: the results are compared without them
    assert comparable(_untagged(with_memo)) == comparable(_untagged(without))


def _untagged(ref: dict) -> dict:
    text = json.dumps(ref, sort_keys=True, default=str)
    import re

    return json.loads(re.sub(r"_[0-9a-f]{8}\b", "_TAG", text))


def test_reads_inside_equal_great_expectations_own_and_the_property_is_restored():
    from great_expectations.expectations.core import ExpectColumnValuesToBeInSet

    exp = ExpectColumnValuesToBeInSet(column="carrier", value_set=[f"v{i}" for i in range(100)], meta={"rule": "d"})
    own = exp.configuration
    with memoised_configurations():
        assert Expectation.__dict__["configuration"] is not ORIGINAL
        a, b = exp.configuration, exp.configuration
        with memoised_configurations():  # nested: the same memo
            c = exp.configuration
    assert Expectation.__dict__["configuration"] is ORIGINAL
    for got in (a, b, c):
        assert got.to_json_dict() == own.to_json_dict()
    a.kwargs["column"] = "changed"  # a caller replacing a key changes only its own copy
    assert b.kwargs["column"] == "carrier" and c.kwargs["column"] == "carrier"
    assert exp.configuration.kwargs["column"] == "carrier"


_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.0, float("nan"), float("inf")])
    | st.text("ab", max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text("xy", max_size=1), inner, max_size=2),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["column", "value_set", "mostly", "result_format"]), _plain,
                                min_size=2, max_size=4), min_size=1, max_size=6))
def test_memoised_ids_are_great_expectations_own(kwargs_list):
    """Inside the block each IDDict's id is the one great-expectations computes, for every kwargs in a run (hits
    included: equal keys are the same values of the same types, so 0 / False / 0.0 / -0.0 never share an id)."""
    from great_expectations.core.id_dict import IDDict

    own = [IDDict.__dict__["to_id"](IDDict(k)) for k in kwargs_list]
    with memoised_configurations():
        first = [IDDict(k).to_id() for k in kwargs_list]
        again = [IDDict(k).to_id() for k in kwargs_list]  # from the memo
    assert first == own and again == own
    assert IDDict.to_id is IDDict.__dict__["to_id"] and IDDict.to_id.__name__ == "to_id"  # restored


def test_values_that_are_not_plain_are_never_memoised():
    from great_expectations.core.id_dict import IDDict

    from dpcore.validation import config_memo

    a = IDDict(column="x", value_set=np.array([1.0, 2.0]))
    with memoised_configurations():
        assert a.to_id() == config_memo._ORIGINAL_TO_ID(a)
        assert config_memo._IDS == {}  # a numpy array: computed by great-expectations, nothing stored
        IDDict(column="x", value_set=["A", "B"]).to_id()
        assert len(config_memo._IDS) == 1
    assert config_memo._IDS == {}


@pytest.mark.parametrize("a, b", [(0.0, -0.0), (0, False), (1, 1.0), (1, True), ("1", 1), ([1, 2], (1, 2)),
                                  ([1, 2], [2, 1]), (None, "None")])
def test_values_equal_in_python_but_not_in_json_keep_their_own_ids(a, b):
    from great_expectations.core.id_dict import IDDict

    original = IDDict.__dict__["to_id"]
    x, y = IDDict(column="c", value=a), IDDict(column="c", value=b)
    with memoised_configurations():
        got = (x.to_id(), y.to_id(), x.to_id())
    assert got == (original(x), original(y), original(x))
