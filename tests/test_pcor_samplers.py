"""PCOR samplers (Algorithms 1-5), the mechanism's parameters and charge, and the
production draws against the exact distributions (issue 6).

Two small evaluators implementing the ContextEvaluator API of the PCOR contract
(``space``, ``t``, ``cell_context``, ``valid``, ``utility``, ``n_verified``,
``enumerate_valid``) are defined here and reused by ``test_pcor_privacy.py``:

* :class:`OracleEvaluator` -- brute force over the rows of a tiny dataset with
  a pluggable verifier (a reference, independent of the engine's fast path);
* :class:`SetEvaluator` -- validity and utility given explicitly by tables, to
  build graphs with a known shape (frontier exhaustion, start rule).
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.pcor import samplers as S
from dpcore.mechanisms.pcor.exact import exact_output_distribution
from dpcore.mechanisms.pcor.mechanism import PCORMechanism, PCORResult, SAMPLERS
from dpcore.noise import NoiseSource

# ---------------------------------------------------------------------------
# Test evaluators (same API as dpcore.mechanisms.pcor.evaluator.ContextEvaluator)
# ---------------------------------------------------------------------------


class ToySpace:
    """Bit vectors over full domains of sizes ``sizes`` (bit i of the key = bit i of the context)."""

    def __init__(self, sizes):
        self.sizes = tuple(int(s) for s in sizes)
        self.t = sum(self.sizes)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self._w = (np.uint64(1) << np.arange(self.t, dtype=np.uint64)).astype(np.uint64)

    def cell_context(self, codes_row) -> np.ndarray:
        c = np.zeros(self.t, dtype=bool)
        c[self.offsets + np.asarray(codes_row)] = True
        return c

    def contains(self, contexts, codes_row) -> np.ndarray:
        return np.asarray(contexts, dtype=bool)[:, self.offsets + np.asarray(codes_row)].all(axis=1)

    def flip_all(self, context) -> np.ndarray:
        return np.tile(np.asarray(context, dtype=bool), (self.t, 1)) ^ np.eye(self.t, dtype=bool)

    def pack(self, contexts) -> np.ndarray:
        c = np.atleast_2d(np.asarray(contexts, dtype=bool))
        return (c.astype(np.uint64) * self._w).sum(axis=1, dtype=np.uint64)

    def unpack(self, keys) -> np.ndarray:
        k = np.asarray(keys, dtype=np.uint64)
        return ((k[:, None] & self._w[None, :]) != 0)


def grubbs_verifier(alpha: float = 0.05):
    """Two-sided Grubbs test on V's own value (a single test, not generalized ESD)."""

    def f(values: np.ndarray, v: float) -> bool:
        n = values.size
        if n < 3:
            return False
        sd = values.std(ddof=1)
        if sd == 0:
            return False
        g = abs(v - values.mean()) / sd
        tc = stats.t.ppf(1 - alpha / (2 * n), n - 2)
        crit = (n - 1) / math.sqrt(n) * math.sqrt(tc * tc / (n - 2 + tc * tc))
        return bool(g > crit)

    f.name = "grubbs"
    return f


def zscore_verifier(threshold: float = 2.0, min_size: int = 4):
    """|x_V - median| / MAD-scale > threshold (robust z-score), populations of at least ``min_size``."""

    def f(values: np.ndarray, v: float) -> bool:
        if values.size < min_size:
            return False
        med = np.median(values)
        mad = np.median(np.abs(values - med)) * 1.4826
        if mad == 0:
            return False
        return bool(abs(v - med) / mad > threshold)

    f.name = "zscore"
    return f


class OracleEvaluator:
    """Brute-force ContextEvaluator: filters the rows for every context."""

    def __init__(self, space: ToySpace, codes, metric, row: int, verifier, utility: str = "population"):
        self.space = space
        self.t = space.t
        self.codes = np.asarray(codes, dtype=np.int64)
        self.metric = np.asarray(metric, dtype=np.float64)
        self.row = int(row)
        self.verifier = verifier
        self.utility_name = utility
        self.cell_context = space.cell_context(self.codes[self.row])
        self._row_bits = self.space.offsets[None, :] + self.codes  # (N, m)
        self._valid: dict[int, bool] = {}
        self.valid_calls = 0

    def members(self, contexts) -> np.ndarray:
        c = np.atleast_2d(np.asarray(contexts, dtype=bool))
        return c[:, self._row_bits].all(axis=2)  # (B, N)

    def valid(self, contexts) -> np.ndarray:
        self.valid_calls += 1
        c = np.atleast_2d(np.asarray(contexts, dtype=bool))
        keys = [int(k) for k in self.space.pack(c)]
        out = np.zeros(len(keys), dtype=bool)
        for i, k in enumerate(keys):
            if k not in self._valid:
                mem = self.members(c[i])[0]
                ok = bool(mem[self.row]) and self.verifier(self.metric[mem], self.metric[self.row])
                self._valid[k] = ok
            out[i] = self._valid[k]
        return out

    def utility(self, contexts, reference=None) -> np.ndarray:
        mem = self.members(contexts)
        if self.utility_name == "overlap":
            if reference is None:
                raise ValueError("overlap utility needs a reference context")
            mem = mem & self.members(reference)[0][None, :]
        return mem.sum(axis=1).astype(np.int64)

    @property
    def n_verified(self) -> int:
        return len(self._valid)

    def enumerate_valid(self, max_contexts: int = 2**20):
        free = np.flatnonzero(~self.cell_context)
        if 2 ** free.size > max_contexts:
            raise ValueError(f"2^{free.size} contexts exceed max_contexts={max_contexts}")
        combos = np.array(list(itertools.product([False, True], repeat=free.size)), dtype=bool).reshape(-1, free.size)
        ctx = np.repeat(self.cell_context[None, :], combos.shape[0], axis=0)
        ctx[:, free] = combos
        return self.space.pack(ctx), self.valid(ctx)

    def coe(self) -> frozenset:
        keys, ok = self.enumerate_valid()
        return frozenset(int(k) for k in keys[ok])


class SetEvaluator:
    """ContextEvaluator with validity and utilities given by tables (for graph-shape tests)."""

    def __init__(self, space: ToySpace, cell, valid_keys, utilities: dict | None = None, default_utility: int = 1,
                 utility: str = "population"):
        self.space = space
        self.t = space.t
        self.cell_context = np.asarray(cell, dtype=bool)
        self.valid_keys = set(int(k) for k in valid_keys)
        self.utilities = dict(utilities or {})
        self.default_utility = default_utility
        self.utility_name = utility
        self.seen: set[int] = set()
        self.references = []

    def _contains(self, c):
        return (c | ~self.cell_context[None, :]).all(axis=1)

    def valid(self, contexts):
        c = np.atleast_2d(np.asarray(contexts, dtype=bool))
        keys = [int(k) for k in self.space.pack(c)]
        self.seen.update(keys)
        inside = self._contains(c)
        return np.array([inside[i] and k in self.valid_keys for i, k in enumerate(keys)], dtype=bool)

    def utility(self, contexts, reference=None):
        self.references.append(None if reference is None else np.asarray(reference).copy())
        keys = [int(k) for k in self.space.pack(np.atleast_2d(contexts))]
        return np.array([self.utilities.get(k, self.default_utility) for k in keys], dtype=np.int64)

    @property
    def n_verified(self):
        return len(self.seen)

    def enumerate_valid(self, max_contexts=2**20):
        free = np.flatnonzero(~self.cell_context)
        combos = np.array(list(itertools.product([False, True], repeat=free.size)), dtype=bool).reshape(-1, free.size)
        ctx = np.repeat(self.cell_context[None, :], combos.shape[0], axis=0)
        ctx[:, free] = combos
        return self.space.pack(ctx), self.valid(ctx)


class CountingChooser:
    """Instrumented chooser: records every call (kind, k, epsilon_step) and delegates."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[str, int, float | None]] = []

    def uniform(self, k):
        self.calls.append(("uniform", int(k), None))
        return self.inner.uniform(k)

    def exponential(self, utilities, epsilon_step):
        self.calls.append(("exponential", len(utilities), float(epsilon_step)))
        return self.inner.exponential(utilities, epsilon_step)

    def count(self, kind):
        return sum(1 for c in self.calls if c[0] == kind)


def tiny_dataset(seed: int = 3):
    """Two attributes with 3 values each (t = 6); row 0 is V, a high outlier in cell (0, 0).

    Cell (2, 2) holds large values, so contexts containing both a2 and b2 mask V.
    """
    rng = np.random.default_rng(seed)
    codes = [(0, 0)]
    metric = [30.0]
    for a in range(3):
        for b in range(3):
            k = 3
            for _ in range(k):
                codes.append((a, b))
                metric.append(float(np.round(rng.normal(26.0, 2.0), 1)) if (a, b) == (2, 2)
                              else float(np.round(rng.normal(10.0, 1.5), 1)))
    return np.asarray(codes), np.asarray(metric)


def medium_dataset(seed: int = 5):
    """Three attributes with 3 values each (t = 9; 64 contexts contain V)."""
    rng = np.random.default_rng(seed)
    codes = [(0, 0, 0)]
    metric = [40.0]
    for cell in itertools.product(range(3), repeat=3):
        for _ in range(2):
            codes.append(cell)
            metric.append(float(np.round(rng.normal(10.0, 2.0), 1)) if cell[2] != 2
                          else float(np.round(rng.normal(33.0, 3.0), 1)))
    return np.asarray(codes), np.asarray(metric)


def oracle(sizes, codes, metric, verifier=None, utility="population", row=0):
    return OracleEvaluator(ToySpace(sizes), codes, metric, row, verifier or grubbs_verifier(), utility)


@pytest.fixture
def medium():
    codes, metric = medium_dataset()
    return oracle((3, 3, 3), codes, metric)


# ---------------------------------------------------------------------------
# Sanity of the test instances themselves
# ---------------------------------------------------------------------------


def test_instances_have_valid_and_invalid_contexts(medium):
    coe = medium.coe()
    assert 10 < len(coe) < 64  # some contexts mask V, many do not
    codes, metric = tiny_dataset()
    tiny = oracle((3, 3), codes, metric)
    assert 4 <= len(tiny.coe()) < 16
    assert not tiny.valid(tiny.cell_context[None, :])[0]  # V's own cell is too small: the start rule searches


# ---------------------------------------------------------------------------
# Each algorithm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("utility", ["population", "overlap"])
def test_every_sampler_releases_a_valid_context_containing_v(sampler, utility):
    codes, metric = medium_dataset()
    ev = oracle((3, 3, 3), codes, metric, utility=utility)
    mech = PCORMechanism(sampler, 0.5, n_samples=6, utility=utility)
    for seed in range(5):
        res = mech.explain(ev, NoiseSource(seed=seed))
        assert isinstance(res, PCORResult) and res.status == "released"
        assert res.context.shape == (9,) and res.context.dtype == bool
        assert ev.valid(res.context[None, :])[0]
        assert ev.space.contains(res.context[None, :], codes[0])[0]
        # the documented start rule ("auto": cell for both utilities with a Grubbs-like verifier)
        assert mech.start_rule_for(ev) == "cell"
        assert np.array_equal(res.start_context, S.start_context(ev, start=mech.start_rule_for(ev)))


def test_candidate_counts_respect_n(medium):
    start = S.start_context(medium)
    ch = S.NoiseChooser(NoiseSource(seed=1))
    step = 0.1
    for n in (1, 4, 7):
        d = S.dfs_candidates(medium, start, n, step, ch)
        b = S.bfs_candidates(medium, start, n, step, ch)
        w = S.random_walk_candidates(medium, start, n, ch)
        u = S.uniform_candidates(medium, start, n, ch)
        assert d.shape[0] == n + 1 and b.shape[0] == n + 1  # C_V + n selections
        assert len(set(medium.space.pack(d).tolist())) == n + 1  # Visited is a set
        assert len(set(medium.space.pack(b).tolist())) == n + 1
        assert w.shape[0] == n + 1 and np.array_equal(w[0], start)  # multiset walk from C_V
        assert u.shape[0] == n
        for cands in (d, b, w, u):
            assert medium.valid(cands).all()
        # graph searches move one bit at a time: every visited context except C_V
        # has a visited Hamming-1 neighbour
        for cands in (d, b):
            for i in range(1, cands.shape[0]):
                assert (np.abs(cands[:i].astype(int) - cands[i].astype(int)).sum(axis=1) == 1).any()
        assert (np.abs(np.diff(w.astype(int), axis=0)).sum(axis=1) == 1).all()


def test_dfs_goes_deep_and_bfs_selects_from_the_whole_frontier():
    # cell -> A (u=10) -> B (u=1) -> C (u=1), and cell -> X (u=9), X a leaf.
    # With a large epsilon the choices are near-deterministic: DFS follows A's
    # subtree (its only children), BFS returns to X (u=9 beats B's u=1).
    sp = ToySpace((1, 4, 1, 1))  # t = 7; V's cell = bits 0, 1, 5, 6; free bits 2, 3, 4
    cell = sp.cell_context((0, 0, 0, 0))

    def ctx(*bits):
        c = cell.copy()
        c[list(bits)] = True
        return c

    A, B, C, X = ctx(2), ctx(2, 3), ctx(2, 3, 4), ctx(4)
    key = lambda c: int(sp.pack(c[None])[0])
    ev = SetEvaluator(sp, cell, [key(c) for c in (cell, A, B, C, X)],
                      utilities={key(cell): 1, key(A): 10, key(B): 1, key(C): 1, key(X): 9})
    ch = S.NoiseChooser(NoiseSource(seed=0))
    d = S.dfs_candidates(ev, cell, 3, 80.0, ch)
    b = S.bfs_candidates(ev, cell, 3, 80.0, ch)
    assert [key(c) for c in d] == [key(c) for c in (cell, A, B, C)]
    assert [key(c) for c in b] == [key(c) for c in (cell, A, X, B)]


def test_dfs_and_bfs_stop_when_the_reachable_component_is_exhausted():
    sp = ToySpace((2, 3, 3))  # t = 8, V's cell = bits 0, 2, 5; free bits 1, 3, 4, 6, 7
    cell = sp.cell_context((0, 0, 0))
    def ctx(*bits):
        c = cell.copy()
        c[list(bits)] = True
        return c
    # component of C_V: {C_V, +3, +3+4}; an unreachable valid context +1+6+7
    comp = [cell, ctx(3), ctx(3, 4)]
    far = ctx(1, 6, 7)
    ev = SetEvaluator(sp, cell, sp.pack(np.array(comp + [far])))
    comp_keys = set(int(k) for k in sp.pack(np.array(comp)))
    for name in ("dfs", "bfs"):
        mech = PCORMechanism(name, 1.0, n_samples=10, start="cell")  # C_V = the cell (population's auto is full)
        for seed in range(4):
            ch = CountingChooser(S.NoiseChooser(NoiseSource(seed=seed)))
            res = mech.explain_with_chooser(ev, ch)
            assert res.status == "released"
            assert int(sp.pack(res.context[None])[0]) in comp_keys
            # 2 selections (the component has 3 contexts) + the final call
            assert ch.count("exponential") == 3 == res.n_em_calls
            assert res.n_candidates == 3
    # an isolated start: the random walk cannot move, DFS/BFS make no selection
    iso = SetEvaluator(sp, cell, sp.pack(np.array([cell, far])))
    for name in ("dfs", "bfs", "random_walk"):
        ch = CountingChooser(S.NoiseChooser(NoiseSource(seed=1)))
        res = PCORMechanism(name, 1.0, n_samples=5, start="cell").explain_with_chooser(iso, ch)
        assert np.array_equal(res.context, cell) and res.n_candidates == 1
        assert ch.count("exponential") == 1


@pytest.mark.parametrize("sampler,expected", [("direct", 1), ("uniform", 1), ("random_walk", 1),
                                              ("dfs", 13), ("bfs", 13)])
@pytest.mark.parametrize("final_share", [Fraction(1, 4), Fraction(2, 3), None])
def test_exponential_calls_match_the_charge(medium, sampler, expected, final_share):
    n = 12
    mech = PCORMechanism(sampler, Fraction(3, 10), n_samples=n, final_share=final_share)
    assert mech.n_exponential_calls() == expected
    ch = CountingChooser(S.NoiseChooser(NoiseSource(seed=7)))
    res = mech.explain_with_chooser(medium, ch)
    em = [c for c in ch.calls if c[0] == "exponential"]
    assert len(em) == expected == res.n_em_calls
    # the n selections run at selection_epsilon, the final call at final_epsilon; they add up to the charge
    assert all(c[2] == float(mech.selection_epsilon()) for c in em[:-1])
    assert em[-1][2] == float(mech.final_epsilon())
    total = (expected - 1) * mech.selection_epsilon() + mech.final_epsilon()
    assert total == mech.cost().epsilon == Fraction(3, 10)
    if sampler in ("dfs", "bfs"):
        share = Fraction(1, n + 1) if final_share is None else final_share
        assert mech.final_epsilon() == share * Fraction(3, 10)
        if final_share is None:  # the paper's equal split: every call 2 eps1
            assert mech.selection_epsilon() == mech.final_epsilon() == 2 * mech.epsilon_1()
    else:
        assert mech.final_epsilon() == Fraction(3, 10) == 2 * mech.epsilon_1()
    if sampler in ("direct", "dfs", "bfs"):
        assert ch.count("uniform") == 0
    if sampler == "random_walk":
        assert ch.count("uniform") == n


def test_progress_is_reported():
    codes, metric = medium_dataset()
    for sampler in SAMPLERS:
        ev = oracle((3, 3, 3), codes, metric)
        seen = []
        PCORMechanism(sampler, 1.0, n_samples=5).explain(ev, NoiseSource(seed=2), progress=lambda d, t: seen.append((d, t)))
        assert seen, sampler
        assert seen[-1][0] == seen[-1][1]
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_overlap_utility_uses_the_start_context_as_reference():
    sp = ToySpace((2, 2, 2))
    cell = sp.cell_context((0, 0, 0))
    # cell invalid; the start rule's first valid context at distance 1 is +bit 1 (lowest free bit)
    c1 = cell.copy(); c1[1] = True
    c3 = cell.copy(); c3[3] = True
    c13 = c1 | c3
    ev = SetEvaluator(sp, cell, sp.pack(np.array([c3, c1, c13])), utility="overlap")
    for sampler in SAMPLERS:
        ev.references.clear()
        res = PCORMechanism(sampler, 1.0, n_samples=3, utility="overlap").explain(ev, NoiseSource(seed=0))
        assert np.array_equal(res.start_context, c1)
        assert ev.references and all(r is not None and np.array_equal(r, c1) for r in ev.references)
    pop = SetEvaluator(sp, cell, sp.pack(np.array([c3, c1, c13])))
    PCORMechanism("bfs", 1.0, n_samples=3).explain(pop, NoiseSource(seed=0))
    assert pop.references and all(r is None for r in pop.references)


# ---------------------------------------------------------------------------
# Start rule
# ---------------------------------------------------------------------------


def test_start_context_is_the_cell_when_valid_else_nearest_in_fixed_order():
    sp = ToySpace((3, 3))  # cell bits 0, 3; free bits 1, 2, 4, 5
    cell = sp.cell_context((0, 0))
    def ctx(*bits):
        c = cell.copy()
        c[list(bits)] = True
        return c
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, ctx(1)])))
    assert np.array_equal(S.start_context(ev), cell)
    # cell invalid: distance 1 before distance 2, lowest bit first within a distance
    ev = SetEvaluator(sp, cell, sp.pack(np.array([ctx(1, 2), ctx(5), ctx(4)])))
    assert np.array_equal(S.start_context(ev), ctx(4))
    ev = SetEvaluator(sp, cell, sp.pack(np.array([ctx(2, 4, 5), ctx(1, 5), ctx(2, 4)])))
    assert np.array_equal(S.start_context(ev), ctx(1, 5))
    # batching does not change the answer
    for bs in (1, 2, 3, 100):
        assert np.array_equal(S.start_context(ev, batch_size=bs), ctx(1, 5))
    # the budget of evaluations: cell (1) + 4 singles + C(4,2)=6 pairs; (1, 5) is pair #3
    assert S.start_context(ev, max_evaluations=5 + 2) is None
    assert np.array_equal(S.start_context(ev, max_evaluations=5 + 3), ctx(1, 5))
    assert S.start_context(SetEvaluator(sp, cell, [])) is None
    with pytest.raises(ValueError, match="max_evaluations"):
        S.start_context(ev, max_evaluations=0)


@pytest.mark.parametrize("rule", S.START_RULES)
def test_start_context_depends_on_the_data_only_through_validity(rule):
    codes, metric = medium_dataset()
    ev = oracle((3, 3, 3), codes, metric)
    coe = ev.coe()
    # a different evaluator with the same valid set but unrelated utilities
    twin = SetEvaluator(ev.space, ev.cell_context, coe, default_utility=999)
    assert np.array_equal(S.start_context(ev, start=rule), S.start_context(twin, start=rule))
    # with the cell and the full context made invalid, still identical
    coe2 = coe - {int(ev.space.pack(ev.cell_context[None])[0]), int(ev.space.pack(np.ones((1, ev.t), bool))[0])}
    a = SetEvaluator(ev.space, ev.cell_context, coe2, default_utility=1)
    b = SetEvaluator(ev.space, ev.cell_context, coe2, default_utility=50)
    sa, sb = S.start_context(a, start=rule), S.start_context(b, start=rule)
    assert sa is not None and np.array_equal(sa, sb) and not np.array_equal(sa, ev.cell_context)
    assert int(ev.space.pack(sa[None])[0]) in coe2


def test_full_start_rule_descends_from_the_full_context_in_fixed_order():
    sp = ToySpace((3, 3))  # cell bits 0, 3; free bits 1, 2, 4, 5
    cell = sp.cell_context((0, 0))
    full = np.ones(sp.t, dtype=bool)
    def minus(*bits):
        c = full.copy()
        c[list(bits)] = False
        return c
    def keys(*ctxs):
        return sp.pack(np.array(ctxs))
    # the full context when valid (even if the cell is valid too)
    ev = SetEvaluator(sp, cell, keys(cell, full, minus(1)))
    assert np.array_equal(S.start_context(ev, start="full"), full)
    assert np.array_equal(S.start_context(ev, start="cell"), cell)
    # full invalid: distance 1 before distance 2, lowest removed bit first within a distance
    ev = SetEvaluator(sp, cell, keys(minus(1, 2), minus(5), minus(4)))
    assert np.array_equal(S.start_context(ev, start="full"), minus(4))
    ev = SetEvaluator(sp, cell, keys(minus(2, 4), minus(1, 5), minus(1, 2, 4)))
    assert np.array_equal(S.start_context(ev, start="full"), minus(1, 5))
    for bs in (1, 2, 3, 100):  # batching does not change the answer
        assert np.array_equal(S.start_context(ev, batch_size=bs, start="full"), minus(1, 5))
    # budget: full (1) + 4 singles + pairs (1,2), (1,4), (1,5): (1, 5) is test #8
    assert np.array_equal(S.start_context(ev, max_evaluations=8, start="full"), minus(1, 5))
    # one short: the top-down search gives up and the cell rule follows with its own budget; it
    # finds cell + {5} (= full minus {1, 2, 4}) at its 5th test (cell, +1, +2, +4, +5)
    assert np.array_equal(S.start_context(ev, max_evaluations=7, start="full"), minus(1, 2, 4))
    assert np.array_equal(S.start_context(ev, max_evaluations=7, start="cell"), minus(1, 2, 4))
    assert S.start_context(ev, max_evaluations=4, start="full") is None
    assert S.start_context(SetEvaluator(sp, cell, []), start="full") is None
    # every context tested contains V (the lattice of contexts containing V only)
    ev = SetEvaluator(sp, cell, [])
    S.start_context(ev, start="full")
    assert ev.seen and all(sp.contains(sp.unpack(np.array([k], dtype=np.uint64)), (0, 0))[0] for k in ev.seen)
    for bad in ("auto", "top", None):
        with pytest.raises(ValueError, match="start must be one of cell, full, climb"):
            S.start_context(ev, start=bad)


def test_climb_start_rule_adds_the_lowest_valid_bit_until_none_does():
    sp = ToySpace((3, 3))  # cell bits 0, 3; free bits 1, 2, 4, 5
    cell = sp.cell_context((0, 0))

    def plus(*bits):
        c = cell.copy()
        c[list(bits)] = True
        return c

    # cell valid; +1 and +2 valid singly, but +{1,2} not; from +1: +4 valid, then +5 valid -> maximal
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, plus(1), plus(2), plus(1, 4), plus(1, 4, 5), plus(2, 4)])))
    assert np.array_equal(S.start_context(ev, start="climb"), plus(1, 4, 5))
    assert np.array_equal(S.start_context(ev, start="cell"), cell)
    # the climb starts from the cell rule's start (here cell + {2}, the cell being invalid)
    ev = SetEvaluator(sp, cell, sp.pack(np.array([plus(2), plus(2, 4), plus(1, 4)])))
    assert np.array_equal(S.start_context(ev, start="climb"), plus(2, 4))
    # the climb has its own bound of max_evaluations tests and stops at the last valid context reached:
    # round 1 tests the 4 free bits (-> +1), round 2 the 3 unset ones (-> +4), round 3 two (-> +5)
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, plus(1), plus(1, 4), plus(1, 4, 5)])))
    for bound, expected in ((3, plus(1)), (4, plus(1)), (6, plus(1, 4)), (7, plus(1, 4)), (9, plus(1, 4, 5))):
        assert np.array_equal(S.start_context(ev, start="climb", max_evaluations=bound), expected), bound
    assert S.start_context(SetEvaluator(sp, cell, []), start="climb") is None
    full = np.ones(sp.t, dtype=bool)
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, full])))  # nothing between: the climb stays put
    assert np.array_equal(S.start_context(ev, start="climb"), cell)


def test_mechanism_start_rule_resolution():
    # auto: overlap -> cell; population -> cell for Grubbs / Histogram / unknown, full for LOF
    for utility, verifier, auto in (("population", None, "cell"), ("population", "grubbs", "cell"),
                                    ("population", "histogram", "cell"), ("population", "lof", "full"),
                                    ("overlap", None, "cell"), ("overlap", "lof", "cell")):
        assert PCORMechanism("bfs", 0.2, utility=utility).start_rule(verifier) == auto, (utility, verifier)
        for rule in ("cell", "full", "climb"):  # an explicit rule always wins
            assert PCORMechanism("bfs", 0.2, utility=utility, start=rule).start_rule(verifier) == rule
    sp = ToySpace((2, 2, 2))
    cell = sp.cell_context((0, 0, 0))
    full = np.ones(sp.t, dtype=bool)
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, full])))
    for start, expected in (("auto", cell), ("full", full), ("cell", cell)):
        res = PCORMechanism("bfs", 1.0, n_samples=2, start=start).explain(ev, NoiseSource(seed=0))
        assert np.array_equal(res.start_context, expected), start


def test_no_valid_context_status():
    sp = ToySpace((2, 2))
    cell = sp.cell_context((1, 0))
    ev = SetEvaluator(sp, cell, [])
    for sampler in SAMPLERS:
        ch = CountingChooser(S.NoiseChooser(NoiseSource(seed=0)))
        res = PCORMechanism(sampler, 1.0, n_samples=3).explain_with_chooser(ev, ch)
        assert res.status == "no_valid_context" and res.context is None and not ch.calls
    # a valid context exists but beyond the start search bound
    far = cell | sp.cell_context((0, 1))
    ev = SetEvaluator(sp, cell, sp.pack(far[None]))
    # (far is the full context here: the top-down rule finds it at once, the bottom-up one needs 4 tests)
    assert PCORMechanism("bfs", 1.0, max_start_evaluations=3, start="cell").explain(
        ev, NoiseSource(seed=0)).status == "no_valid_context"
    assert PCORMechanism("bfs", 1.0, max_start_evaluations=1, start="full").explain(
        ev, NoiseSource(seed=0)).status == "released"
    assert PCORMechanism("bfs", 1.0, max_start_evaluations=4).explain(ev, NoiseSource(seed=0)).status == "released"


def test_uniform_draw_bound_falls_back_to_the_start_context():
    sp = ToySpace((4, 4, 4))  # 2^9 contexts contain V; only the cell is valid
    cell = sp.cell_context((0, 0, 0))
    ev = SetEvaluator(sp, cell, sp.pack(cell[None]))
    ch = S.NoiseChooser(NoiseSource(seed=3))
    cands = S.uniform_candidates(ev, cell, 5, ch, max_draws=20)
    assert cands.shape[0] >= 1 and (cands == cell).all()


class _OneByOne:
    """A chooser with ``uniform`` and ``exponential`` only: the sampler draws one value per call, in order."""

    def __init__(self, seed):
        self.inner = S.NoiseChooser(NoiseSource(seed=seed))

    def uniform(self, k):
        return self.inner.uniform(k)

    def exponential(self, utilities, epsilon_step):
        return self.inner.exponential(utilities, epsilon_step)


@pytest.mark.parametrize("max_draws", [5, 40, 1000])  # 64 contexts hold V: each draw verified, or a lookup
def test_constant_work_uniform_keeps_the_samples_of_the_early_stopping_loop(medium, max_draws):
    """The constant-work uniform sampler makes all max_draws draws and keeps the first n valid ones: given the
    same sequence of draws it returns exactly the samples of the paper's loop, which stops at the n-th valid
    draw (so the released distribution is unchanged), while its verifier work is min(2^f, max_draws)."""
    start = S.start_context(medium)
    for seed in range(6):
        for n in (1, 3, 8):
            with S.without_constant_work():
                old = S.uniform_candidates(medium, start, n, _OneByOne(seed), max_draws=max_draws)
            medium.work = {}
            new = S.uniform_candidates(medium, start, n, _OneByOne(seed), max_draws=max_draws)
            assert np.array_equal(old, new), (seed, n)
            assert medium.work == {"uniform_draws": max_draws, "queries": min(64, max_draws)}


# ---------------------------------------------------------------------------
# Parameters, epsilon_1, cost, privacy map
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(sampler="greedy"), "sampler must be one of direct, uniform, random_walk, dfs, bfs"),
    (dict(epsilon=0), "epsilon must be a finite number > 0"),
    (dict(epsilon=-0.1), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("inf")), "epsilon must be a finite number > 0"),
    (dict(epsilon=float("nan")), "epsilon must be a finite number > 0"),
    (dict(epsilon="0.2"), "epsilon must be a finite number > 0"),
    (dict(n_samples=0), "n_samples must be an integer >= 1"),
    (dict(n_samples=2.5), "n_samples must be an integer >= 1"),
    (dict(n_samples=True), "n_samples must be an integer >= 1"),
    (dict(utility="size"), "utility must be one of population, overlap"),
    (dict(max_start_evaluations=0), "max_start_evaluations must be an integer >= 1"),
    (dict(max_uniform_draws=-1), "max_uniform_draws must be an integer >= 1"),
    (dict(max_direct_contexts=0), "max_direct_contexts must be an integer >= 1"),
    (dict(start="top"), "start must be one of auto, cell, full, climb; got 'top'"),
    (dict(start=None), "start must be one of auto, cell, full"),
])
def test_parameter_errors_name_the_parameter(kwargs, match):
    params = dict(sampler="bfs", epsilon=0.2, n_samples=50, utility="population")
    params.update(kwargs)
    mech = PCORMechanism(**params)  # __init__ only stores
    for call in (mech.validate, mech.cost, mech.epsilon_1, lambda: mech.explain(None, NoiseSource(seed=0))):
        with pytest.raises(ValueError, match=match):
            call()


def test_evaluator_utility_must_match(medium):
    with pytest.raises(ValueError, match="utility='overlap' but the evaluator computes 'population'"):
        PCORMechanism("bfs", 0.2, utility="overlap").explain(medium, NoiseSource(seed=0))


def test_epsilon_1_is_derived_exactly():
    assert PCORMechanism("bfs", 0.2, n_samples=50, final_share=None).epsilon_1() == Fraction(1, 510)
    assert PCORMechanism("dfs", 0.2, n_samples=50, final_share=None).epsilon_1() == Fraction(1, 510)
    # default split: 1/4 of epsilon on the final call, the rest over the 50 selections
    bfs = PCORMechanism("bfs", 0.2, n_samples=50)
    assert bfs.final_epsilon() == Fraction(1, 20) and bfs.selection_epsilon() == Fraction(3, 1000)
    assert bfs.epsilon_1() == Fraction(3, 2000)
    for s in ("direct", "uniform", "random_walk"):
        assert PCORMechanism(s, 0.2, n_samples=50).epsilon_1() == Fraction(1, 10)
    assert PCORMechanism("bfs", Fraction(1, 3), n_samples=2, final_share=None).epsilon_1() == Fraction(1, 18)
    for s in SAMPLERS:
        for n in (1, 25, 200):
            for share in (None, Fraction(1, 4), 0.9):
                m = PCORMechanism(s, 0.05, n_samples=n, final_share=share)
                assert m.cost() == PrivacyCost(Fraction(1, 20))
                assert (m.n_exponential_calls() - 1) * m.selection_epsilon() + m.final_epsilon() == Fraction(1, 20)
                assert m.epsilon_step() == float(m.selection_epsilon()) == float(2 * m.epsilon_1())
                assert m.final_step() == float(m.final_epsilon())


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, float("nan"), "half", True])
def test_final_share_is_validated(bad):
    with pytest.raises(ValueError, match="final_share must be a number in \\(0, 1\\) or None"):
        PCORMechanism("bfs", 0.2, final_share=bad).cost()


def test_privacy_map_and_labels():
    m = PCORMechanism("bfs", 0.2, n_samples=50)
    assert m.privacy_map(1) == Fraction(1, 5) == m.cost().epsilon
    assert m.privacy_map(0) == 0
    assert m.privacy_map(5) == 1
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="d_in must be an integer >= 0"):
            m.privacy_map(bad)
    assert (m.name, m.notion, m.neighbour) == ("pcor_bfs", "ocdp", "add-remove")
    assert m.cost().delta == 0
    assert m.params() == {"sampler": "bfs", "epsilon": "1/5", "n_samples": 50, "utility": "population",
                          "start": "auto", "final_share": "1/4", "max_start_evaluations": 100_000, "max_uniform_draws": 100_000,
                          "max_direct_contexts": 2**20}


# ---------------------------------------------------------------------------
# Exact distributions, and production draws against them
# ---------------------------------------------------------------------------


def test_exact_direct_is_the_exponential_mechanism():
    codes, metric = tiny_dataset()
    ev = oracle((3, 3), codes, metric)
    mech = PCORMechanism("direct", 0.6)
    dist = exact_output_distribution(mech, ev)
    keys, ok = ev.enumerate_valid()
    valid = ev.space.unpack(keys[ok])
    u = ev.utility(valid).astype(float)
    w = np.exp(0.3 * u)  # eps1 = 0.3: weights exp(eps1 u) (paper, eq. 4)
    expect = dict(zip((int(k) for k in keys[ok]), w / w.sum()))
    assert dist.keys() == expect.keys()
    for k in expect:
        assert dist[k] == pytest.approx(expect[k], rel=1e-12)


def test_exact_random_walk_by_hand():
    # V's cell and one valid neighbour A: walk of n=2 steps is [C, A, C] always; final EM on the multiset
    sp = ToySpace((2, 2))
    cell = sp.cell_context((0, 0))
    a = cell.copy(); a[1] = True
    ev = SetEvaluator(sp, cell, sp.pack(np.array([cell, a])),
                      utilities={int(sp.pack(cell[None])[0]): 2, int(sp.pack(a[None])[0]): 5})
    dist = exact_output_distribution(PCORMechanism("random_walk", 1.0, n_samples=2, start="cell"), ev)
    wc, wa = 2 * math.exp(0.5 * 2), math.exp(0.5 * 5)
    assert dist[int(sp.pack(cell[None])[0])] == pytest.approx(wc / (wc + wa), rel=1e-12)
    assert dist[int(sp.pack(a[None])[0])] == pytest.approx(wa / (wc + wa), rel=1e-12)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_exact_distributions_sum_to_one(sampler):
    codes, metric = tiny_dataset()
    for utility in ("population", "overlap"):
        ev = oracle((3, 3), codes, metric, utility=utility)
        dist = exact_output_distribution(PCORMechanism(sampler, 1.0, n_samples=3, utility=utility), ev)
        assert abs(sum(dist.values()) - 1.0) < 1e-9
        assert set(dist) <= ev.coe()


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_production_draws_match_the_exact_distribution(sampler):
    """Chi-square goodness of fit of NoiseChooser's (seeded) releases against exact.py."""
    codes, metric = tiny_dataset()
    ev = oracle((3, 3), codes, metric)
    mech = PCORMechanism(sampler, 0.8, n_samples=3)
    dist = exact_output_distribution(mech, ev)
    noise = NoiseSource(seed=20240 + SAMPLERS.index(sampler))
    draws = 1500
    counts = Counter(int(ev.space.pack(mech.explain(ev, noise).context[None])[0]) for _ in range(draws))
    assert set(counts) <= set(dist)
    keys = sorted(dist)
    expected = np.array([dist[k] * draws for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    # pool bins with small expectation
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    p = stats.chisquare(observed, expected).pvalue
    assert p > 1e-3, (sampler, p)


def test_exact_detects_a_wrong_distribution():
    """The goodness-of-fit check can fail: draws of a different epsilon are rejected."""
    codes, metric = tiny_dataset()
    ev = oracle((3, 3), codes, metric)
    dist = exact_output_distribution(PCORMechanism("direct", 0.05), ev)
    noise = NoiseSource(seed=1)
    mech = PCORMechanism("direct", 2.0)
    draws = 1000
    counts = Counter(int(ev.space.pack(mech.explain(ev, noise).context[None])[0]) for _ in range(draws))
    keys = sorted(dist)
    p = stats.chisquare([counts.get(k, 0) for k in keys], [dist[k] * draws for k in keys]).pvalue
    assert p < 1e-6


def test_samplers_on_the_production_engine():
    """Every sampler on ContextEvaluator + CellIndex + each verifier releases a valid context."""
    from dpcore.mechanisms.pcor.contexts import ContextSpace
    from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
    from dpcore.mechanisms.pcor.index import CellIndex
    from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier, HistogramVerifier, LOFVerifier

    codes, metric = medium_dataset()
    space = ContextSpace.from_domains(("a", "b", "c"), ((0, 1, 2),) * 3)
    index = CellIndex.build(space, codes, metric)
    for verifier in (GrubbsVerifier(0.05), LOFVerifier(k=3, threshold=1.5), HistogramVerifier(min_share=0.1)):
        for utility in ("population", "overlap"):
            for sampler in SAMPLERS:
                ev = ContextEvaluator(index, verifier, 0, utility)
                res = PCORMechanism(sampler, 0.5, n_samples=4, utility=utility).explain(ev, NoiseSource(seed=11))
                if res.status == "no_valid_context":
                    keys, ok = ev.enumerate_valid()
                    assert not ok.any(), (verifier.name, sampler)
                    continue
                assert ev.valid(res.context[None, :])[0], (verifier.name, sampler)
                assert ev.space.contains(res.context[None, :], codes[0])[0]
                assert res.n_verified == ev.n_verified > 0
                # "auto" reads the production verifier's name: full for LOF with population, else cell
                rule = "full" if (verifier.name, utility) == ("lof", "population") else "cell"
                assert np.array_equal(res.start_context, S.start_context(ev, start=rule)), (verifier.name, utility)
                brute = oracle((3, 3, 3), codes, metric, grubbs_verifier(0.05))
                if verifier.name == "grubbs":
                    assert brute.valid(res.context[None, :])[0]
