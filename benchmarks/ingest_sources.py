"""Ingest from PostgreSQL and from a Parquet dataset against the owner's workaround (issue 31).

The workaround an owner has without typed sources: export the table to a CSV (``COPY ... TO`` a file; for
a Parquet dataset, DuckDB's ``COPY ... TO`` a CSV), then today's CSV ingest. Measured for the NYC flights
2013 demo at 1x (336,776 rows) and 10x (the rows repeated under new ids), each way in a fresh spawned
process under ``DPR_MEMORY_LIMIT`` (imports and specs loaded before the clock starts; the peak RSS, VmHWM,
reset through ``/proc/self/clear_refs`` just before the ingest):

* **postgres**: ``dpcore`` ingest of ``kind: postgres`` (COPY spooled to a private scratch file, then DuckDB's parallel CSV reader);
* **postgres workaround**: ``COPY flights TO STDOUT`` written to a CSV file, then the CSV ingest;
* **parquet dataset**: ``dpcore`` ingest of ``kind: parquet`` over a folder of 8 files;
* **parquet workaround**: DuckDB ``COPY (read_parquet(...)) TO`` a CSV, then the CSV ingest;

Run: ``.venv/bin/python -m benchmarks.ingest_validate --sources [--factors 1 10]`` (or ``-m
benchmarks.ingest_sources``); records the section ``ingest_sources`` of BENCHMARKS.md. Needs ``pgserver``
and ``psycopg`` (the dev extra). The machine is shared: the load average at the start and end is recorded.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = "1GB"
PG_COLUMNS = ("flight_id text, carrier text, origin text, month integer, dest text, tailnum text, distance integer, "
              "air_time integer, dep_delay integer, arr_delay integer")


def _spec(folder: Path, source: dict):
    import yaml

    from dpcore.release.spec import load_spec

    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = source
    spec["dataset"]["roster"] = {"ids": ["F000001"]}
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    path = folder / f"spec-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_spec(path)


def _child(job: str, folder: str, arg: dict, out) -> None:
    """One measurement in a fresh process: seconds, rows, peak RSS during the ingest and RSS before it (MB)."""
    os.environ["DPR_MEMORY_LIMIT"] = arg.get("cap", MEMORY_LIMIT)
    from dpcore.ingest.raw import ingest, raw_row_count
    from dpcore.storage.warehouse import Warehouse

    import duckdb
    import psycopg  # noqa: F401 - imported before the peak is reset: the ingest's own memory is measured

    folder = Path(folder)
    wh = Warehouse(folder / f"wh-{job}-{time.monotonic_ns()}.duckdb")
    specs = {
        "postgres": _spec(folder, {"kind": "postgres", "dsn_env": "BENCH_PG_DSN", "table": "public.flights"}),
        "parquet": _spec(folder, {"kind": "parquet", "path": arg.get("dir", str(folder))}),
        "csv": _spec(folder, {"kind": "csv", "path": str(folder / f"export-{job}.csv")}),
    }
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak (VmHWM) to the current RSS
    t0 = time.perf_counter()
    n = 0
    if job == "postgres":
        res = ingest(specs["postgres"], wh, folder)
        n = raw_row_count(wh, res)
    elif job == "postgres-workaround":
        import psycopg

        csv = folder / f"export-{job}.csv"
        with psycopg.connect(os.environ["BENCH_PG_DSN"]) as con, csv.open("wb") as fh:
            with con.cursor().copy("COPY public.flights TO STDOUT WITH (FORMAT csv, HEADER true)") as cp:
                for block in cp:
                    fh.write(block)
        res = ingest(specs["csv"], wh, folder)
        n = raw_row_count(wh, res)
        csv.unlink()
    elif job == "parquet":
        res = ingest(specs["parquet"], wh, folder)
        n = raw_row_count(wh, res)
    elif job == "parquet-workaround":
        csv = folder / f"export-{job}.csv"
        con = duckdb.connect()
        con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        con.execute(f"COPY (SELECT * FROM read_parquet('{arg['dir']}/*.parquet')) TO '{csv}' (HEADER, DELIMITER ',')")
        con.close()
        res = ingest(specs["csv"], wh, folder)
        n = raw_row_count(wh, res)
        csv.unlink()
    seconds = time.perf_counter() - t0
    out.put((job, seconds, n, _status("VmHWM") / 1024, before / 1024))


def _status(key: str) -> int:
    """A field of /proc/self/status in kB (VmRSS: now; VmHWM: the peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _measure(job: str, folder: Path, arg: dict | None = None) -> tuple:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(job, str(folder), arg or {}, q))
    p.start()
    import queue

    while True:  # a child that fails (its traceback printed) is an error here, not a wait for ever
        try:
            result = q.get(timeout=1.0)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"{job}: the measuring process failed (exit code {p.exitcode}); see above")
    p.join()
    return result


def _prepare(folder: Path, factor: int, pg) -> tuple[Path, int]:
    """The demo ×factor as a CSV, loaded into PostgreSQL and written as a Parquet dataset of 8 files."""
    import pandas as pd
    import psycopg

    from dpcore.ingest.raw import materialise_demo
    from dpcore.release.spec import DemoSource

    base = pd.read_csv(materialise_demo(DemoSource(kind="demo"), folder / "data"), dtype=str, keep_default_na=False)
    csv = folder / f"flights_x{factor}.csv"
    parts = []
    for k in range(factor):
        part = base.copy()
        if k:
            part["flight_id"] = part["flight_id"].str.replace("F", f"F{k}-", n=1)
        parts.append(part)
    df = pd.concat(parts, ignore_index=True)
    df.to_csv(csv, index=False)
    with psycopg.connect(pg, autocommit=True) as con:
        con.execute("DROP TABLE IF EXISTS public.flights")
        con.execute(f"CREATE TABLE public.flights ({PG_COLUMNS})")
        with con.cursor().copy("COPY public.flights FROM STDIN WITH (FORMAT csv, HEADER true)") as cp:
            with csv.open("rb") as fh:
                while block := fh.read(1 << 20):
                    cp.write(block)
        con.execute("VACUUM ANALYZE public.flights")
    pq = folder / f"flights_x{factor}_parquet"
    pq.mkdir()
    typed = df.copy()
    for c in ("month", "distance", "air_time", "dep_delay", "arr_delay"):
        typed[c] = pd.to_numeric(typed[c].where(typed[c] != "")).astype("Int64")
    step = -(-len(typed) // 8)
    for i in range(8):
        typed.iloc[i * step:(i + 1) * step].to_parquet(pq / f"part-{i}.parquet", index=False)
    csv.unlink()
    return pq, len(df)


def main(factors: list[int], repeat: int = 3, small_cap: str = "256MB") -> None:
    import pgserver

    load0 = os.getloadavg()
    rows, small = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        srv = pgserver.get_server(str(tmp / "pg"), cleanup_mode="stop")
        try:
            os.environ["BENCH_PG_DSN"] = srv.get_uri()
            for f in factors:
                folder = tmp / f"x{f}"
                folder.mkdir()
                pq, n = _prepare(folder, f, srv.get_uri())
                jobs = ("postgres", "postgres-workaround", "parquet", "parquet-workaround")
                runs: dict[str, list[tuple]] = {job: [] for job in jobs}
                for _ in range(repeat):  # the jobs interleaved, so a change of load hits each alike
                    for job in jobs:
                        got = _measure(job, folder, {"dir": str(pq)})
                        assert got[2] == n, (job, got[2], n)
                        runs[job].append(got)
                        print((f, n, *got), flush=True)
                for job in jobs:  # the median run by seconds; the largest peak RSS of the repeats
                    ordered = sorted(runs[job], key=lambda r: r[1])
                    med = ordered[len(ordered) // 2]
                    rows.append((f, n, med[0], med[1], med[2], max(r[3] for r in ordered), med[4]))
                for job in ("postgres", "postgres-workaround"):  # memory: bounded by the cap, not by the rows?
                    try:
                        got = _measure(job, folder, {"dir": str(pq), "cap": small_cap})
                    except RuntimeError:
                        got = (job, None, 0, None, None)
                    small.append((f, n, *got))
                    print(("cap", small_cap, *small[-1]), flush=True)
                _record(rows, load0, factors, repeat, small, small_cap)  # after each scale: a long 10x run interrupted keeps the 1x figures
        finally:
            srv.cleanup()


def _record(rows: list, load0: tuple, factors: list[int], repeat: int, small: list, small_cap: str) -> None:
    from benchmarks._record import machine, record

    load1 = os.getloadavg()
    by = {(r[0], r[2]): r for r in rows}
    lines = []
    for f, n, job, seconds, _, rss, rss0 in rows:
        base = by[(f, job.split("-")[0] + "-workaround")] if not job.endswith("workaround") else None
        ratio = f"{seconds / base[3]:.2f}×" if base else "1.00×"
        lines.append(f"| {f}x | {n:,} | {job} | {seconds:.2f} | {n / seconds:,.0f} | {ratio} | {rss:,.0f} | {rss0:,.0f} |")
    capped = [f"| {f}x | {job} | {seconds:.2f} | {rss:,.0f} | {rss0:,.0f} | {rss - rss0:,.0f} |" if seconds is not None
              else f"| {f}x | {job} | failed (see the run's output) | - | - | - |"
              for f, n, job, seconds, _, rss, rss0 in small]
    md = f"""## Ingest from PostgreSQL and a Parquet dataset vs export-then-CSV (issue 31)

`benchmarks/ingest_sources.py` (`python -m benchmarks.ingest_validate --sources`) — {machine()}.
Load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end, on 2 cores. Each way ran {repeat} times,
the four ways interleaved; a row is the median run by seconds (its peak RSS the largest of the {repeat}).
Each run is a fresh process under
`DPR_MEMORY_LIMIT={MEMORY_LIMIT}`: its modules imported and its spec loaded first (RSS then: "before"), the
peak reset (`/proc/self/clear_refs`), then the timed ingest ("peak": VmHWM, whole process). Scales measured:
{", ".join(f"{f}x" for f in sorted({r[0] for r in rows}))} of {", ".join(f"{f}x" for f in factors)} asked.
PostgreSQL is a local `pgserver` (Unix socket).

| scale | rows | how | seconds | rows/s | time vs the workaround | peak RSS (MB) | RSS before (MB) |
|---|---|---|---|---|---|---|---|
{chr(10).join(lines)}

`postgres`: `kind: postgres` ingest (`COPY … TO STDOUT` spooled to a private file in the warehouse's scratch
folder, then DuckDB's parallel CSV reader with the CSV ingest's options; the spool removed after). `postgres-workaround`: `COPY flights TO STDOUT` into a CSV file, then the CSV ingest. `parquet`:
`kind: parquet` over a folder of 8 files (DuckDB casts to text while it copies). `parquet-workaround`:
DuckDB `COPY … TO` a CSV, then the CSV ingest. Goal (issue 31): PostgreSQL no slower than export-then-ingest,
memory within the cap and flat in rows (compare the RSS column across scales).

The same two PostgreSQL ways once more under `DPR_MEMORY_LIMIT={small_cap}` (one run each), to tell memory that
grows with the rows from memory that DuckDB takes up to its `memory_limit`: the growth over "before" is the
ingest's own.

| scale | how | seconds | peak RSS (MB) | RSS before (MB) | growth (MB) |
|---|---|---|---|---|---|
{chr(10).join(capped)}
"""
    print(md)
    record("ingest_sources", md)


def cli(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each way per scale (the median is recorded)")
    ap.add_argument("--small-cap", default="256MB", help="DPR_MEMORY_LIMIT of the extra memory runs")
    args, _ = ap.parse_known_args(argv)
    main(args.factors, args.repeat, args.small_cap)


if __name__ == "__main__":
    cli()
