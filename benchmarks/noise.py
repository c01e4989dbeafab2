"""Draws per second of the vectorised exact discrete Laplace sampler against OpenDP's (issue 19).

Run: ``.venv/bin/python -m benchmarks.noise [--quick] [--dry-run]``.  Writes the
``noise`` section of BENCHMARKS.md via :func:`benchmarks._record.record`
(figures are never typed by hand).  ``--dry-run`` prints the section without
recording it; ``--quick`` uses 10^5 and 10^6 draws.

Both samplers are exact and draw from the OS CSPRNG; both add noise to an int64
array of zeros:

* **vectorised**: ``NoiseSource().discrete_laplace`` (production), i.e.
  :mod:`dpcore.noise.dlaplace` (Canonne-Kamath-Steinke Algorithms 1-2 over
  numpy index arrays, ``os.urandom``), 2^18 draws per chunk;
* **OpenDP**: ``dpcore.noise.source._opendp_discrete_laplace_add`` (the
  previous production path: ``make_laplace`` on ``vector_domain(atom_domain(T=i64))``,
  one call for the whole array).

Every cell (sampler x scale x n) runs in a fresh process (``spawn``), after
imports, the input array and a 1,000-draw warm-up; it reports wall time, CPU
time of the process and the peak resident memory it added (``ru_maxrss`` after
minus before the call: the output array plus the sampler's working memory,
beyond the input).  The machine is shared: the 1-minute load average is
recorded with every cell, and the CPU-time ratio is given beside the wall-time
ratio (a load above the core count inflates wall times).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time

from benchmarks._record import machine, record

SCALES = (1.0, 10.0, 1000.0)
GOAL = 10.0  # issue 19: >= 10x OpenDP's draws per second at 10^7 draws


def log(msg: str) -> None:
    print(f"[noise {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _cell(sampler: str, scale: float, n: int, q) -> None:
    import numpy as np

    from dpcore.noise import NoiseSource
    from dpcore.noise.source import _opendp_discrete_laplace_add

    if sampler == "vectorised":
        ns = NoiseSource()
        fn = lambda a: ns.discrete_laplace(a, scale)  # noqa: E731
    else:
        fn = lambda a: _opendp_discrete_laplace_add(a, scale)  # noqa: E731
    fn(np.zeros(1000, dtype=np.int64))  # warm-up (OpenDP builds its measurement)
    values = np.zeros(n, dtype=np.int64)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    load = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(values)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    a = np.exp(-1.0 / scale)
    var_ratio = float(out.var() / (2 * a / (1 - a) ** 2))
    q.put({"wall": wall, "cpu": cpu, "peak_mb": peak / 1024, "load": load, "var_ratio": var_ratio})


def run_cell(sampler: str, scale: float, n: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_cell, args=(sampler, scale, n, q))
    p.start()
    res = q.get()
    p.join()
    log(f"{sampler:10s} scale {scale:>6g} n {n:>10,}: {res['wall']:.2f} s wall, {res['cpu']:.2f} s cpu, "
        f"{n / res['wall'] / 1e6:.3f} M draws/s, peak +{res['peak_mb']:.0f} MB, load {res['load']:.1f}, "
        f"var/var_exact {res['var_ratio']:.4f}")
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^5 and 10^6 draws instead of 10^6 and 10^7")
    ap.add_argument("--dry-run", action="store_true", help="print the section, do not record it")
    args = ap.parse_args(argv)
    sizes = (10**5, 10**6) if args.quick else (10**6, 10**7)
    load0 = os.getloadavg()[0]
    t_start = time.perf_counter()
    res = {}
    for scale in SCALES:
        for n in sizes:
            for sampler in ("vectorised", "opendp"):
                res[(sampler, scale, n)] = run_cell(sampler, scale, n)
    load1 = os.getloadavg()[0]
    cmd = "PYTHONPATH=. .venv/bin/python -m benchmarks.noise" + (" --quick" if args.quick else "")
    lines = [
        "## Noise: vectorised exact discrete Laplace vs OpenDP (issue 19)\n",
        f"`{cmd}`; {machine()}; total {time.perf_counter() - t_start:.0f} s. "
        f"1-minute load average at the start / end: {load0:.1f} / {load1:.1f} on {os.cpu_count()} cores "
        "(the machine is shared; above the core count wall times are inflated, CPU times less so).\n",
        "Both samplers are exact and read the OS CSPRNG; each adds noise to an int64 array of zeros, in a fresh "
        "process per cell. **vectorised** = production `NoiseSource().discrete_laplace` "
        "(`dpcore/noise/dlaplace.py`: Canonne-Kamath-Steinke 2020 Algorithms 1-2 over numpy index arrays, "
        "integer arithmetic, `os.urandom`); **OpenDP** = `make_laplace` on `vector_domain(atom_domain(T=i64))` "
        "(the previous production path, one call for the array). **peak** = resident memory the call added "
        "(`ru_maxrss` after minus before; includes the int64 output array, 8 bytes per draw; the input is "
        "allocated before). **var ratio** = sample variance / exact variance 2a/(1-a)^2, a = e^(-1/scale).\n",
        "| scale | draws | vectorised: M draws/s | OpenDP: M draws/s | speed-up (wall) | speed-up (CPU time) "
        "| vectorised peak (MB) | OpenDP peak (MB) | var ratio (vec / OpenDP) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdict = []
    for scale in SCALES:
        for n in sizes:
            v, o = res[("vectorised", scale, n)], res[("opendp", scale, n)]
            sw, sc = o["wall"] / v["wall"], o["cpu"] / v["cpu"]
            lines.append(
                f"| {scale:g} | {n:,} | {n / v['wall'] / 1e6:.2f} | {n / o['wall'] / 1e6:.3f} | {sw:.1f}x | {sc:.1f}x "
                f"| {v['peak_mb']:.0f} | {o['peak_mb']:.0f} | {v['var_ratio']:.4f} / {o['var_ratio']:.4f} "
                f"| {v['load']:.1f} / {o['load']:.1f} |"
            )
            if n == max(sizes):
                verdict.append((scale, sw))
    met = all(sw >= GOAL for _, sw in verdict)
    lines.append("")
    lines.append(
        f"Goal (issue 19): >= {GOAL:.0f}x OpenDP's draws per second at {max(sizes):,} draws: "
        + ("**met**" if met else "**not met**")
        + " (" + ", ".join(f"scale {sc:g}: {sw:.1f}x" for sc, sw in verdict) + ", wall time)."
        + (" This was a --quick run (10^6 draws at most), not the goal's 10^7." if args.quick else "")
    )
    md = "\n".join(lines) + "\n"
    print(md)
    if not args.dry_run:
        record("noise", md)
        log("recorded section 'noise' in BENCHMARKS.md")


if __name__ == "__main__":
    main()
