"""dpcore.mechanisms.normal_quantile.ndtri returns scipy's doubles (the accuracy statements must not move by an ulp)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtri as scipy_ndtri

from dpcore.mechanisms.accuracy import gaussian_half_width
from dpcore.mechanisms.normal_quantile import ndtri


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_bit_identical_to_scipy_over_the_whole_range():
    rng = np.random.default_rng(20261127)
    ys = np.concatenate([
        rng.random(50_000),                        # the central and both tail branches
        10.0 ** -rng.uniform(0, 300, 20_000),      # far lower tail (z >= 8 branch)
        1.0 - 10.0 ** -rng.uniform(0, 16, 5_000),  # upper tail
        [0.025, 0.05, 0.005, 0.5, math.exp(-2), 1 - math.exp(-2), 5e-324, 1e-320],
    ])
    bad = [(y, scipy_ndtri(y), ndtri(y)) for y in ys if not _same(float(scipy_ndtri(y)), ndtri(y))]
    assert not bad, bad[:5]


@pytest.mark.parametrize("y, want", [(0.0, -math.inf), (1.0, math.inf), (-0.1, math.nan), (1.5, math.nan),
                                     (math.nan, math.nan)])
def test_edges(y, want):
    assert _same(ndtri(y), want) and _same(float(scipy_ndtri(y)), want)


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.01, 0.2, 1e-6])
def test_gaussian_half_width_unchanged(alpha):
    """The stated half-width is what scipy's quantile gave (rounded up as before)."""
    from dpcore.noise import upper_float

    for sigma in (0.5, 1.0, 3.7, 1234.5):
        assert gaussian_half_width(sigma, alpha) == upper_float(upper_float(float(-scipy_ndtri(alpha / 2))) * sigma)
