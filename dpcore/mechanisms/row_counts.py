"""Noisy numbers of input rows and accepted rows, private on *raw* input rows.

DESIGN.md rule 5 states the neighbour relation on raw input rows: validation
must not let one raw row move more than the mechanism assumes. Adding or
removing one raw row changes

* the number of input rows by exactly 1;
* the number of accepted (validated) rows by at most 1: the new row is
  accepted (+1), rejected (0), or shares its record id with an accepted row,
  which the ``unique`` rule then rejects together with it (-1); a third row
  with the same id changes nothing.

So the vector (accepted rows, input rows) has L1 sensitivity 2 under add/remove
of one raw row, and discrete Laplace noise of scale ``2 / epsilon`` on each cell
is epsilon-DP (the geometric mechanism of Ghosh et al.; the "Naive" building
block of Kuo et al., seed 004 part 2, with the sensitivity of this query). The
number of quarantined rows is published as post-processing, never measured on
its own: the pair (accepted, quarantined) would have L1 sensitivity 3 (one
added duplicate id moves an accepted row to quarantine together with itself).

Consistency (issue 32 section 4, post-processing, no privacy cost): the truth
satisfies ``0 <= accepted <= input``, the two noisy draws need not.
:func:`consistent_counts` publishes counts that do: when the noisy accepted
count exceeds the noisy input count both are replaced by their mean rounded
down (the isotonic projection of the pair onto ``accepted <= input``, rounded
to an integer between the two), then each is clamped at 0, and quarantined
rows = input - accepted (>= 0 by construction).  What this does to the
accuracy statements (proved in :func:`consistent_counts`, checked exactly in
``tests/test_record_counts_consistent.py``):

* accepted and input: each shown value is within ``max(|Z_1|, |Z_2|)`` of its
  truth (``Z_1``, ``Z_2`` the two draws), so a (1 - alpha) interval for each
  cell, and for both at once, uses the half-width of one draw at alpha / 2;
* quarantined: the shown value is within ``|Z_2 - Z_1|`` of the truth, except
  when clamping a negative accepted count (``Z_1 < 0``) at 0 lowered it, where
  it is within ``-Z_2``; the half-width is the smallest ``T`` with
  ``P(|Z_2 - Z_1| > T) + P(Z_1 < 0) P(Z_2 < -T) <= alpha``
  (:func:`dpcore.steps.record_counts.quarantined_half_width`).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from ..noise import NoiseSource, conservative_scale

#: L1 sensitivity of (accepted rows, input rows) under add/remove of one raw row (module docstring).
L1_SENSITIVITY = 2


@dataclass(frozen=True)
class InputRowCounts:
    """Noisy (accepted rows, input rows) and the derived quarantined rows.

    Parameters
    ----------
    epsilon : float or Fraction
        Privacy parameter (> 0) of the pair.

    Notes
    -----
    * Neighbour relation: add/remove one raw input row.
    * Privacy notion: pure epsilon-DP (``dp``), delta = 0.
    * Privacy map: ``d_in`` raw rows added or removed move the pair by at most
      ``2 d_in`` in L1; the noise scale is ``2 / epsilon``, so the cost is
      ``d_in * epsilon``.
    * Output: non-negative integers with ``accepted_rows <= input_rows``;
      ``quarantined_rows = input_rows - accepted_rows`` (:func:`consistent_counts`,
      post-processing).
    """

    epsilon: float | Fraction

    name = "geometric-input-row-counts"
    notion = "dp"
    neighbour = "add-remove"

    def _eps(self) -> Fraction:
        try:
            eps = exact(self.epsilon)
        except (TypeError, ValueError):
            eps = Fraction(-1)
        if eps <= 0:
            raise ValueError(f"epsilon must be > 0 (got {self.epsilon!r}); pass e.g. epsilon=0.1")
        return eps

    def privacy_map(self, d_in: int = 1) -> PrivacyCost:
        """Cost for neighbours at distance ``d_in`` (raw rows added or removed)."""
        if d_in < 0:
            raise ValueError(f"d_in must be >= 0, got {d_in}")
        return PrivacyCost(self._eps() * d_in, 0)

    def noise_scale(self) -> float:
        """Discrete Laplace scale ``2 / epsilon`` rounded up to a float (never less noise than stated)."""
        return conservative_scale(L1_SENSITIVITY, self._eps())

    def release(self, accepted: int, input_rows: int, noise: NoiseSource) -> dict[str, int]:
        """The only noisy call: ``{"accepted_rows", "input_rows", "quarantined_rows"}``, consistent.

        Two discrete Laplace draws, then :func:`consistent_counts` (post-processing).
        """
        noisy = noise.discrete_laplace(np.array([int(accepted), int(input_rows)], dtype=np.int64), self.noise_scale())
        return consistent_counts(int(noisy[0]), int(noisy[1]))


def consistent_counts(noisy_accepted: int, noisy_input: int) -> dict[str, int]:
    """Post-process two noisy counts so that ``0 <= accepted <= input`` and quarantined = input - accepted.

    Parameters
    ----------
    noisy_accepted, noisy_input : int
        The two released draws ``a' = a + Z_1`` and ``n' = n + Z_2`` (any integers).

    Returns
    -------
    dict
        ``accepted_rows`` ``a''``, ``input_rows`` ``n''`` and ``quarantined_rows``
        ``n'' - a''``: if ``a' > n'`` both become ``m = floor((a' + n') / 2)``
        (the isotonic projection, rounded; ``n' <= m <= a'``), then each is
        clamped at 0.

    Notes
    -----
    Accuracy, for every truth ``0 <= a <= n`` (``q = n - a``):

    * ``|a'' - a| <= max(|Z_1|, |Z_2|)`` and the same for ``n''``.  Without
      pooling this is clear. With pooling, if ``m >= a`` then
      ``m - a <= a' - a``; if ``m < a`` then ``a - m <= a - n' <= n - n'`` (as
      ``a <= n``); symmetrically for ``n``. Clamping at 0 only moves a value
      towards a truth ``>= 0``.
    * ``|q'' - q| > T`` only if ``|Z_2 - Z_1| > T`` or (``Z_1 < 0`` and
      ``Z_2 < -T``). Before clamping the value is ``q' = n' - a'`` or, when
      pooled (``q' < 0 <= q``), 0, closer to ``q``. Clamping only lowers it:
      when pooled to a negative mean both become 0 and a miss needs
      ``q > T > q'``, i.e. ``Z_2 - Z_1 < -T``; when not pooled and only
      ``a' < 0`` (so ``Z_1 < 0``) it becomes ``max(n', 0)`` and
      ``q - q'' <= n - n' = -Z_2``.

    So one draw's half-width at ``alpha / 2`` covers each of accepted and
    input (and both at once) with probability ``>= 1 - alpha``, and
    :func:`dpcore.steps.record_counts.quarantined_half_width` covers
    quarantined (:func:`dpcore.steps.record_counts.record_counts_accuracy`).
    """
    a, n = int(noisy_accepted), int(noisy_input)
    if a > n:
        a = n = (a + n) // 2
    a, n = max(a, 0), max(n, 0)
    return {"accepted_rows": a, "input_rows": n, "quarantined_rows": n - a}
