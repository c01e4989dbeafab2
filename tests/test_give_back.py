"""Issue 48.1: a release stopped on a public fact gives back what it reserved and never drew.

A release stopped by the rejected-rows gate (a real flow run on a real warehouse) keeps only what its record
counts drew and gives the rest back in the transaction that records the stop; its message, its bundle
(manifest, report, budget picture) and ``dpr budget`` state reserved, drawn and given back from the ledger. A
crashed release keeps its whole reservation (to resume), a refused one holds nothing; then held, drawn and
given back add up to the budget's spent total, and the next release can use what was given back.
"""
from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from dpcore.budget.amounts import BudgetExceededError, PrivacyCost
from dpcore.budget.ledger import ChargeRequest, LineRequest, PrivacyLedger
from dpcore.publish.plots import budget_bars
from dpcore.storage.settings import Settings
from dpcore.storage.warehouse import Warehouse


def _gate_spec(small_spec_path, tmp_path):
    """The small spec on flights whose every 4th distance is out of bounds (~25% rejected, gate at 5%), with
    the outlier_counts step enabled so the release reserves more than its record counts draw before the gate."""
    import pandas as pd

    spec = yaml.safe_load(small_spec_path.read_text())
    flights = pd.read_csv(spec["dataset"]["source"]["path"], dtype=str, keep_default_na=False)
    flights.loc[::4, "distance"] = "99999"
    bad = tmp_path / "flights_bad.csv"
    flights.to_csv(bad, index=False)
    spec["dataset"]["source"] = {"kind": "csv", "path": str(bad)}
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.05
    spec["steps"]["outlier_counts"]["enabled"] = True
    spec["release_id"] = "gate-r1"
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _line(key: str, eps: str, release: str) -> LineRequest:
    return LineRequest(key, "s", "m", "dp", {"k": key}, 1, PrivacyCost(eps))


def test_gate_stop_gives_back_the_undrawn_reservation_and_every_figure_agrees(dpr_home, small_spec_path, tmp_path):
    from dpcore.validation import ValidationFailed
    from dpr.budget_cmd import budget
    from flows.release_pipeline import release_pipeline

    path = _gate_spec(small_spec_path, tmp_path)
    with pytest.raises(ValidationFailed) as ei:
        release_pipeline(spec_path=str(path))
    ledger = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    (gate,) = [t for t in ledger.release_totals("nycflights13") if t["release_id"] == "gate-r1"]
    drawn = PrivacyCost(sum(ledger.charges("nycflights13")["epsilon"].map(
        lambda e: PrivacyCost(e).epsilon), 0))
    assert gate["given_back"].epsilon > 0  # outlier_counts' lines were reserved and never drawn: given back (kept before)
    assert gate["held"] == gate["drawn"] and gate["reserved"] == gate["drawn"] + gate["given_back"]
    assert gate["drawn"].epsilon == drawn.epsilon  # the record counts, as charged
    status = ledger.status("nycflights13")
    assert status.spent == gate["held"]
    # the stop message states the ledger's figures (it named only "epsilon = 0.1" before)
    msg = str(ei.value)
    fig = lambda c: f"epsilon={float(c.epsilon):.6g}"  # noqa: E731
    assert (f"reserved {fig(gate['reserved'])}" in msg and f"drew {fig(gate['drawn'])}" in msg
            and f"gave back {fig(gate['given_back'])}" in msg and f"left now {fig(status.remaining)}" in msg), msg
    # the bundle: manifest, report and picture show the ledger's numbers
    bundle = dpr_home / "bundles" / "nycflights13" / "gate-r1"
    b = json.loads((bundle / "manifest.json").read_text())["budget"]
    assert b["given_back_by_this_release"]["epsilon"] == pytest.approx(float(gate["given_back"].epsilon))
    assert b["spent_by_this_release"]["epsilon"] == pytest.approx(float(gate["held"].epsilon))
    assert b["remaining"]["epsilon"] == pytest.approx(float(status.remaining.epsilon))
    assert "given back by this release" in (bundle / "report.md").read_text()

    # a crashed release keeps its whole reservation (one of its two lines drawn); a refused one holds nothing
    ledger.reserve_lines("nycflights13", "crash-r1", [_line("c1", "0.5", "crash-r1"), _line("c2", "0.25", "crash-r1")])
    ledger.reserve(ChargeRequest("nycflights13", "crash-r1", "s", "m", PrivacyCost("0.5"), "dp", {"k": "c1"},
                                 neighbour="replace-one"))
    with pytest.raises(BudgetExceededError):
        ledger.reserve_lines("nycflights13", "refused-r1", [_line("x", "1000", "refused-r1")])

    result = CliRunner().invoke(budget, ["--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (shown,) = json.loads(result.output)
    rel = {r["release_id"]: r for r in shown["releases"]}
    assert "refused-r1" not in rel
    assert rel["crash-r1"]["held"]["epsilon"] == pytest.approx(0.75) and rel["crash-r1"]["given_back"]["epsilon"] == 0
    assert rel["crash-r1"]["drawn"]["epsilon"] == pytest.approx(0.5)
    for r in rel.values():
        assert r["reserved"]["epsilon"] == pytest.approx(r["held"]["epsilon"] + r["given_back"]["epsilon"])
        assert r["held"]["epsilon"] == pytest.approx(r["drawn"]["epsilon"] + r["unused"]["epsilon"])
    status = ledger.status("nycflights13")
    assert status.spent == sum((t["held"] for t in ledger.release_totals("nycflights13")), PrivacyCost(0))
    assert shown["spent"]["epsilon"] == float(status.spent.epsilon)
    assert shown["left"]["epsilon"] == float(status.remaining.epsilon)
    # the budget picture's bars are the table's figures (it summed the charges only: undrawn looked left)
    bars = budget_bars(ledger.charges("nycflights13"), float(status.cap.epsilon), float(status.spent.epsilon))
    assert sum(v for bar, _, v in bars if bar == "spent") == pytest.approx(float(status.spent.epsilon))
    assert [v for bar, _, v in bars if bar == "remaining"] == [pytest.approx(float(status.remaining.epsilon))]

    # the next release can use what was given back: exactly what is left now, which the gate's give-back is
    # part of (without it, this line would not fit)
    left = status.remaining
    assert not (left - gate["given_back"]).epsilon >= left.epsilon
    ledger.reserve_lines("nycflights13", "next-r1", [LineRequest("n1", "s", "m", "dp", {}, 1, PrivacyCost(left.epsilon))])
    assert ledger.status("nycflights13").remaining.epsilon == 0


def test_give_back_is_exact_and_keeps_what_was_drawn(tmp_path):
    """dpcore level: integer units, lines partly drawn keep their draws, a line nothing drew is returned whole
    (and a later run may reserve it again), and a second stop gives nothing more."""
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("ds", PrivacyCost(1))
    led.reserve_lines("ds", "r", [LineRequest("a", "a", "m", "dp", {}, 3, PrivacyCost("0.1")),
                                  LineRequest("b", "b", "m", "dp", {}, 1, PrivacyCost("0.3"))])
    led.reserve(ChargeRequest("ds", "r", "a", "m", PrivacyCost("0.1"), "dp", {"i": 1}))
    assert led.status("ds").spent == PrivacyCost("0.6")
    from dpcore.budget.ledger_home import ledger_progress

    rows_before = ledger_progress(led.wh)[0]
    back = led.give_back_unused("ds", "r", "test stop")
    # line "b" (nothing drawn) is deleted, but the home's rollback count (issue 47 section 2) never goes down:
    # a gate-stopped release is not a rolled-back warehouse, even if the marker was written before the stop
    assert ledger_progress(led.wh)[0] >= rows_before
    assert (back.reserved, back.drawn, back.given_back) == (PrivacyCost("0.6"), PrivacyCost("0.1"), PrivacyCost("0.5"))
    assert back.text() == "reserved epsilon=0.6 delta=0, drew epsilon=0.1 delta=0, gave back epsilon=0.5 delta=0"
    assert led.status("ds").spent == PrivacyCost("0.1") == back.status.spent
    assert led.given_back("ds", "r") == PrivacyCost("0.5") and led.given_back("ds") == PrivacyCost("0.5")
    again = led.give_back_unused("ds", "r", "test stop")
    assert again.given_back == PrivacyCost(0) and led.status("ds").spent == PrivacyCost("0.1")
    assert led.reserved_counts("ds", "r") == {"a": 1}


def test_spec_check_data_says_the_input_would_stop_at_the_gate(dpr_home, small_spec_path, tmp_path):
    """``dpr spec check --data`` (owner-only) names the rejected fraction and max_rejected_fraction, and says a
    release of this input would stop at the gate (it exited 0 without a word about the gate before)."""
    import re

    from dpr.spec_cmd import check

    res = CliRunner().invoke(check, [str(_gate_spec(small_spec_path, tmp_path)), "--data"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("rejected-rows gate:")]
    m = re.search(r"(\d+) of (\d+) rows rejected \(([\d.]+)%\) against steps\.validation\.max_rejected_fraction = "
                  r"0\.05 \(5\.00%\): a release of this input would stop at the gate", line)
    assert m and int(m.group(1)) / int(m.group(2)) > 0.2, line
    ok = CliRunner().invoke(check, [str(small_spec_path), "--data"], catch_exceptions=False)  # limit 0.5 there
    assert "below the limit, a release of this input passes the gate" in ok.output, ok.output


def test_give_back_of_one_run_leaves_another_units_lines_of_the_release_id(tmp_path):
    """An operator query of the same release id that crashed keeps its reservation to resume."""
    led = PrivacyLedger(Warehouse(tmp_path / "w.duckdb"))
    led.ensure_budget("ds", PrivacyCost(1))
    led.reserve_lines("ds", "r", [LineRequest("pipe", "a", "m", "dp", {}, 1, PrivacyCost("0.2")),
                                  LineRequest("op", "b", "m", "dp", {}, 1, PrivacyCost("0.3"))])
    back = led.give_back_unused("ds", "r", "test stop", line_keys=["pipe"])
    assert back.given_back == PrivacyCost("0.2") and led.reserved_counts("ds", "r") == {"op": 1}
    assert led.status("ds").spent == PrivacyCost("0.3")
