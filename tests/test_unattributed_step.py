"""Issue 17 in the product: the ``unattributed`` step, its flow and the pipeline wiring.

One charge per release (stored: the same key returns the same vector), a sorted non-negative integer vector of
length G (the group column's public domain), public accuracy columns, the rank/size plot, the spec's method list
equal to the mechanism's, ``auto`` resolved from public parameters, clear errors before any charge.
"""
from __future__ import annotations

from pathlib import Path
from typing import get_args

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.mechanisms.unattributed import METHODS, choose_method
from dpcore.storage.settings import Settings
from dpcore.release.spec import UnattributedMethod, load_spec
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]


def _charges():
    ch = PrivacyLedger(Warehouse(Settings.from_env().warehouse)).charges("nycflights13")
    return ch[ch["step"] == "unattributed"]


@pytest.fixture
def un_spec(small_spec_path: Path, tmp_path: Path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["unattributed"] = {"enabled": True, "group_column": "tailnum", "max_group_size": 730,
                                     "epsilon": 0.5, "method": "hg_l1"}
    # the detector and its owner-only rules are not what this file tests, and charge nothing; off, each release
    # here costs about half the CPU (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False

    def write(**kw) -> Path:
        spec["steps"]["unattributed"].update(kw)
        path = tmp_path / f"un{len(list(tmp_path.glob('un*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


def test_spec_methods_are_the_mechanism_methods_plus_auto():
    assert set(get_args(UnattributedMethod)) == set(METHODS) | {"auto"}


def test_bad_public_inputs_are_refused_by_name(un_spec):
    with pytest.raises(ValueError, match="steps.unattributed.group_column 'distance' must be a categorical"):
        load_spec(un_spec(group_column="distance"))
    with pytest.raises(ValueError, match="enabled unattributed needs group_column"):
        load_spec(un_spec(group_column=""))


@pytest.mark.usefixtures("prefect_harness")
def test_pipeline_releases_sorted_sizes_once_with_accuracy_and_plot(dpr_home, un_spec):
    from flows.release_pipeline import release_pipeline

    path = un_spec()
    out = release_pipeline(spec_path=str(path))
    ch = _charges()
    assert len(ch) == 1 and ch.iloc[0]["notion"] == "dp" and np.isclose(ch.iloc[0]["stated_epsilon"], 0.5)
    assert np.isclose(ch.iloc[0]["epsilon"], 1.0)  # add/remove rows, charged twice against the replace-one cap
    bundle = Path(out["bundle"])
    t = pd.read_csv(bundle / "tables" / "unattributed__sorted_sizes.csv")
    spec = load_spec(path)
    G = len(spec.public_schema.categorical["tailnum"].domain_strings)
    assert len(t) == G and list(t.columns) == ["size", "ci_level", "ci_half_width"]
    s = t["size"].to_numpy()
    assert np.issubdtype(s.dtype, np.integer) and (s >= 0).all() and (s <= 730).all() and (np.diff(s) <= 0).all()
    assert (t["ci_level"] == 0.95).all() and t["ci_half_width"].notna().all()  # hg_l1: a per-entry bound
    report = (bundle / "report.md").read_text()
    assert "Group sizes, largest first" in report and "every released size is within" in report
    assert (bundle / "unattributed.png").is_file()
    # the same release id again: nothing new charged, the same vector
    release_pipeline(spec_path=str(path))
    assert len(_charges()) == 1


@pytest.mark.usefixtures("prefect_harness")
def test_operator_flow_auto_uses_public_parameters_and_stores_the_release(dpr_home, un_spec):
    from flows.unattributed_publish import unattributed_publish

    path = un_spec()
    a = unattributed_publish(spec_path=str(path), epsilon=2.0, method="auto", metric="l1")
    b = unattributed_publish(spec_path=str(path), epsilon=2.0, method="auto", metric="l1")
    assert a == b and len(_charges()) == 1
    G = len(load_spec(path).public_schema.categorical["tailnum"].domain_strings)
    chosen = choose_method(2.0, G, 730, "l1")
    row = _charges().iloc[0]
    assert chosen in row["mechanism"].replace("-", "_")
    assert a["groups"] == G and a["largest"] == sorted(a["largest"], reverse=True)


def test_group_sizes_are_one_sql_aggregate_over_the_public_list(dpr_home, un_spec, small_flights_csv):
    """The step's internal input equals a pandas count over the validated rows, zero for absent groups, clamped."""
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.steps.unattributed import group_sizes

    spec = load_spec(un_spec(max_group_size=5))
    settings = Settings.from_env()
    ingested = ingest_stage(spec, settings)
    validate_stage(spec, settings, ingested)
    sizes = group_sizes(spec, settings, ingested)
    groups = spec.public_schema.categorical["tailnum"].domain_strings
    raw = pd.read_csv(small_flights_csv, dtype=str)
    wh = Warehouse(settings.warehouse)
    from dpcore.steps.common import validated_table
    valid = wh.query_df(f"SELECT tailnum FROM {validated_table(spec, ingested)}")["tailnum"].dropna()
    want = valid.value_counts().reindex(groups, fill_value=0).clip(upper=5).to_numpy()
    assert np.array_equal(sizes, want) and len(sizes) == len(groups) and len(raw) >= len(valid)
