"""Outlier rules: a numeric range of an operation tree, a categorical predicate, or both.

Seed 004, slides "Outlier Rules Discovery" (search space generation and rule
selection) and the top-ranked rules of the NYC taxi and Intel sensor data::

    D / (dtime - ptime) < 3.46 mph
    |Time - (dtime - ptime)| ≥ 3 s ∧ vendor = CMT
    122.15 ≤ temp < 175.68 °C ∧ week = 3

A :class:`Rule` is a conjunction of at most one numeric part (``lower ≤ tree <
upper`` with one end possibly infinite, in the tree's unit) and at most one
categorical part (``column ∈ values``). Its precision, recall, F1 and support are
those measured on the training table by :class:`~dpcore.explain.RuleMiner`;
:meth:`Rule.covers` re-evaluates it on any table with the columns it reads.

* :func:`sorted_rules` -- every tree into rules by range search (:mod:`.ranges`)
  over its sorted values, on all rows or within the rows of a categorical
  predicate (a conjunction);
* :func:`categorical_rules` -- values with reasonable precision and recall
  (:mod:`.categories`);
* :func:`select_rules` -- near-duplicate grouping and ranking by F1 (:mod:`.select`).

Rules, like the detector's labels they explain, are internal (non-private): they
hold thresholds and counts measured on the raw records, and leave the warehouse
only through a differentially private mechanism (DESIGN.md, privacy rule 6).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .categories import value_predicates
from .ranges import format_number, search_sorted
from .select import select_rules
from .trees import Tree
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["Rule", "sorted_rules", "categorical_rules", "select_rules"]


def _value_text(v) -> str:
    """A category as the rule text writes it: numbers formatted; a text bare when it cannot misread the value
    set, else as a JSON string literal (:func:`dpcore.storage.quoting.quote`, as PCOR contexts write it):
    ``wrkstat ∈ {Working fulltime, "Unemployed, Laid Off"}`` (issue 48)."""
    from dpcore.storage.quoting import needs_quotes, quote

    if isinstance(v, float):
        return format_number(v)
    text = str(v)
    return quote(text) if needs_quotes(text, specials=',{}∧∈∅') else text


def _jsonable(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


@dataclass(frozen=True)
class Rule:
    """A rule ``lower ≤ tree < upper ∧ column ∈ values`` with its training precision, recall, F1 and support.

    Attributes
    ----------
    tree : Tree or None
        The numeric part's operation tree (None for a purely categorical rule).
    lower, upper : float
        Range of the tree's values in :attr:`Tree.unit` (``-inf`` / ``inf``: open end).
    column : str or None
        The categorical part's attribute (None for a purely numeric rule).
    values : tuple
        The categorical part's values (one value: ``column = v``; more: ``column ∈ {...}``).
    precision, recall, f1 : float
        On the training table: outliers covered / rows covered, outliers covered /
        all labelled outliers, and their harmonic mean.
    support : int
        Training rows covered.
    similar : tuple of str
        Texts of near-duplicate rules this one stands for (:func:`select_rules`).
    """

    tree: Tree | None = None
    lower: float = -math.inf
    upper: float = math.inf
    column: str | None = None
    values: tuple = ()
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0
    support: int = 0
    similar: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tree is None and self.column is None:
            raise ValueError("a Rule needs a tree (numeric part) or a column (categorical part)")
        if self.column is not None and not self.values:
            raise ValueError(f"rule on {self.column!r}: values must not be empty")
        if not self.lower < self.upper:
            raise ValueError("a Rule needs lower < upper")

    @property
    def complexity(self) -> int:
        """Tree depth plus one for a categorical part (ties in F1 prefer simpler rules)."""
        return (self.tree.depth if self.tree is not None else 0) + (self.column is not None)

    @property
    def numeric_text(self) -> str:
        """The numeric part, e.g. ``distance / air_time < 3.46 mph`` (``""`` when none)."""
        if self.tree is None:
            return ""
        u = self.tree.unit_text
        suffix = f" {u}" if u else ""
        t = self.tree.text
        if self.lower == -math.inf:
            return f"{t} < {format_number(self.upper)}{suffix}"
        if self.upper == math.inf:
            return f"{t} ≥ {format_number(self.lower)}{suffix}"
        return f"{format_number(self.lower)} ≤ {t} < {format_number(self.upper)}{suffix}"

    @property
    def categorical_text(self) -> str:
        """The categorical part, e.g. ``carrier = CMT`` or ``week ∈ {1, 2}`` (``""`` when none)."""
        if self.column is None:
            return ""
        if len(self.values) == 1:
            return f"{self.column} = {_value_text(self.values[0])}"
        return f"{self.column} ∈ {{{', '.join(_value_text(v) for v in self.values)}}}"

    @property
    def text(self) -> str:
        """Readable rule with units: numeric part, then ``∧`` and the categorical part."""
        return " ∧ ".join(p for p in (self.numeric_text, self.categorical_text) if p)

    @property
    def columns(self) -> tuple[str, ...]:
        """Attributes the rule reads."""
        cols = self.tree.columns if self.tree is not None else ()
        return cols + ((self.column,) if self.column is not None else ())

    def covers(self, frame: pd.DataFrame, tree_values: np.ndarray | None = None) -> np.ndarray:
        """Boolean array: which rows of ``frame`` satisfy the rule (``frame`` is not modified).

        Rows with a missing (or infinite) value of the tree are not covered; nor
        are rows with a missing categorical value. ``tree_values`` may pass
        precomputed ``self.tree.values(frame)``. Raises ``ValueError`` naming the
        column and the rule when a column is missing or a numeric one is not numeric.
        """
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
        mask = np.ones(len(frame), dtype=bool)
        if self.tree is not None:
            try:
                v = self.tree.values(frame) if tree_values is None else tree_values
            except ValueError as exc:
                raise ValueError(f"rule {self.text!r}: {exc}") from None
            with np.errstate(invalid="ignore"):
                mask &= np.isfinite(v)
                if self.lower > -math.inf:
                    mask &= v >= self.lower
                if self.upper < math.inf:
                    mask &= v < self.upper
        if self.column is not None:
            if self.column not in frame.columns:
                raise ValueError(f"rule {self.text!r}: column {self.column!r} is missing from the frame")
            mask &= frame[self.column].isin(list(self.values)).to_numpy(dtype=bool)
        return mask

    def as_dict(self) -> dict:
        """JSON-ready description: text, scores, the numeric and categorical parts, near-duplicates."""
        return {
            "text": self.text,
            "precision": float(self.precision),
            "recall": float(self.recall),
            "f1": float(self.f1),
            "support": int(self.support),
            "numeric": None if self.tree is None else {
                "tree": self.tree.text,
                "unit": self.tree.unit_text,
                "columns": list(self.tree.columns),
                "lower": _jsonable(float(self.lower)),
                "upper": _jsonable(float(self.upper)),
            },
            "categorical": None if self.column is None else {
                "column": self.column,
                "values": [_jsonable(v) for v in self.values],
            },
            "similar": list(self.similar),
        }

    def __str__(self) -> str:
        return f"{self.text}  (precision {self.precision:.3f}, recall {self.recall:.3f}, F1 {self.f1:.3f})"


def _scores(tp: int, support: int, n_pos: int) -> dict:
    return {"precision": tp / support, "recall": tp / n_pos, "f1": 2.0 * tp / (support + n_pos),
            "support": int(support)}


def sorted_rules(tree: Tree, vs: np.ndarray, ys: np.ndarray, n_pos: int, min_support: int, n_thresholds: int,
                 condition: Rule | None = None, bnd: np.ndarray | None = None) -> list[Rule]:
    """Rules ``tree < t``, ``tree ≥ t`` and ``lo ≤ tree < hi`` (best F1 of each form), optionally ∧ ``condition``.

    Parameters
    ----------
    tree : Tree
    vs : ndarray
        The tree's finite values on the rows searched, sorted (all rows, or the
        rows of ``condition``, in the order of :func:`~.ranges.sort_finite`).
    ys : ndarray of bool
        Those rows' labels in the same order; ``n_pos`` (all outliers of the
        table) is the recall denominator.
    min_support, n_thresholds : int
        See :func:`~.ranges.search_sorted`.
    condition : Rule, optional
        A categorical rule; the results are conjunctions with it.
    bnd : ndarray of int, optional
        :func:`~.ranges.boundaries` of ``vs`` when already known (label vectors
        searched over the same rows share it; seed 004, "Outlier Rules
        Discovery - Search Space Generation").
    """
    cuts = search_sorted(vs, ys, n_pos, min_support, n_thresholds, bnd)
    extra = {} if condition is None else {"column": condition.column, "values": condition.values}
    return [Rule(tree=tree, lower=c.lower, upper=c.upper, **extra, **_scores(c.tp, c.support, n_pos))
            for c in cuts]


def categorical_rules(frame: pd.DataFrame, y: np.ndarray, columns, n_pos: int, min_support: int,
                      max_categories: int) -> list[Rule]:
    """Categorical rules of every attribute in ``columns`` (:func:`~.categories.value_predicates`)."""
    out = []
    for col in columns:
        for p in value_predicates(frame[col], y, n_pos, min_support, max_categories):
            out.append(Rule(column=col, values=p.values, **_scores(p.tp, p.support, n_pos)))
    return out
