"""Issue 21, item 1 (PCOR): the cell index from per-(cell, value) aggregates instead of rows.

``CellIndex.from_aggregates`` (what the step builds from one ``GROUP BY`` in the warehouse) must give every
statistic of the row-based index as it was built before (a copy of that code is the oracle below), every
verifier decision, and, in the step, the same targets and the same seeded explanations; aggregates split at
awkward chunk boundaries (chunk size 1, a prime size, one chunk) must give the same index.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.mechanisms.pcor.contexts import ContextSpace
from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
from dpcore.mechanisms.pcor.index import CellIndex
from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier, HistogramVerifier, LOFVerifier

CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV"]
ATTRS = ["carrier", "origin", "month"]


# ---------------------------------------------------------------- oracle: the row-based build as it was


def _row_based(space: ContextSpace, codes, metric) -> SimpleNamespace:
    """Today's (pre-issue-21) ``CellIndex.build`` arithmetic on rows, verbatim, as an independent oracle."""
    codes = np.asarray(codes).astype(np.int32)
    metric = np.asarray(metric, dtype=np.float64)
    sizes = space.sizes
    strides = np.ones(space.m, dtype=np.int64)
    for i in range(space.m - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    o = SimpleNamespace(n_rows=metric.size, n_cells=int(np.prod(sizes)))
    o.cell_of_row = codes.astype(np.int64) @ strides
    integer = bool(np.all(metric == np.round(metric)))
    med = float(np.median(metric))
    o.centre = float(np.round(med)) if integer else med
    o.integer_metric = integer
    x = metric - o.centre
    occupied, inv, cnt = np.unique(o.cell_of_row, return_inverse=True, return_counts=True)
    o.occupied = occupied
    o.occupied_codes = (occupied[:, None] // strides[None, :]) % sizes[None, :]
    o.occupied_count = cnt
    o.occupied_sum = np.bincount(inv, weights=x, minlength=occupied.size)
    o.occupied_sumsq = np.bincount(inv, weights=x * x, minlength=occupied.size)
    o.uniq, row_rank = np.unique(metric, return_inverse=True)
    o.row_rank = row_rank.reshape(-1)
    u = o.uniq.size
    o.entry_key, o.entry_count = np.unique(o.cell_of_row * u + o.row_rank, return_counts=True)
    o.entry_rank = o.entry_key % u
    o.entry_cell = o.entry_key // u
    o.entry_value = o.uniq[o.entry_rank]
    o.entry_cum = np.concatenate([[0], np.cumsum(o.entry_count)])
    first = np.searchsorted(o.entry_key, occupied * u, side="left")
    last = np.searchsorted(o.entry_key, (occupied + 1) * u, side="left")
    o.occupied_entry_start, o.occupied_entry_stop = first, last
    o.occupied_min, o.occupied_max = o.entry_value[first], o.entry_value[last - 1]
    return o


EXACT = ["n_rows", "n_cells", "centre", "integer_metric", "occupied", "occupied_codes", "occupied_count", "uniq",
         "entry_key", "entry_count", "entry_rank", "entry_cell", "entry_value", "entry_cum", "occupied_entry_start",
         "occupied_entry_stop", "occupied_min", "occupied_max"]
SUMS = ["occupied_sum", "occupied_sumsq"]


def _assert_population_equal(index: CellIndex, ref: SimpleNamespace) -> None:
    for name in EXACT:
        got, want = getattr(index, name), getattr(ref, name)
        assert np.array_equal(np.asarray(got), np.asarray(want)), name
        if isinstance(got, np.ndarray):
            assert got.dtype.kind == np.asarray(want).dtype.kind, name
    for name in SUMS:
        got, want = getattr(index, name), getattr(ref, name)
        if ref.integer_metric:  # exact integer sums: identical whatever the order of summation
            assert np.array_equal(got, want), name
        else:  # a row-order sum vs a (cell, value)-order sum: equal up to rounding
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9 * max(1.0, float(np.abs(want).max())))


def _assert_rows_equal(index: CellIndex, ref: SimpleNamespace, rows, codes, metric) -> None:
    rows = np.asarray(rows)
    assert index.n_held == rows.size
    assert np.array_equal(index.cell_of_row, ref.cell_of_row[rows])
    assert np.array_equal(index.row_rank, ref.row_rank[rows])
    assert np.array_equal(index.codes, np.asarray(codes)[rows])
    assert np.array_equal(index.metric, np.asarray(metric, dtype=float)[rows])


# ---------------------------------------------------------------- data


def _space():
    return ContextSpace.from_domains(["a", "b", "c"], [[1, 2, 3, 4], ["x", "y", "z"], list("pqrst")])


def _random_table(seed: int, n: int, kind: str):
    """Codes and metric: ``dups`` (integers, heavy ties), ``none`` (continuous floats, no tie), ``floats``
    (floats on a coarse grid: ties and non-integers), ``wide`` (large integers, few ties)."""
    rng = np.random.default_rng(seed)
    sp = _space()
    codes = np.stack([rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1]), rng.choice(3, n),
                      rng.choice(5, n, p=[0.1, 0.1, 0.2, 0.3, 0.3])], axis=1)
    if kind == "dups":
        metric = rng.poisson(6, n).astype(float)
        k = min(5, n)
        metric[rng.choice(n, k, replace=False)] = rng.integers(25, 40, k)
    elif kind == "none":
        metric = rng.normal(100, 10, n) + np.where(codes[:, 2] == 0, 40.0, 0.0)
    elif kind == "floats":
        metric = np.round(rng.normal(3, 1, n), 1) * 0.7
    else:
        metric = rng.integers(-10**6, 10**6, n).astype(float)
    return sp, codes, metric


@pytest.fixture(scope="module")
def demo(small_flights_csv):
    """The conftest's demo sample (first 3,000 flights) as the step would see it: arr_delay, carrier x origin x month."""
    from pathlib import Path

    from dpcore.release.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "demo.yaml")
    sp = ContextSpace.from_domains(ATTRS, [spec.public_schema.categorical[a].domain for a in ATTRS])
    df = pd.read_csv(small_flights_csv, dtype={"carrier": str, "origin": str})
    df = df.dropna(subset=["arr_delay", "air_time"]).reset_index(drop=True)
    return sp, sp.encode(df[ATTRS]), df["arr_delay"].to_numpy(dtype=float)


TABLES = [("dups", 1, 1500), ("dups", 2, 7), ("none", 3, 1200), ("none", 4, 2), ("floats", 5, 1500),
          ("wide", 6, 800), ("dups", 7, 1)]


def _aggregate_sql(codes, metric, chunk: int | None = None):
    """``GROUP BY`` in DuckDB (one chunk of rows at a time when ``chunk``): distinct (codes, value) with counts."""
    frame = pd.DataFrame({"a": codes[:, 0], "b": codes[:, 1], "c": codes[:, 2], "v": metric})
    con = duckdb.connect()
    parts = []
    bounds = [(0, len(frame))] if chunk is None else [(s, s + chunk) for s in range(0, len(frame), chunk)]
    for lo, hi in bounds:
        con.register("part", frame.iloc[lo:hi])
        parts.append(con.execute("SELECT a, b, c, v, count(*) AS n FROM part GROUP BY ALL").df())
        con.unregister("part")
    agg = pd.concat(parts, ignore_index=True)
    return agg[["a", "b", "c"]].to_numpy(), agg["v"].to_numpy(), agg["n"].to_numpy()


# ---------------------------------------------------------------- index: every statistic


@pytest.mark.parametrize("kind, seed, n", TABLES)
def test_build_equals_the_row_based_index(kind, seed, n):
    sp, codes, metric = _random_table(seed, n, kind)
    index = CellIndex.build(sp, codes, metric)
    ref = _row_based(sp, codes, metric)
    _assert_population_equal(index, ref)
    _assert_rows_equal(index, ref, np.arange(n), codes, metric)
    assert np.array_equal(index.cell_count.sum(), n)


def test_build_equals_the_row_based_index_on_the_demo(demo):
    sp, codes, metric = demo
    index = CellIndex.build(sp, codes, metric)
    ref = _row_based(sp, codes, metric)
    assert ref.integer_metric
    _assert_population_equal(index, ref)
    _assert_rows_equal(index, ref, np.arange(metric.size), codes, metric)


@pytest.mark.parametrize("chunk", [None, 1, 7, 97])  # one chunk, chunk size 1, primes
@pytest.mark.parametrize("kind, seed, n", TABLES[:6])
def test_sql_aggregates_in_chunks_give_the_same_index(kind, seed, n, chunk):
    """Partial GROUP BYs of chunks of rows, concatenated (repeated pairs merged), are the same aggregates."""
    sp, codes, metric = _random_table(seed, n, kind)
    a_codes, a_metric, a_count = _aggregate_sql(codes, metric, chunk)
    agg = CellIndex.from_aggregates(sp, a_codes, a_metric, a_count)
    built = CellIndex.build(sp, codes, metric)
    ref = _row_based(sp, codes, metric)
    _assert_population_equal(agg, ref)
    for name in EXACT + SUMS:  # the aggregate path and build() share one constructor: bit-identical, floats too
        assert np.array_equal(np.asarray(getattr(agg, name)), np.asarray(getattr(built, name))), name
    assert np.array_equal(agg.sum_tensor, built.sum_tensor) and np.array_equal(agg.minmax_tensor, built.minmax_tensor)
    assert agg.n_held == 0 and agg.codes.shape == (0, 3)
    rows = np.random.default_rng(seed).choice(n, min(n, 9), replace=False)
    held = agg.with_rows(codes[rows], metric[rows])
    _assert_rows_equal(held, ref, rows, codes, metric)
    assert held.entry_key is agg.entry_key  # shares the population, holds only its rows


def test_demo_aggregates_give_the_same_index(demo):
    sp, codes, metric = demo
    agg = CellIndex.from_aggregates(sp, *_aggregate_sql(codes, metric, 101))
    _assert_population_equal(agg, _row_based(sp, codes, metric))
    assert agg.entry_key.size < metric.size  # the point: fewer entries than rows


def test_median_of_counts_is_numpys_median():
    rng = np.random.default_rng(11)
    for n in [1, 2, 3, 4, 5, 10, 11, 100, 101]:
        for values in (rng.integers(0, 4, n).astype(float), rng.normal(0, 1, n), np.round(rng.normal(0, 1, n), 1),
                       rng.choice([0.5, 1.5, 2.5, -0.5], n)):
            sp = ContextSpace.from_domains(["a"], [[0]])
            index = CellIndex.build(sp, np.zeros((n, 1), int), values)
            med = float(np.median(values))
            integer = bool(np.all(values == np.round(values)))
            assert index.centre == (float(np.round(med)) if integer else med)


def test_from_aggregates_rejects_bad_input_by_name():
    sp = _space()
    codes = np.array([[0, 0, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match="counts: some entries are not positive"):
        CellIndex.from_aggregates(sp, codes, [1.0, 2.0], [1, 0])
    with pytest.raises(ValueError, match="counts: some entries are not integers"):
        CellIndex.from_aggregates(sp, codes, [1.0, 2.0], [1, 1.5])
    with pytest.raises(ValueError, match="counts must have one entry"):
        CellIndex.from_aggregates(sp, codes, [1.0, 2.0], [1])
    with pytest.raises(ValueError, match="metric: some rows are not finite"):
        CellIndex.from_aggregates(sp, codes, [1.0, np.nan], [1, 1])
    with pytest.raises(ValueError, match="column 'b' holds codes out of the domain range"):
        CellIndex.from_aggregates(sp, np.array([[0, 3, 0]]), [1.0], [1])
    with pytest.raises(ValueError, match="empty"):
        CellIndex.from_aggregates(sp, np.zeros((0, 3), int), [], [])
    index = CellIndex.from_aggregates(sp, codes, [1.0, 2.0], [3, 4])
    assert index.n_rows == 7
    for bad_codes, bad_value in (([[0, 0, 0]], [2.0]), ([[1, 1, 0]], [2.0]), ([[0, 0, 0]], [1.5])):
        with pytest.raises(ValueError, match="not in the indexed population") as err:
            index.with_rows(bad_codes, bad_value)
        assert "1.5" not in str(err.value) and "2.0" not in str(err.value)
    with pytest.raises(IndexError, match="held records"):
        index.row_codes(0)


# ---------------------------------------------------------------- verifier decisions


VERIFIERS = [GrubbsVerifier(alpha=0.05), LOFVerifier(k=5, threshold=1.3), HistogramVerifier(min_share=0.01)]


def _targets(metric, rng):
    order = np.argsort(metric, kind="stable")
    return np.unique(np.concatenate([order[:2], order[-3:], rng.choice(metric.size, 4, replace=False)]))


@pytest.mark.parametrize("verifier", VERIFIERS, ids=lambda v: v.name)
@pytest.mark.parametrize("kind, seed, n", [("dups", 21, 1500), ("none", 22, 1000), ("floats", 23, 1500),
                                           ("wide", 24, 600)])
@pytest.mark.parametrize("dense_limit", [1 << 22, 0])
def test_every_verifier_decision_is_the_same(verifier, kind, seed, n, dense_limit):
    sp, codes, metric = _random_table(seed, n, kind)
    rng = np.random.default_rng(seed)
    old = CellIndex.build(sp, codes, metric, dense_limit=dense_limit)  # every row held: positions = table rows
    targets = _targets(metric, rng)
    new = CellIndex.from_aggregates(sp, *_aggregate_sql(codes, metric, 13), dense_limit=dense_limit).with_rows(
        codes[targets], metric[targets])
    for held, row in enumerate(targets):
        ctx = rng.random((60, sp.t)) < 0.6
        ctx[:50, sp.offsets + codes[row]] = True  # most contain V, some need not
        ctx[-1] = True  # the whole table
        ctx[-2] = sp.cell_context(codes[row])
        assert np.array_equal(verifier.verify(new, held, ctx), verifier.verify(old, int(row), ctx))
        naive = [verifier.verify_naive(codes, metric, int(row), c, space=sp) for c in ctx[-2:]]
        assert verifier.verify(new, held, ctx[-2:]).tolist() == naive
    assert np.array_equal(verifier.verify_own_cells(new, np.arange(targets.size)),
                          verifier.verify_own_cells(old, targets))
    for held, row in enumerate(targets[:2]):  # every context containing V (Algorithm 1; Grubbs: subset expansion)
        a = ContextEvaluator(new, verifier, held, "population")
        b = ContextEvaluator(old, verifier, int(row), "population")
        ka, va, pa = a.enumerate_valid(with_population=True)
        kb, vb, pb = b.enumerate_valid(with_population=True)
        assert np.array_equal(ka, kb) and np.array_equal(va, vb) and np.array_equal(pa, pb)


@pytest.mark.parametrize("verifier", VERIFIERS, ids=lambda v: v.name)
def test_demo_verifier_decisions_are_the_same(demo, verifier):
    sp, codes, metric = demo
    rng = np.random.default_rng(5)
    old = CellIndex.build(sp, codes, metric)
    targets = _targets(metric, rng)
    new = CellIndex.from_aggregates(sp, *_aggregate_sql(codes, metric)).with_rows(codes[targets], metric[targets])
    assert np.array_equal(verifier.verify_own_cells(new, np.arange(targets.size)),
                          verifier.verify_own_cells(old, targets))
    for held, row in enumerate(targets[:4]):
        ctx = rng.random((40, sp.t)) < 0.5
        ctx[:, sp.offsets + codes[row]] = True
        assert np.array_equal(verifier.verify(new, held, ctx), verifier.verify(old, int(row), ctx))
        a = ContextEvaluator(new, verifier, held, "overlap")
        b = ContextEvaluator(old, verifier, int(row), "overlap")
        assert np.array_equal(a.cell_context, b.cell_context)
        assert np.array_equal(a.utility(ctx, reference=a.cell_context), b.utility(ctx, reference=b.cell_context))


# ---------------------------------------------------------------- the step: aggregate, targets, seeded releases


def _prepared(tmp_path, small_spec_path, **pcor):
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["pcor"].update({"enabled": True, "from_detector": 0, "n_samples": 5, **pcor})
    path = tmp_path / "pcor.yaml"
    path.write_text(yaml.safe_dump(spec))
    spec = load_spec(path)
    settings = Settings.from_env()
    ingested = ingest_stage(spec, settings)
    validate_stage(spec, settings, ingested)
    return spec, settings, ingested


def _table(spec, settings, ingested):
    """The old path's input: every validated row, in input-row order (``load_columns``)."""
    from dpcore.steps.common import load_columns, open_stores

    return load_columns(open_stores(settings).warehouse, spec, ingested, [*ATTRS, "arr_delay"])


def test_the_step_builds_the_same_index_and_seeds_the_same_searches(dpr_home, tmp_path, small_spec_path,
                                                                     small_flights_csv, monkeypatch):
    """plan_pcor (aggregate + lookup) vs the row-based plan it replaces: same index, same targets' values, and the
    same seeded explanation of every target (noise seeded by the record's row in the validated table)."""
    import dpcore.steps.pcor as step

    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "1234")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    flights = pd.read_csv(small_flights_csv, dtype={"carrier": str, "origin": str})
    ok = flights.dropna(subset=["arr_delay", "air_time"])
    ids = [str(ok.loc[ok["arr_delay"].idxmax(), "flight_id"]), str(ok.loc[ok["arr_delay"].idxmin(), "flight_id"]),
           "F900000", "F000472", str(ok["flight_id"].iloc[1234]), str(ok["flight_id"].iloc[-1])]
    spec, settings, ingested = _prepared(tmp_path, small_spec_path, record_ids=ids, sampler="bfs")
    plan = step.plan_pcor(spec, settings, ingested)
    df = _table(spec, settings, ingested)
    sp = plan.job.space
    codes, metric = sp.encode(df[ATTRS]), df["arr_delay"].to_numpy(dtype=float)
    _assert_population_equal(plan.job.index, _row_based(sp, codes, metric))
    table_rows = pd.Index(df["flight_id"]).get_indexer(ids)
    assert [t.record_id for t in plan.targets] == ids
    assert [t.row >= 0 for t in plan.targets] == [r >= 0 for r in table_rows] == [True, True, False, False, True, True]
    # the index holds one row per target (issue 46.2): its record, or a stand-in drawn from the table's records
    # (searched and discarded) for a target without one
    held = plan.job.index
    assert [t.row for t in plan.targets] == [p if r >= 0 else -(p + 1) for p, r in enumerate(table_rows)]
    stand_ins = [np.flatnonzero((codes == held.codes[p]).all(axis=1) & (metric == held.metric[p]))[0]
                 for p, r in enumerate(table_rows) if r < 0]  # each a record of the table
    rows = table_rows.copy()
    rows[rows < 0] = stand_ins
    _assert_rows_equal(plan.job.index, _row_based(sp, codes, metric), rows, codes, metric)
    assert [o for o, r in zip(plan.job.seed_offsets, table_rows) if r >= 0] == [int(r) for r in table_rows if r >= 0]
    old_job = replace(plan.job, index=CellIndex.build(sp, codes, metric), seed_offsets=())
    for t, row in zip(plan.targets, table_rows):
        assert step.compute_explanation(plan.job, t.row) == step.compute_explanation(old_job, int(row))


def _old_detector_targets(spec, settings, ingested, verifier):
    """The choice as it was made before: every flagged candidate checked on the row-based index of the table."""
    from dpcore.release.spec import pcor_source_templates
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import flagged_by_score

    df = _table(spec, settings, ingested)
    sp = ContextSpace.from_domains(ATTRS, [spec.public_schema.categorical[a].domain for a in ATTRS])
    index = CellIndex.build(sp, sp.encode(df[ATTRS]), df["arr_delay"].to_numpy(dtype=float))
    ranked = np.asarray(flagged_by_score(open_stores(settings).warehouse, spec, ingested,
                                         pcor_source_templates(spec)), dtype=object)
    rows = pd.Index(df["flight_id"]).get_indexer(ranked)
    ok = verifier.verify_own_cells(index, rows[rows >= 0])
    return sorted(str(i) for i in ranked[rows >= 0][ok][: spec.steps.pcor.from_detector])


@pytest.mark.parametrize("verifier, params", [("grubbs", {}), ("lof", {"lof_k": 5, "lof_threshold": 1.3}),
                                              ("histogram", {"histogram_min_share": 0.02})])
def test_detector_targets_are_the_same_in_batches(dpr_home, tmp_path, small_spec_path, monkeypatch, verifier, params):
    """Own-cell check on candidates looked up batch by batch (batch 1, a prime, one batch) = the old choice."""
    import dpcore.steps.pcor as step
    from dpcore.mechanisms.pcor.verifiers import make_verifier
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import detection_frame, fit_one, store_detection, templates_of

    spec, settings, ingested = _prepared(tmp_path, small_spec_path, from_detector=3, verifier=verifier, **params)
    frame = detection_frame(spec, settings, ingested)
    store_detection(spec, settings, ingested, frame[spec.dataset.record_id].to_numpy(),
                    [fit_one(frame, t, spec) for t in templates_of(spec)])
    plan = step.plan_pcor(spec, settings, ingested)
    f = make_verifier(plan.job.verifier, **plan.job.verifier_params)
    wh = open_stores(settings).warehouse
    for n in (1, 3, 40):
        spec_n = spec.model_copy(update={"steps": spec.steps.model_copy(update={
            "pcor": spec.steps.pcor.model_copy(update={"from_detector": n})})})
        want = _old_detector_targets(spec_n, settings, ingested, f)
        for batch in (1, 7, 4096):
            if batch == 1 and n == 40:
                continue  # one lookup query per candidate: covered by the smaller n
            monkeypatch.setattr(step, "OWN_CELL_BATCH", batch)
            assert step.detector_targets(wh, spec_n, ingested, plan.job.index, f) == want, (n, batch)
    assert [t.record_id for t in plan.targets] == _old_detector_targets(spec, settings, ingested, f)


def test_aggregate_index_reads_entries_not_rows(tmp_path, monkeypatch):
    """On a warehouse table of many rows with few distinct (cell, value) pairs, the step's aggregate hands Python
    only those pairs, in chunks sized by DPR_MEMORY_LIMIT; the index equals the row-based one; targets are looked
    up by id (absent ids: -1) with their input-row-order positions."""
    import dpcore.steps.pcor as step
    from dpcore.runtime.chunks import MemoryBudget
    from dpcore.storage.warehouse import Warehouse

    monkeypatch.setenv("DPR_MEMORY_LIMIT", "64MiB")
    n = 200_000
    sp, codes, metric = _random_table(31, n, "dups")
    rng = np.random.default_rng(31)
    frame = pd.DataFrame({"_row": rng.permutation(n) * 3 + 1, "rid": [f"R{i}" for i in range(n)],
                          "a": np.array([1, 2, 3, 4])[codes[:, 0]], "b": np.array(["x", "y", "z"])[codes[:, 1]],
                          "c": np.array(list("pqrst"))[codes[:, 2]], "v": metric})
    wh = Warehouse(tmp_path / "wh.duckdb", memory=MemoryBudget.from_env())
    wh.write_df("validated", "t", frame)
    monkeypatch.setattr(step, "validated_table", lambda spec, ingested: 'validated."t"')
    seen = []
    real = Warehouse.iter_batches

    def spy(self, sql, params=None, *, rows):
        for batch in real(self, sql, params, rows=rows):
            seen.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(Warehouse, "iter_batches", spy)
    index = step.aggregate_index(wh, None, None, sp, "v")
    _assert_population_equal(index, _row_based(sp, codes, metric))
    assert sum(seen) == index.entry_key.size < n / 100  # the pairs, not the rows, reach Python
    assert max(seen) <= MemoryBudget.from_env().chunk_rows(step._TEXT_BYTES * 3 + 16)
    spec = SimpleNamespace(dataset=SimpleNamespace(record_id="rid"))
    ids = ["R17", "R-1", "R199999", "R0"]
    held, h_codes, h_metric, position = step.lookup_records(wh, spec, None, sp, "v", ids, positions=True)
    assert held.tolist() == [0, -1, 1, 2]
    rows = np.array([17, 199999, 0])
    assert np.array_equal(h_codes, codes[rows]) and np.array_equal(h_metric, metric[rows])
    order = np.argsort(frame["_row"].to_numpy())  # the validated table in input-row order
    assert position.tolist() == np.argsort(order)[rows].tolist()
    _assert_rows_equal(index.with_rows(h_codes, h_metric), _row_based(sp, codes, metric), rows, codes, metric)
