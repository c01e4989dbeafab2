"""Kissing numbers K_d for d = 1..24 (lower and upper bounds).

The kissing number K_d is the largest number of non-overlapping unit balls in
R^d that can touch one central unit ball.  Seed 002 (Okada et al., Section 4.1,
Theorem 4, eq. (18)) bounds the global sensitivity of the outlier count by
``min(N, k K_d + 1)``; every *privacy-critical* use must therefore take an
**upper** bound on K_d (:func:`kissing_upper`).

Sources
-------
* Exact values: K_1 = 2, K_2 = 6 (trivial), K_3 = 12 (Schuette & van der
  Waerden 1953), K_4 = 24 (Musin 2008, Annals of Math. 168), K_8 = 240 and
  K_24 = 196560 (Odlyzko & Sloane 1979; Levenshtein 1979).
* Upper bounds for the other d: H. D. Mittelmann and F. Vallentin, "High
  accuracy semidefinite programming bounds for kissing numbers", Experimental
  Math. 19 (2010) 174-178, Table 1 (the paper's reference [19]), rounded down
  to integers.  Later work (Machado & de Oliveira Filho 2018; de Laat &
  Leijenhorst 2024; see H. Cohn's kissing-number table and OEIS A257479) only
  *lowered* some of them by a few units (e.g. d = 10: 554 -> 553), so these
  older values are still valid upper bounds -- slightly conservative, which is
  the safe direction for privacy.
* Lower bounds (used only for reporting / the GS lower bound of Fig. 1, never
  for privacy): the classical constructions in Conway & Sloane, "Sphere
  Packings, Lattices and Groups", 3rd ed., Table 1.5, and OEIS A257479
  (40, 72, 126, 240, 306, 500, ...).  Newer constructions (e.g. Cohn & Li 2024
  for d = 17..21, Ganzhinov 2022 for d = 10, 11, 14) raised several lower
  bounds; the older, smaller values used here are still valid lower bounds.
"""
from __future__ import annotations

import numbers

__all__ = ["KISSING_NUMBER_BOUNDS", "kissing_upper", "kissing_lower"]

#: d -> (lower, upper) bound on the kissing number K_d.  lower == upper exactly
#: where K_d is known (d = 1, 2, 3, 4, 8, 24).
KISSING_NUMBER_BOUNDS: dict[int, tuple[int, int]] = {
    1: (2, 2),
    2: (6, 6),
    3: (12, 12),
    4: (24, 24),
    5: (40, 44),
    6: (72, 78),
    7: (126, 134),
    8: (240, 240),
    9: (306, 364),
    10: (500, 554),
    11: (582, 870),
    12: (840, 1357),
    13: (1130, 2069),
    14: (1582, 3183),
    15: (2564, 4866),
    16: (4320, 7355),
    17: (5346, 11072),
    18: (7398, 16572),
    19: (10668, 24812),
    20: (17400, 36764),
    21: (27720, 54584),
    22: (49896, 82340),
    23: (93150, 124416),
    24: (196560, 196560),
}


def _check_d(d) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"dimension d must be an integer >= 1, got {d!r}")
    return int(d)


def kissing_upper(d: int) -> int:
    """Upper bound on the kissing number K_d (safe for privacy accounting).

    Parameters
    ----------
    d : int
        Dimension ``>= 1``.

    Returns
    -------
    int
        The table's upper bound for ``d <= 24``; for ``d > 24`` the elementary
        volume bound ``3**d - 1`` (the ``K_d`` touching balls of radius 1 and
        the central one are disjoint and lie in the ball of radius 3).

    Raises
    ------
    ValueError
        If ``d`` is not an integer ``>= 1``.
    """
    d = _check_d(d)
    if d in KISSING_NUMBER_BOUNDS:
        return KISSING_NUMBER_BOUNDS[d][1]
    return 3**d - 1


def kissing_lower(d: int) -> int:
    """Lower bound on K_d (reporting only; never use it for privacy).

    Parameters
    ----------
    d : int
        Dimension ``>= 1``.

    Returns
    -------
    int
        The table's lower bound for ``d <= 24``; ``2 d`` (the cross-polytope
        configuration) beyond.
    """
    d = _check_d(d)
    if d in KISSING_NUMBER_BOUNDS:
        return KISSING_NUMBER_BOUNDS[d][0]
    return 2 * d
