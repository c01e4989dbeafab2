"""Issue 21, item 4: neighbour counts in bounded memory give today's numbers exactly.

* Outlier counts (seed 002): degrees, q_count, S(X), U(0) and the selection's
  utilities over distinct points weighted by multiplicity
  (:class:`dpcore.mechanisms.neighbors.PointMultiset`) against a frozen copy of the
  row-by-row algorithm this change replaced (:func:`today_terms`), on the demo
  sample and on random tables with many duplicates and with none.
* AIQ (seed 001): ball counts and multiplicities summed over chunks (1 row, a
  prime number of rows, one chunk) against the whole-table counts.
* The steps: the warehouse aggregate holds exactly the in-memory coordinates,
  and the AIQ step's answers and diagnostics do not depend on the chunk size.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.mechanisms.aiq import AnomalyIdentification
from dpcore.mechanisms.outlier_count import (
    OutlierCountMechanism,
    count_outliers,
    kissing_upper,
    neighbour_counts,
    relaxed_enclosable_bound,
    subspace_view,
)
from dpcore.mechanisms.subspace import TopSubspaceSelection, candidate_subspaces
from dpcore.mechanisms.neighbors import (
    ArrayChunks, PointMultiset, ball_counts, chunked_ball_counts, multiplicities, scale_by_bounds,
)

ATTRS = ["distance", "air_time", "dep_delay", "arr_delay"]
LOWS = np.array([0.0, 0.0, -120.0, -120.0])
HIGHS = np.array([5000.0, 720.0, 1440.0, 1440.0])


# -- the replaced row-by-row algorithm, frozen as the oracle (dpcore/mechanisms/outlier_count.py before issue 21) --


def today_degrees(m, P, need, prev=None):
    N = P.shape[0]
    cap, exact_max = (None, N - 1) if need >= N - 2 else (need + 2, need)
    if prev is None:
        return ball_counts(P, P, float(m.r), cap=cap) - 1, exact_max
    deg, old_max = prev
    deg = deg.copy()
    redo = np.flatnonzero(deg > old_max)
    if redo.size:
        deg[redo] = ball_counts(P, P[redo], float(m.r), cap=cap) - 1
    return deg, exact_max


def today_f(m, P, Kcap):
    size, L = P.shape[0], int(m.size_limit)
    if size == 0:
        return 0, 0
    if size - L >= Kcap:
        return Kcap, size
    g = relaxed_enclosable_bound(P, m.r, L, node_limit=int(m.node_limit))
    return min(g, Kcap), g


def today_terms(m, XS):
    """``(S, U(0), {t: U(t)}, q_count)`` exactly as the row-by-row ``_terms`` computed them."""
    P = np.ascontiguousarray(np.asarray(XS, dtype=float) + 0.0)
    N, d = P.shape
    k = int(m.k)
    if N == 0:
        return 0.0, 0, {}, 0
    G, beta, K = m.global_sensitivity_upper(d), m.beta, kissing_upper(d)
    horizon = int(math.ceil(math.log(G) / beta)) + 1 if G > 1 else 0
    ts = np.arange(horizon + 1)
    kc_hi, kc_lo, decay = K * (k + ts + 1), K * (k + ts), np.exp(-beta * ts)

    def sizes(deg, exact_max):
        top = exact_max + 1
        csum = np.concatenate([[0], np.cumsum(np.bincount(np.minimum(deg, top), minlength=top + 1))])

        def size(lo, hi):
            lo = max(lo, 0)
            if hi > exact_max:
                return int(N - csum[min(lo, top)])
            return int(csum[hi + 1] - csum[lo])

        return (np.array([size(k - t, k + t) for t in ts]), np.array([size(k - 1 - t, k - 1 + t) for t in ts]))

    deg, exact_max = today_degrees(m, P, k + 1)
    q_count = int(np.count_nonzero(deg < k))
    size_hi, size_lo = sizes(deg, exact_max)
    anc_hi = anc_lo = None
    S_max, U0, evaluated = 0.0, 0, {}
    for t in range(horizon + 1):
        b_hi, b_lo = np.minimum(size_hi[t:], kc_hi[t:]), np.minimum(size_lo[t:], kc_lo[t:])
        if anc_hi is not None:
            b_hi = np.minimum(b_hi, anc_hi[1] + size_hi[t:] - size_hi[anc_hi[0]])
            b_lo = np.minimum(b_lo, anc_lo[1] + size_lo[t:] - size_lo[anc_lo[0]])
        ub = np.minimum(G, np.maximum(b_hi, b_lo) + ts[t:] + 1) * decay[t:]
        if t > 0 and ub.max() <= S_max:
            break
        if t > 0 and ub[0] <= S_max:
            continue
        if k + t > exact_max:
            deg, exact_max = today_degrees(m, P, max(2 * (k + t), k + 16), prev=(deg, exact_max))
            size_hi, size_lo = sizes(deg, exact_max)
        f_hi, g_hi = today_f(m, P[(deg >= k - t) & (deg <= k + t)], int(kc_hi[t]))
        f_lo, g_lo = today_f(m, P[(deg >= k - 1 - t) & (deg <= k - 1 + t)], int(kc_lo[t]))
        anc_hi, anc_lo = (t, g_hi), (t, g_lo)
        U = int(min(G, max(f_hi, f_lo) + t + 1))
        evaluated[t] = U
        if t == 0:
            U0 = U
        S_max = max(S_max, math.exp(-beta * t) * U)
        if S_max >= G:
            break
    return S_max, U0, evaluated, q_count


# -- data -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_X(small_flights_csv):
    """The demo sample's four numeric attributes, complete rows, scaled by the spec's public bounds."""
    df = pd.read_csv(small_flights_csv, usecols=ATTRS).dropna()
    return scale_by_bounds(df[ATTRS].to_numpy(dtype=float), LOWS, HIGHS)


def _tables():
    rng = np.random.default_rng(21)
    dup = rng.integers(0, 12, size=(1500, 3)).astype(float) / 40.0  # many duplicates, exact ties at grid steps
    none = rng.uniform(size=(900, 3))  # no duplicates
    mixed = np.vstack([rng.normal(0.5, 0.05, size=(700, 3)), dup[:300], -dup[:50] * 0.0])  # -0.0 and 0.0 rows
    return {"duplicates": dup, "no_duplicates": none, "mixed": mixed}


TABLES = _tables()


# -- weighted ball counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TABLES))
@pytest.mark.parametrize("d", [1, 2, 3])
def test_weighted_counts_equal_counts_over_the_rows(name, d):
    X = TABLES[name][:, :d]
    ms = PointMultiset.of_rows(X)
    assert ms.n == len(X) and np.array_equal(np.sort(ms.expand(), axis=0), np.sort(X + 0.0, axis=0))
    Q = np.vstack([X[::5], np.random.default_rng(d).uniform(-0.2, 1.2, size=(40, d))])
    for r in (0.0, 0.025, 0.05, 0.2):
        for cap in (None, 1, 2, 5, 60, 10**7):
            np.testing.assert_array_equal(ball_counts(ms.points, Q, r, cap=cap, weights=ms.weights),
                                          ball_counts(X, Q, r, cap=cap))


@pytest.mark.parametrize("cap", [None, 3, 40])
def test_weighted_blocked_path_equals_the_rows_in_high_dimension(cap):
    rng = np.random.default_rng(8)
    X = rng.integers(0, 3, size=(900, 9)).astype(float) / 3.0
    ms = PointMultiset.of_rows(X)
    np.testing.assert_array_equal(ball_counts(ms.points, X[:200], 0.75, cap=cap, weights=ms.weights),
                                  ball_counts(X, X[:200], 0.75, cap=cap))


def test_multiset_merges_rows_equal_after_scaling_and_checks_weights():
    ms = PointMultiset.aggregate(np.array([[0.0], [-0.0], [1.0], [1.0]]), np.array([2, 3, 1, 4]))
    assert ms.points.ravel().tolist() == [0.0, 1.0] and ms.weights.tolist() == [5, 5]
    assert not np.signbit(ms.points).any()
    for bad in ([1, 0, 1, 1], [1.5, 1, 1, 1], [1, 1]):
        with pytest.raises(ValueError, match="weights"):
            PointMultiset.aggregate(np.zeros((4, 1)), np.array(bad))


# -- outlier counts: identical to the row-by-row algorithm --------------------------------------------------


def _cases(demo_X):
    out = {f"demo-{a}": subspace_view(demo_X, (i,)) for i, a in enumerate(ATTRS)}
    out["demo-dep×arr"] = subspace_view(demo_X, (2, 3))
    out.update({f"{k}-2d": subspace_view(v, (0, 1)) for k, v in TABLES.items()})
    return out


@pytest.mark.parametrize("method,k,r", [("smooth", 3, 0.002), ("smooth_student_t", 3, 0.01), ("smooth", 1, 0.05),
                                        ("smooth_student_t", 5, 0.02)])
def test_degrees_q_count_and_smooth_bound_equal_the_row_by_row_algorithm(demo_X, method, k, r):
    m = OutlierCountMechanism(k, r, 0.5, 1e-6 if method == "smooth" else 0, method=method)
    for name, XS in _cases(demo_X).items():
        ms = PointMultiset.of_rows(XS)
        ref = today_terms(m, XS)
        assert m._terms(XS) == ref, name
        assert m._terms(ms) == ref, name
        assert count_outliers(ms, k, r) == count_outliers(XS, k, r) == ref[3]
        np.testing.assert_array_equal(neighbour_counts(XS, r), ball_counts(XS, XS, r) - 1)
        np.testing.assert_array_equal(neighbour_counts(XS, r, cap=k), ball_counts(XS, XS, r, cap=k + 1) - 1)


def test_selection_utilities_from_the_aggregates_equal_the_rows(demo_X):
    cands = candidate_subspaces(4, 1) + candidate_subspaces(4, 2)
    sel = TopSubspaceSelection(k=3, r=0.002, epsilon=0.4, h=2, candidates=cands)
    points = {S: PointMultiset.of_rows(subspace_view(demo_X, S)) for S in cands}
    today = [np.count_nonzero(ball_counts(subspace_view(demo_X, S), subspace_view(demo_X, S), 0.002, cap=4) - 1 < 3)
             / (3 * kissing_upper(len(S)) + 1) for S in cands]
    assert sel.utilities(points).tolist() == sel.utilities(demo_X).tolist() == today
    assert [sel.utility_of(points, S) for S in cands] == today
    with pytest.raises(ValueError, match="candidate subspace"):
        sel.utilities({S: points[S] for S in cands[1:]})


@pytest.mark.parametrize("method", ["global_laplace", "smooth", "smooth_student_t"])
def test_release_from_the_aggregate_equals_the_release_from_the_rows(demo_X, method):
    from dpcore.noise import NoiseSource

    m = OutlierCountMechanism.for_dimension(1, 3, 0.002, 0.5, 1e-6, method=method)
    for i in range(4):
        XS = subspace_view(demo_X, (i,))
        a = m.release_with_diagnostics(XS, NoiseSource(seed=5))
        b = m.release_with_diagnostics(PointMultiset.of_rows(XS), NoiseSource(seed=5))
        assert a == b


# -- AIQ: chunked counts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 7, 97, None])
@pytest.mark.parametrize("cap", [None, 1, 6, 457])
def test_chunked_counts_equal_whole_table_counts(demo_X, rows, cap):
    X = demo_X if rows not in (1, 7) else demo_X[:700]  # keep chunks of 1 row quick
    Q = np.vstack([X[[0, 3, 50, 400]], X[[3]], [[0.98, 0.97, 0.97, 0.97]]])
    b, xi = chunked_ball_counts(ArrayChunks.of(X, rows), Q, 0.02, cap=cap)
    want = ball_counts(X, Q, 0.02, cap=cap)
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(xi, multiplicities(X, Q))


@pytest.mark.parametrize("name", sorted(TABLES))
def test_chunked_counts_on_random_tables_and_the_mechanism(name):
    X = TABLES[name]
    Q = np.vstack([X[:30], np.full((1, 3), 2.0)])
    mech = AnomalyIdentification(beta=5, r=0.05, epsilon=0.5, k=1)
    whole = mech.counts(X, Q)
    for rows in (1, 13, len(X)):
        b, xi, cap = mech.counts(ArrayChunks.of(X, rows), Q)
        assert cap == whole[2]
        np.testing.assert_array_equal(b, whole[0])
        np.testing.assert_array_equal(b, np.minimum(ball_counts(X, Q, 0.05), cap))
        np.testing.assert_array_equal(xi, multiplicities(X, Q))
        assert mech.exact_count(ArrayChunks.of(X, rows), Q[0]) == int(ball_counts(X, Q[:1], 0.05)[0])


# -- the steps on the warehouse ---------------------------------------------------------------------------------


@pytest.fixture
def warehouse_run(dpr_home, small_spec_path, monkeypatch):
    """Ingest and validate the demo sample; return (spec with AIQ enabled, settings, ingested, in-memory table)."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.steps.common import load_columns, open_stores

    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "11")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    raw = yaml.safe_load(small_spec_path.read_text())
    sample = pd.read_csv(raw["dataset"]["source"]["path"], usecols=["flight_id"], dtype=str)["flight_id"].tolist()
    raw["steps"]["aiq"] = {"enabled": True, "mechanism": "sp", "epsilon": 0.1, "beta": 5, "r": 0.02, "k": 1,
                           "record_ids": sample[:6] + ["F900000"],
                           "points": [{"distance": 4900, "air_time": 700, "dep_delay": 1400, "arr_delay": 1400}]}
    raw["steps"]["outlier_counts"].update({"enabled": True})
    path = small_spec_path.parent / "bounded.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = load_spec(path)
    settings = Settings.from_env()
    ingested = ingest_stage(spec, settings)
    validate_stage(spec, settings, ingested)
    df = load_columns(open_stores(settings).warehouse, spec, ingested, ATTRS)
    return spec, settings, ingested, df


def test_outlier_counts_plan_holds_exactly_the_in_memory_coordinates(warehouse_run):
    from dpcore.steps.outlier_counts import plan_outlier_counts, subspace_utility

    spec, settings, ingested, df = warehouse_run
    plan = plan_outlier_counts(spec, settings, ingested)
    X = scale_by_bounds(df[plan.attrs].to_numpy(dtype=float), LOWS, HIGHS)  # today's plan.X
    for S in plan.candidates:
        ms = plan.points[S]
        today = PointMultiset.of_rows(subspace_view(X, S))
        assert np.array_equal(ms.points, today.points) and np.array_equal(ms.weights, today.weights)  # bit for bit
        assert subspace_utility(plan, S) == plan.select.utility_of(X, S)


def test_aiq_step_answers_and_diagnostics_do_not_depend_on_the_chunks(warehouse_run, monkeypatch):
    import dpcore.steps.aiq as aiq_step_module
    from dpcore.steps.common import open_stores

    spec, settings, ingested, df = warehouse_run
    cfg = spec.steps.aiq
    # today's in-memory path: the whole table, record ids looked up in it
    mech = AnomalyIdentification(beta=cfg.beta, r=cfg.r, epsilon=cfg.epsilon, k=cfg.k, mechanism=cfg.mechanism)
    data = scale_by_bounds(df[ATTRS].to_numpy(dtype=float), LOWS, HIGHS)
    ids = list(cfg.record_ids)
    b_r, xi_r, present, cap, q_r = mech.record_query_counts(data, df[spec.dataset.record_id], ids)
    assert present.tolist() == [True] * 6 + [False]
    b_p, xi_p, _ = mech.counts(data, scale_by_bounds(np.array([[4900.0, 700, 1400, 1400]]), LOWS, HIGHS))
    want_b, want_xi = np.concatenate([b_r, b_p]).tolist(), np.concatenate([xi_r, xi_p]).tolist()
    tables = []
    # chunks of n - 1 rows: the last chunk is one row (the edge), without n one-row partitions to export
    for n, rows in enumerate([len(df) - 1, 7, None]):
        monkeypatch.setattr(aiq_step_module, "chunk_rows", (lambda wh, d, rows=rows: rows) if rows else
                            aiq_step_module.chunk_rows)
        run_spec = spec.model_copy(update={"release_id": f"{spec.release_id}-chunks{n}"})
        out = aiq_step_module.aiq_step(run_spec, settings, ingested)
        tables.append(out.tables["answers"])
        diag = open_stores(settings).warehouse.query_df(
            "SELECT ball_count, multiplicity FROM internal.aiq_diagnostics WHERE key = ? ORDER BY rowid", [out.keys[0]])
        assert diag["ball_count"].tolist() == want_b and diag["multiplicity"].tolist() == want_xi
    for t in tables[1:]:
        pd.testing.assert_frame_equal(t, tables[0])


def test_aiq_step_sql_counts_equal_the_kdtree_and_the_chunked_path(warehouse_run, monkeypatch):
    """Issue 29: the step's one SQL aggregate gives today's KD-tree counts and the same answers as the fallback."""
    import dpcore.steps.aiq as aiq_step_module
    from dpcore.mechanisms.neighbors_sql import sql_countable
    from dpcore.steps.common import open_stores

    spec, settings, ingested, df = warehouse_run
    cfg = spec.steps.aiq
    mech = AnomalyIdentification(beta=cfg.beta, r=cfg.r, epsilon=cfg.epsilon, k=cfg.k, mechanism=cfg.mechanism)
    data = scale_by_bounds(df[ATTRS].to_numpy(dtype=float), LOWS, HIGHS)
    pos = pd.Index(df[spec.dataset.record_id].astype(str)).get_indexer(list(cfg.record_ids))
    present = pos >= 0
    Q = np.vstack([data[pos[present]], scale_by_bounds(np.array([[4900.0, 700, 1400, 1400]]), LOWS, HIGHS)])
    kd_b = ball_counts(data, Q, float(cfg.r), cap=mech.saturation_cap(), method="kdtree")  # today's counting
    kd_xi = multiplicities(data, Q)
    want_b = np.zeros(len(present) + 1, dtype=np.int64)
    want_xi = np.zeros(len(present) + 1, dtype=np.int64)
    live = np.concatenate([present, [True]])
    want_b[live], want_xi[live] = kd_b, kd_xi
    wh = open_stores(settings).warehouse
    assert sql_countable(aiq_step_module.column_types(wh, spec, ingested, ATTRS))  # the demo's columns take SQL
    tables = []
    for n, sql in enumerate([True, False]):
        if not sql:
            monkeypatch.setattr(aiq_step_module, "sql_countable", lambda types: False)
            monkeypatch.setattr(aiq_step_module, "chunk_rows", lambda wh, d: 7)
        run_spec = spec.model_copy(update={"release_id": f"{spec.release_id}-sql{n}"})
        out = aiq_step_module.aiq_step(run_spec, settings, ingested)
        tables.append(out.tables["answers"])
        diag = wh.query_df(
            "SELECT ball_count, multiplicity FROM internal.aiq_diagnostics WHERE key = ? ORDER BY rowid", [out.keys[0]])
        assert diag["ball_count"].tolist() == want_b.tolist() and diag["multiplicity"].tolist() == want_xi.tolist()
    pd.testing.assert_frame_equal(tables[1], tables[0])
