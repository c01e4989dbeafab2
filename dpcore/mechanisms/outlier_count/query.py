"""The query: distances, degrees and the outlier count (seed 002, Section 3.1-3.2).

Source: Okada, Fukuchi, Kakizaki & Sakuma, "Differentially Private Analysis of
Outliers" (the paper); section/equation numbers are the paper's.

Records are real vectors scaled to [0, 1] by the spec's *public* bounds
(:func:`dpcore.mechanisms.neighbors.scale_by_bounds`).  In subspace ``S`` the distance is
``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)`` (Section 3.1);
:func:`subspace_view` returns coordinates in which plain Euclidean distance is
``dist_S``.  ``N_S(X, r, x)`` (Definition 7, eq. 12) are the *other* records
within ``r`` (closed ball; duplicates are distinct records and count), and
``x`` is an outlier when ``|N_S| < k`` (Definition 8, eq. 13).
``q_count = |O_S(X, k, r)|`` (eq. 14).

Every count runs on the distinct points weighted by their multiplicities
(:class:`dpcore.mechanisms.neighbors.PointMultiset`; an array of records is aggregated
first): a record's degree is the number of copies of the points within ``r``
of its point minus one, the same for every copy (issue 21).  Ball membership
uses the closed ball as evaluated by :func:`dpcore.mechanisms.neighbors.ball_counts`.

Every function here returns exact statistics that must stay in the warehouse
(DESIGN.md rule 6).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from dpcore.mechanisms.neighbors import PointMultiset, _as_matrix, ball_counts

__all__ = ["subspace_view", "neighbour_counts", "count_outliers"]


def _as_points(XS, name: str = "XS") -> np.ndarray:
    """Records as a finite float64 ``(N, d)`` array with ``d >= 1``.

    The shared check of :func:`dpcore.mechanisms.neighbors._as_matrix` (one definition
    for the data checks of seeds 001 and 002).
    """
    return _as_matrix(XS, name, min_cols=1)


def _multiset(XS, name: str = "XS") -> PointMultiset:
    """``XS`` as distinct points with multiplicities (:class:`dpcore.mechanisms.neighbors.PointMultiset`).

    An array of records is aggregated (records with the same coordinates have
    the same degree); a :class:`PointMultiset` (e.g. aggregated in the
    warehouse) is used as it is.  Every count below runs on this form, so the
    in-memory array and the warehouse aggregate give the same numbers.
    """
    if isinstance(XS, PointMultiset):
        if XS.points.ndim != 2 or XS.points.shape[1] < 1:
            raise ValueError(f"{name} must have d >= 1 columns")
        return XS
    return PointMultiset.of_rows(_as_points(XS, name), name)


def _dimension(XS) -> int:
    """Number of coordinates ``d = |S|`` of records given as an array or a :class:`PointMultiset`."""
    return XS.d if isinstance(XS, PointMultiset) else _as_points(XS).shape[1]


def _point_degrees(ms: PointMultiset, r: float, cap: int | None = None) -> np.ndarray:
    """``deg`` (eq. 19) of each distinct point's records: copies within ``r``, minus the record itself."""
    if cap is None:
        return ball_counts(ms.points, ms.points, r, weights=ms.weights) - 1
    return ball_counts(ms.points, ms.points, r, weights=ms.weights, cap=int(cap) + 1) - 1


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(
            f"k must be an integer >= 1 (got {k!r}); it is the neighbour threshold of Definition 8, "
            "a record with fewer than k neighbours within r is an outlier, e.g. k=3"
        )
    return int(k)


def _check_r(r) -> float:
    ok = not isinstance(r, bool) and isinstance(r, numbers.Real) and math.isfinite(float(r)) and float(r) > 0
    if not ok:
        raise ValueError(
            f"r must be a finite number > 0 (got {r!r}); give the radius in the dist_S units of the "
            "public-bounds scaled data, e.g. r=0.13"
        )
    return float(r)


def subspace_view(X, subspace) -> np.ndarray:
    """Coordinates of ``X`` in subspace ``S`` scaled so Euclidean = ``dist_S``.

    Parameters
    ----------
    X : array_like, shape (N, D)
        Records already scaled to [0, 1] by the spec's *public* bounds.
    subspace : sequence of int
        Distinct column indices ``S`` (non-empty).

    Returns
    -------
    numpy.ndarray
        ``X[:, S] / sqrt(|S|)``, shape ``(N, |S|)``, float64: the Euclidean
        distance between rows equals ``dist_S`` of Section 3.1.

    Raises
    ------
    ValueError
        On an empty, duplicated or out-of-range subspace.
    """
    A = _as_points(X, "X")
    S = [int(i) for i in subspace]
    if not S:
        raise ValueError("subspace must name at least one attribute")
    if len(set(S)) != len(S):
        raise ValueError(f"subspace has repeated attributes: {S}")
    bad = [i for i in S if i < 0 or i >= A.shape[1]]
    if bad:
        raise ValueError(f"subspace attribute(s) {bad} out of range 0..{A.shape[1] - 1}")
    return A[:, S] / math.sqrt(len(S))


def neighbour_counts(XS, r, cap: int | None = None) -> np.ndarray:
    """``deg(x) = |N(X, r, x)|`` (eq. 19): other records within ``r``.

    Parameters
    ----------
    XS : array_like, shape (N, d), or PointMultiset
        Records in subspace coordinates (:func:`subspace_view`), or their
        distinct points with multiplicities.
    r : float
        Radius ``> 0`` (closed ball).
    cap : int or None
        ``None``: exact.  An int ``c >= 0``: saturating, ``min(deg, c)``
        (faster on dense data; a value ``< c`` is exact).

    Returns
    -------
    numpy.ndarray
        int64, shape ``(N,)`` (one per record; for a PointMultiset one per
        distinct point, the degree of each of its records).  The record itself
        is excluded; duplicates of it are other records and count.

    Notes
    -----
    Counted over the distinct points weighted by multiplicity
    (:func:`dpcore.mechanisms.neighbors.ball_counts` with ``weights``): memory and time
    grow with the distinct points, not with the records.
    """
    r = _check_r(r)
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 0:
            raise ValueError(f"cap must be None or an int >= 0, got {cap!r}")
    if isinstance(XS, PointMultiset):
        return _point_degrees(_multiset(XS), r, cap)
    ms, inverse = PointMultiset.of_rows(_as_points(XS), "XS", return_inverse=True)
    return _point_degrees(ms, r, cap)[inverse]


def count_outliers(XS, k, r) -> int:
    """``q_count`` (eq. 14): records with fewer than ``k`` neighbours within ``r``.

    Parameters
    ----------
    XS : array_like, shape (N, d), or PointMultiset
        Records in subspace coordinates, or their distinct points with
        multiplicities.
    k : int
        ``>= 1``.
    r : float
        ``> 0``.

    Returns
    -------
    int
        ``|O_S(X, k, r)|`` (Definition 8): the multiplicities of the points
        whose records have fewer than ``k`` neighbours.  Exact; never release
        it raw.
    """
    k = _check_k(k)
    ms = _multiset(XS)
    deg = _point_degrees(ms, _check_r(r), k)
    return int(ms.weights[deg < k].sum())
