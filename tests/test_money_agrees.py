"""Issue 48.3: every statement about money agrees with the ledger.

One function (:func:`dpcore.run.cost_plan.release_blockers`) decides what blocks a release; ``dpr plan`` prints its
verdict and reasons and ``dpr run`` refuses on the same ones. A seeded random sequence of cap changes, specs
stating other caps and costs, runs that finish or crash and stored re-runs checks, at the dpcore level, that
the plan's verdict and first reason are what the run's own stages (preflight, registration and cap check,
reservation, the finished-run lookup: the flow's order) decide, and that each printed budget line is the
ledger's. A few in-process CLI calls check the cap-mismatch case of the issue end to end (plan said
"fits: yes", run refused) and a stored re-run's printed budget line.
"""
from __future__ import annotations

import random

import pytest
import yaml
from click.testing import CliRunner

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.budget.charge_keys import PIPELINE
from dpcore.run.cost_plan import release_blockers
from dpcore.budget.ledger import LedgerError, PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.release.spec import load_spec
from dpcore.storage.warehouse import Warehouse


def _variant(base, tmp_path, cap: float, eps: float):
    spec = yaml.safe_load(base.read_text())
    spec["budget"]["epsilon"] = cap
    spec["steps"]["record_counts"]["epsilon"] = eps
    path = tmp_path / f"v-{cap:g}-{eps:g}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(spec, settings):
    """A release run's decisions in the flow's order, without the data: None, or the exception that stopped it.

    flows/release_pipeline.py: preflight, then the run unit (a finished release id returns its stored
    outcome), then ingest's registration and cap check, then the whole reservation (validation and the
    private steps read data and are not decisions about money). A run that passes reserves its lines.
    """
    from dpcore.run import pipeline
    from dpcore.run.cost_plan import plan_release
    from dpcore.run.release_runs import close_run, open_run

    try:
        pipeline.preflight(spec)
        run = open_run(settings.warehouse, spec.dataset.name, spec.release_id, PIPELINE,
                       [ln.key for ln in plan_release(spec).lines])
        try:
            if run.stored is not None:
                return None, run
            pipeline.require_registered(spec, settings)
            pipeline.cost_preflight(spec, settings)
        except BaseException:
            close_run(run)
            raise
        return None, run
    except (BudgetExceededError, LedgerError, pipeline.PreflightError) as exc:
        return exc, None


def _same_reason(exc, reasons: list[str]) -> bool:
    first = reasons[0]
    if isinstance(exc, BudgetExceededError):
        return first.startswith("budget:") and str(exc.requested) in first
    return str(exc) == first or first in str(exc)


@pytest.mark.parametrize("seed", [4801, 4802])
def test_plan_verdict_is_the_runs_and_budget_lines_are_the_ledgers(dpr_home, small_spec_path, tmp_path, seed):
    from dpcore.budget.charge_summary import release_budget_line
    from dpcore.run.release_runs import close_run, finish_run

    rng = random.Random(seed)
    settings = Settings.from_env()
    ledger = PrivacyLedger(Warehouse(settings.warehouse))
    registered_cap = float(ledger.status("nycflights13").cap.epsilon)  # the small spec's, as registered
    paths = {}
    finished: list[tuple[float, float, str]] = []
    checked = {"fits": 0, "blocked": 0, "stored": 0}
    for i in range(14):
        op = rng.choice(["set-cap", "run", "run", "rerun"])
        if op == "set-cap":
            spent = float(ledger.status("nycflights13").spent.epsilon)
            new = rng.choice([spent + 0.3, spent + 1, registered_cap, 40.0])
            if new >= spent:
                ledger.set_cap("nycflights13", PrivacyCost(str(new), "1e-5"), reason="test")
            continue
        if op == "rerun" and finished:
            cap, eps, rid = rng.choice(finished)
        else:
            cap = rng.choice([float(ledger.status("nycflights13").cap.epsilon)] * 3 + [registered_cap, 40.0])
            eps, rid = rng.choice([0.1, 0.5, 2.0]), f"m-{seed}-{i}"
        key = (cap, eps)
        paths.setdefault(key, _variant(small_spec_path, tmp_path, cap, eps))
        spec = load_spec(paths[key], release_id=rid)
        verdict = release_blockers(spec, ledger)  # what `dpr plan` prints and `dpr run` refuses on
        exc, run = _run(spec, settings)
        assert (exc is None) == verdict.fits, (op, verdict.reasons, exc)
        if exc is not None:
            assert _same_reason(exc, verdict.reasons), (verdict.reasons, str(exc))
            checked["blocked"] += 1
            continue
        checked["stored" if run.stored is not None else "fits"] += 1
        if run.stored is None:
            if rng.random() < 0.7:  # finishes (a later run of its id is the stored release) or crashes
                finish_run(settings.warehouse, run, {"result": {}})
                finished.append((cap, eps, rid))
            close_run(run)
        # the printed budget line is the ledger's at the time it is printed
        st = ledger.status("nycflights13")
        held = ledger.release_holds("nycflights13", rid)[0]
        line = release_budget_line(ledger, "nycflights13", rid, PrivacyCost(0))
        assert (f"holds epsilon={float(held.epsilon):.6g}" in line
                and f"total spent epsilon={float(st.spent.epsilon):.6g} of {float(st.cap.epsilon):g}" in line
                and f"left epsilon={float(st.remaining.epsilon):.6g}" in line), line
    assert checked["blocked"] and checked["fits"] and checked["stored"], checked  # it met every verdict


def test_plan_and_run_refuse_a_cap_mismatch_alike_and_a_stored_rerun_prints_todays_budget(dpr_home, small_spec_path,
                                                                                            tmp_path):
    """The issue's cases through the commands (in process): after `dpr budget set-cap` the spec still states the
    old cap: `dpr plan` said "fits: yes" and `dpr run` refused at ingest; now both give the same one reason.
    And a stored re-run prints the ledger's totals of now, not those stored with the release."""
    from dpr.plan_cmd import plan
    from dpr.run_cmd import run
    from flows.release_pipeline import budget_line

    ledger = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    ledger.set_cap("nycflights13", PrivacyCost(60, "1e-5"), reason="owner raised it")
    p = CliRunner().invoke(plan, [str(small_spec_path)])
    r = CliRunner().invoke(run, [str(small_spec_path)])
    assert p.exit_code == 2 and r.exit_code == 2, (p.output, r.output)
    assert "fits: yes" not in p.output
    (reason,) = [ln.strip()[2:] for ln in p.output.splitlines() if ln.strip().startswith("- ")]
    assert r.output.strip().splitlines() == [f"error: {reason}"], (p.output, r.output)  # one reason: one line
    assert "is registered with cap (epsilon=60" in reason

    # a stored re-run: its stored outcome holds the totals of its day; the line is the ledger's of now
    spec = load_spec(small_spec_path)
    stale = {"warehouse": str(Settings.from_env().warehouse), "charged_by_this_run": {"epsilon": 0.0, "delta": 0.0},
             "spent_by_this_release": {"epsilon": 0.2, "delta": 0.0}, "spent_total": {"epsilon": 20.0, "delta": 0.0},
             "remaining": {"epsilon": 20.0, "delta": 1e-5}, "cap": {"epsilon": 40.0, "delta": 1e-5},
             "neighbour": "replace-one"}
    line = budget_line(stale, spec)
    st = ledger.status("nycflights13")
    assert f"total spent epsilon={float(st.spent.epsilon):.6g} of 60;" in line, line
    assert f"left epsilon={float(st.remaining.epsilon):.6g}" in line and "epsilon=20 of 40" not in line, line


def test_series_plan_blames_the_dataset_cap_first_when_it_is_the_limit(dpr_home, small_spec_path, small_flights_csv,
                                                                      tmp_path):
    """`dpr plan --series` blamed budget.series_cap (and advised raising it) when the dataset's cap was the
    limit. Each period's reasons are release_blockers', in the run's order: the dataset's budget first."""
    from series_fixtures import make_series_spec

    from dpcore.run.series_plan import plan_series

    ledger = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    ledger.set_cap("nycflights13", PrivacyCost("0.1", "1e-5"), reason="test")
    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv, series_cap=0.1)
    spec = yaml.safe_load(path.read_text())
    spec["budget"]["epsilon"] = 0.1  # the registered cap now: no mismatch
    path.write_text(yaml.safe_dump(spec))
    (row,) = plan_series(path, ledger, max_periods=3)  # 0.2 a period: both caps refuse the first one
    assert row.status == "refused" and row.reason.startswith("budget: this release would charge"), row.reason
    assert "budget.series_cap" in row.reason  # the series cap is over too: every reason, the dataset's first
    first = release_blockers(load_spec(path, period="2013-01"), ledger).reasons
    assert first[0].startswith("budget:") and first[1].startswith("budget.series_cap:"), first
    assert row.reason == "; ".join(first)


def test_a_budget_refusal_never_prints_two_different_amounts_as_the_same_text():
    """One ledger unit (10^-18) short: six significant digits read "would charge epsilon=3.2 but has epsilon=3.2
    left" (seen in a full-suite run); the refusal prints the component that differs exactly."""
    from dpcore.budget.amounts import texts_apart

    asked = PrivacyCost("3.2")
    left = PrivacyCost.from_units(asked.units[0] - 1, 10**13)
    a, b = texts_apart(asked, left)
    assert a == "(epsilon=3.2, delta=0)" and b == "(epsilon=3.199999999999999999, delta=1e-05)"
    assert texts_apart(asked, asked) == (str(asked), str(asked))  # equal amounts: the usual short text
    assert texts_apart(PrivacyCost(1), PrivacyCost(2)) == (str(PrivacyCost(1)), str(PrivacyCost(2)))
