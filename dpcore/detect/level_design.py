r"""The standardised design in factored form: dense columns and groups of exclusive 0/1 levels (issue 29).

Seed 004, slide "Parameters Learning": each M-step solves weighted normal
equations :math:`Z^TWZ\,\beta = Z^TWy` built from sums over rows. A
categorical context enters :math:`Z` as one-hot level columns
(:func:`dpcore.detect.design.design_matrix`), which stay 0/1 after the
detector's standardisation, and the levels of one attribute are mutually
exclusive: a row has a 1 in at most one of them. For such a group with codes
:math:`c_i\in\{0, 1, \dots, m\}` (0: the reference level, no column) every
block of the normal equations that touches it is a per-level sum:

* :math:`\sum_i w_i z_{ia}z_{ib} = [a=b]\sum_{c_i=a} w_i` (a diagonal block),
* with a dense column :math:`k` (the intercept included): :math:`\sum_{c_i=a} w_i z_{ik}`,
* with the levels of another group :math:`h`: :math:`\sum_{c_i=a,\,c'_i=b} w_i`,
* the right-hand side: :math:`\sum_{c_i=a} w_i y_i`,

each one ``np.bincount`` over the rows instead of a dense :math:`n\,q^2`
product, and :math:`Z\beta` is :math:`D\beta_D` plus a table lookup per group.
The chunk cache stores ``D`` and the codes (a byte or two per row and group)
instead of the dense one-hot columns.

The values are the same sums as the dense product, added in another order:
they agree to round-off (tests/test_level_design.py compares them with the
dense formula). Which columns form a group is found in the detector's scan
pass over all rows (:func:`level_layout`): contiguous 0/1 columns none of
whose rows holds two ones; this is exact for the design's one-hot blocks,
and columns that do not qualify stay dense, so the result never depends on
the guess. Internal: nothing here logs or raises with data values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FactoredDesign", "LevelLayout", "encoded_scan", "level_layout", "previous_one"]


def previous_one(X: np.ndarray) -> np.ndarray:
    """For each column ``j``: the largest ``k < j`` with ``X[i, k] == 1`` on a row ``i`` where ``X[i, j] == 1``.

    ``-1`` when no row with a 1 in column ``j`` has a 1 before it. Maxima over
    chunks combine with ``np.maximum``. Columns ``s..j`` hold at most one 1 per
    row exactly when ``previous_one[k] < s`` for every ``k`` in ``s+1..j``.
    """
    n, d = X.shape
    last = np.full(n, -1, dtype=np.int64)
    prev = np.full(d, -1, dtype=np.int64)
    for j in range(d):
        ones = X[:, j] == 1.0
        if ones.any():
            prev[j] = int(last[ones].max())
            last[ones] = j
    return prev


def encoded_scan(cols) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The detector's scan of a chunk's design from its encoded columns, without the dense design.

    For :class:`~dpcore.detect.design.DesignColumns` ``cols`` whose dense
    design is ``X = cols.toarray()``: ``X.min(axis=0)``, ``X.max(axis=0)``,
    ``np.all((X == 0) | (X == 1), axis=0)`` and :func:`previous_one` ``(X)``,
    the same values. A categorical attribute's indicator columns come from
    one ``np.bincount`` of its codes (a column's minimum is 1 only when every
    row has its level) and, for :func:`previous_one`, a second one over the
    pairs (code, last 1 before the attribute): the indicators of one
    attribute are exclusive, so a level's rows hold no 1 in the attribute's
    earlier columns (issue 29: a pass per attribute instead of per column).

    Raises
    ------
    ValueError
        A numeric column has NaN or infinite values (as the dense scan's check).
    """
    n, d = cols.n, cols.n_columns
    xmin, xmax = np.empty(d), np.empty(d)
    binary = np.ones(d, dtype=bool)
    prev = np.full(d, -1, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    at = 0
    for w, col in zip(cols.widths, cols.columns):
        if w is None:
            v = np.asarray(col, dtype=np.float64)
            if not np.isfinite(v).all():
                raise ValueError("X has NaN or infinite values; every value must be finite")
            if n:
                xmin[at], xmax[at] = v.min(), v.max()
            binary[at] = bool(np.all((v == 0.0) | (v == 1.0)))
            ones = v == 1.0
            if ones.any():
                prev[at] = int(last[ones].max())
                last[ones] = at
            at += 1
            continue
        if w == 0:
            continue
        c = np.asarray(col).astype(np.intp)
        counts = np.bincount(c, minlength=w + 1)[1:]
        xmin[at:at + w] = (counts == n).astype(np.float64)
        xmax[at:at + w] = (counts > 0).astype(np.float64)
        m = at + 1  # last + 1 takes the values 0..at
        pairs = np.bincount(c * m + (last + 1), minlength=(w + 1) * m).reshape(w + 1, m)[1:] > 0
        top = m - 1 - np.argmax(pairs[:, ::-1], axis=1)  # the largest last + 1 seen with each level
        prev[at:at + w] = np.where(pairs.any(axis=1), top - 1, -1)
        on = c > 0
        last[on] = at + c[on] - 1
        at += w
    return xmin, xmax, binary, prev


@dataclass(frozen=True)
class LevelLayout:
    """Where the columns of a standardised design ``Z`` (intercept first) go in its factored form.

    Attributes
    ----------
    q : int
        Columns of ``Z``, the intercept (column 0) included.
    dense : tuple of int
        Positions in ``Z`` of the columns kept dense, the intercept excluded.
    groups : tuple of tuple of int
        Positions in ``Z`` of each group's levels, in code order ``1..m``.
    """

    q: int
    dense: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]

    def factor(self, Z: np.ndarray) -> "FactoredDesign":
        """``Z`` (whose group columns are 0/1, at most one 1 per row and group) in factored form."""
        D = np.ascontiguousarray(Z[:, list(self.dense)])
        codes = np.zeros((Z.shape[0], len(self.groups)), dtype=_code_dtype(self.groups))
        for g, cols in enumerate(self.groups):
            codes[:, g] = Z[:, list(cols)] @ np.arange(1, len(cols) + 1, dtype=np.float64)
        return FactoredDesign(self, D, codes)

    def standardise(self, X: np.ndarray, active: np.ndarray, x_loc: np.ndarray, x_scale: np.ndarray) -> "FactoredDesign":
        """``factor`` of the standardised design of raw rows, built from ``X`` without the dense ``Z``.

        The same arrays, bit for bit, as ``self.factor(_design_of(X, active,
        x_loc, x_scale))`` (:func:`dpcore.detect.em_passes._design_of`): each
        dense column is ``(x - loc) / scale``, the same two operations per
        value, and a group's columns are indicators the standardisation keeps
        as they are (``loc`` 0, ``scale`` 1; checked), so their codes come from
        ``X``'s columns directly. Skips building and scanning the dense
        ``(n, q)`` design of every chunk in the first pass (issue 29).

        Parameters
        ----------
        X : ndarray of shape (n, d)
            Raw rows (the detector's ``X``).
        active : ndarray of bool, shape (d,)
        x_loc, x_scale : ndarray, one per active column
            As :func:`~dpcore.detect.em_passes._design_of`.

        Raises
        ------
        ValueError
            A group column is centred or scaled (then call ``factor`` on the dense design).
        """
        src = np.flatnonzero(active)  # X's column of Z's column z (z >= 1) is src[z - 1]
        dn = np.asarray(self.dense, dtype=np.intp) - 1
        D = np.empty((X.shape[0], dn.size))
        np.subtract(X[:, src[dn]], x_loc[dn], out=D)
        D /= x_scale[dn]
        codes = np.zeros((X.shape[0], len(self.groups)), dtype=_code_dtype(self.groups))
        for g, cols in enumerate(self.groups):
            at = np.asarray(cols, dtype=np.intp) - 1
            if np.any(x_loc[at] != 0.0) or np.any(x_scale[at] != 1.0):
                raise ValueError("a level group's column is centred or scaled: factor the dense design instead")
            codes[:, g] = X[:, src[at]] @ np.arange(1, len(cols) + 1, dtype=np.float64)
        return FactoredDesign(self, D, codes)

    def holds_for(self, X: np.ndarray, active: np.ndarray) -> bool:
        """Whether every group's columns of ``X`` (raw rows; ``active`` as in :meth:`standardise`) are 0/1 with at most one 1 per row.

        True for the rows the layout was found on (the scan saw them); new
        rows may break it, and then only the dense design is right.
        """
        src = np.flatnonzero(active)
        for cols in self.groups:
            G = X[:, src[np.asarray(cols, dtype=np.intp) - 1]]
            if not (np.all((G == 0.0) | (G == 1.0)) and np.all(G.sum(axis=1) <= 1.0)):
                return False
        return True

    def key(self) -> bytes:
        """Bytes naming the layout (for a cache key)."""
        return repr((self.q, self.dense, self.groups)).encode()


def _code_dtype(groups) -> type:
    m = max((len(g) for g in groups), default=0)
    return np.uint8 if m < 2**8 else np.uint16 if m < 2**16 else np.int64


def level_layout(active: np.ndarray, binary: np.ndarray, prev: np.ndarray) -> LevelLayout | None:
    """The factored layout of the design of the active columns of ``X``, or None when it has no 0/1 column.

    Parameters
    ----------
    active : ndarray of bool, shape (d,)
        Columns of ``X`` kept in ``Z`` (non-constant), in order after the intercept.
    binary : ndarray of bool, shape (d,)
        Columns of ``X`` whose every value is 0 or 1 (over all rows).
    prev : ndarray of int, shape (d,)
        :func:`previous_one` over all rows (the maximum over chunks).

    Returns
    -------
    LevelLayout or None
        Groups are maximal runs of active 0/1 columns (an active non-0/1 column
        ends a run) in which no row holds two ones; every other active column
        stays dense. None: no 0/1 column, the dense design as it is.
    """
    dense: list[int] = []
    groups: list[list[int]] = []
    start = None  # X position of the open group's first column
    z = 0
    for j in range(active.shape[0]):
        if not active[j]:
            continue
        z += 1
        if not binary[j]:
            dense.append(z)
            start = None
        elif start is not None and prev[j] < start:
            groups[-1].append(z)
        else:
            groups.append([z])
            start = j
    if not groups:
        return None
    return LevelLayout(z + 1, tuple(dense), tuple(tuple(g) for g in groups))


class FactoredDesign:
    """A standardised design ``Z`` as dense columns ``D`` and level codes; behaves like ``Z`` where the EM uses it.

    ``Z @ beta``, ``weighted_normal_equations(w, y)`` (``Z^T W Z`` and
    ``Z^T W y``), ``shape``, row slicing and :meth:`toarray`.

    Parameters
    ----------
    layout : LevelLayout
    D : ndarray of shape (n, len(layout.dense))
    codes : ndarray of unsigned int, shape (n, len(layout.groups))
        0: none of the group's levels; ``a``: the group's ``a``-th level.
    """

    def __init__(self, layout: LevelLayout, D: np.ndarray, codes: np.ndarray) -> None:
        self.layout, self.D, self.codes = layout, D, codes

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.D.shape[0]), self.layout.q)

    def __len__(self) -> int:
        return int(self.D.shape[0])

    def __getitem__(self, rows) -> "FactoredDesign":
        return FactoredDesign(self.layout, self.D[rows], self.codes[rows])

    def _code(self, g: int) -> np.ndarray:
        return self.codes[:, g].astype(np.intp)

    def __matmul__(self, beta: np.ndarray) -> np.ndarray:
        lay = self.layout
        if len(lay.dense) == 1:  # one product per row, as BLAS's one-term dot gives it, without a BLAS call
            out = np.multiply(self.D[:, 0], beta[lay.dense[0]])
        else:
            out = self.D @ beta[list(lay.dense)] if lay.dense else np.zeros(len(self))
        out += beta[0]
        for g, cols in enumerate(lay.groups):
            out += np.r_[0.0, beta[list(cols)]][self.codes[:, g]]
        return out

    def toarray(self) -> np.ndarray:
        """The dense ``Z``."""
        lay = self.layout
        Z = np.zeros(self.shape)
        Z[:, 0] = 1.0
        Z[:, list(lay.dense)] = self.D
        rows = np.arange(len(self))
        for g, cols in enumerate(lay.groups):
            c = self._code(g)
            on = c > 0
            Z[rows[on], np.asarray(cols)[c[on] - 1]] = 1.0
        return Z

    def weighted_normal_equations(self, w: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(Z^T W Z, Z^T W y)`` from per-level sums (module docstring); ``W = diag(w)``."""
        lay = self.layout
        q = lay.q
        G = np.zeros((q, q))
        rhs = np.zeros(q)
        dn = list(lay.dense)
        wy = w * y
        G[0, 0] = w.sum()
        rhs[0] = wy.sum()
        Dw = self.D * w[:, None]
        if dn:
            G[0, dn] = G[dn, 0] = Dw.sum(axis=0)
            G[np.ix_(dn, dn)] = Dw.T @ self.D
            rhs[dn] = self.D.T @ wy
        codes = [self._code(g) for g in range(len(lay.groups))]
        for g, cols in enumerate(lay.groups):
            c, m, lv = codes[g], len(cols), list(cols)
            s = np.bincount(c, w, minlength=m + 1)[1:]
            G[lv, lv] = s  # the group's block is diagonal: one level per row
            G[0, lv] = G[lv, 0] = s
            rhs[lv] = np.bincount(c, wy, minlength=m + 1)[1:]
            for k, col in enumerate(dn):
                G[col, lv] = G[lv, col] = np.bincount(c, Dw[:, k], minlength=m + 1)[1:]
            for h in range(g + 1, len(lay.groups)):
                mh, lh = len(lay.groups[h]), list(lay.groups[h])
                joint = np.bincount(c * (mh + 1) + codes[h], w, minlength=(m + 1) * (mh + 1))
                block = joint.reshape(m + 1, mh + 1)[1:, 1:]
                G[np.ix_(lv, lh)] = block
                G[np.ix_(lh, lv)] = block.T
        return G, rhs
