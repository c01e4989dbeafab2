"""The pieces that keep `dpr spec check` and `dpr plan` light (issue 32, section 2) give what they replaced.

* :func:`dpcore.runtime.lazy_modules.lazy_module`: a stand-in that imports its module on first use only;
* :mod:`dpcore.explain.unit_memo`: the spec's unit check asks pint once per unit text;
* :func:`dpcore.mechanisms.neighbors.pairwise_ball_max` on few points: the KD-tree's counts without scipy;
* :func:`dpcore.steps.coco.coco_inputs` read with the csv module: pandas' reading of the groups file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_lazy_module_imports_on_first_attribute_only():
    code = (
        "import sys\n"
        "from dpcore.runtime.lazy_modules import lazy_module\n"
        "m = lazy_module('fractions')\n"
        "sys.modules.pop('fractions', None)\n"
        "m2 = lazy_module('fractions')\n"
        "before = 'fractions' in sys.modules\n"
        "f = m2.Fraction(1, 3)\n"
        "print(before, 'fractions' in sys.modules, f == m2.Fraction(2, 6), m2.Fraction is sys.modules['fractions'].Fraction)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["False", "True", "True", "True"]


def test_lazy_module_missing_module_names_it():
    from dpcore.runtime.lazy_modules import lazy_module

    m = lazy_module("no_such_module_dpr_test")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_dpr_test"):
        m.anything


def test_unit_memo_asks_pint_once_and_never_remembers_a_rejected_unit(tmp_path, monkeypatch):
    from dpcore.explain import unit_memo
    from dpcore.explain.units import UnitError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    asked = []
    import dpcore.explain.units as units

    real = units.check_unit
    monkeypatch.setattr(units, "check_unit", lambda t: (asked.append(t), real(t))[1])
    unit_memo.check_unit("mile")
    unit_memo.check_unit("mile")
    unit_memo.check_unit("1")  # dimensionless: never asked
    assert asked == ["mile"]
    assert json.loads(unit_memo.memo_path().read_text()) == ["mile"]
    for _ in range(2):
        with pytest.raises(UnitError, match="furlongz"):
            unit_memo.check_unit("furlongz")
    assert asked == ["mile", "furlongz", "furlongz"]
    assert json.loads(unit_memo.memo_path().read_text()) == ["mile"]


def test_unit_memo_is_per_pint_version_and_registry(tmp_path, monkeypatch):
    from dpcore.explain import unit_memo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    name = unit_memo.memo_path().name
    assert name.startswith("units-pint") and name.endswith(".json")
    from importlib.metadata import version

    assert version("pint") in name


def test_a_deleted_copy_of_pint_elsewhere_does_not_break_the_unit_registry(tmp_path):
    """pint's shared ``:auto:`` cache keys entries by content and stores the source file's path: a
    second installation of the same pint (another virtual environment), deleted afterwards, broke every
    registry build on the machine (CI, stop 52). The project's cache folder is one per pint install."""
    import shutil

    import pint

    copy = tmp_path / "other-env"
    shutil.copytree(Path(pint.__file__).parent, copy / "pint")
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    code = "import dpcore.explain.units as u; print(u.ureg('mile').units)"
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                           env={**env, "PYTHONPATH": f"{copy}:{ROOT}"})
    assert first.stdout.strip() == "mile"
    shutil.rmtree(copy)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert again.returncode == 0, again.stderr[-600:]
    assert again.stdout.strip() == "mile"


def test_spec_refuses_an_unknown_unit_with_a_memo(tmp_path, monkeypatch):
    import yaml

    from dpcore.release.spec import SpecError, load_spec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    load_spec(ROOT / "specs" / "demo.yaml")  # fills the memo
    spec["schema"]["numeric"]["distance"]["unit"] = "milez"
    for key in ("roster",):
        spec["dataset"][key]["file"] = str(ROOT / "specs" / spec["dataset"][key]["file"])
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="milez"):
        load_spec(path)


@pytest.mark.parametrize("seed", range(6))
def test_pairwise_ball_max_equals_the_kdtree(seed):
    from scipy.spatial import cKDTree

    from dpcore.mechanisms.neighbors import pairwise_ball_max

    rng = np.random.default_rng(seed)
    for _ in range(40):
        m, d = int(rng.integers(1, 200)), int(rng.integers(1, 9))
        P = rng.random((m, d))
        if seed % 2:
            P = np.round(P * 4) / 4  # points on a grid: many distances exactly r
        r = float(rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()]))
        assert pairwise_ball_max(P, r) == int(np.max(cKDTree(P).query_ball_point(P, r, return_length=True)))


def _old_coco_inputs(spec):
    """The groups file read as before (pandas), for comparison."""
    from dpcore.mechanisms.coco import Hierarchy, group_counts

    cfg = spec.steps.coco
    df = pd.read_csv(cfg.groups_file, dtype=str, keep_default_na=False, encoding="utf-8")
    gid = cfg.group_id or cfg.group_column
    paths = df[list(cfg.levels)].drop_duplicates().reset_index(drop=True)
    h = Hierarchy.from_leaf_paths(paths, list(cfg.levels))
    leaves = Hierarchy.node_ids(df[list(cfg.levels)], list(cfg.levels)).iloc[:, -1].to_numpy()
    gl = pd.Series(leaves, index=df[gid].to_numpy(), name="leaf")
    return h, gl, group_counts(gl, h)


def test_coco_inputs_read_without_pandas_equal_pandas_reading(tmp_path):
    from dpcore.release.spec import load_spec, parse_spec
    from dpcore.steps.coco import coco_inputs

    specs = [load_spec(ROOT / "specs" / "demo.yaml")]
    groups = pd.DataFrame({"g": [f'h {i}, "x"' for i in range(12)],
                           "region": ["North/East", "South", " West", "\"q"] * 3,
                           "city": [f"c{i % 5}" for i in range(12)]})
    groups.to_csv(tmp_path / "groups.csv", index=False)
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "groups.csv").read_bytes() + b"\n\n")
    for f in ("groups.csv", "bom.csv"):
        specs.append(parse_spec({
            "release_id": "r1",
            "dataset": {"name": "unit", "source": {"kind": "csv", "path": str(tmp_path / "x.csv")}, "record_id": "id"},
            "schema": {"categorical": {"g": {"domain": groups["g"].tolist()}}},
            "budget": {"epsilon": 1.0},
            "steps": {"coco": {"enabled": True, "group_column": "g", "groups_file": str(tmp_path / f),
                               "levels": ["region", "city"], "max_group_size": 5}},
        }))
    for spec in specs:
        new = coco_inputs(spec)
        h, gl, counts = _old_coco_inputs(spec)
        assert new.hierarchy.edges == h.edges
        pd.testing.assert_series_equal(new.group_leaf, gl, check_dtype=False)
        assert new.group_counts == counts


def test_coco_groups_file_with_a_short_row_is_refused(tmp_path):
    from dpcore.release.spec import parse_spec
    from dpcore.steps.coco import coco_inputs
    from dpcore.steps.common import StepInputError

    (tmp_path / "groups.csv").write_text("g,region\na,N\nb\n")
    spec = parse_spec({
        "release_id": "r1",
        "dataset": {"name": "unit", "source": {"kind": "csv", "path": str(tmp_path / "x.csv")}, "record_id": "id"},
        "schema": {"categorical": {"g": {"domain": ["a", "b"]}}},
        "budget": {"epsilon": 1.0},
        "steps": {"coco": {"enabled": True, "group_column": "g", "groups_file": str(tmp_path / "groups.csv"),
                           "levels": ["region"], "max_group_size": 5}},
    })
    with pytest.raises(StepInputError, match="not a readable UTF-8 CSV.*data row 2 has 1 cells"):
        coco_inputs(spec)
