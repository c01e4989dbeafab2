"""Wall time of the demo pipeline: dpcore called directly vs the Prefect flow, default vs Dask runner.

All three runs happen in one process on the full demo (336,776 flights), after
one warm-up run that ingests and validates (later runs reuse the stored
validation, so each measured run does detection, every private step and the
bundle). Each measured run uses its own release id, so each draws and charges
afresh (the budget cap is raised for the benchmark's temporary warehouse).

* **direct**: the same ``dpcore`` stage and step functions the tasks wrap, no Prefect;
* **flow, default runner**: ``release_pipeline`` with Prefect's thread-pool runner;
* **flow, Dask**: ``release_pipeline`` with a 2-process local ``DaskTaskRunner``
  (the detector templates are the mapped tasks that go to the workers).

Run: ``.venv/bin/python -m benchmarks.pipeline`` (updates BENCHMARKS.md).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="dpr-bench-"))
    os.environ["DPR_HOME"] = str(tmp / "home")
    os.environ["DPR_SPECS_DIR"] = str(tmp)  # the flows load bench_spec.yaml from here
    os.environ.setdefault("PREFECT_HOME", str(tmp / "prefect"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)

    from prefect_dask import DaskTaskRunner

    from benchmarks._record import machine, record
    from dpcore.run import pipeline
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.steps.aiq import aiq_step
    from dpcore.steps.coco import coco_step
    from dpcore.steps.detect import detection_frame, fit_one, store_detection, templates_of
    from dpcore.steps.outlier_counts import outlier_counts_step
    from dpcore.steps.pcor import pcor_step
    from dpcore.steps.record_counts import record_counts_step
    from flows.release_pipeline import release_pipeline

    import yaml

    raw = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    raw["budget"] = {**raw["budget"], "epsilon": 1000.0, "delta": 0.001}  # room for four releases in the temporary warehouse
    for attr in raw["schema"]["categorical"].values():
        if "domain_from" in attr:
            attr["domain_from"]["file"] = str(ROOT / "specs" / attr["domain_from"]["file"])
    raw["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / raw["steps"]["coco"]["groups_file"])
    spec_path = str(tmp / "bench_spec.yaml")
    Path(spec_path).write_text(yaml.safe_dump(raw))
    settings = Settings.from_env()

    def direct(release_id: str) -> None:
        spec = load_spec(spec_path, release_id=release_id)
        ing = pipeline.ingest_stage(spec, settings)
        summary = pipeline.validate_stage(spec, settings, ing)
        df = detection_frame(spec, settings, ing)
        fits = [fit_one(df, t, spec) for t in templates_of(spec)]
        store_detection(spec, settings, ing, df[spec.dataset.record_id].to_numpy(), fits)
        outs = [record_counts_step(spec, settings, ing), aiq_step(spec, settings, ing),
                outlier_counts_step(spec, settings, ing), coco_step(spec, settings, ing)]
        if spec.steps.pcor.enabled:
            outs.append(pcor_step(spec, settings, ing))
        pipeline.bundle_stage(spec, settings, ing, summary, outs)

    print("warm-up (ingest + validate + first flow run)…", flush=True)
    t0 = time.perf_counter()
    release_pipeline(spec_path=spec_path, release_id="bench-warmup")
    warm = time.perf_counter() - t0

    timings = {}
    for name, run in [
        ("direct dpcore (no Prefect)", lambda: direct("bench-direct")),
        ("flow, default runner", lambda: release_pipeline(spec_path=spec_path, release_id="bench-default")),
        ("flow, 2-process local Dask", lambda: release_pipeline.with_options(
            task_runner=DaskTaskRunner(cluster_kwargs={"n_workers": 2, "processes": True, "dashboard_address": None})
        )(spec_path=spec_path, release_id="bench-dask")),
    ]:
        print(f"{name}…", flush=True)
        t0 = time.perf_counter()
        run()
        timings[name] = time.perf_counter() - t0
        print(f"  {timings[name]:.1f} s", flush=True)

    steps = load_spec(spec_path).steps
    n_templates = len(templates_of(load_spec(spec_path)))
    parts = [f"detection ({n_templates} templates)", "record counts", "AIQ", "outlier subspaces + counts",
             "count-of-counts"]
    if steps.pcor.enabled:
        parts.append(f"PCOR explanations of the detector's top {steps.pcor.from_detector} records "
                     f"({steps.pcor.sampler}, n = {steps.pcor.n_samples}, {steps.pcor.verifier})")
    base = timings["direct dpcore (no Prefect)"]
    rows = "\n".join(f"| {k} | {v:.1f} | {v / base:.2f}× |" for k, v in timings.items())
    md = f"""## Demo pipeline wall time: Prefect overhead and Dask (issue 8)

`benchmarks/pipeline.py` — {machine()}. Full demo spec (336,776 flights): {", ".join(parts)}, bundle; each
measured run after a warm-up run that ingested and validated ({warm:.1f} s including the temporary Prefect server
start), so validation is reused.

| run | seconds | ratio to direct |
|---|---|---|
{rows}

The Dask run includes starting and stopping its local cluster; the mapped tasks go to its workers (detector
fits, outlier-subspace utilities, count-of-counts node chunks, PCOR searches).
No paper figure exists for this.
"""
    print(md)
    record("pipeline", md)


if __name__ == "__main__":
    main()
