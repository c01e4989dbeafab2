"""The detect step's export and store keyed by record id (before) and by ``_row`` (after), in one process.

Run: ``.venv/bin/python -m benchmarks.detect_store [--factor 10] [--repeats 3] [--dry-run]``.
Writes the ``detect_store`` section of BENCHMARKS.md via :func:`benchmarks._record.record`.

Data: the table of ``benchmarks/scale.py`` at ``--factor`` (ingested and validated once under
``DPR_SCALE_DIR``, as :func:`benchmarks.detect_scale.prepare`). The two templates are fitted once (two
threads, as the flow does) on an export without ids; their score files are then stored ``--repeats``
times by each path, alternated so that both see the same load:

* **before** -- the code at bf4563d: the export also carries the record id (a second export, timed),
  and the store copies it from that export by ``POSITIONAL JOIN`` into ``detect_scores`` (once per
  template) and ``detect_flags`` (:func:`_store_by_id`, kept here as the reference);
* **after** -- :func:`dpcore.steps.detect.open_detection_partitions` (no id) and
  :func:`dpcore.steps.detect.store_streamed_detection`: both tables keyed by the score files' ``_row``.

Each path's tables, read back with the record id (the ``_row`` tables joined to the validated table),
must be equal cell for cell; the script stops otherwise. Load = 1-minute load average before / after.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pandas as pd

from benchmarks._record import machine, record
from benchmarks.detect_scale import _by_id, prepare


def _export_with_ids(spec, settings, ing):
    """The export before: ``_row``, the record id and the templates' attributes (as at bf4563d)."""
    from dpcore.storage.lineage import new_nonce
    from dpcore.storage.partitions import export_partitions, scratch_dir
    from dpcore.steps.common import open_stores, validated_table
    from dpcore.steps.detect import detection_chunk_rows, templates_of

    attrs = sorted({a for t in templates_of(spec) for a in (t.behavioural, *t.contextual)})
    rid = spec.dataset.record_id
    cols = ", ".join(f'"{c}"' for c in dict.fromkeys(["_row", rid, *attrs]))
    wh = open_stores(settings).warehouse
    folder = scratch_dir(wh) / new_nonce(8)
    folder.mkdir(mode=0o700)
    return export_partitions(wh, f"SELECT {cols} FROM {validated_table(spec, ing)} ORDER BY _row", None,
                             detection_chunk_rows(spec), folder, distinct=("_row", rid))


def _store_by_id(spec, settings, ing, fits, export: str) -> None:
    """The store before (reference): as :func:`store_streamed_detection`, with the ids from ``export`` by position."""
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import _write_models
    from dpcore.validation import validated_table_name

    suffix = validated_table_name(ing, spec)
    rid = spec.dataset.record_id

    def op(con):
        labels, thresholds = [], []
        for f in fits:
            top = con.execute("SELECT score, _row FROM read_parquet(?) ORDER BY score DESC, _row LIMIT 1 OFFSET ?",
                              [str(f.scores_path), int(f.K) - 1]).fetchone()
            thresholds.append(float(top[0]))
            labels.append(("CAST(s.score > ? OR (s.score = ? AND s._row <= ?) AS TINYINT)", [top[0], top[0], int(top[1])]))
        for k, (f, (label, largs)) in enumerate(zip(fits, labels)):
            head = (f'CREATE OR REPLACE TABLE internal."detect_scores__{suffix}" AS ' if k == 0
                    else f'INSERT INTO internal."detect_scores__{suffix}" ')
            con.execute(head + f'SELECT e."{rid}", CAST(? AS VARCHAR) AS template, s.score, {label} AS label '
                        "FROM read_parquet(?) e POSITIONAL JOIN read_parquet(?) s",
                        [f.template.name, *largs, export, str(f.scores_path)])
        joins = " ".join(f"POSITIONAL JOIN (SELECT _row, score FROM read_parquet(?)) s{k}" for k in range(len(fits)))
        lab = [label.replace("s.", f"s{k}.") for k, (label, _a) in enumerate(labels)]
        largs = [a for _l, a in labels for a in a]
        con.execute(
            f'CREATE OR REPLACE TABLE internal."detect_flags__{suffix}" AS '
            f'SELECT e."{rid}", ({" OR ".join(f"({x}) = 1" for x in lab)}) AS flagged, '
            f'greatest({", ".join(f"s{k}.score" for k in range(len(fits)))}) AS max_score, '
            f'CAST({" + ".join(lab)} AS INTEGER) AS templates_flagging FROM read_parquet(?) e {joins}',
            [*largs, *largs, export, *[str(f.scores_path) for f in fits]])
        params = []
        for f, thr in zip(fits, thresholds):
            params.append(json.dumps({**f.params, "threshold": thr}, default=float))
        _write_models(con, suffix, pd.DataFrame({
            "table_suffix": suffix, "template": [f.template.name for f in fits], "params": params,
            "created_at": datetime.now(timezone.utc)}))

    open_stores(settings).warehouse.run(op, transaction=True)


def _tables(spec, settings, ing) -> dict:
    from dpcore.steps.common import open_stores
    from dpcore.validation import validated_table_name

    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ing, spec)
    return {"scores": _by_id(wh, spec, ing, f'internal."detect_scores__{suffix}"', "template, score, label"),
            "flags": _by_id(wh, spec, ing, f'internal."detect_flags__{suffix}"', "flagged, max_score, templates_flagging")}


def main() -> None:
    from dpcore.steps.detect import (
        close_detection_partitions, fit_streamed, open_detection_partitions, store_streamed_detection, templates_of,
    )

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    spec, settings, ing = prepare(args.factor)
    t0 = time.perf_counter()
    parts = open_detection_partitions(spec, settings, ing)
    export_after = time.perf_counter() - t0
    old = None
    try:
        with ThreadPoolExecutor(2) as ex:
            fits = list(ex.map(lambda t: fit_streamed(parts, t, spec), templates_of(spec)))
        runs = []
        for r in range(args.repeats):
            for kind in (("before", "after") if r % 2 == 0 else ("after", "before")):
                res = {"kind": kind, "load_before": os.getloadavg()[0]}
                if kind == "before":
                    t1 = time.perf_counter()
                    old = _export_with_ids(spec, settings, ing)
                    res["export"] = time.perf_counter() - t1
                    t1 = time.perf_counter()
                    _store_by_id(spec, settings, ing, fits, str(old.path))
                    res["store"] = time.perf_counter() - t1
                    shutil.rmtree(os.path.dirname(old.path), ignore_errors=True)
                else:
                    t1 = time.perf_counter()
                    store_streamed_detection(spec, settings, ing, fits)
                    res["store"] = time.perf_counter() - t1
                res["load_after"] = os.getloadavg()[0]
                res["tables"] = _tables(spec, settings, ing)
                print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items() if k != "tables"},
                      flush=True)
                runs.append(res)
    finally:
        close_detection_partitions(parts)
    last = {k: next(r for r in reversed(runs) if r["kind"] == k)["tables"] for k in ("before", "after")}
    for name in ("scores", "flags"):
        pd.testing.assert_frame_equal(last["after"][name], last["before"][name], check_exact=True, check_dtype=False)
    best = {k: min(r["store"] for r in runs if r["kind"] == k) for k in ("before", "after")}
    exp_before = min(r["export"] for r in runs if r["kind"] == "before")
    loads = ", ".join(f"{r['kind']} {r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    n_rows = args.factor * 336_776
    md = [
        f"## Detect store: tables keyed by `_row` instead of the record id (issue 29, {args.factor}x the demo)\n",
        f"`.venv/bin/python -m benchmarks.detect_store --factor {args.factor} --repeats {args.repeats}` ({machine()}; "
        f"2 cores shared with other work). The demo's flights written {args.factor} times ({n_rows:,} rows before "
        "validation, as `benchmarks/scale.py`), ingested and validated once; the two templates fitted once; then the "
        "export and the store of their scores by each path, alternated. **Before** (the code at bf4563d, kept in the "
        "script): the export carries the record id and the store copies it into `detect_scores` (once per template) "
        "and `detect_flags`. **After**: no id in the export; both tables keyed by the score files' `_row` "
        "(`dpcore/steps/detect.py`); the id is read from the validated table where a step needs it (the few "
        "detector-chosen records). Read back with their ids, the two paths' tables are equal cell for cell "
        "(checked by the script).\n",
        f"Seconds (the fastest of {args.repeats} runs of each path; the export after was timed once, before the fits):\n",
        "| part | before s | after s | after / before |", "|---|---|---|---|",
        f"| export | {exp_before:.2f} | {export_after:.2f} | {export_after / exp_before:.2f} |",
        f"| store | {best['before']:.2f} | {best['after']:.2f} | {best['after'] / best['before']:.2f} |",
        f"| export + store | {exp_before + best['before']:.2f} | {export_after + best['after']:.2f} | "
        f"{(export_after + best['after']) / (exp_before + best['before']):.2f} |", "",
        f"Load (1-minute average, before / after each run, in run order): {loads}.",
    ]
    text = "\n".join(md)
    print(text)
    if not args.dry_run:
        record("detect_store", text)


if __name__ == "__main__":
    main()
