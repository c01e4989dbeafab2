"""The demo at a scale factor through an S3 scratch store on 2 local Dask workers, against the default thread pool
(issue 50, benchmark).

Run: ``nice -n 10 .venv/bin/python -m benchmarks.scratch_store [--factor 10] [--timeout-min 20] [--dry-run]``.
Writes the ``scratch-store`` section of BENCHMARKS.md via :func:`benchmarks._record.record` (``--dry-run``
prints it only).

What runs, in one invocation
----------------------------
* The scaled demo table and spec of :mod:`benchmarks.scale` (``build_csv``, ``write_spec``: ``f`` copies of the
  NYC flights, seeded jitter), registered in a fresh home per run.
* One Prefect server (``prefect server start`` on 127.0.0.1) that both runs and the workers talk to.
* An S3 API: moto's server app on 127.0.0.1 in this process, behind a WSGI wrapper that counts the bytes
  of every object written (PUT bodies) and read (GET bodies of objects; listings not counted), with the time.
* A Dask ``LocalCluster`` of 2 worker processes, 1 thread each, with the store's credentials and the Prefect
  API in their environment.
* Run 1, ``default``: ``python -m flows.release_pipeline --spec <copy>`` with Prefect's thread pool.
* Run 2, ``store``: the same with ``DPR_DASK_ADDRESS`` = the cluster and ``DPR_SCRATCH_URL`` = ``s3://bucket/scratch``.

Each run is :func:`benchmarks.scale.run_pipeline` (a fresh process under ``/usr/bin/time -v``: wall time, the
flow process's peak RSS, stage times from the Prefect task-run lines). The workers run on the same machine (the
store does not need that; it is what this machine has): their peak RSS (sum of the 2, sampled every 0.5 s) is
reported apart. The bytes through the store are assigned to the pipeline stage whose time window holds them.
After the store run the bucket must be empty (every object removed); the script says so or fails.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from benchmarks._record import machine, record
from benchmarks.scale import (
    BASE_ROWS,
    LOG_LINE,
    STAGE_NAMES,
    TASK_STAGE,
    WORK,
    _commit,
    build_csv,
    load1,
    run_pipeline,
    spec_bounds,
    write_spec,
)

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "dpr-bench-scratch"
CREDS = {"AWS_ACCESS_KEY_ID": "bench-key-id", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def log(msg: str) -> None:
    print(f"[scratch-store {datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CountingS3:
    """moto's S3 app on 127.0.0.1, counting object bytes written and read (time, "up"/"down", bytes)."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        self.events: list[tuple[datetime, str, int]] = []
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)
        self.port = free_port()
        self._server = make_server("127.0.0.1", self.port, self._wrap(app), True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _wrap(self, app):
        def counted(environ, start_response):
            method, path, query = environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
            is_object = path.strip("/").count("/") >= 1 and "list-type" not in query
            if method == "PUT" and is_object:
                self._add("up", int(environ.get("CONTENT_LENGTH") or 0))
            body = app(environ, start_response)
            if method == "GET" and is_object:
                chunks = list(body)
                self._add("down", sum(len(c) for c in chunks))
                return chunks
            return body

        return counted

    def _add(self, kind: str, n: int) -> None:
        with self._lock:
            self.events.append((datetime.now(), kind, n))

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(10)


def start_prefect(folder: Path) -> tuple[subprocess.Popen, str]:
    """A Prefect server for both runs and the workers; its API URL once healthy."""
    port = free_port()
    home = folder / "prefect-server"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(folder / "prefect-server.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    import urllib.request

    for _ in range(240):
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the Prefect server did not become healthy in 120 s")


def stage_windows(err: str, started: datetime) -> list[tuple[datetime, str]]:
    """(end time, stage) per stage, in order, from the run's Prefect task-run lines."""
    ends: dict[str, datetime] = {}
    for line in err.splitlines():
        m = LOG_LINE.match(line)
        if m and TASK_STAGE.get(m.group(2)):
            ends[TASK_STAGE[m.group(2)]] = datetime.combine(started.date(),
                                                            datetime.strptime(m.group(1), "%H:%M:%S.%f").time())
    return sorted(((t, s) for s, t in ends.items()), key=lambda x: x[0])


def bytes_per_stage(events, windows) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for t, kind, n in events:
        stage = next((s for end, s in windows if t <= end), "teardown")
        out.setdefault(stage, {"up": 0, "down": 0})[kind] += n
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--timeout-min", type=float, default=20)
    ap.add_argument("--mem-cap-gb", type=float, default=16)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    f = args.factor
    folder = WORK / f"scratch-store-{f}x"
    folder.mkdir(parents=True, exist_ok=True)
    csv = WORK / f"demo-{f}x.csv"
    rows = build_csv(f, csv, spec_bounds())
    spec_dir = folder / "spec"
    spec_dir.mkdir(exist_ok=True)
    spec = write_spec(f, csv, spec_dir / f"demo-{f}x.yaml")

    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    s3 = CountingS3()
    os.environ.update(CREDS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{s3.port}")
    import s3fs

    s3fs.S3FileSystem().mkdir(BUCKET)
    prefect, api = start_prefect(folder)
    os.environ["PREFECT_API_URL"] = api
    import distributed
    import psutil

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       host="127.0.0.1", env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    client = distributed.Client(cluster)
    worker_pids = list(client.run(os.getpid).values())
    results: dict[str, dict] = {}
    try:
        for name in ("default", "store"):
            extra = {} if name == "default" else {"DPR_DASK_ADDRESS": cluster.scheduler_address,
                                                   "DPR_SCRATCH_URL": f"s3://{BUCKET}/scratch"}
            saved = {k: os.environ.get(k) for k in ("DPR_DASK_ADDRESS", "DPR_SCRATCH_URL", "DPR_TASK_RUNNER")}
            os.environ.pop("DPR_TASK_RUNNER", None)
            os.environ.update(extra)
            peak_workers = [0]
            stop = threading.Event()

            def watch() -> None:
                while not stop.is_set():
                    total = 0
                    for pid in worker_pids:
                        try:
                            total += psutil.Process(pid).memory_info().rss
                        except psutil.Error:
                            pass
                    peak_workers[0] = max(peak_workers[0], total)
                    stop.wait(0.5)

            th = threading.Thread(target=watch, daemon=True)
            th.start()
            n_events = len(s3.events)
            log(f"{f}x {name}: running (load {load1():.2f})")
            try:
                res = run_pipeline(f, spec, folder / name, args.timeout_min * 60, int(args.mem_cap_gb * 2**30),
                                   prefect_db=False)
            finally:
                stop.set()
                th.join()
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            err = (folder / name / "stderr.log").read_text(errors="replace")
            started = datetime.fromisoformat(res["started"])
            res["workers_peak_rss"] = peak_workers[0]
            res["store_bytes"] = bytes_per_stage(s3.events[n_events:], stage_windows(err, started))
            res.pop("rss_samples", None)
            results[name] = res
            log(f"{f}x {name}: rc {res['rc']} {res['killed'] or ''} wall {res['wall_s']:.0f} s")
            if not res["ok"]:
                log((folder / name / "stderr.log").read_text(errors="replace")[-3000:])
        left = s3fs.S3FileSystem(skip_instance_cache=True).find(f"{BUCKET}/scratch")
    finally:
        client.close()
        cluster.close()
        os.killpg(prefect.pid, 15)
        try:
            prefect.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(prefect.pid, 9)
        s3.stop()
    (folder / "result.json").write_text(json.dumps({"results": results, "left": left}, indent=1, default=str))
    md = section(results, left, f, rows, worker_pids)
    print(md)
    if not args.dry_run:
        record("scratch-store", md)
    return 0 if all(r["ok"] for r in results.values()) and not left else 1


def section(results: dict, left: list, factor: int, rows: int, worker_pids: list) -> str:
    d, s = results["default"], results["store"]

    def mb(n: int) -> str:
        return f"{n / 1e6:,.1f}"

    def secs(x):
        return "-" if x is None else f"{x:.1f}"

    la = os.getloadavg()
    lines = [
        "## Scratch store: the demo through S3 on 2 Dask workers (issue 50)",
        "",
        f"`nice -n 10 .venv/bin/python -m benchmarks.scratch_store --factor {factor}` ({machine()}; code at commit "
        f"{_commit()}; /proc/loadavg at the end: {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}). "
        f"The demo at {factor}x ({rows:,} rows, `benchmarks/scale.py`'s scaled table and spec), one invocation, two "
        "runs of `python -m flows.release_pipeline` against one Prefect server: `default` (Prefect's thread pool) "
        "and `store` (`DPR_DASK_ADDRESS` = a `LocalCluster` of 2 worker processes with 1 thread each, "
        "`DPR_SCRATCH_URL=s3://…` on moto's S3 server on 127.0.0.1 in the benchmark's process). The workers run "
        "on this machine, so the store run pays the transport without gaining cores (2 shared cores).",
        "",
        "| run | status | wall s | flow peak RSS GB | workers' peak RSS GB (sum) | load before / max / after |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in (("default", d), ("store", s)):
        status = "ok" if r["ok"] else (r["killed"] or f"exit {r['rc']}")
        workers = "-" if name == "default" else f"{r['workers_peak_rss'] / 1e9:.2f}"
        lines.append(f"| {name} | {status} | {r['wall_s']:.0f} | "
                     f"{(r['peak_rss'] or 0) / 1e9:.2f} | {workers} | "
                     f"{r['load_before']:.2f} / {r['load_max']:.2f} / {r['load_after']:.2f} |")
    if d["ok"] and s["ok"]:
        lines += ["", f"store / default: wall {s['wall_s'] / d['wall_s']:.2f}, flow peak RSS "
                      f"{(s['peak_rss'] or 0) / max(1, d['peak_rss'] or 1):.2f}."]
    lines += ["", "Seconds per stage and the bytes through the store in that stage (objects written / read; "
                  "assigned by the time of each request against the stage windows of the Prefect task-run lines):",
              "", "| stage | default s | store s | MB up | MB down |", "|---|---|---|---|---|"]
    tot = {"up": 0, "down": 0}
    for st in STAGE_NAMES:
        b = s["store_bytes"].get(st, {"up": 0, "down": 0})
        tot["up"] += b["up"]
        tot["down"] += b["down"]
        if st not in d["stages"] and st not in s["stages"] and not (b["up"] or b["down"]):
            continue
        lines.append(f"| {st} | {secs(d['stages'].get(st))} | {secs(s['stages'].get(st))} | {mb(b['up'])} | "
                     f"{mb(b['down'])} |")
    lines.append(f"| total | {d['wall_s']:.0f} | {s['wall_s']:.0f} | {mb(tot['up'])} | {mb(tot['down'])} |")
    lines += ["", "Objects left in the bucket after the store run: " + (str(len(left)) if left else "none") + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
