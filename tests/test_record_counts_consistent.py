"""Consistent record counts (issue 32, section 4): accepted <= input, quarantined = input - accepted >= 0,
and the stated intervals hold for the shown counts, checked exactly over the joint noise distribution."""
from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dpcore.publish.bundle import StepOutput
from dpcore.mechanisms.row_counts import InputRowCounts, consistent_counts
from dpcore.steps.record_counts import record_counts_accuracy, rejected_fraction_gate


class _FixedNoise:
    """Adds fixed offsets (the two draws) instead of random noise: a test double of NoiseSource."""

    def __init__(self, z1: int, z2: int):
        self.z = np.array([z1, z2], dtype=np.int64)

    def discrete_laplace(self, values, scale):
        return np.asarray(values, dtype=np.int64) + self.z


@pytest.mark.parametrize("true_acc, true_in, z1, z2", [
    (28_185, 28_185, 4, 0),     # the issue's report: accepted 28,189 above input 28,185
    (40, 60, 50, -30),          # far apart: accepted 90 > input 30
    (0, 0, 3, -10),             # pooled mean negative: both clamp to 0
    (0, 40, -3, 0),             # accepted negative, input positive
    (5, 5, -9, -7),             # both negative
])
def test_released_counts_are_consistent(true_acc, true_in, z1, z2):
    out = InputRowCounts(0.5).release(true_acc, true_in, _FixedNoise(z1, z2))
    assert 0 <= out["accepted_rows"] <= out["input_rows"]
    assert out["quarantined_rows"] == out["input_rows"] - out["accepted_rows"] >= 0


def test_the_issue_example_is_pooled_to_the_rounded_mean():
    assert consistent_counts(28_189, 28_185) == {"accepted_rows": 28_187, "input_rows": 28_187, "quarantined_rows": 0}
    assert consistent_counts(90, 30) == {"accepted_rows": 60, "input_rows": 60, "quarantined_rows": 0}
    assert consistent_counts(-3, 40) == {"accepted_rows": 0, "input_rows": 40, "quarantined_rows": 40}
    assert consistent_counts(12, 30) == {"accepted_rows": 12, "input_rows": 30, "quarantined_rows": 18}


def _dl_pmf(scale: float, M: int) -> tuple[np.ndarray, float]:
    q = np.exp(-1.0 / scale)
    z = np.arange(-M, M + 1)
    pmf = (1 - q) / (1 + q) * q ** np.abs(z)
    return pmf, max(1.0 - float(pmf.sum()), 0.0)


@pytest.mark.parametrize("epsilon, alpha", [(2.0, 0.05), (0.8, 0.05), (0.8, 0.2), (Fraction(1, 2), 0.1)])
def test_stated_coverage_holds_exactly_for_every_truth_on_a_grid(epsilon, alpha):
    """For every 0 <= a <= n <= 14: P(|shown - true| > stated half-width) <= alpha for each cell, where the
    probability is summed over the joint (Z_1, Z_2) pmf on [-M, M]^2 and all mass outside counts as a miss.
    The post-processing is the real :func:`consistent_counts`, tabulated once over every noisy pair."""
    mech = InputRowCounts(epsilon)
    s = mech.noise_scale()
    acc = record_counts_accuracy(mech, alpha)
    t_a, t_n, t_q = acc["accepted_rows"].bound, acc["input_rows"].bound, acc["quarantined_rows"].bound
    M = int(np.ceil(40 * s))
    pmf, lost_one = _dl_pmf(s, M)
    joint = np.multiply.outer(pmf, pmf)  # [z1, z2]
    lost = 2 * lost_one  # mass with |Z_1| > M or |Z_2| > M: counted as a miss
    N = 14
    lo, hi = -M, N + M
    vals = np.arange(lo, hi + 1)
    table = np.empty((len(vals), len(vals), 3), dtype=np.int64)  # shown (a'', n'', q'') per noisy (a', n')
    for i, ap in enumerate(vals):
        for j, np_ in enumerate(vals):
            c = consistent_counts(int(ap), int(np_))
            table[i, j] = (c["accepted_rows"], c["input_rows"], c["quarantined_rows"])
    worst = {"accepted_rows": 0.0, "input_rows": 0.0, "quarantined_rows": 0.0, "both": 0.0}
    for n in range(N + 1):
        for a in range(n + 1):
            shown = table[a - M - lo: a + M - lo + 1, n - M - lo: n + M - lo + 1]  # [z1, z2] window
            miss_a = np.abs(shown[..., 0] - a) > t_a
            miss_n = np.abs(shown[..., 1] - n) > t_n
            miss_q = np.abs(shown[..., 2] - (n - a)) > t_q
            assert (shown[..., 0] <= shown[..., 1]).all() and (shown >= 0).all()
            for k, miss in (("accepted_rows", miss_a), ("input_rows", miss_n), ("quarantined_rows", miss_q),
                            ("both", miss_a | miss_n)):
                worst[k] = max(worst[k], float(joint[miss].sum()) + lost)
    for k, p in worst.items():
        assert p <= alpha, (k, p, alpha)


def test_quarantined_half_width_adds_only_the_clamping_event():
    """The quarantined half-width is the difference's, enlarged only by the chance Z_1 < 0 and Z_2 < -T."""
    from dpcore.mechanisms.accuracy import discrete_laplace_difference_half_width
    from dpcore.steps.record_counts import quarantined_half_width

    for eps in (0.1, 0.8, 2.0):
        s = InputRowCounts(eps).noise_scale()
        for alpha in (0.05, 0.1):
            t = quarantined_half_width(s, alpha)
            assert discrete_laplace_difference_half_width(s, alpha) <= t <= discrete_laplace_difference_half_width(
                s, alpha / 2)


def test_rejected_fraction_gate_reads_the_consistent_counts():
    spec = SimpleNamespace(steps=SimpleNamespace(validation=SimpleNamespace(max_rejected_fraction=0.05),
                                                 record_counts=SimpleNamespace(epsilon=0.1)))
    # a table as stored by an older version: its quarantined cell is not input - accepted
    table = pd.DataFrame({"cell": ["accepted_rows", "input_rows", "quarantined_rows"], "noisy_count": [10, 100, 95]})
    msg = rejected_fraction_gate(spec, StepOutput("record_counts", {"counts": table}, ""))
    assert msg is not None and "90 of 100 rows" in msg
    table = pd.DataFrame({"cell": ["accepted_rows", "input_rows", "quarantined_rows"], "noisy_count": [110, 100, 0]})
    assert rejected_fraction_gate(spec, StepOutput("record_counts", {"counts": table}, "")) is None
