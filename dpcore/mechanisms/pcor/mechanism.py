"""PCOR mechanism: private contextual outlier release (seed 003, Shafieinejad et al., SIGMOD'21).

For an outlier ``V`` release **one context** -- a conjunction of
disjunctions of attribute values (Section 3) in which ``V`` is an outlier
w.r.t. the metric attribute ``M`` -- chosen with high utility by one of
Algorithms 1-5 (:mod:`dpcore.mechanisms.pcor.samplers`), each ending in the
exponential mechanism.

Privacy notion and neighbours (DESIGN.md rules 4-5)
---------------------------------------------------
* Notion ``ocdp``: ``(eps, COE_M(., V))``-output-constrained DP
  (Definition 2.5): the guarantee covers neighbouring datasets that differ by
  adding or removing one record **and** have the same set of valid contexts
  ``COE_M(D, V) = COE_M(D', V)`` (Definitions 2.4, 3.1).  Section 6.7 (and
  :mod:`tests.test_pcor_privacy`) measure how often that holds and what
  happens when it does not.
* Neighbour relation ``add-remove`` (one record added or removed).
* Exponential-mechanism convention: the paper's ``Exp^{eps1}`` (weights
  ``exp(eps1 u)``, ``2 eps1 Delta u``-DP, Theorem 2.1), drawn as
  ``NoiseSource.exponential_mechanism(u, epsilon=2 eps1, sensitivity=1)``.
  Both utilities (population size ``|D_C|`` and overlap ``|D_C ∩ D_{C_V}|``,
  Section 3.2) have ``Delta u = 1`` under add/remove-one.
* Charge: the operator gives the total ``epsilon``; ``eps1`` is derived so
  that the total is exactly ``epsilon``:
  ``eps1 = epsilon / 2`` for direct / uniform / random walk (Theorems 4.1,
  5.1, 5.3: one call).  DFS / BFS (Theorems 5.5, 5.7: ``n`` selections + the
  final call) split ``epsilon`` as ``final_share * epsilon`` for the final
  call and ``(1 - final_share) * epsilon / n`` for each selection (default
  ``final_share = 1/4``); ``final_share=None`` is the paper's equal split,
  ``eps1 = epsilon / (2n + 2)`` per call.  The proofs of Theorems 5.5 / 5.7
  compose the calls sequentially, so unequal per-call parameters add up the
  same way.  :meth:`cost` returns ``PrivacyCost(epsilon, 0)`` exactly.
"""
from __future__ import annotations

import math

import numbers
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Optional

import numpy as np

from dpcore.budget.amounts import PrivacyCost, exact
from ...noise import NoiseSource
from ..params import real_between
from . import samplers as S

__all__ = ["SAMPLERS", "UTILITIES", "STARTS", "PCORResult", "PCORMechanism"]

#: Sampler names (Algorithms 1-5).
SAMPLERS = ("direct", "uniform", "random_walk", "dfs", "bfs")
#: Utility names (Section 3.2).
UTILITIES = ("population", "overlap")
#: Start rules (``"auto"`` resolves by utility and verifier through :data:`AUTO_START_POPULATION`).
STARTS = ("auto", "cell", "full", "climb")
#: The rule ``start="auto"`` uses with the population utility, per verifier (see
#: :meth:`PCORMechanism.start_rule`); any other verifier, and the overlap utility (whose reference is
#: ``C_V``), use ``"cell"``.  Measured (BENCHMARKS.md "PCOR utility", BFS, eps 0.2, n 50, final_share 1/4):
#: Grubbs: cell 0.961 / 0.969 vs full 0.926 / 0.943 (diamonds / NYC flights), full at ~10x the time on
#: diamonds.  LOF on diamonds: the valid contexts fall apart into several components of the
#: one-bit-neighbour graph (7-16 for three outliers) and the cell start's component holds only 0.17-0.34
#: of the maximum population, so a search from the cell cannot get further (0.23); the full start lands
#: in the maximum's component (1.00).  LOF BFS time with full on flights carrier x origin x month
#: (t = 31): median 5.7 s, max 27 s over 10 outliers (cell: 0.34 s / 0.57 s).
AUTO_START_POPULATION = {"grubbs": "cell", "histogram": "cell", "lof": "full"}
_GRAPH_SEARCH = ("dfs", "bfs")
#: Default share of epsilon spent on the final selection of DFS/BFS (see ``final_share`` of
#: :class:`PCORMechanism`).  Measured on diamonds (30 outliers x 20 repetitions, Grubbs, population,
#: eps 0.2, n 50): BFS utility ratio 0.882 with the paper's equal split (1/51 of epsilon on the final
#: call), 0.972 with 1/4, 0.964 with 1/2, 0.907 with 3/4 (the selections then get too little).
DEFAULT_FINAL_SHARE = Fraction(1, 4)


@dataclass(frozen=True)
class PCORResult:
    """Outcome of :meth:`PCORMechanism.explain`.

    Attributes
    ----------
    context : numpy.ndarray of shape (t,) bool, or None
        The released context (the **only** private output), or ``None``.
    status : str
        ``"released"`` or ``"no_valid_context"`` (no valid starting context
        was found within ``max_start_evaluations``; for ``direct`` also when
        ``COE_M(D, V)`` is empty).  The status is an output of the mechanism
        too: it depends on the data only through validity, so it is covered
        by the OCDP charge, which the caller makes in either case.
    start_context : numpy.ndarray or None
        Internal: ``C_V``.  Data-dependent -- never release or log it.
    n_verified : int
        Internal: distinct contexts the evaluator verified so far.
    n_candidates : int
        Internal: size of the final exponential mechanism's candidate
        (multi)set.
    n_em_calls : int
        Internal: exponential-mechanism calls made (``<= 1`` or ``<= n + 1``).
    work : dict
        Internal: the operations the search performed (``evaluator.work``:
        ``start_contexts`` tested by the start rule, graph ``expansions``,
        verifier ``queries``, ``utilities`` computed, ``selections`` and
        their ``em_candidates``, the uniform sampler's ``uniform_draws``,
        padding included). Constant work (issue 46.2): every count depends
        on public parameters only, not on the record or the data.
    """

    context: Optional[np.ndarray]
    status: str
    start_context: Optional[np.ndarray]
    n_verified: int
    n_candidates: int
    n_em_calls: int = 0
    work: dict = field(default_factory=dict)


def _work(evaluator) -> dict:
    """A copy of ``evaluator.work`` (``{}`` for evaluators that do not count)."""
    return dict(getattr(evaluator, "work", None) or {})


class _CountingChooser:
    """Wraps a chooser and counts its exponential-mechanism calls."""

    def __init__(self, inner):
        self.inner = inner
        self.n_exponential = 0

    def uniform(self, k: int) -> int:
        return self.inner.uniform(k)

    def uniform_many(self, k: int, size: int) -> np.ndarray:
        return S._uniform_many(self.inner, k, size)

    def exponential(self, utilities, epsilon_step: float) -> int:
        self.n_exponential += 1
        return self.inner.exponential(utilities, epsilon_step)


class PCORMechanism:
    """Private contextual outlier release with one of Algorithms 1-5.

    Parameters
    ----------
    sampler : {"direct", "uniform", "random_walk", "dfs", "bfs"}
        Algorithm 1 (Section 4), 2 (Section 5.1), 3, 4, 5 (Section 5.2).
    epsilon : float, int or Fraction
        Total privacy parameter ``epsilon > 0`` (finite) of one explanation;
        floats are read through their decimal text (``0.2`` = ``1/5``).
    n_samples : int
        ``n >= 1``: valid samples (uniform), walk steps (random walk) or
        exponential-mechanism selections (DFS/BFS); ignored by ``direct``.
    utility : {"population", "overlap"}
        ``|D_C|`` or ``|D_C ∩ D_{C_V}|`` with the start context ``C_V``
        (Section 3.2); must match the evaluator's utility.
    start : {"auto", "cell", "full", "climb"}
        Rule for the starting context ``C_V``
        (:func:`~dpcore.mechanisms.pcor.samplers.start_context`): ``"cell"``
        = ``V``'s own cell if valid, else the first valid context adding free
        bits in a fixed order (bottom-up); ``"full"`` = the full context if
        valid, else the first valid context removing free bits in a fixed
        order, then the ``"cell"`` search if none within the bound
        (top-down).  ``"auto"`` (default) resolves by utility and the
        evaluator's verifier (:meth:`start_rule`): overlap -> ``"cell"``
        (``C_V`` is the reference whose overlap is measured); population ->
        :data:`AUTO_START_POPULATION`, ``"cell"`` for Grubbs and Histogram
        (the searches from the cell reached higher utility than from the top,
        in less time) and ``"full"`` for LOF (its valid contexts split into
        disconnected groups and the cell's group rarely holds the large
        ones; the top-down start lands in the group of the maximum).
        ``"climb"`` = the
        ``"cell"`` start, then add the lowest free bit that keeps validity
        until none does (cheap; helps the random walk like ``"full"``).
        Every rule reads the data only through validity ``f_M``, so OCDP
        neighbours (same ``COE_M(., V)``) get the same ``C_V`` and the charge
        is unchanged (Theorems 5.3-5.7 condition on ``C_V``).
    final_share : float, Fraction or None
        DFS/BFS only: the share of ``epsilon`` spent on the **final**
        selection over ``Visited`` (Algorithms 4-5, last line); the ``n``
        selections of the search share the rest equally.  In ``(0, 1)``;
        default 1/4 (:data:`DEFAULT_FINAL_SHARE`).  ``None`` = the paper's
        equal split, ``2 eps1 = epsilon / (n + 1)`` for every call.  Why not
        equal: with ``n = 50`` the final call gets ``eps / 51`` and is nearly
        uniform over ``Visited`` (diamonds: the best visited context reaches
        0.976 of the maximum utility, the released one 0.882); with 1/4 the
        final call picks close to the best visited one (0.972).  The charge is
        the same ``epsilon`` by sequential composition (Theorems 5.5 and 5.7
        with per-call parameters: ``n`` calls at ``(1 - s) epsilon / n`` plus
        one at ``s epsilon``).  Ignored by direct, uniform and random walk
        (one call, all of ``epsilon``).
    max_start_evaluations : int
        Contexts tested by :func:`~dpcore.mechanisms.pcor.samplers.start_context`
        before giving up with ``"no_valid_context"``; ``>= 1``.  Every search
        tests all of them (``min(bound, 2^(t-m))``, twice for ``"full"``),
        whatever it finds: constant work (issue 46.2).
    max_uniform_draws : int
        Draw bound of the uniform sampler (Algorithm 2); ``>= 1``.  Every
        uniform search makes exactly this many draws (constant work, issue
        46.2), so it is also the sampler's cost.
    max_direct_contexts : int
        Enumeration bound of the direct approach (``2^(t-m)`` must not
        exceed it); ``>= 1``.

    Notes
    -----
    * Input: a ``ContextEvaluator`` for (dataset, context attributes, metric,
      verifier ``f_M``, record ``V``, utility).
    * Output: one context (a ``(t,)`` bool vector) or ``None`` with status
      ``"no_valid_context"``.
    * Neighbour relation ``add-remove``; notion ``ocdp``; cost
      ``PrivacyCost(epsilon, 0)`` (module docstring).
    * Constant work (issue 46.2, DESIGN.md rule 14): the work of a search
      (contexts tested, expansions, verifier queries, utilities, selections
      and their candidates) depends on public parameters only, not on the
      record or the data, so a search's duration does not say whether the
      record is an outlier or in the table: the start rule tests its whole
      bound, DFS/BFS/random walk and the final selection are padded to their
      maxima, and a search without a start runs the same search from
      ``V``'s cell, discarded (:mod:`~dpcore.mechanisms.pcor.samplers`).
      Padding draws come from a separate chooser, so every output is the
      one of the unpadded search.  The uniform sampler always makes
      ``max_uniform_draws`` draws and ``min(2^(t-m), max_uniform_draws)``
      verifications, then keeps the first ``n`` valid draws (the same
      distribution as drawing until ``n`` are valid;
      :func:`~dpcore.mechanisms.pcor.samplers.uniform_candidates`).  The
      verifier's own cost per context: Grubbs works from per-cell sums, the
      same for every context; Histogram is vectorised over the batch (its
      work follows the batch and the occupied cells, not the record); LOF
      pads every context to ``pad_rounds`` window rounds, and only a
      context needing more rounds still takes longer
      (:class:`~dpcore.mechanisms.pcor.verifiers.LOFVerifier`; figures in
      BENCHMARKS.md "Absent records do the same work").
    * scikit-learn style: ``__init__`` stores the parameters only;
      :meth:`validate` (called by :meth:`cost`, :meth:`explain`, ...) checks
      them with messages naming the parameter and its allowed range.
    """

    notion = "ocdp"
    neighbour = "add-remove"

    def __init__(self, sampler: str, epsilon, n_samples: int = 50, utility: str = "population",
                 max_start_evaluations: int = 100_000, max_uniform_draws: int = 100_000,
                 max_direct_contexts: int = 2**20, start: str = "auto",
                 final_share=DEFAULT_FINAL_SHARE):
        self.sampler = sampler
        self.epsilon = epsilon
        self.n_samples = n_samples
        self.utility = utility
        self.max_start_evaluations = max_start_evaluations
        self.max_uniform_draws = max_uniform_draws
        self.max_direct_contexts = max_direct_contexts
        self.start = start
        self.final_share = final_share

    # -- parameters ---------------------------------------------------------

    def validate(self) -> None:
        """Check every parameter.

        Raises
        ------
        ValueError
            Naming the parameter, the value given and the allowed range.
        """
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {self.sampler!r}")
        if not real_between(self.epsilon, 0):
            raise ValueError(f"epsilon must be a finite number > 0; got {self.epsilon!r} (e.g. epsilon=0.2)")
        n = self.n_samples
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n_samples must be an integer >= 1; got {n!r} (e.g. n_samples=50)")
        if not isinstance(self.utility, str) or self.utility not in UTILITIES:
            raise ValueError(f"utility must be one of {', '.join(UTILITIES)}; got {self.utility!r}")
        if not isinstance(self.start, str) or self.start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(STARTS)}; got {self.start!r}")
        fs = self.final_share
        if fs is not None and not real_between(fs, 0, 1):
            raise ValueError(f"final_share must be a number in (0, 1) or None (the paper's equal split); got {fs!r} "
                             "(e.g. final_share=0.25)")
        for name in ("max_start_evaluations", "max_uniform_draws", "max_direct_contexts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1; got {v!r}")

    def params(self) -> dict:
        """JSON-able parameters (for idempotency keys and manifests).

        Returns
        -------
        dict
            ``sampler``, ``epsilon`` (decimal text of the exact value),
            ``n_samples``, ``utility``, ``start`` (as given, e.g. ``"auto"``;
            the rule it resolves to also depends on the verifier, see
            :meth:`start_rule`), ``final_share`` and the three search bounds.
        """
        self.validate()
        return {
            "sampler": self.sampler,
            "epsilon": str(exact(self.epsilon)),
            "n_samples": int(self.n_samples),
            "utility": self.utility,
            "start": self.start,
            "final_share": None if self.final_share is None else str(exact(self.final_share)),
            "max_start_evaluations": int(self.max_start_evaluations),
            "max_uniform_draws": int(self.max_uniform_draws),
            "max_direct_contexts": int(self.max_direct_contexts),
        }

    def start_rule(self, verifier: Optional[str] = None) -> str:
        """The start rule actually used: ``start``, with ``"auto"`` resolved by utility and verifier.

        Parameters
        ----------
        verifier : str or None
            Name of the evaluator's verifier (``"grubbs"``, ``"lof"``,
            ``"histogram"``; ``evaluator.verifier.name``).  Public: a
            parameter of the call, never data.

        Returns
        -------
        str
            ``"cell"``, ``"full"`` or ``"climb"``.  ``"auto"``: ``"cell"`` for
            the overlap utility; for population
            ``AUTO_START_POPULATION.get(verifier, "cell")``.
        """
        self.validate()
        if self.start != "auto":
            return self.start
        if self.utility == "overlap":
            return "cell"
        return AUTO_START_POPULATION.get(verifier, "cell")

    def start_rule_for(self, evaluator) -> str:
        """:meth:`start_rule` for ``evaluator``'s verifier (``evaluator.verifier.name`` when present)."""
        return self.start_rule(getattr(getattr(evaluator, "verifier", None), "name", None))

    @property
    def name(self) -> str:
        """str: ``pcor_<sampler>``."""
        return f"pcor_{self.sampler}"

    # -- privacy ------------------------------------------------------------

    def n_exponential_calls(self) -> int:
        """Upper bound on exponential-mechanism calls: 1, or ``n + 1`` for DFS/BFS.

        Returns
        -------
        int
        """
        self.validate()
        return int(self.n_samples) + 1 if self.sampler in _GRAPH_SEARCH else 1

    def selection_epsilon(self) -> Fraction:
        """Epsilon of each of the ``n`` search selections of DFS/BFS (dpcore convention: ``2 eps1``), exactly.

        Returns
        -------
        Fraction
            DFS/BFS: ``(1 - final_share) * epsilon / n``, or ``epsilon / (n + 1)``
            with ``final_share=None`` (the paper's ``2 eps1``, Theorems 5.5,
            5.7).  Direct, uniform, random walk make no selection before the
            final call: ``epsilon`` (their single call).
        """
        self.validate()
        eps = exact(self.epsilon)
        if self.sampler not in _GRAPH_SEARCH:
            return eps
        n = int(self.n_samples)
        if self.final_share is None:
            return eps / (n + 1)
        return eps * (1 - exact(self.final_share)) / n

    def final_candidates_bound(self) -> int:
        """A public upper bound on the number of candidates of the final selection.

        DFS/BFS, uniform and random walk compare at most the ``n`` sampled
        contexts and the start (``n + 1``); ``direct`` at most
        ``max_direct_contexts``. Counting more candidates than there are only
        weakens (never invalidates) :meth:`utility_shortfall`.
        """
        self.validate()
        return int(self.max_direct_contexts) if self.sampler == "direct" else int(self.n_samples) + 1

    def utility_shortfall(self, alpha: float) -> float:
        """The exponential mechanism's utility guarantee for the final selection, from public parameters.

        McSherry-Talwar (the guarantee behind Theorems 4.1 and 5.x): with
        probability at least ``1 - alpha`` the released context's utility is
        at least ``OPT - (2 Delta u / eps_f) (ln |R| + ln(1/alpha))``, where
        ``OPT`` is the best utility among the ``|R|`` candidates the search
        compared, ``eps_f`` = :meth:`final_epsilon` (dpcore's convention:
        weights ``e^{eps_f u / (2 Delta u)}``) and ``Delta u = 1``.

        Returns
        -------
        float
            The shortfall ``(2 / eps_f) (ln R + ln(1/alpha))`` with ``R`` =
            :meth:`final_candidates_bound`, rounded up.
        """
        from .samplers import EM_SENSITIVITY

        a = float(alpha)
        if not 0 < a < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        eps_f = float(self.final_epsilon())
        val = (2 * EM_SENSITIVITY / eps_f) * (math.log(self.final_candidates_bound()) + math.log(1 / a))
        return math.nextafter(val * (1 + 1e-12), math.inf)

    def final_epsilon(self) -> Fraction:
        """Epsilon of the final exponential-mechanism selection (dpcore convention), exactly.

        Returns
        -------
        Fraction
            DFS/BFS: ``final_share * epsilon`` (``epsilon / (n + 1)`` with
            ``final_share=None``); direct, uniform, random walk: ``epsilon``
            (``2 eps1`` of Theorems 4.1, 5.1, 5.3).  Always
            ``selection_epsilon() * (n_exponential_calls() - 1) + final_epsilon() == epsilon``.
        """
        self.validate()
        eps = exact(self.epsilon)
        if self.sampler not in _GRAPH_SEARCH:
            return eps
        if self.final_share is None:
            return eps / (int(self.n_samples) + 1)
        return eps * exact(self.final_share)

    def epsilon_1(self) -> Fraction:
        """The paper's ``eps1`` of the search selections, exactly: ``selection_epsilon() / 2``.

        Returns
        -------
        Fraction
            ``epsilon / 2`` (direct, uniform, random walk: Theorems 4.1, 5.1,
            5.3 charge ``2 eps1``); DFS/BFS with the paper's equal split
            (``final_share=None``) ``epsilon / (2n + 2)`` (Theorems 5.5, 5.7
            charge ``(2n + 2) eps1``; ``epsilon=0.2``, ``n=50``: ``1/510``);
            with the default ``final_share=1/4``: ``3 epsilon / (8 n)``
            (``epsilon=0.2``, ``n=50``: ``3/2000``).
        """
        return self.selection_epsilon() / 2

    def epsilon_step(self) -> float:
        """:meth:`selection_epsilon` as a float, as passed to ``NoiseSource.exponential_mechanism``.

        Returns
        -------
        float
        """
        return float(self.selection_epsilon())

    def final_step(self) -> float:
        """:meth:`final_epsilon` as a float, as passed to ``NoiseSource.exponential_mechanism``.

        Returns
        -------
        float
        """
        return float(self.final_epsilon())

    def cost(self) -> PrivacyCost:
        """The ledger charge: ``PrivacyCost(epsilon, 0)``, notion ``ocdp``.

        Returns
        -------
        PrivacyCost
            Exactly ``(n_exponential_calls() - 1) * selection_epsilon() + final_epsilon()``
            = ``epsilon`` (sequential composition of the calls).
        """
        self.validate()
        return PrivacyCost(exact(self.epsilon), 0)

    def privacy_map(self, d_in: int = 1) -> Fraction:
        """Privacy loss as a function of the neighbour distance (OpenDP habit).

        Parameters
        ----------
        d_in : int
            Number of records added/removed between the two datasets, ``>= 0``.

        Returns
        -------
        Fraction
            ``d_in * epsilon``.  ``d_in = 1``: the charged ``epsilon``
            (``(epsilon, COE_M(., V))``-OCDP).  ``d_in > 1``: the group-privacy
            bound, valid for datasets with the **same** ``COE_M(., V)``
            (Section 6.7's group setting): every exponential-mechanism call
            then runs over the same candidate sets, utilities differ by at
            most ``d_in``, so each call is ``2 eps1 d_in``-indistinguishable.
            Without equal ``COE`` there is no bound (OCDP gives none).

        Raises
        ------
        ValueError
            If ``d_in`` is not an integer ``>= 0``.
        """
        if isinstance(d_in, bool) or not isinstance(d_in, numbers.Integral) or d_in < 0:
            raise ValueError(f"d_in must be an integer >= 0 (records added/removed); got {d_in!r}")
        return int(d_in) * self.cost().epsilon

    # -- running ------------------------------------------------------------

    def _check_evaluator(self, evaluator) -> None:
        kind = getattr(evaluator, "utility_name", None)  # ContextEvaluator's utility
        if isinstance(kind, str) and kind != self.utility:
            raise ValueError(
                f"utility={self.utility!r} but the evaluator computes {kind!r}; build the evaluator with "
                f"utility={self.utility!r}"
            )

    def sample_candidates(self, evaluator, chooser, progress: Optional[Callable[[int, int], None]] = None):
        """Run the search phase: start context, then the sampler's candidate (multi)set.

        Used by :meth:`explain` and, with a replaying chooser, by
        :func:`dpcore.mechanisms.pcor.exact.exact_output_distribution`, so both
        run the very same code.

        Parameters
        ----------
        evaluator : ContextEvaluator
        chooser : Chooser
        progress : callable or None
            ``progress(done, total)``.

        Returns
        -------
        tuple
            ``(start, reference, candidates)``: ``start`` is ``C_V`` or
            ``None``; ``reference`` is ``C_V`` for the overlap utility else
            ``None``; ``candidates`` is the ``(k, t)`` bool candidate
            (multi)set of the final exponential mechanism, or ``None`` when
            there is nothing to release.  All internal (data-dependent).
        """
        self.validate()
        self._check_evaluator(evaluator)
        pad = S._pad_chooser(chooser)
        start = S.start_context(evaluator, int(self.max_start_evaluations), start=self.start_rule_for(evaluator))
        if start is None:
            if S.constant_work():
                # constant work (issue 46.2): the same search from V's cell, every draw from the padding
                # chooser, then the final selection's work; all of it discarded
                dummy = np.asarray(evaluator.cell_context, dtype=bool).copy()
                ref = dummy if self.utility == "overlap" else None
                cands = self._candidates(evaluator, dummy, ref, pad, pad, None)
                if cands.shape[0] == 0:
                    cands = dummy[None, :]
                S.select_final(evaluator, cands, self.final_step(), pad, ref, pad_to=self.final_pad(evaluator),
                               pad=pad)
            return None, None, None
        reference = start if self.utility == "overlap" else None
        cands = self._candidates(evaluator, start, reference, chooser, pad, progress)
        if cands.shape[0] == 0:  # direct: COE_M(D, V) empty
            S.select_final(evaluator, start[None, :], self.final_step(), pad, reference,
                           pad_to=self.final_pad(evaluator), pad=pad)
            return start, reference, None
        return start, reference, cands

    def _candidates(self, evaluator, start, reference, chooser, pad, progress):
        """The sampler's candidate (multi)set from ``start`` (see :meth:`sample_candidates`)."""
        n = int(self.n_samples)
        step = self.epsilon_step()
        if self.sampler == "direct":
            cands = S.direct_candidates(evaluator, int(self.max_direct_contexts))
            if progress is not None:
                progress(1, 1)
            return cands
        if self.sampler == "uniform":
            return S.uniform_candidates(evaluator, start, n, chooser, max_draws=int(self.max_uniform_draws),
                                        progress=progress)
        if self.sampler == "random_walk":
            return S.random_walk_candidates(evaluator, start, n, chooser, progress=progress, pad=pad)
        if self.sampler == "dfs":
            return S.dfs_candidates(evaluator, start, n, step, chooser, reference=reference, progress=progress,
                                    pad=pad)
        return S.bfs_candidates(evaluator, start, n, step, chooser, reference=reference, progress=progress, pad=pad)

    def final_pad(self, evaluator) -> int:
        """The public candidate count the final selection is padded to (constant work, issue 46.2).

        Returns
        -------
        int
            ``2^(t - m)`` for ``direct`` (every context containing ``V``);
            ``n + 1`` otherwise (the start and ``n`` samples, steps or
            selections). Depends on public parameters only.
        """
        if self.sampler == "direct":
            return 1 << int(np.count_nonzero(~np.asarray(evaluator.cell_context, dtype=bool)))
        return int(self.n_samples) + 1

    def explain_with_chooser(self, evaluator, chooser, progress: Optional[Callable[[int, int], None]] = None
                             ) -> PCORResult:
        """:meth:`explain` with an explicit :class:`~dpcore.mechanisms.pcor.samplers.Chooser`.

        Parameters
        ----------
        evaluator : ContextEvaluator
        chooser : Chooser
            :class:`~dpcore.mechanisms.pcor.samplers.NoiseChooser` in
            production; instrumented choosers in tests.
        progress : callable or None

        Returns
        -------
        PCORResult
        """
        counting = _CountingChooser(chooser)
        start, reference, cands = self.sample_candidates(evaluator, counting, progress)
        if cands is None:
            return PCORResult(None, "no_valid_context", start, int(evaluator.n_verified), 0,
                              counting.n_exponential, _work(evaluator))
        context = S.select_final(evaluator, cands, self.final_step(), counting, reference,
                                 pad_to=self.final_pad(evaluator))
        return PCORResult(context, "released", start, int(evaluator.n_verified), int(cands.shape[0]),
                          counting.n_exponential, _work(evaluator))

    def explain(self, evaluator, noise: NoiseSource, progress: Optional[Callable[[int, int], None]] = None
                ) -> PCORResult:
        """Release one context for the evaluator's record ``V``.

        Parameters
        ----------
        evaluator : ContextEvaluator
            For (dataset, context attributes, metric, verifier, record ``V``,
            utility); its utility must equal ``self.utility``.
        noise : NoiseSource
            The only randomness (DESIGN.md rule 3).
        progress : callable or None
            ``progress(done, total)`` during long searches (selections, walk
            steps or valid samples found).

        Returns
        -------
        PCORResult
            ``context`` and ``status`` are the private output; the rest is
            internal.  The caller must have charged :meth:`cost` **before**
            calling (DESIGN.md rule 1) -- also when the status turns out to
            be ``"no_valid_context"``: the mechanism ran and its outcome
            depends on the data.

        Notes
        -----
        ``(epsilon, COE_M(., V))``-OCDP under add/remove-one neighbours
        (Theorems 4.1, 5.1, 5.3, 5.5, 5.7 with ``eps1`` from
        :meth:`epsilon_1`).
        """
        return self.explain_with_chooser(evaluator, S.NoiseChooser(noise), progress)
