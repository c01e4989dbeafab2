"""Tests for DP top-h subspace discovery (seed 002, Section 5.1, Algorithm 3)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.outlier_count import count_outliers, global_sensitivity_bounds, subspace_view
from dpcore.mechanisms.subspace import TopSubspaceSelection, candidate_subspaces
from dpcore.noise import NoiseSource


def _tiny():
    return np.array([[0.1, 0.1, 0.9], [0.12, 0.5, 0.9], [0.14, 0.9, 0.1], [0.5, 0.11, 0.12], [0.9, 0.13, 0.5]])


def test_candidate_subspaces():
    assert candidate_subspaces(3, 1) == [(0,), (1,), (2,)]
    assert len(candidate_subspaces(10, 2)) == 45
    with pytest.raises(ValueError):
        candidate_subspaces(3, 4)


def test_utilities_are_scaled_counts():
    X = _tiny()
    cands = candidate_subspaces(3, 1) + candidate_subspaces(3, 2)
    m = TopSubspaceSelection(1, 0.05, 1.0, 2, cands)
    u = m.utilities(X)
    for j, S in enumerate(cands):
        q = count_outliers(subspace_view(X, S), 1, 0.05)
        assert u[j] == pytest.approx(q / global_sensitivity_bounds(len(S), 1)[1])  # public bound, no N (issue 15)



def test_per_candidate_utilities_and_precomputed_selection_match_the_whole():
    """What a scale-out runner maps (one utility per candidate) gives the same utilities, and
    selecting from them draws exactly what select() draws with the same noise."""
    X = _tiny()
    cands = candidate_subspaces(3, 1) + candidate_subspaces(3, 2)
    m = TopSubspaceSelection(1, 0.05, 1.0, 2, cands)
    u = m.utilities(X)
    mapped = [m.utility_of(X, S) for S in cands]
    assert mapped == list(u)
    for seed in range(5):
        assert m.select(X, NoiseSource(seed=seed), utilities=mapped) == m.select(X, NoiseSource(seed=seed))
    with pytest.raises(ValueError, match="not one of the candidates"):
        m.utility_of(X, (0, 1, 2))
    with pytest.raises(ValueError, match="one per candidate"):
        m.select(X, NoiseSource(seed=0), utilities=mapped[:-1])

def _neighbours(X, rng, n):
    grid = np.linspace(0, 1, 11)
    for _ in range(n):
        Y = X.copy()
        Y[rng.integers(len(X))] = rng.choice(grid, size=X.shape[1])
        yield Y


@pytest.mark.parametrize("h", [1, 2, 3])
def test_exact_probabilities_ratio_within_charged_epsilon(h):
    """Ordered h-tuple probabilities on neighbours differ by at most e^epsilon (the charged total)."""
    X = _tiny()
    eps = 2.0
    cands = candidate_subspaces(3, 1) + candidate_subspaces(3, 2)
    m = TopSubspaceSelection(1, 0.1, eps, h, cands)
    assert m.privacy_map() == PrivacyCost(eps, 0)
    p = m.ordered_selection_probabilities(X)
    assert sum(p.values()) == pytest.approx(1.0)
    first = m.selection_probabilities(X)
    assert first.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(h)
    worst = 0.0
    for Y in _neighbours(X, rng, 60):
        p2 = m.ordered_selection_probabilities(Y)
        for key in p:
            worst = max(worst, abs(math.log(p[key]) - math.log(p2[key])))
        f2 = m.selection_probabilities(Y)
        assert np.all(np.abs(np.log(first) - np.log(f2)) <= eps / h + 1e-12)
    assert worst <= eps + 1e-12
    assert worst > 0  # the neighbours do move the distribution


def test_selection_follows_the_exact_distribution():
    X = _tiny()
    m = TopSubspaceSelection(1, 0.1, 3.0, 1, candidate_subspaces(3, 1))
    probs = m.selection_probabilities(X)
    noise = NoiseSource(seed=11)
    n = 1200
    counts = np.zeros(3)
    for _ in range(n):
        (S,) = m.select(X, noise)
        counts[S[0]] += 1
    assert np.all(np.abs(counts / n - probs) < 0.05)


def test_select_draws_without_replacement():
    X = _tiny()
    cands = candidate_subspaces(3, 1)
    m = TopSubspaceSelection(1, 0.1, 1.0, 3, cands)
    out = m.select(X, NoiseSource(seed=3))
    assert sorted(out) == cands


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(h=4), "larger than the number of candidate"),
        (dict(h=0), "h must"),
        (dict(k=0), "k must"),
        (dict(r=0.0), "r must"),
        (dict(epsilon=-1), "epsilon"),
        (dict(candidates=[]), "at least one"),
        (dict(candidates=[(0,), (0,), (1,)]), "twice"),
    ],
)
def test_validate_errors(kwargs, word):
    args = dict(k=3, r=0.1, epsilon=1.0, h=2, candidates=candidate_subspaces(3, 1))
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        TopSubspaceSelection(**args).validate()
