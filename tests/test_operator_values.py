"""Issue 32 §1: operator flows and ``dpr`` operator commands take every unset value from the spec they run on.

An owner's spec with values the demo does not have (K = 30,000, other epsilons, radii, methods): with no
override, each flow's effective values are the spec's (the ledger's stored parameters and charges say so,
and the "values used" line says where each came from); a value that spends budget or describes the data
and that neither the spec nor the request sets is refused before any charge (the ledger is unchanged);
an operator run without a spec is refused with a hint. The CLI side is tested through the installed ``dpr``
in tests/test_dpr_operator_values.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.run.operator_values import OPERATOR_PARAMS, MissingOperatorValueError, operator_values, require_spec_path
from dpcore.storage.settings import Settings
from dpcore.release.spec import SpecError, load_spec
from dpcore.storage.warehouse import Warehouse

#: Values an owner's spec writes, none of them the demo's (nor the flows' old defaults).
OWNER = {
    "aiq": {"mechanism": "dp", "epsilon": 0.07, "beta": 3, "r": 0.05, "k": 2},
    "pcor": {"epsilon": 0.15, "sampler": "random_walk", "n_samples": 7, "verifier": "grubbs", "utility": "overlap",
             "start": "cell", "final_share": 0.4},
    "outlier_counts": {"k": 4, "r": 0.01, "h": 1, "subspace_dim": 1, "epsilon_total": 0.9, "method": "global_laplace",
                       "delta_count": 1.0e-7},
    "coco": {"epsilon_per_level": 0.35, "max_group_size": 2000, "method": "hg_l2"},
    "unattributed": {"epsilon": 0.3, "max_group_size": 30000, "method": "hg_l2", "metric": "l1"},
    "rules": {"max_depth": 1, "max_rules": 3},
}
#: Per flow: the values that no default may stand in for (refused when the spec and the request leave them out).
REQUIRED = {
    "aiq_query": {"epsilon", "beta", "r"},
    "explain_outlier": {"epsilon"},
    "outlier_counts": {"k", "r", "h"},
    "coco_publish": {"epsilon_per_level", "max_group_size"},
    "unattributed_publish": {"epsilon", "max_group_size"},
    "explain_rules": set(),
}


def owner_spec(base: Path, out: Path, drop: dict[str, list[str]] | None = None) -> Path:
    """The small demo spec with the owner's values written in, minus the keys in ``drop`` (step -> keys)."""
    spec = yaml.safe_load(base.read_text())
    for step, values in OWNER.items():
        section = spec["steps"].setdefault(step, {})
        section.update(values)
        if step == "outlier_counts":
            for k in ("epsilon_select", "epsilon_count"):
                section.pop(k, None)
    for step, keys in (drop or {}).items():
        for k in keys:
            spec["steps"][step].pop(k, None)
    out.write_text(yaml.safe_dump(spec))
    return out


def _step(flow: str) -> str:
    return OPERATOR_PARAMS[flow][0]


# ----------------------------------------------------------------------------- resolution (no Prefect)
@pytest.mark.parametrize("flow", sorted(OPERATOR_PARAMS))
def test_unset_values_come_from_the_owners_spec(flow, small_spec_path, tmp_path):
    path = owner_spec(small_spec_path, tmp_path / "owner.yaml")
    v = operator_values(flow, str(path), load_spec(path), {})
    written = OWNER[_step(flow)]
    for u in v.used:
        if u.key in written:
            assert (u.value, u.source) == (written[u.key], "spec"), u
        else:
            assert u.source in ("spec", "spec default"), u
    assert {u.key for u in v.used if u.source == "spec"} >= set(written) & {u.key for u in v.used}
    line = v.line()
    assert line.startswith(f"values used (steps.{_step(flow)} of {path}): ")
    for u in v.used:
        assert f"{u.name}=" in line and f"({u.source})" in line


@pytest.mark.parametrize("flow", sorted(f for f in OPERATOR_PARAMS if REQUIRED[f]))
def test_a_value_set_nowhere_is_refused_naming_the_parameter_and_the_spec_key(flow, small_spec_path, tmp_path):
    step = _step(flow)
    path = owner_spec(small_spec_path, tmp_path / "owner.yaml", drop={step: sorted(REQUIRED[flow])})
    with pytest.raises(MissingOperatorValueError) as err:
        operator_values(flow, str(path), load_spec(path), {})
    msg = str(err.value)
    for name in REQUIRED[flow]:
        assert f"steps.{step}.{name}" in msg and f"--{name.replace('_', '-')}" in msg, msg
    assert "Nothing was read or charged" in msg
    # the request supplies them: accepted, marked as the request's
    given = {name: OWNER[step][name] for name in REQUIRED[flow]}
    v = operator_values(flow, str(path), load_spec(path), given)
    assert all(v.source(n) == "request" and v[n] == given[n] for n in given)


def test_method_choices_fall_back_to_the_spec_formats_default_and_say_so(small_spec_path, tmp_path):
    path = owner_spec(small_spec_path, tmp_path / "owner.yaml", drop={"coco": ["method"], "aiq": ["mechanism", "k"]})
    coco = operator_values("coco_publish", str(path), load_spec(path), {})
    assert (coco["method"], coco.source("method")) == ("top_down_hc", "spec default")
    assert (coco["max_group_size"], coco.source("max_group_size")) == (2000, "spec")
    with pytest.raises(MissingOperatorValueError, match=r"steps\.aiq\.k"):  # sp (the default) needs k
        operator_values("aiq_query", str(path), load_spec(path), {})
    dp = operator_values("aiq_query", str(path), load_spec(path), {"mechanism": "dp"})
    assert dp.source("k") == "spec default"  # unused by the dp mechanism


def test_outlier_counts_budget_is_the_specs_form_or_the_requests(small_spec_path, tmp_path):
    path = owner_spec(small_spec_path, tmp_path / "owner.yaml")
    spec = load_spec(path)
    v = operator_values("outlier_counts", str(path), spec, {})
    assert (v["epsilon_total"], v.source("epsilon_total")) == (0.9, "spec")
    pair = operator_values("outlier_counts", str(path), spec, {"epsilon_select": 0.2, "epsilon_count": 0.3})
    assert {u.name for u in pair.used} >= {"epsilon_select", "epsilon_count"} and "epsilon_total" not in pair.as_dict()
    with pytest.raises(MissingOperatorValueError, match=r"steps\.outlier_counts\.epsilon_count"):
        operator_values("outlier_counts", str(path), spec, {"epsilon_select": 0.2})
    none = owner_spec(small_spec_path, tmp_path / "none.yaml", drop={"outlier_counts": ["epsilon_total"]})
    with pytest.raises(MissingOperatorValueError, match="no budget"):  # never the format's 0.5 + 0.5
        operator_values("outlier_counts", str(none), load_spec(none), {})
    # a Gaussian method needs delta_count written or given
    gauss = owner_spec(small_spec_path, tmp_path / "gauss.yaml", drop={"outlier_counts": ["delta_count"]})
    # global_laplace spends no delta: delta_count is neither asked for nor listed (issue 48.4: the line claimed
    # "delta_count=1e-06 (spec default)")
    pure = operator_values("outlier_counts", str(gauss), load_spec(gauss), {})
    assert "delta_count" not in pure.as_dict() and "delta_count" not in pure.line()
    with pytest.raises(MissingOperatorValueError, match=r"steps\.outlier_counts\.delta_count"):
        operator_values("outlier_counts", str(gauss), load_spec(gauss), {"method": "smooth"})


def test_outlier_counts_auto_is_resolved_as_the_release_does(small_spec_path, tmp_path):
    """Issue 48.4: ``method: auto`` (written or the format's default) resolves from public parameters exactly
    as the release's plan does; delta_count is asked for only when the resolved method spends delta."""
    from dpcore.release.spec import outlier_counts_section, with_step
    from dpcore.steps.outlier_counts import outlier_counts_planned_charges

    path = owner_spec(small_spec_path, tmp_path / "auto.yaml", drop={"outlier_counts": ["delta_count", "method"]})
    spec = load_spec(path)
    v = operator_values("outlier_counts", str(path), spec, {})  # refused before: "no value for delta_count"
    assert v["method"] == "auto" and "delta_count" not in v.as_dict()
    as_released = with_step(spec, "outlier_counts", outlier_counts_section(spec, {}))
    count = [c for c in outlier_counts_planned_charges(as_released) if c.step == "outlier_count"][0]
    assert count.cost.delta == 0  # the release itself spends no delta on these public parameters
    assert f"resolved from public parameters to {count.match['resolved_method']}" in v.line()
    # the flow runs with the spec's section unchanged: the same planned charges (same line keys) as the release
    ran = with_step(spec, "outlier_counts", outlier_counts_section(spec, {u.name: u.value for u in v.used}))
    assert outlier_counts_planned_charges(ran) == outlier_counts_planned_charges(as_released)
    # a method that spends delta still needs it written or given, and then lists it
    smooth = operator_values("outlier_counts", str(path), spec, {"method": "smooth", "delta_count": 1e-7})
    assert (smooth["delta_count"], smooth.source("delta_count")) == (1e-7, "request")
    # a delta given to a method that spends none is named unused, not claimed as spent
    unused = operator_values("outlier_counts", str(path), spec, {"delta_count": 1e-7})
    assert "unused" in unused._get("delta_count").note


def test_no_spec_is_refused_with_a_hint():
    with pytest.raises(SpecError, match="DPR_SPEC") as err:
        require_spec_path(None)
    assert "spec_path" in str(err.value) and "--spec" in str(err.value)


# ----------------------------------------------------------------------------- the flows (real runs)
def _charges():
    return PrivacyLedger(Warehouse(Settings.from_env().warehouse)).charges()


def _snapshot():
    path = Settings.from_env().warehouse
    return [] if not path.exists() else _charges()[["key", "status", "eps_units", "delta_units"]].values.tolist()


@pytest.mark.usefixtures("prefect_harness")
def test_each_operator_flow_runs_on_the_owners_values(dpr_home, small_spec_path, small_flights_csv, tmp_path):
    import logging

    import pandas as pd

    from flows.aiq_query import aiq_query
    from flows.coco_publish import coco_publish
    from flows.explain_outlier import explain_outlier
    from flows.explain_rules import explain_rules
    from flows.outlier_counts import outlier_counts
    from flows.unattributed_publish import unattributed_publish

    path = str(owner_spec(small_spec_path, tmp_path / "owner.yaml"))
    logged: list[str] = []
    catch = logging.Handler(logging.INFO)
    catch.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    flow_logger = logging.getLogger("prefect.flow_runs")  # the flows' run logger (does not reach caplog)
    flow_logger.addHandler(catch)
    unattributed_publish(spec_path=path)
    coco_publish(spec_path=path)
    aiq_query(record_ids=["F000001"], spec_path=path)
    outlier_counts(spec_path=path)
    ok = pd.read_csv(small_flights_csv).dropna(subset=["arr_delay", "air_time"])
    try:
        explain_outlier(record_id=str(ok.loc[ok["arr_delay"].idxmax(), "flight_id"]), spec_path=path)
    except Exception as exc:  # no valid context is a stated, charged outcome
        assert type(exc).__name__ == "NoValidContextError", exc
    rules = explain_rules(spec_path=path)
    flow_logger.removeHandler(catch)

    ch = _charges()
    by_step = {s: [json.loads(p) for p in ch[ch["step"] == s]["params"]] for s in set(ch["step"])}
    (un,) = by_step["unattributed"]
    assert (un["K"], un["epsilon"], un["method"]) == (30000, 0.3, "hg_l2")
    assert {p["K"] for s, ps in by_step.items() if s.startswith("coco") for p in ps} == {2000}
    assert {p["method"] for s, ps in by_step.items() if s.startswith("coco") for p in ps} == {"hg_l2"}
    coco_eps = ch[ch["step"].str.startswith("coco")]["stated_epsilon"]
    assert len(coco_eps) == 3 and all(abs(e - 0.35) < 1e-12 for e in coco_eps)
    (aiq,) = by_step["aiq"]
    assert {k: aiq[k] for k in ("mechanism", "epsilon", "beta", "r", "k")} == OWNER["aiq"]
    assert ch[ch["step"] == "aiq"]["stated_epsilon"].iloc[0] == pytest.approx(0.07)
    oc = ch[ch["step"].str.startswith("outlier")]
    assert abs(oc["stated_epsilon"].sum() - 0.9) < 1e-9  # the spec's epsilon_total, not the format's 0.5 + 0.5
    assert all(json.loads(p)["k"] == 4 and json.loads(p)["r"] == 0.01 for p in oc["params"])
    (pc,) = by_step["pcor"]
    assert (pc["epsilon"], pc["sampler"], pc["n_samples"], pc["utility"]) == (0.15, "random_walk", 7, "overlap")
    assert ch[ch["step"] == "pcor"]["stated_epsilon"].iloc[0] == pytest.approx(0.15)
    wh = Warehouse(Settings.from_env().warehouse)
    kept = wh.query("SELECT template, count(*) FROM internal.outlier_rules GROUP BY template")
    assert rules["templates"] and all(n <= OWNER["rules"]["max_rules"] for _, n in kept)
    logged = [m for m in logged if m.startswith("values used")]
    assert len(logged) == 6, logged
    assert any("max_group_size=30000 (spec)" in m for m in logged), logged
    assert any("max_group_size=2000 (spec)" in m and "method=hg_l2 (spec)" in m for m in logged), logged
    assert any("max_rules=3 (spec)" in m for m in logged), logged


@pytest.mark.usefixtures("prefect_harness")
def test_missing_values_and_a_missing_spec_are_refused_before_any_charge(dpr_home, small_spec_path, tmp_path):
    from flows.aiq_query import aiq_query
    from flows.coco_publish import coco_publish
    from flows.explain_outlier import explain_outlier
    from flows.outlier_counts import outlier_counts
    from flows.unattributed_publish import unattributed_publish

    from flows.release_pipeline import release_pipeline

    release_pipeline(spec_path=str(small_spec_path))  # something in the ledger to stay unchanged
    before = _snapshot()
    assert before
    drop = {step: sorted(REQUIRED[flow]) for flow in REQUIRED for step in [_step(flow)] if REQUIRED[flow]}
    path = str(owner_spec(small_spec_path, tmp_path / "bare.yaml", drop=drop))
    runs = [
        (lambda: unattributed_publish(spec_path=path), "steps.unattributed.max_group_size"),
        (lambda: coco_publish(spec_path=path), "steps.coco.max_group_size"),
        (lambda: aiq_query(record_ids=["F000001"], spec_path=path), "steps.aiq.epsilon"),
        (lambda: outlier_counts(spec_path=path), "steps.outlier_counts.k"),
        (lambda: explain_outlier(record_id="F000001", spec_path=path), "steps.pcor.epsilon"),
        (lambda: coco_publish(epsilon_per_level=0.5), "no spec given"),
        (lambda: aiq_query(record_ids=["F000001"], epsilon=0.1), "no spec given"),
    ]
    for run, key in runs:
        with pytest.raises(SpecError) as err:
            run()
        assert key in str(err.value), str(err.value)
    assert _snapshot() == before
