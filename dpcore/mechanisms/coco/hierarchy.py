"""Public hierarchy for count-of-counts publishing (Kuo et al., PVLDB 2018).

Slide "Scenario": a hierarchy Γ on location is associated with each group;
every group belongs to exactly one leaf, so every node τ of Γ owns the groups
of the leaves below it and its number of groups ``τ.G`` is public (slide
"Problem Definition": "τ.Ĥ matches publicly known total number of groups G").

The hierarchy is **public metadata** (it comes from the release spec, never
from the private items).  Nothing in this module touches private data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from dpcore.storage.quoting import needs_quotes, quote, read_quoted
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["ROOT", "Hierarchy", "node_segment"]

#: Node id of the root (level 0).
ROOT = "*"
#: The separator of node-id segments: a value holding it is quoted.
_NODE_SPECIALS = "/"


def node_segment(column: str, value: object) -> str:
    """One segment ``column=value`` of a node id, the value quoted when it needs it.

    Parameters
    ----------
    column : str
        The level column.
    value : object
        The node's value in that column (converted with ``str``, never
        stripped or otherwise changed).

    Returns
    -------
    str
        ``column=text`` for a plain text; ``column="..."`` (a JSON string
        literal, :func:`dpcore.storage.quoting.quote`) when the text holds ``/``,
        starts with ``"``, has leading or trailing whitespace or a character
        that is not printable.
    """
    text = str(value)
    return f"{column}={quote(text) if needs_quotes(text, _NODE_SPECIALS) else text}"


@dataclass(frozen=True)
class Hierarchy:
    """A rooted tree of named nodes whose leaves all have the same depth.

    Parameters
    ----------
    edges : tuple of (parent, child) str pairs
        Every non-root node appears exactly once as a child.  The root is
        ``root`` (default ``"*"``).  Use :meth:`from_leaf_paths` (normal use)
        or :meth:`from_edges`.
    root : str
        Id of the root node (level 0).

    Notes
    -----
    Construction validates the structure (:meth:`validate`), so an invalid
    hierarchy cannot exist: a cycle, a node with two parents, no nodes below
    the root, an empty node id, or leaves at different depths raise a
    ``ValueError`` that names the offending node.

    Node ids from :meth:`from_leaf_paths` are ``"*"`` for the root and
    ``"col1=v1"``, ``"col1=v1/col2=v2"``, ... for deeper levels. A value is
    written as its text, or as a JSON string literal when it holds ``/``,
    starts with ``"``, has leading or trailing whitespace or a character that
    is not printable (:func:`node_segment`): ``region="North/East"/city=York``.
    So the ids of different paths never collide, whatever the values
    (:meth:`split_node_id` reads one back), and plain values give the same
    ids as always.
    """

    edges: tuple[tuple[str, str], ...]
    root: str = ROOT
    _levels: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)
    _parent: dict = field(init=False, repr=False, compare=False)
    _children: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", tuple((str(p), str(c)) for p, c in self.edges))
        self.validate()

    # ------------------------------------------------------------------ build
    @classmethod
    def from_edges(cls, edges: Iterable[tuple[str, str]], root: str = ROOT) -> "Hierarchy":
        """Build from ``(parent, child)`` pairs (validated).

        Parameters
        ----------
        edges : iterable of (str, str)
            Parent/child pairs.
        root : str
            Root id.

        Returns
        -------
        Hierarchy
        """
        return cls(edges=tuple((p, c) for p, c in edges), root=root)

    @classmethod
    def from_leaf_paths(cls, paths: pd.DataFrame, level_columns: list[str]) -> "Hierarchy":
        """Build from one row per leaf giving its value in every level column.

        Parameters
        ----------
        paths : pandas.DataFrame
            One row per leaf (exact duplicate rows are tolerated and merged),
            e.g. columns ``carrier, origin``.  Public metadata.
        level_columns : list of str
            Columns from the top level to the leaf level, e.g.
            ``["carrier", "origin"]`` gives root -> carrier -> carrier x origin.

        Returns
        -------
        Hierarchy
            With ``len(level_columns) + 1`` levels.

        Raises
        ------
        ValueError
            No level columns, a missing column, no rows, or a missing/empty
            value (naming the column and row).
        """
        if not level_columns:
            raise ValueError("level_columns must name at least one column (the level below the root)")
        missing = [c for c in level_columns if c not in paths.columns]
        if missing:
            raise ValueError(f"level_columns {missing} are not columns of the hierarchy table "
                             f"(columns: {list(paths.columns)})")
        if len(paths) == 0:
            raise ValueError("hierarchy table has no rows: the hierarchy needs at least one leaf")
        ids = cls.node_ids(paths, level_columns)
        edges: dict[str, str] = {}
        parent_col = pd.Series(ROOT, index=paths.index)
        for col in level_columns:
            child_col = ids[col]
            pairs = pd.DataFrame({"p": parent_col.to_numpy(), "c": child_col.to_numpy()}).drop_duplicates()
            for p, c in zip(pairs["p"], pairs["c"]):
                edges.setdefault(c, p)
            parent_col = child_col
        return cls(edges=tuple((p, c) for c, p in edges.items()), root=ROOT)

    @classmethod
    def from_leaf_rows(cls, rows: Iterable[tuple[str, ...]], level_columns: list[str]) -> "Hierarchy":
        """:meth:`from_leaf_paths` for plain rows of text (no pandas: the cost plan builds it; issue 32).

        Parameters
        ----------
        rows : iterable of tuple of str
            One tuple per leaf (duplicates merged), its value in every level column, top to bottom.
        level_columns : list of str
            The level columns the values belong to.

        Returns
        -------
        Hierarchy
            The same hierarchy (same edges, in the same order) as :meth:`from_leaf_paths` of a table of
            these rows.

        Raises
        ------
        ValueError
            No level columns, no rows, a row of another length, or an empty value (naming the column and
            the 0-based row).
        """
        if not level_columns:
            raise ValueError("level_columns must name at least one column (the level below the root)")
        ids = cls.row_node_ids(rows, level_columns)
        if not ids:
            raise ValueError("hierarchy table has no rows: the hierarchy needs at least one leaf")
        edges: dict[str, str] = {}
        for i in range(len(level_columns)):
            for row in ids:
                edges.setdefault(row[i], row[i - 1] if i else ROOT)
        return cls(edges=tuple((p, c) for c, p in edges.items()), root=ROOT)

    @staticmethod
    def row_node_ids(rows: Iterable[tuple[str, ...]], level_columns: list[str]) -> list[tuple[str, ...]]:
        """:meth:`node_ids` for plain rows of text: per row, its node id at every level (the last: its leaf).

        Raises
        ------
        ValueError
            A row whose length is not ``len(level_columns)``, or an empty value (naming the column and row).
        """
        out = []
        for r, row in enumerate(rows):
            if len(row) != len(level_columns):
                raise ValueError(f"hierarchy row {r} has {len(row)} values for the {len(level_columns)} level "
                                 f"columns {list(level_columns)}")
            ids, prefix = [], None
            for col, value in zip(level_columns, row):
                if value is None or str(value) == "":
                    raise ValueError(f"hierarchy column {col!r} has a missing or empty value in row {r!r}")
                seg = node_segment(col, value)
                prefix = seg if prefix is None else f"{prefix}/{seg}"
                ids.append(prefix)
            out.append(tuple(ids))
        return out

    @staticmethod
    def node_ids(paths: pd.DataFrame, level_columns: list[str]) -> pd.DataFrame:
        """Node id of every row at every level (vectorised).

        Parameters
        ----------
        paths : pandas.DataFrame
            Rows with the level columns (e.g. the public groups table).
        level_columns : list of str
            Level columns, top to bottom.

        Returns
        -------
        pandas.DataFrame
            Same index as ``paths``; one column per level column holding the
            node id of that row at that level; the last column is the leaf id.
        """
        out = {}
        prefix = None
        for col in level_columns:
            vals = paths[col]
            bad = vals.isna() | (vals.astype(str).str.len() == 0)
            if bad.any():
                row = bad[bad].index[0]
                raise ValueError(f"hierarchy column {col!r} has a missing or empty value in row {row!r}")
            codes, uniques = pd.factorize(vals.astype(str))
            part = pd.Series(np.array([node_segment(col, u) for u in uniques], dtype=object)[codes],
                             index=paths.index, dtype=object)
            prefix = part if prefix is None else prefix + "/" + part
            out[col] = prefix
        return pd.DataFrame(out, index=paths.index)

    @staticmethod
    def split_node_id(node: str, level_columns: list[str]) -> list[str]:
        """The values of a node id made by :meth:`node_ids` (inverse of it).

        Parameters
        ----------
        node : str
            A node id below the root, e.g. ``'carrier=AA/origin=JFK'``.
        level_columns : list of str
            The level columns it was built from, top to bottom (the id may
            stop at any level).

        Returns
        -------
        list of str
            The value text of each level the id covers, exactly as in the
            groups file (quoted values decoded).

        Raises
        ------
        ValueError
            ``node`` is not an id over these level columns.
        """
        values: list[str] = []
        pos = 0
        for i, col in enumerate(level_columns):
            head = f"{col}="
            if not node.startswith(head, pos):
                break
            pos += len(head)
            if node.startswith('"', pos):
                value, pos = read_quoted(node, pos)
            else:
                end = node.find("/", pos)
                end = len(node) if end < 0 else end
                value, pos = node[pos:end], end
            values.append(value)
            if pos == len(node):
                return values
            if node[pos] != "/" or i == len(level_columns) - 1:
                break
            pos += 1
        raise ValueError(f"{node!r} is not a node id over the level columns {list(level_columns)}")

    # --------------------------------------------------------------- validate
    def validate(self) -> None:
        """Check the structure; raise a clear ``ValueError`` if it is not a tree.

        Raises
        ------
        ValueError
            Empty hierarchy (no nodes below the root), empty node id, a node
            with two parents, an edge into the root, a cycle / nodes not
            reachable from the root, or leaves at different depths.
        """
        if not isinstance(self.root, str) or not self.root:
            raise ValueError("hierarchy root id must be a non-empty string")
        if len(self.edges) == 0:
            raise ValueError("hierarchy is empty: it has no nodes below the root")
        parent: dict[str, str] = {}
        children: dict[str, list[str]] = {}
        for p, c in self.edges:
            if not p or not c:
                raise ValueError(f"hierarchy has an empty node id in edge ({p!r} -> {c!r})")
            if p == c:
                raise ValueError(f"hierarchy has a cycle: node {c!r} is its own parent")
            if c == self.root:
                raise ValueError(f"hierarchy has a cycle: root {self.root!r} appears as a child of {p!r}")
            if c in parent:
                if parent[c] == p:
                    continue
                raise ValueError(f"hierarchy node {c!r} has two parents: {parent[c]!r} and {p!r}")
            parent[c] = p
            children.setdefault(p, []).append(c)
        # breadth-first from the root
        levels: list[tuple[str, ...]] = [(self.root,)]
        seen = {self.root}
        depth_of_leaf: dict[str, int] = {}
        while True:
            nxt = []
            for node in levels[-1]:
                kids = children.get(node, [])
                if not kids:
                    depth_of_leaf[node] = len(levels) - 1
                nxt.extend(kids)
            if not nxt:
                break
            seen.update(nxt)
            levels.append(tuple(nxt))
        unreached = [n for n in list(parent) + list(children) if n not in seen]
        if unreached:
            # every node has one parent, so an unreachable node lies on or hangs below a cycle
            node = unreached[0]
            path = [node]
            while path[-1] in parent and parent[path[-1]] not in path:
                path.append(parent[path[-1]])
            if path[-1] in parent:
                raise ValueError(f"hierarchy has a cycle through node {node!r} "
                                 f"({' -> '.join(path + [parent[path[-1]]])}); it is not reachable from the root")
            raise ValueError(f"hierarchy node {node!r} is not connected to the root {self.root!r}")
        depths = set(depth_of_leaf.values())
        if len(depths) > 1:
            shallow = min(depth_of_leaf, key=depth_of_leaf.get)
            raise ValueError(f"hierarchy leaves are at different depths {sorted(depths)}: e.g. leaf "
                             f"{shallow!r} is at depth {depth_of_leaf[shallow]}, but all leaves must be at "
                             f"depth {max(depths)}")
        object.__setattr__(self, "_levels", tuple(levels))
        object.__setattr__(self, "_parent", parent)
        object.__setattr__(self, "_children", {k: tuple(v) for k, v in children.items()})

    # ---------------------------------------------------------------- queries
    @property
    def levels(self) -> int:
        """Number of levels including the root (root-only would be 1)."""
        return len(self._levels)

    def nodes_at(self, level: int) -> list[str]:
        """Node ids at ``level`` (0 = root), in a fixed order (children of a
        parent are contiguous and parents appear in the previous level's order)."""
        if not 0 <= level < self.levels:
            raise ValueError(f"level must be in [0, {self.levels - 1}], got {level}")
        return list(self._levels[level])

    def children(self, node: str) -> list[str]:
        """Children of ``node`` (empty for a leaf)."""
        self._check_node(node)
        return list(self._children.get(node, ()))

    def parent(self, node: str) -> str | None:
        """Parent of ``node`` (``None`` for the root)."""
        self._check_node(node)
        return self._parent.get(node)

    @property
    def leaves(self) -> list[str]:
        """Leaf ids (the deepest level)."""
        return list(self._levels[-1])

    @property
    def nodes(self) -> list[str]:
        """All node ids, level by level."""
        return [n for lev in self._levels for n in lev]

    def level_of(self, node: str) -> int:
        """Depth of ``node`` (root = 0)."""
        self._check_node(node)
        d = 0
        while node != self.root:
            node = self._parent[node]
            d += 1
        return d

    def ancestor_index(self, level: int) -> np.ndarray:
        """For every leaf (in :attr:`leaves` order) the index of its ancestor
        in ``nodes_at(level)``."""
        if not 0 <= level < self.levels:
            raise ValueError(f"level must be in [0, {self.levels - 1}], got {level}")
        pos = {n: i for i, n in enumerate(self._levels[level])}
        out = np.empty(len(self._levels[-1]), dtype=np.int64)
        for i, leaf in enumerate(self._levels[-1]):
            node = leaf
            for _ in range(self.levels - 1 - level):
                node = self._parent[node]
            out[i] = pos[node]
        return out

    def parent_index(self, level: int) -> np.ndarray:
        """For every node at ``level >= 1`` the index of its parent in
        ``nodes_at(level - 1)``."""
        if not 1 <= level < self.levels:
            raise ValueError(f"level must be in [1, {self.levels - 1}], got {level}")
        pos = {n: i for i, n in enumerate(self._levels[level - 1])}
        return np.array([pos[self._parent[n]] for n in self._levels[level]], dtype=np.int64)

    def _check_node(self, node: str) -> None:
        if node != self.root and node not in self._parent:
            raise ValueError(f"{node!r} is not a node of the hierarchy")
