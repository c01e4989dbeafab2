"""How long the owner's and operator's ``dpr`` commands take on the demo (issue 32 §2).

Run on a quiet machine (nothing else running)::

    .venv/bin/python benchmarks/commands.py [--repeat 5]

Each command is run as a real subprocess (``.venv/bin/dpr``), as an owner types it, in a fresh
``DPR_HOME`` (the demo registered first). Figures are wall seconds, median and best of ``--repeat`` runs;
the baseline is ``dpr --help`` (the interpreter and the CLI's own start) measured in the same script.

* ``dpr spec check`` / ``dpr plan``: no Prefect, no data (goal: at most 2 s each).
* ``dpr aiq`` (one record): with Prefect's temporary server per command (the default) and with
  ``dpr server start`` running (goal: at most 10 s end to end). The first query of a fresh home
  materialises, ingests and validates the demo and is reported separately.
* ``dpr run specs/demo.yaml`` a second time (the stored release; goal: at most 30 s).

The section ``commands`` of BENCHMARKS.md is rewritten from the measured figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._record import machine, record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DPR = str(ROOT / ".venv" / "bin" / "dpr")
SPEC = "specs/demo.yaml"


def timed(args: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one command; raises if it fails (its output shown)."""
    t0 = time.perf_counter()
    res = subprocess.run([DPR, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"dpr {' '.join(args)} exited {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return dt


def series(args: list[str], env: dict[str, str], n: int) -> list[float]:
    return [timed(args, env) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ns = ap.parse_args()
    n = ns.repeat
    with tempfile.TemporaryDirectory() as tmp:
        load_before = os.getloadavg()
        # a fresh cache folder: the first `dpr spec check` asks pint for the demo's units (dpcore.explain.unit_memo)
        env = {**os.environ, "DPR_HOME": str(Path(tmp) / "home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        for v in ("PREFECT_API_URL", "DPR_WAREHOUSE", "DPR_BUNDLES", "DPR_SPEC"):
            env.pop(v, None)
        res: dict[str, list[float]] = {}
        res["dpr --help (baseline)"] = series(["--help"], env, n)
        res["dpr spec check"] = series(["spec", "check", SPEC], env, n)
        timed(["dataset", "add", "nycflights13", "--spec", SPEC], env)
        res["dpr plan"] = series(["plan", SPEC], env, n)
        ids = iter(f"F{i:06d}" for i in range(1, 1000))
        first = timed(["aiq", "--spec", SPEC, "--record-id", next(ids)], env)  # materialise + ingest + validate
        res["dpr aiq, temporary server per command"] = series(["aiq", "--spec", SPEC, "--record-id", next(ids)], env,
                                                              max(2, n // 2))
        timed(["server", "start"], env)
        try:
            res["dpr aiq, with `dpr server start`"] = [
                timed(["aiq", "--spec", SPEC, "--record-id", next(ids)], env) for _ in range(n)]
            timed(["run", SPEC], env)  # the release (first run)
            res["dpr run (stored release), with `dpr server start`"] = series(["run", SPEC], env, max(2, n // 2))
        finally:
            timed(["server", "stop"], env)

        load_after = os.getloadavg()
    base = statistics.median(res["dpr --help (baseline)"])
    goals = {"dpr spec check": 2, "dpr plan": 2, "dpr aiq, with `dpr server start`": 10,
             "dpr aiq, temporary server per command": 10,
             "dpr run (stored release), with `dpr server start`": 30}
    rows = []
    for name, ts in res.items():
        med = statistics.median(ts)
        goal = goals.get(name)
        verdict = "" if goal is None else ("met" if med <= goal else "NOT met")
        rows.append(f"| {name} | {len(ts)} | {med:.2f} | {min(ts):.2f} | {med / base:.1f}× | "
                    f"{'' if goal is None else f'≤ {goal} s: {verdict}'} |")
    md = "\n".join([
        "## Command speed on the demo (issue 32 §2)",
        "",
        f"`benchmarks/commands.py --repeat {n}` — {machine()}. Each command a real `dpr` subprocess in a fresh "
        "home (the demo registered first); wall seconds. The baseline is `dpr --help` in the same script. "
        f"The first `dpr aiq` of the fresh home (materialises, ingests and validates the 336,776 demo flights, "
        f"with a temporary server) took {first:.1f} s and is not in the table. The first `dpr spec check` of the "
        "run has a fresh cache folder (it asks pint for the spec's units once). Machine load (1-, 5-, 15-minute "
        f"load averages, {os.cpu_count()} cores) at the start: {', '.join(f'{x:.1f}' for x in load_before)}; "
        f"at the end: {', '.join(f'{x:.1f}' for x in load_after)} (the machine is shared: a load above the "
        "number of cores slows every figure).",
        "",
        "| command | runs | median s | best s | median / baseline | goal |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "No paper figure exists for this.",
    ])
    print(md)
    record("commands", md)


if __name__ == "__main__":
    main()
