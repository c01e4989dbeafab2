"""The streamed detector on the demo scaled f times: before / after issue 29, in one process.

Run: ``.venv/bin/python -m benchmarks.detect_scale [--factor 10] [--repeats 2] [--dry-run]``.
Writes the ``detect_scale`` section of BENCHMARKS.md via :func:`benchmarks._record.record`.

Data: the table of ``benchmarks/scale.py`` at ``--factor`` (the demo's flights written f times with
seeded jitter), registered, ingested and validated once into a warehouse under ``DPR_SCALE_DIR``
(default ``/tmp/dpr-scale``; kept and reused). Then, alternating the two paths ``--repeats`` times
in this process (so both see the same load), the detect step of the library
(:func:`dpcore.steps.detect.run_detection_streamed`'s parts): the export, each template's streamed fit
(one after the other) and the store, each timed:

* **after** -- the code as it is: the normal equations' level blocks from per-level sums and the
  factored chunk cache (:mod:`dpcore.detect.level_design`), the store's top K by a threshold and its
  ids and flags by position (:func:`dpcore.steps.detect.store_streamed_detection`);
* **before** -- the same fit with the dense design everywhere (``robust_em.level_layout`` replaced by
  ``None``: the dense ``Z^T W Z`` product and the dense chunk cache, today's code path for designs
  without 0/1 columns) and the store before issue 29 (:func:`_store_before`, kept here as the
  reference: a window ``row_number()`` over every score, joins on ``_row``, a ``GROUP BY``).

The two runs' tables are compared (scores to 1e-8 relative, labels, flags and K exactly) and the
largest differences reported. The 1-minute load average is recorded before and after each run.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._record import machine, record

WORK = Path(os.environ.get("DPR_SCALE_DIR", "/tmp/dpr-scale"))


def prepare(factor: int):
    """The warehouse with the scaled table ingested and validated (built once, then reused)."""
    from benchmarks.scale import build_csv, spec_bounds, write_spec

    home = WORK / f"detect-{factor}x"
    os.environ["DPR_HOME"] = str(home / "dpr")
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    stamp = home / "ingested.pkl"
    if stamp.exists():
        spec = load_spec(home / "spec.yaml")
        return spec, Settings.from_env(), pickle.loads(stamp.read_bytes())
    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.run.registration import register

    home.mkdir(parents=True, exist_ok=True)
    csv = WORK / f"flights_{factor}x.csv"
    build_csv(factor, csv, spec_bounds())
    spec = load_spec(write_spec(factor, csv, home / "spec.yaml"))
    settings = Settings.from_env()
    register(spec, settings)
    ing = ingest_stage(spec, settings)
    validate_stage(spec, settings, ing)
    stamp.write_bytes(pickle.dumps(ing))
    return spec, settings, ing


def _store_before(spec, settings, ingested, fits) -> None:
    """The store before issue 29 (reference): rank every score with a window, join the ids on ``_row``."""
    from dpcore.steps.common import open_stores, validated_table
    from dpcore.steps.detect import _write_models
    from dpcore.validation import validated_table_name

    suffix = validated_table_name(ingested, spec)
    rid = spec.dataset.record_id
    vt = validated_table(spec, ingested)
    union = " UNION ALL ".join(
        f"SELECT {k} AS ti, ? AS template, _row, score FROM read_parquet(?)" for k in range(len(fits)))
    args: list = []
    for f in fits:
        args += [f.template.name, str(f.scores_path)]
    ks = ", ".join(f"({k}, {int(f.K)})" for k, f in enumerate(fits))

    def op(con):
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _detect_ranked AS "
            "SELECT s.ti, s.template, s._row, s.score, "
            "CAST(row_number() OVER (PARTITION BY s.ti ORDER BY s.score DESC, s._row) <= k.k AS TINYINT) AS label "
            f"FROM ({union}) s JOIN (VALUES {ks}) k(ti, k) ON s.ti = k.ti", args)
        con.execute(
            f'CREATE OR REPLACE TABLE internal."detect_scores__{suffix}" AS '
            f'SELECT v."{rid}", r.template, r.score, r.label FROM _detect_ranked r JOIN {vt} v ON v._row = r._row '
            "ORDER BY r.ti, r._row")
        con.execute(
            f'CREATE OR REPLACE TABLE internal."detect_flags__{suffix}" AS '
            f'SELECT v."{rid}", bool_or(r.label = 1) AS flagged, max(r.score) AS max_score, '
            "CAST(sum(r.label) AS INTEGER) AS templates_flagging "
            f'FROM _detect_ranked r JOIN {vt} v ON v._row = r._row GROUP BY r._row, v."{rid}" ORDER BY r._row')
        thresholds = dict(con.execute("SELECT ti, min(score) FROM _detect_ranked WHERE label = 1 GROUP BY ti").fetchall())
        con.execute("DROP TABLE _detect_ranked")
        params = []
        for k, f in enumerate(fits):
            p = dict(f.params)
            p["threshold"] = None if thresholds.get(k) is None else float(thresholds[k])
            params.append(json.dumps(p, default=float))
        _write_models(con, suffix, pd.DataFrame({
            "table_suffix": suffix, "template": [f.template.name for f in fits], "params": params,
            "created_at": datetime.now(timezone.utc)}))

    open_stores(settings).warehouse.run(op, transaction=True)


@contextmanager
def _path(kind: str):
    """``before``: the dense design everywhere; ``after``: the code as it is."""
    from dpcore.detect import robust_em

    saved = robust_em.level_layout
    if kind == "before":
        robust_em.level_layout = lambda *a: None
    try:
        yield
    finally:
        robust_em.level_layout = saved


def run_once(kind: str, spec, settings, ing) -> dict:
    from dpcore.steps.detect import (
        close_detection_partitions, fit_streamed, open_detection_partitions, store_streamed_detection, templates_of,
    )
    from dpcore.steps.common import open_stores
    from dpcore.validation import validated_table_name

    out = {"kind": kind, "load_before": os.getloadavg()[0]}
    t0 = time.perf_counter()
    parts = open_detection_partitions(spec, settings, ing)
    out["export"] = time.perf_counter() - t0
    try:
        fits = []
        with _path(kind):
            for t in templates_of(spec):
                t1 = time.perf_counter()
                fits.append(fit_streamed(parts, t, spec))
                out[f"fit {t.name}"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        (_store_before if kind == "before" else store_streamed_detection)(spec, settings, ing, fits)
        out["store"] = time.perf_counter() - t1
    finally:
        close_detection_partitions(parts)
    out["total"] = time.perf_counter() - t0
    out["load_after"] = os.getloadavg()[0]
    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ing, spec)
    out["tables"] = {
        "scores": _by_id(wh, spec, ing, f'internal."detect_scores__{suffix}"', "template, score, label"),
        "flags": _by_id(wh, spec, ing, f'internal."detect_flags__{suffix}"', "flagged, max_score, templates_flagging"),
        "models": {t: json.loads(p) for t, p in wh.query(
            "SELECT template, params FROM internal.detect_models WHERE table_suffix = ?", [suffix])},
        "n_iter": {f.template.name: f.params["n_iter"] for f in fits},
    }
    return out


def _by_id(wh, spec, ing, table: str, columns: str) -> pd.DataFrame:
    """A detect table with the record id first, in its stored row order: since the store keys its tables by
    ``_row`` (BENCHMARKS "detect_store"), the id is read from the validated table; the reference store above
    still writes it."""
    from dpcore.steps.common import validated_table

    rid = spec.dataset.record_id
    cols = [r[0] for r in wh.query(f"SELECT name FROM pragma_table_info('{table}')")]
    if "_row" not in cols:
        return wh.query_df(f'SELECT "{rid}", {columns} FROM {table}')
    pref = ", ".join(f"t.{c.strip()}" for c in columns.split(","))
    return wh.query_df(f'SELECT v."{rid}", {pref} FROM {table} t JOIN {validated_table(spec, ing)} v USING (_row) '
                       "ORDER BY t.rowid")


def compare(a: dict, b: dict) -> dict:
    """Largest differences between two runs' tables (after vs before)."""
    sa, sb = a["scores"], b["scores"]
    same_ids = bool((sa.iloc[:, 0].to_numpy() == sb.iloc[:, 0].to_numpy()).all() and
                    (sa["template"].to_numpy() == sb["template"].to_numpy()).all())
    x, y = sa["score"].to_numpy(), sb["score"].to_numpy()
    rel = float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(y)))) if len(x) else 0.0
    fa, fb = a["flags"], b["flags"]
    flags_same = bool(fa.iloc[:, 0].equals(fb.iloc[:, 0]) and fa["flagged"].equals(fb["flagged"])
                      and fa["templates_flagging"].equals(fb["templates_flagging"]))
    ks = {t: (a["models"][t]["K"], b["models"][t]["K"]) for t in a["models"]}
    coef_rel = max(float(np.max(np.abs(np.subtract(a["models"][t]["coef"], b["models"][t]["coef"]))
                                / np.maximum(1.0, np.abs(b["models"][t]["coef"])))) for t in a["models"])
    return {"rows in the same order": same_ids, "score max rel diff": rel,
            "labels identical": bool((sa["label"].to_numpy() == sb["label"].to_numpy()).all()),
            "flags identical": flags_same, "K identical": all(p == q for p, q in ks.values()),
            "coef max rel diff": coef_rel, "n_iter": (a["n_iter"], b["n_iter"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    t_prep = time.perf_counter()
    spec, settings, ing = prepare(args.factor)
    print(f"prepared in {time.perf_counter() - t_prep:.0f} s", flush=True)
    runs = []
    for r in range(args.repeats):
        for kind in (("before", "after") if r % 2 == 0 else ("after", "before")):
            res = run_once(kind, spec, settings, ing)
            print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items() if k != "tables"}, flush=True)
            runs.append(res)
    last = {k: next(r for r in reversed(runs) if r["kind"] == k)["tables"] for k in ("before", "after")}
    diff = compare(last["after"], last["before"])
    print(diff, flush=True)
    keys = [k for k in runs[0] if k not in ("kind", "tables", "load_before", "load_after")]
    rows = []
    for k in keys:
        b = min(r[k] for r in runs if r["kind"] == "before")
        a = min(r[k] for r in runs if r["kind"] == "after")
        rows.append(f"| {k} | {b:.1f} | {a:.1f} | {a / b:.2f} |")
    loads = ", ".join(f"{r['kind']} {r['load_before']:.2f} / {r['load_after']:.2f}" for r in runs)
    n_rows = args.factor * 336_776
    md = [
        f"## Detect at scale: the streamed detector before / after issue 29 ({args.factor}x the demo)\n",
        f"`.venv/bin/python -m benchmarks.detect_scale --factor {args.factor} --repeats {args.repeats}` ({machine()}; "
        f"2 cores shared with other work). The demo's flights written {args.factor} times "
        f"({n_rows:,} rows before validation, as `benchmarks/scale.py`), ingested and validated once; then the detect "
        "step's parts in this process, the two paths alternated so that both see the same load: the export, each "
        "template's streamed fit (one after the other, `DPR_MEMORY_LIMIT` unset: chunks sized for 2 GiB) and the store. "
        "**Before**: the dense design (`Z^T W Z` as an n·q² product, the dense chunk cache) and the store before issue 29 "
        "(a window `row_number()` over every score, joins on `_row`, a `GROUP BY`), kept in the script as the "
        "reference. **After**: the normal equations' one-hot blocks from per-level sums (`np.bincount`; "
        "`dpcore/detect/level_design.py`), the chunk cache holding level codes instead of one-hot columns, the top K "
        "by a threshold (`ORDER BY score DESC, _row LIMIT 1 OFFSET K-1`) and the ids and flags by `POSITIONAL JOIN`.\n",
        f"Seconds (the fastest of {args.repeats} runs of each path):\n",
        "| part | before s | after s | after / before |", "|---|---|---|---|", *rows, "",
        f"Load (1-minute average, before / after each run, in run order): {loads}.\n",
        "Same answers (the last run of each path): "
        + "; ".join(f"{k}: {v}" for k, v in diff.items()) + ".",
    ]
    text = "\n".join(md)
    print(text)
    if not args.dry_run:
        record("detect_scale", text)


if __name__ == "__main__":
    main()
