"""Disjoint counts under the geometric (discrete Laplace) mechanism.

A histogram whose cells partition the records (each record in exactly one
cell) changes by at most 1 in L1 when one record is added or removed, so
adding double-geometric noise of scale ``1/epsilon`` to every cell is
epsilon-DP (the geometric mechanism of Ghosh et al.; the "Naive" building
block of Kuo et al., seed 004 part 2, slide "Naive Approach", with sensitivity
1 for a partition instead of 2 for count-of-counts).

Used by the foundation's ``record_counts`` step: the noisy number of accepted
and quarantined rows, so the *public* report can speak about data quality
while the exact counts stay with the data owner.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from ..noise import NoiseSource, conservative_scale


@dataclass(frozen=True)
class PartitionCounts:
    """Noisy counts of a partition of the records.

    Parameters
    ----------
    epsilon : float or Fraction
        Privacy parameter (> 0) of the whole histogram.

    Notes
    -----
    * Neighbour relation: add/remove one record.
    * Privacy notion: pure epsilon-DP (``dp``), delta = 0.
    * Privacy map: ``d_in`` added/removed records move the histogram by at
      most ``d_in`` in L1, so the cost is ``d_in * epsilon`` (group privacy).
    * Output: non-negative integers (post-processing by clamping at 0).
    """

    epsilon: float | Fraction

    name = "geometric-partition-counts"
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
        """Cost for neighbours at distance ``d_in`` (records added or removed)."""
        if d_in < 0:
            raise ValueError(f"d_in must be >= 0, got {d_in}")
        return PrivacyCost(self._eps() * d_in, 0)

    def release(self, counts: Mapping[str, int], noise: NoiseSource) -> dict[str, int]:
        """Noisy, clamped counts for each cell (the only output that may be published)."""
        eps = self._eps()
        names = list(counts)
        true = np.array([int(counts[n]) for n in names], dtype=np.int64)
        noisy = noise.discrete_laplace(true, scale=conservative_scale(1, eps))  # 1/eps rounded up
        return {n: int(max(v, 0)) for n, v in zip(names, noisy)}
