"""PCOR samplers: Algorithms 1-5 of Shafieinejad et al., SIGMOD'21 (seed 003).

A *context* is a ``(t,)`` bool vector over the full public domains of the
context attributes (Section 3); the record ``V`` (the outlier being explained)
is fixed inside the evaluator.  Every algorithm here is written against a
:class:`Chooser` -- the only source of randomness -- so that
:mod:`dpcore.mechanisms.pcor.exact` can replay every branch of the choice tree
and compute exact output distributions.  In production the chooser is
:class:`NoiseChooser`, which draws through :mod:`dpcore.noise` (DESIGN.md
rule 3).

Exponential-mechanism convention (DESIGN.md rule 5)
---------------------------------------------------
The paper's ``Exp_u^{eps1}`` has weights ``exp(eps1 * u)`` (proof of
Theorem 4.1, eq. 4) and is ``2 eps1 Delta u``-DP (Theorem 2.1).
:meth:`dpcore.noise.NoiseSource.exponential_mechanism` uses weights
``exp(eps u / (2 Delta u))``.  Every call here therefore passes
``epsilon_step = 2 * eps1`` and ``sensitivity = 1`` (``Delta u = 1`` for both
utilities of Section 3.2 under add/remove-one neighbours), which gives exactly
the paper's weights ``exp(eps1 * u)``; one call costs ``epsilon_step = 2 eps1``.

Privacy structure (why the charges hold)
----------------------------------------
Neighbour relation: add or remove one record, restricted by OCDP
(Definition 2.5) to neighbours with ``COE_M(D, V) = COE_M(D', V)``
(Definition 3.1).  Every data-dependent decision below is either

* a validity test ``f_M(D_C, V)`` -- identical for OCDP neighbours, since the
  set of valid contexts is the same -- or
* an exponential-mechanism call, each ``2 eps1``-DP (sensitivity 1).

Uniform draws (random walk, uniform sampling) do not look at the data.  So by
adaptive sequential composition the search costs ``2 eps1`` per
exponential-mechanism call, and the totals are:

==============  ==========================================  ===============
algorithm       exponential-mechanism calls                 total (OCDP)
==============  ==========================================  ===============
direct (1)      1 (over all valid contexts containing V)    ``2 eps1``
uniform (2)     1 (over the sample multiset)                ``2 eps1``
random walk (3) 1 (over the walk multiset)                  ``2 eps1``
DFS (4)         at most ``n`` child selections + 1 final    ``(2n+2) eps1``
BFS (5)         at most ``n`` frontier selections + 1 final ``(2n+2) eps1``
==============  ==========================================  ===============

The paper's off-by-one, fixed here
----------------------------------
Algorithms 4 and 5 loop ``while |Visited| <= n`` (line 3): with
``Visited`` growing by one per iteration from the empty set, that is ``n+1``
exponential-mechanism selections inside the loop plus the final one on line
22 / 16, i.e. ``n+2`` calls -- more than the ``(2n+2) eps1`` that Theorems 5.5
and 5.7 charge.  (Algorithm 5's first selection is over ``C_M = {C_V}``
alone, a degenerate call.)  Here DFS and BFS make **exactly ``n``**
exponential-mechanism selections (fewer only when the search space reachable
from ``C_V`` is exhausted), and the final selection runs over the ``n + 1``
visited contexts ``{C_V} + n selections``.  That is ``n + 1`` calls at
``2 eps1`` each = ``(2n+2) eps1``, exactly the theorems' charge.  The same
``|C_M| <= n`` pattern of Algorithms 2 and 3 (line 3) is read as "``n``
samples": uniform sampling collects ``n`` valid samples, the random walk
takes ``n`` steps from ``C_V`` (``n + 1`` contexts including ``C_V``); these
change only utility, not the one-call charge.

Graph neighbours (Section 5.2)
------------------------------
The context graph connects contexts at Hamming distance 1 (``t`` neighbours
each).  A context that does not contain ``V`` is never valid (Definition 3.1
requires ``V in D_C``), and flipping one of ``V``'s own bits off removes ``V``.
The searches therefore only flip the ``t - m`` *free* bits (those not set in
``V``'s own cell); the skipped neighbours would all have been rejected by
``f_M`` anyway, so the algorithms' distributions are unchanged.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Optional, Protocol, runtime_checkable

import numpy as np

from ...noise import NoiseSource

__all__ = [
    "EM_SENSITIVITY",
    "Chooser",
    "NoiseChooser",
    "START_RULES",
    "start_context",
    "direct",
    "direct_candidates",
    "uniform",
    "uniform_candidates",
    "random_walk",
    "random_walk_candidates",
    "dfs",
    "dfs_candidates",
    "bfs",
    "bfs_candidates",
    "select_final",
]

#: ``Delta u`` of both utilities (population size and overlap with ``C_V``,
#: Section 3.2) under add/remove-one neighbours.
EM_SENSITIVITY = 1.0

#: Bits per uniform draw when drawing a uniform context (keeps every
#: ``uniform(k)`` argument well inside int64 for the seeded test generator).
_BITS_PER_DRAW = 30

Progress = Optional[Callable[[int, int], None]]


@runtime_checkable
class Chooser(Protocol):
    """The randomness of a PCOR search, as two kinds of choices.

    Methods
    -------
    uniform(k) -> int
        An index drawn uniformly from ``range(k)`` (``k >= 1``).  Data
        independent: costs no privacy.
    exponential(utilities, epsilon_step) -> int
        An index ``i`` of ``utilities`` (shape ``(k,)``, ``k >= 1``) drawn with
        ``P(i) ∝ exp(epsilon_step * u_i / 2)`` -- dpcore's convention
        ``exp(eps u / (2 Delta u))`` with ``Delta u = 1``; the samplers pass
        ``epsilon_step = 2 eps1`` so the weights are the paper's
        ``exp(eps1 u)``.  Costs ``epsilon_step`` (pure DP, Theorem 2.1).
    """

    def uniform(self, k: int) -> int:  # pragma: no cover - protocol
        ...

    def exponential(self, utilities: np.ndarray, epsilon_step: float) -> int:  # pragma: no cover - protocol
        ...


class NoiseChooser:
    """Production :class:`Chooser` drawing through :class:`~dpcore.noise.NoiseSource`.

    Parameters
    ----------
    noise : NoiseSource
        ``NoiseSource()`` (OS CSPRNG, OpenDP noisy-max) for releases;
        ``NoiseSource(seed=...)`` for tests only (not publishable).

    Notes
    -----
    ``uniform(k)`` is ``noise.integers(0, k)`` (exactly uniform), and
    ``uniform_many(k, size)`` is ``size`` of them in one vectorised call
    (the uniform sampler's draws);
    ``exponential(u, eps)`` is ``noise.exponential_mechanism(u, eps,
    sensitivity=1)``, whose selection probabilities are exactly
    :meth:`NoiseSource.exponential_mechanism_probabilities` with the same
    arguments -- the ones :mod:`~dpcore.mechanisms.pcor.exact` uses.
    """

    def __init__(self, noise: NoiseSource):
        if not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a dpcore.noise.NoiseSource, got {type(noise).__name__}")
        self.noise = noise

    def uniform(self, k: int) -> int:
        """Uniform index in ``range(k)``; see :class:`Chooser`."""
        k = int(k)
        if k < 1:
            raise ValueError(f"uniform(k) needs k >= 1, got {k}")
        if k == 1:
            return 0
        return int(self.noise.integers(0, k))

    def uniform_many(self, k: int, size: int) -> np.ndarray:
        """``size`` independent uniform indices in ``range(k)`` (int64), in one ``noise.integers`` call."""
        k, size = int(k), int(size)
        if k < 1:
            raise ValueError(f"uniform_many(k, size) needs k >= 1, got {k}")
        if k == 1:
            return np.zeros(size, dtype=np.int64)
        return np.asarray(self.noise.integers(0, k, size=size), dtype=np.int64)

    def exponential(self, utilities, epsilon_step: float) -> int:
        """Exponential-mechanism index; see :class:`Chooser`."""
        u = np.asarray(utilities, dtype=np.float64)
        return int(self.noise.exponential_mechanism(u, epsilon_step, EM_SENSITIVITY))  # exact: the scale is rounded up in dpcore.noise


# ---------------------------------------------------------------------------
# Helpers shared by the algorithms
# ---------------------------------------------------------------------------


def _free_bits(evaluator) -> np.ndarray:
    """Indices of the bits not set in ``V``'s own cell (the ``t - m`` free bits)."""
    return np.flatnonzero(~np.asarray(evaluator.cell_context, dtype=bool))


def _keys(evaluator, contexts: np.ndarray) -> list[int]:
    """Packed keys (Python ints) of a ``(B, t)`` batch."""
    if contexts.shape[0] == 0:
        return []
    return [int(k) for k in evaluator.space.pack(contexts)]


def _neighbours(evaluator, context: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The graph neighbours of ``context`` that still contain ``V``.

    Rows of ``space.flip_all(context)`` for the free bits, in bit order
    (Section 5.2; the fixed order makes every search deterministic given the
    chooser's answers).
    """
    return evaluator.space.flip_all(context)[free]


# ---------------------------------------------------------------------------
# Constant work (issue 46.2, DESIGN.md rule 14)
# ---------------------------------------------------------------------------
#
# A search's duration is visible (Prefect stores every task's run time), so
# the amount of work must not depend on the searched record: an outlier (its
# own cell a valid start, a search that can go far) and an ordinary record (no
# valid context) must do the same work.  Every search therefore performs a
# fixed schedule that depends on public parameters only (``f = t - m`` free
# bits, ``n``, the bounds): the start rule tests its whole bound; every
# expansion verifies all ``f`` neighbours afresh (never from the cache, whose
# hits depend on where the search went) and computes all ``f`` utilities;
# every exponential-mechanism selection is padded to a public bound on its
# candidate count; a graph search whose frontier or stack ran out, or that has
# no start at all, continues with dummy expansions and selections whose
# results are discarded.  Padding draws come from a separate chooser
# (:func:`_pad_chooser`), never from the search's own chooser, so every
# released output -- and every seeded test output -- is exactly what it was.


#: Whether the samplers do constant work (on by default; :func:`without_constant_work` turns it off).
_CONSTANT_WORK: ContextVar[bool] = ContextVar("pcor_constant_work", default=True)


@contextmanager
def without_constant_work():
    """Within this block the samplers skip the constant-work padding and verify through the cache.

    For :mod:`~dpcore.mechanisms.pcor.exact` only, which replays every branch
    of a search's choice tree on one evaluator to compute the exact output
    distribution (never a release): the outputs are the same either way, the
    padding only costs time there.
    """
    token = _CONSTANT_WORK.set(False)
    try:
        yield
    finally:
        _CONSTANT_WORK.reset(token)


def constant_work() -> bool:
    """bool: whether the samplers pad their work (``False`` only inside :func:`without_constant_work`)."""
    return _CONSTANT_WORK.get()


def _tally(evaluator, key: str, amount: int) -> None:
    """Add ``amount`` to ``evaluator.work[key]`` (the operations of a search; internal, never released)."""
    work = getattr(evaluator, "work", None)
    if work is not None:
        work[key] = work.get(key, 0) + int(amount)


def _verify(evaluator, contexts: np.ndarray) -> np.ndarray:
    """Validity of every row of ``contexts``, each row sent to the verifier (no cache shortcut).

    With a :class:`~dpcore.mechanisms.pcor.evaluator.ContextEvaluator` the
    rows are verified afresh (``valid(..., fresh=True)``); evaluators without
    that option (test doubles) answer through ``valid``.  Counted as
    ``queries``.
    """
    _tally(evaluator, "queries", contexts.shape[0])
    if getattr(evaluator, "fresh_validity", False) and _CONSTANT_WORK.get():
        return np.asarray(evaluator.valid(contexts, fresh=True), dtype=bool)
    return np.asarray(evaluator.valid(contexts), dtype=bool)


def _pad_verify(evaluator, like: np.ndarray, count: int) -> None:
    """Dummy work: verify ``count`` contexts (rows of ``like`` repeated), results discarded."""
    if count > 0 and _CONSTANT_WORK.get():
        like = np.atleast_2d(np.asarray(like, dtype=bool))
        _verify(evaluator, like[np.arange(count) % like.shape[0]])


def _pad_chooser(chooser) -> "Chooser":
    """The chooser of the padding draws: never the search's own, so padding changes no output.

    Of the same kind as the search's (the OS CSPRNG through OpenDP for a
    production :class:`NoiseChooser`, so a padding draw costs what a real one
    does); a seeded numpy source otherwise (tests, exact replays). Its draws
    are discarded.
    """
    inner = chooser
    while not isinstance(inner, NoiseChooser) and hasattr(inner, "inner"):
        inner = inner.inner
    if isinstance(inner, NoiseChooser) and inner.noise.publishable:
        return NoiseChooser(NoiseSource())
    return NoiseChooser(NoiseSource(seed=0))


def _pad_em(evaluator, pad, real: int, bound: int, epsilon_step: float) -> None:
    """Pad an exponential-mechanism selection over ``real`` candidates to ``bound`` candidates.

    A selection is two draws, whatever ``real`` is: the real one over
    ``real`` candidates (made by the caller; with ``real = 0``, a dummy
    selection, a draw over one dummy candidate here) and one from ``pad``
    over ``bound - real + 1`` dummy candidates (``bound + 1`` candidates in
    all, counted under ``em_candidates``). Results discarded.
    """
    if not _CONSTANT_WORK.get():
        return
    real = int(real)
    if real == 0:
        pad.exponential(np.zeros(1), epsilon_step)
        real = 1
    total = max(int(bound), real) + 1
    _tally(evaluator, "em_candidates", total)
    pad.exponential(np.zeros(total - real), epsilon_step)


def _frontier_bound(f: int, j: int) -> int:
    """A public bound on BFS's frontier before its ``j``-th selection (``j >= 1``): ``f + (j - 1) max(f - 2, 0)``.

    The first expansion adds at most ``f`` contexts; each selection removes
    one and its expansion adds at most ``f - 1`` (the context it was reached
    from is visited).
    """
    return int(f) + (int(j) - 1) * max(int(f) - 2, 0)


class _Utilities:
    """Per-search cache of ``u_V(D, C)`` by packed key (Section 3.2).

    The utility is deterministic given the data, so caching changes nothing
    but speed.  ``reference`` is ``None`` for population size and the start
    context ``C_V`` for overlap.
    """

    def __init__(self, evaluator, reference: Optional[np.ndarray]):
        self.evaluator = evaluator
        self.reference = reference
        self.cache: dict[int, float] = {}

    def __call__(self, contexts: np.ndarray, keys: Optional[list[int]] = None) -> np.ndarray:
        if keys is None:
            keys = _keys(self.evaluator, contexts)
        missing = [i for i, k in enumerate(keys) if k not in self.cache]
        if missing:
            if self.reference is None:
                vals = self.evaluator.utility(contexts[missing])
            else:
                vals = self.evaluator.utility(contexts[missing], reference=self.reference)
            for i, v in zip(missing, np.asarray(vals)):
                self.cache[keys[i]] = float(v)
        return np.array([self.cache[k] for k in keys], dtype=np.float64)

    def refresh(self, contexts: np.ndarray, keys: list[int]) -> None:
        """Compute the utility of every row afresh (fixed work per expansion) and cache it; counted."""
        if contexts.shape[0] == 0 or not _CONSTANT_WORK.get():
            return
        _tally(self.evaluator, "utilities", contexts.shape[0])
        if self.reference is None:
            vals = self.evaluator.utility(contexts)
        else:
            vals = self.evaluator.utility(contexts, reference=self.reference)
        for k, v in zip(keys, np.asarray(vals)):
            self.cache[k] = float(v)


def select_final(evaluator, candidates: np.ndarray, epsilon_step: float, chooser: Chooser,
                 reference: Optional[np.ndarray] = None, *, pad_to: Optional[int] = None,
                 pad: Optional[Chooser] = None) -> np.ndarray:
    """The final exponential-mechanism selection ``Exp_u^{eps1}(D, C_M)``.

    Algorithm 1 line 9, Algorithm 2 line 12, Algorithm 3 line 17, Algorithm 4
    line 22, Algorithm 5 line 16.

    Parameters
    ----------
    evaluator : ContextEvaluator
        Supplies ``utility(contexts, reference=None)``.
    candidates : numpy.ndarray, shape (k, t), bool
        The candidate (multi)set; duplicate rows are separate candidates
        (multiset semantics: a context drawn twice has twice the weight).
    epsilon_step : float
        ``2 eps1`` in dpcore's convention (module docstring).
    chooser : Chooser
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility, ``None`` for population size.
    pad_to : int or None
        Constant work (issue 46.2): a public bound on the candidate count
        (:meth:`~dpcore.mechanisms.pcor.mechanism.PCORMechanism.final_pad`);
        the utilities of ``pad_to`` rows (the candidates, then repeats of them)
        are computed and the selection is padded to ``pad_to`` candidates by a
        discarded draw from ``pad``. ``None``: no padding.
    pad : Chooser or None
        The padding chooser (default :func:`_pad_chooser` of ``chooser``).

    Returns
    -------
    numpy.ndarray, shape (t,), bool
        The selected context.  Cost: ``epsilon_step`` (= ``2 eps1``) under
        OCDP, add/remove-one neighbours (the padding draws are discarded and
        read no data).
    """
    if not _CONSTANT_WORK.get():
        pad_to = None
    if pad_to is None:
        u = _Utilities(evaluator, reference)(candidates)
    else:
        k = candidates.shape[0]
        rows = candidates[np.arange(max(int(pad_to), k)) % k]
        _tally(evaluator, "utilities", rows.shape[0])
        vals = evaluator.utility(rows) if reference is None else evaluator.utility(rows, reference=reference)
        u = np.asarray(vals, dtype=np.float64)[:k]
    _tally(evaluator, "selections", 1)
    j = int(chooser.exponential(u, epsilon_step))
    if pad_to is not None:
        _pad_em(evaluator, _pad_chooser(chooser) if pad is None else pad, candidates.shape[0], int(pad_to),
                epsilon_step)
    return candidates[j].copy()


# ---------------------------------------------------------------------------
# Starting context
# ---------------------------------------------------------------------------


#: Start rules of :func:`start_context` (``"auto"`` is resolved by the mechanism).
START_RULES = ("cell", "full", "climb")


def start_context(evaluator, max_evaluations: int = 100_000, batch_size: int = 4096,
                  start: str = "cell") -> Optional[np.ndarray]:
    """The starting context ``C_V`` (Section 5.2, footnote 5): a fixed, documented rule.

    Two rules, mirror images of each other on the lattice of contexts
    containing ``V`` (``V``'s own bits always set; only the ``t - m`` free
    bits vary):

    * ``start="cell"`` (bottom-up): ``V``'s own cell (exactly ``V``'s values
      set) if it is valid; else the contexts containing ``V`` in order of
      Hamming distance from the cell (**adding** ``d = 1, 2, ...`` free
      bits), within one distance in lexicographic order of the added bit
      indices (``itertools.combinations`` of the free bits, lowest bit
      first); the first valid one.  The natural reference for the overlap
      utility (``C_V`` small and specific to ``V``).
    * ``start="full"`` (top-down): the full context (every bit set, the
      whole dataset; it contains ``V``) if it is valid; else the contexts
      containing ``V`` in order of Hamming distance from the full context
      (**removing** ``d = 1, 2, ...`` free bits), within one distance in
      lexicographic order of the removed bit indices (lowest bit first); the
      first valid one.  If none is found within ``max_evaluations`` (valid
      contexts lie deep below the top: e.g. 17 free bits need up to
      ~110,000 tests to reach distance 10, 28 free bits reach only distance
      ~4 with 100,000), the ``"cell"`` search follows with its own
      ``max_evaluations`` -- so ``"full"`` finds a start whenever ``"cell"``
      does.  Population size grows with the set bits, so the search starts
      near the top of the lattice and BFS/DFS reach near-maximal contexts
      even with the tiny ``eps1 = eps / (2n + 2)``.

    * ``start="climb"``: the ``"cell"`` start, then a greedy ascent by
      validity alone (:func:`_climb`): repeatedly add the **lowest** free bit
      whose addition keeps the context valid, until no single addition does
      (or another ``max_evaluations`` tests were spent). Population size
      never shrinks when a bit is added, so ``C_V`` ends at a locally maximal
      valid context -- usually a large one -- while the rule, like the
      others, never looks at a population size.

    Parameters
    ----------
    evaluator : ContextEvaluator
        Supplies ``cell_context`` and ``valid(contexts)``.
    max_evaluations : int
        At most this many contexts (the cell or the full context included)
        are tested per search (``"full"``: up to twice this, top-down then
        the ``"cell"`` fallback); ``>= 1``.
    batch_size : int
        Contexts per ``valid`` call (each distance layer is tested in
        batches; the first valid context in the fixed order is returned, so
        batching does not change the result).
    start : {"cell", "full", "climb"}
        The rule (above).

    Returns
    -------
    numpy.ndarray of shape (t,) bool, or None
        ``C_V``, or ``None`` when no valid context was found within
        ``max_evaluations`` (the mechanism then reports
        ``"no_valid_context"``).

    Raises
    ------
    ValueError
        ``start`` not one of ``"cell"``, ``"full"``, ``"climb"``; ``max_evaluations < 1``.

    Notes
    -----
    Privacy: every rule (and the fallback) read the data **only through
    validity** ``f_M(D_C, V)`` (a fixed visiting order, stopped at the first
    valid context), so ``C_V`` -- and the ``None`` outcome -- is a function of
    ``COE_M(D, V)`` alone (and of ``V``'s cell, which is the same in
    neighbouring datasets).  OCDP neighbours share ``COE_M(., V)``
    (Definitions 2.4-2.5), hence get the same ``C_V``: the start costs no
    privacy, and the proofs of Theorems 5.3-5.7, which condition on
    ``C_V`` (the walk / search starts there; for the overlap utility it is
    also the reference), hold unchanged for either rule.  ``C_V`` does
    depend on the data (it is internal and never released on its own).

    Constant work (issue 46.2, DESIGN.md rule 14): the rule's work does not
    depend on the record or the data.  Every scan tests its whole bound
    (``min(max_evaluations, 2^f)`` contexts, ``f = t - m`` free bits, in the
    order above) and only then takes the first valid context of that order;
    ``"full"`` always runs the ``"cell"`` scan as well; ``"climb"`` climbs
    (from the cell when no start was found, its result then discarded) and
    pads its tests to ``min(max_evaluations, f (f + 1) / 2)``.  Every context is
    verified afresh (never answered from the cache).  The returned ``C_V``
    is exactly the one of the early-exiting rule.
    """
    if not isinstance(start, str) or start not in START_RULES:
        raise ValueError(f"start must be one of {', '.join(START_RULES)}; got {start!r}")
    if isinstance(max_evaluations, bool) or int(max_evaluations) < 1:
        raise ValueError(f"max_evaluations must be an integer >= 1, got {max_evaluations!r}")
    max_evaluations = int(max_evaluations)
    cell = np.asarray(evaluator.cell_context, dtype=bool)
    # constant work (issue 46.2): every scan tests its whole bound, whatever it finds, and "full" always
    # runs its "cell" fallback too; the start is the first valid context of the same order as before
    top = _first_valid(evaluator, np.ones_like(cell), False, max_evaluations, batch_size) if start == "full" else None
    found = _first_valid(evaluator, cell.copy(), True, max_evaluations, batch_size)
    if start == "full":
        return top if top is not None else found
    if start == "climb":
        climbed = _climb(evaluator, cell if found is None else found, max_evaluations)
        return None if found is None else climbed
    return found


def _climb_bound(f: int, max_evaluations: int) -> int:
    """The most contexts :func:`_climb` can test: ``min(max_evaluations, f (f + 1) / 2)`` (``f`` free bits)."""
    return min(int(max_evaluations), f * (f + 1) // 2)


def _climb(evaluator, base: np.ndarray, max_evaluations: int) -> np.ndarray:
    """Greedy ascent by validity: add the lowest free bit that keeps the context valid, until none does.

    Each round tests every single-bit addition of the current context (one
    ``valid`` batch of the unset free bits) and keeps the lowest-index valid
    one; it stops at a context no single addition keeps valid (a maximal
    valid context of the lattice's neighbourhood), or once ``max_evaluations``
    contexts were tested, returning the last valid context reached.  At most
    ``f`` rounds of at most ``f`` tests (``f`` free bits).  Reads the data only
    through validity, in a fixed order: a function of ``COE_M(D, V)``.
    Constant work: after the ascent stops, dummy tests (repeats of the last
    round's contexts, discarded) bring the count to :func:`_climb_bound`.
    """
    free = _free_bits(evaluator)
    c = np.asarray(base, dtype=bool).copy()
    evaluated = 0
    last = c[None, :]
    while evaluated < max_evaluations:
        off = free[~c[free]][: max_evaluations - evaluated]
        if off.size == 0:
            break
        batch = np.repeat(c[None, :], off.size, axis=0)
        batch[np.arange(off.size), off] = True
        ok = np.flatnonzero(_verify(evaluator, batch))
        evaluated += off.size
        last = batch
        if ok.size == 0:
            break
        c = batch[ok[0]].copy()
    bound = _climb_bound(free.size, max_evaluations)
    _pad_verify(evaluator, last, bound - evaluated)
    _tally(evaluator, "start_contexts", max(bound, evaluated))
    return c


def _first_valid(evaluator, base: np.ndarray, flip_to: bool, max_evaluations: int,
                 batch_size: int) -> Optional[np.ndarray]:
    """First valid context setting free bits of ``base`` to ``flip_to``, by distance then lexicographically.

    Tests the whole bound (``min(max_evaluations, 2^f)`` contexts, in the same order and
    batches whatever is found) and returns the first valid one of that order
    -- the context the early-exiting scan returned -- or ``None``.
    """
    free = _free_bits(evaluator)
    evaluated = 0
    found = None
    for d in range(free.size + 1):
        combos = itertools.combinations(free.tolist(), d)
        while evaluated < max_evaluations:
            chunk = list(itertools.islice(combos, min(batch_size, max_evaluations - evaluated)))
            if not chunk:
                break
            batch = np.repeat(base[None, :], len(chunk), axis=0)
            if d > 0:
                idx = np.asarray(chunk, dtype=np.int64)
                rows = np.repeat(np.arange(len(chunk)), d)
                batch[rows, idx.ravel()] = flip_to
            ok = _verify(evaluator, batch)
            evaluated += len(chunk)
            hit = np.flatnonzero(ok)
            if found is None and hit.size:
                found = batch[hit[0]].copy()
            if found is not None and not _CONSTANT_WORK.get():  # exact replays only: stop at the first
                break
        if evaluated >= max_evaluations or (found is not None and not _CONSTANT_WORK.get()):
            break
    _tally(evaluator, "start_contexts", evaluated)
    return found


# ---------------------------------------------------------------------------
# Algorithm 1: direct
# ---------------------------------------------------------------------------


def direct_candidates(evaluator, max_contexts: int = 2**20) -> np.ndarray:
    """All valid contexts containing ``V``: ``COE_M(D, V)`` (Algorithm 1, lines 1-7).

    Parameters
    ----------
    evaluator : ContextEvaluator
        ``enumerate_valid(max_contexts)`` tests all ``2^(t-m)`` contexts
        containing ``V`` (the other contexts are never valid).
    max_contexts : int
        Refuse (``ValueError`` from the evaluator) beyond this many.

    Returns
    -------
    numpy.ndarray, shape (K, t), bool
        The valid contexts in key order (possibly ``K = 0``).
    """
    keys, ok = evaluator.enumerate_valid(max_contexts=max_contexts)
    keys = np.asarray(keys, dtype=np.uint64)[np.asarray(ok, dtype=bool)]
    if keys.size == 0:
        return np.zeros((0, int(evaluator.t)), dtype=bool)
    return np.asarray(evaluator.space.unpack(keys), dtype=bool)


def direct(evaluator, epsilon_step: float, chooser: Chooser, *, reference: Optional[np.ndarray] = None,
           max_contexts: int = 2**20) -> Optional[np.ndarray]:
    """Algorithm 1 (Section 4): the exponential mechanism over all of ``COE_M(D, V)``.

    Parameters
    ----------
    evaluator : ContextEvaluator
    epsilon_step : float
        ``2 eps1`` (dpcore convention; module docstring).
    chooser : Chooser
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility.
    max_contexts : int
        Enumeration bound (``2^(t-m)`` must not exceed it).

    Returns
    -------
    numpy.ndarray of shape (t,) bool, or None
        The released context; ``None`` if ``COE_M(D, V)`` is empty.

    Notes
    -----
    Theorem 4.1: ``(2 eps1, COE_M(., V))``-OCDP, one exponential-mechanism
    call; add/remove-one neighbours.  Cost ``O(2^(t-m))`` verifications
    (Theorem 4.2, restricted to contexts containing ``V``).
    """
    cands = direct_candidates(evaluator, max_contexts)
    if cands.shape[0] == 0:
        return None
    return select_final(evaluator, cands, epsilon_step, chooser, reference)


# ---------------------------------------------------------------------------
# Algorithm 2: uniform sampling
# ---------------------------------------------------------------------------


def _uniform_free_bits(chooser: Chooser, f: int) -> np.ndarray:
    """``f`` independent fair bits from ``chooser.uniform`` (chunks of 30 bits)."""
    out = np.zeros(f, dtype=bool)
    pos = 0
    while pos < f:
        w = min(_BITS_PER_DRAW, f - pos)
        v = int(chooser.uniform(1 << w))
        for b in range(w):
            out[pos + b] = bool((v >> b) & 1)
        pos += w
    return out


#: Contexts per verifier call of the constant-work uniform sampler (a public batch size).
UNIFORM_BATCH = 4096


def _uniform_many(chooser: Chooser, k: int, size: int) -> np.ndarray:
    """``size`` independent uniform indices in ``range(k)``, as an int64 array.

    Through the chooser's ``uniform_many(k, size)`` when it has one
    (:class:`NoiseChooser`: one vectorised, exactly uniform
    ``NoiseSource.integers`` call); otherwise ``size`` calls of
    ``chooser.uniform(k)`` in order (instrumented test choosers).
    """
    many = getattr(chooser, "uniform_many", None)
    if many is not None:
        return np.asarray(many(int(k), int(size)), dtype=np.int64).reshape(-1)
    return np.array([int(chooser.uniform(int(k))) for _ in range(int(size))], dtype=np.int64)


def _uniform_draw_bits(chooser: Chooser, f: int, draws: int) -> list[np.ndarray]:
    """The free bits of ``draws`` uniform draws, as one int64 array per chunk of at most 30 bits.

    Chunk ``c`` holds bits ``30 c ... 30 c + w - 1`` of every draw (bit ``b``
    of a value is free bit ``30 c + b``), the mapping of
    :func:`_uniform_free_bits`; each value is uniform over ``range(2^w)``, so
    every free bit of every draw is an independent fair bit.
    """
    out = []
    pos = 0
    while pos < f:
        w = min(_BITS_PER_DRAW, f - pos)
        out.append(_uniform_many(chooser, 1 << w, draws))
        pos += w
    return out


def _contexts_of(cell: np.ndarray, free: np.ndarray, chunks: list[np.ndarray], rows: slice) -> np.ndarray:
    """The contexts of the draws ``rows``: ``V``'s cell with the drawn free bits set (chunk mapping above)."""
    batch = np.repeat(cell[None, :], chunks[0][rows].shape[0], axis=0)
    pos = 0
    for values in chunks:
        w = min(_BITS_PER_DRAW, free.size - pos)
        bits = ((values[rows][:, None] >> np.arange(w, dtype=np.int64)[None, :]) & 1).astype(bool)
        batch[:, free[pos:pos + w]] = bits
        pos += w
    return batch


def uniform_candidates(evaluator, start: np.ndarray, n: int, chooser: Chooser, *, max_draws: int = 100_000,
                       progress: Progress = None) -> np.ndarray:
    """Uniform sampling of valid contexts (Algorithm 2, lines 1-10).

    Each draw sets every free bit to 1 with probability ``p = 1/2``
    (Algorithm 2, line 5 and comment on line 13) and keeps ``V``'s own bits
    at 1.  This is the paper's uniform draw over all ``2^t`` contexts
    *conditioned on containing V*: contexts not containing ``V`` are never
    valid, so rejecting them (as line 7 does) or never drawing them gives the
    same distribution of accepted samples.  The samples are the first ``n``
    valid draws (line 3, read as exactly ``n`` samples) among at most
    ``max_draws`` draws.

    Parameters
    ----------
    evaluator : ContextEvaluator
    start : numpy.ndarray, shape (t,), bool
        ``C_V``; used only if no valid sample is found within ``max_draws``.
    n : int
        Number of valid samples, ``>= 1``.
    chooser : Chooser
        Only ``uniform`` (or its vectorised form ``uniform_many``) is called
        (data independent).
    max_draws : int
        Bound on the number of draws (Theorem 5.2: about ``n 2^(t-m) / |COE|``
        are needed on average).
    progress : callable or None
        ``progress(batches_done, batches)`` after each verifier batch
        (public counts).

    Returns
    -------
    numpy.ndarray, shape (k, t), bool
        The sample **multiset** ``C_M`` (line 8; a context drawn twice appears
        twice), ``k = n`` unless fewer of the ``max_draws`` draws were valid.
        With ``0 < k < n`` valid samples those ``k`` are used; with ``k = 0``
        the multiset is ``[C_V]``.

    Notes
    -----
    Privacy: the draws are data independent and accepted by validity only,
    so the multiset's distribution is the same for OCDP neighbours; the
    sampling costs nothing (Theorem 5.1, eq. 6 factor ``Pr[C_p in C_M]``).

    Constant work (issue 46.2, DESIGN.md rule 14): the paper's loop draws
    until it has ``n`` valid samples, so its number of draws and
    verifications -- and its duration -- said how many valid contexts the
    record has (none for a record that is not an outlier anywhere, or for an
    absent id's stand-in). Here every search makes exactly ``max_draws``
    draws (vectorised, :func:`_uniform_many`) and exactly
    ``min(2^f, max_draws)`` fresh verifications (``f = t - m`` free bits) in
    batches of :data:`UNIFORM_BATCH` contexts, whatever it finds:

    * ``2^f <= max_draws`` (and ``f <= 30``): every one of the ``2^f`` contexts containing
      ``V`` is verified once and each draw's validity is looked up (a draw
      is the index of its context, bit ``b`` = free bit ``b``);
    * otherwise every draw is verified (repeats included).

    The samples are then the first ``n`` valid draws in draw order. Exactly
    the same distribution as the early-stopping loop (``without_constant_work``):
    draws are i.i.d., so the prefix up to the ``n``-th valid draw (or the
    bound) has the same law whether the draws after it are made or not; and
    the released context depends only on that prefix. With the default
    bounds (``max_uniform_draws = max_start_evaluations = 100,000``) the
    sampler's verifications are at most the start rule's own, so a uniform
    search costs at most about twice the start search it follows; the draws
    cost one vectorised CSPRNG call per 30 free bits. Measured on the demo's
    flights (``f = 28``, BENCHMARKS.md "Absent records do the same work",
    2026-12-07 18:54 UTC, load about 10): a uniform search took 6-9 s
    (median 8.2 s present, 8.8 s absent), drawn record or most delayed
    flight, with one set of work counts for all, about twice BFS's 3.3-5.2 s
    in the same run. The memory is ``8 max_draws`` bytes per 30 free
    bits (0.8 MB at the default).
    """
    free = _free_bits(evaluator)
    f = int(free.size)
    cell = np.asarray(evaluator.cell_context, dtype=bool)
    if not _CONSTANT_WORK.get():  # the paper's loop, stopped at the n-th valid draw (equivalence tests)
        return _uniform_until(evaluator, start, n, chooser, max_draws, progress)
    draws = int(max_draws)
    _tally(evaluator, "uniform_draws", draws)
    chunks = _uniform_draw_bits(chooser, f, draws) or [np.zeros(draws, dtype=np.int64)]  # f = 0: one context
    table = f <= _BITS_PER_DRAW and (1 << f) <= draws  # one chunk: a draw is its context's number
    total = (1 << f) if table else draws
    n_batches = -(-total // UNIFORM_BATCH)
    valid = np.zeros(total, dtype=bool)
    for b in range(n_batches):
        rows = slice(b * UNIFORM_BATCH, min(total, (b + 1) * UNIFORM_BATCH))
        if table:  # context number i: free bit j set iff bit j of i (the chunk mapping, one chunk)
            ids = np.arange(rows.start, rows.stop, dtype=np.int64)
            batch = _contexts_of(cell, free, [ids], slice(None))
        else:
            batch = _contexts_of(cell, free, chunks, rows)
        valid[rows] = _verify(evaluator, batch)
        if progress is not None:
            progress(b + 1, n_batches)
    ok = valid[chunks[0]] if table else valid
    first = np.flatnonzero(ok)[: int(n)]
    if first.size == 0:
        return np.asarray(start, dtype=bool)[None, :].copy()
    return _contexts_of(cell, free, chunks, first)


def _uniform_until(evaluator, start: np.ndarray, n: int, chooser: Chooser, max_draws: int,
                   progress: Progress) -> np.ndarray:
    """The paper's loop: draw until ``n`` valid samples or ``max_draws`` draws (:func:`uniform_candidates`).

    The work of this loop depends on the record (how many of its contexts
    are valid): used only inside :func:`without_constant_work`, to test that
    :func:`uniform_candidates` returns exactly its samples.
    """
    free = _free_bits(evaluator)
    cell = np.asarray(evaluator.cell_context, dtype=bool)
    samples: list[np.ndarray] = []
    draws = 0
    while len(samples) < n and draws < max_draws:
        need = n - len(samples)
        b = int(min(max(2 * need, 16), 4096, max_draws - draws))
        batch = np.repeat(cell[None, :], b, axis=0)
        for i in range(b):
            batch[i, free] = _uniform_free_bits(chooser, free.size)
        ok = np.asarray(evaluator.valid(batch), dtype=bool)
        draws += b
        for r in np.flatnonzero(ok)[:need]:
            samples.append(batch[r].copy())
        if progress is not None:
            progress(len(samples), n)
    if not samples:
        return np.asarray(start, dtype=bool)[None, :].copy()
    return np.asarray(samples, dtype=bool)


def uniform(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
            reference: Optional[np.ndarray] = None, max_draws: int = 100_000,
            progress: Progress = None) -> np.ndarray:
    """Algorithm 2 (Section 5.1): uniform sampling, then the exponential mechanism.

    Parameters
    ----------
    evaluator, start, n, chooser, max_draws, progress
        See :func:`uniform_candidates`.
    epsilon_step : float
        ``2 eps1``.
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility.

    Returns
    -------
    numpy.ndarray, shape (t,), bool
        The released context.

    Notes
    -----
    Theorem 5.1: ``(2 eps1, COE_M(., V))``-OCDP; one exponential-mechanism
    call over the sample multiset; add/remove-one neighbours.
    """
    cands = uniform_candidates(evaluator, start, n, chooser, max_draws=max_draws, progress=progress)
    return select_final(evaluator, cands, epsilon_step, chooser, reference)


# ---------------------------------------------------------------------------
# Algorithm 3: random walk
# ---------------------------------------------------------------------------


def random_walk_candidates(evaluator, start: np.ndarray, n: int, chooser: Chooser, *,
                           progress: Progress = None, pad: Optional[Chooser] = None) -> np.ndarray:
    """The random walk's multiset ``C_M`` (Algorithm 3, lines 1-15).

    From the current context, the paper draws connected contexts uniformly
    *without replacement* (lines 5-7, 13; Theorem 5.4's proof) until one is
    valid, moves there and records it (lines 8-10).  Drawing without
    replacement until the first valid one selects each valid neighbour with
    probability ``1/k`` (``k`` valid neighbours), so each step here verifies
    all neighbours in one batch and draws ``chooser.uniform(k)`` among the
    valid ones, in bit order: the same distribution with one chooser call per
    step.

    Parameters
    ----------
    evaluator : ContextEvaluator
    start : numpy.ndarray, shape (t,), bool
        ``C_V`` (valid).
    n : int
        Number of steps (line 3 ``|C_M| <= n`` read as ``n`` steps after
        ``C_V``), ``>= 1``.
    chooser : Chooser
        Only ``uniform`` is called.
    progress : callable or None
        ``progress(steps, n)`` after each step.
    pad : Chooser or None
        Chooser of the padding draws (default :func:`_pad_chooser`).

    Returns
    -------
    numpy.ndarray, shape (k, t), bool
        The walk ``[C_V, C_1, ..., C_n]`` as a **multiset** (comment, line
        18: revisits count again).  Shorter (only ``[C_V]``) when ``C_V`` has
        no valid neighbour (line 3, ``C_conn = ∅``); after the first step the
        walk can always step back, so it never stops early otherwise.

    Notes
    -----
    Privacy: moves depend on the data only through validity, so the walk's
    distribution is identical for OCDP neighbours (Theorem 5.3).
    Constant work (issue 46.2): exactly ``n`` expansions of ``f`` fresh
    verifications each and ``n`` CSPRNG draws (a step with a single valid
    neighbour, where ``uniform(1)`` draws nothing, makes a discarded draw
    from ``pad``); a walk stuck at ``C_V`` continues with dummy expansions
    (discarded, their draws from ``pad``).
    """
    free = _free_bits(evaluator)
    pad = _pad_chooser(chooser) if pad is None else pad
    current = np.asarray(start, dtype=bool).copy()
    walk = [current.copy()]
    expansions = 0
    for step in range(int(n)):
        nb = _neighbours(evaluator, current, free)
        expansions += 1
        idx = np.flatnonzero(_verify(evaluator, nb)) if nb.shape[0] else np.zeros(0, int)
        if idx.size == 0:
            if _CONSTANT_WORK.get():  # the step's draw, discarded
                pad.uniform(max(int(free.size), 2))
            break
        j = int(chooser.uniform(idx.size))
        if idx.size == 1 and _CONSTANT_WORK.get():  # uniform(1) draws nothing: a discarded draw instead
            pad.uniform(2)
        current = nb[idx[j]].copy()
        walk.append(current.copy())
        if progress is not None:
            progress(step + 1, int(n))
    for _ in (range(expansions, int(n)) if _CONSTANT_WORK.get() else ()):  # padding: walk stuck
        expansions += 1
        nb = _neighbours(evaluator, current, free)
        if nb.shape[0]:
            _verify(evaluator, nb)
        pad.uniform(max(int(free.size), 2))
    _tally(evaluator, "expansions", expansions)
    return np.asarray(walk, dtype=bool)


def random_walk(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
                reference: Optional[np.ndarray] = None, progress: Progress = None) -> np.ndarray:
    """Algorithm 3 (Section 5.2.1): random walk, then the exponential mechanism.

    Parameters
    ----------
    evaluator, start, n, chooser, progress
        See :func:`random_walk_candidates`.
    epsilon_step : float
        ``2 eps1``.
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility.

    Returns
    -------
    numpy.ndarray, shape (t,), bool
        The released context.

    Notes
    -----
    Theorem 5.3: ``(2 eps1, COE_M(., V))``-OCDP; one exponential-mechanism
    call (line 17); add/remove-one neighbours.
    """
    cands = random_walk_candidates(evaluator, start, n, chooser, progress=progress)
    return select_final(evaluator, cands, epsilon_step, chooser, reference)


# ---------------------------------------------------------------------------
# Algorithm 4: DFS
# ---------------------------------------------------------------------------


def dfs_candidates(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
                   reference: Optional[np.ndarray] = None, progress: Progress = None,
                   pad: Optional[Chooser] = None) -> np.ndarray:
    """Private depth-first search (Algorithm 4, lines 1-20), exactly ``n`` selections.

    The stack starts as ``[C_V]`` and ``Visited = {C_V}``.  Each iteration
    looks at the top ``C`` (line 4); its children are the valid neighbours
    not yet visited (lines 6-11).  No children: pop (line 13, no
    exponential-mechanism call).  Otherwise one child is selected by the
    exponential mechanism (line 17), marked visited and pushed (line 18).
    The loop stops after ``n`` selections (the paper's ``|Visited| <= n``
    made exact; module docstring) or when the stack empties (every context
    reachable from ``C_V`` through valid contexts has been visited).

    Parameters
    ----------
    evaluator : ContextEvaluator
    start : numpy.ndarray, shape (t,), bool
        ``C_V`` (valid).
    n : int
        Number of exponential-mechanism selections, ``>= 1``.
    epsilon_step : float
        ``2 eps1`` per call.
    chooser : Chooser
        Only ``exponential`` is called, at most ``n`` times.
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility.
    progress : callable or None
        ``progress(selections, n)`` after each selection.
    pad : Chooser or None
        Chooser of the padding draws (default :func:`_pad_chooser`).

    Returns
    -------
    numpy.ndarray, shape (k, t), bool
        ``Visited`` in visiting order: ``C_V`` then the selected contexts, all
        distinct (a **set**); ``k = n + 1`` unless the reachable valid
        component had fewer contexts.

    Notes
    -----
    Constant work (issue 46.2): a DFS makes at most ``2n - 1`` iterations
    (``s`` selections and at most ``s + 1`` pops, or ``n`` selections and at
    most ``n - 1`` pops); every search makes exactly ``2n - 1``, each
    verifying all ``f`` neighbours afresh, computing their ``f`` utilities and
    drawing over ``f`` candidates (a pop's draw, and the iterations after the
    search ended, are dummies over ``C_V``'s neighbours, discarded, drawn
    from ``pad``).
    """
    free = _free_bits(evaluator)
    f = int(free.size)
    pad = _pad_chooser(chooser) if pad is None else pad
    util = _Utilities(evaluator, reference)
    start = np.asarray(start, dtype=bool).copy()
    stack = [start]
    visited_keys = set(_keys(evaluator, start[None, :]))
    visited = [start.copy()]
    selections = 0
    iterations = 0
    while selections < n and stack:
        iterations += 1
        top = stack[-1]
        nb = _neighbours(evaluator, top, free)
        _tally(evaluator, "selections", 1)
        if nb.shape[0] == 0:
            stack.pop()
            continue
        keys = _keys(evaluator, nb)
        ok = _verify(evaluator, nb)
        util.refresh(nb, keys)
        ok &= np.array([k not in visited_keys for k in keys], dtype=bool)
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            _pad_em(evaluator, pad, 0, f, epsilon_step)  # a pop does a selection's work
            stack.pop()
            continue
        children = nb[idx]
        child_keys = [keys[i] for i in idx]
        j = int(chooser.exponential(util(children, child_keys), epsilon_step))
        _pad_em(evaluator, pad, idx.size, f, epsilon_step)
        c = children[j].copy()
        stack.append(c)
        visited_keys.add(child_keys[j])
        visited.append(c.copy())
        selections += 1
        if progress is not None:
            progress(selections, int(n))
    for _ in (range(iterations, 2 * int(n) - 1) if _CONSTANT_WORK.get() else ()):  # padding to 2n - 1
        iterations += 1
        _tally(evaluator, "selections", 1)
        nb = _neighbours(evaluator, start, free)
        if nb.shape[0]:
            _verify(evaluator, nb)
            util.refresh(nb, _keys(evaluator, nb))
            _pad_em(evaluator, pad, 0, f, epsilon_step)
    _tally(evaluator, "expansions", iterations)
    return np.asarray(visited, dtype=bool)


def dfs(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
        reference: Optional[np.ndarray] = None, progress: Progress = None) -> np.ndarray:
    """Algorithm 4 (Section 5.2.2): private DFS, then the final exponential mechanism on ``Visited``.

    Parameters
    ----------
    evaluator, start, n, epsilon_step, chooser, reference, progress
        See :func:`dfs_candidates`.

    Returns
    -------
    numpy.ndarray, shape (t,), bool
        The released context (line 22: ``Exp_u^{eps1}(D, Visited)``).

    Notes
    -----
    Theorem 5.5: ``((2n+2) eps1, COE_M(., V))``-OCDP: at most ``n``
    selections plus the final call, ``2 eps1`` each; add/remove-one
    neighbours.
    """
    cands = dfs_candidates(evaluator, start, n, epsilon_step, chooser, reference=reference, progress=progress)
    return select_final(evaluator, cands, epsilon_step, chooser, reference)


# ---------------------------------------------------------------------------
# Algorithm 5: BFS
# ---------------------------------------------------------------------------


def bfs_candidates(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
                   reference: Optional[np.ndarray] = None, progress: Progress = None,
                   pad: Optional[Chooser] = None) -> np.ndarray:
    """Private breadth-first search (Algorithm 5, lines 1-14), exactly ``n`` selections.

    ``Visited = {C_V}`` and the frontier ``C_M`` holds the valid neighbours of
    ``C_V`` (the paper starts with ``C_M = {C_V}`` and spends its first,
    degenerate, selection on ``C_V``; here ``C_V`` is visited directly).
    Each iteration selects one frontier context by the exponential mechanism
    (line 5), moves it to ``Visited`` (line 6) and adds its valid neighbours
    that are neither visited nor already in the frontier (lines 8-13; the
    frontier is a **set**, kept in insertion order).  The loop stops after
    ``n`` selections or when the frontier is empty (every context reachable
    from ``C_V`` through valid contexts has been visited).

    Parameters
    ----------
    evaluator : ContextEvaluator
    start : numpy.ndarray, shape (t,), bool
        ``C_V`` (valid).
    n : int
        Number of exponential-mechanism selections, ``>= 1``.
    epsilon_step : float
        ``2 eps1`` per call.
    chooser : Chooser
        Only ``exponential`` is called, at most ``n`` times.
    reference : numpy.ndarray or None
        ``C_V`` for the overlap utility.
    progress : callable or None
        ``progress(selections, n)`` after each selection.
    pad : Chooser or None
        Chooser of the padding draws (default :func:`_pad_chooser`).

    Returns
    -------
    numpy.ndarray, shape (k, t), bool
        ``Visited`` in visiting order (distinct), ``k = n + 1`` unless the
        frontier emptied first.

    Notes
    -----
    Constant work (issue 46.2): exactly ``n`` expansions (``C_V``'s, then one
    after each selection but the last), each verifying all ``f`` neighbours
    afresh and computing their ``f`` utilities, and exactly ``n`` selections,
    the ``j``-th drawn over :func:`_frontier_bound` ``(f, j)`` candidates (the
    frontier, padded by a discarded draw from ``pad``); when the frontier
    empties first, dummy selections and expansions (of ``C_V``'s neighbours,
    discarded) follow.
    """
    free = _free_bits(evaluator)
    f = int(free.size)
    pad = _pad_chooser(chooser) if pad is None else pad
    util = _Utilities(evaluator, reference)
    start = np.asarray(start, dtype=bool).copy()
    visited_keys = set(_keys(evaluator, start[None, :]))
    visited = [start.copy()]
    frontier: list[np.ndarray] = []
    frontier_keys: list[int] = []
    expansions = 0

    def expand(c: np.ndarray) -> None:
        nonlocal expansions
        expansions += 1
        nb = _neighbours(evaluator, c, free)
        if nb.shape[0] == 0:
            return
        keys = _keys(evaluator, nb)
        ok = _verify(evaluator, nb)
        util.refresh(nb, keys)
        in_frontier = set(frontier_keys)
        for i in np.flatnonzero(ok):
            k = keys[i]
            if k not in visited_keys and k not in in_frontier:
                frontier.append(nb[i].copy())
                frontier_keys.append(k)
                in_frontier.add(k)

    expand(start)
    selections = 0
    while selections < n and frontier:
        u = util(np.asarray(frontier, dtype=bool), frontier_keys)
        _tally(evaluator, "selections", 1)
        j = int(chooser.exponential(u, epsilon_step))
        _pad_em(evaluator, pad, len(frontier), _frontier_bound(f, selections + 1), epsilon_step)
        c = frontier.pop(j)
        k = frontier_keys.pop(j)
        visited_keys.add(k)
        visited.append(c.copy())
        selections += 1
        if progress is not None:
            progress(selections, int(n))
        if selections < n:
            expand(c)
    for s in (range(selections, int(n)) if _CONSTANT_WORK.get() else ()):  # padding: frontier empty
        _tally(evaluator, "selections", 1)
        _pad_em(evaluator, pad, 0, _frontier_bound(f, s + 1), epsilon_step)
        if s + 1 < n:
            expansions += 1
            nb = _neighbours(evaluator, start, free)
            if nb.shape[0]:
                _verify(evaluator, nb)
                util.refresh(nb, _keys(evaluator, nb))
    _tally(evaluator, "expansions", expansions)
    return np.asarray(visited, dtype=bool)


def bfs(evaluator, start: np.ndarray, n: int, epsilon_step: float, chooser: Chooser, *,
        reference: Optional[np.ndarray] = None, progress: Progress = None) -> np.ndarray:
    """Algorithm 5 (Section 5.2.3): private BFS, then the final exponential mechanism on ``Visited``.

    Parameters
    ----------
    evaluator, start, n, epsilon_step, chooser, reference, progress
        See :func:`bfs_candidates`.

    Returns
    -------
    numpy.ndarray, shape (t,), bool
        The released context (line 16: ``Exp_u^{eps1}(D, Visited)``).

    Notes
    -----
    Theorem 5.7: ``((2n+2) eps1, COE_M(., V))``-OCDP: at most ``n``
    selections plus the final call, ``2 eps1`` each; add/remove-one
    neighbours.
    """
    cands = bfs_candidates(evaluator, start, n, epsilon_step, chooser, reference=reference, progress=progress)
    return select_final(evaluator, cands, epsilon_step, chooser, reference)
