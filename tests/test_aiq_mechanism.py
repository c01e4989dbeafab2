"""Private (beta, r)-anomaly identification (seed 001, Asif et al. CCS'19).

The privacy audit enumerates small histogram databases (counts per point of a
tiny universe on a line or grid), all add/remove-one-record edges of the
neighbourhood graph G and of the k-sensitive graph G_S (Definitions 3.1/3.2),
and checks P(M(x) = b) <= e^eps P(M(y) = b) with EXACT probabilities: the
mechanisms' error probabilities are functions of u = e^eps
(``ExpErrorProbability.at_exp_epsilon``), evaluated as Fractions at rational u.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from dpcore.budget.amounts import PrivacyCost
from dpcore.mechanisms.aiq import AnomalyIdentification, ExpErrorProbability, exp_neg_bounds
from dpcore.noise import NoiseSource

# ---------------------------------------------------------------------------
# tiny universes of histogram databases
# ---------------------------------------------------------------------------


class Universe:
    """All histograms with counts 0..cap over the points ``pos``."""

    def __init__(self, pos, r, cap):
        self.pos = np.asarray(pos, float).reshape(len(pos), -1)
        self.m = len(pos)
        self.cap = cap
        self.states = np.array(list(itertools.product(range(cap + 1), repeat=self.m)), dtype=np.int64)
        d2 = ((self.pos[:, None] - self.pos[None]) ** 2).sum(-1)
        self.A = (d2 <= r * r).astype(np.int64)
        self.B = self.states @ self.A  # B[s, i] = B_x(i, r)
        self.radix = (cap + 1) ** np.arange(self.m - 1, -1, -1)
        # add/remove edges: (s, s + e_j)
        src, dst, rec = [], [], []
        for j in range(self.m):
            ok = np.flatnonzero(self.states[:, j] < cap)
            src.append(ok)
            dst.append(ok + self.radix[j])
            rec.append(np.full(ok.size, j))
        self.src, self.dst, self.rec = map(np.concatenate, (src, dst, rec))

    def index(self, state):
        return int(np.dot(state, self.radix))

    def sens_cost(self, j, s):
        """Records to add so that j is present and normal (closed form)."""
        return np.maximum((self.states[s, j] == 0).astype(np.int64), self.beta_ + 1 - self.B[s, j])

    def sensitive_edges(self, beta, k):
        """Mask of edges of the k-sensitive graph (Definition 3.1): the
        differing record j is k-sensitive w.r.t. x or y."""
        self.beta_ = beta
        cx = self.sens_cost(self.rec, self.src)
        cy = self.sens_cost(self.rec, self.dst)
        return (cx <= k) | (cy <= k)

    def normal(self, beta):
        """p(j, x) for all states and points: present and not an anomaly."""
        return (self.states > 0) & (self.B > beta)


def exact_probs(mech, b, xi, u):
    """P(M = 1) as exact Fractions at e^eps = u, for arrays b, xi (cached)."""
    cache = {}
    out = []
    truth = mech.truth(b, xi)
    for bb, xx, g in zip(b.tolist(), xi.tolist(), truth.tolist()):
        key = (bb, xx)
        if key not in cache:
            p = mech.error_probability([bb], [xx])[0].at_exp_epsilon(u)
            cache[key] = 1 - p if g else p
        out.append(cache[key])
    return out


def audit(mech, uni, edge_mask, u):
    """Return the list of violations of the eps-inequality over the edges."""
    bad = []
    s, t = uni.src[edge_mask], uni.dst[edge_mask]
    for i in range(uni.m):
        bx, by = uni.B[s, i], uni.B[t, i]
        xx, xy = uni.states[s, i], uni.states[t, i]
        # only distinct (bx, xx, by, xy) tuples matter
        tup = np.unique(np.stack([bx, xx, by, xy], 1), axis=0)
        px = exact_probs(mech, tup[:, 0], tup[:, 1], u)
        py = exact_probs(mech, tup[:, 2], tup[:, 3], u)
        for row, a, c in zip(tup.tolist(), px, py):
            for pa, pc in ((a, c), (1 - a, 1 - c)):
                if pa > u * pc or pc > u * pa:
                    bad.append((i, row))
    return bad


LINE = dict(pos=[0, 1, 2, 3, 4], r=1.0, cap=4)
GRID = dict(pos=[(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)], r=1.0, cap=3)


@pytest.fixture(scope="module")
def line():
    return Universe(**LINE)


@pytest.fixture(scope="module")
def grid():
    return Universe(**GRID)


# ---------------------------------------------------------------------------
# sensitive graph: closed form of Definition 3.1 vs brute force
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2])
def test_sensitivity_closed_form_matches_definition(k):
    uni = Universe(pos=[0, 1, 2, 3], r=1.0, cap=5)
    beta = 2
    normal = uni.normal(beta)
    # brute force: exists z with ||x - z||_1 <= k and p(j, z) = 1 (within the universe)
    reach = normal.copy()
    for _ in range(k):
        nxt = reach.copy()
        np.logical_or.at(nxt, uni.src, reach[uni.dst])
        np.logical_or.at(nxt, uni.dst, reach[uni.src])
        reach = nxt
    interior = np.all(uni.states <= uni.cap - k, axis=1)  # all k-step moves stay inside
    uni.beta_ = beta
    for j in range(uni.m):
        s = np.arange(len(uni.states))
        closed = uni.sens_cost(np.full(s.size, j), s) <= k
        np.testing.assert_array_equal(closed[interior], reach[interior, j])


# ---------------------------------------------------------------------------
# exact privacy audit (Theorems 4.1, 4.4, 4.6, 4.7)
# ---------------------------------------------------------------------------

U_C1 = [Fraction(2), Fraction(11, 10)]  # e^eps for Construction 1 (eps = ln 2, ln 1.1)
U_C2 = [Fraction(16), Fraction(11, 10) ** 4]  # compiler needs quarter powers


@pytest.mark.parametrize("uname", ["line", "grid"])
@pytest.mark.parametrize("beta", [1, 2, 3])
def test_dp_mechanism_is_dp_on_neighbourhood_graph(uname, beta, request):
    uni = request.getfixturevalue(uname)
    mech = AnomalyIdentification(beta, 1.0, 0.1, mechanism="dp")
    every = np.ones(uni.src.size, dtype=bool)
    for u in U_C1:
        assert audit(mech, uni, every, u) == []


@pytest.mark.parametrize("uname", ["line", "grid"])
@pytest.mark.parametrize("beta,k", [(2, 1), (3, 1), (3, 2), (3, 4)])
@pytest.mark.parametrize("kind", ["sp", "compiler"])
def test_sp_mechanisms_are_sp_on_sensitive_graph(uname, beta, k, kind, request):
    uni = request.getfixturevalue(uname)
    mech = AnomalyIdentification(beta, 1.0, 0.1, k=k, mechanism=kind)
    mask = uni.sensitive_edges(beta, k)
    if k >= beta + 1:
        assert mask.all()  # every record is sensitive: G_S = G, SP = DP
    else:
        assert 0 < mask.sum() < mask.size  # the sensitive graph is a proper subgraph
    for u in U_C1 if kind == "sp" else U_C2:
        assert audit(mech, uni, mask, u) == []


def test_audit_can_fail_sp_is_not_dp(line):
    """Negative control: on non-sensitive edges the SP mechanism is not eps-DP."""
    mech = AnomalyIdentification(2, 1.0, 0.1, k=1, mechanism="sp")
    every = np.ones(line.src.size, dtype=bool)
    assert audit(mech, line, every, Fraction(2)) != []


def test_audit_can_fail_with_wrong_lambda(line, monkeypatch):
    """Negative control: dropping min(0, xi - k) from eq. (3) breaks SP."""
    mech = AnomalyIdentification(3, 1.0, 0.1, k=2, mechanism="sp")
    orig = AnomalyIdentification.lambda_k

    def broken(b, xi, beta, k):
        lam = orig(b, xi, beta, k)
        return np.where(np.asarray(b) >= beta + 1 - k, lam, beta + 1 - np.asarray(b))

    monkeypatch.setattr(AnomalyIdentification, "lambda_k", staticmethod(broken))
    assert audit(mech, line, line.sensitive_edges(3, 2), Fraction(2)) != []


@pytest.mark.parametrize("beta,k", [(1, 1), (2, 1), (3, 1), (3, 2), (3, 3)])
def test_lipschitz_lemmas(grid, line, beta, k):
    """Delta_G is 1-Lipschitz on G (Lemma 4.3), lambda_k on G_S (Lemma 4.5);
    delta = lambda_k - Delta_G is >= 0 and 2-Lipschitz on G_S (Section 4.2)."""
    for uni in (grid, line):
        mask = uni.sensitive_edges(beta, k)
        for i in range(uni.m):
            bx, by = uni.B[uni.src, i], uni.B[uni.dst, i]
            xx, xy = uni.states[uni.src, i], uni.states[uni.dst, i]
            dg = AnomalyIdentification.delta_g
            lk = AnomalyIdentification.lambda_k
            assert np.all(np.abs(dg(bx, xx, beta) - dg(by, xy, beta)) <= 1)
            lx, ly = lk(bx, xx, beta, k), lk(by, xy, beta, k)
            assert np.all(np.abs(lx - ly)[mask] <= 1)
            assert np.all(lx >= 1)
            dx, dy = lx - dg(bx, xx, beta), ly - dg(by, xy, beta)
            assert np.all(dx >= 0)
            assert np.all(np.abs(dx - dy)[mask] <= 2)


def mdd(uni, i, beta, mask):
    """Minimum discrepant distance (eq. 1) of query i in the truncated graph."""
    g = (uni.states[:, i] > 0) & (uni.B[:, i] <= beta)
    n = len(uni.states)
    s, t = uni.src[mask], uni.dst[mask]
    out = np.empty(n)
    for cls in (True, False):
        # super source n connected to every state of class ``not cls``
        srcs = np.flatnonzero(g != cls)
        rows = np.concatenate([s, t, np.full(srcs.size, n)])
        cols = np.concatenate([t, s, srcs])
        graph = coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n + 1, n + 1)).tocsr()
        dist = shortest_path(graph, unweighted=True, indices=n, directed=True)[:n] - 1
        out[g == cls] = dist[g == cls]
    return out


def test_mdd_lemmas_on_truncated_universe():
    """Lemma 4.3: Delta_G is the mdd-function on G; Lemma 4.5: lambda_k <= mdd on G_S."""
    beta = 2
    uni = Universe(pos=[0, 1, 2, 3], r=1.0, cap=6)
    every = np.ones(uni.src.size, dtype=bool)
    interior = np.all(uni.states <= 2, axis=1)  # shortest paths fit in the truncation
    for i in range(uni.m):
        dg = AnomalyIdentification.delta_g(uni.B[:, i], uni.states[:, i], beta)
        m_g = mdd(uni, i, beta, every)
        assert np.all(dg <= m_g)  # truncation can only lengthen paths
        np.testing.assert_array_equal(dg[interior], m_g[interior])
        for k in (1, 2):
            m_s = mdd(uni, i, beta, uni.sensitive_edges(beta, k))
            lk = AnomalyIdentification.lambda_k(uni.B[:, i], uni.states[:, i], beta, k)
            assert np.all(lk <= m_s)
            assert np.all(m_s >= m_g)  # fewer edges, longer distances


def test_figure_4_example():
    """Figure 4: X = {1..5}, l1 metric, (beta=3, r=1), k = 1."""
    beta, k = 3, 1
    vals = {}
    for cap in (5, 6):
        uni = Universe(pos=[1, 2, 3, 4, 5], r=1.0, cap=cap)
        m = mdd(uni, 4, beta, uni.sensitive_edges(beta, k))  # query record 5 (index 4)
        vals[cap] = {x: m[uni.index(x)] for x in [(3, 0, 0, 0, 1), (3, 2, 1, 0, 1), (3, 0, 1, 0, 1)]}
    assert vals[5] == vals[6]  # the truncation does not matter for these databases
    v = vals[6]
    # the text: Delta_GS(5,(3,0,0,0,1)) > Delta_GS(5,(3,2,1,0,1)) and > Delta_GS(5,(3,0,1,0,1))
    assert v[(3, 0, 0, 0, 1)] > v[(3, 2, 1, 0, 1)]
    assert v[(3, 0, 0, 0, 1)] > v[(3, 0, 1, 0, 1)]
    # 5 is an anomaly (B = 1 <= 3) in all three; Delta_G = 1 (remove it), lambda_1 = 3 <= Delta_GS
    mech = AnomalyIdentification(beta, 1.0, 0.25, k=k)
    assert mech.truth([1, 1, 1], [1, 1, 1]).all()
    assert AnomalyIdentification.delta_g(np.array([1]), np.array([1]), beta).tolist() == [1]
    assert mech.lam([1], [1]).tolist() == [3]
    assert min(v.values()) >= 3


# ---------------------------------------------------------------------------
# formulas: hand-worked eq. (2), eq. (3), Claim 2, Table 2
# ---------------------------------------------------------------------------

# (beta, k, b, xi, Delta_G, lambda_k) worked by hand from eqs. (2) and (3)
HAND = [
    (97, 1, 10, 0, 1, 87),  # xi=0, b<beta: DG=1; b<beta+1-k: 98-10+min(0,-1)=87
    (97, 9, 10, 0, 1, 79),  # 98-10-9
    (97, 1, 97, 0, 2, 2),  # xi=0, b>=beta: 2+b-beta; b>=beta+1-k -> DG
    (97, 1, 150, 0, 55, 55),
    (97, 1, 20, 1, 1, 78),  # min(1, 98-20)=1; 78+min(0,0)
    (97, 9, 20, 1, 1, 70),  # 78+min(0,1-9)
    (97, 1, 96, 3, 2, 2),  # min(3, 2); b<97: 98-96+0
    (97, 1, 97, 5, 1, 1),  # min(5, 1); b>=97 -> DG
    (97, 1, 98, 2, 1, 1),  # b-beta
    (97, 1, 300, 2, 203, 203),
    (97, 1, 60, 50, 38, 38),  # min(50,38); 38+min(0,49)
    (97, 10, 60, 5, 5, 33),  # min(5,38)=5; b<88: 38+min(0,-5)
    (3, 1, 1, 1, 1, 3),  # Figure 4: record 5 in (3,0,0,0,1)
]


@pytest.mark.parametrize("beta,k,b,xi,dg,lk", HAND)
def test_hand_worked_equations(beta, k, b, xi, dg, lk):
    assert AnomalyIdentification(beta, 1.0, 0.1, mechanism="dp").lam([b], [xi]).tolist() == [dg]
    assert AnomalyIdentification(beta, 1.0, 0.1, k=k).lam([b], [xi]).tolist() == [lk]


def test_claim_2_and_table_2_values():
    sp = AnomalyIdentification(97, 3.8, 0.1, k=1)
    dp = AnomalyIdentification(97, 3.8, 0.1, mechanism="dp")
    # Table 2, Synthetic: a random point in an empty region (b = 0) -> 3.2173E-5 (SP), 0.4750 (DP)
    p = sp.error_probability([0], [0])[0]
    assert p == ExpErrorProbability(Fraction(1, 10), Fraction(96), Fraction(1))
    assert float(p) == pytest.approx(3.2173e-5, rel=1e-4)
    assert float(dp.error_probability([0], [0])[0]) == pytest.approx(0.4750, abs=5e-5)
    # Table 2, Credit Fraud (beta = 1022): 1.1127E-21, an exponent of exactly 95/2
    cf = AnomalyIdentification(1022, 6.7, 0.1).error_probability([547], [1])[0]
    assert cf.exponent == Fraction(95, 2)
    assert float(cf) == pytest.approx(1.1127e-21, rel=1e-3)
    # closed form of Claim 2 in floats
    for b, xi in [(0, 0), (20, 1), (96, 3), (150, 2)]:
        lam = sp.lam([b], [xi])[0]
        want = math.exp(-0.1 * (lam - 1)) / (1 + math.exp(0.1))
        assert float(sp.error_probability([b], [xi])[0]) == pytest.approx(want, rel=1e-12)
        assert sp.error_rate([b], [xi])[0] == pytest.approx(want, rel=1e-12)


def test_theorem_4_6_accuracy_bound():
    beta, k, eps = 40, 3, 0.3
    mech = AnomalyIdentification(beta, 1.0, eps, k=k)
    b = np.arange(0, beta + 1 - k)
    for xi in (0, 1, 5):
        bb = np.maximum(b, xi)
        p = mech.error_rate(bb, np.full(bb.size, xi))
        assert np.all(p <= np.exp(-eps * np.abs(beta + 1 - k - bb)) * (1 + 1e-12))


def test_compiler_error_formula():
    mech = AnomalyIdentification(10, 1.0, 0.4, k=1, mechanism="compiler")
    b, xi = 3, 1
    dg = AnomalyIdentification.delta_g(np.array([b]), np.array([xi]), 10)[0]  # min(1, 8) = 1
    lk = AnomalyIdentification.lambda_k(np.array([b]), np.array([xi]), 10, 1)[0]  # 8
    want = math.exp(-0.2 * (dg - 1)) / (1 + math.exp(0.2)) * math.exp(-0.1 * (lk - dg))
    assert float(mech.error_probability([b], [xi])[0]) == pytest.approx(want, rel=1e-12)
    assert mech.notion == "sp" and mech.name == "aiq-sp-compiler"


def test_exact_bounds_bracket_the_value():
    for x in [Fraction(0), Fraction(1, 10), Fraction(95, 2), Fraction(2800), Fraction(7, 3)]:
        lo, hi = exp_neg_bounds(x, 80)
        if x == 0:
            assert lo == hi == 1
            continue
        assert 0 < lo <= hi
        assert (hi - lo) / lo < Fraction(1, 2**60)
        if x < 700:
            assert float(lo) <= math.exp(-float(x)) * (1 + 1e-15)
            assert float(hi) >= math.exp(-float(x)) * (1 - 1e-15)
    p = AnomalyIdentification(1022, 6.7, 0.1).error_probability([547], [1])[0]
    lo, hi = p.bounds()
    assert lo <= Fraction(float(p)) * (1 + Fraction(1, 10**12)) and hi >= Fraction(float(p)) * (1 - Fraction(1, 10**12))
    assert lo > 0  # 1e-21 is not rounded to zero


# ---------------------------------------------------------------------------
# the exact sampler path
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,b,xi", [("dp", 2, 1), ("sp", 1, 1), ("sp", 9, 0), ("compiler", 2, 1)])
def test_answer_frequencies_match_error_probability(kind, b, xi):
    mech = AnomalyIdentification(3, 1.0, 0.5, k=1, mechanism=kind)
    p = float(mech.error_probability([b], [xi])[0])
    n = 20000
    ans = mech.answer(np.full(n, b), np.full(n, xi), NoiseSource(seed=7))
    truth = bool(mech.truth([b], [xi])[0])
    rate = np.mean(ans != truth)
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-4


class Spy(NoiseSource):
    """Records calls; optionally scripts the results of the exact samplers."""

    def __init__(self, script_exp=None, script_bern=None):
        super().__init__(seed=0)
        self.calls = []
        self.script_exp = list(script_exp or [])
        self.script_bern = list(script_bern or [])

    def bernoulli_exp_neg(self, x):
        self.calls.append(("exp", x))
        return self.script_exp.pop(0) if self.script_exp else super().bernoulli_exp_neg(x)

    def bernoulli(self, p):
        self.calls.append(("bern", p))
        return self.script_bern.pop(0) if self.script_bern else super().bernoulli(p)


def test_tiny_rate_uses_exact_sampler_with_exact_exponent():
    mech = AnomalyIdentification(1022, 6.7, 0.1)  # error 1.1127e-21 at (b=547, xi=1)
    truth = bool(mech.truth([547], [1])[0])
    assert truth
    # first Bernoulli(exp(-eps (lambda - 1))) fails -> correct answer, no further draws
    spy = Spy(script_exp=[False])
    assert mech.answer([547], [1], spy).tolist() == [truth]
    assert spy.calls == [("exp", Fraction(95, 2))]
    assert isinstance(spy.calls[0][1], Fraction)
    # it succeeds -> logistic factor 1/(1+e^eps): fair coin 1, Bernoulli(exp(-eps)) 1 -> flipped
    spy = Spy(script_exp=[True, True], script_bern=[True])
    assert mech.answer([547], [1], spy).tolist() == [not truth]
    assert spy.calls == [("exp", Fraction(95, 2)), ("bern", Fraction(1, 2)), ("exp", Fraction(1, 10))]
    # logistic: coin 0 -> not flipped
    spy = Spy(script_exp=[True], script_bern=[False])
    assert mech.answer([547], [1], spy).tolist() == [truth]
    # logistic: coin 1, Bernoulli(exp(-eps)) 0 -> repeat; coin 0 -> not flipped
    spy = Spy(script_exp=[True, False], script_bern=[True, False])
    assert mech.answer([547], [1], spy).tolist() == [truth]
    assert len(spy.calls) == 4


def test_logistic_factor_is_exact():
    """P(flip | first factor) = q/(1+q), q = e^{-eps}: computed from the loop's
    transition probabilities exactly (geometric series), then by frequency."""
    q = Fraction(1, 3)  # stands for exp(-c)
    # round: coin 0 (1/2) -> False, coin 1 & B(q)=1 (q/2) -> True, else repeat
    p_true = (q / 2) / (Fraction(1, 2) + q / 2)
    assert p_true == q / (1 + q)
    from dpcore.mechanisms.aiq import _logistic_bernoulli

    ns = NoiseSource(seed=3)
    n = 20000
    hits = sum(_logistic_bernoulli(ns, Fraction(1)) for _ in range(n))
    want = 1 / (1 + math.e)
    assert abs(hits / n - want) <= 5 * math.sqrt(want * (1 - want) / n)


def test_saturated_counts_sample_the_same_distribution():
    mech = AnomalyIdentification(1, 1.0, 0.5)
    true_b, xi, cap, n = 5, 1, 3, 20000
    p = float(mech.error_probability([true_b], [xi])[0])  # e^{-1.5}/(1+e^{0.5})
    calls = []

    def exact_count(j):
        calls.append(j)
        return true_b

    ans = mech.answer(np.full(n, cap), np.full(n, xi), NoiseSource(seed=11), cap=cap, exact_count=exact_count)
    rate = np.mean(ans)  # truth is False (b > beta)
    assert abs(rate - p) <= 5 * math.sqrt(p * (1 - p) / n)
    # the exact count is only needed when Bernoulli(exp(-eps*alpha(cap))) succeeds
    q = math.exp(-0.5 * (cap - 1 - 1))
    assert abs(len(calls) / n - q) <= 5 * math.sqrt(q * (1 - q) / n)
    with pytest.raises(RuntimeError):
        mech.answer([cap] * 50, [xi] * 50, NoiseSource(seed=1), cap=cap, exact_count=lambda j: cap - 1)
    with pytest.raises(ValueError, match="cap"):
        mech.answer([5], [1], NoiseSource(seed=1), cap=2, exact_count=exact_count)


def test_run_end_to_end_matches_counts():
    rng = np.random.default_rng(5)
    data = np.vstack([rng.normal(scale=0.2, size=(3000, 2)), [[5.0, 5.0], [5.0, 5.0], [9.0, 9.0]]])
    mech = AnomalyIdentification(20, 0.5, 1.0)
    queries = np.array([[5.0, 5.0], [9.0, 9.0], [0.0, 0.0], [20.0, 20.0]])
    b, xi, cap = mech.counts(data, queries)
    assert cap == mech.saturation_cap() == 20 + 2 + 45
    assert b.tolist()[:2] == [2, 1] and b[2] == cap and b[3] == 0
    assert xi.tolist() == [2, 1, 0, 0]
    ans = mech.run(data, queries, NoiseSource(seed=2))
    # anomalies with lambda = 19 and 20 -> error < e^-18; the dense point and the empty spot -> normal/absent
    assert ans.tolist() == [True, True, False, False]


# ---------------------------------------------------------------------------
# composition and validation
# ---------------------------------------------------------------------------


def test_batch_cost_sequential_and_claim_5():
    mech = AnomalyIdentification(5, 0.5, 0.1)
    assert mech.batch_cost(10) == PrivacyCost(Fraction(1))  # Claim 3: n * eps
    assert mech.batch_cost(10, m=2) == PrivacyCost(Fraction(2, 10))  # Claim 5: m * eps
    assert mech.batch_cost(3, m=7) == PrivacyCost(Fraction(3, 10))  # never above sequential
    assert mech.batch_cost(0) == PrivacyCost(0)
    with pytest.raises(ValueError, match="m must be"):
        mech.batch_cost(3, m=0)
    with pytest.raises(ValueError, match="n_queries"):
        mech.batch_cost(-1)


def test_batch_m_is_a_sound_upper_bound():
    pts = np.array([[0.0], [1.0], [2.0], [3.0]])
    assert AnomalyIdentification.batch_m(pts, 0.4) == 1  # > 2r apart: parallel, cost eps
    assert AnomalyIdentification.batch_m(pts, 0.5) == 3  # 2r = 1: neighbours can share a ball
    rng = np.random.default_rng(6)
    P = rng.uniform(0, 4, size=(60, 2))
    r = 0.5
    m = AnomalyIdentification.batch_m(P, r)
    # brute-force lower bound on the true max over centres: data points and pairwise midpoints
    centres = np.vstack([P, ((P[:, None] + P[None]) / 2).reshape(-1, 2)])
    d = np.sqrt(((centres[:, None] - P[None]) ** 2).sum(-1))
    assert (d <= r).sum(1).max() <= m
    assert AnomalyIdentification.batch_m(np.zeros((0, 2)), r) == 0


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(beta=0), "beta"),
        (dict(beta=2.5), "beta"),
        (dict(beta=True), "beta"),
        (dict(r=-0.1), "r must"),
        (dict(r=float("inf")), "r must"),
        (dict(epsilon=0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(epsilon=float("nan")), "epsilon"),
        (dict(k=0), "k must"),
        (dict(k=1.5), "k must"),
        (dict(mechanism="laplace"), "mechanism"),
    ],
)
def test_validate_errors(kwargs, param):
    args = dict(beta=5, r=1.0, epsilon=0.1, k=1, mechanism="sp") | kwargs
    mech = AnomalyIdentification(**args)  # only stores
    with pytest.raises(ValueError, match=param):
        mech.validate()
    with pytest.raises(ValueError, match=param):
        mech.answer([1], [1], NoiseSource(seed=0))


def test_metadata_and_count_checks():
    sp = AnomalyIdentification(5, 1.0, 0.1)
    dp = AnomalyIdentification(5, 1.0, 0.1, mechanism="dp")
    assert (sp.name, sp.notion, sp.neighbour) == ("aiq-sp-lambda_k", "sp", "add-remove")
    assert (dp.name, dp.notion) == ("aiq-dp-delta_g", "dp")
    with pytest.raises(ValueError, match="b must be >= "):
        sp.lam([1], [2])
    with pytest.raises(ValueError, match=">= 0"):
        sp.lam([-1], [0])
