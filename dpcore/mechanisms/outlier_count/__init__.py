"""Differentially private count of distance-based outliers in a subspace.

Source: seed 002, Okada, Fukuchi, Kakizaki & Sakuma, "Differentially Private
Analysis of Outliers" (the paper).  Section/equation/theorem numbers in this package
are the paper's.

Modules
-------
* :mod:`~dpcore.mechanisms.outlier_count.query`: the query (Section 3.1-3.2):
  ``dist_S``, degrees (eq. 19) and ``q_count`` (eq. 14), on distinct points
  with multiplicities.
* :mod:`~dpcore.mechanisms.outlier_count.global_sensitivity`: Theorem 4's
  public bound ``G = k K_d^up + 1`` and the sensitivity under add/remove.
* :mod:`~dpcore.mechanisms.outlier_count.enclosing`: Algorithm 1 (the largest
  subset enclosable in a ball of radius ``r``) and its relaxation above the
  size limit.
* :mod:`~dpcore.mechanisms.outlier_count.smooth_bound`: the beta-smooth upper
  bound ``S(X)`` (Theorems 5-6, Algorithm 2, Propositions 1-2).
* :mod:`~dpcore.mechanisms.outlier_count.methods`: the count methods (Theorems
  1-2, the discrete Laplace, Bun & Steinke's Student's T and concentrated-DP
  noise) and why each is private.
* :mod:`~dpcore.mechanisms.outlier_count.mechanism`:
  :class:`OutlierCountMechanism`, the release and its public accuracy statement, and ``method: auto``
  (:func:`choose_method`, public parameters only, from those statements).

Every public name of these modules is re-exported here; import from this package.

Neighbour relation and privacy notion
-------------------------------------
The paper uses replace one record with ``N`` fixed (Section 2:
``H(X, X') = 1``, ``|X| = |X'| = N``).  In the pipeline ``X`` is the
*validated* table: a raw row replaced by one that fails validation is a
**removal** from it, a quarantined raw row replaced by a valid one an
**addition**, and ``N`` (the number of validated records) is private.  So
this implementation never uses ``N`` (the public bound
``G = k K_d^up + 1`` replaces Theorem 4's ``min(N, k K_d + 1)``: issue 15,
hole 7) and its guarantee is stated for the union relation

    X ~ X'  iff  X' is X with one record replaced, added or removed,

``neighbour = "replace-one"`` in the ledger (the budget relation it is charged
under; the union contains replace-one, so the charge is not smaller than the
guarantee needs).  Notion ``dp``: (epsilon, delta)-differential privacy
(Definition 1).  One release costs ``(epsilon, delta)``
(:meth:`OutlierCountMechanism.privacy_map`).  Not covered at that cost: a raw
replacement that changes *two* validated records (it creates or resolves a
duplicate record id, which quarantines every row sharing it): such pairs are
at distance 2 and get group privacy ``(2 epsilon, (1 + e^epsilon) delta)``.
The sensitivity argument under add/remove is in
:mod:`~dpcore.mechanisms.outlier_count.global_sensitivity`, the smooth bound's
in :mod:`~dpcore.mechanisms.outlier_count.smooth_bound`.

Nothing in this package except :meth:`OutlierCountMechanism.release` is
private: all other functions return exact statistics that must stay in the
warehouse (DESIGN.md rule 6).
"""
from __future__ import annotations

from ..kissing import KISSING_NUMBER_BOUNDS, kissing_lower, kissing_upper
from .enclosing import DEFAULT_NODE_LIMIT, ExactSearchLimitError, algorithm1, enclosable, max_enclosable, \
    relaxed_enclosable_bound
from .global_sensitivity import global_sensitivity_bounds, public_global_sensitivity
from .mechanism import BETA_SLACK, CI_LEVEL, OutlierCountMechanism, choose_method
from .methods import CDP_METHODS, GAUSSIAN_METHODS, METHODS, PURE_METHODS, SMOOTH_METHODS, SPEC_METHODS, \
    STUDENT_T_SHIFT_SHARE
# the private checks too: they were imported from the single module before the split
from .query import _as_points, _check_k, _check_r, count_outliers, neighbour_counts, subspace_view


__all__ = [
    "KISSING_NUMBER_BOUNDS",
    "kissing_upper",
    "kissing_lower",
    "global_sensitivity_bounds",
    "public_global_sensitivity",
    "subspace_view",
    "neighbour_counts",
    "count_outliers",
    "enclosable",
    "algorithm1",
    "max_enclosable",
    "relaxed_enclosable_bound",
    "ExactSearchLimitError",
    "OutlierCountMechanism",
    "METHODS",
    "SPEC_METHODS",
    "CDP_METHODS",
    "choose_method",
]
