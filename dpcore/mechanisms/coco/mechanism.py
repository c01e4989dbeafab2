"""Differentially private hierarchical count-of-counts histograms.

Kuo, Chiu, Kifer, Hay & Machanavajjhala, "Differentially Private Hierarchical
Count-of-Counts Histograms", PVLDB 2018 (seed 004, part 2).

Problem (slide "Problem Definition"): for each node τ of a public hierarchy
Γ, publish Ĥ^τ — non-negative integers, ``sum = τ.G`` (public), close to the
true count-of-counts histogram, children summing to the parent.

Privacy
-------
* Neighbour relation: **add/remove one item** (one record of the Persons
  table; slide "Protect Privacy").  The groups table (group -> leaf) and the
  hierarchy are public, so G_τ of every node is public and unchanged.
* Notion: pure ε-DP (``dp``, δ = 0), geometric mechanism (slide "Geometric
  Mechanism"): double-geometric = discrete Laplace noise of scale
  ``Δ/ε_ℓ`` added to every cell of the chosen representation of every node
  of level ℓ.  One item belongs to one group, hence to exactly one node per
  level, so the level's L1 sensitivity equals the per-node one (see
  :meth:`CocoMechanism.sensitivity`).
* Cost: ``ε_ℓ`` for every measured level ℓ (sequential composition over
  levels; nodes within a level are disjoint).  Bottom-up methods measure only
  the leaf level.  Everything after :meth:`CocoMechanism.measure_level` is
  post-processing of the stored noisy measurements and public counts.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from ...noise import NoiseSource, conservative_scale
from .consistency import (HC_VARIANCE_RULES, aggregate_up, consistent_hc, discrete_laplace_variance,
                          hc_estimate, hc_variances, hg_estimate, hg_variances, naive_estimate, top_down)
from .arrays import (DEFAULT_GROUP_CHUNK, count_dtype, hc_estimate_rows, level_histograms, sum_levels,
                     top_down_runs)
from .hierarchy import Hierarchy
from .representations import _check_K, counts_from_leaf_counts, level_H_matrix, level_Hg

__all__ = ["CocoMechanism", "NodeChunk", "NodeEstimate", "DEFAULT_NOISE_CHUNK"]

#: Cells per ``discrete_laplace`` call in :meth:`CocoMechanism.measure_arrays` (bounds the sampler's temporaries).
DEFAULT_NOISE_CHUNK = 1 << 22

_REPR = {
    "naive": "H", "hg_l1": "Hg", "hg_l2": "Hg", "hc_l1": "Hc", "hc_l2": "Hc",
    "bottom_up_hg": "Hg", "bottom_up_hc": "Hc", "top_down_hg": "Hg", "top_down_hc": "Hc", "consistent_hc": "Hc",
    "consistent_hc_leaf": "Hc",
}


class _Clock:
    """Adds the wall time since the previous lap to ``timings[name]`` (no-op without a dict)."""

    def __init__(self, timings: dict | None):
        import time
        self._now = time.perf_counter
        self.timings = timings
        self.t = self._now()

    def lap(self, name: str) -> None:
        t = self._now()
        if self.timings is not None:
            self.timings[name] = self.timings.get(name, 0.0) + (t - self.t)
        self.t = t


class NodeEstimate(NamedTuple):
    """One node's estimate (:meth:`CocoMechanism.estimate_nodes`): plain arrays, picklable."""

    H: np.ndarray
    """int64 histogram, length K + 1, sum G_τ."""
    Hg: Optional[np.ndarray]
    """Sorted estimated group sizes (None for ``naive``)."""
    V: Optional[np.ndarray]
    """Variance of each entry of ``Hg`` (None for ``naive``)."""
    Hc_noisy: Optional[np.ndarray] = None
    """``consistent_hc`` only: the node's noisy H_c measurement (float64,
    length K + 1), which the tree-wide least squares of :meth:`assemble`
    reads (the per-node ``H`` is then the node's own H_c estimate)."""


@dataclass(frozen=True)
class NodeChunk:
    """Some nodes of one measured level with what their estimates need (no private data).

    Built by :meth:`CocoMechanism.node_chunks` from the stored noisy
    measurements and the public hierarchy; estimated by
    :meth:`CocoMechanism.estimate_chunk` on any worker.
    """

    level: int
    nodes: tuple[str, ...]
    measurements: tuple[np.ndarray, ...]
    """Noisy cells of each node (float64)."""
    group_counts: tuple[int, ...]
    """Public G_τ of each node."""
    epsilon: Fraction
    """ε of the level."""


class CocoMechanism:
    """Count-of-counts histograms for every node of a public hierarchy.

    Parameters
    ----------
    method : str
        One of :attr:`METHODS`:

        * ``naive`` — slide "Naive Strategy": H + noise ``2/ε``, least-squares
          projection onto ``{>= 0, Σ = G}``, largest-remainder rounding.
        * ``hg_l1``, ``hg_l2`` — slide "Unattributed Histogram H_g": H_g +
          noise ``1/ε``, isotonic regression (L1 / L2), rounding, back to H.
        * ``hc_l1``, ``hc_l2`` — slide "Cumulative Sum Histograms H_c": H_c +
          noise ``1/ε``, isotonic regression with ``Ĥ_c[K] = G``, rounding.
        * ``bottom_up_hg``, ``bottom_up_hc`` — slide "Bottom-up Aggregation":
          only the leaves are measured (H_g / H_c method) and summed upwards.
        * ``top_down_hg``, ``top_down_hc`` — slides "Consistency Solution" to
          "Merge Estimates": every level measured with the H_g (resp. H_c)
          method (the slides' "H_g × H_g × H_g" / "H_c × H_c × H_c"), then
          top-down optimal matching + inverse-variance merging and
          back-substitution at the leaves.
        * ``consistent_hc`` — every level measured like ``top_down_hc`` (H_c
          + noise ``1/ε_ℓ``), then the generalised least-squares estimate of
          every node's H_c under parent = sum of children, weighted by the
          exact noise variance of each level, in two passes linear in the
          tree (Hay et al., PVLDB 2010, Section 4), then a top-down integer,
          monotone, non-negative projection that keeps parent = sum of
          children exactly (:func:`~dpcore.mechanisms.coco.consistency.consistent_hc`).
        * ``consistent_hc_leaf`` — the same measurements and least squares,
          but the integer step is anchored at the leaves: each leaf is made
          integer on its own (isotonic + rounding to its G) and every parent
          is the exact sum of its children (``anchor="leaves"``), which keeps
          the rounding gain of precise leaves.

        The per-node methods (naive, hg_*, hc_*) measure every level and do
        **not** enforce parent = sum of children (slide "Non-hierarchical
        Methods Issue").
    epsilon_per_level : float or list of float
        ε of each level (one number: the same for every level; a list: one
        per level, root first).  For bottom-up methods only the leaf level's
        ε is used and charged (the slides' comparison gives bottom-up the
        whole budget: pass e.g. ``[1, 1, 3]`` to give the leaves ε = 3).
    K : int
        Public maximum group size (>= 1); larger groups are clamped to K.
    loss : {"l1", "l2"}, keyword-only
        Isotonic loss for the bottom-up and top-down methods (default
        ``"l2"``, whose PAV block means match the slides' variance estimate
        ``2/(|S_i| ε²)``).  Ignored by the per-node methods, whose names fix it.
    hc_variance : {"positional", "slides"}, keyword-only
        Variance estimate of the H_c groups merged by ``top_down_hc``
        (:func:`~dpcore.mechanisms.coco.consistency.hc_variances`): the
        default ``"positional"`` is the slides' "Initial Variance Estimation"
        rule ``4/(ε² n_s)`` plus the positional uncertainty of groups in flat
        stretches of Ĥ_c; ``"slides"`` is the slides' rule alone, which
        over-trusts sparse children (kept for comparison).  Ignored by the
        other methods.

    Notes
    -----
    The constructor only stores its arguments; :meth:`validate` checks them.
    Neighbour relation add/remove one item; notion pure ε-DP; total cost
    ``Σ_{ℓ measured} ε_ℓ`` (:meth:`total_cost`).
    """

    METHODS = ("naive", "hg_l1", "hg_l2", "hc_l1", "hc_l2", "bottom_up_hg", "bottom_up_hc",
               "top_down_hg", "top_down_hc", "consistent_hc", "consistent_hc_leaf")
    notion = "dp"
    neighbour = "add-remove"

    def __init__(self, method: str, epsilon_per_level, K: int, *, loss: str = "l2",
                 hc_variance: str = "positional"):
        self.method = method
        self.epsilon_per_level = epsilon_per_level
        self.K = K
        self.loss = loss
        self.hc_variance = hc_variance

    # ------------------------------------------------------------ parameters
    @property
    def name(self) -> str:
        """E.g. ``"coco-top_down_hc-l2"`` / ``"coco-hg_l1"``."""
        if self.method in ("bottom_up_hg", "bottom_up_hc", "top_down_hg", "top_down_hc"):
            suffix = "-slidesvar" if self.method == "top_down_hc" and self.hc_variance == "slides" else ""
            return f"coco-{self.method}-{self.loss}{suffix}"
        return f"coco-{self.method}"

    @property
    def representation(self) -> str:
        """``"H"``, ``"Hg"`` or ``"Hc"``: what :meth:`measure_level` perturbs."""
        self._check_method()
        return _REPR[self.method]

    @property
    def _loss(self) -> str:
        if self.method in ("hg_l1", "hc_l1"):
            return "l1"
        if self.method in ("hg_l2", "hc_l2"):
            return "l2"
        return self.loss

    def _check_method(self) -> None:
        if self.method not in self.METHODS:
            raise ValueError(f"method must be one of {', '.join(self.METHODS)}; got {self.method!r}")

    @staticmethod
    def _check_eps(e, where: str) -> Fraction:
        if isinstance(e, bool) or not isinstance(e, (numbers.Real, str)):
            raise ValueError(f"epsilon_per_level{where} must be a number > 0, got {e!r}")
        if isinstance(e, numbers.Real) and not e > 0:
            raise ValueError(f"epsilon_per_level{where} must be > 0 (allowed range (0, inf)), got {e!r}")
        try:
            f = exact(e)
        except (TypeError, ValueError, ArithmeticError):
            raise ValueError(f"epsilon_per_level{where} must be a finite number > 0, got {e!r}") from None
        if not f > 0 or (isinstance(e, float) and not math.isfinite(e)):
            raise ValueError(f"epsilon_per_level{where} must be > 0 (allowed range (0, inf)), got {e!r}")
        return f

    def validate(self, hierarchy: Hierarchy | None = None) -> None:
        """Check the parameters; raise ``ValueError`` naming the parameter.

        Parameters
        ----------
        hierarchy : Hierarchy, optional
            When given, a list ``epsilon_per_level`` must have exactly
            ``hierarchy.levels`` entries.

        Raises
        ------
        ValueError
            ``method`` not in :attr:`METHODS`; ``K`` not an integer >= 1;
            an epsilon not in ``(0, inf)``; wrong number of epsilons; ``loss``
            not ``"l1"``/``"l2"``; ``hc_variance`` unknown.
        """
        self._check_method()
        _check_K(self.K)
        if self.loss not in ("l1", "l2"):
            raise ValueError(f"loss must be 'l1' or 'l2', got {self.loss!r}")
        if self.hc_variance not in HC_VARIANCE_RULES:
            raise ValueError(f"hc_variance must be one of {', '.join(HC_VARIANCE_RULES)}, got {self.hc_variance!r}")
        eps = self.epsilon_per_level
        if isinstance(eps, (list, tuple, np.ndarray)):
            if len(eps) == 0:
                raise ValueError("epsilon_per_level must not be an empty list")
            for i, e in enumerate(eps):
                self._check_eps(e, f"[{i}]")
            if hierarchy is not None and len(eps) != hierarchy.levels:
                raise ValueError(f"epsilon_per_level has {len(eps)} entries but the hierarchy has "
                                 f"{hierarchy.levels} levels (root included); give one epsilon per level")
        else:
            self._check_eps(eps, "")

    def epsilon(self, level: int) -> Fraction:
        """Exact ε of ``level`` (as the ledger reads it)."""
        eps = self.epsilon_per_level
        if isinstance(eps, (list, tuple, np.ndarray)):
            if not 0 <= level < len(eps):
                raise ValueError(f"level must be in [0, {len(eps) - 1}], got {level}")
            return self._check_eps(eps[level], f"[{level}]")
        if level < 0:
            raise ValueError(f"level must be >= 0, got {level}")
        return self._check_eps(eps, "")

    # --------------------------------------------------------------- privacy
    def sensitivity(self) -> int:
        """L1 sensitivity, per level, of the perturbed representation.

        Neighbours differ by one added/removed item, which belongs to one
        public group (so to one node per level).  Adding an item to a group of
        size ``j < K`` moves it to size ``j + 1`` (at ``j = K`` clamping
        leaves everything unchanged); removing is the reverse.

        * **H** (naive): ``H[j]`` drops by 1 and ``H[j+1]`` grows by 1 ->
          L1 change **2**.
        * **H_c**: ``H_c[i] = #groups of size <= i``; only ``H_c[j]`` changes
          (the group is no longer of size <= j) -> **1**.
        * **H_g** (sorted sizes): the *last* entry equal to ``j`` becomes
          ``j + 1`` and the vector stays sorted, all other entries unchanged
          -> **1**.  (G is public and fixed, so the length does not change.)

        Returns
        -------
        int
            2 for ``naive``, 1 otherwise.  Audited by brute force in
            ``tests/test_coco_privacy.py``.
        """
        return 2 if self.representation == "H" else 1

    def noise_scale(self, level: int) -> float:
        """Discrete Laplace scale ``sensitivity / ε_level`` for ``level``,
        rounded *up* to a float (:func:`dpcore.noise.conservative_scale`) so
        the realised privacy loss never exceeds the charged ε."""
        return conservative_scale(self.sensitivity(), self.epsilon(level))

    def levels_measured(self, hierarchy: Hierarchy) -> list[int]:
        """Levels that receive noise: the leaf level only for bottom-up
        methods, every level (root = 0) for the others."""
        self._check_method()
        if self.method.startswith("bottom_up"):
            return [hierarchy.levels - 1]
        return list(range(hierarchy.levels))

    def level_cost(self, level: int, hierarchy: Hierarchy | None = None) -> PrivacyCost:
        """Privacy cost ``(ε_level, 0)`` of measuring ``level``.

        The pipeline charges this once per measured level before drawing that
        level's noise.  If ``hierarchy`` is given and the level is not
        measured (bottom-up, internal level), the cost is 0.
        """
        if hierarchy is not None and level not in self.levels_measured(hierarchy):
            return PrivacyCost(0, 0)
        return PrivacyCost(self.epsilon(level), 0)

    def total_cost(self, hierarchy: Hierarchy) -> PrivacyCost:
        """Sum of :meth:`level_cost` over :meth:`levels_measured`."""
        total = PrivacyCost(0, 0)
        for level in self.levels_measured(hierarchy):
            total = total + self.level_cost(level)
        return total

    # ----------------------------------------------------------- measurement
    def true_level(self, sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy,
                   level: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """True representation of every node at ``level`` (internal, private).

        Returns
        -------
        nodes : list of str
        lengths : numpy.ndarray
            Number of cells per node (G_τ for H_g, K + 1 otherwise).
        values : numpy.ndarray
            All cells concatenated (int64).
        """
        K = int(self.K)
        nodes = hierarchy.nodes_at(level)
        rep = self.representation
        if rep == "Hg":
            lengths, values = level_Hg(sizes_by_leaf, hierarchy, K, level)
        else:
            M = level_H_matrix(sizes_by_leaf, hierarchy, K, level)
            if rep == "Hc":
                M = np.cumsum(M, axis=1)
            lengths = np.full(len(nodes), K + 1, dtype=np.int64)
            values = M.ravel()
        return nodes, lengths, values

    def measure_level(self, sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy, level: int,
                      noise: NoiseSource) -> dict[str, list[int]]:
        """Noisy representation of every node at ``level`` — the only
        privacy-critical call.

        Parameters
        ----------
        sizes_by_leaf : dict[str, numpy.ndarray]
            **Private** group sizes per leaf, clamped to K
            (:func:`group_sizes_by_leaf`).
        hierarchy : Hierarchy
            Public hierarchy.
        level : int
            A level in :meth:`levels_measured`.
        noise : NoiseSource
            One vectorised ``discrete_laplace`` call for all cells of the level,
            scale ``sensitivity / ε_level`` (:meth:`noise_scale`).

        Returns
        -------
        dict[str, list[int]]
            Node id -> noisy cells (plain ints, JSON-storable): H or H_c
            (length K + 1) or H_g (length G_τ).  ε_level-DP under add/remove
            one item; the caller must have charged :meth:`level_cost` first.
        """
        nodes, bounds, noisy = self._measure_level_array(sizes_by_leaf, hierarchy, level, noise)
        flat = noisy.tolist()
        return {n: flat[bounds[i]:bounds[i + 1]] for i, n in enumerate(nodes)}

    def _measure_level_array(self, sizes_by_leaf, hierarchy: Hierarchy, level: int, noise: NoiseSource):
        """:meth:`measure_level` without the conversion to JSON-storable lists:
        ``(nodes, bounds, noisy)`` with node ``i``'s cells
        ``noisy[bounds[i]:bounds[i + 1]]`` (one ``discrete_laplace`` call)."""
        self.validate(hierarchy)
        if level not in self.levels_measured(hierarchy):
            raise ValueError(f"level {level} is not measured by method {self.method!r} "
                             f"(measured levels: {self.levels_measured(hierarchy)})")
        nodes, lengths, values = self.true_level(sizes_by_leaf, hierarchy, level)
        noisy = noise.discrete_laplace(values, self.noise_scale(level))
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        return nodes, bounds, noisy

    # -------------------------------------------------------- post-processing
    def _check_inputs(self, measurements, hierarchy: Hierarchy, group_counts: Mapping[str, int]):
        K = int(self.K)
        G = {}
        for node in hierarchy.nodes:
            if node not in group_counts:
                raise ValueError(f"group_counts has no entry for node {node!r}")
            g = group_counts[node]
            if isinstance(g, bool) or not isinstance(g, (numbers.Integral,)) or int(g) < 0:
                raise ValueError(f"group_counts[{node!r}] must be an integer >= 0, got {g!r}")
            G[node] = int(g)
        for level in range(hierarchy.levels - 1):
            for node in hierarchy.nodes_at(level):
                s = sum(G[c] for c in hierarchy.children(node))
                if s != G[node]:
                    raise ValueError(f"group_counts[{node!r}] = {G[node]} differs from the sum over its "
                                     f"children ({s})")
        for level in self.levels_measured(hierarchy):
            if level not in measurements:
                raise ValueError(f"measurements lack level {level} (method {self.method!r} measures "
                                 f"levels {self.levels_measured(hierarchy)})")
            m = measurements[level]
            for node in hierarchy.nodes_at(level):
                if node not in m:
                    raise ValueError(f"measurements of level {level} lack node {node!r}")
                want = G[node] if self.representation == "Hg" else K + 1
                if len(m[node]) != want:
                    raise ValueError(f"measurement of node {node!r} has {len(m[node])} cells, expected {want}")
        return G

    def _node_estimate(self, y: np.ndarray, G: int, eps: Fraction):
        """Per-node estimate: (H, sorted sizes Ĥ_g, variances V_g or None[, noisy H_c])."""
        K = int(self.K)
        rep = self.representation
        if rep == "H":
            H = naive_estimate(y, G)
            return H, None, None
        if rep == "Hg":
            H, Hg, bsz = hg_estimate(y, K, self._loss)
            return H, Hg, hg_variances(bsz, float(eps))
        H = hc_estimate(y, G, self._loss)
        if self.method.startswith("consistent_hc"):
            return H, None, None, y
        return H, np.repeat(np.arange(K + 1), H), hc_variances(H, float(eps), self.hc_variance)

    def estimate_nodes(self, measurements: Sequence[Sequence[int]], group_counts: Sequence[int],
                       epsilon) -> list[NodeEstimate]:
        """Per-node estimates of some nodes of one level (pure post-processing).

        The CPU-heavy, node-independent part of :meth:`postprocess` (isotonic
        regression per node): it can run on any worker, in any chunking, and
        :meth:`assemble` turns the estimates of all nodes into the release.

        Parameters
        ----------
        measurements : sequence of sequences of int
            The noisy cells of each node (as stored by :meth:`measure_level`).
        group_counts : sequence of int
            The public G_τ of each node, in the same order.
        epsilon : number
            The ε of the nodes' level (read by the variance estimates).

        Returns
        -------
        list of NodeEstimate
            Per node ``(H, Hg, V, Hc_noisy)``: int64 H of length K + 1; the
            sorted group sizes Ĥ_g and their variances (float64), or None for
            the naive method and ``consistent_hc``; for ``consistent_hc`` the
            noisy H_c itself (the least squares is tree-wide, in
            :meth:`assemble`). Plain NumPy arrays (picklable).
        """
        self._check_method()
        if len(measurements) != len(group_counts):
            raise ValueError(f"estimate_nodes got {len(measurements)} measurements but "
                             f"{len(group_counts)} group counts")
        eps = self._check_eps(epsilon, "")
        return [NodeEstimate(*self._node_estimate(np.asarray(y, dtype=np.float64), int(g), eps))
                for y, g in zip(measurements, group_counts)]

    def node_chunks(self, measurements: Mapping[int, Mapping[str, Sequence[int]]], hierarchy: Hierarchy,
                    group_counts: Mapping[str, int], chunk_size: int | None = None) -> list[NodeChunk]:
        """Check the inputs of :meth:`postprocess` and cut them into per-level node chunks.

        Parameters
        ----------
        measurements, hierarchy, group_counts
            As for :meth:`postprocess` (noisy measurements, public structures).
        chunk_size : int, optional
            At most this many nodes per chunk (default: one chunk per level).

        Returns
        -------
        list of NodeChunk
            Level by level (root first), nodes in hierarchy order; each chunk
            holds only noisy cells, public G_τ and the level's ε — what
            :meth:`estimate_chunk` needs, on any worker.

        Raises
        ------
        ValueError
            As :meth:`postprocess`; ``chunk_size`` < 1.
        """
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral)
                                       or chunk_size < 1):
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        self.validate(hierarchy)
        measurements = {int(k): v for k, v in measurements.items()}
        G = self._check_inputs(measurements, hierarchy, group_counts)
        chunks = []
        for level in self.levels_measured(hierarchy):
            nodes = hierarchy.nodes_at(level)
            step = max(len(nodes), 1) if chunk_size is None else int(chunk_size)
            eps = self.epsilon(level)
            for lo in range(0, len(nodes), step):
                part = tuple(nodes[lo:lo + step])
                chunks.append(NodeChunk(
                    level, part, tuple(np.asarray(measurements[level][n], dtype=np.float64) for n in part),
                    tuple(G[n] for n in part), eps,
                ))
        return chunks

    def estimate_chunk(self, chunk: NodeChunk) -> list[NodeEstimate]:
        """:meth:`estimate_nodes` of one :class:`NodeChunk` (in ``chunk.nodes`` order)."""
        return self.estimate_nodes(chunk.measurements, chunk.group_counts, chunk.epsilon)

    def assemble(self, estimates: Mapping[str, NodeEstimate], hierarchy: Hierarchy) -> dict[str, np.ndarray]:
        """The release from the per-node estimates (second half of :meth:`postprocess`).

        Parameters
        ----------
        estimates : dict[str, NodeEstimate]
            Node id -> :meth:`estimate_nodes` output for every node of every
            measured level (bottom-up: the leaves; other methods: every node).
        hierarchy : Hierarchy

        Returns
        -------
        dict[str, numpy.ndarray]
            As :meth:`postprocess`: top-down consistency, bottom-up
            aggregation, or each node's own H (per-node methods).

        Raises
        ------
        ValueError
            A needed node has no estimate.
        """
        self.validate(hierarchy)
        K = int(self.K)
        for level in self.levels_measured(hierarchy):
            for node in hierarchy.nodes_at(level):
                if node not in estimates:
                    raise ValueError(f"estimates lack node {node!r} of level {level}")
        if self.method.startswith("bottom_up"):
            rows = [estimates[leaf][0] for leaf in hierarchy.leaves]
            return aggregate_up(np.vstack(rows) if rows else np.zeros((0, K + 1), np.int64), hierarchy)
        if self.method.startswith("consistent_hc"):
            return self._assemble_consistent(estimates, hierarchy)
        if not self.method.startswith("top_down"):
            return {node: estimates[node][0]
                    for level in range(hierarchy.levels) for node in hierarchy.nodes_at(level)}
        vals, vars_, idx = [], [], []
        for level in range(hierarchy.levels):
            lv, lvar, lidx = [], [], []
            for i, node in enumerate(hierarchy.nodes_at(level)):
                Hg, V = estimates[node].Hg, estimates[node].V
                lv.append(Hg)
                lvar.append(V)
                lidx.append(np.full(len(Hg), i, dtype=np.int64))
            vals.append(np.concatenate(lv))
            vars_.append(np.concatenate(lvar))
            idx.append(np.concatenate(lidx))
        return top_down(vals, vars_, idx, hierarchy, K)

    def level_variance(self, level: int) -> float:
        """Variance of the noise of one measured cell of ``level``: the
        discrete Laplace of scale :meth:`noise_scale` (public parameters only)."""
        return discrete_laplace_variance(self.noise_scale(level))

    def _assemble_consistent(self, estimates: Mapping[str, NodeEstimate], hierarchy: Hierarchy):
        """``consistent_hc``: tree-wide least squares + integer projection
        (:func:`~dpcore.mechanisms.coco.consistency.consistent_hc`)."""
        Y, G = [], []
        for level in range(hierarchy.levels):
            nodes = hierarchy.nodes_at(level)
            Y.append(np.stack([np.asarray(estimates[n].Hc_noisy, dtype=np.float64) for n in nodes]))
            G.append(np.array([int(estimates[n].H.sum()) for n in nodes], dtype=np.int64))
        anchor = "leaves" if self.method == "consistent_hc_leaf" else "root"
        H, _ = consistent_hc(Y, [self.level_variance(lv) for lv in range(hierarchy.levels)], G, hierarchy, anchor)
        return {n: row for level in range(hierarchy.levels) for n, row in zip(hierarchy.nodes_at(level), H[level])}

    def postprocess(self, measurements: Mapping[int, Mapping[str, Sequence[int]]], hierarchy: Hierarchy,
                    group_counts: Mapping[str, int]) -> dict[str, np.ndarray]:
        """Deterministic post-processing of the stored noisy measurements.

        Uses no noise and no private data: only ``measurements`` (noisy,
        already charged), the public ``hierarchy`` and the public
        ``group_counts`` — so the output has the same privacy guarantee.
        It is :meth:`node_chunks` → :meth:`estimate_chunk` per chunk →
        :meth:`assemble`; the pipeline maps the middle part over workers.

        Parameters
        ----------
        measurements : dict[int, dict[str, list[int]]]
            Level -> output of :meth:`measure_level` for every measured level
            (JSON round-tripped keys may be ``str``; ``int(level)`` is used).
        hierarchy : Hierarchy
        group_counts : dict[str, int]
            Public number of groups G_τ of every node (parent = sum of children).

        Returns
        -------
        dict[str, numpy.ndarray]
            Node id -> int64 H of length K + 1, non-negative, ``sum = G_τ``.
            Bottom-up, top-down and ``consistent_hc``: every node, and every
            parent equals the sum of its children exactly.  Per-node methods (naive, hg_*,
            hc_*): every node, estimated independently — consistency between
            levels is **not** enforced.

        Raises
        ------
        ValueError
            Missing level/node, wrong cell count, inconsistent group counts.
        """
        estimates: dict[str, NodeEstimate] = {}
        for chunk in self.node_chunks(measurements, hierarchy, group_counts):
            estimates.update(zip(chunk.nodes, self.estimate_chunk(chunk)))
        return self.assemble(estimates, hierarchy)

    def publish(self, sizes_by_leaf: Mapping[str, np.ndarray], hierarchy: Hierarchy,
                noise: NoiseSource) -> dict[str, np.ndarray]:
        """Measure every measured level, then :meth:`postprocess` (no ledger:
        for benchmarks and tests; the pipeline charges per level itself)."""
        self.validate(hierarchy)
        leaf_counts = np.array([len(sizes_by_leaf.get(leaf, ())) for leaf in hierarchy.leaves], dtype=np.int64)
        counts = counts_from_leaf_counts(leaf_counts, hierarchy)
        meas = {}
        for level in self.levels_measured(hierarchy):
            nodes, bounds, noisy = self._measure_level_array(sizes_by_leaf, hierarchy, level, noise)
            # array views instead of the lists measure_level stores (same values)
            meas[level] = {n: noisy[bounds[i]:bounds[i + 1]] for i, n in enumerate(nodes)}
        return self.postprocess(meas, hierarchy, counts)

    # ------------------------------------------------------ array-native path
    #: Methods :meth:`publish_arrays` / :meth:`postprocess_arrays` support: those measuring H or H_c
    #: (``K + 1`` cells per node).  The H_g methods measure ``G_τ`` cells per node: use :meth:`publish`.
    ARRAY_METHODS = ("naive", "hc_l1", "hc_l2", "bottom_up_hc", "top_down_hc", "consistent_hc", "consistent_hc_leaf")

    def _check_array_method(self) -> None:
        self._check_method()
        if self.method not in self.ARRAY_METHODS:
            raise ValueError(f"method {self.method!r} has no array path (it measures H_g, G_tau cells per node); "
                             f"array methods: {', '.join(self.ARRAY_METHODS)}; use publish()")

    def measure_arrays(self, H_level: np.ndarray, level: int, hierarchy: Hierarchy, noise: NoiseSource,
                       chunk_cells: int = DEFAULT_NOISE_CHUNK) -> np.ndarray:
        """Noisy representation of every node at ``level`` from its true H matrix — the only
        privacy-critical call of the array path (the counterpart of :meth:`measure_level`).

        Parameters
        ----------
        H_level : numpy.ndarray
            **Private** ``(n_level, K + 1)`` true H of the level's nodes
            (:func:`~dpcore.mechanisms.coco.arrays.level_histograms`).
        level : int
            A level in :meth:`levels_measured`.
        hierarchy : Hierarchy
        noise : NoiseSource
            ``discrete_laplace`` of scale :meth:`noise_scale` on H (naive) or
            H_c (row-wise cumulative sums), called on blocks of whole rows of
            at most ``chunk_cells`` cells, in row order (a level of at most
            ``chunk_cells`` cells is one call, drawing exactly what
            :meth:`measure_level` draws).
        chunk_cells : int
            Cells per sampler call (memory of the sampler's temporaries).

        Returns
        -------
        numpy.ndarray
            ``(n_level, K + 1)`` int64 noisy cells; ε_level-DP under add/remove
            one item (same sensitivity as :meth:`measure_level`); the caller
            must have charged :meth:`level_cost` first.
        """
        self.validate(hierarchy)
        self._check_array_method()
        if level not in self.levels_measured(hierarchy):
            raise ValueError(f"level {level} is not measured by method {self.method!r} "
                             f"(measured levels: {self.levels_measured(hierarchy)})")
        B = int(self.K) + 1
        n = len(hierarchy.nodes_at(level))
        H_level = np.asarray(H_level)
        if H_level.shape != (n, B):
            raise ValueError(f"H_level has shape {H_level.shape}, expected ({n}, {B}) for level {level}")
        if isinstance(chunk_cells, bool) or int(chunk_cells) < 1:
            raise ValueError(f"chunk_cells must be an integer >= 1, got {chunk_cells!r}")
        rows = max(1, int(chunk_cells) // B)
        scale = self.noise_scale(level)
        out = np.empty((n, B), dtype=np.int64)
        cumulative = self.representation == "Hc"
        for lo in range(0, n, rows):
            block = H_level[lo:lo + rows]
            vals = np.cumsum(block, axis=1, dtype=np.int64) if cumulative else block.astype(np.int64)
            out[lo:lo + rows] = noise.discrete_laplace(vals, scale)
            del vals
        return out

    def _level_groups(self, leaf_group_counts, hierarchy: Hierarchy) -> list[np.ndarray]:
        g = np.asarray(leaf_group_counts)
        n_leaves = len(hierarchy.leaves)
        if g.shape != (n_leaves,) or (g.size and g.dtype.kind not in "iu"):
            raise ValueError(f"leaf_group_counts must be {n_leaves} integers (one per leaf, hierarchy.leaves "
                             f"order), got shape {g.shape} dtype {g.dtype}")
        if g.size and int(g.min()) < 0:
            raise ValueError("leaf_group_counts must be >= 0")
        return sum_levels(g.astype(np.int64), hierarchy)

    def _postprocess_levels(self, measured, hierarchy: Hierarchy, G: list[np.ndarray],
                            clock: "_Clock | None" = None) -> list[np.ndarray]:
        """Post-processing of ``(level, noisy matrix)`` pairs (consumed one by one, so a caller can
        measure lazily and free each level's noisy matrix once it is estimated)."""
        B = int(self.K) + 1
        dt = count_dtype(int(G[0][0]) if G[0].size else 0)
        wanted = self.levels_measured(hierarchy)
        est: dict[int, np.ndarray] = {}
        for level, y in measured:
            level = int(level)
            n = len(hierarchy.nodes_at(level))
            y = np.asarray(y)
            if y.shape != (n, B):
                raise ValueError(f"measurement of level {level} has shape {y.shape}, expected ({n}, {B})")
            if self.method.startswith("consistent_hc"):
                est[level] = y.astype(np.float64)
            elif self.representation == "H":
                est[level] = np.stack([naive_estimate(np.asarray(r, dtype=np.float64), int(g))
                                       for r, g in zip(y, G[level])]).astype(dt) if n else np.zeros((0, B), dt)
            else:
                est[level] = hc_estimate_rows(y, G[level], self._loss, dtype=dt)
            del y
        missing = [lv for lv in wanted if lv not in est]
        if missing:
            raise ValueError(f"measurements lack level {missing[0]} (method {self.method!r} measures "
                             f"levels {wanted})")
        out = self._assemble_levels(est, hierarchy, G, dt)
        if clock is not None:
            clock.lap("consistency")
        return out

    def _assemble_levels(self, est: dict, hierarchy: Hierarchy, G: list[np.ndarray], dt) -> list[np.ndarray]:
        if self.method == "bottom_up_hc":
            return sum_levels(est[hierarchy.levels - 1], hierarchy)
        if self.method == "top_down_hc":
            eps = [float(self.epsilon(lv)) for lv in range(hierarchy.levels)]
            return top_down_runs([est[lv] for lv in range(hierarchy.levels)], eps, hierarchy, int(self.K),
                                 self.hc_variance)
        if self.method.startswith("consistent_hc"):
            anchor = "leaves" if self.method == "consistent_hc_leaf" else "root"
            H, _ = consistent_hc([est[lv] for lv in range(hierarchy.levels)],
                                 [self.level_variance(lv) for lv in range(hierarchy.levels)], G, hierarchy, anchor)
            return [h.astype(dt) for h in H]
        return [est[lv] for lv in range(hierarchy.levels)]

    def postprocess_arrays(self, measurements: Mapping[int, np.ndarray], hierarchy: Hierarchy,
                           leaf_group_counts) -> list[np.ndarray]:
        """:meth:`postprocess` of matrix measurements (pure post-processing).

        Parameters
        ----------
        measurements : dict[int, numpy.ndarray]
            Level -> ``(n_level, K + 1)`` noisy matrix (:meth:`measure_arrays`)
            for every measured level.
        hierarchy : Hierarchy
        leaf_group_counts : array_like of int
            Public number of groups of every leaf (``hierarchy.leaves`` order);
            the upper levels' are their sums.

        Returns
        -------
        list of numpy.ndarray
            Per level (root first), ``(n_level, K + 1)`` H, rows in
            ``hierarchy.nodes_at(level)`` order; int32 when the root's G fits,
            else int64.  The same values as :meth:`postprocess` of the same
            measurements (``top_down_hc``: :func:`~dpcore.mechanisms.coco.arrays.top_down_runs`,
            which computes the per-group top-down consistency on runs).
        """
        self.validate(hierarchy)
        self._check_array_method()
        G = self._level_groups(leaf_group_counts, hierarchy)
        items = sorted((int(k), v) for k, v in measurements.items())
        return self._postprocess_levels(iter(items), hierarchy, G)

    def publish_arrays(self, leaf_index, sizes, hierarchy: Hierarchy, noise: NoiseSource, *,
                       group_chunk: int = DEFAULT_GROUP_CHUNK,
                       noise_chunk_cells: int = DEFAULT_NOISE_CHUNK,
                       timings: dict | None = None) -> list[np.ndarray]:
        """:meth:`publish` from two flat arrays, in memory linear in nodes x (K + 1) (census scale).

        Parameters
        ----------
        leaf_index : array_like of int, shape (G,)
            Each group's leaf as an index into ``hierarchy.leaves`` (public
            groups table; any integer dtype, e.g. int32).
        sizes : array_like of int, shape (G,)
            Each group's size, **private**; clamped at ``K`` here (any integer
            dtype; never copied whole: read in chunks of ``group_chunk``).
        hierarchy : Hierarchy
        noise : NoiseSource
        group_chunk : int
            Groups per ``np.bincount`` call when building the histograms.
        noise_chunk_cells : int
            Cells per ``discrete_laplace`` call (:meth:`measure_arrays`).
        timings : dict, optional
            Filled with the wall seconds of the phases ``histograms`` (true H
            of every level), ``noise`` (all :meth:`measure_arrays` calls),
            ``estimates`` (per-node isotonic fits) and ``consistency`` (the
            tree step: top-down runs, bottom-up sums or least squares).

        Returns
        -------
        list of numpy.ndarray
            As :meth:`postprocess_arrays`; :meth:`levels_to_dict` gives
            :meth:`publish`'s node-id dict.  With a seeded ``NoiseSource``
            and every measured level of at most ``noise_chunk_cells`` cells
            the noise draws are :meth:`publish`'s, and so is the release.
            No ledger (benchmarks, tests; the pipeline charges per level).
        """
        self.validate(hierarchy)
        self._check_array_method()
        clock = _Clock(timings)
        H = level_histograms(leaf_index, sizes, hierarchy, int(self.K), chunk=group_chunk)
        G = [h.sum(axis=1, dtype=np.int64) for h in H]
        clock.lap("histograms")
        wanted = self.levels_measured(hierarchy)
        for lv in range(hierarchy.levels):
            if lv not in wanted:
                H[lv] = None  # type: ignore[call-overload]

        def measured():
            for lv in wanted:
                clock.lap("estimates")
                y = self.measure_arrays(H[lv], lv, hierarchy, noise, noise_chunk_cells)
                H[lv] = None  # type: ignore[call-overload]  # the true level is no longer needed
                clock.lap("noise")
                yield lv, y
                del y
            clock.lap("estimates")

        return self._postprocess_levels(measured(), hierarchy, G, clock)

    @staticmethod
    def levels_to_dict(H_levels: Sequence[np.ndarray], hierarchy: Hierarchy) -> dict[str, np.ndarray]:
        """Per-level matrices -> :meth:`publish`'s ``{node id: int64 H}`` (rows in ``nodes_at`` order)."""
        return {n: np.asarray(row, dtype=np.int64) for lv in range(hierarchy.levels)
                for n, row in zip(hierarchy.nodes_at(lv), H_levels[lv])}
