"""The global sensitivity of ``q_count`` (seed 002, Theorem 4, eq. 18).

``q_count`` changes by at most ``G = k K_d^up + 1`` when one record is
replaced, added or removed (:mod:`dpcore.mechanisms.outlier_count`, "Neighbour
relation and privacy notion"), with ``K_d^up`` the upper bound on the kissing
number of :mod:`dpcore.mechanisms.kissing`.  ``G`` is a function of the public
``d = |S|`` and ``k`` only: Theorem 4's ``min(N, .)`` is never used, since the
number ``N`` of validated records is private (issue 15, hole 7).

*Sensitivity under add/remove* (``deg`` = degrees in ``X``).  Removing ``z``:
``q(X \ z) - q(X) = #{y in B(z, r), y != z, deg(y) = k} - [deg(z) < k]``;
adding ``z``: ``q(X + z) - q(X) = [z outlier in X + z] - #{y in B(z, r):
deg(y) = k - 1}``.  The two terms have opposite signs, so
``|Delta q| <= max(1, |B(z, r) ∩ V(k)|)`` resp. ``max(1, |B(z, r) ∩ V(k-1)|)``:
at most ``max(1, E(V(k)), E(V(k-1))) <= U(0)``
(:mod:`~dpcore.mechanisms.outlier_count.smooth_bound`), and at most ``k K_d`` by Theorem 4's packing argument (the flipped records lie within
``r`` of ``z`` and have at most ``k`` neighbours counting ``z``), so ``<= G``.
Replace is a removal then an addition: Theorems 4-5 as in the paper.
"""
from __future__ import annotations

import numbers

from ..kissing import kissing_upper

__all__ = ["global_sensitivity_bounds", "public_global_sensitivity"]


def global_sensitivity_bounds(d: int, k: int, N: int | None = None) -> tuple[int, int]:
    """Theorem 4 (eq. 18): bounds on the global sensitivity of ``q_count``.

    Parameters
    ----------
    d : int
        Dimension of the subspace (``|S|``), ``>= 1``.
    k : int
        Neighbour threshold, ``>= 1``.
    N : int or None
        Number of records, ``>= 1``, for the paper's statement
        ``min(N, .)``; ``None`` (what every mechanism here uses) omits the
        ``min(N, .)``.  **N of a validated table is private** (it moves when a
        replaced row fails validation), so no privacy-relevant quantity may use
        it (issue 15, hole 7): pass ``N`` only for reporting and tests.

    Returns
    -------
    (int, int)
        ``(2 d k + 1, k K_d + 1)`` (each ``min``-ed with ``N`` when given)
        where ``K_d`` is the table's **upper** bound on the kissing number (so
        the second entry is a valid upper bound on ``GS``, for replace-one
        *and* add/remove-one neighbours; in d = 1 both equal ``2k + 1``).

    Raises
    ------
    ValueError
        On non-integer or non-positive arguments.
    """
    args = (("d", d), ("k", k)) + ((("N", N),) if N is not None else ())
    for name, v in args:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    d, k = int(d), int(k)
    lo, up = 2 * d * k + 1, k * kissing_upper(d) + 1
    if N is None:
        return lo, up
    return min(int(N), lo), min(int(N), up)


def public_global_sensitivity(d: int, k: int) -> int:
    """``GS_up = k K_d^up + 1``: the public upper bound on ``GS`` of ``q_count``.

    A function of the public parameters ``d = |S|`` and ``k`` only.  It bounds
    ``|q_count(X) - q_count(X')|`` for every ``X'`` obtained from ``X`` by
    replacing, adding or removing one record (:mod:`dpcore.mechanisms.outlier_count`, "Neighbour
    relation"); unlike Theorem 4's ``min(N, .)`` it never depends on the
    private number of validated records.
    """
    return global_sensitivity_bounds(d, k)[1]
