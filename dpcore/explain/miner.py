"""RuleMiner: outlier rules that respect units (seed 004, "Outlier Rules Discovery").

The explainer of seed 004 "will search for rules that combine features in ways
that respect units" (slide "Outlier Rules Discovery"): given a table and labels
marking its outliers (from the detector, :mod:`dpcore.detect`), find short,
readable rules such as ``D / (dtime - ptime) < 3.46 mph`` that cover the outliers
with high precision and recall.

Pipeline of :meth:`RuleMiner.fit` (slides "Search Space Generation" and "Rule
Selection Phase"):

1. **Operation trees** over the numeric attributes (the keys of ``units``) up to
   ``max_depth``, typed by their units, with equivalent and constant trees
   pruned (:mod:`.trees`).
2. **Numeric rules**: every tree's best ``<``, ``≥`` and two-sided range by F1
   (:mod:`.ranges`; exact for one-sided, grid of ``n_thresholds`` cuts plus
   exact refinement for ranges).
3. **Categorical rules**: values (and one value set) per categorical attribute
   with precision above the base rate, the best ``max_categories`` by F1
   (:mod:`.categories`).
4. **Conjunctions**: each tree's range search is repeated within the rows of
   each categorical rule (one sort per tree; the subset keeps the sorted order);
   a conjunction is a candidate only when its F1 beats both the tree's best
   rule on all rows and the categorical rule alone ("combine numeric rules and
   categorical rules to improve the precision and/or recall"). A (tree,
   categorical rule) pair is not searched when no conjunction could: F1 is at
   most ``2 p / (p + n_pos)`` with ``p`` outliers among the rule's rows.
5. **Selection**: near-duplicates (Jaccard ≥ 0.9 of covered rows) grouped, the
   rest ranked by F1, the top ``max_rules`` kept (:mod:`.select`).

Missing values: rows with a missing value in a tree's inputs (or a value that
is undefined, such as a division by zero) are not covered by that tree's rules,
and rows with a missing categorical value are not covered by that attribute's
predicates; they are never dropped from the label counts, so a missed outlier
there lowers recall.

Cost: one sort per tree plus linear passes per (tree, categorical rule);
depth 2 over 6 numeric and 3 categorical attributes of the 336,776 NYC flights
runs in seconds (``benchmarks/rules.py``, BENCHMARKS.md). Several label vectors
over one table (:meth:`RuleMiner.fit_each`, one per detector template in the
pipeline) share the label-independent part -- the trees, their values and
sorts, each categorical value's rows in sort order (:mod:`.space`) -- and give
exactly the rules of separate fits; ``n_jobs`` threads search trees at once.

The rules, like the labels and scores they explain, are internal (non-private)
and leave the warehouse only through a differentially private mechanism
(DESIGN.md, privacy rule 6). Exception messages name parameters and columns,
never data values or row counts.
"""
from __future__ import annotations

import math
import numbers
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .rules import Rule, categorical_rules, select_rules, sorted_rules
from .space import CategoricalCodes, TreeRows, condition_codes
from .trees import Tree, iter_trees
from .units import parse_unit
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["RuleMiner"]


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


class RuleMiner:
    """Mine readable, unit-respecting rules that explain labelled outliers.

    Parameters
    ----------
    max_depth : {1, 2, 3}, default 2
        Depth of the operation trees (1: single attributes; 2: one operation on
        two attributes; 3: a depth-2 tree combined with one more attribute --
        about 35 x the trees of depth 2 for 6 attributes, meant for small tables).
    max_rules : int ≥ 1, default 10
        Rules returned.
    min_support : int ≥ 1 or float in (0, 1), default 10
        Fewest training rows a rule must cover: a count, or a fraction of the rows.
    max_categories : int ≥ 1, default 5
        Values kept per categorical attribute as categorical rules (best F1
        first; one value set on top), each also tried in conjunctions.
    n_thresholds : int in [2, 1024], default 32
        Grid size of the two-sided range search (:mod:`.ranges`); one-sided
        thresholds are always exact.
    random_state : None, int or numpy.random.Generator, default None
        Validated and stored for API compatibility; the search is deterministic
        and draws no random numbers.
    n_jobs : None or int ≥ 1, default None
        Threads searching trees at once (None: 1). numpy's sorts, gathers and
        cumulative sums release the GIL; the rules are the same for any value.

    Attributes
    ----------
    rules_ : list of Rule
        At most ``max_rules`` rules, by decreasing F1.
    trees_ : list of Tree
        The generated (pruned) operation trees.
    n_candidates_ : int
        Candidate rules that entered selection (numeric, categorical and conjunctions).
    units_ : dict
        Numeric attribute -> parsed :class:`pint.Unit`.
    n_outliers_ : int
        Labelled outliers in the training table.

    Examples
    --------
    >>> miner = RuleMiner(max_rules=5).fit(flights, labels,
    ...     units={"distance": "mile", "air_time": "minute"}, categorical=["carrier"])  # doctest: +SKIP
    >>> print(miner.rules_[0].text)  # doctest: +SKIP
    distance / air_time < 240 mph ∧ carrier = 9E
    """

    def __init__(self, max_depth=2, max_rules=10, min_support=10, max_categories=5, n_thresholds=32,
                 random_state=None, n_jobs=None):
        self.max_depth = max_depth
        self.max_rules = max_rules
        self.min_support = min_support
        self.max_categories = max_categories
        self.n_thresholds = n_thresholds
        self.random_state = random_state
        self.n_jobs = n_jobs

    def get_params(self, deep: bool = True) -> dict:
        """The constructor's parameters (scikit-learn convention; ``deep`` is accepted and has no effect)."""
        return {"max_depth": self.max_depth, "max_rules": self.max_rules, "min_support": self.min_support,
                "max_categories": self.max_categories, "n_thresholds": self.n_thresholds,
                "random_state": self.random_state, "n_jobs": self.n_jobs}

    def _validate_params(self) -> None:
        if not _is_int(self.max_depth) or self.max_depth not in (1, 2, 3):
            raise ValueError(f"max_depth must be 1, 2 or 3, got {self.max_depth!r}")
        if not _is_int(self.max_rules) or self.max_rules < 1:
            raise ValueError(f"max_rules must be an integer ≥ 1, got {self.max_rules!r}")
        ms = self.min_support
        if _is_int(ms):
            if ms < 1:
                raise ValueError(f"min_support must be an integer ≥ 1 or a float in (0, 1), got {ms!r}")
        elif isinstance(ms, numbers.Real) and not isinstance(ms, (bool, np.bool_)):
            if not (0.0 < float(ms) < 1.0):
                raise ValueError(f"min_support must be an integer ≥ 1 or a float in (0, 1), got {ms!r}")
        else:
            raise ValueError(f"min_support must be an integer ≥ 1 or a float in (0, 1), got {ms!r}")
        if not _is_int(self.max_categories) or self.max_categories < 1:
            raise ValueError(f"max_categories must be an integer ≥ 1, got {self.max_categories!r}")
        if not _is_int(self.n_thresholds) or not 2 <= self.n_thresholds <= 1024:
            raise ValueError(f"n_thresholds must be an integer in [2, 1024], got {self.n_thresholds!r}")
        rs = self.random_state
        if not (rs is None or _is_int(rs) or isinstance(rs, np.random.Generator)):
            raise ValueError(f"random_state must be None, an integer ≥ 0 or a numpy Generator, got {rs!r}")
        if _is_int(rs) and rs < 0:
            raise ValueError(f"random_state must be None, an integer ≥ 0 or a numpy Generator, got {rs!r}")
        if not (self.n_jobs is None or (_is_int(self.n_jobs) and self.n_jobs >= 1)):
            raise ValueError(f"n_jobs must be None or an integer ≥ 1, got {self.n_jobs!r}")

    @staticmethod
    def _check_inputs(frame, units, categorical):
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
        if units is None:
            units = {}
        if not isinstance(units, dict):
            raise ValueError(f"units must be a dict mapping numeric attributes to units, got {type(units).__name__}")
        if categorical is None:
            categorical = []
        if isinstance(categorical, str):
            raise ValueError("categorical must be a list of column names, not a string")
        categorical = list(categorical)
        if not units and not categorical:
            raise ValueError("nothing to mine: give numeric attributes (units) and/or categorical attributes")
        dup = sorted({c for c in categorical if categorical.count(c) > 1})
        if dup:
            raise ValueError(f"categorical lists {dup} more than once")
        both = [c for c in categorical if c in units]
        if both:
            raise ValueError(f"attribute {both[0]!r} is categorical and cannot have a unit; "
                             "drop it from units or from categorical")
        missing = [c for c in list(units) + categorical if c not in frame.columns]
        if missing:
            raise ValueError(f"column(s) {missing} missing from the frame")
        parsed = {}
        for col, u in units.items():
            parsed[col] = parse_unit(u, col)  # UnitError (a ValueError) names the unit and the attribute
            s = frame[col]
            if not (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)):
                raise ValueError(f"numeric attribute {col!r} has non-numeric data (dtype {s.dtype}); "
                                 "convert it to numbers or list it as categorical")
        return parsed, categorical

    @staticmethod
    def _check_labels(labels, n_rows):
        y = np.asarray(labels)
        if y.ndim != 1 or y.shape[0] != n_rows:
            raise ValueError("labels must be one-dimensional with one entry per row of frame")
        if y.dtype != bool:
            if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
                raise ValueError(f"labels must be booleans or 0/1 numbers, got dtype {y.dtype}")
            if not np.isin(y, (0, 1)).all():
                raise ValueError("labels must be booleans or 0/1 numbers (found other values or NaN)")
            y = y.astype(bool)
        n_pos = int(y.sum())
        if n_pos == 0:
            raise ValueError("labels mark no outlier: there is nothing to explain")
        if n_pos == y.size:
            raise ValueError("labels mark every row as an outlier: there is nothing to separate")
        return y.copy(), n_pos

    def fit(self, frame: pd.DataFrame, labels, units: dict[str, str] | None = None,
            categorical: list[str] | None = None) -> "RuleMiner":
        """Mine the rules explaining ``labels`` on ``frame``.

        Parameters
        ----------
        frame : pandas.DataFrame
            The table (not modified).
        labels : array-like of bool (or 0/1), one per row
            True for the outliers to explain.
        units : dict, optional
            Numeric attribute -> unit text understood by :mod:`pint` (``"mile"``,
            ``"minute"``, ``"degC"``, ``"usd"``; ``"1"`` for dimensionless). Its keys
            are the numeric attributes; every numeric attribute used needs a unit.
        categorical : list of str, optional
            Categorical attributes (no unit).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            A bad parameter (named, with its allowed range); labels of the wrong
            length or type, or marking no row or every row; a missing column; an
            unknown unit (:class:`~dpcore.explain.units.UnitError`, naming unit and
            attribute); a unit on a categorical attribute; a numeric attribute with
            non-numeric data (naming the column).
        TypeError
            ``frame`` is not a DataFrame.
        """
        return self._fit_all(frame, [labels], units, categorical, [self])[0]

    def fit_each(self, frame: pd.DataFrame, labels_seq, units: dict[str, str] | None = None,
                 categorical: list[str] | None = None) -> list["RuleMiner"]:
        """One fitted miner per label vector of ``labels_seq``, all on ``frame``, sharing the label-independent work.

        Seed 004, slide "Outlier Rules Discovery - Search Space Generation": the
        operation trees, their values, their sorts and the rows of every
        categorical value in that order do not depend on the labels, so they
        are computed once per tree for every label vector
        (:mod:`~dpcore.explain.space`). Each returned miner, a new
        :class:`RuleMiner` with this one's parameters, has exactly the
        attributes ``RuleMiner(**self.get_params()).fit(frame, labels, units,
        categorical)`` would have (the same rules, texts, order and scores).
        This miner is not modified.

        Parameters
        ----------
        frame : pandas.DataFrame
        labels_seq : sequence of array-like of bool (or 0/1)
            One label vector per fit (for the pipeline: one per detector template).
        units, categorical
            As :meth:`fit`.

        Returns
        -------
        list of RuleMiner
            In the order of ``labels_seq``.

        Raises
        ------
        ValueError, TypeError
            As :meth:`fit`, for any of the label vectors.
        """
        labels_seq = list(labels_seq)
        if not labels_seq:
            raise ValueError("labels_seq must hold at least one label vector")
        miners = [type(self)(**self.get_params()) for _ in labels_seq]
        return self._fit_all(frame, labels_seq, units, categorical, miners)

    def _fit_all(self, frame, labels_seq, units, categorical, miners: list["RuleMiner"]) -> list["RuleMiner"]:
        """Validate, search every tree once for all label vectors, set each miner's attributes (module docstring)."""
        self._validate_params()
        units_, categorical = self._check_inputs(frame, units, categorical)
        fits = []
        masks: dict = {}  # (column, values) -> covered rows: label vectors often share categorical rules
        for labels in labels_seq:
            y, n_pos = self._check_labels(labels, len(frame))
            ms = self.min_support
            min_support = int(ms) if _is_int(ms) else max(1, math.ceil(float(ms) * y.size))
            cat = categorical_rules(frame, y, categorical, n_pos, min_support, self.max_categories)
            conds = []
            for r in cat:
                key = (r.column, r.values)
                if key not in masks:
                    masks[key] = r.covers(frame)
                conds.append(masks[key])
            fits.append(_LabelFit(y, n_pos, min_support, cat, conds))
        used = list(dict.fromkeys(r.column for f in fits for r in f.cat))
        codes = {c: CategoricalCodes.of(frame[c]) for c in used}
        conditions: dict[tuple, list[tuple[int, int]]] = {}  # distinct condition -> (label vector, rule) using it
        for k, f in enumerate(fits):
            for j, (r, mask) in enumerate(zip(f.cat, f.masks)):
                c = condition_codes(mask, codes[r.column])
                key = ("mask", k, j) if c is None else ("codes", r.column, c)
                conditions.setdefault(key, []).append((k, j))
        trees: list[Tree] = []
        per_tree: list[list[list[Rule]]] = []  # tree -> label vector -> candidates
        n_jobs = self.n_jobs or 1

        def search(tree: Tree, values: np.ndarray) -> list[list[Rule]]:
            return _search_tree(tree, TreeRows(values, codes), fits, conditions, self.n_thresholds)

        if n_jobs == 1:
            for tree, values in iter_trees(frame, units_, self.max_depth):
                trees.append(tree)
                per_tree.append(search(tree, values))
        else:
            with ThreadPoolExecutor(max_workers=n_jobs, thread_name_prefix="rules") as pool:
                pending: deque = deque()
                for tree, values in iter_trees(frame, units_, self.max_depth):
                    trees.append(tree)
                    pending.append(pool.submit(search, tree, values))
                    if len(pending) >= 2 * n_jobs:  # bounded: a few trees' sorted rows in memory at once
                        per_tree.append(pending.popleft().result())
                while pending:
                    per_tree.append(pending.popleft().result())
        for k, (f, miner) in enumerate(zip(fits, miners)):
            candidates: list[Rule] = list(f.cat)
            for found in per_tree:
                candidates.extend(found[k])
            miner.units_ = dict(units_)
            miner.n_outliers_ = f.n_pos
            miner.trees_ = list(trees)
            miner.n_candidates_ = len(candidates)
            miner.rules_ = select_rules(candidates, frame, self.max_rules)
        return miners

    def __repr__(self) -> str:
        return (f"RuleMiner(max_depth={self.max_depth!r}, max_rules={self.max_rules!r}, "
                f"min_support={self.min_support!r}, max_categories={self.max_categories!r}, "
                f"n_thresholds={self.n_thresholds!r}, random_state={self.random_state!r}, n_jobs={self.n_jobs!r})")


class _LabelFit:
    """One label vector's state in :meth:`RuleMiner._fit_all`: labels, categorical rules and their rows.

    ``bounds[j]`` is the highest F1 any conjunction with categorical rule ``j``
    can reach: with ``p`` labelled outliers among the rule's rows, a
    conjunction covering ``tp ≤ p`` outliers in ``support ≥ tp`` rows has
    ``F1 = 2 tp / (support + n_pos) ≤ 2 p / (p + n_pos)``, and the same holds
    for the floating-point values (the division is correctly rounded, hence
    monotone). A conjunction is kept only when its F1 beats a floor, so a
    (tree, rule) pair whose bound does not beat the floor cannot add a
    candidate and is not searched.
    """

    def __init__(self, y: np.ndarray, n_pos: int, min_support: int, cat: list[Rule], masks: list[np.ndarray]):
        self.y, self.n_pos, self.min_support, self.cat, self.masks = y, n_pos, min_support, cat, masks
        self.bounds = [2.0 * p / (p + n_pos) for p in (int(np.count_nonzero(m & y)) for m in masks)]


def _search_tree(tree: Tree, rows: TreeRows, fits: list[_LabelFit], conditions: dict,
                 n_thresholds: int) -> list[list[Rule]]:
    """One tree's candidates for every label vector: its rules on all rows, then its conjunctions that beat
    both parts (module docstring, steps 2 and 4), in the order of a separate fit per label vector.

    Each distinct condition's rows (``conditions``: key -> ``(label vector, categorical rule)`` pairs) are
    selected once and searched with every label vector using it, then dropped, so one tree holds one
    condition's rows at a time. Pairs that cannot beat their floor (:class:`_LabelFit`'s ``bounds``) are
    skipped, and a condition none of whose pairs can is not selected at all.
    """
    ys = [f.y[rows.order] for f in fits]  # one gather per tree; a condition's labels are a selection of these
    a = rows.all
    base = [sorted_rules(tree, a.vs, y, f.n_pos, f.min_support, n_thresholds, bnd=a.bnd) for f, y in zip(fits, ys)]
    best = [max((r.f1 for r in b), default=0.0) for b in base]
    conj: list[list[list[Rule]]] = [[[] for _ in f.cat] for f in fits]
    for key, users in conditions.items():
        floors = {(k, j): max(best[k], fits[k].cat[j].f1) for k, j in users}
        live = [(k, j) for k, j in users if fits[k].bounds[j] > floors[k, j]]
        if not live:
            continue
        seg = rows.masked(fits[key[1]].masks[key[2]]) if key[0] == "mask" else rows.segment(key[1], key[2])
        for k, j in live:
            f, cond, floor = fits[k], fits[k].cat[j], floors[k, j]
            conj[k][j] = [r for r in sorted_rules(tree, seg.vs, ys[k][seg.sel], f.n_pos, f.min_support,
                                                  n_thresholds, cond, seg.bnd) if r.f1 > floor]
    return [b + [r for found in c for r in found] for b, c in zip(base, conj)]
