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
number of quarantined rows is published as post-processing
(noisy input - noisy accepted, clamped at 0), never measured on its own: the
pair (accepted, quarantined) would have L1 sensitivity 3 (one added duplicate
id moves an accepted row to quarantine together with itself).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..budget import PrivacyCost, exact
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
    * Output: non-negative integers; ``quarantined_rows`` is post-processing.
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
        """The only noisy call: ``{"accepted_rows", "input_rows", "quarantined_rows"}``."""
        noisy = noise.discrete_laplace(np.array([int(accepted), int(input_rows)], dtype=np.int64), self.noise_scale())
        acc, total = (max(int(v), 0) for v in noisy)
        return {"accepted_rows": acc, "input_rows": total, "quarantined_rows": max(total - acc, 0)}
