"""How well the coco release's empirical accuracy figure covers the real errors (issue 16, part 1).

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.coco_accuracy [--quick] [--dry-run]``.
Writes the ``coco_accuracy`` section of BENCHMARKS.md (:func:`benchmarks._record.record`).

The coco step states, per level, an empirical half-width for the released cells:
the ``1 - alpha`` quantile of the cell errors of a parametric bootstrap from the
release (:mod:`dpcore.mechanisms.coco.bootstrap`). It is an estimate, not a
guarantee, so it has to be checked against the truth: on the three data sets of
``benchmarks/coco.py`` (NYC flights, partially synthetic housing, sparse), for
each method and epsilon per level, ``--first`` independent releases each state
their figure (``R`` bootstrap replicates); ``--fresh`` further releases of the
*true* data give the real cell errors, and **coverage** is the share of those
errors (cells shown in a release table: non-zero in the truth or the release)
within the stated figure. Target: ``1 - alpha = 0.95``. The ratio of the
bootstrap's time to one release is the cost of the statement (baseline: one
publication in the same run).

Noise: the seeded :class:`~dpcore.noise.NoiseSource` (same distribution as
production; benchmark use only). No paper figure exists: the seed paper
reports errors, not interval coverage.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._record import machine, record
from benchmarks.coco import flights_dataset, housing_dataset, log, sparse_dataset
from dpcore.mechanisms.coco import CocoMechanism, coco_histograms
from dpcore.mechanisms.coco.bootstrap import bootstrap_level_errors
from dpcore.mechanisms.coco.representations import counts_from_leaf_counts
from dpcore.noise import NoiseSource

METHODS = ("top_down_hc", "bottom_up_hc", "hg_l2")
ALPHA = 0.05


def _shown_errors(est: dict, truth: dict, nodes: list[str]) -> np.ndarray:
    E = np.stack([np.asarray(est[n]) for n in nodes])
    T = np.stack([truth[n] for n in nodes])
    return np.abs(E - T)[(E != 0) | (T != 0)]


def cell(ds, method: str, eps: float, replicates: int, first: int, fresh: int) -> dict:
    """Coverage and widths for one (data set, method, eps) cell."""
    h, K = ds.h, ds.K
    mech = CocoMechanism(method, eps, K)
    G = counts_from_leaf_counts(np.array([len(ds.sizes.get(leaf, ())) for leaf in h.leaves]), h)
    truth = coco_histograms(ds.sizes, h, K)
    levels = range(h.levels)
    noise = NoiseSource(seed=1)
    errs = {lv: [] for lv in levels}
    t_pub = []
    for _ in range(fresh):
        t = time.perf_counter()
        est = mech.publish(ds.sizes, h, noise)
        t_pub.append(time.perf_counter() - t)
        for lv in levels:
            errs[lv].append(_shown_errors(est, truth, h.nodes_at(lv)))
    real = {lv: np.concatenate(errs[lv]) for lv in levels}
    stated = {lv: [] for lv in levels}
    t_boot = []
    for i in range(first):
        release = mech.publish(ds.sizes, h, NoiseSource(seed=100 + i))
        t = time.perf_counter()
        b = bootstrap_level_errors(mech, h, G, release, ALPHA, replicates)
        t_boot.append(time.perf_counter() - t)
        for lv in levels:
            stated[lv].append(b[lv].cell_half_width)
    out = {"time_ratio": float(np.mean(t_boot) / np.mean(t_pub)), "levels": {}}
    for lv in levels:
        q = float(np.quantile(real[lv], 1 - ALPHA, method="higher"))
        cov = [float(np.mean(real[lv] <= s)) for s in stated[lv]]
        out["levels"][lv] = {"true_q": q, "stated": stated[lv], "coverage": cov}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller housing data, fewer releases")
    ap.add_argument("--dry-run", action="store_true", help="print the Markdown, do not write BENCHMARKS.md")
    ap.add_argument("--replicates", type=int, default=20, help="bootstrap replicates (the product's default: 20)")
    ap.add_argument("--first", type=int, default=None, help="releases whose figure is checked (default 5, quick 2)")
    ap.add_argument("--fresh", type=int, default=None, help="releases giving the real errors (default 30, quick 10)")
    args = ap.parse_args(argv)
    first = args.first or (2 if args.quick else 5)
    fresh = args.fresh or (10 if args.quick else 30)
    t0 = time.perf_counter()
    dsets = [flights_dataset(), housing_dataset(100_000 if args.quick else 1_000_000), sparse_dataset()]
    rows, covs = [], []
    for ds in dsets:
        for method in METHODS:
            for eps in (0.1, 1.0):
                log(f"[{ds.key}] {method} eps={eps}")
                c = cell(ds, method, eps, args.replicates, first, fresh)
                for lv, v in c["levels"].items():
                    covs.extend(v["coverage"])
                    rows.append(
                        f"| {ds.key} | {method} | {eps:g} | {lv} | {v['true_q']:g} | "
                        f"{min(v['stated'])}-{max(v['stated'])} | {min(v['coverage']):.3f} | "
                        f"{np.mean(v['coverage']):.3f} | {c['time_ratio']:.1f} |")
    covs = np.array(covs)
    md = [
        "## Coco accuracy statements: coverage of the empirical figure (issue 16)\n",
        f"`PYTHONPATH=. .venv/bin/python -m benchmarks.coco_accuracy{' --quick' if args.quick else ''}`; "
        f"{machine()}; whole run {time.perf_counter() - t0:.0f} s.\n",
        f"Each cell: {first} independent releases state their per-level figure (the 95% quantile of the cell "
        f"errors of a parametric bootstrap from the release, {args.replicates} replicates: "
        "`dpcore.mechanisms.coco.bootstrap`); "
        f"{fresh} further releases of the true data give the real errors of the shown cells (non-zero in the "
        "truth or the release). **true 95% q** = the real errors' 95% quantile; **stated** = range of the "
        "figures stated by the releases; **coverage** = share of real errors within a stated figure (min and "
        "mean over the releases; target 0.95); **time ratio** = the bootstrap's time / one publication's "
        "(same run). Every method spends eps on each level it measures (bottom-up measures the leaves only).\n",
        "| data | method | eps per level | level | true 95% q | stated | coverage min | coverage mean | time ratio |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Over all {covs.size} (release, level) figures: coverage mean {covs.mean():.3f}, median "
        f"{np.median(covs):.3f}, {np.mean(covs >= 0.9):.0%} at or above 0.90, {np.mean(covs >= 0.95):.0%} at or "
        f"above 0.95, lowest {covs.min():.3f}. The figure is labelled empirical in the product (manifest kind "
        "`empirical`, report text 'an estimate, not a guarantee') for this reason.",
    ]
    text = "\n".join(md) + "\n"
    if args.dry_run:
        print(text)
    else:
        record("coco_accuracy", text)
        log("recorded section 'coco_accuracy' in BENCHMARKS.md")


if __name__ == "__main__":
    main()
