"""The detector's concurrent fits with each fit's chunks on its own thread vs on one shared pool (issue 29).

Run: ``.venv/bin/python -m benchmarks.detect_pool [--factor 10] [--repeats 2] [--dry-run]``.
Writes the ``detect_pool`` section of BENCHMARKS.md via :func:`benchmarks._record.record`.

Data: the warehouse of :func:`benchmarks.detect_scale.prepare` (the demo's flights written ``--factor``
times, ingested and validated once under ``DPR_SCALE_DIR``), exported once. Each run fits every template
at once in a pool of 2 threads, as the flow's mapped tasks do on this 2-core machine; the two mappers
alternate ``--repeats`` times in this process, so both see the same load:

* **own thread** -- :func:`dpcore.runtime.chunks.serial_map` (before): a fit's chunk passes run on its task
  thread, so when the faster template is done one core idles while the slower one finishes;
* **shared pool** -- :func:`dpcore.runtime.pooled_map.pooled_map` (after, ``tasks.detect``): every fit's chunks go
  to one pool of a thread per core.

The two mappers' fits must be equal bit for bit (params and every score); the script stops otherwise.
Time = wall time of the fits (the export and the store are the same code either way); CPU = this
process's CPU time; load = 1-minute load average before / after each run.
"""
from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pandas as pd

from benchmarks._record import machine, record
from benchmarks.detect_scale import prepare


def run_once(kind: str, parts, spec) -> dict:
    from dpcore.runtime.chunks import serial_map
    from dpcore.runtime.pooled_map import pooled_map
    from dpcore.steps.detect import fit_streamed, templates_of

    mapper = pooled_map if kind == "shared pool" else serial_map
    out = {"kind": kind, "load_before": os.getloadavg()[0]}
    c0, t0 = time.process_time(), time.perf_counter()
    ends = {}

    def fit(t):
        f = fit_streamed(parts, t, spec, mapper)
        ends[t.name] = time.perf_counter() - t0
        return f

    with ThreadPoolExecutor(2) as ex:
        fits = list(ex.map(fit, templates_of(spec)))
    out["fits"] = time.perf_counter() - t0
    out["first done"] = min(ends.values())
    out["cpu"] = time.process_time() - c0
    out["load_after"] = os.getloadavg()[0]
    out["result"] = [(f.params, pd.read_parquet(f.scores_path)) for f in fits]
    return out


def main() -> None:
    from dpcore.steps.detect import close_detection_partitions, open_detection_partitions

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    spec, settings, ing = prepare(args.factor)
    parts = open_detection_partitions(spec, settings, ing)
    runs = []
    try:
        for r in range(args.repeats):
            for kind in (("own thread", "shared pool") if r % 2 == 0 else ("shared pool", "own thread")):
                res = run_once(kind, parts, spec)
                print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items() if k != "result"},
                      flush=True)
                runs.append(res)
    finally:
        close_detection_partitions(parts)
    ref = runs[0]["result"]
    for res in runs[1:]:
        for (pa, sa), (pb, sb) in zip(ref, res["result"]):
            assert pa == pb, "the fits' params differ between runs"
            pd.testing.assert_frame_equal(sa, sb, check_exact=True)
    rows = []
    for key in ("fits", "first done", "cpu"):
        b = min(r[key] for r in runs if r["kind"] == "own thread")
        a = min(r[key] for r in runs if r["kind"] == "shared pool")
        rows.append(f"| {key} | {b:.1f} | {a:.1f} | {a / b:.2f} |")
    loads = ", ".join(f"{r['kind']} {r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    md = [
        f"## Detect: the concurrent fits' chunks on one shared pool (issue 29, {args.factor}x the demo)\n",
        f"`.venv/bin/python -m benchmarks.detect_pool --factor {args.factor} --repeats {args.repeats}` ({machine()}; "
        f"2 cores shared with other work). The demo's flights written {args.factor} times "
        f"({args.factor * 336_776:,} rows before validation), exported once; every template fitted at once in 2 "
        "threads (as the flow's mapped tasks), the two mappers alternated. **own thread**: each fit's chunk passes "
        "on its task thread (`serial_map`, before). **shared pool**: every fit's chunks on one pool of a thread per "
        "core (`dpcore/runtime/pooled_map.py`, after): when the faster template is done, the slower one's chunks use both "
        "cores. Every run's params and scores are equal bit for bit (checked by the script).\n",
        f"Seconds (the fastest of {args.repeats} runs of each; `fits` = until both are fitted, `first done` = the "
        "faster template; CPU = this process's CPU time):\n",
        "| part | own thread s | shared pool s | pool / own |", "|---|---|---|---|", *rows, "",
        f"Load (1-minute average, before / after each run, in run order): {loads}.",
    ]
    text = "\n".join(md)
    print(text)
    if not args.dry_run:
        record("detect_pool", text)


if __name__ == "__main__":
    main()
