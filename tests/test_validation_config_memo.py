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
