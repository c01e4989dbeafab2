"""Exact output distributions of the PCOR mechanism, for privacy audits (DESIGN.md rule 7).

:func:`exact_output_distribution` enumerates the whole choice tree of a
:class:`~dpcore.mechanisms.pcor.mechanism.PCORMechanism` on one evaluator
(one dataset, one record ``V``): it replays the production search
(:meth:`PCORMechanism.sample_candidates`) with every prefix of chooser
answers, so audits test the code that releases, not a re-implementation.

* A uniform choice over ``k`` options branches ``k`` ways, probability
  ``1/k`` each (random walk steps).
* An exponential-mechanism choice branches over its candidates with
  :meth:`NoiseSource.exponential_mechanism_probabilities` at the
  production ``epsilon_step = 2 eps1`` and ``sensitivity = 1`` -- exactly the
  selection probabilities of :class:`~dpcore.mechanisms.pcor.samplers.NoiseChooser`.
* The final exponential mechanism is applied analytically to each leaf's
  candidate multiset (duplicates carry their multiplicity).
* Uniform sampling (Algorithm 2): its rejection loop has infinitely many
  branches.  Conditioned on acceptance, each accepted draw is uniform over
  ``COE_M(D, V)`` (all contexts containing ``V`` are equally likely and
  acceptance is validity), and draws are independent, so the sample multiset
  is ``n`` i.i.d. uniform draws from ``COE_M(D, V)``; it is enumerated as a
  multinomial over multisets.  This models the loop without its draw bound
  (``max_uniform_draws``); the production rejection sampler is tested
  against it statistically, and its constant-work form (all
  ``max_uniform_draws`` draws made, the first ``n`` valid ones kept) is
  tested to return exactly the samples of the loop that stops at the
  ``n``-th valid draw, given the same draws.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from typing import Optional

import numpy as np

from ...noise import NoiseSource
from . import samplers as S

__all__ = ["exact_output_distribution"]


class _Branch(Exception):
    """Raised by the replaying chooser at the first choice past its prefix."""

    def __init__(self, probabilities: np.ndarray):
        super().__init__("branch")
        self.probabilities = probabilities


class _ReplayChooser:
    """Answers a fixed prefix of choices, then raises :class:`_Branch`."""

    def __init__(self, prefix: tuple[int, ...]):
        self.prefix = prefix
        self.pos = 0

    def _next(self, probs_fn):
        if self.pos < len(self.prefix):
            a = self.prefix[self.pos]
            self.pos += 1
            return a
        raise _Branch(probs_fn())

    def uniform(self, k: int) -> int:
        k = int(k)
        return self._next(lambda: np.full(k, 1.0 / k))

    def exponential(self, utilities, epsilon_step: float) -> int:
        u = np.asarray(utilities, dtype=np.float64)
        return self._next(lambda: NoiseSource.exponential_mechanism_probabilities(u, float(epsilon_step),
                                                                                    S.EM_SENSITIVITY))


def _final_distribution(evaluator, cands: np.ndarray, reference, epsilon_step: float) -> dict[int, float]:
    """Output distribution of the final exponential mechanism on a candidate multiset."""
    u = S._Utilities(evaluator, reference)(cands)
    p = NoiseSource.exponential_mechanism_probabilities(u, epsilon_step, S.EM_SENSITIVITY)
    out: dict[int, float] = defaultdict(float)
    for k, q in zip(S._keys(evaluator, cands), p):
        out[k] += float(q)
    return out


def _uniform_distribution(mechanism, evaluator, max_outcomes: int) -> dict[Optional[int], float]:
    """Exact distribution of Algorithm 2 (unbounded rejection loop; module docstring)."""
    with S.without_constant_work():
        start = S.start_context(evaluator, int(mechanism.max_start_evaluations),
                                start=mechanism.start_rule_for(evaluator))
    if start is None:
        return {None: 1.0}
    reference = start if mechanism.utility == "overlap" else None
    valid = S.direct_candidates(evaluator, int(mechanism.max_direct_contexts))
    K, n = valid.shape[0], int(mechanism.n_samples)
    n_multisets = math.comb(K + n - 1, n)
    if n_multisets > max_outcomes:
        raise ValueError(f"uniform sampler: {n_multisets} sample multisets exceed max_outcomes={max_outcomes}")
    step = mechanism.final_step()
    u = S._Utilities(evaluator, reference)(valid)
    w = np.exp(u * (step / 2.0) - (u * (step / 2.0)).max())  # exp(eps1 u), scaled
    keys = S._keys(evaluator, valid)
    out: dict[Optional[int], float] = defaultdict(float)
    log_norm = n * math.log(K)
    for combo in itertools.combinations_with_replacement(range(K), n):
        counts = Counter(combo)
        log_p = math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in counts.values()) - log_norm
        p_ms = math.exp(log_p)
        z = sum(c * w[i] for i, c in counts.items())
        for i, c in counts.items():
            out[keys[i]] += p_ms * c * w[i] / z
    return dict(out)


def exact_output_distribution(mechanism, evaluator, max_branches: int = 2_000_000
                              ) -> dict[Optional[int], float]:
    """Exact output distribution of ``mechanism.explain`` on one evaluator.

    Parameters
    ----------
    mechanism : PCORMechanism
        Any sampler; its ``epsilon_1`` / ``epsilon_step`` are used exactly as
        in production (so a subclass that changes them is audited as it runs).
    evaluator : ContextEvaluator
        Dataset + record ``V`` + verifier + utility (tiny instances: every
        branch of the choice tree is replayed).
    max_branches : int
        Refuse to explore more tree nodes (or, for uniform sampling, sample
        multisets) than this.

    Returns
    -------
    dict
        Packed context key (``int``, ``evaluator.space.pack``) -> probability;
        the key ``None`` stands for status ``"no_valid_context"``.
        Probabilities are floats summing to 1 within ``1e-9``.

    Raises
    ------
    ValueError
        If the tree is larger than ``max_branches``.

    Notes
    -----
    The distribution is that of the released output (context or
    ``"no_valid_context"``), the quantity Definition 2.5 bounds; privacy
    audits compare it across neighbouring datasets (add/remove one record).
    """
    mechanism.validate()
    if mechanism.sampler == "uniform":
        return _uniform_distribution(mechanism, evaluator, max_branches)
    step = mechanism.final_step()
    out: dict[Optional[int], float] = defaultdict(float)
    stack: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    nodes = 0
    while stack:
        prefix, p = stack.pop()
        nodes += 1
        if nodes > max_branches:
            raise ValueError(f"choice tree exceeds max_branches={max_branches}")
        try:
            with S.without_constant_work():  # the outputs are the same; padding would only cost time here
                start, reference, cands = mechanism.sample_candidates(evaluator, _ReplayChooser(prefix))
        except _Branch as b:
            for i, q in enumerate(b.probabilities):
                if q > 0.0:
                    stack.append((prefix + (i,), p * float(q)))
            continue
        if cands is None:
            out[None] += p
            continue
        for k, q in _final_distribution(evaluator, cands, reference, step).items():
            out[k] += p * q
    total = sum(out.values())
    if abs(total - 1.0) > 1e-9:  # pragma: no cover - would be a bug in the enumeration
        raise RuntimeError(f"exact distribution sums to {total!r}, not 1")
    return dict(out)
