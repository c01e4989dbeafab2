"""Issue 28, section 6: a typed (Parquet) group column never makes ``unattributed`` abort after its charge.

Validation reads every cell as text (a Parquet ``DOUBLE`` ``1.0`` is the text
``1``) and types the validated categorical column from its public domain
alone (``BIGINT`` for an all-integer domain, else ``VARCHAR``), so each
validated group reads exactly as a domain text. The step's pre-charge check
(:func:`dpcore.steps.unattributed.check_group_column`, also run by the
validate stage, before the release's first charge) refuses a validated column
of any other type, naming the column and types only, and nothing is charged.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.run.cost_plan import plan_release
from dpcore.budget.ledger import PrivacyLedger
from dpcore.run.pipeline import ingest_stage, validate_stage
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.steps.common import StepInputError
from dpcore.steps.unattributed import unattributed_step
from dpcore.storage.warehouse import Warehouse
from owner_registration import register_spec

SIZES = {1: 30, 2: 12, 3: 5}  # rows per group; group 4 of the domain has none


def _spec(tmp_path: Path, domain: list, name: str) -> Path:
    groups = np.concatenate([np.full(n, float(g)) for g, n in SIZES.items()])
    df = pd.DataFrame({"rid": [f"R{i:03d}" for i in range(len(groups))], "grp": groups,
                       "v": np.arange(len(groups), dtype=float)})
    data = tmp_path / f"{name}.parquet"
    df.to_parquet(data, index=False)
    assert pd.read_parquet(data)["grp"].dtype == np.float64  # a DOUBLE column: 1.0, 2.0, 3.0
    spec = {
        "release_id": f"typed-{name}",
        "dataset": {"name": f"typed_{name}", "source": {"kind": "parquet", "path": str(data)}, "record_id": "rid"},
        "schema": {"categorical": {"grp": {"domain": domain}}, "numeric": {"v": {"min": 0, "max": 1000}}},
        "budget": {"epsilon": 5.0, "delta": 1.0e-6},
        "steps": {
            # no row is rejected; on 47 rows the record counts' noise alone can pass a 0.5 gate (a flaky stop)
            "validation": {"max_rejected_fraction": 1.0},
            "record_counts": {"enabled": True},
            "unattributed": {"enabled": True, "group_column": "grp", "max_group_size": 100, "epsilon": 1.0,
                             "method": "hg_l1"},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    register_spec(path)  # the data owner, before any run
    return path


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("domain", [[1, 2, 3, 4], ["1", "2", "3", "4"]], ids=["integer-domain", "text-domain"])
def test_a_parquet_double_group_column_releases_as_planned(dpr_home, tmp_path, domain):
    from flows.release_pipeline import release_pipeline

    path = _spec(tmp_path, domain, "int" if isinstance(domain[0], int) else "text")
    plan = plan_release(load_spec(path))
    out = release_pipeline(spec_path=str(path))
    bundle = Path(out["bundle"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert sorted(r["step"] for r in manifest["releases"]) == ["record_counts", "unattributed"]
    assert manifest["budget"]["spent_by_this_release"]["epsilon"] == pytest.approx(float(plan.total.epsilon))
    sizes = pd.read_csv(bundle / "tables" / "unattributed__sorted_sizes.csv")
    assert len(sizes) == len(domain)  # G from the public domain; every row counted in a group of it
    # the validated column has its domain's type, whatever the Parquet column's
    wh = Warehouse(Settings.from_env().warehouse)
    types = {t for (t,) in wh.query("SELECT data_type FROM information_schema.columns WHERE "
                                   "table_schema = 'validated' AND column_name = 'grp'")}
    assert types == ({"BIGINT"} if isinstance(domain[0], int) else {"VARCHAR"})


def test_a_validated_group_column_of_another_type_is_refused_before_any_charge(dpr_home, tmp_path):
    spec = load_spec(_spec(tmp_path, [1, 2, 3, 4], "altered"))
    settings = Settings.from_env()
    ingested = ingest_stage(spec, settings)
    done = validate_stage(spec, settings, ingested)
    wh = Warehouse(settings.warehouse)
    # a warehouse written by other code: the group column as DOUBLE reads "1.0", not the domain's "1"
    wh.run(lambda con: con.execute(f'ALTER TABLE validated."{done.table}" ALTER grp TYPE DOUBLE'))
    message = r"steps\.unattributed\.group_column 'grp': the validated table's column is DOUBLE, not BIGINT"
    with pytest.raises(StepInputError, match=message) as err:
        validate_stage(spec, settings, ingested)  # the release's check, before record_counts charges
    assert "Nothing was charged" in str(err.value) and "1.0" not in str(err.value)
    with pytest.raises(StepInputError, match=message):
        unattributed_step(spec, settings, ingested)  # and the step's own, before its charge
    assert PrivacyLedger(wh).charges(spec.dataset.name).empty
