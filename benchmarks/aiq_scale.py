"""The AIQ step's counting on 1x / 10x / 100x the demo, before and after issue 29, in one process.

Run: ``DPR_SCALE_DIR=/tmp/dpr-scale .venv/bin/python -m benchmarks.aiq_scale [--factors 1 10 100]
[--repeat 3] [--dry-run] [--force]``. Writes the ``aiq_scale`` section of BENCHMARKS.md via
:func:`benchmarks._record.record` (figures are never typed by hand); ``--dry-run`` prints it only, and a
run during which the 1-minute load went above 2 is printed, not recorded, unless ``--force`` (the
section then says it is provisional).

What is timed
-------------
The counting of the ``aiq`` step (seed 001, Section 2: ``B_x(i, r)`` saturated at the mechanism's cap,
and ``x_i``) for the demo spec's queries at factor ``f``: its two record ids, three more ids standing for
the detector's top 3 (``from_detector``: the benchmark's warehouse has no detection run; any present ids
cost the same), and its public point. The warehouse is :func:`benchmarks.detect_scale.prepare` ``(f)``
(ingested and validated, built once). Each repetition runs, in this order:

* ``before``: the path of the step before issue 29 -- the attributes exported to Parquet partitions
  (:func:`dpcore.steps.aiq.scaled_chunks`, chunk size from ``DPR_MEMORY_LIMIT``), each chunk read,
  scaled, a KD-tree built on it (:func:`dpcore.mechanisms.neighbors.ball_counts`, saturated) and
  :func:`dpcore.mechanisms.neighbors.multiplicities`;
* ``chunked``: the step's fallback now (same export and chunks, each counted by
  :func:`dpcore.mechanisms.neighbors.few_query_counts`, no tree);
* ``sql``: the step's path now, one aggregate over the validated table
  (:func:`dpcore.mechanisms.neighbors_sql.table_ball_counts`).

All three include the queried records' lookup (:func:`dpcore.steps.aiq.record_points`); the three
results are asserted equal (counts and multiplicities). The figure is the fastest repetition (the median
beside it). The 1-minute load average is read before each factor and after every timing (2 shared cores: figures
taken at a load above 2 are inflated and are not final).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from benchmarks._record import machine, record

MAX_LOAD = 2.0  # 2 shared cores: figures taken above this load are not recorded (unless --force)
EXTRA_IDS = ["F00000010", "F00000123", "F00100000"]  # stand-ins for the detector's top 3 (F00100000: copy 0)


def _setup(factor: int):
    from benchmarks.detect_scale import prepare
    from dpcore.steps import aiq as A
    from dpcore.steps.common import open_stores

    spec, settings, ing = prepare(factor)
    wh = open_stores(settings).warehouse
    cfg = spec.steps.aiq
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
    ids = list(cfg.record_ids) + [i for i in EXTRA_IDS if i not in cfg.record_ids]
    points = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
    mech = A.check_aiq(spec)
    n = wh.query(f"SELECT count(*) FROM {A.validated_table(spec, ing)}")[0][0]
    return spec, ing, wh, attrs, lows, highs, ids, points, mech, int(n)


def _queries(wh, spec, ing, attrs, ids, points, lows, highs):
    from dpcore.mechanisms.neighbors import scale_by_bounds
    from dpcore.steps import aiq as A

    q_r, present = A.record_points(wh, spec, ing, attrs, ids, lows, highs)
    return np.vstack([q_r[present], scale_by_bounds(points, lows, highs)])


def run_factor(factor: int, repeat: int) -> dict:
    from dpcore.mechanisms import neighbors as N
    from dpcore.mechanisms.neighbors_sql import table_ball_counts
    from dpcore.steps import aiq as A

    spec, ing, wh, attrs, lows, highs, ids, points, mech, n = _setup(factor)
    r, cap = float(mech.r), mech.saturation_cap()

    def kdtree_chunk(item):  # the per-chunk work before issue 29
        source, i, Q, rr, c = item
        X = N._as_matrix(source.chunk(i), "chunk")
        if X.shape[0] == 0:
            return np.zeros(Q.shape[0], dtype=np.int64), np.zeros(Q.shape[0], dtype=np.int64)
        return N.ball_counts(X, Q, rr, cap=c), N.multiplicities(X, Q)

    def before():
        Q = _queries(wh, spec, ing, attrs, ids, points, lows, highs)
        with A.scaled_chunks(wh, spec, ing, attrs, lows, highs) as src:
            return N.chunked_ball_counts(src, Q, r, cap=cap, mapper=lambda fn, items: [kdtree_chunk(t) for t in items])

    def chunked():
        Q = _queries(wh, spec, ing, attrs, ids, points, lows, highs)
        with A.scaled_chunks(wh, spec, ing, attrs, lows, highs) as src:
            return N.chunked_ball_counts(src, Q, r, cap=cap)

    def sql():
        Q = _queries(wh, spec, ing, attrs, ids, points, lows, highs)
        b, xi, _ = table_ball_counts(wh.query, A.validated_table(spec, ing), attrs, lows, highs, Q, r, cap=cap)
        return b, xi

    paths = {"before": before, "chunked": chunked, "sql": sql}
    times: dict[str, list[float]] = {k: [] for k in paths}
    results = {}
    loads = [os.getloadavg()[0]]
    for _ in range(repeat):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
            loads.append(os.getloadavg()[0])
            print(f"{factor}x {name}: {times[name][-1]:.2f} s (load {loads[-1]:.2f})", file=sys.stderr, flush=True)
    ref = results["before"]
    for name, (b, xi) in results.items():
        assert np.array_equal(b, ref[0]) and np.array_equal(xi, ref[1]), f"{factor}x: {name} differs from before"
    return {"factor": factor, "rows": n, "queries": int(len(ref[0])), "chunk_rows": A.chunk_rows(wh, len(attrs)),
            "times": times, "load": (loads[0], max(loads))}


def section(rows: list[dict], repeat: int) -> str:
    lines = [
        "## AIQ counting at scale (issue 29)",
        "",
        f"`benchmarks/aiq_scale.py` ({machine()}): the `aiq` step's counting (seed 001, Section 2: saturated "
        "ball counts and multiplicities of the demo spec's queries, the queried records' lookup included) "
        f"on the ingested and validated warehouse of each factor, fastest of {repeat} repetitions (median in "
        "brackets), the three paths interleaved in one process. `before`: Parquet export, per chunk a KD-tree "
        "and the multiplicities (the step before issue 29); `chunked`: the same chunks counted by brute force "
        "(`few_query_counts`, the step's fallback for non-DOUBLE/integer attributes); `sql`: one DuckDB "
        "aggregate over the validated table (`table_ball_counts`, the step's path). The three results are "
        "asserted equal. Load: the 1-minute load average before the factor / the highest read after each "
        "timing (2 shared cores; above 2 the figures are inflated).",
        "",
        "| factor | rows | queries | chunk rows | before | chunked | sql | before / sql | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = {k: (min(v), statistics.median(v)) for k, v in r["times"].items()}
        cell = {k: f"{a:.2f} s ({m:.2f})" for k, (a, m) in t.items()}
        lines.append(
            f"| {r['factor']}x | {r['rows']:,} | {r['queries']} | {r['chunk_rows']:,} | {cell['before']} | "
            f"{cell['chunked']} | {cell['sql']} | {t['before'][0] / t['sql'][0]:.1f}x | "
            f"{r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    busy = max(max(r["load"]) for r in rows)
    if busy > MAX_LOAD:
        lines += ["", f"Provisional: the load reached {busy:.1f} during this run (above {MAX_LOAD:g} on 2 cores), so "
                  "every time is inflated by other work; re-run on a quiet machine for final figures."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--force", action="store_true",
                    help="record even when the load went above 2 (the section then says it is provisional)")
    args = ap.parse_args(argv)
    rows = [run_factor(f, args.repeat) for f in args.factors]
    text = section(rows, args.repeat)
    print(text)
    busy = max(max(r["load"]) for r in rows)
    if busy > MAX_LOAD and not args.force:
        print(f"not recorded: the load reached {busy:.1f} (> {MAX_LOAD}); re-run on a quieter machine "
              "(or --force)", file=sys.stderr)
    elif not args.dry_run:
        record("aiq_scale", text)


if __name__ == "__main__":
    main()
