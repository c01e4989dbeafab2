"""The detect step with each chunk decoded once and the top-K threshold by radix selection, vs before (issue 29).

Run: ``.venv/bin/python -m benchmarks.detect_passes [--factor 100] [--repeats 1] [--dry-run]``.
Writes the ``detect_passes`` section of BENCHMARKS.md via :func:`benchmarks._record.record`.

Data: the warehouse of :func:`benchmarks.detect_scale.prepare` (the demo's flights written ``--factor``
times, ingested and validated once under ``DPR_SCALE_DIR``). Each run is the detect step as the flow runs
it (``tasks.detect``): the export, every template fitted at once in 2 threads with their chunk passes on
the shared pool (:func:`dpcore.runtime.pooled_map.pooled_map`), then the store. The two variants alternate
``--repeats`` times in this process, so both see the same load:

* **before** -- every pass that needs a chunk's raw rows (the scan, the robust start's sample, the first
  EM pass, the scoring) decodes its Parquet row group and encodes it again (``PartitionChunks.encoded``
  without its cache); the E-step is the reference copy :func:`_estep_before` (numpy's ``logaddexp`` and
  scipy's ``expit``, as is the ``ru`` pass's posterior) and a one-column dense product goes through BLAS;
  the scan reads the dense design (``X.min``, ``X.max``, the 0/1 test, ``previous_one`` column by column)
  and the scoring pass the decoded rows' dense design (``decision_function`` before);
  the store finds each template's K-th ``(score, _row)`` with DuckDB's ``ORDER BY score DESC, _row
  LIMIT 1 OFFSET K - 1``;
* **after** -- the code as it is: each chunk decoded once (:meth:`dpcore.detect.streaming.PartitionChunks.encoded`),
  the posterior and the log-likelihood from one ``exp(-|d|)`` per row (:func:`dpcore.detect.mixture_em._estep`),
  the one-column product without BLAS, the scan from the encoded columns (:func:`dpcore.detect.level_design.encoded_scan`),
  the scores from the chunk cache's factored design (``standardised_scores``) and the K-th pair by radix
  selection (:func:`dpcore.detect.kth_pair.kth_pair`).

Labels, flags, K and the iterations must be equal and the scores and fitted parameters within 1e-8
relative (:func:`compare`; the largest differences are recorded); the script stops otherwise. Time =
wall time of each part; CPU = this process's CPU time; load = 1-minute load average before / after each run.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pandas as pd

from benchmarks._record import machine, record
from benchmarks.detect_scale import prepare


@contextmanager
def _before():
    """The code before: every raw pass decodes Parquet; the K-th pair from DuckDB's top-N."""
    from dpcore.detect import streaming
    from dpcore.detect.combine import template_encoded
    from dpcore.steps import detect as step

    from dpcore.detect import em_passes, level_design, mixture_em

    from dpcore.detect import robust_em

    real = (streaming.PartitionChunks.encoded, step.kth_pair, em_passes._estep, em_passes._posterior,
            level_design.FactoredDesign.__matmul__, em_passes.chunk_pass, robust_em.chunk_pass,
            streaming.score_chunk)
    chunk_pass = em_passes.chunk_pass

    class _Dense:  # a source without encoded columns: chunk_pass scans its dense design
        def __init__(self, src):
            self.src = src

        def load(self, i):
            return self.src.load(i)

    def chunk_pass_before(item):
        src, i, state = item
        return chunk_pass((_Dense(src), i, state) if state["kind"] == "scan" else item)

    def score_chunk_before(item):  # the dense design of the decoded rows, as decision_function was
        src, i, det = item
        X, y = src.load(i)
        with np.errstate(all="ignore"):
            r = det._std_y(y) - det._design(X) @ det._beta
            return src.rows(i), mixture_em._log_odds(r, det._s2, det._p, det._b)

    def encoded_every_pass(self, i):
        return template_encoded(self.frame(i), self.template, self.schema)

    def matmul_blas(self, beta):
        lay = self.layout
        out = self.D @ beta[list(lay.dense)] if lay.dense else np.zeros(len(self))
        out += beta[0]
        for g, cols in enumerate(lay.groups):
            out += np.r_[0.0, beta[list(cols)]][self.codes[:, g]]
        return out

    streaming.PartitionChunks.encoded = encoded_every_pass
    step.kth_pair = lambda path, K: None  # the store's fallback: DuckDB's ORDER BY ... LIMIT 1 OFFSET K - 1
    em_passes._estep, em_passes._posterior = _estep_before, _special_expit
    level_design.FactoredDesign.__matmul__ = matmul_blas
    em_passes.chunk_pass = robust_em.chunk_pass = chunk_pass_before
    streaming.score_chunk = score_chunk_before
    try:
        yield
    finally:
        (streaming.PartitionChunks.encoded, step.kth_pair, em_passes._estep, em_passes._posterior,
         level_design.FactoredDesign.__matmul__, em_passes.chunk_pass, robust_em.chunk_pass,
         streaming.score_chunk) = real


def _special_expit(d):
    from scipy import special

    return special.expit(d)


def _estep_before(r, s2, p, b):
    """The E-step before (reference copy): numpy's ``logaddexp`` and scipy's ``expit``, each with its own ``exp``."""
    import math

    from scipy import special

    from dpcore.detect.mixture_em import _LOG_2PI, _LOG_PI

    r2 = r * r
    lg = (math.log1p(-p) - 0.5 * (_LOG_2PI + math.log(s2))) - r2 * (0.5 / s2)
    lc = (math.log(p) - _LOG_PI - 0.5 * math.log(2.0 * b)) - np.log1p(r2 * (0.5 / b))
    ll = float(np.logaddexp(lg, lc).sum())
    t = special.expit(lc - lg)
    etau = 1.0 / (b + 0.5 * r2)
    return t, etau, ll


def run_once(kind: str, spec, settings, ing) -> dict:
    from dpcore.runtime.pooled_map import pooled_map
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import (
        close_detection_partitions, fit_streamed, open_detection_partitions, store_streamed_detection, templates_of,
    )
    from dpcore.validation import validated_table_name

    out = {"kind": kind, "load_before": os.getloadavg()[0]}
    c0, t0 = time.process_time(), time.perf_counter()
    with (_before() if kind == "before" else _nothing()):
        parts = open_detection_partitions(spec, settings, ing)
        t1 = time.perf_counter()
        try:
            with ThreadPoolExecutor(2) as ex:
                fits = list(ex.map(lambda t: fit_streamed(parts, t, spec, pooled_map), templates_of(spec)))
            t2 = time.perf_counter()
            store_streamed_detection(spec, settings, ing, fits)
            t3 = time.perf_counter()
        finally:
            close_detection_partitions(parts)
    out.update({"export": t1 - t0, "fits": t2 - t1, "store": t3 - t2, "detect": t3 - t0,
                "cpu": time.process_time() - c0, "load_after": os.getloadavg()[0]})
    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ing, spec)
    out["result"] = (
        f'internal."detect_scores__{suffix}"', f'internal."detect_flags__{suffix}"',
        [json.loads(p) for (p,) in wh.query(
            "SELECT params FROM internal.detect_models WHERE table_suffix = ? ORDER BY template", [suffix])],
    )
    out["wh"] = wh
    return out


@contextmanager
def _nothing():
    yield


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-300), initial=0.0))


def keep_first(run: dict) -> None:
    """Copy the first run's stored tables aside (``bench_first_scores`` / ``_flags``, dropped at the end) for :func:`compare`."""
    scores, flags, _m = run["result"]

    def op(con):
        con.execute(f"CREATE OR REPLACE TABLE bench_first_scores AS SELECT * FROM {scores}")
        con.execute(f"CREATE OR REPLACE TABLE bench_first_flags AS SELECT * FROM {flags}")

    run["wh"].run(op)


def compare(x: dict, y: dict) -> dict:
    """Labels, flags, K and the number of iterations equal; scores and fitted parameters within 1e-8 relative.

    Runs of one variant are equal bit for bit; the two variants' E-steps round differently (the
    posterior from one ``exp``), so their fits agree to round-off. In SQL (the tables hold 2 rows per
    input row): ``y``'s tables against the first run's copy (:func:`keep_first`). Returns the largest
    relative differences.
    """
    scores, flags, mb = y["result"]
    ma = x["result"][2]
    rel = "max(abs(a.{c} - b.{c}) / greatest(abs(a.{c}), abs(b.{c}), 1e-300))"

    def op(con):
        n = con.execute(f"SELECT (SELECT count(*) FROM {scores}), (SELECT count(*) FROM bench_first_scores), "
                        f"(SELECT count(*) FROM {flags}), (SELECT count(*) FROM bench_first_flags)").fetchone()
        s = con.execute(f"SELECT count(*) FILTER (WHERE a.label <> b.label), {rel.format(c='score')}, count(*) "
                        f"FROM bench_first_scores a JOIN {scores} b USING (template, _row)").fetchone()
        f = con.execute(f"SELECT count(*) FILTER (WHERE a.flagged <> b.flagged OR a.templates_flagging <> "
                        f"b.templates_flagging), {rel.format(c='max_score')}, count(*) "
                        f"FROM bench_first_flags a JOIN {flags} b USING (_row)").fetchone()
        return n, s, f

    n, s, f = y["wh"].run(op)
    assert n[0] == n[1] == s[2] and n[2] == n[3] == f[2], f"row counts differ: {n}, joined {s[2]}, {f[2]}"
    assert s[0] == 0 and f[0] == 0, f"labels or flags differ: {s[0]} labels, {f[0]} flags"
    out = {"score": float(s[1] or 0.0), "max_score": float(f[1] or 0.0)}
    for pa, pb in zip(ma, mb):
        assert (pa["K"], pa["n_iter"]) == (pb["K"], pb["n_iter"]), "K or the iterations differ"
        for k in ("coef", "intercept", "sigma2", "p", "b", "log_likelihood", "threshold"):
            out[k] = max(out.get(k, 0.0), _rel(pa[k], pb[k]))
    assert max(out.values()) <= 1e-8, f"the fits differ by more than 1e-8 relative: {out}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    spec, settings, ing = prepare(args.factor)
    runs, diffs = [], []
    for r in range(args.repeats):
        for kind in (("before", "after") if r % 2 == 0 else ("after", "before")):
            res = run_once(kind, spec, settings, ing)
            print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items() if k not in ("result", "wh")},
                  flush=True)
            runs.append(res)
            if len(runs) == 1:
                keep_first(res)
            else:
                diffs.append(compare(runs[0], res))
                print(diffs[-1], flush=True)
    runs[0]["wh"].run(lambda con: con.execute("DROP TABLE IF EXISTS bench_first_scores; DROP TABLE IF EXISTS bench_first_flags"))
    rows = []
    for key in ("export", "fits", "store", "detect", "cpu"):
        b = min(r[key] for r in runs if r["kind"] == "before")
        a = min(r[key] for r in runs if r["kind"] == "after")
        rows.append(f"| {key} | {b:.1f} | {a:.1f} | {a / b:.2f} |")
    loads = ", ".join(f"{r['kind']} {r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    worst = {k: max(d[k] for d in diffs) for k in diffs[0]} if diffs else {}
    md = [
        f"## Detect: each chunk decoded once, the top-K threshold by radix selection (issue 29, {args.factor}x the demo)\n",
        f"`.venv/bin/python -m benchmarks.detect_passes --factor {args.factor} --repeats {args.repeats}` ({machine()}). "
        f"The demo's flights written {args.factor} times ({args.factor * 336_776:,} rows before validation); each run "
        "is the detect step as the flow runs it: the export, every template fitted at once in 2 threads on the "
        "shared chunk pool, the store. **before**: every pass needing a chunk's raw rows (scan, start sample, first "
        "EM pass, scoring) decodes its Parquet row group again, and the store's K-th (score, _row) comes from DuckDB's "
        "`ORDER BY score DESC, _row LIMIT 1 OFFSET K-1`. **after**: each chunk decoded once "
        "(`PartitionChunks.encoded`, `dpcore/detect/chunk_cache.py`) and the K-th pair by radix selection "
        "(`dpcore/detect/kth_pair.py`); the E-step's posterior and log-likelihood from one vectorised `exp(-|d|)` "
        "per row (`mixture_em._estep`, `_posterior`) instead of numpy's `logaddexp` and scipy's `expit`, a "
        "one-column dense product without BLAS, the scan from the encoded columns (`level_design.encoded_scan`) "
        "and the scores from the cached factored design (`standardised_scores`) instead of the dense one. Labels, flags, K and iterations are equal; scores and parameters "
        "agree to round-off (checked by the script, largest differences below).\n",
        f"Seconds (the fastest of {args.repeats} run(s) of each; CPU = this process's CPU time):\n",
        "| part | before s | after s | after / before |", "|---|---|---|---|", *rows, "",
        f"Load (1-minute average, before / after each run, in run order): {loads}.\n",
        "Largest relative difference between the variants (labels, flags, K and iterations equal): "
        + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + ".",
    ]
    text = "\n".join(md)
    print(text)
    if not args.dry_run:
        record("detect_passes", text)


if __name__ == "__main__":
    main()
