"""Operation trees: the numeric search space of the outlier rules.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": "operation
trees are created by combining numeric features based on [a] pre-defined type
system"; e.g. ``D / (dtime - ptime)`` (a speed) or ``|Time - (dtime - ptime)|``
(a time). Every tree is later turned into numeric rules by searching ranges of
its values (:mod:`.ranges`).

Type system (units from :mod:`.units`)
--------------------------------------
* A **leaf** is a numeric attribute with its unit.
* ``a + b``, ``a - b`` and ``|a - b|`` only when ``a`` and ``b`` have the **same
  dimension**; the values are converted to the finer of the two units first
  (minutes and seconds are summed in seconds). Offset scales (``degC``, ``degF``)
  can be subtracted (giving an interval, ``Δ°C``) but not added, and an offset
  temperature is never subtracted from an interval or an absolute (kelvin) one.
* ``a * b`` and ``a / b`` for any two multiplicative units; the result has the
  derived dimension and is shown in a readable unit
  (:func:`~dpcore.explain.units.display_unit`: miles per minute as ``mph``). When both
  sides have one dimension (minutes / seconds) ``b`` is first converted to
  ``a``'s unit, so the ratio is a pure number.

Depth: 1 = single attributes; 2 = one operation on two different leaves; 3 =
one operation between a depth-2 tree and a leaf (``|Time - (dtime - ptime)|``).
Depth 3 grows as (number of depth-2 trees) x (leaves) x (operations), i.e.
about 35 x as many trees as depth 2 for 6 attributes: fine for thousands of
rows, slow for hundreds of thousands (the miner's cost is linear in the number
of trees).

Pruning (both while generating)
-------------------------------
* **Equivalence**: each tree has a canonical :attr:`Tree.key` -- sums and
  differences flattened into signed terms, products and quotients into terms
  with exponents, commutative operands sorted, cancelled terms removed, and unit
  conversion factors ignored. A tree whose key was already generated is skipped:
  ``b + a`` after ``a + b``, ``(a - b) + b`` (is ``a``), ``|b - a|`` after ``|a - b|``.
  ``a - b`` and ``b - a`` (and any overall sign) share a key, because the range
  search tries both directions (``a - b < t`` is ``b - a > -t``), so only the
  first orientation (column order of ``units``) is kept.
  **Division is kept both ways**: ``a / b`` and ``b / a`` are different trees,
  because they are one rule only when both sides are strictly positive, and
  because the readable one differs (a speed in mph versus a pace in min/mi);
  their rules cover the same rows when they agree and the rule selection then
  keeps one of them (:func:`~dpcore.explain.select.select_rules`).
* **Constant or nearly constant values**: a tree whose finite values take fewer
  than two distinct values, or whose standard deviation is at most
  ``constant_tol`` (default ``1e-9``) times its mean absolute value (constant up
  to floating-point rounding, e.g. a distance in miles divided by the same
  distance in km), is skipped and never used as an operand. The tolerance is
  relative to the magnitude, not a coefficient of variation of a few percent:
  interval-scaled attributes such as timestamps have tiny relative spread but
  are not constant.

Missing values and division by zero give NaN or ±inf; such rows are simply not
covered by any rule of the tree (:mod:`.ranges`). Nothing here warns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pint

from .units import (
    conversion_factor,
    convert,
    difference_unit,
    display_unit,
    finer_unit,
    is_offset,
    parse_unit,
    same_dimension,
    unit_text,
)
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["Tree", "OPS", "leaf", "combine", "iter_trees", "generate_trees", "is_constant", "column_values",
           "CONSTANT_TOL"]

#: Operations between two subtrees: ``"|-|"`` is the absolute difference.
OPS = ("+", "-", "|-|", "*", "/")
_COMMUTATIVE = {"+", "|-|", "*"}
CONSTANT_TOL = 1e-9


@dataclass(frozen=True)
class Tree:
    """An operation tree over numeric attributes, with the unit of its values.

    Build trees with :func:`leaf` and :func:`combine` (which enforce the type
    system) or :func:`generate_trees`; do not call the constructor directly.

    Attributes
    ----------
    op : str
        ``"leaf"`` or one of :data:`OPS`.
    children : tuple of Tree
        The operands (empty for a leaf).
    column : str or None
        The attribute of a leaf.
    unit : pint.Unit
        The unit of :meth:`values` (``mph`` for miles / minutes).
    text : str
        Readable formula, e.g. ``distance / air_time`` or ``|t1 - t2|``.
    key : tuple
        Canonical form for equivalence pruning (module docstring).
    depth : int
        1 for a leaf.
    """

    op: str
    children: tuple["Tree", ...]
    column: str | None
    unit: pint.Unit
    text: str = field(compare=False)
    key: tuple = field(compare=False, repr=False)
    depth: int = field(compare=False)
    _common: pint.Unit | None = field(default=None, compare=False, repr=False)
    _convert_b: float | None = field(default=None, compare=False, repr=False)
    _factor: float = field(default=1.0, compare=False, repr=False)

    @property
    def unit_text(self) -> str:
        """The unit's short symbol (``mph``, ``s``, ``°C``; ``""`` when dimensionless)."""
        return unit_text(self.unit)

    @property
    def columns(self) -> tuple[str, ...]:
        """The attributes the tree reads, in first-use order without repeats."""
        if self.op == "leaf":
            return (self.column,)
        seen: dict[str, None] = {}
        for c in self.children:
            seen.update(dict.fromkeys(c.columns))
        return tuple(seen)

    @property
    def leaf_units(self) -> tuple[pint.Unit, ...]:
        """Units of the leaves (with repeats)."""
        if self.op == "leaf":
            return (self.unit,)
        return tuple(u for c in self.children for u in c.leaf_units)

    def values(self, frame: pd.DataFrame) -> np.ndarray:
        """The tree's values on every row of ``frame`` in :attr:`unit` (float array; NaN where undefined).

        Vectorised; ``frame`` is not modified. Raises ``ValueError`` naming the
        column when a leaf's column is missing or not numeric.
        """
        with np.errstate(all="ignore"):
            return self._eval(frame)

    def _eval(self, frame: pd.DataFrame) -> np.ndarray:
        if self.op == "leaf":
            return column_values(frame, self.column, f"tree {self.text!r}")
        a, b = self.children
        return self.apply(a._eval(frame), b._eval(frame))

    def apply(self, va: np.ndarray, vb: np.ndarray) -> np.ndarray:
        """This node's operation on its children's values (``va`` in ``children[0].unit``, ``vb`` likewise)."""
        a, b = self.children
        with np.errstate(all="ignore"):
            if self.op in ("+", "-", "|-|"):
                va = convert(va, a.unit, self._common) if a.unit != self._common else va
                vb = convert(vb, b.unit, self._common) if b.unit != self._common else vb
                if self.op == "+":
                    return va + vb
                d = va - vb
                return np.abs(d) if self.op == "|-|" else d
            if self._convert_b is not None:
                vb = vb * self._convert_b
            out = va * vb if self.op == "*" else va / vb
            return out * self._factor if self._factor != 1.0 else out

    def __str__(self) -> str:
        u = self.unit_text
        return f"{self.text} [{u}]" if u else self.text


def column_values(frame: pd.DataFrame, column: str, where: str = "") -> np.ndarray:
    """Column ``column`` of ``frame`` as a new float array (missing -> NaN), with errors naming the column."""
    ctx = f" (used by {where})" if where else ""
    if column not in frame.columns:
        raise ValueError(f"column {column!r}{ctx} is missing from the frame")
    s = frame[column]
    if isinstance(s, pd.DataFrame):
        raise ValueError(f"column {column!r}{ctx} appears more than once in the frame")
    if not (pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype)):
        raise ValueError(f"numeric attribute {column!r}{ctx} has non-numeric data (dtype {s.dtype}); "
                         "convert it to numbers or list it as categorical")
    return s.to_numpy(dtype=float, na_value=np.nan)


def leaf(column: str, unit: str | pint.Unit) -> Tree:
    """A leaf: attribute ``column`` measured in ``unit`` (a string is parsed, :class:`~.units.UnitError` if unknown)."""
    u = parse_unit(unit, column) if isinstance(unit, str) else unit
    return Tree("leaf", (), column, u, text=column, key=("leaf", column), depth=1)


def _paren(t: Tree) -> str:
    return t.text if t.op in ("leaf", "|-|") else f"({t.text})"


def _skey(k) -> str:
    return repr(k)


def _signed_terms(t: Tree, plus: str, minus: str) -> dict:
    """Leaf keys -> net exponent (``*``/``/``) or coefficient (``+``/``-``) of a tree of ``plus``/``minus`` nodes."""
    if t.op in (plus, minus):
        a, b = (_signed_terms(c, plus, minus) for c in t.children)
        sign = 1 if t.op == plus else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v != 0}
    return {t.key: 1}


def _lin_terms(t: Tree) -> dict:
    return _signed_terms(t, "+", "-")


def _mul_terms(t: Tree) -> dict:
    return _signed_terms(t, "*", "/")


def _lin_key(terms: dict) -> tuple:
    if not terms:
        return ("zero",)
    items = sorted(terms.items(), key=lambda kv: _skey(kv[0]))
    if items[0][1] < 0:  # a - b and b - a: one rule up to the threshold's direction
        items = [(k, -v) for k, v in items]
    if len(items) == 1 and items[0][1] == 1:
        return items[0][0]
    return ("lin", tuple(items))


def _mul_key(terms: dict) -> tuple:
    if not terms:
        return ("one",)
    items = sorted(terms.items(), key=lambda kv: _skey(kv[0]))
    if len(items) == 1 and items[0][1] == 1:
        return items[0][0]
    return ("mul", tuple(items))


def _key(op: str, a: Tree, b: Tree) -> tuple:
    probe = Tree(op, (a, b), None, a.unit, text="", key=(), depth=0)
    if op in ("+", "-"):
        return _lin_key(_lin_terms(probe))
    if op == "|-|":
        inner = _lin_key(_lin_terms(Tree("-", (a, b), None, a.unit, text="", key=(), depth=0)))
        return ("abs", inner)
    return _mul_key(_mul_terms(probe))


def combine(op: str, a: Tree, b: Tree) -> Tree | None:
    """The tree ``a op b``, or ``None`` when the type system forbids it (module docstring).

    ``op`` is one of :data:`OPS`; this is the only place where dimensions are
    checked, so every tree built from :func:`leaf` and :func:`combine` is
    dimensionally valid.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    ua, ub = a.unit, b.unit
    off_a, off_b = is_offset(ua), is_offset(ub)
    depth = 1 + max(a.depth, b.depth)
    if op in ("+", "-", "|-|"):
        if not same_dimension(ua, ub):
            return None
        if op == "+" and (off_a or off_b):
            return None
        if off_a != off_b:
            return None
        common = finer_unit(ua, ub)
        unit = common if op == "+" else difference_unit(common)
        text = f"|{a.text} - {_paren(b)}|" if op == "|-|" else f"{_paren(a)} {op} {_paren(b)}"
        return Tree(op, (a, b), None, unit, text=text, key=_key(op, a, b), depth=depth, _common=common)
    if off_a or off_b:
        return None
    convert_b = None
    ub_eff = ub
    if same_dimension(ua, ub) and ua != ub:
        convert_b = conversion_factor(ub, ua)
        ub_eff = ua
    raw = ua * ub_eff if op == "*" else ua / ub_eff
    shown = display_unit(raw, a.leaf_units + b.leaf_units)
    factor = conversion_factor(raw, shown)
    text = f"{_paren(a)} {op} {_paren(b)}"
    return Tree(op, (a, b), None, shown, text=text, key=_key(op, a, b), depth=depth,
                _convert_b=convert_b, _factor=factor)


def is_constant(values: np.ndarray, tol: float = CONSTANT_TOL) -> bool:
    """Whether the finite ``values`` are constant or nearly so (fewer than 2 distinct, or sd ≤ tol * mean |v|)."""
    v = values[np.isfinite(values)]
    if v.size < 2:
        return True
    lo, hi = v.min(), v.max()
    if lo == hi:
        return True
    return bool(v.std() <= tol * np.abs(v).mean())


def iter_trees(frame: pd.DataFrame, units: dict, max_depth: int = 2, constant_tol: float = CONSTANT_TOL):
    """Generate the pruned trees of depth ≤ ``max_depth`` with their values: yields ``(tree, values)``.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table (not modified).
    units : dict
        Numeric attribute -> unit (string or :class:`pint.Unit`); its order
        fixes the order of operands in the generated trees.
    max_depth : {1, 2, 3}
    constant_tol : float
        Relative tolerance of the nearly-constant pruning (module docstring).

    Notes
    -----
    Order: leaves, then depth 2 (pairs in column order; per pair ``+``, ``-``,
    ``|-|``, ``*``, ``a / b``, ``b / a``), then depth 3 (per depth-2 tree and
    leaf: ``leaf op tree`` first, then ``tree op leaf``). Each tree's values are
    computed once, from its children's; at depth 3 the depth-2 values are kept
    in memory while generating.
    """
    if max_depth not in (1, 2, 3):
        raise ValueError(f"max_depth must be 1, 2 or 3, got {max_depth!r}")
    seen: set = set()
    leaves: list[tuple[Tree, np.ndarray]] = []
    for col, u in units.items():
        t = leaf(col, u)
        v = column_values(frame, col, f"tree {col!r}")
        if t.key in seen or is_constant(v, constant_tol):
            continue
        seen.add(t.key)
        leaves.append((t, v))
        yield t, v
    if max_depth < 2:
        return
    level2: list[tuple[Tree, np.ndarray]] = []

    def emit(t: Tree | None, va, vb):
        if t is None or t.key in seen:
            return None
        seen.add(t.key)
        v = t.apply(va, vb)
        if is_constant(v, constant_tol):
            return None
        return v

    for i, (a, va) in enumerate(leaves):
        for b, vb in leaves[i + 1:]:
            for op, x, y, vx, vy in (("+", a, b, va, vb), ("-", a, b, va, vb), ("|-|", a, b, va, vb),
                                      ("*", a, b, va, vb), ("/", a, b, va, vb), ("/", b, a, vb, va)):
                t = combine(op, x, y)
                v = emit(t, vx, vy)
                if v is not None:
                    if max_depth >= 3:
                        level2.append((t, v))
                    yield t, v
    if max_depth < 3:
        return
    for t2, v2 in level2:
        for lf, vl in leaves:
            for op in OPS:
                for x, y, vx, vy in ((lf, t2, vl, v2), (t2, lf, v2, vl)):
                    t = combine(op, x, y)
                    v = emit(t, vx, vy)
                    if v is not None:
                        yield t, v


def generate_trees(frame: pd.DataFrame, units: dict, max_depth: int = 2,
                   constant_tol: float = CONSTANT_TOL) -> list[Tree]:
    """The pruned operation trees of depth ≤ ``max_depth`` (see :func:`iter_trees`)."""
    return [t for t, _ in iter_trees(frame, units, max_depth, constant_tol)]
