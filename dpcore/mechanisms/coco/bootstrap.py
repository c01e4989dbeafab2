"""Empirical accuracy of a released coco hierarchy: a parametric bootstrap from the release itself.

Issue 16 asks for an accuracy statement for every released number. For the
count-of-counts histograms the noise of each *measurement* is exact
(discrete Laplace, :meth:`CocoMechanism.noise_scale`), but the released cells
come out of non-linear post-processing (isotonic regression, rounding to
integers, top-down matching, or -- for the upper levels of bottom-up methods --
sums of many leaves) for which no useful proven per-cell bound exists. This
module gives a **clearly labelled empirical figure** instead.

Method (parametric bootstrap)
-----------------------------
1. Take the released leaf histograms as a stand-in truth ``H*`` (every leaf
   histogram sums to the leaf's public G_τ; every upper node of the stand-in
   world is the sum of its leaves, so ``H*`` is consistent).
2. ``replicates`` times: measure ``H*`` with the *same* mechanism (same
   representation, levels, ε per level and noise scale, Kuo et al. PVLDB 2018,
   slide "Geometric Mechanism"), run the same post-processing
   (:meth:`CocoMechanism.postprocess`), and record ``|Ĥ* - H*|`` on every cell
   that is non-zero in ``H*`` or ``Ĥ*`` (the cells a release table shows).
3. Per level: the ``1 - alpha`` quantile of those absolute cell errors
   (``method="higher"``: an observed value, never interpolated down), and the
   mean per-node L1 error.

Privacy: the inputs are the released histograms, the public hierarchy and
public group counts only, and the randomness is a fixed public seed, so the
figure is post-processing of the release (no charge) and anyone can recompute
it from the published table. It is an **estimate**, not a guarantee: it
describes the error the mechanism makes on data like the release, which is
close to, but not, the true data.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ...noise import NoiseSource
from .hierarchy import Hierarchy
from .mechanism import CocoMechanism
from .representations import level_H_matrix

__all__ = ["BootstrapError", "bootstrap_level_errors", "BOOTSTRAP_SEED"]

#: The public seed of the bootstrap's simulated noise (the figure is reproducible from the release).
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class BootstrapError:
    """Empirical error of one level's released cells (parametric bootstrap, module docstring).

    Attributes
    ----------
    level : int
    cell_half_width : int
        ``1 - alpha`` quantile of ``|Ĥ* - H*|`` over the shown cells of all
        nodes of the level and all replicates.
    mean_node_l1 : float
        Mean over nodes and replicates of ``sum_j |Ĥ*_j - H*_j|``.
    replicates : int
    alpha : float
    """

    level: int
    cell_half_width: int
    mean_node_l1: float
    replicates: int
    alpha: float


def _leaf_sizes(released: Mapping[str, np.ndarray], hierarchy: Hierarchy, K: int) -> dict[str, np.ndarray]:
    """The stand-in world's group sizes per leaf: ``H*_j`` groups of size ``j``."""
    sizes = np.arange(K + 1, dtype=np.int64)
    out = {}
    for leaf in hierarchy.leaves:
        H = np.asarray(released[leaf], dtype=np.int64)
        if H.shape != (K + 1,) or (H < 0).any():
            raise ValueError(f"released histogram of leaf {leaf!r} must be {K + 1} non-negative integers "
                             f"(got shape {H.shape})")
        out[leaf] = np.repeat(sizes, H)
    return out


def _level_matrix(hist: Mapping[str, np.ndarray], nodes: list[str]) -> np.ndarray:
    return np.stack([np.asarray(hist[n], dtype=np.int64) for n in nodes])


def bootstrap_level_errors(
    mech: CocoMechanism, hierarchy: Hierarchy, group_counts: Mapping[str, int],
    released: Mapping[str, np.ndarray], alpha: float, replicates: int, seed: int = BOOTSTRAP_SEED,
    progress: Callable[[int, int], None] | None = None,
) -> dict[int, BootstrapError]:
    """Per-level empirical error of the released cells (parametric bootstrap, module docstring).

    Parameters
    ----------
    mech : CocoMechanism
        The mechanism that made the release (method, ε per level, K).
    hierarchy : Hierarchy
        Public hierarchy.
    group_counts : dict[str, int]
        Public G_τ of every node.
    released : dict[str, numpy.ndarray]
        The released histogram of every node (only the leaves are read).
    alpha : float
        ``0 < alpha < 1``: the figure is the ``1 - alpha`` quantile.
    replicates : int
        ``>= 1`` bootstrap replicates (each one measurement + post-processing).
    seed : int
        Seed of the simulated noise (public; default :data:`BOOTSTRAP_SEED`).
    progress : callable, optional
        ``progress(done, replicates)`` after each replicate.

    Returns
    -------
    dict[int, BootstrapError]
        Level -> its empirical error, for every level of the hierarchy.

    Notes
    -----
    Post-processing of the release: no privacy cost, no private input.
    Cost in time: ``replicates`` times the measurement and post-processing
    of the release (vectorised per level).
    """
    if isinstance(replicates, bool) or not isinstance(replicates, numbers.Integral) or replicates < 1:
        raise ValueError(f"replicates must be an integer >= 1 (got {replicates!r})")
    if not (isinstance(alpha, numbers.Real) and 0 < float(alpha) < 1):
        raise ValueError(f"alpha must be a number with 0 < alpha < 1 (got {alpha!r})")
    K = int(mech.K)
    sizes = _leaf_sizes(released, hierarchy, K)
    levels = range(hierarchy.levels)
    # the stand-in truth of every node: the sum of its leaves' released histograms
    truth = {lv: level_H_matrix(sizes, hierarchy, K, lv) for lv in levels}
    noise = NoiseSource(seed=seed)
    errors: dict[int, list[np.ndarray]] = {lv: [] for lv in levels}
    l1: dict[int, list[float]] = {lv: [] for lv in levels}
    for rep in range(int(replicates)):
        measurements = {}
        for lv in mech.levels_measured(hierarchy):
            nodes, bounds, noisy = mech._measure_level_array(sizes, hierarchy, lv, noise)
            measurements[lv] = {n: noisy[bounds[i]:bounds[i + 1]] for i, n in enumerate(nodes)}
        est = mech.postprocess(measurements, hierarchy, group_counts)
        for lv in levels:
            E = _level_matrix(est, hierarchy.nodes_at(lv))
            T = truth[lv]
            diff = np.abs(E - T)
            errors[lv].append(diff[(E != 0) | (T != 0)])
            l1[lv].append(float(diff.sum(axis=1).mean()))
        if progress is not None:
            progress(rep + 1, int(replicates))
    out = {}
    for lv in levels:
        pooled = np.concatenate(errors[lv])
        q = int(np.quantile(pooled, 1 - float(alpha), method="higher")) if pooled.size else 0
        out[lv] = BootstrapError(lv, q, float(np.mean(l1[lv])), int(replicates), float(alpha))
    return out
