"""The rules file quotes a category that would misread the value set (issue 48, item 5)."""
from __future__ import annotations

from dpcore.explain.rules import Rule


def test_a_category_with_a_comma_is_quoted():
    r = Rule(column="wrkstat", values=("Working fulltime", "Unemployed, Laid Off"))
    assert r.text == 'wrkstat ∈ {Working fulltime, "Unemployed, Laid Off"}'
    assert Rule(column="x", values=(" lead space",)).text == 'x = " lead space"'
    assert Rule(column="week", values=(1, 2)).text == "week ∈ {1, 2}"  # plain values unchanged
