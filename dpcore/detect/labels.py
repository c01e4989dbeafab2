r"""A filter's labels: its top :math:`K` records by score, ties by lower row (in memory).

Seed 004 part 1 ("Detecting Outliers with Correlated Measures"), slide
"Parameters Learning": a filter flags its top :math:`K=\lfloor\sum_i t_i\rfloor`
records by the outlier score :math:`t_i`
(:class:`~dpcore.detect.robust_em.RobustRegressionDetector` ranks by the
posterior log-odds, a strictly increasing function of :math:`t_i`). The
labels are those of a stable sort by descending score cut at :math:`K`,
chosen by a threshold (issue 29), not a full sort. The streamed fit labels
the same pairs from a score file (:mod:`dpcore.detect.kth_pair`). Split out
of :mod:`dpcore.detect.robust_em` (issue 49). Scores and labels are internal:
nothing here logs or warns.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["top_k_labels"]


def top_k_labels(scores: np.ndarray, K: int) -> tuple[np.ndarray, float]:
    """Labels of the top ``K`` scores, ties by lower row, and the ``K``-th score (``inf`` when ``K = 0``).

    Slide "Parameters Learning": the filter labels its top :math:`K` records.
    Chosen by a threshold (issue 29), not a full sort: the ``K``-th largest
    score ``thr`` by ``np.partition`` (O(n)), every score above it, and of the
    scores equal to it the first ``K - #{score > thr}`` rows. The labels are
    those of a stable sort by descending score cut at ``K``. Scores are never NaN
    (finite inputs; the detector's module docstring).

    Parameters
    ----------
    scores : ndarray of shape (n,)
    K : int
        ``0 <= K <= n``.

    Returns
    -------
    labels : ndarray of int64, shape (n,)
    threshold : float
    """
    n = scores.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    if K <= 0:
        return labels, math.inf
    thr = float(-np.partition(-scores, K - 1)[K - 1])
    above = scores > thr
    labels[above] = 1
    ties = np.flatnonzero(scores == thr)[: K - int(above.sum())]
    labels[ties] = 1
    return labels, thr
