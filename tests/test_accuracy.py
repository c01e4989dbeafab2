"""Accuracy statements (issue 16, part 1): exact half-widths from the noise distributions, public bounds only."""
from __future__ import annotations

import math

import numpy as np
import pytest
import opendp.prelude as dp

from dpcore.mechanisms.accuracy import (
    check_alpha, discrete_laplace_difference_half_width, discrete_laplace_half_width, discrete_laplace_tail,
    exact_alpha, gaussian_half_width, interval_text, student_t2_half_width,
)
from dpcore.noise import NoiseSource

dp.enable_features("contrib")


def _exact_tail(s: float, t: int) -> float:
    """P(|Z| > t) by summing the pmf (independent of the closed form)."""
    q = math.exp(-1 / s)
    z = np.arange(t + 1, t + 1 + int(80 * s) + 50)
    return float(2 * ((1 - q) / (1 + q) * np.exp(-z / s)).sum())


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 7.0, 14.0, 20.0, 40.0])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.2])
def test_discrete_laplace_half_width_is_the_smallest_exact_cover(scale, alpha):
    t = discrete_laplace_half_width(scale, alpha)
    assert _exact_tail(scale, t) <= alpha * (1 + 1e-9)
    assert t == 0 or _exact_tail(scale, t - 1) > alpha
    assert discrete_laplace_tail(scale, t) == pytest.approx(_exact_tail(scale, t), rel=1e-9)
    # OpenDP's accuracy a has P(|Z| >= a) = alpha: the smallest integer cover is ceil(a) - 1
    a = dp.discrete_laplacian_scale_to_accuracy(float(scale), float(alpha))
    assert abs(t - (math.ceil(a) - 1)) <= 1


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_difference_half_width_covers_the_difference_of_two_draws(scale):
    alpha = 0.05
    t = discrete_laplace_difference_half_width(scale, alpha)
    one = discrete_laplace_half_width(scale, alpha)
    assert one < t < 2 * one + 1
    # the exact pmf of the difference, from a direct double sum
    q = math.exp(-1 / scale)
    z = np.arange(-int(60 * scale) - 20, int(60 * scale) + 21)
    p = (1 - q) / (1 + q) * np.exp(-np.abs(z) / scale)
    d = np.subtract.outer(z, z)
    w = np.multiply.outer(p, p)
    assert w[np.abs(d) > t].sum() <= alpha and w[np.abs(d) > t - 1].sum() > alpha
    # and a seeded simulation agrees
    rng = NoiseSource(seed=11)
    x = rng.discrete_laplace(np.zeros(40_000, dtype=np.int64), scale=scale)
    y = rng.discrete_laplace(np.zeros(40_000, dtype=np.int64), scale=scale)
    assert np.mean(np.abs(x - y) > t) < alpha + 0.006


def test_gaussian_half_width_and_text():
    assert gaussian_half_width(10.0, 0.05) == pytest.approx(19.5996, rel=1e-5)
    assert gaussian_half_width(10.0, 0.05) >= 10.0 * 1.959963984540054
    assert interval_text(1204, 37) == "1,204 (95%: 1,167 to 1,241)"
    assert interval_text(3.5, 1.25, 0.1) == "3.50 (90%: 2.25 to 4.75)"


def test_interval_text_clips_to_what_is_possible_and_says_when_the_noise_exceeds_the_count():
    # issue 32 section 4: "86 ± 134" showed negative counts
    assert interval_text(86, 134) == (
        "86 (95%: 0 to 220; the noise is larger than the count: 0 is within the interval)")
    assert interval_text(0, 5) == "0 (95%: 0 to 5; the noise is larger than the count: 0 is within the interval)"
    assert interval_text(500, 60, upper=520) == "500 (95%: 440 to 520)"  # a public upper bound clips the top
    assert interval_text(-3.5, 1.0, lower=None) == "-3.50 (95%: -4.50 to -2.50)"  # unbounded quantity
    assert "noise" not in interval_text(135, 134)
    for bad in (0, 1, -0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="alpha"):
            check_alpha(bad)


@pytest.mark.parametrize("kind", ["sp", "dp", "compiler"])
def test_aiq_public_error_bound_is_the_worst_case_over_all_inputs(kind):
    from dpcore.mechanisms.aiq import AnomalyIdentification

    m = AnomalyIdentification(4, 0.02, 0.3, k=2, mechanism=kind)
    worst = max(float(m.error_probability([b], [x])[0]) for b in range(0, 30) for x in range(0, b + 1))
    assert worst <= m.max_error_probability() <= worst * (1 + 1e-9)


def test_pcor_utility_shortfall_is_the_exponential_mechanism_bound():
    from dpcore.mechanisms.pcor.mechanism import PCORMechanism

    m = PCORMechanism("bfs", 0.2, n_samples=50, final_share=0.25)
    eps_f = 0.2 * 0.25
    assert m.final_candidates_bound() == 51
    assert m.utility_shortfall(0.05) == pytest.approx(2 / eps_f * (math.log(51) + math.log(20)), rel=1e-9)
    # the bound holds for the exact selection probabilities: P(u <= OPT - shortfall) <= alpha
    rng = np.random.default_rng(0)
    for _ in range(20):
        u = rng.integers(0, 3000, size=51).astype(float)
        p = NoiseSource.exponential_mechanism_probabilities(u, eps_f, 1.0)
        assert p[u < u.max() - m.utility_shortfall(0.05)].sum() <= 0.05


def test_one_exact_discrete_laplace_implementation_with_the_alpha_convention():
    """The 50-digit implementation (formerly duplicated in outlier_count with ``level``): alpha read exactly
    (0.05 is 1/20; a Fraction as is), t < 0 gives tail 1, a float scale at its binary value."""
    from fractions import Fraction

    assert exact_alpha(0.05) == Fraction(1, 20) and exact_alpha(Fraction(1, 3)) == Fraction(1, 3)
    assert discrete_laplace_half_width(14.0, 0.05) == discrete_laplace_half_width(14.0, Fraction(1, 20)) == 42
    assert discrete_laplace_tail(14.0, -1) == 1.0
    assert discrete_laplace_tail(Fraction(14), 42) == discrete_laplace_tail(14.0, 42) <= 0.05
    for bad in (0, 1.2, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            discrete_laplace_half_width(14.0, bad)
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_half_width(-1.0, 0.05)


def test_student_t2_half_width_is_exact():
    """Smallest h with P(|round(cZ)| <= h) = y / sqrt(2 + y^2) >= 1 - alpha, y = (h + 1/2) / c (T_2 CDF)."""
    from fractions import Fraction

    for c in (Fraction(1, 3), Fraction(1), Fraction(297, 10), Fraction(10**6, 7)):
        for alpha in (0.01, 0.05, 0.2):
            h = student_t2_half_width(c, alpha)

            def cover(hh):
                y = (hh + 0.5) / float(c)
                return y / math.sqrt(2 + y * y)

            assert cover(h) >= 1 - alpha - 1e-12 and (h == 0 or cover(h - 1) < 1 - alpha + 1e-12)
    with pytest.raises(ValueError, match="scale"):
        student_t2_half_width(0, 0.05)

