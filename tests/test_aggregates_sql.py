"""Issue 21, aggregates: coco group sizes from one SQL aggregate and the rules step in bounded memory give the
results of the in-memory path (today's code, rebuilt here as the reference), on the demo sample and on random
tables with awkward chunk sizes (1, a prime, one chunk)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.explain import RuleMiner
from dpcore.mechanisms.coco import group_sizes_by_leaf, group_sizes_from_counts
from dpcore.release.spec import load_spec
from dpcore.steps.common import group_item_counts, load_columns, validated_table
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]

def _same_sizes(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


# ----------------------------------------------------------------------------- coco: counts per group
@pytest.mark.parametrize("seed", range(6))
def test_group_sizes_from_counts_equal_the_per_item_path(seed):
    """Random public lists (absent groups, groups over K, several leaves, repeated count rows) give the sizes of
    group_sizes_by_leaf over the items themselves."""
    rng = np.random.default_rng(seed)
    G = int(rng.integers(1, 60))
    groups = np.array([f"g{i}" for i in range(G)], dtype=object)
    leaves = rng.choice([f"leaf{j}" for j in range(int(rng.integers(1, 6)))], size=G)
    group_leaf = pd.Series(leaves, index=groups)
    K = int(rng.integers(1, 12))
    items = rng.choice(groups, size=int(rng.integers(0, 400)), p=rng.dirichlet(np.full(G, 0.3)))
    want = group_sizes_by_leaf(items, group_leaf, K)
    vals, counts = np.unique(items.astype(str), return_counts=True) if len(items) else (np.array([]), np.array([], int))
    got = group_sizes_from_counts(vals.astype(object), counts.astype(np.int64), group_leaf, K)
    assert _same_sizes(got, want)
    # the same group in two count rows is added up (e.g. two text forms merged upstream)
    if len(vals):
        split = np.concatenate([counts // 2, counts - counts // 2])
        got2 = group_sizes_from_counts(np.concatenate([vals, vals]).astype(object), split, group_leaf, K)
        assert _same_sizes(got2, want)


def test_group_sizes_from_counts_refuses_what_the_item_path_refuses():
    group_leaf = pd.Series(["a", "b"], index=["g1", "g2"])
    with pytest.raises(ValueError) as item_err:
        group_sizes_by_leaf(np.array(["g1", "zz"]), group_leaf, 5)
    with pytest.raises(ValueError) as count_err:
        group_sizes_from_counts(np.array(["g1", "zz"], dtype=object), np.array([3, 1]), group_leaf, 5)
    assert str(count_err.value) == str(item_err.value) and "zz" not in str(count_err.value)
    with pytest.raises(ValueError, match="K"):
        group_sizes_from_counts(np.array(["g1"], dtype=object), np.array([1]), group_leaf, 0)
    with pytest.raises(ValueError, match="counts must hold one integer per entry"):
        group_sizes_from_counts(np.array(["g1"], dtype=object), np.array([1.5]), group_leaf, 5)
    with pytest.raises(ValueError, match="counts must be >= 0"):
        group_sizes_from_counts(np.array(["g1"], dtype=object), np.array([-1]), group_leaf, 5)


@pytest.mark.parametrize("seed", range(4))
def test_sql_group_counts_on_random_tables_equal_pandas(tmp_path, seed):
    """group_item_counts (one GROUP BY) then the public mapping equals today's path: every row loaded, nulls
    dropped, values as text, counted per item."""
    rng = np.random.default_rng(100 + seed)
    G = int(rng.integers(2, 40))
    groups = [f"T{i:03d}" for i in range(G)]
    group_leaf = pd.Series(rng.choice(["x", "y", "z"], size=G), index=groups)
    n = int(rng.integers(1, 3000))
    col = pd.Series(rng.choice(groups[: max(1, G - 3)], size=n), dtype=object)  # the last groups stay empty
    col[rng.random(n) < 0.1] = None
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("validated", "t", pd.DataFrame({"_row": np.arange(n), "grp col": col}))
    K = int(rng.integers(1, 200))
    counts = group_item_counts(wh, 'validated."t"', "grp col")
    got = group_sizes_from_counts(counts["g"].to_numpy(dtype=object), counts["n"].to_numpy(), group_leaf, K)
    items = wh.query_df('SELECT "grp col" FROM validated."t" ORDER BY _row')["grp col"]
    want = group_sizes_by_leaf(items[items.notna()].astype(str).to_numpy(), group_leaf, K)
    assert _same_sizes(got, want)


@pytest.fixture
def coco_small(small_spec_path, tmp_path, dpr_home, monkeypatch):
    """The demo sample, ingested and validated, with the coco step enabled (demo method and K)."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings

    raw = yaml.safe_load(small_spec_path.read_text())
    raw["steps"]["coco"].update({"enabled": True, "method": "bottom_up_hg", "epsilon_per_level": 1.5,
                                 "max_group_size": 3})
    path = tmp_path / "coco.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = load_spec(path)
    settings = Settings.from_env()
    ingested = ingest_stage(spec, settings)
    validate_stage(spec, settings, ingested)
    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "7")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    return spec, settings, ingested


def test_coco_sizes_and_seeded_release_equal_the_in_memory_path(coco_small):
    """measure_coco's sizes (SQL aggregate) equal today's (every row's group in pandas), and its stored noisy
    measurements equal those the mechanism draws from today's sizes with the same seeded noise."""
    from dpcore.noise import NoiseSource
    from dpcore.steps.coco import check_coco, measure_coco

    spec, settings, ingested = coco_small
    cfg = spec.steps.coco
    inputs, mech = check_coco(spec)
    items = load_columns(Warehouse(settings.warehouse), spec, ingested, [cfg.group_column])[cfg.group_column]
    today = group_sizes_by_leaf(items[items.notna()].astype(str).to_numpy(), inputs.group_leaf, cfg.max_group_size)
    measured = measure_coco(spec, settings, ingested)
    assert _same_sizes(measured.sizes, today)
    assert max(int(v.max()) for v in today.values() if len(v)) == cfg.max_group_size  # clamping is exercised
    noise = NoiseSource(seed=7)
    for level in mech.levels_measured(inputs.hierarchy):
        assert measured.measurements[level] == mech.measure_level(today, inputs.hierarchy, level, noise)


# ----------------------------------------------------------------------------- rules
@pytest.fixture(scope="module")
def detected(small_spec_path_module):
    """The demo sample, ingested, validated and detected (the detector's labels in internal.detect_scores)."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.steps.detect import detection_frame, fit_one, store_detection, templates_of

    path, home = small_spec_path_module
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPR_HOME", str(home))
        mp.delenv("DPR_WAREHOUSE", raising=False)
        mp.delenv("DPR_BUNDLES", raising=False)
        settings = Settings.from_env()
    from owner_registration import register_spec

    register_spec(path, settings)  # the data owner registers the name in this module's home
    spec = load_spec(path)
    ingested = ingest_stage(spec, settings)
    validate_stage(spec, settings, ingested)
    df = detection_frame(spec, settings, ingested)
    fits = [fit_one(df, tp, spec) for tp in templates_of(spec)]
    store_detection(spec, settings, ingested, df[spec.dataset.record_id].to_numpy(), fits)
    return spec, settings, ingested


@pytest.fixture(scope="module")
def small_spec_path_module(tmp_path_factory, small_flights_csv):
    """The demo spec on the small flights CSV (as tests/conftest.py's small_spec_path), for module fixtures."""
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(small_flights_csv)}
    spec["release_id"] = "test-r1"
    for step in ("aiq", "coco", "outlier_counts", "pcor", "unattributed"):
        spec["steps"].setdefault(step, {})["enabled"] = False
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.5
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = fleet
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    spec["dataset"].pop("roster", None)
    folder = tmp_path_factory.mktemp("rules")
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path, folder / "home"


def _reference(spec, settings, ingested):
    """Today's in-memory inputs: every validated row (input order) and each template's labels by a pandas reindex."""
    from dpcore.steps.rules import rules_inputs
    from dpcore.validation import validated_table_name

    chosen, units, categorical = rules_inputs(spec)
    wh = Warehouse(settings.warehouse)
    rid = spec.dataset.record_id
    frame = load_columns(wh, spec, ingested, [*units, *categorical])
    suffix = validated_table_name(ingested, spec)
    scores = wh.query_df(f'SELECT v."{rid}", s.template, s.label FROM internal."detect_scores__{suffix}" s '
                         f'JOIN validated."{suffix}" v USING (_row)')
    labels = {t: scores[scores["template"] == t].set_index(rid)["label"].reindex(frame[rid]).fillna(0)
              .to_numpy(dtype=bool) for t in chosen}
    return chosen, units, categorical, frame, labels


def _stored(settings) -> pd.DataFrame:
    return Warehouse(settings.warehouse).query_df("SELECT * FROM internal.outlier_rules ORDER BY template, rank")


COLUMNS = ["template", "rank", "rule", "precision", "recall", "f1", "support", "n_flagged"]


@pytest.mark.parametrize("chunk_rows", [None, 997, 10**7])
def test_rules_on_a_table_under_sample_rows_equal_the_in_memory_search(detected, chunk_rows):
    """Whole-table mining (the demo sample is under sample_rows): the rules, their order and their figures are
    today's in-memory RuleMiner's, whatever the chunk size of the exact counts (default, a prime, one chunk)."""
    from dpcore.steps.rules import mine_rules

    spec, settings, ingested = detected
    chosen, units, categorical, frame, labels = _reference(spec, settings, ingested)
    assert len(frame) <= spec.steps.rules.sample_rows
    mine_rules(spec, settings, ingested, chunk_rows=chunk_rows)
    got = _stored(settings)
    want = []
    for t in chosen:
        miner = RuleMiner(max_depth=spec.steps.rules.max_depth, max_rules=spec.steps.rules.max_rules).fit(
            frame[[*units, *categorical]], labels[t], units=units, categorical=categorical)
        want += [{"template": t, "rank": k, "rule": r.text, "precision": r.precision, "recall": r.recall,
                  "f1": r.f1, "support": r.support, "n_flagged": int(labels[t].sum())}
                 for k, r in enumerate(miner.rules_, start=1)]
    want = pd.DataFrame(want).sort_values(["template", "rank"]).reset_index(drop=True)
    assert len(want) > 0
    pd.testing.assert_frame_equal(got[COLUMNS], want[COLUMNS], check_dtype=False, rtol=0, atol=0)
    assert got["note"].isna().all()
    assert json.loads(got["params"][0])["sample_rows"] == spec.steps.rules.sample_rows


@pytest.mark.parametrize("path", ["drawn", "numbered"])
def test_rules_on_a_sample_carry_exact_figures_over_every_row(detected, monkeypatch, path):
    """A table larger than sample_rows: the rules are the miner's on the uniform sample, and every stored
    precision, recall, F1 and support is a brute-force count over all rows, not the sample's; ranks follow the
    exact F1. The sample is drawn from the row numbers (``drawn``: sample_row_numbers, no sort of the table),
    or, when that draw would not fit the memory, the rows at sample_positions in row order (``numbered``)."""
    from dpcore.steps import rules
    from dpcore.storage import row_sample
    from dpcore.steps.rules import SAMPLE_SEED, mine_rules, sample_positions

    spec, settings, ingested = detected
    chosen, units, categorical, frame, labels = _reference(spec, settings, ingested)
    m = 700
    table = rules.validated_table(spec, ingested)
    wh = Warehouse(settings.warehouse)
    row = wh.query_df(f'SELECT "_row" FROM {table} ORDER BY "_row"')["_row"].to_numpy()
    assert len(row) == len(frame) and row[-1] - row[0] + 1 > len(row)  # rejected rows leave gaps in the numbers
    if path == "drawn":
        drawn = wh.run(lambda con: row_sample.sample_row_numbers(con, table, len(row), int(row[0]), int(row[-1]), m,
                                                                 SAMPLE_SEED, max_draw=10**7))
        pos = np.flatnonzero(np.isin(row, drawn))
    else:
        monkeypatch.setattr(row_sample, "BYTES_PER_DRAWN", 10**12)  # no draw fits: the rows are numbered
        pos = sample_positions(len(frame), m)
    assert pos is not None and len(pos) == m and len(np.unique(pos)) == m
    mine_rules(spec, settings, ingested, sample_rows=m, chunk_rows=311)
    got = _stored(settings)
    assert (got["note"].str.contains("uniform random sample")).all()
    for t in chosen:
        y = labels[t]
        sample = frame.iloc[pos].reset_index(drop=True)
        miner = RuleMiner(max_depth=2, max_rules=10).fit(sample[[*units, *categorical]], y[pos], units=units,
                                                         categorical=categorical)
        brute = []
        for r in miner.rules_:
            cov = r.covers(frame)
            tp, sup, npos = int((cov & y).sum()), int(cov.sum()), int(y.sum())
            brute.append({"rule": r.text, "precision": tp / sup, "recall": tp / npos, "f1": 2.0 * tp / (sup + npos),
                          "support": sup, "n_flagged": npos})
        brute = pd.DataFrame(brute).sort_values("f1", ascending=False, kind="stable").reset_index(drop=True)
        mine = got[got["template"] == t].reset_index(drop=True)
        assert len(mine) == len(brute) > 0
        assert mine["rank"].tolist() == list(range(1, len(mine) + 1))
        pd.testing.assert_frame_equal(mine[brute.columns.tolist()], brute, check_dtype=False, rtol=0, atol=0)
        sample_f1 = sorted((r.f1 for r in miner.rules_), reverse=True)
        assert mine["f1"].tolist() != sample_f1  # the figures are the table's, not the sample's


def test_rules_read_the_labels_beside_the_rows_and_join_them_only_when_out_of_step(detected, monkeypatch):
    """The scores are stored in the validated rows' order, so the labels are read side by side (positional);
    scores stored in another order make the positional query refuse (its row check) and the step joins them:
    the same rules and figures either way, on a sample (exact counts) as on the whole table."""
    from dpcore.steps import rules
    from dpcore.validation import validated_table_name

    spec, settings, ingested = detected
    wh = Warehouse(settings.warehouse)
    scores = f'internal."detect_scores__{validated_table_name(ingested, spec)}"'
    seen = []
    real = rules._out_of_step
    monkeypatch.setattr(rules, "_out_of_step", lambda exc: seen.append(str(exc)) or real(exc))
    got = {}
    wh.run(lambda con: con.execute(f"CREATE TABLE internal._kept_scores AS SELECT * FROM {scores}"))
    try:
        for order in ("stored", "reversed"):
            if order == "reversed":
                wh.run(lambda con: con.execute(f"CREATE OR REPLACE TABLE {scores} AS SELECT * FROM "
                                               "internal._kept_scores ORDER BY _row DESC"))
            for m in (700, None):
                seen.clear()
                rules.mine_rules(spec, settings, ingested, sample_rows=m, chunk_rows=997)
                got[order, m] = _stored(settings)[COLUMNS + ["note"]]
                assert (len(seen) == 1 and rules.OUT_OF_STEP in seen[0]) if order == "reversed" else not seen
    finally:
        wh.run(lambda con: con.execute(f"CREATE OR REPLACE TABLE {scores} AS SELECT * FROM internal._kept_scores; "
                                       "DROP TABLE internal._kept_scores"))
    for m in (700, None):
        assert len(got["stored", m]) > 0
        pd.testing.assert_frame_equal(got["stored", m], got["reversed", m], check_exact=True)


def test_rule_counts_on_a_random_table_for_awkward_chunk_sizes(tmp_path):
    """rule_counts (exported chunks, mapper) equals brute-force counts for chunk sizes 1, a prime and one chunk,
    also through a mapper that pickles the function and every item (as a Dask worker would)."""
    from dpcore.explain.trees import combine, leaf
    from dpcore.explain import Rule
    from dpcore.steps.rules import rule_counts, rule_spec

    rng = np.random.default_rng(5)
    n = 157
    df = pd.DataFrame({"_row": np.arange(n), "d": rng.integers(0, 500, n).astype(float),
                       "t": rng.integers(1, 60, n).astype(float), "c": rng.choice(["A", "B", None], n),
                       "_dpr_label_0": rng.random(n) < 0.2, "_dpr_label_1": rng.random(n) < 0.5})
    df.loc[rng.random(n) < 0.1, "t"] = np.nan
    wh = Warehouse(tmp_path / "w.duckdb")
    wh.write_df("validated", "t", df)
    units = {"d": "mile", "t": "minute"}
    speed = combine("/", leaf("d", "mile"), leaf("t", "minute"))
    total = combine("+", leaf("t", "minute"), leaf("t", "minute"))
    rules = [("_dpr_label_0", Rule(tree=speed, lower=5.0)), ("_dpr_label_1", Rule(tree=speed, upper=600.0,
                                                                                 column="c", values=("A",))),
             ("_dpr_label_0", Rule(column="c", values=("A", "B"))), ("_dpr_label_1", Rule(tree=total, lower=20.0,
                                                                                         upper=80.0))]
    want = np.array([[int((r.covers(df) & df[lab].to_numpy()).sum()), int(r.covers(df).sum())] for lab, r in rules])
    assert (want[:, 0] > 0).all() and (want[:, 1] < n).all()
    specs = [(lab, rule_spec(r)) for lab, r in rules]

    def pickling(fn, items):
        fn = pickle.loads(pickle.dumps(fn))
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(x))))) for x in items]

    for rows in (1, 13, n, 10 * n):
        for mapper in ([None, pickling] if rows == 13 else [None]):
            kw = {} if mapper is None else {"mapper": mapper}
            got = rule_counts(wh, 'SELECT * FROM validated."t"', [], units, specs, rows=rows, **kw)
            assert np.array_equal(got, want), (rows, mapper)


def test_mine_rules_refuses_bad_sample_and_chunk_sizes(detected):
    from dpcore.steps.common import StepInputError
    from dpcore.steps.rules import mine_rules

    spec, settings, ingested = detected
    with pytest.raises(StepInputError, match="steps.rules.sample_rows must be an integer >= 1"):
        mine_rules(spec, settings, ingested, sample_rows=0)
    with pytest.raises(StepInputError, match="chunk_rows must be an integer >= 1"):
        mine_rules(spec, settings, ingested, chunk_rows=0)


def test_spec_documents_and_bounds_sample_rows(small_spec_path, tmp_path):
    from dpcore.release.spec import RulesSpec, SpecError

    assert RulesSpec().sample_rows >= 336_776  # the demo (336,776 flights) is mined whole: its rules are unchanged
    assert "uniform random sample" in RulesSpec.model_fields["sample_rows"].description
    raw = yaml.safe_load(small_spec_path.read_text())
    raw["steps"]["rules"]["sample_rows"] = 5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match="sample_rows"):
        load_spec(path)
