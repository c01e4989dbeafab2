"""Issue 46.2 (DESIGN.md rule 14): no step takes a shortcut on whether an asked or chosen record is present.

A PCOR target without a record (an absent or quarantined listed id, an
unfilled ``from_detector`` slot) runs the same search as a present one, on a
stand-in record, and its output is discarded; AIQ counts every query point
(and one stand-in per unfilled detector slot) in the same aggregate. The
traces compared are the searches the mechanism ran (calls and
exponential-mechanism selections) and the points the ball-count aggregate
counted; the released outcome of a recordless target is unchanged. Every sampler (BFS, DFS, random walk,
uniform) and the LOF verifier's window search do the same counted work for a present record, an absent id's
stand-in and a neighbouring table.
"""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.mechanisms.pcor.contexts import ContextSpace
from dpcore.mechanisms.pcor.index import CellIndex
from dpcore.mechanisms.pcor.mechanism import PCORMechanism
from dpcore.noise import NoiseSource

N_SAMPLES = 3
SPACE = ContextSpace.from_domains(["a", "b"], [["x", "y", "z"], ["p", "q", "r"]])
MECH = {"sampler": "bfs", "epsilon": 1.0, "n_samples": N_SAMPLES, "utility": "population"}


def _records(with_v: bool) -> tuple[np.ndarray, np.ndarray]:
    """A tiny table: every cell holds values 10..12 eight times; W = (z, r, 60); V = (x, p, 100) only if ``with_v``.

    The tables with and without V are neighbours (one record added or removed); each holds an outlier.
    """
    codes, values = [], []
    for a in range(3):
        for b in range(3):
            for v in (10, 11, 12, 10, 11, 12, 10, 11):
                codes.append((a, b))
                values.append(float(v))
    codes.append((2, 2))
    values.append(60.0)
    if with_v:
        codes.append((0, 0))
        values.append(100.0)
    return np.array(codes, dtype=np.int32), np.array(values)


def _index(codes, values) -> CellIndex:
    return CellIndex.from_aggregates(SPACE, codes, values, np.ones(len(values), dtype=np.int64))


@pytest.fixture
def trace(monkeypatch):
    """Every search the mechanism runs, as the operations it performed: (whether a start context was found,
    distinct contexts verified = verifier queries, exponential-mechanism calls, final candidates)."""
    calls: list[tuple[bool, int, int, int]] = []
    real = PCORMechanism.explain_with_chooser

    def traced(self, evaluator, chooser, progress=None):
        result = real(self, evaluator, chooser, progress)
        calls.append((result.start_context is not None, result.n_verified, result.n_em_calls, result.n_candidates))
        return result

    monkeypatch.setattr(PCORMechanism, "explain_with_chooser", traced)
    return calls


class _Draw(NoiseSource):
    """A noise source whose uniform integer draws return ``low + k`` (a test walks every outcome of a draw)."""

    def __init__(self, k: int):
        super().__init__(seed=0)
        self.k = k

    def integers(self, low, high, size=None):
        assert size is None and low + self.k < high
        return low + self.k


def _draws(index: CellIndex):
    """Every outcome of a uniform draw over the index's records, as (first draw of an entry, its multiplicity):
    the records of one entry (same cell, same value) are the same record to a search."""
    return [(int(index.entry_cum[e]), int(index.entry_count[e])) for e in range(index.entry_count.size)]


def _job(index, codes, values, held, *, n_listed, from_detector=0, unfilled=0, spec=None):
    from dpcore.steps.pcor import PcorJob, _with_stand_ins

    held_index, rows, extra = _with_stand_ins(index, SPACE, spec, "m", codes, values, np.asarray(held, np.int64),
                                              n_listed, from_detector, unfilled)
    return PcorJob(SPACE, held_index, "grubbs", {"alpha": 0.05}, MECH), rows, extra


def test_an_absent_id_does_the_work_of_a_present_id_whose_record_is_drawn_from_the_table(trace, monkeypatch):
    """The stand-in of an absent listed id is a uniformly random record of the table, so, over the draw, the
    absent id's search performs exactly the operations of a present id's search on a uniformly random record.

    Walked exactly: every outcome k of the stand-in's draw on D' (the table without V), against a present
    query about each record of D' (multiplicity included). The old rule (always the most extreme record, W)
    ran W's search for every absent id: a BFS, where almost every present query finds no context at all."""
    import dpcore.steps.pcor as step

    codes, values = _records(with_v=False)  # D' = D minus V: V's id is absent
    index = _index(codes, values)
    absent: Counter = Counter()
    for k, weight in _draws(index):
        monkeypatch.setattr(step, "noise_source", lambda k=k: _Draw(k))
        job, rows, _ = _job(index, codes[:0], values[:0], [-1], n_listed=1)
        assert rows[0] < 0
        out = step.compute_explanation(job, int(rows[0]))
        assert out == {  # the released outcome stays the data-independent one; the stand-in's is discarded
            "release": {"status": "no_valid_context", "context": None, "bits": None},
            "internal": {"start_context": None, "n_verified": 0, "n_candidates": 0, "population": None},
        }
        absent[trace.pop()] += weight
    cells = index.entry_cell.astype(np.int64)
    entry_codes = ((cells[:, None] // index.strides) % SPACE.sizes).astype(np.int32)
    present_job = step.PcorJob(SPACE, index.with_rows(entry_codes, index.entry_value), "grubbs", {"alpha": 0.05},
                               MECH)
    present: Counter = Counter()
    for row, weight in enumerate(index.entry_count.tolist()):  # a present query about each record of the table
        step.compute_explanation(present_job, row)
        present[trace.pop()] += weight
    assert len(present) == 2  # two kinds of work (W's search, the others'), so the comparison can fail
    assert absent == present


def test_an_absent_id_and_a_present_one_on_neighbouring_tables_do_the_same_work(trace, monkeypatch):
    """D holds V = (x, p, 11), an ordinary record; D' is D without V. V's search on D and its absent id's
    stand-in search on D' perform the same operations (verifier queries, exponential-mechanism calls) except
    when the draw picks W, the one outlier: probability 1 / |D'| exactly, over the draw (old rule: always W)."""
    import dpcore.steps.pcor as step

    codes, values = _records(with_v=False)
    v_codes, v_values = np.array([[0, 0]], dtype=np.int32), np.array([11.0])
    d = _index(np.vstack([codes, v_codes]), np.concatenate([values, v_values]))
    job, rows, _ = _job(d, v_codes, v_values, [0], n_listed=1)
    assert rows[0] == 0
    step.compute_explanation(job, 0)
    present = trace.pop()
    assert present == (False, 16, 0, 0)  # each of the 16 contexts holding V verified once, none valid
    d_minus = _index(codes, values)
    same = 0
    for k, weight in _draws(d_minus):
        monkeypatch.setattr(step, "noise_source", lambda k=k: _Draw(k))
        job2, rows2, _ = _job(d_minus, codes[:0], values[:0], [-1], n_listed=1)
        step.compute_explanation(job2, int(rows2[0]))
        same += weight * (trace.pop() == present)
    assert same == d_minus.n_rows - 1


def test_an_unfilled_detector_slot_draws_its_stand_in_among_the_chosen_records(monkeypatch):
    """An unfilled slot's stand-in is each of the detector's chosen records with equal probability (the old
    rule took a fixed one), and every absent target gets its own draw."""
    import dpcore.steps.pcor as step

    codes, values = _records(with_v=True)
    w, v = len(values) - 2, len(values) - 1  # W and V, both outliers: the detector chose both
    picked = []
    for k in range(2):
        monkeypatch.setattr(step, "noise_source", lambda k=k: _Draw(k))
        job, rows, extra = _job(_index(codes, values), codes[[w, v]], values[[w, v]], [0, 1], n_listed=0,
                                from_detector=3, unfilled=1)
        assert list(rows) == [0, 1] and len(extra) == 1 and extra[0] < 0
        held = step.stand_in_row(extra[0])
        picked.append((int(job.index.codes[held][0]), float(job.index.metric[held])))
    assert sorted(picked) == [(0, 100.0), (2, 60.0)]


def test_an_unfilled_detector_slot_searches_like_a_filled_one(trace):
    from dpcore.steps.pcor import compute_explanation

    codes, values = _records(with_v=True)
    # the detector chose V only; two slots: the second is unfilled
    v = len(values) - 1
    job, rows, extra = _job(_index(codes, values), codes[v:], values[v:], [0], n_listed=0, from_detector=2,
                            unfilled=1)
    assert len(extra) == 1 and extra[0] < 0
    filled = compute_explanation(job, int(rows[0]))
    empty = compute_explanation(job, extra[0])
    assert filled["release"]["status"] == "released" and empty["release"]["status"] == "no_valid_context"
    assert trace[0] == trace[1] and (trace[0][0], trace[0][2]) == (True, N_SAMPLES + 1)


def test_with_no_validated_record_the_search_still_runs_on_a_public_stand_in(trace):
    from dpcore.steps.pcor import compute_explanation

    spec = SimpleNamespace(public_schema=SimpleNamespace(numeric={"m": SimpleNamespace(min=0.0, max=200.0)}))
    job, rows, extra = _job(None, np.zeros((0, 2), np.int32), np.zeros(0), [-1], n_listed=1, from_detector=1,
                            unfilled=1, spec=spec)
    outs = [compute_explanation(job, int(rows[0])), compute_explanation(job, extra[0])]
    assert {o["release"]["status"] for o in outs} == {"no_valid_context"}
    assert len(trace) == 2  # one search per target, as on a table with records


@pytest.mark.usefixtures("prefect_harness")
def test_aiq_counts_the_same_points_for_a_present_and_an_absent_id(dpr_home, small_spec_path, tmp_path, monkeypatch):
    """The ball-count aggregate counts as many points whether the asked id is present (F000001) or absent
    (F900000, on the roster, not in the data), and one per detector slot whether or not the detector fills it
    (the detector's choice stubbed: one record, or none), through the same warehouse queries. The point
    counted for an absent id or an unfilled slot is a real record's (drawn from the table; for a slot, the
    chosen record), so the aggregate does a present query's work (the old stand-in, the public lower bounds,
    ran ten times faster); the absent id's answer still comes from the data-independent input (0, 0)."""
    import dpcore.steps.aiq as step
    from dpcore.mechanisms.neighbors import scale_by_bounds
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.steps.common import validated_table
    from dpcore.storage.warehouse import Warehouse

    counted: list[np.ndarray] = []
    sql: list[list[str]] = []
    real = step.table_ball_counts

    def traced(query, table, attrs, lows, highs, queries, r, **kw):
        counted.append(np.array(queries, dtype=float))
        return real(query, table, attrs, lows, highs, queries, r, **kw)

    monkeypatch.setattr(step, "table_ball_counts", traced)
    for name in ("query", "query_df"):
        real_q = getattr(Warehouse, name)
        monkeypatch.setattr(Warehouse, name, lambda self, q, *a, real_q=real_q, **kw: (
            sql[-1].append(q) if sql else None, real_q(self, q, *a, **kw))[1])
    base = yaml.safe_load(small_spec_path.read_text())
    settings = Settings.from_env()
    ingested = None
    # (asked id, detector slots, what the detector chose): present, absent; two slots filled by one record or none
    cases = [("F000001", 0, []), ("F900000", 0, []), ("F000001", 2, ["F000003"]), ("F000001", 2, [])]
    for n, (rid, slots, chosen) in enumerate(cases):
        monkeypatch.setattr(step, "flagged_records", lambda *a, chosen=chosen: list(chosen))
        spec_dict = {**base, "release_id": "test-r1"}
        spec_dict["steps"] = {**base["steps"], "aiq": {**base["steps"]["aiq"], "enabled": True, "record_ids": [rid],
                                                       "points": [], "from_detector": slots, "epsilon": 0.1 + n / 100}}
        path = tmp_path / f"aiq{n}.yaml"
        path.write_text(yaml.safe_dump(spec_dict))
        spec = load_spec(path)
        if ingested is None:
            ingested = ingest_stage(spec, settings)
            validate_stage(spec, settings, ingested)
        sql.append([])
        out = step.aiq_step(spec, settings, ingested)
        assert out.tables["answers"]["query"].tolist() == [f"record:{rid}"]
    sql.append([])  # stop tracing
    assert [len(c) for c in counted] == [1, 1, 3, 3]  # one aggregate each, over as many points whoever is there
    assert sql[0] == sql[1] and sql[2] == sql[3]  # the same queries, present or absent, slots filled or not
    attrs = list(spec.steps.aiq.attributes or spec.public_schema.numeric)
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
    wh = Warehouse(settings.warehouse)
    cols = ", ".join(f'"{a}"' for a in attrs)
    rows = scale_by_bounds(wh.query_df(f"SELECT {cols} FROM {validated_table(spec, ingested)}").to_numpy(float),
                           lows, highs)
    is_record = [bool((rows == p).all(axis=1).any()) for p in (counted[1][0], counted[3][1], counted[3][2])]
    assert is_record == [True, True, True]  # the absent id's and the empty slots' points are records' points
    f3 = wh.query_df(f"SELECT {cols} FROM {validated_table(spec, ingested)} WHERE flight_id = 'F000003'")
    assert np.array_equal(counted[2][1:], np.repeat(scale_by_bounds(f3.to_numpy(float), lows, highs), 2, axis=0))
    diag = wh.query_df("SELECT ball_count, multiplicity FROM internal.aiq_diagnostics")
    assert diag["ball_count"].iloc[0] >= 1 and diag.iloc[1].tolist() == [0, 0]
    assert len(diag) == 1 + 1 + 2 + 1  # the stand-ins of unfilled slots are counted, then dropped



@pytest.fixture
def operations(monkeypatch):
    """Runs a PCOR search and returns (the operations it performed, whether its start search found a start).

    The operations are counted at the components (not by the samplers' own tally): contexts the start rule
    sent to the verifier, expansions (neighbour sets built), contexts sent to the verifier, utilities
    computed, exponential-mechanism draws and their candidates (padding draws included)."""
    import dpcore.mechanisms.pcor.samplers as S
    from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
    from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier

    ops: Counter = Counter()
    found: list[bool] = []
    real_verify, real_start = GrubbsVerifier.verify, S.start_context
    real_flip, real_util = ContextSpace.flip_all, ContextEvaluator.utility
    real_em, real_integers = NoiseSource.exponential_mechanism, NoiseSource.integers

    def verify(self, index, row, contexts):
        ops["queries"] += int(np.atleast_2d(contexts).shape[0])
        return real_verify(self, index, row, contexts)

    def start_context(evaluator, *a, **kw):
        before = ops["queries"]
        out = real_start(evaluator, *a, **kw)
        ops["start_contexts"] += ops["queries"] - before
        found.append(out is not None)
        return out

    def flip_all(self, context):
        ops["expansions"] += 1
        return real_flip(self, context)

    def utility(self, contexts, reference=None):
        ops["utilities"] += int(np.atleast_2d(contexts).shape[0])
        return real_util(self, contexts, reference)

    def integers(self, low, high, size=None):
        ops["uniform_draws"] += 1 if size is None else int(np.prod(size))
        return real_integers(self, low, high, size)

    def em(self, utilities, epsilon, sensitivity):
        ops["selections"] += 1
        ops["em_candidates"] += int(np.size(utilities))
        return real_em(self, utilities, epsilon, sensitivity)

    monkeypatch.setattr(GrubbsVerifier, "verify", verify)
    monkeypatch.setattr(S, "start_context", start_context)
    monkeypatch.setattr(ContextSpace, "flip_all", flip_all)
    monkeypatch.setattr(ContextEvaluator, "utility", utility)
    monkeypatch.setattr(NoiseSource, "exponential_mechanism", em)
    monkeypatch.setattr(NoiseSource, "integers", integers)

    def run(job, row):
        from dpcore.steps.pcor import compute_explanation

        ops.clear()
        found.clear()
        out = compute_explanation(job, row)
        assert len(found) == 1
        return dict(ops), found[0], out

    return run


@pytest.mark.parametrize("sampler,start", [("bfs", "cell"), ("bfs", "full"), ("dfs", "climb"),
                                           ("random_walk", "cell"), ("uniform", "cell")])
def test_an_outliers_search_does_the_same_work_present_or_absent(operations, monkeypatch, sampler, start):
    """V = (x, p, 100) is an outlier (its own cell is a valid start). Present (D holds V) and absent (D' = D
    without V: the step searches a stand-in drawn from D'), the search performs the same operations in the
    same numbers -- start contexts tested, expansions, verifier queries, utilities, selections and their
    candidates -- for every outcome of the stand-in's draw: an ordinary record (no valid context at all) or
    W (the other outlier, whose search goes on from a start). Before constant work an outlier's start search
    stopped at its own cell (1 context tested, against 16 for a record without a valid context) and a search
    without a start did nothing more."""
    import dpcore.steps.pcor as step

    mech = {**MECH, "sampler": sampler, "start": start}
    codes, values = _records(with_v=True)
    held, rows, _ = step._with_stand_ins(_index(codes, values), SPACE, None, "m", codes[-1:], values[-1:],
                                         np.array([0], np.int64), 1, 0, 0)
    present, v_found, out = operations(step.PcorJob(SPACE, held, "grubbs", {"alpha": 0.05}, mech), int(rows[0]))
    assert v_found and out["release"]["status"] == "released"
    assert present["start_contexts"] >= 16
    assert present["expansions" if sampler != "uniform" else "uniform_draws"] >= N_SAMPLES
    d_minus = _index(codes[:-1], values[:-1])
    kinds = set()
    for k, _ in _draws(d_minus):
        monkeypatch.setattr(step, "noise_source", lambda k=k: _Draw(k))
        held2, rows2, _ = step._with_stand_ins(d_minus, SPACE, None, "m", codes[:0], values[:0],
                                               np.array([-1], np.int64), 1, 0, 0)
        absent, stand_in_found, out = operations(step.PcorJob(SPACE, held2, "grubbs", {"alpha": 0.05}, mech),
                                                 int(rows2[0]))
        assert out["release"]["status"] == "no_valid_context"
        kinds.add(stand_in_found)
        assert absent == present, (k, stand_in_found)
    assert kinds == {True, False}  # both kinds of stand-in (an outlier, an ordinary record) were searched


@pytest.mark.parametrize("max_draws", [8, 100])  # fewer draws than the 16 contexts holding V (each draw
# verified), and more (every context verified once, the draws looked up)
def test_a_uniform_search_does_the_same_work_on_neighbouring_tables(operations, max_draws):
    """The uniform sampler (Algorithm 2) used to draw until it had n valid samples: its draws and verifier
    queries said how many of V's contexts are valid. V = (x, p, 100) on D; on the neighbour D + (x, p, 90) fewer
    of V's contexts are valid (the added record masks V in its own cell); an ordinary record
    (x, p, 11) has none. All three searches make the same draws, verifier queries, utilities and selections."""
    import dpcore.steps.pcor as step

    mech = {**MECH, "sampler": "uniform", "start": "cell", "max_uniform_draws": max_draws}
    codes, values = _records(with_v=True)
    seen, valid_counts = [], []
    tables = [(codes, values, len(values) - 1),
              (np.vstack([codes, [[0, 0]]]), np.append(values, 90.0), len(values) - 1),
              (codes, values, 0)]
    for c, v, row in tables:
        held, rows, _ = step._with_stand_ins(_index(c, v), SPACE, None, "m", c[row:row + 1], v[row:row + 1],
                                             np.array([0], np.int64), 1, 0, 0)
        job = step.PcorJob(SPACE, held, "grubbs", {"alpha": 0.05}, mech)
        ops, _, out = operations(job, int(rows[0]))
        seen.append(ops)
        from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
        from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier

        ev = ContextEvaluator(held, GrubbsVerifier(0.05), int(rows[0]), "population")
        valid_counts.append(int(ev.enumerate_valid()[1].sum()))
    assert valid_counts[0] > valid_counts[1] > valid_counts[2] == 0  # so the comparison can fail
    assert seen[0] == seen[1] == seen[2], seen
    assert seen[0]["uniform_draws"] >= max_draws and seen[0]["queries"] >= min(16, max_draws)


def test_lof_verifies_every_context_in_the_same_number_of_window_rounds():
    """LOF's fast path grows a window of values around V until it provably suffices: an outlier far out in the
    tail needed more rounds than an ordinary record (the verifier's own cost said which V it was). Every context
    now takes ``pad_rounds`` rounds (2), the extra ones discarded: the same count for an outlier V, an ordinary
    record (an absent id's stand-in is one) and V on a neighbouring table (one record added near V)."""
    from dpcore.mechanisms.pcor.verifiers import LOFVerifier

    d = 8
    space = ContextSpace.from_domains(["a", "b"], [[f"a{i}" for i in range(d)], [f"b{i}" for i in range(d)]])
    rng = np.random.default_rng(1)
    sizes = [400 if (a, b) == (0, 0) else 12 for a in range(d) for b in range(d)]
    codes = np.repeat(np.array([(a, b) for a in range(d) for b in range(d)], np.int32), sizes, axis=0)
    values = np.round(rng.gamma(1.0, 20.0, size=len(codes)))
    contexts = np.random.default_rng(3).integers(0, 2, size=(32, space.t)).astype(bool)

    def rounds(extra_values, v, pad):
        c = np.vstack([codes, np.zeros((len(extra_values), 2), np.int32)])
        x = np.append(values, extra_values)
        held = CellIndex.from_aggregates(space, c, x, np.ones(len(x), np.int64)).with_rows(
            np.zeros((1, 2), np.int32), np.array([v]))
        verifier = LOFVerifier(pad_rounds=pad)
        valid = verifier.verify(held, 0, contexts | space.cell_context(held.row_codes(0))[None, :])
        return verifier.last_rounds, int(valid.sum())

    cases = [([800.0], 800.0), ([20.0], 20.0), ([800.0, 790.0], 800.0)]  # outlier V, ordinary, V's neighbour
    unpadded = [rounds(x, v, 1) for x, v in cases]
    assert unpadded[0][1] > unpadded[1][1]  # V is an outlier in more contexts than the ordinary record
    assert sum(unpadded[0][0]) != sum(unpadded[1][0])  # one round per context was data-dependent
    padded = [rounds(x, v, 2)[0] for x, v in cases]
    assert padded[0] == padded[1] == padded[2] == [2] * 32
