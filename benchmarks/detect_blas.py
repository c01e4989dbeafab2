"""The detect step with BLAS at its default threads vs one thread while fitting, in one process (issue 29, goal 3).

Run: ``.venv/bin/python -m benchmarks.detect_blas [--factor 10] [--repeats 2] [--dry-run]``.
Writes the ``detect_blas`` section of BENCHMARKS.md via :func:`benchmarks._record.record`.

Data: the warehouse of :func:`benchmarks.detect_scale.prepare` (the demo's flights written ``--factor``
times, ingested and validated once under ``DPR_SCALE_DIR``). Each run is the detect step as the flow runs
it: the export, every template's streamed fit in a pool of 2 threads (the flow's thread pool on this
2-core machine) and the store. The two paths alternate ``--repeats`` times in this process, so both see
the same load:

* **one thread** -- the code as it is: :func:`dpcore.runtime.blas_threads.one_blas_thread` held by each fit and
  each chunk pass;
* **default threads** -- the same code with that limit replaced by a no-op, so OpenBLAS uses its default
  thread count (2 here) in every call, as before the change.

Also timed, in the same process: writing the scores of one template (``_row``, ``score``, one chunk at a
time) with and without Parquet's dictionary encoding (:func:`dpcore.detect.streaming._score_writer`).

The fits' coefficients and K of the two paths are compared (OpenBLAS's summation order depends on its
thread count, so the last bits may differ).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks._record import machine, record
from benchmarks.detect_scale import prepare


@contextlib.contextmanager
def _blas(kind: str):
    """``default``: the one-thread limit replaced by a no-op everywhere the detector takes it."""
    from dpcore.runtime import blas_threads
    from dpcore.detect import em_passes, mixture_em, robust_em

    mods = [blas_threads, em_passes, mixture_em, robust_em]
    saved = [m.one_blas_thread for m in mods]
    if kind == "default":
        for m in mods:
            m.one_blas_thread = contextlib.nullcontext
    try:
        yield
    finally:
        for m, f in zip(mods, saved):
            m.one_blas_thread = f


def run_once(kind: str, spec, settings, ing) -> dict:
    from dpcore.steps.detect import (
        close_detection_partitions, fit_streamed, open_detection_partitions, store_streamed_detection, templates_of,
    )

    out = {"kind": kind, "load_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    parts = open_detection_partitions(spec, settings, ing)
    out["export"] = time.perf_counter() - t0
    try:
        with _blas(kind), ThreadPoolExecutor(2) as pool:
            t1 = time.perf_counter()
            fits = list(pool.map(lambda t: fit_streamed(parts, t, spec), templates_of(spec)))
            out["fits (2 threads)"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        store_streamed_detection(spec, settings, ing, fits)
        out["store"] = time.perf_counter() - t1
        out["scores"] = _score_files(fits[0])
    finally:
        close_detection_partitions(parts)
    out["total"] = out["export"] + out["fits (2 threads)"] + out["store"]
    out["load_after"] = os.getloadavg()[0]
    out["fits"] = {f.template.name: (np.asarray(f.params["coef"], dtype=float), int(f.K)) for f in fits}
    return out


def _score_files(fit) -> dict:
    """Seconds to write one template's scores chunk by chunk, with and without dictionaries (same rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(fit.scores_path)
    batches = table.to_batches(max_chunksize=max(1, table.num_rows // 35))
    out = {}
    for label, kw in (("dictionary", {}), ("no dictionary", {"use_dictionary": False})):
        path = fit.scores_path.with_name(f"bench-{label.replace(' ', '-')}.parquet")
        t = time.perf_counter()
        with pq.ParquetWriter(path, table.schema, **kw) as w:
            for b in batches:
                w.write_table(pa.Table.from_batches([b]))
        out[label] = time.perf_counter() - t
        path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    spec, settings, ing = prepare(args.factor)
    runs = []
    for r in range(args.repeats):
        for kind in (("default", "one") if r % 2 == 0 else ("one", "default")):
            res = run_once(kind, spec, settings, ing)
            print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items() if k != "fits"}, flush=True)
            runs.append(res)
    parts = ["export", "fits (2 threads)", "store", "total"]
    rows = []
    for k in parts:
        d = min(r[k] for r in runs if r["kind"] == "default")
        o = min(r[k] for r in runs if r["kind"] == "one")
        rows.append(f"| {k} | {d:.1f} | {o:.1f} | {o / d:.2f} |")
    sd = min(r["scores"]["dictionary"] for r in runs)
    sn = min(r["scores"]["no dictionary"] for r in runs)
    last = {k: next(r for r in reversed(runs) if r["kind"] == k)["fits"] for k in ("default", "one")}
    coef = max(float(np.max(np.abs(last["one"][t][0] - last["default"][t][0])
                            / np.maximum(1.0, np.abs(last["default"][t][0])))) for t in last["one"])
    same_k = all(last["one"][t][1] == last["default"][t][1] for t in last["one"])
    loads = ", ".join(f"{r['kind']} {r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    md = [
        f"## Detect: one BLAS thread while fitting ({args.factor}x the demo; issue 29, goal 3)\n",
        f"`.venv/bin/python -m benchmarks.detect_blas --factor {args.factor} --repeats {args.repeats}` ({machine()}; "
        "2 cores shared with other work). The detect step as the flow runs it (the export, the templates' streamed "
        "fits in 2 threads, the store) on the demo's flights written "
        f"{args.factor} times, the two paths alternated in one process. **default threads**: OpenBLAS at its default "
        "thread count in every call (before); **one thread**: `dpcore.runtime.blas_threads.one_blas_thread` held by each fit "
        "and chunk pass (after). The EM's chunk passes make many small BLAS calls (`D^T W D`, `Z^T W y`, dot "
        "products over ~10^5 rows); with two fits at once on two cores, a second BLAS thread is rarely free when "
        "woken, and each call waits for it.\n",
        f"Seconds (the fastest of {args.repeats} runs of each path):\n",
        "| part | default threads s | one thread s | one / default |", "|---|---|---|---|", *rows, "",
        f"Writing one template's scores chunk by chunk (the fastest of the {len(runs)} runs): with dictionaries "
        f"{sd:.2f} s, without {sn:.2f} s ({sn / sd:.2f}x; every `_row` and nearly every score is distinct, so the "
        "dictionary is built and dropped).\n",
        f"Load (1-minute average, before / after each run, in run order): {loads}. The export and the store "
        "call no BLAS (both paths run the same code there): their differences between the paths are the load's.\n",
        f"Same fits (the last run of each path): K identical: {same_k}; coefficients' largest relative difference "
        f"{coef:.1e} (OpenBLAS's summation order depends on its thread count).",
    ]
    text = "\n".join(md)
    print(text)
    if not args.dry_run:
        record("detect_blas", text)


if __name__ == "__main__":
    main()
