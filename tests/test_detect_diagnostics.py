"""Issue 15, hole 12: detector diagnostics are data in ``internal``, never warnings, logs or exact
values in exception messages.

The old ``fit_one`` recorded warnings with ``warnings.catch_warnings(record=True)``, which swaps
process-global state and is not thread-safe: with the template fits running concurrently in
Prefect's thread pool, a ``ConvergenceWarning`` carrying the exact relative log-likelihood change
escaped to the console (and a process worker's log). Detector exceptions stated exact validated
row counts ("fewer rows than parameters: 19 rows ...").
"""
from __future__ import annotations

import json
import logging
import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from child_runs import flushed_texts
from dpcore.detect.combine import fit_template
from dpcore.detect.settings import DetectorSettings
from dpcore.ingest.raw import IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, load_spec
from dpcore.steps.detect import fit_one, store_detection, templates_of
from dpcore.storage.warehouse import Warehouse

ROOT = Path(__file__).resolve().parents[1]
#: Text of any warning or diagnostic about convergence (what the old code printed or logged).
WARNING_TEXT = re.compile(r"converge|warning|log-likelihood|max_iter|relative", re.IGNORECASE)


def _spec(max_iter: int = 1, tol: float = 1e-12) -> ReleaseSpec:
    """The demo spec with the detector stopped after ``max_iter`` EM steps (never converges at tol=1e-12)."""
    spec = load_spec(ROOT / "specs" / "demo.yaml")
    detect = spec.steps.detect.model_copy(update={"max_iter": max_iter, "tol": tol})
    return spec.model_copy(update={"steps": spec.steps.model_copy(update={"detect": detect})})


def _flights(spec: ReleaseSpec, n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Whole-number flights-like rows inside the demo's public schema, with planted outliers."""
    rng = np.random.default_rng(seed)
    origin = rng.choice(["EWR", "JFK", "LGA"], size=n)
    distance = np.round(rng.uniform(200, 3000, size=n))
    air = 20 + distance / 8 + np.select([origin == "JFK", origin == "LGA"], [5.0, -3.0], 0.0) + rng.normal(0, 4, n)
    air[: n // 15] += rng.uniform(60, 200, size=n // 15)
    dep = np.round(rng.uniform(-20, 300, size=n))
    arr = dep * 0.9 + 2 + rng.normal(0, 5, n)
    arr[n // 15: n // 8] -= rng.uniform(80, 250, size=n // 8 - n // 15)
    carriers = spec.public_schema.categorical["carrier"].domain_strings[:3]
    return pd.DataFrame({
        "flight_id": [f"T{seed:02d}{i:05d}" for i in range(n)],
        "origin": origin, "distance": distance, "air_time": np.round(np.clip(air, 20, 700)),
        "dep_delay": dep, "arr_delay": np.round(np.clip(arr, -120, 1440)),
        "carrier": rng.choice(carriers, size=n),
    })


def _not_converged(params: dict) -> dict:
    diags = [d for d in params["diagnostics"] if d["code"] == "not_converged"]
    assert len(diags) == 1, params["diagnostics"]
    return diags[0]


# ----------------------------------------------------------------------------- no warning, data instead
def test_non_converging_fit_emits_no_warning_and_stores_diagnostics_in_internal(dpr_home):
    spec = _spec(max_iter=1)
    df = _flights(spec)
    templates = templates_of(spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fits = [fit_one(df, t, spec) for t in templates]
        # the library function itself, without fit_one's help: no warning either
        direct = fit_template(df, templates[0], spec.public_schema, DetectorSettings(max_iter=1, tol=1e-12))
    assert [str(w.message) for w in caught] == []
    for fit in fits + [direct]:
        p = fit.params
        assert p["converged"] is False and p["n_iter"] == 1
        d = _not_converged(p)
        assert d == {"code": "not_converged", "n_iter": 1, "max_iter": 1, "tol": 1e-12,
                     "last_relative_change": p["last_relative_change"]}
        assert p["last_relative_change"] >= 1e-12
        assert "warnings" not in p  # no warning text kept anywhere
    # written to internal.detect_models only, as JSON data
    ingested = IngestResult(dataset=spec.dataset.name, ingest_id="test-nonce", table="raw_test_diag", content_hash="x")
    from dpcore.validation import validated_table_name  # the stored tables are keyed by the validated table's _row

    Warehouse(Settings.from_env().warehouse).write_df(
        "validated", validated_table_name(ingested, spec),
        pd.DataFrame({"_row": np.arange(len(df), dtype=np.int64), "flight_id": df["flight_id"]}))
    done = store_detection(spec, Settings.from_env(), ingested, df["flight_id"].to_numpy(), fits)
    assert done.templates == tuple(t.name for t in templates)
    wh = Warehouse(Settings.from_env().warehouse)
    rows = wh.query("SELECT template, params FROM internal.detect_models WHERE table_suffix = ?", [done.table_suffix])
    stored = {name: json.loads(text) for name, text in rows}
    assert set(stored) == set(done.templates)
    for fit in fits:
        s = stored[fit.template.name]
        assert s["converged"] is False
        assert _not_converged(s) == _not_converged(fit.params)


def test_converging_fit_has_no_not_converged_diagnostic():
    spec = _spec(max_iter=200, tol=1e-6)
    df = _flights(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_one(df, templates_of(spec)[0], spec)
    assert fit.params["converged"] is True
    assert [d for d in fit.params["diagnostics"] if d["code"] == "not_converged"] == []
    json.dumps(fit.params, allow_nan=False)


# ----------------------------------------------------------------------------- concurrency
def test_concurrent_fits_in_a_thread_pool_leak_no_warning_log_or_value(caplog, capfd):
    """Several fit_one calls at once (as Prefect's ThreadPoolTaskRunner runs the mapped fits), with every
    warning turned into an error process-wide: nothing is warned, logged or printed, and the process's
    warning state is left as it was (the old catch_warnings(record=True) in fit_one swapped it)."""
    spec = _spec(max_iter=1)
    templates = templates_of(spec)
    frames = [_flights(spec, n=400 + 37 * k, seed=k) for k in range(4)]
    jobs = [(df, t) for df in frames for t in templates]
    caplog.set_level(logging.DEBUG)
    logging.captureWarnings(True)  # a warning that did escape would also reach the logs
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            filters_before = list(warnings.filters)
            show_before = warnings.showwarning
            for _round in range(3):
                with ThreadPoolExecutor(max_workers=4) as pool:
                    fits = list(pool.map(lambda job: fit_one(job[0], job[1], spec), jobs))
                assert warnings.filters == filters_before
                assert warnings.showwarning is show_before
    finally:
        logging.captureWarnings(False)
    captured = capfd.readouterr()
    for fit in fits:
        assert fit.params["converged"] is False
        _not_converged(fit.params)
    secrets = set()
    for (df, _t), fit in zip(jobs, fits):
        rel = fit.params["last_relative_change"]
        secrets |= {f"{rel:.3g}", f"{rel:.6g}", repr(rel), f"{len(df)} rows"}
    # the session's Prefect test server and its HTTP clients log in background threads at DEBUG (request
    # lines carry dates and ports); they are not the fits' records
    records = [r for r in caplog.records if not r.name.startswith(("httpcore", "httpx", "prefect", "uvicorn"))]
    texts = [r.getMessage() for r in records] + [captured.out, captured.err]
    assert [t for t in texts if WARNING_TEXT.search(t)] == []
    assert [s for s in secrets if any(s in t for t in texts)] == []
    assert [r.getMessage() for r in records if re.search(r"\d", r.getMessage())] == []
    assert [r for r in records if r.name == "py.warnings"] == []


# ----------------------------------------------------------------------------- generic exceptions
@pytest.mark.parametrize("n", [5, 6])
def test_too_few_rows_error_states_no_row_count(n):
    """air_time ~ distance + origin on the demo schema has 3 coefficients, so 7 parameters; the message
    names the template and that public count, never the number of validated rows."""
    spec = _spec(max_iter=200, tol=1e-6)
    t = next(t for t in templates_of(spec) if t.name == "air_time_by_distance_origin")
    df = _flights(spec).head(n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as exc:
            fit_one(df, t, spec)
    msg = str(exc.value)
    assert msg.startswith("template 'air_time_by_distance_origin': too few rows to fit the regression")
    assert "7 parameters" in msg
    assert not re.search(rf"(?<![0-9.]){n}(?![0-9])", msg), msg
    assert exc.value.__cause__ is None and exc.value.__suppress_context__  # no chained message with the count


def test_bad_values_errors_state_no_counts_or_positions():
    spec = _spec(max_iter=200, tol=1e-6)
    t = next(t for t in templates_of(spec) if t.name == "air_time_by_distance_origin")
    df = _flights(spec)
    bad = df.copy()
    bad.loc[[17, 23, 411], "air_time"] = np.nan
    with pytest.raises(ValueError) as exc:
        fit_one(bad, t, spec)
    assert "missing or non-numeric" in str(exc.value) and not re.search(r"\d", str(exc.value))
    bad = df.copy()
    bad.loc[[17, 411], "origin"] = "SECRET9"
    with pytest.raises(ValueError) as exc:
        fit_one(bad, t, spec)
    assert "outside the public domain" in str(exc.value) and not re.search(r"\d", str(exc.value))


# ----------------------------------------------------------------------------- real Prefect flow run
@pytest.mark.usefixtures("prefect_harness")
def test_detect_flow_on_non_converging_config_logs_no_warning(dpr_home, small_spec_path, tmp_path, capfd):
    """A real detect flow run (fits mapped on Prefect's thread pool) with max_iter=1: the run's logs in the
    Prefect API and the console carry no warning text, and the non-convergence is recorded in
    internal.detect_models."""
    from flows.detect import detect_flow

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["detect"].update({"max_iter": 1, "tol": 1e-12})
    path = tmp_path / "nonconv.yaml"
    path.write_text(yaml.safe_dump(spec))
    state = detect_flow(spec_path=str(path), return_state=True)
    assert state.is_completed()
    names = state.result()
    assert names == ["air_time_by_distance_origin", "arr_delay_by_dep_delay_carrier"]
    logs, states = flushed_texts(str(state.state_details.flow_run_id), "fitted (diagnostics in internal.detect_models)")
    assert sum("fitted (diagnostics in internal.detect_models)" in m for m in logs) == 2  # the fits' logs were read
    assert [m for m in logs + states if WARNING_TEXT.search(m)] == []
    console = capfd.readouterr()
    assert not WARNING_TEXT.search(console.out + console.err)
    wh = Warehouse(Settings.from_env().warehouse)
    stored = {t: json.loads(p) for t, p in wh.query("SELECT template, params FROM internal.detect_models")}
    assert set(stored) == set(names)
    secrets = set()
    for p in stored.values():
        assert p["converged"] is False and p["n_iter"] == 1
        _not_converged(p)
        rel = p["last_relative_change"]
        secrets |= {f"{rel:.3g}", f"{rel:.6g}", repr(rel)}
    assert [s for s in secrets if any(s in m for m in logs + states)] == []


@pytest.mark.usefixtures("prefect_harness")
def test_detect_flow_on_too_few_rows_completes_with_unfitted_filters_and_states_no_count(
        dpr_home, small_spec_path, tmp_path):
    """Fewer validated rows than a filter has parameters is a private fact, so the flow does not fail on it
    (rule 8): the filters are unfitted (``too_few_rows`` in internal.detect_models, nothing flagged), and no
    log or state names the number of validated rows."""
    from flows.detect import detect_flow

    spec = yaml.safe_load(small_spec_path.read_text())
    rows = Path(spec["dataset"]["source"]["path"]).read_text().splitlines()[:6]  # header + 5 flights
    (tmp_path / "tiny.csv").write_text("\n".join(rows) + "\n")
    spec["dataset"]["source"]["path"] = str(tmp_path / "tiny.csv")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    state = detect_flow(spec_path=str(path), return_state=True)
    assert state.is_completed()
    wh = Warehouse(Settings.from_env().warehouse)
    vt = next(r[0] for r in wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'"))
    n_valid = wh.query(f'SELECT count(*) FROM validated."{vt}"')[0][0]
    assert 0 < n_valid <= 5
    stored = [json.loads(p) for (p,) in wh.query("SELECT params FROM internal.detect_models")]
    assert stored and all(p["diagnostics"] == [{"code": "too_few_rows", "n_params": len(p["features"]) + 4}]
                          and p["K"] == 0 for p in stored)
    flags = wh.query_df(f'SELECT * FROM internal."detect_flags__{vt}"')
    assert len(flags) == n_valid and not flags["flagged"].any()
    logs, states = flushed_texts(str(state.state_details.flow_run_id), "Finished in state Completed")
    for text in states + logs:
        assert not re.search(rf"(?<![0-9.]){n_valid} rows", text), text
        assert not re.search(r"\d+ rows", text), text
