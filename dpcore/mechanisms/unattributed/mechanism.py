"""Differentially private unattributed histograms (seed 004, last part; issue 17).

Problem (seed 004, slide "Problem Formulation"; Hay, Rastogi, Miklau & Suciu,
VLDB 2010, Section 4)
-----------------------------------------------------------------------------
Input: the sizes of ``G`` groups (a table grouped by a column), ``G >= 1``
non-negative integers in any order.  ``G`` is **public** (e.g. from a public
roster of groups, like coco's groups file); the labels of the groups are
dropped.  Output: a DP estimate that is itself an unattributed histogram:
``G`` non-negative integers sorted in **non-increasing** order (and ``<= K``
when the public size bound ``K`` is given).  Error: L1 and L2 distance to the
true sorted vector.

Neighbour relation and privacy notion
-------------------------------------
``neighbour = "add-remove"``: one item (one row of the grouped table) is added
to or removed from one group.  The group count ``G`` does not change (the
roster is public), so exactly one entry of the sorted vector changes by one
(adding to a group of size ``j`` turns the *first* entry equal to ``j`` of the
non-increasing vector into ``j + 1`` and the vector stays sorted).  The L1
sensitivity of the three representations of seed 004 (slide "Convenient
Views"; :mod:`dpcore.mechanisms.coco.representations`) is

* ``H_g`` (the sorted sizes, length ``G``): **1**;
* ``H_c`` (cumulative count of counts, ``H_c[i] = #groups of size <= i``,
  length ``K + 1``): **1** (only ``H_c[j]`` changes);
* ``H`` (count of counts, ``H[i] = #groups of size i``, length ``K + 1``):
  **2** (``H[j]`` and ``H[j + 1]`` change by one each).

The data domain is the vectors with entries in ``[0, K]`` when ``K`` is given
(a neighbour leaving the domain is not a neighbour: sizes above ``K`` are
refused, not clipped).  Notion ``dp``: pure ``epsilon``-DP, ``delta = 0``, for
every method (:meth:`UnattributedHistogramMechanism.privacy_map`).  All noise
is exact discrete Laplace (geometric mechanism, Ghosh-Roughgarden-Sundararajan
2009; slide "Geometric Mechanism") from :class:`dpcore.noise.NoiseSource` with
scales from :func:`dpcore.noise.conservative_scale` (sensitivity / epsilon
rounded up, never less noise than the analysis assumes).  Every step after the
noisy measurements is post-processing of them and of public ``G``, ``K``.

Methods (:data:`METHODS`)
-------------------------
* ``naive``: discrete Laplace of scale ``1/epsilon`` on the sorted vector, then
  clipped at 0 (and ``K``); no consistency step.  It is sorted at the end only
  because the output type is an unattributed histogram (sorting is a
  contraction in every Lp norm, so it never increases the error).
* ``hg_l2``, ``hg_l1``: Hay et al. 2010 (slide "Unattributed Histogram H_g"):
  noise of scale ``1/epsilon`` on the sorted vector, isotonic regression
  (L2: pool-adjacent violators with block means; L1: with block medians,
  :func:`dpcore.mechanisms.coco.isotonic`), clipped to ``[0, K]``, rounded half up.
* ``hc_l2``, ``hc_l1``: slide "Cumulative Sum Histograms H_c": noise of scale
  ``1/epsilon`` on ``H_c`` (length ``K + 1``), isotonic regression with
  ``H_c[K] = G`` (:func:`dpcore.mechanisms.coco.hc_estimate`), back to ``H``
  and to the sorted sizes.  Needs ``size_bound``.
* ``pfl``: Blocki-Datta-Bonneau 2016 (module :mod:`.pfl`, the whole mechanism).
* ``hmm_forward_backward``, ``hmm_viterbi``: Lin & Kifer 2013: noise of scale
  ``1/epsilon`` on the sorted vector (here), then the HMM estimate of module
  :mod:`.hmm` (post-processing).
* ``dawa_*``, ``ahp_*``, ``hbtree_*`` on the representation ``h`` (``H``),
  ``hg`` (``H_g``), ``hc`` (``H_c``): the range-query algorithms of
  :mod:`.range_algorithms` (slide "How We Use Algorithms for Other Problems")
  followed by that representation's consistency step (``H``: projection onto
  ``{>= 0, sum = G}`` and largest-remainder rounding,
  :func:`dpcore.mechanisms.coco.naive_estimate`; ``H_g`` and ``H_c``: L2 isotonic
  regression as for ``hg_l2`` / ``hc_l2``).  ``*_h`` and ``*_hc`` need ``size_bound``.

``auto`` is resolved by :func:`choose_method` from public parameters only.
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from dpcore.mechanisms.accuracy import check_alpha, discrete_laplace_half_width
from dpcore.budget.amounts import PrivacyCost, exact
from ...noise import NoiseSource, conservative_scale
from ..coco.consistency import hc_estimate, naive_estimate, round_half_up
from ..coco.isotonic import isotonic
from ..coco.representations import from_hg, to_hc, to_hg

__all__ = ["UnattributedHistogramMechanism", "METHODS", "REPRESENTATION_METHODS", "NEEDS_SIZE_BOUND",
           "choose_method", "accuracy", "as_sorted_sizes", "SENSITIVITY"]

#: Every method of the study (``auto`` is resolved by :func:`choose_method`).
METHODS = (
    "naive", "hg_l2", "hg_l1", "hc_l2", "hc_l1", "pfl", "hmm_forward_backward", "hmm_viterbi",
    "dawa_h", "dawa_hg", "dawa_hc", "ahp_h", "ahp_hg", "ahp_hc", "hbtree_h", "hbtree_hg", "hbtree_hc",
)

#: Methods that run a range-query algorithm on one representation: method -> (algorithm, representation).
REPRESENTATION_METHODS = {
    f"{alg}_{rep}": (alg, rep) for alg in ("dawa", "ahp", "hbtree") for rep in ("h", "hg", "hc")
}

#: Methods that need the public size bound ``K`` (their vector has length ``K + 1``).
NEEDS_SIZE_BOUND = ("hc_l2", "hc_l1", "dawa_h", "dawa_hc", "ahp_h", "ahp_hc", "hbtree_h", "hbtree_hc")

#: L1 sensitivity of each representation under add/remove one item (module docstring).
SENSITIVITY = {"h": 2, "hg": 1, "hc": 1}


def _check_epsilon(epsilon) -> Fraction:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (numbers.Real, str)):
        raise ValueError(f"epsilon must be a finite number > 0 (allowed range (0, inf)), got {epsilon!r}")
    if isinstance(epsilon, float) and not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a finite number > 0 (allowed range (0, inf)), got {epsilon!r}")
    try:
        f = exact(epsilon)
    except (TypeError, ValueError, ArithmeticError):
        raise ValueError(f"epsilon must be a finite number > 0 (allowed range (0, inf)), got {epsilon!r}") from None
    if not f > 0:
        raise ValueError(f"epsilon must be > 0 (allowed range (0, inf)), got {epsilon!r}")
    return f


def _check_size_bound(size_bound) -> int | None:
    if size_bound is None:
        return None
    if isinstance(size_bound, bool) or not isinstance(size_bound, numbers.Integral) or size_bound < 1:
        raise ValueError(f"size_bound must be None or an integer >= 1 (the public largest group size K), "
                         f"got {size_bound!r}")
    return int(size_bound)


def _check_G(G) -> int:
    if isinstance(G, bool) or not isinstance(G, numbers.Integral) or G < 1:
        raise ValueError(f"G must be an integer >= 1 (the public number of groups), got {G!r}")
    return int(G)


def as_sorted_sizes(sizes, size_bound: int | None = None) -> np.ndarray:
    """Check the private group sizes and sort them non-increasing.

    Parameters
    ----------
    sizes : array_like
        Group sizes, any order: a 1-d vector of ``G >= 1`` non-negative
        integers (an integer dtype, or floats whose values are integers).
    size_bound : int, optional
        Public bound ``K``: every size must be ``<= K``.

    Returns
    -------
    numpy.ndarray
        int64, sorted non-increasing, length ``G``.

    Raises
    ------
    ValueError
        Empty or non-1-d vector, NaN or infinite entries, non-integer values,
        negative sizes, a size above ``size_bound``.  The messages never show
        a value, a position or a count of the data (DESIGN.md rule 6); the
        condition itself depends on the data, so a pipeline must check the
        input against the public spec before charging (rule 8).
    """
    a = np.asarray(sizes)
    if a.ndim != 1:
        raise ValueError(f"sizes must be a 1-d vector of group sizes (got an array with {a.ndim} dimensions)")
    if a.size == 0:
        raise ValueError("sizes must not be empty: G >= 1 group sizes are needed")
    kind = a.dtype.kind
    if kind == "b" or kind not in "iuf":
        raise ValueError(f"sizes must be non-negative integers (got dtype {a.dtype})")
    if kind == "f":
        if np.isnan(a).any():
            raise ValueError("sizes must be non-negative integers: NaN found")
        if not np.isfinite(a).all():
            raise ValueError("sizes must be non-negative integers: an infinite value found")
        if (a != np.floor(a)).any():
            raise ValueError("sizes must be non-negative integers: a non-integer value found")
        if (np.abs(a) > 2.0 ** 53).any():
            raise ValueError("sizes must be integers below 2**53 when given as floats")
    if (a < 0).any():
        raise ValueError("sizes must be non-negative integers: a negative size found")
    if kind == "u" and a.max() > np.iinfo(np.int64).max:
        raise ValueError("sizes must fit in int64")
    out = a.astype(np.int64)
    if size_bound is not None and (out > size_bound).any():
        raise ValueError(f"sizes must be <= size_bound={size_bound} (the public largest group size K): a larger "
                         "size found; raise size_bound in the spec or cap group sizes at K before the release")
    return np.sort(out)[::-1].copy()


class UnattributedHistogramMechanism:
    """Release a sorted (unattributed) histogram of group sizes under pure epsilon-DP.

    Seed 004, last part (module docstring); one class for every method of
    :data:`METHODS`.

    Parameters
    ----------
    method : str
        One of :data:`METHODS` (``"auto"``: resolve it first with
        :func:`choose_method`).
    epsilon : float, str or Fraction
        Total privacy budget of one release, ``> 0`` (floats are read through
        their decimal text, as the ledger does).
    size_bound : int, optional
        Public largest group size ``K >= 1``.  Required by
        :data:`NEEDS_SIZE_BOUND` (their vector has length ``K + 1``); for the
        others it clips the output to ``[0, K]``.
    groups : int, optional
        Public number of groups ``G``.  Only ``pfl`` uses it: its exact
        chain is run at ``epsilon_2 - 2 eta`` with a float slack ``eta`` that
        grows with ``G`` (:func:`.pfl.pfl_plan`; the charge is pure
        ``epsilon`` whatever ``G``); without it the plan for the public
        maximum :data:`.pfl.PFL_MAX_GROUPS` is checked, and a release with
        another ``G`` than given is refused.

    Notes
    -----
    Input: ``G`` group sizes (``G`` public).  Output: ``G`` non-negative
    integers sorted non-increasing.  Neighbours: one item added to or removed
    from one group (one entry of the sorted vector changes by one).  Notion:
    ``dp``, pure ``epsilon``-DP, ``delta = 0`` (:meth:`privacy_map`), for
    every method (``pfl`` included: its chain is sampled exactly).
    The constructor only stores; :meth:`validate` checks.
    """

    notion = "dp"
    neighbour = "add-remove"

    def __init__(self, method: str, epsilon, size_bound: int | None = None, groups: int | None = None):
        self.method = method
        self.epsilon = epsilon
        self.size_bound = size_bound
        self.groups = groups

    # ----------------------------------------------------------- metadata
    def validate(self) -> None:
        """Check the parameters.

        Raises
        ------
        ValueError
            ``method`` not in :data:`METHODS` (``"auto"`` gets a hint to
            :func:`choose_method`); ``epsilon`` not a finite number in
            ``(0, inf)``; ``size_bound`` not ``None`` or an integer ``>= 1``;
            ``size_bound`` missing for a method of :data:`NEEDS_SIZE_BOUND`.
        """
        if not isinstance(self.method, str) or self.method not in METHODS:
            hint = (" ('auto' is resolved first: method = choose_method(epsilon, G, size_bound, metric))"
                    if self.method == "auto" else "")
            raise ValueError(f"method must be one of {', '.join(METHODS)} (got {self.method!r}){hint}")
        _check_epsilon(self.epsilon)
        K = _check_size_bound(self.size_bound)
        if K is None and self.method in NEEDS_SIZE_BOUND:
            raise ValueError(f"size_bound (the public largest group size K) is required by method={self.method!r}: "
                             "it works on a vector of length K + 1 (count of counts H or its cumulative H_c); "
                             "give size_bound as an integer >= 1")

    def params(self) -> dict[str, Any]:
        """Public parameters: ``{"method", "epsilon", "size_bound"}`` (epsilon as a float)."""
        return {"method": self.method, "epsilon": float(_check_epsilon(self.epsilon)), "size_bound": self.size_bound}

    @property
    def name(self) -> str:
        """str: ``unattributed-`` + the method with ``-`` for ``_`` (e.g. ``unattributed-hg-l1``)."""
        return f"unattributed-{str(self.method).replace('_', '-')}"

    @property
    def epsilon_exact(self) -> Fraction:
        """Fraction: the total epsilon, exact (decimal text of a float)."""
        return _check_epsilon(self.epsilon)

    def privacy_map(self, d_in: int = 1) -> PrivacyCost:
        """Cost of one release for neighbours at distance ``d_in`` (OpenDP style privacy map).

        Parameters
        ----------
        d_in : int
            Number of items added or removed (``>= 0``); 1 for the neighbour
            relation of the module docstring.

        Returns
        -------
        PrivacyCost
            ``(d_in * epsilon, 0)``: every method is pure epsilon-DP for one
            item (its noisy measurements' ``sensitivity / scale`` sum to at
            most ``epsilon``; :meth:`measurement_plan`), and group privacy
            gives ``d_in * epsilon``.  ``pfl`` too (:func:`.pfl.pfl_cost`:
            its two stages sum to ``epsilon`` and its chain is sampled
            exactly, so no ``delta``; ``G`` = ``groups`` is checked).
        """
        self.validate()
        if isinstance(d_in, bool) or not isinstance(d_in, numbers.Integral) or d_in < 0:
            raise ValueError(f"d_in must be an integer >= 0 (items added or removed), got {d_in!r}")
        if self.method == "pfl":  # pure (eps, 0) for one item (its plan checked for G); group privacy k eps
            from .pfl import PFL_MAX_GROUPS, pfl_cost
            one = pfl_cost(self.epsilon_exact, self.groups or PFL_MAX_GROUPS, self.size_bound)
            return PrivacyCost(one.epsilon * int(d_in), 0)  # one.delta == 0: the chain is sampled exactly
        return PrivacyCost(self.epsilon_exact * int(d_in), 0)

    @property
    def cost(self) -> PrivacyCost:
        """PrivacyCost: :meth:`privacy_map` at ``d_in = 1``, what the ledger charges."""
        return self.privacy_map(1)

    def measurement_plan(self, G: int) -> list:
        """The noisy measurements of one release on ``G`` groups, from public parameters only.

        Parameters
        ----------
        G : int
            Public number of groups.

        Returns
        -------
        list of :class:`.range_algorithms.Stage`
            ``(name, epsilon share, L1 sensitivity, discrete Laplace scale)`` in
            drawing order; the shares sum exactly to ``epsilon``.  One stage
            (``H_g`` or ``H_c``, sensitivity 1, scale ``1/epsilon`` rounded up)
            for ``naive``, ``hg_*``, ``hc_*``, ``hmm_*``;
            :func:`.range_algorithms.plan` for ``dawa_*``, ``ahp_*``, ``hbtree_*``.

        Raises
        ------
        ValueError
            For ``pfl`` (an exponential mechanism, not discrete Laplace
            measurements: see :mod:`.pfl`).
        """
        from .range_algorithms import Stage, plan
        self.validate()
        G = _check_G(G)
        eps = self.epsilon_exact
        m = self.method
        if m == "pfl":
            raise ValueError("measurement_plan is not defined for method='pfl' (an exponential mechanism; see pfl.py)")
        if m in REPRESENTATION_METHODS:
            alg, rep = REPRESENTATION_METHODS[m]
            return plan(alg, G if rep == "hg" else int(self.size_bound) + 1, SENSITIVITY[rep], eps)
        rep = "H_c" if m.startswith("hc_") else "H_g"
        return [Stage(f"noisy {rep}", eps, 1, conservative_scale(1, eps))]

    def noise_scale(self) -> float:
        """Discrete Laplace scale of the single-measurement methods: ``Δ / epsilon`` rounded up.

        ``Δ = 1`` (``H_g`` or ``H_c``) for ``naive``, ``hg_*``, ``hc_*``,
        ``hmm_*``.  Other methods split epsilon (:mod:`.range_algorithms`).
        """
        self.validate()
        if self.method not in ("naive", "hg_l2", "hg_l1", "hc_l2", "hc_l1", "hmm_forward_backward", "hmm_viterbi"):
            raise ValueError(f"noise_scale is defined for the single-measurement methods only (method={self.method!r})")
        return conservative_scale(1, self.epsilon_exact)

    # ------------------------------------------------------------ release
    def release(self, sizes, noise: NoiseSource) -> np.ndarray:
        """Release the private sorted histogram (charge :attr:`cost` first).

        Parameters
        ----------
        sizes : array_like of int
            **Private** group sizes, any order, length ``G >= 1``,
            non-negative integers (``<= size_bound`` when given).
        noise : NoiseSource
            The project's noise source (DESIGN.md rule 3); every draw is one
            of its ``discrete_laplace`` calls (or PFL's own sampler calls).

        Returns
        -------
        numpy.ndarray
            int64, length ``G``, non-negative, sorted non-increasing,
            ``<= size_bound`` when given.  ``epsilon``-DP under add/remove
            one item (module docstring).

        Raises
        ------
        ValueError
            Bad parameters (:meth:`validate`) or bad sizes (:func:`as_sorted_sizes`).
        """
        self.validate()
        K = self.size_bound
        x = as_sorted_sizes(sizes, K)
        G = x.size
        eps = self.epsilon_exact
        m = self.method
        if m == "pfl":  # the whole mechanism (Blocki-Datta-Bonneau 2016), epsilon passed exact
            from .pfl import pfl_release
            if self.groups is not None and G != self.groups:
                raise ValueError(f"groups={self.groups} was given (it sets pfl's plan) but {G} sizes were "
                                 "passed; pass the public number of groups")
            return _finish(pfl_release(x, eps, noise, K), G, K)
        if m in ("naive", "hg_l2", "hg_l1", "hmm_forward_backward", "hmm_viterbi"):
            scale = conservative_scale(1, eps)
            y = noise.discrete_laplace(x, scale)  # H_g measurement, L1 sensitivity 1
            if m == "naive":
                return _finish(y, G, K)
            if m.startswith("hmm_"):
                from .hmm import hmm_estimate
                return _finish(hmm_estimate(y, scale, K, m[len("hmm_"):]), G, K)
            return hg_postprocess(y, K, m[-2:])
        if m in ("hc_l2", "hc_l1"):
            Hc = to_hc(from_hg(x, K))
            y = noise.discrete_laplace(Hc, conservative_scale(1, eps))  # H_c measurement, L1 sensitivity 1
            return hc_postprocess(y, G, m[-2:])
        alg, rep = REPRESENTATION_METHODS[m]
        from .range_algorithms import estimate_vector
        vec = representation_vector(x, rep, K)
        est = estimate_vector(alg, vec, SENSITIVITY[rep], eps, noise)
        return representation_postprocess(est, rep, G, K)


# ------------------------------------------------------------------ helpers
def representation_vector(x_desc: np.ndarray, rep: str, K: int | None) -> np.ndarray:
    """The vector of one representation of the sorted sizes (private; internal).

    ``"hg"``: the sizes sorted **ascending** (coco's H_g, length G);
    ``"h"``: count of counts (length K + 1); ``"hc"``: its cumulative sums.
    """
    if rep == "hg":
        return np.ascontiguousarray(x_desc[::-1])
    H = from_hg(x_desc, K)
    return H if rep == "h" else to_hc(H)


def _finish(y, G: int, K: int | None) -> np.ndarray:
    """Clip to ``[0, K]`` and sort non-increasing (int64, length G)."""
    y = np.asarray(y)
    if y.shape != (G,):
        raise ValueError(f"internal error: estimate has shape {y.shape}, expected ({G},)")
    y = np.clip(y.astype(np.int64), 0, K if K is not None else None)
    return np.sort(y)[::-1].copy()


def hg_postprocess(y_desc, K: int | None, loss: str) -> np.ndarray:
    """H_g consistency (Hay et al. 2010; slide "Unattributed Histogram H_g", steps 3-4).

    Isotonic regression of the noisy sorted sizes (``loss`` ``"l1"`` or
    ``"l2"``) onto non-increasing vectors in ``[0, K]`` (computed ascending
    by :func:`dpcore.mechanisms.coco.isotonic` on the reversed vector),
    rounded half up.  Post-processing.

    Returns
    -------
    numpy.ndarray
        int64 non-increasing, length ``len(y_desc)``.
    """
    y = np.asarray(y_desc, dtype=np.float64)[::-1]
    fit, _ = isotonic(y, loss, lo=0.0, hi=None if K is None else float(K))
    return _finish(round_half_up(fit)[::-1], y.size, K)


def hc_postprocess(y_hc, G: int, loss: str) -> np.ndarray:
    """H_c consistency (slide "Cumulative Sum Histograms H_c", steps 3-4) then back to sorted sizes.

    :func:`dpcore.mechanisms.coco.hc_estimate` (isotonic with ``H_c[K] = G``,
    rounded) gives ``H``; the sizes are ``to_hg(H)`` reversed.  Post-processing.
    """
    H = hc_estimate(np.asarray(y_hc, dtype=np.float64), G, loss)
    K = H.size - 1
    return _finish(to_hg(H)[::-1], G, K)


def representation_postprocess(est, rep: str, G: int, K: int | None) -> np.ndarray:
    """The consistency step of one representation (slide "How We Use Algorithms for Other Problems").

    ``"h"``: least-squares projection onto ``{H >= 0, sum H = G}`` and
    largest-remainder rounding (:func:`dpcore.mechanisms.coco.naive_estimate`),
    then the sizes; ``"hg"``: L2 isotonic regression of the ascending sizes
    (:func:`hg_postprocess`); ``"hc"``: :func:`hc_postprocess` with L2.
    Post-processing of a noisy estimate of the representation's vector.
    """
    est = np.asarray(est, dtype=np.float64)
    if rep == "hg":
        return hg_postprocess(est[::-1], K, "l2")
    if rep == "hc":
        return hc_postprocess(est, G, "l2")
    H = naive_estimate(est, G)
    return _finish(to_hg(H)[::-1], G, K)


# ------------------------------------------------------------------ auto
#: Largest public ``G`` for which ``auto`` picks the HMM forward-backward estimate.  Its run time grows with
#: ``G`` and with ``1 / epsilon`` (wider band of states): timed once on Zipf sizes, K = 10^4, on the shared
#: 2-core machine: about 4 s at G = 10^5, eps = 1 (benchmarks/unattributed.py), 45 s at G = 10^6, eps = 1 and
#: 119 s at G = 10^6, eps = 0.1, so above 2 * 10^5 groups ``auto`` falls back to the fast ``hg_l1``.
HMM_MAX_G = 2 * 10**5

#: The ``auto`` table: (metric, epsilon range, public-shape condition, method), first match wins.
#: Re-tuned by ``benchmarks/unattributed.py`` (BENCHMARKS.md, "Unattributed histograms"): on five real
#: frequency lists HMM forward-backward had the smallest L2 error in 17 of 20 (list, epsilon) cells and was
#: within 13% of the best in the other three; PFL (the slides' pick for eps <= 1) was 1.2-2.4x the best.
AUTO_RULES = (
    ("l1", "any", "K given and K <= G", "hc_l1"),
    ("l1", "any", "otherwise", "hg_l1"),
    ("l2", "any", "G <= HMM_MAX_G", "hmm_forward_backward"),
    ("l2", "any", "otherwise", "hg_l1"),
)


def choose_method(epsilon, G: int, size_bound: int | None, metric: str = "l2") -> str:
    """``method: auto``: a method from public parameters only (tuned by ``benchmarks/unattributed.py``).

    Parameters
    ----------
    epsilon : float or Fraction
        Total epsilon of the release (``> 0``).
    G : int
        Public number of groups (``>= 1``).
    size_bound : int or None
        Public largest group size ``K``.
    metric : {"l1", "l2"}
        The error the data owner wants small.

    Returns
    -------
    str
        A method of :data:`METHODS`, by the first matching row of :data:`AUTO_RULES`:

        * L1: ``hc_l1`` when ``K`` is known and ``K <= G`` (slide "L1 Error
          Results": "Hc.L1 is usually good at L1 error"; it won the L1 cells
          of the benchmark's lists with ``K <= G``), else ``hg_l1``: the H_c
          route adds noise to ``K + 1`` cells and its L1 error grows with
          ``K``, so with ``K > G`` (few groups, large sizes: the flights-per-
          route list, where ``hc_l1`` was 2.4-4.8x the best) the ``G`` noisy
          sorted sizes of H_g do better; without ``K`` the H_c route is
          impossible.
        * L2: ``hmm_forward_backward`` (Lin & Kifer 2013) when
          ``G <= HMM_MAX_G``, at every epsilon: in the benchmark it was the
          best L2 method in 17 of 20 cells (five lists x eps in {0.1, 0.5, 1,
          2}) and within 13% (eps <= 1) / 18% (eps = 2) of the best in the
          others.  This replaces the slides' "PFL for eps <= 1" (this
          product's PFL, banded for pure DP, was 1.2-2.4x the best L2 there)
          and their data-dependent "tail vs dense region" split for
          eps > 1.  Above ``HMM_MAX_G`` groups ``hg_l1`` (fast; close to
          the best L2 on sparse lists).

        Notes
    -----
    Never reads data: identical on every dataset with the same public
    parameters, so the choice costs no privacy.
    """
    eps = _check_epsilon(epsilon)
    G = _check_G(G)
    K = _check_size_bound(size_bound)
    if metric not in ("l1", "l2"):
        raise ValueError(f"metric must be 'l1' or 'l2', got {metric!r}")
    for r_metric, r_eps, r_shape, method in AUTO_RULES:
        if r_metric != metric:
            continue
        if r_eps == "epsilon <= 1" and not eps <= 1:
            continue
        if r_eps == "epsilon > 1" and not eps > 1:
            continue
        if r_shape == "K given and K <= G" and not (K is not None and K <= G):
            continue
        if r_shape == "G <= HMM_MAX_G" and not G <= HMM_MAX_G:
            continue
        return method
    raise AssertionError("AUTO_RULES has no matching row")  # pragma: no cover


# -------------------------------------------------------------- accuracy
def _dl_moments(scale: float) -> tuple[float, float]:
    """Second and fourth moments of the discrete Laplace with scale ``s`` (``a = e^{-1/s}``).

    ``E Z^2 = 2a / (1-a)^2``, ``E Z^4 = 2a (1 + 11a + 11a^2 + a^3) / ((1+a)(1-a)^4)``.
    """
    a = math.exp(-1.0 / float(scale))
    m2 = 2 * a / (1 - a) ** 2
    m4 = 2 * a * (1 + 11 * a + 11 * a * a + a ** 3) / ((1 + a) * (1 - a) ** 4)
    return m2, m4


def accuracy(method: str, epsilon, G: int, size_bound: int | None = None, alpha=0.05) -> dict[str, Any]:
    """What can be stated about a release's error from public parameters only.

    Parameters
    ----------
    method : str
        A method of :data:`METHODS`.
    epsilon : float or Fraction
        Its total epsilon.
    G : int
        Public number of groups.
    size_bound : int, optional
        Public ``K`` (required by :data:`NEEDS_SIZE_BOUND`).
    alpha : float
        Each stated figure holds with probability ``>= 1 - alpha``, for every dataset.

    Returns
    -------
    dict
        ``method``, ``alpha``, ``kind`` and, depending on the method:

        * ``noise_scale`` and ``entry_half_width``: the discrete Laplace scale
          of the single measurement and the exact ``1 - alpha`` half-width of
          one noisy entry **before** post-processing
          (:func:`dpcore.mechanisms.accuracy.discrete_laplace_half_width`).
        * ``naive``, ``hg_l1``, ``hg_l2`` (``kind = "bound"``):
          ``max_entry_error``: with prob. ``>= 1 - alpha`` **every** released
          entry is within this of the true sorted entry (union bound: the
          half-width at ``alpha / G``).  Reason: sorting, clipping to a box
          containing the truth, isotonic regression (L1 or L2; it is monotone
          in the data and fixes every monotone vector plus a constant) and
          rounding half up to an integer are all non-expansive in the sup
          norm around an integer monotone truth.  ``l1_bound = G *
          max_entry_error`` and ``l2_bound = sqrt(G) * max_entry_error`` on
          the same event.  For ``naive`` and ``hg_l2`` also ``l2_bound_chebyshev``:
          ``||est - truth||_2 <= c ||Z||_2`` (``c = 1`` for naive: sorting and
          clipping are L2 contractions; ``c = 2`` for ``hg_l2``: the L2
          isotonic fit is the projection onto a closed convex set containing
          the truth, and rounding to the integer truth at most doubles each
          entry's error), with ``||Z||_2^2 <= G m2 + sqrt(G (m4 - m2^2) / alpha)``
          (Chebyshev).
        * ``hc_l1``, ``hc_l2`` (``kind = "bound"``): ``l1_bound``: the same
          sup-norm argument in ``H_c`` over its ``K`` free cells (the last
          one is fixed to ``G``), and ``||Ĥ_g - H_g||_1 = ||Ĥ_c - H_c||_1``
          (earthmover's distance, slide "Error Measure", [NLV07]), so
          ``l1_bound = K * half-width at alpha / K``.
        * ``hmm_*``: ``kind = "measurement"``: only the noisy entries'
          half-width (the HMM estimate is not a contraction we can state).
        * ``pfl``, ``dawa_*``, ``ahp_*``, ``hbtree_*``: ``kind = "empirical"``:
          no public bound is stated; the benchmark (``benchmarks/unattributed.py``)
          gives measured errors.  The range-query methods also list their
          ``stages`` (name, epsilon share, L1 sensitivity, discrete Laplace
          scale; :func:`.range_algorithms.plan`), all public.
    """
    mech = UnattributedHistogramMechanism(method, epsilon, size_bound)
    mech.validate()
    G = _check_G(G)
    alpha = check_alpha(alpha)
    K = mech.size_bound
    out: dict[str, Any] = {"method": method, "alpha": alpha}
    if method in ("naive", "hg_l1", "hg_l2", "hc_l1", "hc_l2", "hmm_forward_backward", "hmm_viterbi"):
        s = mech.noise_scale()
        out["noise_scale"] = s
        out["entry_half_width"] = discrete_laplace_half_width(s, Fraction(alpha))
    if method in ("naive", "hg_l1", "hg_l2"):
        M = discrete_laplace_half_width(s, Fraction(alpha) / G)
        if K is not None:
            M = min(M, K)
        out.update(kind="bound", max_entry_error=M, l1_bound=G * M, l2_bound=math.sqrt(G) * M)
        if method in ("naive", "hg_l2"):
            m2, m4 = _dl_moments(s)
            z2 = math.sqrt(G * m2 + math.sqrt(G * max(m4 - m2 * m2, 0.0) / alpha))
            out["l2_bound_chebyshev"] = (1.0 if method == "naive" else 2.0) * z2
        out["statement"] = (f"With probability >= {1 - alpha:g}, every released entry is within {M} of the true "
                            f"sorted group size (a bound for every dataset).")
    elif method in ("hc_l1", "hc_l2"):
        M = min(discrete_laplace_half_width(s, Fraction(alpha) / K), G)
        out.update(kind="bound", l1_bound=K * M, hc_max_entry_error=M,
                   statement=(f"With probability >= {1 - alpha:g}, the L1 error of the released sorted sizes "
                              f"(the earthmover's distance) is at most {K * M} (a bound for every dataset)."))
    elif method.startswith("hmm_"):
        out.update(kind="measurement", statement=(
            f"Each noisy size before the HMM estimate is within {out['entry_half_width']} of the truth with "
            f"probability >= {1 - alpha:g}; the estimate's error is measured by the benchmark, not bounded."))
    else:
        if method in REPRESENTATION_METHODS:
            from .range_algorithms import plan
            alg, rep = REPRESENTATION_METHODS[method]
            n = G if rep == "hg" else K + 1
            out["stages"] = [{"stage": st.name, "epsilon": float(st.epsilon), "sensitivity": st.sensitivity,
                              "noise_scale": st.scale} for st in plan(alg, n, SENSITIVITY[rep], mech.epsilon_exact)]
        out.update(kind="empirical", statement=(
            "No public error bound is stated for this method; see the benchmark's measured L1/L2 errors."))
    return out
