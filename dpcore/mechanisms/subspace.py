"""Differentially private top-h subspace discovery (seed 002, Section 5.1).

Source: Okada, Fukuchi, Kakizaki & Sakuma, "Differentially Private Analysis of
Outliers", Section 5.1, eq. (51), Theorem 7 and Algorithm 3.

Query: among candidate subspaces ``S`` (e.g. all ``c``-dimensional subspaces
``F_c``), find ``h`` containing many outliers (``q_subspace``, eq. 15) without
releasing any count.

Utility (eq. 51): ``u(X, S) = q_count(X, k, r, S) / GS_up(|S|)`` with the
public ``GS_up(|S|) = k K_|S| + 1`` (Theorem 4 with an upper bound on the
kissing number, *without* its ``min(N, .)``: the number ``N`` of validated
records is private and moves when a replaced raw row fails validation; issue
15, hole 7).  Since ``|q_count(X) - q_count(X')| <= GS_up(|S|)`` when ``X'``
replaces, adds or removes one record
(:mod:`dpcore.mechanisms.outlier_count`, "Neighbour relation"),
``Delta u <= 1`` (eq. 52) for every candidate, whatever its dimension.

Exponential-mechanism convention (DESIGN.md rule 5)
---------------------------------------------------
This module uses weights ``exp(eps' u / (2 Delta u))`` with ``Delta u = 1``
(McSherry-Talwar), which is ``eps'``-DP per draw; draws go through
:meth:`dpcore.noise.NoiseSource.exponential_mechanism` (OpenDP Gumbel
noisy-max).  The paper's Theorem 3/7 use the other convention, weights
``exp(eps u)``, which is ``2 eps Delta u``-DP; with that convention Algorithm 3
at "epsilon/h" per draw would cost ``2 epsilon``.  Here each of the ``h`` draws
runs at ``eps' = epsilon / h`` in the ``/(2 Delta u)`` convention, so the whole
of Algorithm 3 is ``epsilon``-DP by sequential composition, and
:meth:`TopSubspaceSelection.privacy_map` charges exactly ``(epsilon, 0)``.

Drawing without replacement: the ``j``-th draw runs the exponential mechanism
over the candidates not yet chosen.  This has exactly the distribution of
Algorithm 3's "repeat until r is not in R_h" loop (rejection sampling
conditions on the remaining set) without its unbounded retries.

Neighbour relation: one record of the validated table replaced, added or
removed (``Delta u <= 1`` for all three; charged as ``"replace-one"``, the
budget relation).  Notion ``dp`` (pure epsilon, delta = 0).  Each draw's
Gumbel scale ``2 Delta u / eps'`` is computed from the exact
``eps' = epsilon / h`` and rounded up by :mod:`dpcore.noise`.
"""
from __future__ import annotations

import itertools
import math
import numbers
from fractions import Fraction

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from .params import real_between
from ..noise import NoiseSource
from .neighbors import PointMultiset
from .outlier_count.global_sensitivity import public_global_sensitivity
from .outlier_count.query import _as_points, _check_k, _check_r, count_outliers, subspace_view

__all__ = ["candidate_subspaces", "TopSubspaceSelection"]


def candidate_subspaces(n_attributes: int, c: int) -> list[tuple[int, ...]]:
    """All ``c``-dimensional subspaces ``F_c`` of ``{0, ..., n_attributes - 1}``.

    Parameters
    ----------
    n_attributes : int
        Number of (public) numeric attributes, ``>= 1``.
    c : int
        Subspace dimension, ``1 <= c <= n_attributes``.

    Returns
    -------
    list of tuple of int
        Sorted index tuples in lexicographic order (``C(n, c)`` of them).

    Raises
    ------
    ValueError
        On out-of-range arguments.
    """
    for name, v in (("n_attributes", n_attributes), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if c > n_attributes:
        raise ValueError(f"c must be <= n_attributes ({n_attributes}), got {c}")
    return list(itertools.combinations(range(int(n_attributes)), int(c)))


class TopSubspaceSelection:
    """Algorithm 3: epsilon-DP top-h subspace discovery.

    Parameters
    ----------
    k : int
        Neighbour threshold ``>= 1`` (Definition 8).
    r : float
        Radius ``> 0`` (``dist_S`` units of the public-bounds scaled data).
    epsilon : float, int or Fraction
        Total ``epsilon > 0`` of the ``h`` draws.
    h : int
        Number of subspaces to select, ``1 <= h <= len(candidates)``.
    candidates : list of tuple of int
        Candidate subspaces (column-index tuples), distinct, non-empty.

    Notes
    -----
    * Input: ``X`` of shape ``(N, D)`` scaled to [0, 1] by public bounds, or
      the bounded-memory form: a dict mapping each candidate subspace (the
      tuple as in ``candidates``) to the
      :class:`~dpcore.mechanisms.neighbors.PointMultiset` of the records in that
      subspace's coordinates (:func:`~dpcore.mechanisms.outlier_count.subspace_view`
      of ``X``, aggregated: e.g. by ``GROUP BY`` in the warehouse).  Both give
      the same utilities; the dict holds only the distinct points of each
      candidate subspace, never the rows.
    * Output: an ordered list of ``h`` distinct candidate subspaces.
    * Neighbour relation: one record replaced, added or removed (module
      docstring; charged as ``neighbour = "replace-one"``); notion ``dp``;
      cost ``(epsilon, 0)`` (module docstring for the convention).
    * The constructor only stores; :meth:`validate` checks.
    """

    notion = "dp"
    neighbour = "replace-one"

    def __init__(self, k: int, r: float, epsilon, h: int, candidates: list[tuple[int, ...]]):
        self.k = k
        self.r = r
        self.epsilon = epsilon
        self.h = h
        self.candidates = candidates

    def validate(self) -> None:
        """Check the parameters.

        Raises
        ------
        ValueError
            Naming the parameter, its allowed range and how to fix it.
        """
        _check_k(self.k)
        _check_r(self.r)
        e = self.epsilon
        if not real_between(e, 0):
            raise ValueError(f"epsilon must be a finite number > 0 (got {e!r}); pass e.g. epsilon=0.8")
        try:
            cands = [tuple(int(i) for i in c) for c in self.candidates]
        except TypeError:
            raise ValueError("candidates must be a list of tuples of column indices") from None
        if not cands:
            raise ValueError("candidates must list at least one subspace; e.g. candidate_subspaces(n_attributes, 1)")
        for c in cands:
            if not c or len(set(c)) != len(c) or min(c) < 0:
                raise ValueError(f"candidate subspace {c!r} must be a non-empty tuple of distinct column indices >= 0")
        if len({tuple(sorted(c)) for c in cands}) != len(cands):
            raise ValueError("candidates contain the same subspace twice; list each subspace once")
        h = self.h
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise ValueError(f"h must be an integer >= 1 (got {h!r}); it is how many subspaces to select")
        if h > len(cands):
            raise ValueError(
                f"h={h} is larger than the number of candidate subspaces ({len(cands)}); "
                f"choose h <= {len(cands)} or add candidates"
            )

    @property
    def name(self) -> str:
        """str: ``top-h-subspaces-em``."""
        return "top-h-subspaces-em"

    def privacy_map(self) -> PrivacyCost:
        """True total cost of Algorithm 3: ``(epsilon, 0)``.

        ``h`` exponential-mechanism draws, each ``(epsilon/h)``-DP with weights
        ``exp((epsilon/h) u / (2 Delta u))``, ``Delta u <= 1``; sequential
        composition gives ``epsilon``.

        Returns
        -------
        PrivacyCost
        """
        self.validate()
        return PrivacyCost(self.epsilon, 0)

    def _check_X(self, X):
        if isinstance(X, dict):
            for c in self.candidates:
                ms = X.get(tuple(int(i) for i in c))
                if not isinstance(ms, PointMultiset) or ms.d != len(c):
                    raise ValueError(
                        f"X has no PointMultiset with {len(c)} columns for candidate subspace {tuple(c)}; give one "
                        "per candidate (its records in subspace coordinates)"
                    )
            return X
        A = _as_points(X, "X")
        top = max(max(c) for c in self.candidates)
        if top >= A.shape[1]:
            raise ValueError(f"candidate attribute {top} out of range: X has {A.shape[1]} columns")
        return A

    def utilities(self, X) -> np.ndarray:
        """``u(X, S) = q_count(S) / GS_up(|S|)`` per candidate (eq. 51).

        Parameters
        ----------
        X : array_like, shape (N, D), or dict of PointMultiset
            The records, or each candidate's distinct points (class Notes).

        Returns
        -------
        numpy.ndarray
            float64, shape ``(len(candidates),)``, each in ``[0, N/GS_up]``
            with the public ``GS_up = k K_|S| + 1``; ``Delta u <= 1``.  Exact:
            internal only.
        """
        self.validate()
        A = self._check_X(X)
        return np.array([self._utility(A, S) for S in self.candidates], dtype=np.float64)

    def _utility(self, A, S: tuple[int, ...]) -> float:
        gs_up = public_global_sensitivity(len(S), int(self.k))  # public: never min(N, .)
        XS = A[tuple(int(i) for i in S)] if isinstance(A, dict) else subspace_view(A, S)
        return float(count_outliers(XS, self.k, self.r) / gs_up)

    def utility_of(self, X, subspace: tuple[int, ...]) -> float:
        """``u(X, S)`` of one candidate (eq. 51): the unit a scale-out runner maps over.

        Parameters
        ----------
        X : array_like, shape (N, D), or dict of PointMultiset
            The records, or each candidate's distinct points (class Notes).
        subspace : tuple of int
            One of ``candidates``.

        Returns
        -------
        float
            Exactly the entry of :meth:`utilities` for ``subspace``. Internal only.
        """
        self.validate()
        S = tuple(int(i) for i in subspace)
        if S not in {tuple(c) for c in self.candidates}:
            raise ValueError(f"subspace {S} is not one of the candidates")
        return self._utility(self._check_X(X), S)

    @property
    def per_draw_epsilon(self) -> Fraction:
        """Fraction: ``epsilon / h`` exactly (the noise module rounds the scale ``2 / (epsilon / h)`` up)."""
        return exact(self.epsilon) / int(self.h)  # the ledger's reading of epsilon (decimal text of a float)

    def select(self, X, noise: NoiseSource, utilities=None) -> list[tuple[int, ...]]:
        """Algorithm 3: ``h`` draws without replacement at ``epsilon/h`` each.

        Parameters
        ----------
        X : array_like, shape (N, D), or dict of PointMultiset
            The records, or each candidate's distinct points (class Notes).
        noise : NoiseSource
        utilities : array_like, optional
            :meth:`utilities` of ``X`` computed elsewhere (e.g. one mapped
            task per candidate with :meth:`utility_of`); computed here if None.

        Returns
        -------
        list of tuple of int
            The selected subspaces in draw order.  ``epsilon``-DP.
        """
        if utilities is None:
            u = self.utilities(X)
        else:
            self.validate()
            u = np.asarray(utilities, dtype=np.float64)
            if u.shape != (len(self.candidates),) or not np.all(np.isfinite(u)):
                raise ValueError(f"utilities must be {len(self.candidates)} finite values, one per candidate")
        remaining = list(range(len(self.candidates)))
        chosen: list[tuple[int, ...]] = []
        for _ in range(int(self.h)):
            j = noise.exponential_mechanism(u[remaining], self.per_draw_epsilon, 1.0)
            chosen.append(tuple(self.candidates[remaining.pop(int(j))]))
        return chosen

    def selection_probabilities(self, X) -> np.ndarray:
        """Exact probabilities of the first draw (for audits).

        Returns
        -------
        numpy.ndarray
            ``p_j ∝ exp((epsilon/h) u_j / 2)``, shape ``(len(candidates),)``.
        """
        u = self.utilities(X)
        return NoiseSource.exponential_mechanism_probabilities(u, self.per_draw_epsilon, 1.0)

    def ordered_selection_probabilities(self, X, max_outcomes: int = 100_000) -> dict[tuple[int, ...], float]:
        """Exact probability of every ordered ``h``-tuple of candidate indices.

        Parameters
        ----------
        X : array_like, shape (N, D), or dict of PointMultiset
            The records, or each candidate's distinct points (class Notes).
        max_outcomes : int
            Refuse instances with more ordered tuples than this.

        Returns
        -------
        dict
            ``(j_1, ..., j_h) -> P(draws = j_1, ..., j_h)`` (indices into
            ``candidates``); sums to 1.

        Raises
        ------
        ValueError
            If there are more than ``max_outcomes`` ordered tuples.
        """
        u = self.utilities(X)
        m, h = len(u), int(self.h)
        if math.perm(m, h) > max_outcomes:
            raise ValueError(f"{math.perm(m, h)} ordered outcomes exceed max_outcomes={max_outcomes}")
        out: dict[tuple[int, ...], float] = {}
        for tup in itertools.permutations(range(m), h):
            p = 1.0
            remaining = list(range(m))
            for j in tup:
                probs = NoiseSource.exponential_mechanism_probabilities(u[remaining], self.per_draw_epsilon, 1.0)
                p *= probs[remaining.index(j)]
                remaining.remove(j)
            out[tup] = p
        return out
